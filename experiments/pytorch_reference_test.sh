#!/usr/bin/env bash
# The PyTorch reference training (experiments/pytorch_reference.py) as users run it next to our
# C++ trainer: one process alone, two ranks under our launcher (with and without PyTorch's
# ZeroRedundancyOptimizer, each rank's optimizer state and peak memory reported), without gradient
# sync, with PyTorch's communication hooks under train's flags (fp16, post-local SGD, PowerSGD;
# fp16 and bf16 refused where its Gloo cannot sum float16 or bfloat16), and failing clearly on a
# bad flag. Its
# --probe answers what this torch can do, and the scaling sweep skips PyTorch's NCCL runs with that
# reason. Skips where Debian's python3-torch is not installed.
set -uo pipefail

launch=$1
script=$2
scaling=$3
py=/usr/bin/python3
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

"$py" -c 'import torch' >/dev/null 2>&1 || skip "$py cannot import torch (apt-get install python3-torch)"

# The cleanup's SIGTERM reaches `timeout`, which passes it on to what it runs (the launcher then
# stops its ranks).
start_test pytorch_reference

# run NAME TIMEOUT COMMAND...: runs in the background (so that cleanup can end it), waits, and
# leaves the exit status in $rc, stdout and stderr in $tmp/NAME.out and $tmp/NAME.err.
run() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  pids+=("$pid")
  wait "$pid"
  rc=$?
  pids=()
}

small=(--train_limit=512 --batch_size=64 --timeout=60s)

# 1. One process alone (world size 1, still in DDP): trains, validates, writes our metrics format.
run single 120 "$py" "$script" "${small[@]}" --val_limit=200 --progress=lines --print_freq=2 \
  --metrics_json="$tmp/single.json"
if [[ $rc -ne 0 ]]; then
  fail "single: exit $rc: $(tail -5 "$tmp/single.err")"
else
  [[ $(json "$tmp/single.json" 'm["format"]') == dtrain.metrics.v1 ]] || fail "single: format"
  [[ $(json "$tmp/single.json" 'm["config"]["world_size"]') == 1 ]] || fail "single: world size"
  [[ $(json "$tmp/single.json" 'm["epochs"][0]["samples"]') == 512 ]] || fail "single: samples"
  [[ $(json "$tmp/single.json" 'm["epochs"][0]["steps"]') == 8 ]] || fail "single: steps"
  [[ $(json "$tmp/single.json" 'int(m["epochs"][0]["val_top1"] > 20)') == 1 ]] \
    || fail "single: validation top-1 not above 20%: $(cat "$tmp/single.json")"
  [[ $(json "$tmp/single.json" 'sum(m["epochs"][0]["step_seconds_histogram"]["counts"])') == 8 ]] \
    || fail "single: step histogram"
  [[ $(json "$tmp/single.json" 'm["implementation"].startswith("pytorch ")') == True ]] \
    || fail "single: implementation"
  grep -q 'Epoch: \[0\]\[2/8\]' "$tmp/single.err" || fail "single: no progress lines"
fi

# 2. Two ranks under our launcher (torchrun's variables), stopped at --max_steps.
port=$(free_port)
run two 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$py" "$script" "${small[@]}" \
  --max_steps=3 --skip_validation --progress=none --metrics_json="$tmp/two.json"
if [[ $rc -ne 0 ]]; then
  fail "two ranks: exit $rc: $(tail -5 "$tmp/two.err")"
else
  [[ $(json "$tmp/two.json" 'm["global_step"]') == 3 ]] || fail "two ranks: global step"
  [[ $(json "$tmp/two.json" 'm["config"]["world_size"]') == 2 ]] || fail "two ranks: world size"
  [[ $(json "$tmp/two.json" 'm["epochs"][0]["val_top1"]') == None ]] || fail "two ranks: validated"
  [[ $(json "$tmp/two.json" 'int(len(set(m["optimizer_state_bytes"])) == 1 and
      len(m["optimizer_state_bytes"]) == 2 and m["optimizer_state_bytes"][0] > 0 and
      min(m["peak_rss_bytes"]) > 0 and m["config"]["zero"] == 0)') == 1 ]] \
    || fail "two ranks: memory metrics: $(cat "$tmp/two.json")"
fi

# 2b. The same with PyTorch's ZeroRedundancyOptimizer (--zero=1): each rank keeps the state of its
# own parameters only, together the unsharded state; PyTorch has no stage 2 outside FSDP.
port=$(free_port)
run zero 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$py" "$script" "${small[@]}" \
  --max_steps=3 --skip_validation --progress=none --zero=1 --metrics_json="$tmp/zero.json"
if [[ $rc -ne 0 ]]; then
  fail "zero: exit $rc: $(tail -5 "$tmp/zero.err")"
elif [[ -f $tmp/two.json ]]; then
  full=$(json "$tmp/two.json" 'm["optimizer_state_bytes"][0]')
  got=$(json "$tmp/zero.json" 'json.dumps([sum(m["optimizer_state_bytes"]),
      int(max(m["optimizer_state_bytes"]) < sum(m["optimizer_state_bytes"])), m["config"]["zero"],
      m["global_step"]])')
  [[ $got == "[$full, 1, 1, 3]" ]] || fail "zero: state per rank, config, steps: $got (full $full)"
fi
run zero2 60 "$py" "$script" --zero=2
[[ $rc -eq 2 ]] || fail "zero=2: exit $rc, want 2"
grep -q -- '--zero: 2 is not 0 or 1' "$tmp/zero2.err" \
  || fail "zero=2: message: $(cat "$tmp/zero2.err")"

# 3. Without gradient sync (the no-communication bound), with the sweep's knobs: --static_graph is
# not applied there (PyTorch 2.6's DDP fails on it under no_sync), and says so.
port=$(free_port)
run nosync 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$py" "$script" "${small[@]}" \
  --max_steps=2 --skip_validation --progress=none --sync_gradients=false --static_graph=true \
  --metrics_json="$tmp/nosync.json"
if [[ $rc -ne 0 ]]; then
  fail "sync_gradients=false: exit $rc: $(tail -5 "$tmp/nosync.err")"
else
  [[ $(json "$tmp/nosync.json" 'm["config"]["sync_gradients"]') == False ]] \
    || fail "sync_gradients=false: config"
  grep -q 'static_graph not applied without gradient sync' "$tmp/nosync.err" \
    || fail "sync_gradients=false: no word on --static_graph: $(cat "$tmp/nosync.err")"
fi

# 4. Communication hooks and DDP's knobs, PyTorch's own, under train's flags and recorded in the
# config as train records them; gradient_as_bucket_view defaults to true, as train's.
if [[ -f $tmp/single.json ]]; then
  got=$(json "$tmp/single.json" 'json.dumps([m["config"][k] for k in ("comm_hook", "fp16_allreduce",
      "gradient_as_bucket_view", "static_graph")])')
  [[ $got == '["allreduce", false, true, false]' ]] || fail "single: default hook and knobs: $got"
fi
# fp16 (and bf16 below) on Gloo: refused (exit 2, saying why) where this torch's Gloo cannot sum
# the wire dtype, as --probe says (Debian's 2.14 sums neither); trained where it can. DDP's knobs
# ride on whichever of the fp16 and local SGD runs trains.
probe=$("$py" "$script" --probe 2>/dev/null | tail -1)
probe_says() { "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$probe" "$1"; }
fp16_ok=$(probe_says gloo_float16)
bf16_ok=$(probe_says gloo_bfloat16)
knobs=(--static_graph --gradient_as_bucket_view=false)
port=$(free_port)
run fp16 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$py" "$script" "${small[@]}" \
  --max_steps=3 --skip_validation --progress=none --fp16_allreduce "${knobs[@]}" \
  --metrics_json="$tmp/fp16.json"
if [[ $fp16_ok == False ]]; then
  [[ $rc -ne 0 ]] || fail "fp16 on a Gloo without float16: exit 0"
  grep -q -- '--comm_hook=fp16: the Gloo of this PyTorch .* cannot allreduce float16' \
    "$tmp/fp16.err" || fail "fp16: message: $(cat "$tmp/fp16.err")"
elif [[ $rc -ne 0 ]]; then
  fail "fp16 (probe: $fp16_ok): exit $rc: $(tail -5 "$tmp/fp16.err")"
else
  got=$(json "$tmp/fp16.json" 'json.dumps([m["config"][k] for k in ("comm_hook", "fp16_allreduce",
      "gradient_as_bucket_view", "static_graph")] + [m["global_step"]])')
  [[ $got == '["fp16", true, false, true, 3]' ]] || fail "fp16: config and steps: $got"
  grep -q 'float16 on the wire' "$tmp/fp16.err" || fail "fp16: no hook in the summary line"
  knobs=()
fi
# Post-local SGD: averaged gradients for 2 steps, then parameters every 2 steps.
port=$(free_port)
run local_sgd 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$py" "$script" \
  "${small[@]}" --max_steps=4 --skip_validation --progress=none --comm_hook=local_sgd \
  --local_sgd_start_step=2 --local_sgd_period=2 "${knobs[@]}" --metrics_json="$tmp/local_sgd.json"
if [[ $rc -ne 0 ]]; then
  fail "local_sgd: exit $rc: $(tail -5 "$tmp/local_sgd.err")"
else
  want='["local_sgd", false, true, false]'
  [[ ${#knobs[@]} -eq 0 ]] || want='["local_sgd", false, false, true]'
  got=$(json "$tmp/local_sgd.json" 'json.dumps([m["config"][k] for k in ("comm_hook",
      "fp16_allreduce", "gradient_as_bucket_view", "static_graph")])')
  [[ $got == "$want" ]] || fail "local_sgd: config: $got, want $want"
  [[ $(json "$tmp/local_sgd.json" 'm["global_step"]') == 4 ]] || fail "local_sgd: global step"
  grep -q 'post-local SGD from step 2, parameters averaged every 2 steps' "$tmp/local_sgd.err" \
    || fail "local_sgd: no hook in the summary line: $(cat "$tmp/local_sgd.err")"
fi
# PowerSGD past the steps where PyTorch 1.13's hook, left to itself, sends two buckets' allreduces
# to the ranks in different orders over Gloo (it aborted in gloo's tcp pair at step 7 or 8).
port=$(free_port)
run powersgd 180 "$launch" --nproc_per_node=2 --master_port="$port" -- "$py" "$script" \
  --train_limit=1536 --batch_size=64 --timeout=60s --max_steps=12 --skip_validation \
  --progress=none --comm_hook=powersgd --powersgd_rank=2 --powersgd_start_step=2 \
  --metrics_json="$tmp/powersgd.json"
if [[ $rc -ne 0 ]]; then
  fail "powersgd: exit $rc: $(tail -5 "$tmp/powersgd.err")"
else
  [[ $(json "$tmp/powersgd.json" 'm["global_step"]') == 12 ]] || fail "powersgd: global step"
  grep -q 'PowerSGD rank 2 from step 2' "$tmp/powersgd.err" \
    || fail "powersgd: no hook in the summary"
fi
# Bad hook values exit 2 naming the flag, as train's.
run bad_hook 60 "$py" "$script" --comm_hook=topk
[[ $rc -eq 2 ]] || fail "bad hook: exit $rc, want 2"
grep -qF -- "--comm_hook: 'topk' is not one of allreduce, fp16, bf16, powersgd, local_sgd" \
  "$tmp/bad_hook.err" || fail "bad hook: message: $(cat "$tmp/bad_hook.err")"
run bad_period 60 "$py" "$script" --comm_hook=local_sgd --local_sgd_period=0
[[ $rc -eq 2 ]] || fail "bad period: exit $rc, want 2"
grep -q -- '--local_sgd_period: must be 1 or more' "$tmp/bad_period.err" \
  || fail "bad period: message: $(cat "$tmp/bad_period.err")"
run hook_nosync 60 "$py" "$script" --comm_hook=fp16 --sync_gradients=false
[[ $rc -eq 2 ]] || fail "hook without sync: exit $rc, want 2"
grep -q -- '--comm_hook: a communication hook averages gradients' "$tmp/hook_nosync.err" \
  || fail "hook without sync: message: $(cat "$tmp/hook_nosync.err")"
run bf16 120 "$py" "$script" "${small[@]}" --max_steps=2 --skip_validation --progress=none \
  --comm_hook=bf16
if [[ $bf16_ok == False ]]; then
  [[ $rc -eq 2 ]] || fail "bf16 on a Gloo without bfloat16: exit $rc, want 2"
  grep -q -- '--comm_hook=bf16: the Gloo of this PyTorch .* cannot allreduce bfloat16' \
    "$tmp/bf16.err" || fail "bf16: message: $(cat "$tmp/bf16.err")"
else
  [[ $rc -eq 0 ]] || fail "bf16 (probe: $bf16_ok): exit $rc: $(tail -5 "$tmp/bf16.err")"
fi

# 5. A bad flag exits 2 naming it.
run bad 60 "$py" "$script" --batch_size=0
[[ $rc -eq 2 ]] || fail "bad flag: exit $rc, want 2"
grep -q -- '--batch_size' "$tmp/bad.err" || fail "bad flag: message: $(cat "$tmp/bad.err")"
run unknown 60 "$py" "$script" --no_such_flag=1
[[ $rc -eq 2 ]] || fail "unknown flag: exit $rc, want 2"
grep -q -- '--no_such_flag' "$tmp/unknown.err" || fail "unknown flag: message: $(cat "$tmp/unknown.err")"

# 6. --probe: one JSON line saying what this torch can do, as torch itself says it.
run probe 60 "$py" "$script" --probe
if [[ $rc -ne 0 ]]; then
  fail "probe: exit $rc: $(tail -5 "$tmp/probe.err")"
else
  tail -1 "$tmp/probe.out" >"$tmp/probe.json"
  want=$("$py" -c 'import json, torch, torch.distributed as d
print(json.dumps([str(torch.__version__), torch.version.cuda, torch.cuda.device_count(),
                  d.is_available() and d.is_nccl_available()]))' 2>/dev/null)
  got=$(json "$tmp/probe.json" 'json.dumps([m["torch"], m["cuda"], m["cuda_devices"], m["nccl"]])')
  [[ $got == "$want" ]] || fail "probe: got $got, torch says $want"
fi

# 7. The sweep asks the probe before planning PyTorch's NCCL runs: on a torch without CUDA (Debian
# 12's) they are skipped with that reason, and no NCCL training is started.
if [[ $rc -eq 0 && $(json "$tmp/probe.json" 'm["cuda"] is None') == True ]]; then
  version=$(json "$tmp/probe.json" 'm["torch"]')
  run sweep 120 "$scaling" --backends=nccl --models=convnet --reference=pytorch --no_plots \
    --output_dir="$tmp/sweep"
  if [[ $rc -ne 0 ]]; then
    fail "sweep: exit $rc: $(tail -5 "$tmp/sweep.err")"
  else
    grep -qF "skipped pytorch nccl: Python torch $version has no CUDA" "$tmp/sweep.out" \
      || fail "sweep: PyTorch's NCCL runs not skipped with the reason: $(cat "$tmp/sweep.out")"
    [[ $(json "$tmp/sweep/results.json" 'len(m["runs"])') == 0 ]] || fail "sweep: ran NCCL trainings"
  fi
fi

finish
