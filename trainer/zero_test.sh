#!/usr/bin/env bash
# --zero with real processes under the launcher, Adam on the ConvNet: stages 1 and 2 end with the
# weights of a run without ZeRO, byte for byte (shared memory: its reduce-scatter has its
# allreduce's bits), each rank keeping half the optimizer state (the metrics JSON); a checkpoint
# written by 2 ZeRO ranks resumes on 3 ranks, with ZeRO and without, to the same weights; clipping
# and accumulation run; the combinations that cannot work are refused naming both flags.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test zero

common=(--dataset=synthetic --synthetic_train_size=96 --synthetic_val_size=16 --batch_size=8
  --progress=none --timeout=60s --seed=5 --optimizer=adam --skip_validation)

run() {  # run NAME NPROC ARGS...
  local name=$1 nproc=$2; shift 2
  local port; port=$(free_port)
  timeout 300 "$launch" --nproc_per_node="$nproc" --master_port="$port" -- "$train" "${common[@]}" \
    --metrics_json="$tmp/$name.json" --save_state_dict="$tmp/$name.pt" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || fail "$name: exit $rc: $(tail -5 "$tmp/$name.err")"
  return $rc
}
same() {  # same A B WHAT: the two runs' weights are the same bytes
  cmp -s "$tmp/$1.pt" "$tmp/$2.pt" || fail "$3: the weights of $1 and $2 differ"
}

# 1. Two epochs on 2 ranks: ZeRO's weights are DDP's, and each rank keeps half of Adam's state.
run ddp 2 --epochs=2
for stage in 1 2; do
  run "zero$stage" 2 --epochs=2 --zero=$stage || continue
  same ddp "zero$stage" "stage $stage"
  [[ $(json "$tmp/zero$stage.json" 'm["config"]["zero"]') == "$stage" ]] || fail "stage $stage: config"
  [[ $(json "$tmp/zero$stage.json" 'm["ranks_identical"]') == True ]] || fail "stage $stage: ranks differ"
  # Adam: two float32 tensors per element; the ConvNet's 300426 elements in shares of 150213.
  [[ $(json "$tmp/zero$stage.json" 'm["optimizer_state_bytes"]') == "[1201704, 1201704]" ]] ||
    fail "stage $stage: state bytes $(json "$tmp/zero$stage.json" 'm["optimizer_state_bytes"]')"
  [[ $(json "$tmp/zero$stage.json" 'len(m["peak_rss_bytes"]) == 2 and min(m["peak_rss_bytes"]) > 0
      and len(m["pss_bytes"]) == 2 and 0 < max(m["pss_bytes"]) <= max(m["peak_rss_bytes"])') == True ]] ||
    fail "stage $stage: peak memory or PSS per rank missing: $(cat "$tmp/zero$stage.json")"
  grep -q "ZeRO stage $stage: this rank keeps the optimizer state of 150213 of 300426" \
    "$tmp/zero$stage.err" || fail "stage $stage: no ZeRO line: $(cat "$tmp/zero$stage.err")"
done
[[ $(json "$tmp/ddp.json" 'm["optimizer_state_bytes"]') == "[2403408, 2403408]" ]] ||
  fail "ddp: state bytes $(json "$tmp/ddp.json" 'm["optimizer_state_bytes"]')"

# 2. Stopped after 6 of 24 steps by 2 ZeRO ranks; resumed on 3 ranks with stage 1, stage 2 and
#    without ZeRO: the same weights (the checkpoint holds the unsharded state).
run part 2 --epochs=2 --zero=1 --checkpoint_dir="$tmp/ck" --max_steps=6
for how in ddp 1 2; do
  cp -r "$tmp/ck" "$tmp/ck-$how"
  flags=(--epochs=2 --checkpoint_dir="$tmp/ck-$how" --resume)
  [[ $how == ddp ]] || flags+=(--zero=$how)
  run "rest-$how" 3 "${flags[@]}" || continue
  grep -q 'resumed from' "$tmp/rest-$how.err" || fail "rest-$how: did not resume"
done
same rest-ddp rest-1 "resumed on 3 ranks with stage 1"
same rest-ddp rest-2 "resumed on 3 ranks with stage 2"

# 3. Clipping (at stage 2 the norm over every rank's shares) and accumulation run and end identical.
for stage in 1 2; do
  if run "clip$stage" 2 --epochs=1 --zero=$stage --clip_grad_norm=0.5 --accumulate_steps=2; then
    [[ $(json "$tmp/clip$stage.json" 'm["ranks_identical"]') == True ]] || fail "clip $stage: ranks differ"
  fi
done
run clip0 2 --epochs=1 --clip_grad_norm=0.5 --accumulate_steps=2
same clip0 clip1 "clipping at stage 1"

# 4. Refused, naming both flags, before any process trains.
refused() {  # refused WHAT ARGS...: exit 2 naming WHAT
  local what=$1; shift
  "$train" "${common[@]}" "$@" >"$tmp/refused.out" 2>"$tmp/refused.err"
  local rc=$?
  [[ $rc -ne 0 ]] || fail "$*: accepted"
  grep -q -- "$what" "$tmp/refused.err" || fail "$*: no '$what' in: $(cat "$tmp/refused.err")"
}
refused "--zero: must be 0 (off), 1" --zero=3
refused "--comm_hook=fp16 cannot be combined" --zero=2 --comm_hook=fp16
refused "--comm_hook=local_sgd lets drift" --zero=1 --comm_hook=local_sgd
refused "--sync_gradients=false averages none" --zero=1 --sync_gradients=false
refused "--even_batches: false does not combine with --zero" --zero=1 --even_batches=false

finish
