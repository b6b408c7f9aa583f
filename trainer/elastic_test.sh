#!/usr/bin/env bash
# --elastic with real processes on loopback (explicit ranks over tcp://, no launcher): one of three
# ranks SIGKILLed mid-training; the two others form the next generation in the same processes, go
# on from the last step they all committed and finish; their weights equal, byte for byte, those of
# three ranks stopped at that step and two resumed from its checkpoint. Also the refusals.
set -uo pipefail

train=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test elastic

# A failure after which the rest cannot run.
die() {
  fail "$@"
  finish
}
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }

run=(--dataset=synthetic --synthetic_train_size=30000 --epochs=1 --batch_size=16 --max_steps=400
  --skip_validation --progress=none --timeout=20s)

# 1. Three ranks, rank 1 SIGKILLed once training runs.
port=$(free_port)
for r in 0 1 2; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r --elastic "${run[@]}" \
    --save_state_dict="$tmp/elastic$r.pt" >"$tmp/e$r.out" 2>&1 &
  pids+=($!)
done
wait_for_text "$tmp/e0.out" "Begin training" || die "training never began: $(tail -3 "$tmp/e0.out")"
sleep 1
killed=$(now)
kill -KILL "${pids[1]}"
wait "${pids[0]}"
rc0=$?
took=$(elapsed "$killed" "$(now)")
wait "${pids[2]}"
rc2=$?
pids=()
[[ $rc0 -eq 0 && $rc2 -eq 0 ]] \
  || die "survivors exited $rc0 and $rc2: $(tail -3 "$tmp/e0.out") / $(tail -3 "$tmp/e2.out")"
grep -q 'forming generation 1' "$tmp/e2.out" || die "rank 2 formed no generation: $(tail -3 "$tmp/e2.out")"
step=$(sed -n 's/.*this generation of 2 ranks goes on from step \([0-9]*\).*/\1/p' "$tmp/e0.out")
[[ -n $step ]] || die "no new generation in rank 0's log: $(tail -5 "$tmp/e0.out")"
[[ $step -lt 400 ]] || die "rank 1 was killed after the last step ($step)"
echo "rank 1 killed; ranks 0 and 2 went on from step $step and finished ${took}s after the kill"

# 2. The reference: three ranks stopped at that step, two resumed from its checkpoint.
port=$(free_port)
for r in 0 1 2; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r "${run[@]}" \
    --max_steps="$step" --checkpoint_dir="$tmp/ck" >"$tmp/s$r.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "reference: a rank of the first part failed: $(tail -3 "$tmp/s0.out")"; done
pids=()
port=$(free_port)
for r in 0 1; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r "${run[@]}" \
    --checkpoint_dir="$tmp/ck" --resume --save_state_dict="$tmp/reference$r.pt" >"$tmp/t$r.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "reference: a resumed rank failed: $(tail -3 "$tmp/t0.out")"; done
pids=()
cmp "$tmp/elastic0.pt" "$tmp/reference0.pt" \
  || fail "the elastic run's weights differ from the reference's (from step $step)"
echo "weights equal the reference's, byte for byte"

# 3. Refusals.
for bad in "--zero=1" "--sync_batchnorm" "--min_ranks=0"; do
  "$train" --elastic $bad "${run[@]}" >"$tmp/bad.out" 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "--elastic $bad: exit $rc, want 2: $(tail -2 "$tmp/bad.out")"
  echo "--elastic $bad: $(tail -1 "$tmp/bad.out")"
done

finish
