#!/usr/bin/env bash
# train --trace with real processes: 2 and 4 ranks write one merged trace that passes the format's
# rules, holds every rank's phases, buckets and traced steps (checkpoints included), and has each
# rank's clock offset within its stated error (one host: the true offset is 0). A rank SIGKILLed
# mid-run: the survivors' trace is still written, names the dead rank missing and marks the failure.
# Also the refusals of bad --trace_steps and --trace with --elastic.
set -uo pipefail

train=$1
check=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test trace

# run NAME RANKS TRAIN_OPTIONS...: the ranks of one job, in $tmp/NAME; waits for all.
run() {
  local name=$1 ranks=$2 port r
  shift 2
  mkdir -p "$tmp/$name"
  port=$(free_port)
  pids=()
  for ((r = 0; r < ranks; r++)); do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size="$ranks" --rank=$r \
      --dataset=synthetic --batch_size=16 --epochs=1 --progress=none --skip_validation \
      --trace="$tmp/$name/trace.json" "$@" >"$tmp/$name/out$r" 2>&1 &
    pids+=($!)
  done
  wait_all || fail "$name: a rank failed: $(tail -3 "$tmp/$name"/out*)"
}

for ranks in 2 4; do
  run "world$ranks" $ranks --synthetic_train_size=$((ranks * 16 * 12)) --trace_steps=3:10 \
    --checkpoint_dir="$tmp/world$ranks/ck" --checkpoint_every_steps=4
  grep -q "trace of steps 3 to 10 of $ranks ranks in $tmp/world$ranks/trace.json" \
    "$tmp/world$ranks/out0" || fail "world$ranks: rank 0 did not say where: $(cat "$tmp/world$ranks/out0")"
  "$check" --trace="$tmp/world$ranks/trace.json" --ranks=$ranks --steps=3:10 \
    >"$tmp/world$ranks/check" 2>&1 || fail "world$ranks: $(cat "$tmp/world$ranks/check")"
  # Checkpoints after steps 4 and 8 on every rank; no step outside 3..10.
  n=$(json "$tmp/world$ranks/trace.json" \
    'sum(1 for e in m["traceEvents"] if e.get("name") == "checkpoint")')
  [[ $n -eq $((2 * ranks)) ]] || fail "world$ranks: $n checkpoint slices, want $((2 * ranks))"
  n=$(json "$tmp/world$ranks/trace.json" \
    'sum(1 for e in m["traceEvents"] if e.get("name") in ("step 2", "step 11"))')
  [[ $n -eq 0 ]] || fail "world$ranks: steps outside --trace_steps were traced"
done

# A rank SIGSTOPped for 3 s: rank 0's collective waits past --stall_warning=1s, and the warning is
# a mark on rank 0's events track; the run then ends well.
mkdir -p "$tmp/stall"
port=$(free_port)
pids=()
for r in 0 1; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r --dataset=synthetic \
    --synthetic_train_size=12000 --batch_size=16 --epochs=1 --progress=lines --print_freq=5 \
    --skip_validation --timeout=20s --stall_warning=1s --trace="$tmp/stall/trace.json" \
    --trace_steps=1:100000 >"$tmp/stall/out$r" 2>&1 &
  pids+=($!)
done
wait_for_text "$tmp/stall/out0" "Epoch: \[0\]\[10/" 60 \
  || fail "stall: never trained: $(tail -3 "$tmp/stall/out0")"
kill -STOP "${pids[1]}"
sleep 3
kill -CONT "${pids[1]}"
wait_all || fail "stall: a rank failed: $(tail -3 "$tmp/stall"/out*)"
"$check" --trace="$tmp/stall/trace.json" --ranks=2 --steps=1:375 >"$tmp/stall/check" 2>&1 \
  || fail "stall: $(cat "$tmp/stall/check")"
n=$(json "$tmp/stall/trace.json" \
  'sum(1 for e in m["traceEvents"] if e.get("name") == "stall warning" and e["pid"] == 0 and "rank 1" in e["args"]["message"])')
[[ $n -ge 1 ]] || fail "stall: no stall warning naming rank 1 on rank 0's track: $(grep -i stall "$tmp/stall/out0" | head -3)"

# A rank killed once training runs: ranks 0 and 2 fail (peer lost), and rank 0 writes what it and
# rank 2 had, naming rank 1 missing (rank 2's clock measured after rank 0 gave up on rank 1's part).
mkdir -p "$tmp/killed"
port=$(free_port)
pids=()
for r in 0 1 2; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r --dataset=synthetic \
    --synthetic_train_size=200000 --batch_size=16 --epochs=1 --progress=lines --print_freq=5 \
    --skip_validation --timeout=10s --trace="$tmp/killed/trace.json" --trace_steps=1:100000 \
    --flight_recorder_dir="$tmp/killed" >"$tmp/killed/out$r" 2>&1 &
  pids+=($!)
done
wait_for_text "$tmp/killed/out0" "Epoch: \[0\]\[10/" 60 \
  || fail "killed: never trained: $(tail -3 "$tmp/killed/out0")"
kill -KILL "${pids[1]}"
for r in 0 2; do
  wait "${pids[$r]}"
  rc=$?
  [[ $rc -eq 1 ]] || fail "killed: rank $r exited $rc, want 1: $(tail -3 "$tmp/killed/out$r")"
done
wait "${pids[1]}" 2>/dev/null
pids=()
"$check" --trace="$tmp/killed/trace.json" --ranks=3 --missing=1 --failure \
  >"$tmp/killed/check" 2>&1 || fail "killed: $(cat "$tmp/killed/check")"

# SIGTERM: the ranks stop together at a step boundary (exit 143) and the trace is written once, at
# the stop, with no failure on it.
mkdir -p "$tmp/term"
port=$(free_port)
pids=()
for r in 0 1; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r --dataset=synthetic \
    --synthetic_train_size=200000 --batch_size=16 --epochs=1 --progress=lines --print_freq=5 \
    --skip_validation --trace="$tmp/term/trace.json" --trace_steps=1:100000 \
    >"$tmp/term/out$r" 2>&1 &
  pids+=($!)
done
wait_for_text "$tmp/term/out0" "Epoch: \[0\]\[10/" 60 \
  || fail "term: never trained: $(tail -3 "$tmp/term/out0")"
kill -TERM "${pids[0]}"
wait "${pids[0]}"
rc=$?
[[ $rc -eq 143 ]] || fail "term: rank 0 exited $rc, want 143: $(tail -3 "$tmp/term/out0")"
wait "${pids[1]}"
pids=()
n=$(grep -c "trace of steps" "$tmp/term/out0")
[[ $n -eq 1 ]] || fail "term: the trace was written $n times: $(cat "$tmp/term/out0")"
steps=$(json "$tmp/term/trace.json" \
  'sum(1 for e in m["traceEvents"] if e.get("name", "").startswith("step ") and e["pid"] == 1)')
"$check" --trace="$tmp/term/trace.json" --ranks=2 --steps="1:$steps" >"$tmp/term/check" 2>&1 \
  || fail "term: $(cat "$tmp/term/check")"
n=$(json "$tmp/term/trace.json" 'sum(1 for e in m["traceEvents"] if e.get("name") == "failure")')
[[ $n -eq 0 ]] || fail "term: a graceful stop marked as a failure"

# Refusals.
"$train" --dataset=synthetic --trace=/nonexistent/dir/t.json >"$tmp/bad" 2>&1
[[ $? -ne 0 ]] && grep -q -- "--trace=/nonexistent/dir/t.json: cannot write in /nonexistent/dir" "$tmp/bad" \
  || fail "unwritable: $(cat "$tmp/bad")"
"$train" --dataset=synthetic --trace="$tmp/x.json" --trace_steps=5:2 >"$tmp/bad" 2>&1
[[ $? -ne 0 ]] && grep -q -- "--trace_steps: '5:2' is not a range of steps" "$tmp/bad" \
  || fail "trace_steps 5:2: $(cat "$tmp/bad")"
"$train" --dataset=synthetic --trace="$tmp/x.json" --elastic >"$tmp/bad" 2>&1
[[ $? -ne 0 ]] && grep -q -- "--elastic: does not combine with --trace yet" "$tmp/bad" \
  || fail "elastic: $(cat "$tmp/bad")"

finish
