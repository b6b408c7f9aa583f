#!/usr/bin/env bash
# The simulated cluster's documented commands in their argument forms, with the sweep's defaults
# (no --batch_sizes, --world_sizes from --ranks_per_host), made short only by flags appended after
# theirs (steps, examples, no plots):
#   README.md:          sim_cluster --hosts=2 --rates=1gbit,10gbit -- --reference=pytorch
#   docs/MULTI_NODE.md: sim_cluster --hosts=2 --rates=1gbit,10gbit --ranks_per_host=1,2 --
#                           --models=convnet,resnet18 --backends=gloo,gloo+shm --reference=pytorch
#                       sim_cluster --hosts=2 --rates=1gbit,10gbit -- --models=convnet
#                           --backends=gloo --comm_hooks=allreduce,fp16,local_sgd
#                           --local_sgd_start_step=10 --reference=pytorch
# each at one rate. Every host's sweep must succeed, with every run of both backends, every hook and
# PyTorch's in the combined CSV at the default batch (128 / world size per process). Needs root,
# iproute2, network and PID namespaces, and Debian's python3-torch; skips with the reason elsewhere.
set -uo pipefail

sim=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test sim_cluster_commands

[[ $(id -u) -eq 0 ]] || skip "needs root to create network and PID namespaces"
for tool in ip tc unshare; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "Debian's python3-torch is not installed"
probe="dtrain_simcmd_$$"
extra_cleanup() { ip netns del "$probe" 2>/dev/null; }
ip netns add "$probe" 2>"$tmp/probe.err" || skip "cannot create a network namespace: $(cat "$tmp/probe.err")"
tc -n "$probe" qdisc add dev lo root tbf rate 1gbit burst 128kb latency 10ms 2>"$tmp/probe.err" \
  || skip "tc cannot add a tbf qdisc: $(cat "$tmp/probe.err")"
ip netns exec "$probe" unshare --pid --fork --kill-child --mount-proc true 2>"$tmp/probe.err" \
  || skip "cannot create a PID namespace: $(cat "$tmp/probe.err")"
ip netns del "$probe"

# Appended to each documented command's scaling flags: a short run, nothing else changed.
short=(--max_steps=2 --train_limit=256 --no_plots --run_timeout=120s)

# check NAME WANT: the command's combined.csv holds exactly the rows WANT lists (one per line:
# "implementation backend model world_size batch_size", and the hook where it is not allreduce),
# none failed.
check() {
  local name=$1 want=$2 got
  got=$(python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bad = [r for r in rows if r["failed"] != "0" or r["runs"] != "1"]
for r in bad:
    print("FAILED", r["implementation"], r["backend"], r["model"], r["world_size"])
hook = lambda r: r.get("comm_hook") or "allreduce"
for r in sorted(rows, key=lambda r: (r["model"], int(r["world_size"]), r["implementation"],
                                     r["backend"], hook(r) != "allreduce", hook(r))):
    print(r["implementation"], r["backend"], r["model"], r["world_size"], r["batch_size"],
          *([hook(r)] if hook(r) != "allreduce" else []))
' "$tmp/$name/combined.csv" 2>&1)
  [[ $got == "$want" ]] || fail "$name: combined.csv rows:" $'\n'"$got"$'\n'"want:"$'\n'"$want"
}

# run NAME SIM_ARGS... -- SCALING_ARGS...: the command with the short flags appended.
run() {
  local name=$1 rc
  shift
  timeout 600 "$sim" --output_dir="$tmp/$name" "$@" "${short[@]}" >"$tmp/$name.out" 2>&1 &
  pids+=($!)
  wait "$!"
  rc=$?
  pids=()
  [[ $rc -eq 0 ]] || fail "$name: exit $rc: $(tail -25 "$tmp/$name.out")"
  grep -q 'batch_sizes' "$tmp/$name.out" && fail "$name: a complaint about --batch_sizes: $(grep batch_sizes "$tmp/$name.out")"
  echo "$name: exit $rc"
}

# README.md's command: both models, both backends, PyTorch's gloo; 2 hosts x 1 rank.
run readme --hosts=2 --rates=1gbit -- --reference=pytorch
check readme "dtrain gloo convnet 2 64
dtrain gloo+shm convnet 2 64
pytorch gloo convnet 2 64
dtrain gloo resnet18 2 64
dtrain gloo+shm resnet18 2 64
pytorch gloo resnet18 2 64"
# The table node 0 printed names the machine and says how often each configuration ran.
grep -q '^machine: [0-9]* core' "$tmp/readme/1gbit/node0.out" || fail "readme: no machine line in node 0's table"
grep -q '^runs: single run per configuration' "$tmp/readme/1gbit/node0.out" \
  || fail "readme: node 0's table does not say single run"
[[ -f $tmp/readme/1gbit/table.txt ]] || fail "readme: node 0 saved no table.txt"

# docs/MULTI_NODE.md's command (one model: the form is what matters): world sizes 2 and 4.
run multi_node --hosts=2 --rates=1gbit --ranks_per_host=1,2 -- --models=convnet \
  --backends=gloo,gloo+shm --reference=pytorch
check multi_node "dtrain gloo convnet 2 64
dtrain gloo+shm convnet 2 64
pytorch gloo convnet 2 64
dtrain gloo convnet 4 32
dtrain gloo+shm convnet 4 32
pytorch gloo convnet 4 32"

# docs/MULTI_NODE.md's hooks command: every hook of ours and PyTorch's, over one bound each; the
# combined table shows the hook and what communication adds to a step.
run hooks --hosts=2 --rates=1gbit -- --models=convnet --backends=gloo \
  --comm_hooks=allreduce,fp16,local_sgd --local_sgd_start_step=10 --reference=pytorch
# PyTorch's fp16 run where its Gloo sums float16 (Debian's 2.14 does not: the sweep skips it, saying
# why).
pytorch_fp16="
pytorch gloo convnet 2 64 fp16"
fp16=$(/usr/bin/python3 "$(dirname "$sim")/pytorch_reference.py" --probe 2>/dev/null | tail -1 |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["gloo_float16"])')
if [[ $fp16 == False ]]; then
  pytorch_fp16=
  grep -q "skipped pytorch fp16: Python torch .*'s Gloo cannot allreduce float16" \
    "$tmp/hooks/1gbit/node0.out" || fail "hooks: PyTorch's fp16 run not skipped with the reason"
fi
check hooks "dtrain gloo convnet 2 64
dtrain gloo convnet 2 64 fp16
dtrain gloo convnet 2 64 local_sgd
pytorch gloo convnet 2 64$pytorch_fp16
pytorch gloo convnet 2 64 local_sgd"
grep -q '^link .* hook .* comm ms/step ' "$tmp/hooks.out" \
  || fail "hooks: the combined table has no hook or comm ms/step column:" \
       "$(tail -12 "$tmp/hooks.out")"
grep -q 'every training, ours and PyTorch.s, with: --local_sgd_start_step=10' \
  "$tmp/hooks/1gbit/node0.out" || fail "hooks: node 0's table does not list the knob"

finish
