#!/usr/bin/env bash
# shm_allreduce_bandwidth as a person runs it, briefly: bad flags exit 2 naming the flag; a sweep of
# tiny sizes with 2 and then 4 processes must be correct at every size for both backends, and end with
# the JSON line, as must reduce_scatter and allgather beside allreduce; a rank killed mid-run makes the driver exit 1 within seconds, with the dead rank named
# by the driver and by the ranks that saw it go. Timings from these runs mean nothing.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

driver=$1
start_test shm_allreduce_bandwidth

"$driver" --min_bytes=3 >"$tmp/flag.out" 2>"$tmp/flag.err"
rc=$?
[[ $rc -eq 2 ]] || fail "bad --min_bytes: exit $rc, want 2"
grep -q -- '--min_bytes=3' "$tmp/flag.err" || fail "bad --min_bytes not named: $(cat "$tmp/flag.err")"
"$driver" --backends=shm,tcp >/dev/null 2>"$tmp/flag.err"
rc=$?
[[ $rc -eq 2 ]] || fail "unknown backend: exit $rc, want 2"
grep -q "'tcp'" "$tmp/flag.err" || fail "unknown backend not named: $(cat "$tmp/flag.err")"
# Issue #29: messages larger than the host's memory are refused before any process starts.
timeout 60 "$driver" --max_bytes=1024G --processes=4 >/dev/null 2>"$tmp/flag.err"
rc=$?
[[ $rc -eq 2 ]] || fail "--max_bytes=1024G: exit $rc, want 2: $(cat "$tmp/flag.err")"
grep -q -- "--max_bytes=1024G and --slot_bytes=4M for 4 processes need .* MiB of host memory, more than" \
  "$tmp/flag.err" || fail "--max_bytes=1024G: unclear message: $(cat "$tmp/flag.err")"

for n in 2 4; do
  "$driver" --processes=$n --min_bytes=4 --max_bytes=1K --step_factor=16 --repeats=1 \
    --target_ms=1 --warmup_iters=1 --timeout=30s >"$tmp/run$n.out" 2>"$tmp/run$n.err" &
  pid=$!
  pids+=("$pid")
  wait "$pid"
  rc=$?
  pids=()
  [[ $rc -eq 0 ]] || fail "$n processes: exit $rc: $(tail -3 "$tmp/run$n.err")"
  tail -1 "$tmp/run$n.out" >"$tmp/last$n.json"
  [[ $(json "$tmp/last$n.json" 'm["format"], m["processes"], m["ratio"]') \
    == "dtrain.shm_allreduce_bandwidth.v1 $n gloo/shm" ]] \
    || fail "$n processes: last line is not the JSON result: $(tail -1 "$tmp/run$n.out")"
  [[ $(json "$tmp/last$n.json" '[r["bytes"] for r in m["results"]]') == "[4, 64, 1024]" ]] \
    || fail "$n processes: sizes: $(cat "$tmp/last$n.json")"
  [[ $(json "$tmp/last$n.json" \
    'all(r["correct"] and r[b]["time_us"] > 0 and r["ratio"] > 0 for r in m["results"] for b in ("shm", "gloo"))') \
    == True ]] || fail "$n processes: a size was wrong or untimed: $(cat "$tmp/last$n.json")"
  grep -q '^# shm_allreduce_bandwidth: .* between '"$n"' processes' "$tmp/run$n.out" \
    || fail "$n processes: no table header: $(head -3 "$tmp/run$n.out")"
  cat "$tmp/run$n.out"
done

# The zero-copy path (tensors from AllocateBuffer) side by side with the copying one, every size correct.
"$driver" --processes=3 --backends=shm,shm_buffers --min_bytes=4 --max_bytes=64K --step_factor=16 \
  --repeats=1 --target_ms=1 --warmup_iters=1 --timeout=30s >"$tmp/buffers.out" 2>"$tmp/buffers.err"
rc=$?
[[ $rc -eq 0 ]] || fail "shm_buffers: exit $rc: $(tail -3 "$tmp/buffers.err")"
tail -1 "$tmp/buffers.out" >"$tmp/buffers.json"
[[ $(json "$tmp/buffers.json" \
  'm["ratio"], len(m["results"]), all(r["correct"] for r in m["results"])') \
  == "shm_buffers/shm 4 True" ]] || fail "shm_buffers: $(cat "$tmp/buffers.json")"
cat "$tmp/buffers.out"

# The collectives of a sharded optimizer against allreduce of the same bytes: reduce_scatter and
# allgather on each backend, zero-copy and not, and hierarchical over two simulated hosts (2 + 1
# processes), every size correct (sizes round down to whole
# float32 elements per rank: 4 bytes per process); two collectives on two backends are refused.
for spec in "shm_buffers allreduce,reduce_scatter" "shm reduce_scatter,allgather" \
    "gloo allgather,reduce_scatter" "shm_buffers allgather" "two_hosts allreduce,reduce_scatter" \
    "two_hosts allgather"; do
  read -r backend collectives <<<"$spec"
  name=${backend}_${collectives/,/_}
  "$driver" --processes=3 --backends="$backend" --collectives="$collectives" --min_bytes=4 \
    --max_bytes=64K --step_factor=16 --repeats=1 --target_ms=1 --warmup_iters=1 --timeout=30s \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  [[ $rc -eq 0 ]] || fail "$spec: exit $rc: $(tail -3 "$tmp/$name.err")"
  tail -1 "$tmp/$name.out" >"$tmp/$name.json"
  [[ $(json "$tmp/$name.json" '",".join(m["collectives"]), [r["bytes"] for r in m["results"]],
      all(r["correct"] for r in m["results"])') == "$collectives [60, 1020, 16380] True" ]] \
    || fail "$spec: $(cat "$tmp/$name.json")"
  cat "$tmp/$name.out"
done
"$driver" --processes=1 --backends=two_hosts >/dev/null 2>"$tmp/flag.err"
rc=$?
[[ $rc -eq 2 ]] || fail "two_hosts on one process: exit $rc, want 2"
grep -q -- '--backends=two_hosts: needs --processes=2 or more' "$tmp/flag.err" \
  || fail "two_hosts on one process: $(cat "$tmp/flag.err")"
"$driver" --backends=shm,gloo --collectives=allreduce,allgather >/dev/null 2>"$tmp/flag.err"
rc=$?
[[ $rc -eq 2 ]] || fail "two collectives on two backends: exit $rc, want 2"
grep -q -- '--collectives=allreduce,allgather: want one collective, or two different ones on one' \
  "$tmp/flag.err" || fail "two collectives on two backends: $(cat "$tmp/flag.err")"

# Long enough to be killed while timing (1000 repeats of 100 ms); the header comes once connected.
"$driver" --processes=3 --backends=shm --max_bytes=4 --repeats=1000 --target_ms=100 --timeout=30s \
  >"$tmp/kill.out" 2>"$tmp/kill.err" &
pid=$!
pids+=("$pid")
if wait_for_text "$tmp/kill.out" '^# shm_allreduce_bandwidth' 20; then
  victim=$(pgrep -P "$pid" | sed -n 2p)
  kill -KILL "$victim"
  wait_exit "$pid" 15 || fail "killed rank: the driver still runs 15 s later"
  wait "$pid"
  rc=$?
  pids=()
  [[ $rc -eq 1 ]] || fail "killed rank: exit $rc, want 1"
  grep -q "rank 1 (pid $victim) was killed by signal 9" "$tmp/kill.err" \
    || fail "killed rank: the driver does not name it: $(cat "$tmp/kill.err")"
  grep -q "has exited" "$tmp/kill.err" \
    || fail "killed rank: no rank saw it exit: $(cat "$tmp/kill.err")"
  cat "$tmp/kill.err"
else
  fail "killed rank: the run did not start: $(cat "$tmp/kill.err")"
fi
finish
