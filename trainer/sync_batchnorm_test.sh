#!/usr/bin/env bash
# --sync_batchnorm with real processes: ResNet-18 (small stem, 16 px synthetic images) trained by 2
# processes under the launcher with batch 4 each ends where 1 process with batch 8 ends (the
# DistributedSampler gives the two ranks exactly the single process's batches), while the same 2
# processes without it do not; the metrics JSON records the flag and the layers it converted. The
# ConvNet with the flag trains with a message; the flag with --sync_gradients=false is refused.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test sync_batchnorm

common=(--model=resnet18 --small_input_stem --dataset=synthetic --synthetic_shape=3,16,16
  --synthetic_train_size=64 --synthetic_val_size=16 --max_steps=3 --optimizer=sgd --lr=0.05
  --progress=none --timeout=60s --seed=3)

run() {  # run NAME NPROC ARGS...
  local name=$1 nproc=$2; shift 2
  local port; port=$(free_port)
  timeout 300 "$launch" --nproc_per_node="$nproc" --master_port="$port" -- "$train" "${common[@]}" \
    --metrics_json="$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || fail "$name: exit $rc: $(tail -5 "$tmp/$name.err")"
  return $rc
}

if run sync 2 --batch_size=4 --sync_batchnorm; then
  [[ $(json "$tmp/sync.json" 'm["config"]["sync_batchnorm"]') == True ]] || fail "sync: config"
  [[ $(json "$tmp/sync.json" 'm["sync_batchnorm_layers"]') == 20 ]] \
    || fail "sync: layers: $(json "$tmp/sync.json" 'm["sync_batchnorm_layers"]')"
  [[ $(json "$tmp/sync.json" 'm["global_step"]') == 3 ]] || fail "sync: steps"
  [[ $(json "$tmp/sync.json" 'm["ranks_identical"]') == True ]] || fail "sync: ranks differ"
fi
run one 1 --batch_size=8 --sync_batchnorm
run local 2 --batch_size=4
[[ $(json "$tmp/one.json" 'm["sync_batchnorm_layers"]') == 0 ]] || fail "one: a single rank converted layers"

# Training and validation losses: equal to float tolerance with --sync_batchnorm, not without.
diff() {  # diff A B: the largest relative difference of the two runs' losses
  python3 - "$tmp/$1.json" "$tmp/$2.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["epochs"][0] for p in sys.argv[1:])
print(max(abs(a[k] - b[k]) / abs(b[k]) for k in ("train_loss", "val_loss")))
PY
}
if [[ -f $tmp/sync.json && -f $tmp/one.json && -f $tmp/local.json ]]; then
  synced=$(diff sync one)
  unsynced=$(diff local one)
  echo "relative loss difference to 1 process: $synced with --sync_batchnorm, $unsynced without"
  echo "mean step seconds, 2 processes: $(json "$tmp/sync.json" 'm["epochs"][0]["step_seconds_mean"]')" \
    "with --sync_batchnorm, $(json "$tmp/local.json" 'm["epochs"][0]["step_seconds_mean"]') without"
  python3 -c "import sys; sys.exit(0 if $synced < 1e-4 else 1)" \
    || fail "2 processes with --sync_batchnorm differ from 1 process by $synced"
  python3 -c "import sys; sys.exit(0 if $unsynced > 100 * max($synced, 1e-7) else 1)" \
    || fail "without --sync_batchnorm the runs differ by only $unsynced (with: $synced)"
fi

# The ConvNet has no batch norm: it trains, with a message.
port=$(free_port)
timeout 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" --dataset=synthetic \
  --synthetic_train_size=64 --synthetic_val_size=16 --batch_size=8 --max_steps=1 --skip_validation \
  --progress=lines --timeout=60s --sync_batchnorm >"$tmp/convnet.out" 2>"$tmp/convnet.err" \
  || fail "convnet: $(tail -5 "$tmp/convnet.err")"
grep -q -- '--sync_batchnorm: convnet has no batch norm layers' "$tmp/convnet.err" \
  || fail "convnet: no message: $(cat "$tmp/convnet.err")"

# Batch statistics are communication: refused with --sync_gradients=false.
"$train" --sync_batchnorm --sync_gradients=false >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[[ $rc -eq 2 ]] || fail "--sync_gradients=false: exit $rc, want 2"
grep -q -- '--sync_batchnorm' "$tmp/bad.err" || fail "--sync_gradients=false: $(cat "$tmp/bad.err")"

finish
