#!/usr/bin/env bash
# same_results.sh with the same train binary twice: every output the same; then a changed weight
# file and a changed metric are each reported as different.
set -uo pipefail

same_results=$1
train=$2
compare=$3
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test same_results

"$same_results" "$train" "$train" "$tmp/out" >"$tmp/same.out" 2>"$tmp/same.err"
rc=$?
[[ $rc -eq 0 ]] || fail "the same binary twice: exit $rc: $(cat "$tmp/same.out" "$tmp/same.err")"
[[ $(grep -c '^same ' "$tmp/same.out") -eq 13 ]] \
  || fail "want 13 outputs the same: $(cat "$tmp/same.out")"

# A flipped byte in a weight file, and a changed loss in the metrics, are found.
printf '\x01' | dd of="$tmp/out/after/conv1.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
python3 - "$tmp/out/after/conv2.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["epochs"][0]["train_loss"] += 1e-9
json.dump(m, open(sys.argv[1], "w"))
PY
python3 "$compare" "$tmp/out/before" "$tmp/out/after" >"$tmp/differ.out"
rc=$?
[[ $rc -eq 1 ]] || fail "a changed output: exit $rc, want 1"
grep -q '^DIFFERENT conv1.safetensors' "$tmp/differ.out" || fail "weights: $(cat "$tmp/differ.out")"
grep -q '^DIFFERENT conv2.json' "$tmp/differ.out" || fail "metrics: $(cat "$tmp/differ.out")"

"$same_results" "$train" >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "one argument: want exit 2"
finish
