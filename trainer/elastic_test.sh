#!/usr/bin/env bash
# --elastic with real processes on loopback (explicit ranks over tcp://, no launcher): one of three
# ranks SIGKILLed mid-training (rank 1, then rank 0, which hosts the first store); the two others
# form the next generation in the same processes, go on from the last step they all committed and
# finish; their weights equal, byte for byte, those of three ranks stopped at that step and two
# resumed from its checkpoint. Grow: a third process joins two (--join), and the three end with
# the weights of two stopped at that step and three resumed. A rank stopped past the timeout is
# left out, and once continued does not go on alone. Also the refusals.
set -uo pipefail

train=$1
launch=$2
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

# One of three ranks ($1) SIGKILLed once training runs: the two others go on and end with the
# weights of three ranks stopped at the step they went on from and two resumed from its checkpoint.
# Rank 0 hosts the first store: its death moves the job to rank 1's standby.
kill_case() {
  local killed=$1 port step r p rc
  local -a survivors=()
  for r in 0 1 2; do [[ $r -ne $killed ]] && survivors+=($r); done
  local first=${survivors[0]}
  port=$(free_port)
  pids=()
  for r in 0 1 2; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r --elastic "${run[@]}" \
      --save_state_dict="$tmp/k$killed-elastic$r.pt" >"$tmp/k$killed-e$r.out" 2>&1 &
    pids+=($!)
  done
  # Rank 0 alone reports progress.
  wait_for_text "$tmp/k$killed-e0.out" "Begin training" \
    || die "kill $killed: training never began: $(tail -3 "$tmp/k$killed-e0.out")"
  sleep 1
  local killed_at; killed_at=$(now)
  kill -KILL "${pids[$killed]}"
  for r in "${survivors[@]}"; do
    wait "${pids[$r]}"
    rc=$?
    [[ $rc -eq 0 ]] || die "kill $killed: rank $r exited $rc: $(tail -3 "$tmp/k$killed-e$r.out")"
  done
  local took; took=$(elapsed "$killed_at" "$(now)")
  wait "${pids[$killed]}" 2>/dev/null
  pids=()
  grep -q 'forming generation 1' "$tmp/k$killed-e${survivors[1]}.out" \
    || die "kill $killed: no new generation: $(tail -3 "$tmp/k$killed-e${survivors[1]}.out")"
  # The new rank 0 (the first survivor here: every survivor committed the same step) says where.
  step=$(sed -n 's/.*this generation of 2 ranks goes on from step \([0-9]*\).*/\1/p' \
    "$tmp/k$killed-e$first.out")
  [[ -n $step ]] || die "kill $killed: no step in the new rank 0's log: $(tail -5 "$tmp/k$killed-e$first.out")"
  [[ $step -lt 400 ]] || die "kill $killed: rank $killed was killed after the last step ($step)"
  echo "rank $killed killed; ranks ${survivors[*]} went on from step $step, done ${took}s after the kill"

  port=$(free_port)
  for r in 0 1 2; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r "${run[@]}" \
      --max_steps="$step" --checkpoint_dir="$tmp/k$killed-ck" >"$tmp/k$killed-s$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || die "kill $killed: reference's first part failed: $(tail -3 "$tmp/k$killed-s0.out")"
  done
  pids=()
  port=$(free_port)
  for r in 0 1; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r "${run[@]}" \
      --checkpoint_dir="$tmp/k$killed-ck" --resume --save_state_dict="$tmp/k$killed-reference$r.pt" \
      >"$tmp/k$killed-t$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || die "kill $killed: reference's resumed part failed: $(tail -3 "$tmp/k$killed-t0.out")"
  done
  pids=()
  cmp "$tmp/k$killed-elastic$first.pt" "$tmp/k$killed-reference0.pt" \
    || fail "kill $killed: the weights differ from the reference's (from step $step)"
  echo "kill $killed: weights equal the reference's, byte for byte"
}

kill_case 1
kill_case 0

# One of three ranks ($1) SIGSTOPped once training runs, and continued after the two others have
# left it out (past the timeout and the grace) and finished. It must not go on from what it last
# knew, alone (its peers have exited) and for rank 0 on its own standby, which never saw the next
# generation: it exits 1 saying it was left out, and the weights the others wrote stay theirs.
stop_case() {
  local stopped=$1 port r rc before after
  local -a others=()
  for r in 0 1 2; do [[ $r -ne $stopped ]] && others+=($r); done
  port=$(free_port)
  pids=()
  for r in 0 1 2; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r --elastic "${run[@]}" \
      --timeout=2s --save_state_dict="$tmp/p$stopped.pt" >"$tmp/p$stopped-e$r.out" 2>&1 &
    pids+=($!)
  done
  wait_for_text "$tmp/p$stopped-e0.out" "Begin training" \
    || die "stop $stopped: training never began: $(tail -3 "$tmp/p$stopped-e0.out")"
  sleep 1
  kill -STOP "${pids[$stopped]}"
  for r in "${others[@]}"; do
    wait "${pids[$r]}"
    rc=$?
    [[ $rc -eq 0 ]] || die "stop $stopped: rank $r exited $rc: $(tail -3 "$tmp/p$stopped-e$r.out")"
  done
  grep -q "this generation of 2 ranks goes on" "$tmp"/p$stopped-e*.out \
    || die "stop $stopped: the others did not go on without it"
  before=$(cksum <"$tmp/p$stopped.pt")
  kill -CONT "${pids[$stopped]}"
  wait "${pids[$stopped]}"
  rc=$?
  pids=()
  [[ $rc -eq 1 ]] || fail "stop $stopped: the stopped rank exited $rc, not 1"
  grep -q "rank $stopped was left out of generation 1: this process did not run for .* no other rank of generation 0 answers" \
    "$tmp/p$stopped-e$stopped.out" \
    || fail "stop $stopped: the stopped rank did not say it was left out: $(tail -2 "$tmp/p$stopped-e$stopped.out")"
  grep -q "this generation of 1 rank" "$tmp/p$stopped-e$stopped.out" \
    && fail "stop $stopped: the stopped rank went on alone"
  after=$(cksum <"$tmp/p$stopped.pt")
  [[ $after == "$before" ]] || fail "stop $stopped: the stopped rank overwrote the others' weights"
  echo "stop $stopped: left out, and said so once continued"
}

stop_case 1
stop_case 0

# Grow: two ranks train, a third process joins (--join) once training runs. All three finish, and
# their weights equal, byte for byte, those of two ranks stopped at the step the three went on from
# and three resumed from its checkpoint.
join_case() {
  local port step p
  port=$(free_port)
  pids=()
  for r in 0 1; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r --elastic "${run[@]}" \
      --max_ranks=3 --save_state_dict="$tmp/join-elastic$r.pt" >"$tmp/join-e$r.out" 2>&1 &
    pids+=($!)
  done
  wait_for_text "$tmp/join-e0.out" "Begin training" \
    || die "join: training never began: $(tail -3 "$tmp/join-e0.out")"
  sleep 1
  "$train" --dist_url="tcp://127.0.0.1:$port" --elastic --join "${run[@]}" \
    >"$tmp/join-e2.out" 2>&1 &
  pids+=($!)
  for p in "${pids[@]}"; do
    wait "$p" || die "join: a rank failed: $(tail -3 "$tmp/join-e0.out"; tail -3 "$tmp/join-e2.out")"
  done
  pids=()
  grep -q 'joined generation 1 as rank 2 of 3' "$tmp/join-e2.out" \
    || die "join: the joiner did not join: $(tail -3 "$tmp/join-e2.out")"
  step=$(sed -n 's/.*this generation of 3 ranks goes on from step \([0-9]*\).*/\1/p' "$tmp/join-e0.out")
  [[ -n $step && $step -lt 400 ]] || die "join: no step (or the last) in rank 0's log: $(tail -5 "$tmp/join-e0.out")"
  echo "a third rank joined; the three went on from step $step"

  port=$(free_port)
  for r in 0 1; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r "${run[@]}" \
      --max_steps="$step" --checkpoint_dir="$tmp/join-ck" >"$tmp/join-s$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || die "join: reference's first part failed: $(tail -3 "$tmp/join-s0.out")"
  done
  pids=()
  port=$(free_port)
  for r in 0 1 2; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r "${run[@]}" \
      --checkpoint_dir="$tmp/join-ck" --resume --save_state_dict="$tmp/join-reference$r.pt" \
      >"$tmp/join-t$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || die "join: reference's resumed part failed: $(tail -3 "$tmp/join-t0.out")"
  done
  pids=()
  cmp "$tmp/join-elastic0.pt" "$tmp/join-reference0.pt" \
    || fail "join: the weights differ from the reference's (from step $step)"
  echo "join: weights equal the reference's, byte for byte"
}

join_case

# launched_rank LAUNCHER RANK: the pid of the launcher's child with that RANK, or nothing.
launched_rank() {
  local p
  for p in $(pgrep -P "$1"); do
    if grep -qxz "RANK=$2" "/proc/$p/environ" 2>/dev/null; then echo "$p"; fi
  done
}

# Under the launcher with --elastic: a rank's death does not stop the others; the launcher says so
# and exits 0 once they have finished. Then with a replacement.
"$launch" --elastic --nproc_per_node=3 --master_port=0 -- "$train" --elastic "${run[@]}" \
  --save_state_dict="$tmp/launched.pt" >"$tmp/launch.out" 2>&1 &
launcher=$!
pids=($launcher)
wait_for_text "$tmp/launch.out" "Begin training" || die "launcher: training never began"
sleep 1
rank1=$(launched_rank "$launcher" 1)
[[ -n $rank1 ]] || die "launcher: no rank 1 among its children"
kill -KILL "$rank1"
wait "$launcher"
rc=$?
pids=()
[[ $rc -eq 0 ]] || fail "launcher --elastic exited $rc: $(tail -3 "$tmp/launch.out")"
grep -q 'rank 1 (local rank 1, pid [0-9]*) was killed by signal 9 (Killed); the others go on' \
  "$tmp/launch.out" || fail "launcher: no word of rank 1's death: $(grep launch "$tmp/launch.out")"
[[ -s $tmp/launched.pt ]] || fail "launcher: no weights written"
echo "launcher: $(grep 'exited with code 0 after losing' "$tmp/launch.out")"

# With --max_restarts: the launcher starts a replacement, which joins the running job. Rank 0 is
# killed, so the first store is gone: the replacement finds the job through the standby stores the
# first generation left in the launcher's DTRAIN_ELASTIC_DIR. Three ranks finish.
"$launch" --elastic --max_restarts=1 --nproc_per_node=3 --master_port=0 -- "$train" --elastic \
  "${run[@]}" --save_state_dict="$tmp/replaced.pt" >"$tmp/replace.out" 2>&1 &
launcher=$!
pids=($launcher)
wait_for_text "$tmp/replace.out" "Begin training" || die "replacement: training never began"
sleep 1
rank0=$(launched_rank "$launcher" 0)
[[ -n $rank0 ]] || die "replacement: no rank 0 among the launcher's children"
kill -KILL "$rank0"
wait "$launcher"
rc=$?
pids=()
[[ $rc -eq 0 ]] || fail "launcher --elastic --max_restarts=1 exited $rc: $(tail -3 "$tmp/replace.out")"
grep -q 'started rank 0 (local rank 0, pid [0-9]*) to replace it (1 of 1); it joins the running job' \
  "$tmp/replace.out" || fail "replacement: none started: $(grep launch "$tmp/replace.out")"
grep -q 'joined generation [0-9]* as rank 2 of 3' "$tmp/replace.out" \
  || fail "replacement: it did not join: $(grep -i 'joiner\|elastic' "$tmp/replace.out" | tail -5)"
grep -q 'this generation of 3 ranks goes on from step' "$tmp/replace.out" \
  || fail "replacement: the world did not grow back to 3"
[[ -s $tmp/replaced.pt ]] || fail "replacement: no weights written"
echo "replacement: $(grep -o 'joined generation.*' "$tmp/replace.out" | head -1)"

# torchrun's --nnodes=MIN:MAX: node 0's launcher starts the job with its two ranks; node 1's (here
# on the same machine) starts two more once it runs, which join it through its first store. Four
# ranks finish.
port=$(free_port)
"$launch" --elastic --nnodes=1:2 --node_rank=0 --nproc_per_node=2 --master_port="$port" -- \
  "$train" --elastic "${run[@]}" --save_state_dict="$tmp/nodes.pt" >"$tmp/node0.out" 2>&1 &
node0=$!
pids=($node0)
wait_for_text "$tmp/node0.out" "Begin training" || die "nodes: training never began"
"$launch" --elastic --nnodes=1:2 --node_rank=1 --nproc_per_node=2 --master_port="$port" -- \
  "$train" --elastic "${run[@]}" >"$tmp/node1.out" 2>&1 &
node1=$!
pids+=($node1)
for p in $node0 $node1; do
  wait "$p" || fail "nodes: launcher $p exited $?: $(tail -3 "$tmp/node0.out" "$tmp/node1.out")"
done
pids=()
grep -q 'rank(s) that join the running job' "$tmp/node1.out" || fail "nodes: node 1 did not join"
# Together or one after the other, as they queued.
[[ $(grep -c 'joined generation [0-9]* as rank [23] of [34]' "$tmp/node1.out") -eq 2 ]] \
  || fail "nodes: not both joined: $(grep -i 'elastic\|launch' "$tmp/node1.out" | tail -4)"
grep -q 'this generation of 4 ranks goes on from step' "$tmp/node0.out" \
  || fail "nodes: the world did not grow to 4"
[[ -s $tmp/nodes.pt ]] || fail "nodes: no weights written"
echo "nodes: $(grep -o 'this generation of 4 ranks goes on from step [0-9]*' "$tmp/node0.out")"

# Refusals.
for bad in "--zero=1" "--sync_batchnorm" "--min_ranks=0" "--even_batches=false" \
  "--min_ranks=3 --max_ranks=2"; do
  "$train" --elastic $bad "${run[@]}" >"$tmp/bad.out" 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "--elastic $bad: exit $rc, want 2: $(tail -2 "$tmp/bad.out")"
  echo "--elastic $bad: $(tail -1 "$tmp/bad.out")"
done
for bad in "--join" "--elastic --join --rank=1 --dist_url=tcp://127.0.0.1:1" \
  "--elastic --join --dist_url=env://"; do
  "$train" $bad "${run[@]}" >"$tmp/bad.out" 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "$bad: exit $rc, want 2: $(tail -2 "$tmp/bad.out")"
  echo "$bad: $(tail -1 "$tmp/bad.out")"
done

finish
