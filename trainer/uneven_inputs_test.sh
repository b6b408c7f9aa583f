#!/usr/bin/env bash
# --even_batches=false with real processes: 3 ranks over 61 synthetic examples get 21, 20 and 20 (6, 5
# and 5 batches of 4), not 21 each. The run ends, counts every example once, and the ranks end
# identical; stopped inside an epoch and resumed, it ends exactly where the uninterrupted run does.
# ResNet-18 with --sync_batchnorm over 25 examples (3, 2 and 2 batches of 4) and
# --divide_by_initial_world_size=false ends where 1 process with batch 12 ends (the union of the
# ranks' batches at each step, the last step rank 0's one example alone): the shadowed statistics and
# the divisor, checked from outside; with the default divisor it does not. --help names what PyTorch
# users look for; --accumulate_steps is refused.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test uneven_inputs

common=(--dataset=synthetic --synthetic_train_size=61 --synthetic_val_size=16 --batch_size=4
  --progress=none --timeout=60s --seed=5)

run() {  # run NAME NPROC ARGS...
  local name=$1 nproc=$2; shift 2
  local port; port=$(free_port)
  timeout 300 "$launch" --nproc_per_node="$nproc" --master_port="$port" -- "$train" "${common[@]}" \
    --metrics_json="$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || fail "$name: exit $rc: $(tail -5 "$tmp/$name.err")"
  return $rc
}

# 1. The ConvNet, 2 epochs: rank 0's 6th step of each epoch is shadowed by ranks 1 and 2.
if run uneven 3 --epochs=2 --even_batches=false; then
  [[ $(json "$tmp/uneven.json" 'm["config"]["even_batches"]') == False ]] || fail "uneven: config"
  for e in 0 1; do
    [[ $(json "$tmp/uneven.json" "m['epochs'][$e]['samples']") == 61 ]] \
      || fail "uneven: epoch $e samples $(json "$tmp/uneven.json" "m['epochs'][$e]['samples']"), want 61"
    [[ $(json "$tmp/uneven.json" "m['epochs'][$e]['steps']") == 6 ]] || fail "uneven: epoch $e steps"
  done
  [[ $(json "$tmp/uneven.json" 'm["global_step"]') == 12 ]] || fail "uneven: global step"
  [[ $(json "$tmp/uneven.json" 'm["ranks_identical"]') == True ]] || fail "uneven: ranks differ"
fi
# Padded, as before: 63 samples.
if run even 3 --epochs=1; then
  [[ $(json "$tmp/even.json" 'm["epochs"][0]["samples"]') == 63 ]] || fail "even: samples"
fi

# 2. Stopped at step 8 (inside the second epoch) and resumed: the uninterrupted run's end.
run part 3 --epochs=2 --even_batches=false --checkpoint_dir="$tmp/ck" --max_steps=8
run rest 3 --epochs=2 --even_batches=false --checkpoint_dir="$tmp/ck" --resume
grep -q 'resumed from' "$tmp/rest.err" || fail "resume: no 'resumed from' line: $(cat "$tmp/rest.err")"
if [[ -f $tmp/rest.json && -f $tmp/uneven.json ]]; then
  want=$(json "$tmp/uneven.json" 'repr(m["epochs"][-1]["val_loss"])')
  got=$(json "$tmp/rest.json" 'repr(m["epochs"][-1]["val_loss"])')
  [[ -n $want && $want == "$got" ]] || fail "resume: final validation loss $got, uninterrupted $want"
fi

# 3. ResNet-18 with SyncBatchNorm: 3 uneven ranks of batch 4, gradients over the ranks that still
#    have a batch, against 1 process of batch 12. Three steps only, as in sync_batchnorm_test.sh: the
#    runs round differently, and more steps of this small model amplify that.
resnet=(--model=resnet18 --small_input_stem --synthetic_shape=3,16,16 --synthetic_train_size=25
  --epochs=1 --optimizer=sgd --lr=0.05 --sync_batchnorm)
run sbn 3 "${resnet[@]}" --even_batches=false --divide_by_initial_world_size=false
run sbn_initial 3 "${resnet[@]}" --even_batches=false
run one 1 "${resnet[@]}" --batch_size=12
diff() {  # diff A B: the largest relative difference of the two runs' losses
  python3 - "$tmp/$1.json" "$tmp/$2.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["epochs"][0] for p in sys.argv[1:])
print(max(abs(a[k] - b[k]) / abs(b[k]) for k in ("train_loss", "val_loss")))
PY
}
if [[ -f $tmp/sbn.json && -f $tmp/sbn_initial.json && -f $tmp/one.json ]]; then
  [[ $(json "$tmp/sbn.json" 'm["ranks_identical"]') == True ]] || fail "sbn: ranks differ"
  [[ $(json "$tmp/sbn.json" 'm["epochs"][0]["samples"]') == 25 ]] || fail "sbn: samples"
  [[ $(json "$tmp/sbn.json" 'm["global_step"]') == 3 ]] || fail "sbn: steps"
  active=$(diff sbn one)
  initial=$(diff sbn_initial one)
  echo "relative loss difference to 1 process: $active dividing by the active ranks," \
    "$initial by the initial world size"
  python3 -c "import sys; sys.exit(0 if $active < 1e-4 else 1)" \
    || fail "3 uneven processes with --sync_batchnorm differ from 1 process by $active"
  python3 -c "import sys; sys.exit(0 if $initial > 100 * max($active, 1e-7) else 1)" \
    || fail "dividing by the initial world size differs from 1 process by only $initial"
fi

# 4. What PyTorch and Accelerate users look for is in --help; accumulation is refused.
"$train" --help >"$tmp/help.out" 2>&1
for want in even_batches torch.distributed.algorithms.Join divide_by_initial_world_size; do
  grep -q -- "$want" "$tmp/help.out" || fail "--help does not mention $want"
done
"$train" --even_batches=false --accumulate_steps=2 >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[[ $rc -eq 2 ]] || fail "--accumulate_steps=2: exit $rc, want 2"
grep -q -- '--even_batches' "$tmp/bad.err" || fail "--accumulate_steps=2: $(cat "$tmp/bad.err")"

finish
