#!/usr/bin/env bash
# train under Debian's own torchrun (through tools/launch/torchrun.py, which adds the two Debian
# workarounds and nothing else), in torchrun's default mode, where its agent serves the store on
# MASTER_PORT and says so with TORCHELASTIC_USE_AGENT_STORE=True, and with --standalone: the ranks
# use the agent's store (c10d, through LibTorch's client) where the agent says so, and end with the
# same parameters, bit for bit, as under the project's launcher. Then --max_restarts=1 with a rank SIGKILLed mid-run: torchrun
# restarts the group (TORCHELASTIC_RESTART_COUNT=1), which resumes from the last checkpoint and ends
# exactly where an uninterrupted run ends.
set -uo pipefail

train=$1
launch=$2
torchrun_py=$3
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test torchrun

python=/usr/bin/python3
"$python" -c 'import torch.distributed.run' 2>/dev/null ||
  skip "Debian's python3-torch (torchrun) is not installed (tools/setup.sh installs it)"
torchrun=("$python" "$torchrun_py")
export OMP_NUM_THREADS=1

# 64 steps: long enough (about a second) that the kill in part 3 lands between the first checkpoint
# and the end of training, which 8 steps (0.2 s) did not always leave room for.
small=(--train_limit=4096 --batch_size=32 --max_steps=64 --skip_validation --progress=none
       --timeout=60)

# The reference: the project's launcher.
port=$(free_port)
timeout 300 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" "${small[@]}" \
  --checkpoint_dir="$tmp/ref_ck" --checkpoint_every_steps=8 \
  --save_state_dict="$tmp/ref.safetensors" >"$tmp/ref.out" 2>&1 ||
  fail "reference run: $(tail -5 "$tmp/ref.out")"

# 1. torchrun's default mode and 2. --standalone.
for mode in default standalone; do
  args=(--nproc_per_node=2)
  if [[ $mode == default ]]; then
    args+=(--master_port="$(free_port)")
  else
    args+=(--standalone)
  fi
  if ! timeout 300 "${torchrun[@]}" "${args[@]}" --no_python "$train" "${small[@]}" \
      --checkpoint_dir="$tmp/${mode}_ck" --checkpoint_every_steps=2 \
      --save_state_dict="$tmp/$mode.safetensors" --metrics_json="$tmp/$mode.json" \
      >"$tmp/$mode.out" 2>&1; then
    fail "$mode: torchrun failed: $(tail -8 "$tmp/$mode.out")"
    continue
  fi
  [[ $(json "$tmp/$mode.json" 'm["launch_source"]') == torchrun ]] ||
    fail "$mode: launch source is not torchrun"
  # The default (static) rendezvous always hands the workers its agent's store; --standalone's
  # c10d rendezvous does from PyTorch 2.x on (1.13 lets rank 0 serve one, on a port it picked).
  store=$(grep -o "; store .*" "$tmp/$mode.out" | head -1)
  if [[ $mode == default && $store != *"c10d tcp://"* ]]; then
    fail "$mode: the ranks did not meet through the agent's store: '$store'"
  fi
  echo "$mode: $store"
  cmp -s "$tmp/ref.safetensors" "$tmp/$mode.safetensors" ||
    fail "$mode: the parameters differ from the project's launcher's"
done

# 3. --max_restarts=1 and a rank SIGKILLed after the first checkpoint.
port=$(free_port)
"${torchrun[@]}" --nproc_per_node=2 --master_port="$port" --max_restarts=1 --no_python "$train" \
  "${small[@]}" --checkpoint_dir="$tmp/kill_ck" --checkpoint_every_steps=8 \
  --save_state_dict="$tmp/kill.safetensors" >"$tmp/kill.out" 2>&1 &
agent=$!
pids+=($agent)
has_checkpoint() { compgen -G "$tmp/kill_ck/checkpoint-*.dtc" >/dev/null; }
if wait_until 120 has_checkpoint; then
  victim=
  for pid in $(pgrep -P "$agent"); do
    # No pipe: under pipefail, grep -q leaving early can fail the pipeline (tr's SIGPIPE).
    grep -qxz RANK=1 "/proc/$pid/environ" 2>/dev/null && victim=$pid
  done
  if [[ -z $victim ]]; then
    fail "kill: no worker with RANK=1 among torchrun's children: $(pgrep -aP "$agent")"
  elif ! kill -KILL "$victim" 2>/dev/null; then
    fail "kill: rank 1 (pid $victim) had already exited: the run ended before the kill"
  fi
else
  fail "kill: no checkpoint was written: $(tail -5 "$tmp/kill.out")"
fi
wait "$agent"
rc=$?
pids=()
[[ $rc -eq 0 ]] || fail "kill: torchrun exited $rc after a restart: $(tail -8 "$tmp/kill.out")"
grep -q 'resumed from' "$tmp/kill.out" ||
  fail "kill: the restarted group did not resume: $(tail -8 "$tmp/kill.out")"
cmp -s "$tmp/ref.safetensors" "$tmp/kill.safetensors" ||
  fail "kill: the restarted run ends with other parameters than an uninterrupted one"
finish
