#!/usr/bin/env bash
# nccl_allreduce_bandwidth as a person runs it. Where no GPU is usable (no device, a CPU-only
# LibTorch, a build without NCCL) it must exit 1 with one line on stderr saying why and print no
# table; bad flags exit 2. Where GPUs are usable, a short sweep must be correct at every size and end
# with the JSON line; that part skips here, saying so.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

driver=$1
start_test nccl_allreduce_bandwidth

"$driver" --min_bytes=3 >"$tmp/flag.out" 2>"$tmp/flag.err"
rc=$?
[[ $rc -eq 2 ]] || fail "bad --min_bytes: exit $rc, want 2"
grep -q -- '--min_bytes=3' "$tmp/flag.err" || fail "bad --min_bytes not named: $(cat "$tmp/flag.err")"

"$driver" --min_bytes=1M --max_bytes=4M --iters=2 --warmup_iters=1 >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
if grep -q 'cannot run here' "$tmp/run.err"; then
  [[ $rc -eq 1 ]] || fail "cannot run: exit $rc, want 1"
  [[ $(wc -l <"$tmp/run.err") -eq 1 ]] || fail "cannot run: want one line, got: $(cat "$tmp/run.err")"
  [[ ! -s "$tmp/run.out" ]] || fail "cannot run: printed on stdout: $(cat "$tmp/run.out")"
  echo "no usable GPU here: $(cat "$tmp/run.err")"
  finish
fi

[[ $rc -eq 0 ]] || fail "with GPUs: exit $rc: $(tail -3 "$tmp/run.err")"
tail -1 "$tmp/run.out" >"$tmp/last.json"
[[ $(json "$tmp/last.json" 'm["format"]') == dtrain.nccl_allreduce_bandwidth.v1 ]] \
  || fail "with GPUs: last line is not the JSON result: $(tail -1 "$tmp/run.out")"
[[ $(json "$tmp/last.json" '[r["bytes"] for r in m["results"]]') == "[1048576, 2097152, 4194304]" ]] \
  || fail "with GPUs: sizes: $(cat "$tmp/last.json")"
[[ $(json "$tmp/last.json" 'all(r["correct"] and r["time_us"] > 0 for r in m["results"])') == True ]] \
  || fail "with GPUs: a size was wrong or untimed: $(cat "$tmp/last.json")"
cat "$tmp/run.out"
finish
