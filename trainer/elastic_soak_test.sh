#!/usr/bin/env bash
# Elastic soak: many short `train --elastic` jobs of 2 to 4 processes (explicit ranks over tcp://
# on loopback), each with one random event at a random moment of its training: a rank SIGKILLed
# (rank 0, the first store's host, included), a rank SIGSTOPped and let go on once the others have
# finished without it, or a process joining (--join). Every job must end with the parameters, bit
# for bit, of its scripted reference: the same ranks stopped at the step the job went on from and
# the new number of ranks resumed from that step's checkpoint (an uninterrupted run where the
# event came too late to change the world). A stopped rank must exit 1 saying it was left out, a
# joiner that came too late must fail saying so; and nothing may be left behind: no process, no
# listening port, no temporary file, no shared-memory file.
#
# Bounded in count and time as soak_test.sh: at least SOAK_MIN_RUNS jobs (default 2), then more
# until SOAK_RUNS (default 100) or until SOAK_TIME_BUDGET_S (default 30) has passed; SOAK_SEED
# picks the sequence (printed, to replay a failure). The full 100, and under the sanitizers:
#   bazel test //trainer:elastic_soak_test --test_env=SOAK_TIME_BUDGET_S=0 --test_output=streamed
#   bazel test --config=asan //trainer:elastic_soak_test --test_env=SOAK_TRAIN_SIZE=1024 \
#     --test_env=SOAK_RUNS=20 --test_env=SOAK_TIME_BUDGET_S=0 --test_env=SOAK_TIMEOUT=10s ...
#   (--config=tsan the same)
set -uo pipefail

train=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test elastic_soak

runs_max=${SOAK_RUNS:-100}
runs_min=${SOAK_MIN_RUNS:-2}
budget=${SOAK_TIME_BUDGET_S:-30}
seed=${SOAK_SEED:-$(( $(date +%s) % 100000 ))}
echo "elastic soak: seed $seed (SOAK_SEED=$seed replays it), at least $runs_min jobs, at most" \
  "$runs_max, time budget ${budget}s (0: none)"
RANDOM=$seed
export OMP_NUM_THREADS=1
# Every process of the soak carries this mark, so that leftovers can be found among the machine's
# other processes (tests run side by side).
mark="dtrain-elastic-soak-$$-$seed"

# A short training: 8192 examples (SOAK_TRAIN_SIZE), 256 steps at 2 ranks and 128 at 4 (about 2 s
# here; a sanitizer build takes 20 times as long, and fewer examples keep its jobs short).
# --timeout=3s bounds how long a stopped rank holds the others (then 5 s of grace); a sanitizer
# build's ranks can take longer than that to start on a loaded machine (SOAK_TIMEOUT=10s).
small=(--dataset=synthetic --synthetic_train_size="${SOAK_TRAIN_SIZE:-8192}" --epochs=1 --batch_size=16
  --skip_validation --progress=none --timeout="${SOAK_TIMEOUT:-3s}")

# train_ranks DIR TAG N PORT FLAGS...: N ranks in the background, logs DIR/TAG<r>.out; sets $ranks.
train_ranks() {
  local dir=$1 tag=$2 n=$3 port=$4 r
  shift 4
  ranks=()
  for ((r = 0; r < n; r++)); do
    env DTRAIN_SOAK_MARK="$mark" TMPDIR="$dir/tmp" "$train" --dist_url="tcp://127.0.0.1:$port" \
      --world_size="$n" --rank="$r" "${small[@]}" --flight_recorder_dir="$dir" "$@" \
      >"$dir/$tag$r.out" 2>&1 &
    ranks+=($!)
    pids+=($!)
  done
}

# wait_ranks WHAT PID...: waits (at most 120 s each) for the processes; fails naming WHAT unless
# every one exits 0.
wait_ranks() {
  local what=$1 p rc ok=0
  shift
  for p in "$@"; do
    if ! wait_exit "$p" 120; then
      kill -KILL "$p" 2>/dev/null
      fail "$what: pid $p still running after 120 s"
      ok=1
    fi
    wait "$p"
    rc=$?
    [[ $rc -eq 0 ]] || { fail "$what: pid $p exited $rc"; ok=1; }
  done
  pids=()
  return $ok
}

# reference N [STEP N2]: sets $ref to the weights of N ranks stopped at STEP and N2 resumed from
# its checkpoint (N alone, uninterrupted, without STEP); cached.
declare -A made
reference() {
  local key="$1-${2:-}-${3:-}" dir
  dir=$tmp/ref-$key
  ref=
  if [[ -z ${made[$key]:-} ]]; then
    mkdir -p "$dir/tmp"
    if [[ -z ${2:-} ]]; then
      train_ranks "$dir" s "$1" "$(free_port)" --save_state_dict="$dir/final.pt"
      wait_ranks "reference $key" "${ranks[@]}" || return 1
    else
      train_ranks "$dir" s "$1" "$(free_port)" --max_steps="$2" --checkpoint_dir="$dir/ck"
      wait_ranks "reference $key, first part" "${ranks[@]}" || return 1
      train_ranks "$dir" t "$3" "$(free_port)" --checkpoint_dir="$dir/ck" --resume \
        --save_state_dict="$dir/final.pt"
      wait_ranks "reference $key, resumed part" "${ranks[@]}" || return 1
    fi
    made[$key]=1
  fi
  ref=$dir/final.pt
}

marked() {  # pids of the processes that carry the mark
  grep -lsz "^DTRAIN_SOAK_MARK=$mark\$" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}
none_marked() { [[ -z $(marked) ]]; }

# leftovers DIR PORT: what the job left behind, one line each.
leftovers() {
  local dir=$1 port=$2
  wait_until 5 none_marked || echo "processes: $(marked | tr '\n' ' ')"
  if ss -Hltn "sport = :$port" | grep -q .; then echo "port $port listens"; fi
  [[ -z $(ls -A "$dir/tmp") ]] || echo "TMPDIR: $(ls -A "$dir/tmp" | tr '\n' ' ')"
}

shm_before=$(ls -A /dev/shm | grep -i dtrain)

# How long an uninterrupted job of each size trains (from "Begin training" to its end), to place
# the events in its training; these runs are the uninterrupted references.
declare -A ms
for n in 2 3 4; do
  dir=$tmp/ref-$n--
  mkdir -p "$dir/tmp"
  train_ranks "$dir" s "$n" "$(free_port)" --save_state_dict="$dir/final.pt"
  wait_for_text "$dir/s0.out" "Begin training" || { fail "$n ranks never began training"; finish; }
  start=$(date +%s%N)
  wait_ranks "reference $n--" "${ranks[@]}" || finish
  made[$n--]=1
  ms[$n]=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "uninterrupted, $n ranks: ${ms[$n]} ms of training"
done

soak_start=$(date +%s)
declare -A count
runs=0 worst_ms=0
for ((i = 1; i <= runs_max; i++)); do
  if ((i > runs_min && budget > 0 && $(date +%s) - soak_start >= budget)); then break; fi
  n=$((2 + RANDOM % 3))
  pick=$((RANDOM % 100))
  event=KILL
  ((pick >= 40 && pick < 60)) && event=STOP
  ((pick >= 60)) && event=JOIN
  victim=$((RANDOM % n))
  # From the start of training to past its end; a joiner, which needs a second to start, in
  # the first half.
  delay_ms=$((RANDOM % (ms[$n] * 5 / 4 + 1)))
  [[ $event == JOIN ]] && delay_ms=$((RANDOM % (ms[$n] / 2 + 1)))
  dir=$tmp/job$i
  mkdir -p "$dir/tmp"
  port=$(free_port)
  start=$(date +%s%N)
  train_ranks "$dir" e "$n" "$port" --elastic --max_ranks=$((n + 1)) \
    --save_state_dict="$dir/final.pt"
  job=("${ranks[@]}")
  wait_for_text "$dir/e0.out" "Begin training" \
    || { fail "job $i: training never began: $(tail -3 "$dir/e0.out")"; break; }
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  what="$event after ${delay_ms} ms"
  others=("${job[@]}")
  case $event in
    KILL | STOP)
      what="$event rank $victim after ${delay_ms} ms"
      kill "-$event" "${job[$victim]}" 2>/dev/null || what="$what (it had ended)"
      others=("${job[@]:0:victim}" "${job[@]:victim+1}")
      ;;
    JOIN)
      env DTRAIN_SOAK_MARK="$mark" TMPDIR="$dir/tmp" "$train" --dist_url="tcp://127.0.0.1:$port" \
        --elastic --join "${small[@]}" --flight_recorder_dir="$dir" --save_state_dict="$dir/final.pt" \
        >"$dir/joiner.out" 2>&1 &
      joiner=$!
      pids+=($joiner)
      ;;
  esac
  wait_ranks "job $i ($n ranks, $what)" "${others[@]}"
  case $event in
    KILL) wait "${job[$victim]}" 2>/dev/null ;;
    STOP)
      # The others have finished: let it go on. Left out, it exits 1 and says so; stopped after
      # its last collective, it finishes as if nothing happened.
      kill -CONT "${job[$victim]}" 2>/dev/null
      wait_exit "${job[$victim]}" 60 || kill -KILL "${job[$victim]}" 2>/dev/null
      wait "${job[$victim]}"
      rc=$?
      if [[ $rc -ne 0 ]] && ! grep -q 'left out' "$dir/e$victim.out"; then
        fail "job $i ($what): the stopped rank exited $rc without saying it was left out:" \
          "$(tail -2 "$dir/e$victim.out")"
      fi
      ;;
    JOIN)
      wait_exit "$joiner" 60 || kill -KILL "$joiner" 2>/dev/null
      wait "$joiner"
      rc=$?
      if [[ $rc -ne 0 ]]; then
        # Too late: the job ended (or was at its end) before it could be admitted.
        grep -q 'joined generation' "$dir/joiner.out" \
          && fail "job $i ($what): the joiner joined, then exited $rc: $(tail -2 "$dir/joiner.out")"
        what="$what (too late: $(tail -1 "$dir/joiner.out" | cut -c1-100))"
      fi
      ;;
  esac
  pids=()
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  ((took > worst_ms)) && worst_ms=$took
  # Where the world changed: the new generation's rank 0 says so.
  changed=$(cat "$dir"/*.out | sed -n 's/.*this generation of \([0-9]*\) ranks* goes on from step \([0-9]*\).*/\1 \2/p')
  if [[ -z $changed ]]; then
    reference "$n"
    count[$event-unchanged]=$((${count[$event-unchanged]:-0} + 1))
    echo "job $i: $n ranks, $what: the world did not change, ${took} ms"
  else
    read -r n2 step <<<"$changed"
    # From step 0 (the event came before the first step was committed): N2 from the start.
    if ((step == 0)); then reference "$n2"; else reference "$n" "$step" "$n2"; fi
    count[$event]=$((${count[$event]:-0} + 1))
    echo "job $i: $n ranks, $what: $n2 ranks went on from step $step, ${took} ms"
  fi
  runs=$i
  if [[ -z $ref ]]; then
    fail "job $i ($what): no reference"
  elif ! cmp -s "$ref" "$dir/final.pt"; then
    fail "job $i ($what): the parameters differ from the reference's ($ref):" \
      "$(tail -3 "$dir/e0.out")"
  fi
  left=$(leftovers "$dir" "$port")
  [[ -z $left ]] || fail "job $i ($what) left behind: $left"
  if [[ $failures -ne 0 ]]; then
    # The job's logs and its reference's, for the one who looks into it.
    if [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} ]]; then
      cp -r "$dir" "${ref%/final.pt}" "$TEST_UNDECLARED_OUTPUTS_DIR/" 2>/dev/null
      echo "the logs are in $TEST_UNDECLARED_OUTPUTS_DIR"
    fi
    break
  fi
  rm -rf "$dir"
done

shm_after=$(ls -A /dev/shm | grep -i dtrain)
[[ "$shm_after" == "$shm_before" ]] || fail "shared-memory files left in /dev/shm: $shm_after"
echo "elastic soak: $runs jobs (killed ${count[KILL]:-0}, stopped ${count[STOP]:-0}," \
  "joined ${count[JOIN]:-0}; events that came too late to change the world:" \
  "${count[KILL-unchanged]:-0} kills, ${count[STOP-unchanged]:-0} stops," \
  "${count[JOIN-unchanged]:-0} joins), longest job ${worst_ms} ms," \
  "$(( $(date +%s) - soak_start )) s in all"
finish
