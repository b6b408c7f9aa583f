#!/usr/bin/env bash
# The AWS tutorial's NCCL training with real processes: `train` spawning two ranks with
# --dist_backend=nccl --device=cuda, and the tutorial's explicit form (tcp://, --rank,
# --local_rank, --local_world_size), each rank on its own GPU. The checks that need no GPU run
# everywhere: the explicit form without a local world size, and --device=cuda where no CUDA device
# is usable (for a rank, and for a process joining an elastic job), fail naming what to pass. The GPU part skips, saying why, below two CUDA devices.
set -uo pipefail

train=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test train_nccl

# One epoch of 6 steps (384 examples, 2 ranks of batch 32), then validation.
nccl=(--dist_backend=nccl --device=cuda --dataset=synthetic --synthetic_train_size=384
      --synthetic_val_size=128 --batch_size=32 --epochs=1 --timeout=60s --progress=none --seed=7)

# 1. The tutorial's explicit form with --local_rank alone: no launcher says how many ranks share the
#    node, so the rank refuses to guess and names the flag.
port=$(free_port)
env -u LOCAL_WORLD_SIZE timeout 60 "$train" "${nccl[@]}" --dist_url="tcp://127.0.0.1:$port" \
  --world_size=2 --rank=1 --local_rank=1 >"$tmp/nolocal.out" 2>"$tmp/nolocal.err"
rc=$?
[[ $rc -eq 1 ]] || fail "no local world size: exit $rc, want 1: $(cat "$tmp/nolocal.err")"
grep -q -- 'pass --local_world_size' "$tmp/nolocal.err" \
  || fail "no local world size: message does not name --local_world_size: $(cat "$tmp/nolocal.err")"

devices=$("$train" --print_cuda_devices 2>"$tmp/devices.err")
[[ $devices =~ ^[0-9]+$ ]] || fail "--print_cuda_devices printed '$devices': $(cat "$tmp/devices.err")"

# 2. Without a usable CUDA device, --device=cuda fails before the backend, saying why.
if [[ $devices == 0 ]]; then
  timeout 60 "$train" "${nccl[@]}" >"$tmp/nogpu.out" 2>"$tmp/nogpu.err"
  rc=$?
  [[ $rc -eq 1 ]] || fail "no GPU: exit $rc, want 1: $(cat "$tmp/nogpu.err")"
  grep -q 'no CUDA device is usable' "$tmp/nogpu.err" \
    || fail "no GPU: message: $(cat "$tmp/nogpu.err")"
fi
# 2b. A process joining an elastic job chooses its device as a rank does, before it reaches the job
#     (nothing listens on the port): without a usable CUDA device --device=cuda fails saying why.
port=$(free_port)
if [[ $devices == 0 ]]; then
  timeout 60 "$train" --join --elastic --dist_url="tcp://127.0.0.1:$port" "${nccl[@]}" \
    >"$tmp/join_nogpu.out" 2>"$tmp/join_nogpu.err"
  rc=$?
  [[ $rc -eq 1 ]] || fail "join, no GPU: exit $rc, want 1: $(cat "$tmp/join_nogpu.err")"
  grep -q -- '--join: --device=cuda: no CUDA device is usable' "$tmp/join_nogpu.err" \
    || fail "join, no GPU: message: $(cat "$tmp/join_nogpu.err")"
fi
if [[ $failures -ne 0 ]]; then finish; fi
[[ ${devices:-0} -ge 2 ]] || skip "train --print_cuda_devices prints ${devices:-nothing}: NCCL training needs 2 CUDA devices (and a CUDA-enabled LibTorch)"

# 3. Spawned ranks, one GPU each.
port=$(free_port)
timeout 300 "$train" --nproc_per_node=2 --master_port="$port" "${nccl[@]}" \
  --metrics_json="$tmp/spawn.json" >"$tmp/spawn.out" 2>"$tmp/spawn.err"
rc=$?
[[ $rc -eq 0 ]] || fail "spawn: exit $rc: $(tail -8 "$tmp/spawn.err")"
if [[ $rc -eq 0 ]]; then
  [[ $(json "$tmp/spawn.json" 'm["config"]["world_size"]') == 2 ]] || fail "spawn: world size"
  [[ $(json "$tmp/spawn.json" 'm["backend"]') == nccl ]] || fail "spawn: backend"
  [[ $(json "$tmp/spawn.json" 'm["device"]') == cuda:0 ]] || fail "spawn: rank 0's device"
  [[ $(json "$tmp/spawn.json" 'm["global_step"]') == 6 ]] || fail "spawn: steps"
  [[ $(json "$tmp/spawn.json" 'm["ranks_identical"]') == True ]] || fail "spawn: ranks not identical"
  [[ $(json "$tmp/spawn.json" 'int(all(__import__("math").isfinite(e["train_loss"]) and __import__("math").isfinite(e["val_loss"]) for e in m["epochs"]))') == 1 ]] \
    || fail "spawn: a loss is not finite: $(cat "$tmp/spawn.json")"
fi

# 4. The tutorial's explicit form, each process started by hand with its local rank and the node's
#    local world size: the same training, so the same result (to rounding: cuDNN's backward may
#    sum in another order).
port=$(free_port)
for r in 0 1; do
  timeout 300 "$train" "${nccl[@]}" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r \
    --local_rank=$r --local_world_size=2 --metrics_json="$tmp/explicit$r.json" \
    >"$tmp/explicit$r.out" 2>"$tmp/explicit$r.err" &
  pids+=($!)
done
wait_all || fail "explicit: a rank failed: $(tail -n 5 "$tmp/explicit0.err" "$tmp/explicit1.err")"
if [[ -f $tmp/explicit0.json && -f $tmp/spawn.json ]]; then
  want=$(json "$tmp/spawn.json" 'repr(m["epochs"][-1]["val_loss"])')
  got=$(json "$tmp/explicit0.json" 'repr(m["epochs"][-1]["val_loss"])')
  [[ $(python3 -c "import math; print(int(math.isclose($got, $want, rel_tol=1e-4)))") == 1 ]] \
    || fail "explicit: val_loss $got, spawned $want"
fi

finish
