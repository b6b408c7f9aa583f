#!/usr/bin/env bash
# flight_analyze on the dumps of real processes: a rank that issues an extra collective and one
# that issues a differently sized allreduce are named at the collective where they went wrong; a
# SIGSTOPped rank, which can dump nothing, is named by the two others' dumps after their timeout;
# //trainer:train dumps at SIGUSR1 and goes on, and on a peer's death names the dead rank through
# its dump. Also the refusals (no dumps, garbage).
set -uo pipefail

analyze=$1
driver=$2
train=$3
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test flight_analyze

# desync NAME RANKS OPTIONS_OF_THE_LAST_RANK...: the driver's ranks, every one dumping.
desync() {
  local name=$1 ranks=$2 port r
  shift 2
  mkdir -p "$tmp/$name"
  port=$(free_port)
  pids=()
  for ((r = 0; r < ranks; r++)); do
    local -a extra=()
    [[ $r -eq $((ranks - 1)) ]] && extra=("$@")
    "$driver" --dist_url="tcp://127.0.0.1:$port" --rank=$r --world_size="$ranks" --dump_always \
      --dump_dir="$tmp/$name" "${extra[@]}" >"$tmp/$name/out$r" 2>&1 &
    pids+=($!)
  done
  wait_all
}

# 1. An extra broadcast before rank 1's fifth allreduce: it finishes on both (the backend cannot
#    tell), and the dumps show where the numbers part.
desync extra 2 --extra_at=5
"$analyze" "$tmp/extra" >"$tmp/extra.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] || fail "extra: exit $rc, want 1: $(cat "$tmp/extra.txt")"
grep -q 'the ranks issued different collectives as gloo+shm/0 #5: rank 0: allreduce (sum, 4 x float32 = 16 B, step 5); rank 1: broadcast (from rank 0, 4 x float32 = 16 B)' \
  "$tmp/extra.txt" || fail "extra: not named: $(cat "$tmp/extra.txt")"

# 2. Rank 1's fifth allreduce of 8 floats where rank 0's has 4.
desync size 2 --size_at=5
"$analyze" "$tmp/size" >"$tmp/size.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] || fail "size: exit $rc, want 1: $(cat "$tmp/size.txt")"
grep -q 'as gloo+shm/0 #5: rank 0: allreduce (sum, 4 x float32 = 16 B, step 5); rank 1: allreduce (sum, 8 x float32 = 32 B, step 5)' \
  "$tmp/size.txt" || fail "size: not named: $(cat "$tmp/size.txt")"

# 3. Ranks that agree.
desync agree 2
"$analyze" "$tmp/agree" >"$tmp/agree.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "agree: exit $rc, want 0: $(cat "$tmp/agree.txt")"
grep -q 'the ranks agree' "$tmp/agree.txt" || fail "agree: $(cat "$tmp/agree.txt")"

# 4. Three ranks of endless allreduces, rank 2 SIGSTOPped: the two others time out (3 s) and dump;
#    rank 2 dumps nothing, and is named.
mkdir -p "$tmp/stop"
port=$(free_port)
pids=()
for r in 0 1 2; do
  "$driver" --dist_url="tcp://127.0.0.1:$port" --rank=$r --world_size=3 --steps=100000000 \
    --dump_dir="$tmp/stop" >"$tmp/stop/out$r" 2>&1 &
  pids+=($!)
done
for r in 0 1 2; do
  wait_for_text "$tmp/stop/out$r" "ready" 60 || fail "stop: rank $r never met: $(tail -2 "$tmp/stop/out$r")"
done
sleep 1
kill -STOP "${pids[2]}"
for r in 0 1; do
  wait "${pids[$r]}"
  rc=$?
  [[ $rc -eq 1 ]] || fail "stop: rank $r exited $rc, want 1: $(tail -2 "$tmp/stop/out$r")"
done
kill -KILL "${pids[2]}"
wait "${pids[2]}" 2>/dev/null
pids=()
"$analyze" "$tmp/stop" >"$tmp/stop.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] || fail "stop: exit $rc, want 1: $(cat "$tmp/stop.txt")"
grep -q 'rank 2 of 3 left no dump: stopped, killed, or never reached a failure; the others.* last collective in common: gloo+shm/0 #' \
  "$tmp/stop.txt" || fail "stop: rank 2 not named: $(cat "$tmp/stop.txt")"

# 5. train: SIGUSR1 dumps and training goes on to exit 0; a rank SIGKILLed later makes the other
#    fail and dump, and the dump names the dead rank.
mkdir -p "$tmp/train"
port=$(free_port)
pids=()
for r in 0 1; do
  # Rank 1 keeps its last 3 collectives only (--flight_recorder).
  size=()
  [[ $r -eq 1 ]] && size=(--flight_recorder=3)
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r --dataset=synthetic \
    --synthetic_train_size=40000 --batch_size=16 --epochs=1 --progress=none --timeout=10s \
    --flight_recorder_dir="$tmp/train" "${size[@]}" >"$tmp/train/out$r" 2>&1 &
  pids+=($!)
done
wait_for_text "$tmp/train/out0" "Begin training" 60 || fail "train: never began: $(tail -3 "$tmp/train/out0")"
sleep 1
kill -USR1 "${pids[1]}"
wait_for_text "$tmp/train/out1" "collectives are in" 20 \
  || fail "train: no dump at SIGUSR1: $(tail -3 "$tmp/train/out1")"
dump=$(sed -n "s/.*rank 1's last [0-9]* collectives are in \(.*json\) (.*/\1/p" "$tmp/train/out1")
[[ -f $dump ]] || fail "train: the SIGUSR1 dump '$dump' is not there"
[[ $(json "$dump" 'm["reason"]') == SIGUSR1 ]] || fail "train: reason: $(head -c 300 "$dump")"
[[ $(json "$dump" 'm["capacity"], len(m["entries"])') == "3 3" ]] \
  || fail "train: --flight_recorder=3: $(json "$dump" 'm["capacity"], len(m["entries"])')"
running "${pids[1]}" || fail "train: rank 1 did not go on after SIGUSR1"
rm -f "$dump"
kill -KILL "${pids[1]}"
wait "${pids[0]}"
rc=$?
[[ $rc -eq 1 ]] || fail "train: rank 0 exited $rc after rank 1's death, want 1: $(tail -3 "$tmp/train/out0")"
wait "${pids[1]}" 2>/dev/null
pids=()
grep -q "train: rank 0's last [0-9]* collectives are in $tmp/train/flight_rank0_" "$tmp/train/out0" \
  || fail "train: rank 0 did not say where it dumped: $(tail -3 "$tmp/train/out0")"
"$analyze" "$tmp/train" >"$tmp/train.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] || fail "train: flight_analyze exited $rc, want 1: $(cat "$tmp/train.txt")"
grep -q 'rank 1 of 2 left no dump' "$tmp/train.txt" || fail "train: $(cat "$tmp/train.txt")"

# 6. Refusals.
"$train" --flight_recorder=-2 --dataset=synthetic >"$tmp/size.txt" 2>&1
[[ $? -eq 2 ]] && grep -q -- "--flight_recorder: -2 is not a number of collectives" "$tmp/size.txt" \
  || fail "--flight_recorder=-2: $(cat "$tmp/size.txt")"
"$analyze" >"$tmp/none.txt" 2>&1
[[ $? -eq 2 ]] || fail "no arguments: not exit 2"
mkdir -p "$tmp/empty"
"$analyze" "$tmp/empty" >"$tmp/empty.txt" 2>&1
[[ $? -eq 2 ]] && grep -q "no flight_\*.json in" "$tmp/empty.txt" || fail "empty folder: $(cat "$tmp/empty.txt")"
echo '{"format": "something else"}' >"$tmp/empty/flight_bad.json"
"$analyze" "$tmp/empty" >"$tmp/bad.txt" 2>&1
[[ $? -eq 2 ]] && grep -q "flight_bad.json: not a flight recorder dump" "$tmp/bad.txt" \
  || fail "garbage: $(cat "$tmp/bad.txt")"

finish
