#!/usr/bin/env bash
# Both ways of training one's own model, with 2 processes under the project's launcher on loopback:
# the example program (train_own_model.cc) trains its model to a falling loss, saves a checkpoint
# and a second run continues from it; the train binary with the registered model
# (train_with_own_model --model=mlp) trains with train's flags, writes its metrics, state_dict and
# checkpoints, and lists mlp among the known models when given an unknown one; model_summary with the
# registered model summarizes it layer by layer.
set -uo pipefail

own=$1
registered=$2
summary=$3
launch=$4
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test own_model

# "step N loss X" lines rank 0 printed, as "N X" per line.
losses() { grep -oE 'step [0-9]+ loss [0-9.]+' "$1" | awk '{print $2, $4}'; }
# Succeeds when loss $1 is below $3 times loss $2.
below() { python3 -c "import sys; sys.exit(0 if $1 < $3 * $2 else 1)"; }

# 1. The example: 200 steps of Fashion-MNIST on 2 ranks, the loss printed every 20 steps.
port=$(free_port)
timeout 300 "$launch" --nproc_per_node=2 --master_port="$port" -- "$own" --steps=200 \
  --checkpoint_dir="$tmp/ck" >"$tmp/own1.out" 2>"$tmp/own1.err"
rc=$?
[[ $rc -eq 0 ]] || fail "example: exit $rc: $(tail -5 "$tmp/own1.err")"
losses "$tmp/own1.out" >"$tmp/own1.losses"
[[ $(wc -l <"$tmp/own1.losses") -eq 10 ]] \
  || fail "example: want 10 loss lines (rank 0 only, every 20 steps), got: $(cat "$tmp/own1.out")"
read -r first_step first < <(head -1 "$tmp/own1.losses")
read -r last_step last < <(tail -1 "$tmp/own1.losses")
echo "example: loss $first at step $first_step, $last at step $last_step"
[[ ${first_step:-} == 20 && ${last_step:-} == 200 ]] || fail "example: steps $first_step..$last_step"
if [[ -n ${first:-} && -n ${last:-} ]]; then
  below "$last" "$first" 0.7 || fail "example: the loss did not fall: $(tr '\n' ' ' <"$tmp/own1.losses")"
fi
[[ -f $tmp/ck/checkpoint-000000200.dtc ]] || fail "example: no checkpoint at step 200: $(ls "$tmp/ck")"

# 2. A second run continues from that checkpoint (step 200, trained weights) to step 300.
port=$(free_port)
timeout 300 "$launch" --nproc_per_node=2 --master_port="$port" -- "$own" --steps=300 \
  --checkpoint_dir="$tmp/ck" >"$tmp/own2.out" 2>"$tmp/own2.err"
rc=$?
[[ $rc -eq 0 ]] || fail "example resumed: exit $rc: $(tail -5 "$tmp/own2.err")"
losses "$tmp/own2.out" >"$tmp/own2.losses"
read -r resumed_step resumed < <(head -1 "$tmp/own2.losses")
[[ ${resumed_step:-} == 220 && $(wc -l <"$tmp/own2.losses") -eq 5 ]] \
  || fail "example resumed: want steps 220..300, got: $(cat "$tmp/own2.out")"
if [[ -n ${resumed:-} && -n ${first:-} ]]; then
  below "$resumed" "$first" 0.7 || fail "example resumed: loss $resumed at step 220, not the trained model's"
fi
[[ -f $tmp/ck/checkpoint-000000300.dtc ]] || fail "example resumed: no checkpoint at step 300"

# 3. train with the registered model: 2 epochs on 2,048 examples through train's own flags.
small=(--train_limit=2048 --val_limit=500 --batch_size=64 --timeout=60s --progress=none)
port=$(free_port)
timeout 300 "$launch" --nproc_per_node=2 --master_port="$port" -- "$registered" --model=mlp \
  "${small[@]}" --epochs=2 --metrics_json="$tmp/mlp.json" --checkpoint_dir="$tmp/mlp_ck" \
  --save_state_dict="$tmp/mlp.safetensors" >"$tmp/mlp.out" 2>"$tmp/mlp.err"
rc=$?
if [[ $rc -ne 0 ]]; then
  fail "--model=mlp: exit $rc: $(tail -5 "$tmp/mlp.err")"
else
  [[ $(json "$tmp/mlp.json" 'm["config"]["model"]') == mlp ]] || fail "--model=mlp: model in metrics"
  [[ $(json "$tmp/mlp.json" 'm["config"]["world_size"]') == 2 ]] || fail "--model=mlp: world size"
  [[ $(json "$tmp/mlp.json" 'm["parameters"]') == 101770 ]] || fail "--model=mlp: parameters"
  [[ $(json "$tmp/mlp.json" 'len(m["epochs"])') == 2 ]] || fail "--model=mlp: epochs"
  [[ $(json "$tmp/mlp.json" 'int(m["epochs"][1]["train_loss"] < m["epochs"][0]["train_loss"])') == 1 ]] \
    || fail "--model=mlp: the training loss did not fall: $(cat "$tmp/mlp.json")"
  [[ $(json "$tmp/mlp.json" 'int(m["epochs"][-1]["val_top1"] > 50)') == 1 ]] \
    || fail "--model=mlp: validation top-1 not above 50%"
  ls "$tmp/mlp_ck"/checkpoint-*.dtc >/dev/null 2>&1 || fail "--model=mlp: no checkpoint"
  # The state_dict has the model's own names (safetensors: 8-byte header length, JSON header).
  names=$(python3 -c '
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    print(" ".join(sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")))
' "$tmp/mlp.safetensors")
  [[ $names == "fc1.bias fc1.weight fc2.bias fc2.weight" ]] || fail "--model=mlp: state_dict names: $names"
fi

# 4. ... and resumes from its checkpoint for a third epoch.
port=$(free_port)
timeout 300 "$launch" --nproc_per_node=2 --master_port="$port" -- "$registered" --model=mlp \
  "${small[@]}" --epochs=3 --checkpoint_dir="$tmp/mlp_ck" --resume \
  --metrics_json="$tmp/mlp_resumed.json" >"$tmp/mlp_resumed.out" 2>"$tmp/mlp_resumed.err"
rc=$?
[[ $rc -eq 0 ]] || fail "--model=mlp --resume: exit $rc: $(tail -5 "$tmp/mlp_resumed.err")"
grep -q 'resumed from' "$tmp/mlp_resumed.err" || fail "--model=mlp --resume: no 'resumed from' line"

# 5. An unknown model: exit 2 (bad flag) listing the known ones, the registered one among them.
"$registered" --model=unknown >"$tmp/unknown.out" 2>"$tmp/unknown.err"
rc=$?
[[ $rc -eq 2 ]] || fail "--model=unknown: exit $rc, want 2"
grep -q 'unknown model "unknown"; known models: convnet, mlp, resnet18 (.*alwayslink = True' \
  "$tmp/unknown.err" \
  || fail "--model=unknown: message: $(cat "$tmp/unknown.err")"

# 6. The summary tool with the registered model.
"$summary" --model=mlp >"$tmp/summary.out" 2>"$tmp/summary.err" || fail "model_summary: $(cat "$tmp/summary.err")"
[[ $(tail -1 "$tmp/summary.out") == "Total params: 101,770" ]] || fail "model_summary: $(cat "$tmp/summary.out")"
grep -qE '^ *fc1 \(Linear\) +\[1, 128\] +100,480$' "$tmp/summary.out" || fail "model_summary: no fc1 row: $(cat "$tmp/summary.out")"
"$summary" --list | grep -q '^mlp ' || fail "model_summary --list: no mlp"

finish
