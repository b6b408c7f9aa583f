#!/usr/bin/env bash
# Soak: many short trainings of 2 to 4 processes under the launcher (--max_restarts=3), each with a
# random rank SIGKILLed or SIGSTOPped at a random moment (before training, during it, or as it
# ends), or left alone. Every run must end with exit 0 and the parameters, bit for bit, of an
# uninterrupted run of its size, and leave nothing behind: no process, no listening port, no
# temporary file (TMPDIR, checkpoint directory), no shared-memory file.
#
# Bounded in count and time: at least SOAK_MIN_RUNS runs (default 4), then more until SOAK_RUNS
# (default 100) or until SOAK_TIME_BUDGET_S (default 45) has passed, whichever comes first; so
# the time bound never fails a run that is merely slow. SOAK_SEED picks the sequence (printed, to
# replay a failure). The defaults keep `bazel test //...` short; CI runs a long soak as a step of its
# own (.ci/run: at least 20 runs in 240 s). The full 100:
#   bazel test //trainer:soak_test --test_env=SOAK_TIME_BUDGET_S=0 --test_output=streamed
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test soak

runs_max=${SOAK_RUNS:-100}
runs_min=${SOAK_MIN_RUNS:-4}
budget=${SOAK_TIME_BUDGET_S:-45}
seed=${SOAK_SEED:-$(( $(date +%s) % 100000 ))}
echo "soak: seed $seed (SOAK_SEED=$seed replays it), at least $runs_min runs, at most $runs_max," \
  "time budget ${budget}s (0: none)"
RANDOM=$seed
export OMP_NUM_THREADS=1
# Every process of the soak carries this mark, so that leftovers can be found among the machine's
# other processes (tests run side by side).
mark="dtrain-soak-$$-$seed"

# A short training: 24 steps at 2 ranks, 12 at 4, a checkpoint every 2 steps. --timeout=4 bounds
# how long a stopped rank holds the others; --failure_grace=1 how long the launcher waits after.
small=(--train_limit=768 --batch_size=16 --skip_validation --progress=none --timeout=4
       --checkpoint_every_steps=2)

# run_job DIR NPROC: starts the launcher in the background for one training into DIR; sets $job.
run_job() {
  local dir=$1 nproc=$2
  mkdir -p "$dir/tmp"
  env DTRAIN_SOAK_MARK="$mark" TMPDIR="$dir/tmp" "$launch" --nproc_per_node="$nproc" \
    --master_port="$(free_port)" --max_restarts=3 --failure_grace=1 -- \
    "$train" "${small[@]}" --checkpoint_dir="$dir/ck" --save_state_dict="$dir/final.safetensors" \
    --flight_recorder_dir="$dir" >"$dir/out" 2>&1 &
  job=$!
  pids+=($job)
}

# finish_job DIR: waits (at most 120 s) for the job started by run_job; sets $rc.
finish_job() {
  if ! wait_exit "$job" 120; then
    fail "$1: still running after 120 s: $(tail -5 "$1/out")"
    kill -TERM "$job"
    wait_exit "$job" 40 || kill -KILL "$job"
  fi
  wait "$job"
  rc=$?
  pids=()
}

marked() {  # pids of the processes that carry the mark
  grep -lsz "^DTRAIN_SOAK_MARK=$mark\$" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}
none_marked() { [[ -z $(marked) ]]; }

# leftovers DIR PORT: what the run left behind, one line each.
leftovers() {
  local dir=$1
  wait_until 5 none_marked || echo "processes: $(marked | tr '\n' ' ')"
  local port; port=$(grep -o 'master [0-9.]*:[0-9]*' "$dir/out" | head -1 | cut -d: -f2)
  if [[ -n $port ]] && ss -Hltn "sport = :$port" | grep -q .; then echo "port $port listens"; fi
  [[ -z $(ls -A "$dir/tmp") ]] || echo "TMPDIR: $(ls -A "$dir/tmp" | tr '\n' ' ')"
  local partial; partial=$(find "$dir/ck" -name '.*.tmp' 2>/dev/null)
  [[ -z $partial ]] || echo "partial files: $partial"
}

shm_before=$(ls -A /dev/shm | grep -i dtrain)

# The references: one uninterrupted run per size.
declare -A reference
for nproc in 2 3 4; do
  dir=$tmp/ref$nproc
  run_job "$dir" "$nproc"
  start=$(date +%s%N)
  finish_job "$dir"
  [[ $rc -eq 0 ]] || { fail "reference at $nproc processes: exit $rc: $(tail -5 "$dir/out")"; finish; }
  reference[$nproc]=$dir/final.safetensors
  ms[$nproc]=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "reference, $nproc processes: ${ms[$nproc]} ms"
done

soak_start=$(date +%s)
declare -A count
restarts=0 worst_ms=0 runs=0
for ((i = 1; i <= runs_max; i++)); do
  if ((i > runs_min && budget > 0 && $(date +%s) - soak_start >= budget)); then break; fi
  nproc=$((2 + RANDOM % 3))
  pick=$((RANDOM % 100))
  fault=none
  ((pick < 45)) && fault=KILL
  ((pick >= 45 && pick < 90)) && fault=STOP
  victim_rank=$((RANDOM % nproc))
  # From the start to a little past the uninterrupted run's end: start-up, training and exit.
  delay_ms=$((RANDOM % (ms[$nproc] * 5 / 4 + 1)))
  dir=$tmp/run$i
  start=$(date +%s%N)
  run_job "$dir" "$nproc"
  what="clean"
  if [[ $fault != none ]]; then
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    victim=
    for pid in $(pgrep -P "$job"); do
      grep -qxz "RANK=$victim_rank" "/proc/$pid/environ" 2>/dev/null && victim=$pid
    done
    if [[ -n $victim ]] && kill "-$fault" "$victim" 2>/dev/null; then
      what="$fault rank $victim_rank after ${delay_ms} ms"
    else
      what="clean ($fault came after rank $victim_rank ended)"
      fault=none
    fi
  fi
  finish_job "$dir"
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  n_restarts=$(grep -c 'restarting the group' "$dir/out")
  runs=$i
  restarts=$((restarts + n_restarts))
  grep -q 'stayed stopped' "$dir/out" && fault=STOP_AFTER_END
  count[$fault]=$((${count[$fault]:-0} + 1))
  ((took > worst_ms)) && worst_ms=$took
  echo "run $i: $nproc processes, $what: exit $rc, $n_restarts restart(s), ${took} ms"
  if [[ $rc -ne 0 ]]; then
    fail "run $i ($what): the launcher exited $rc: $(tail -5 "$dir/out")"
  elif ! cmp -s "${reference[$nproc]}" "$dir/final.safetensors"; then
    fail "run $i ($what): the parameters differ from an uninterrupted run's: $(tail -3 "$dir/out")"
  fi
  left=$(leftovers "$dir")
  [[ -z $left ]] || fail "run $i ($what) left behind: $left"
  [[ $failures -eq 0 ]] || break
  rm -rf "$dir"
done

shm_after=$(ls -A /dev/shm | grep -i dtrain)
[[ "$shm_after" == "$shm_before" ]] || fail "shared-memory files left in /dev/shm: $shm_after"
echo "soak: $runs runs (killed ${count[KILL]:-0}, stopped ${count[STOP]:-0}," \
  "stopped as training ended ${count[STOP_AFTER_END]:-0}, clean ${count[none]:-0})," \
  "$restarts restarts, longest run ${worst_ms} ms, $(( $(date +%s) - soak_start )) s in all"
finish
