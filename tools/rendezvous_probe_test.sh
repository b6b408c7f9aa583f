#!/usr/bin/env bash
# Real processes find each other on loopback through rendezvous_probe: every init method, under the
# variables of each launcher, and the startup failures that must end quickly with a clear message.
set -uo pipefail

probe=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test probe

# start NAME ENV... -- ARGS...: runs the probe in the background with a hard time limit.
start() {
  local name=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 60 "$probe" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
}

# check_world PREFIX N SOURCE: each PREFIX<r>.out is rank r of N, from SOURCE, with N peers.
check_world() {
  local prefix=$1 n=$2 source=$3
  for ((r = 0; r < n; r++)); do
    local out="$tmp/$prefix$r.out"
    python3 - "$out" "$r" "$n" "$source" <<'PY' || fail "$prefix$r: $(cat "$out" "${out%.out}.err")"
import json, sys
path, rank, n, source = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
w = json.load(open(path))
assert w["rank"] == rank, w
assert w["world_size"] == n, w
assert w["source"] == source, w
assert [p["rank"] for p in w["peers"]] == list(range(n)), w
assert len({p["pid"] for p in w["peers"]}) == n, w
PY
  done
}

# 1. env:// with torchrun's variables, 4 processes.
port=$(free_port)
for r in 0 1 2 3; do
  start "torchrun$r" RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port -- --bind_host=127.0.0.1
done
wait_all || fail "torchrun: a process failed"
check_world torchrun 4 torchrun

# 2. file:// with explicit ranks, 3 processes; the store file is gone afterwards.
for r in 0 1 2; do
  start "file$r" -- --dist_url="file://$tmp/store" --rank=$r --world_size=3
done
wait_all || fail "file: a process failed"
check_world file 3 explicit
[[ ! -e "$tmp/store" ]] || fail "file: the store file was left behind"

# 3. tcp:// under Open MPI's variables, 2 processes.
port=$(free_port)
for r in 0 1; do
  start "ompi$r" OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=$r \
    OMPI_COMM_WORLD_LOCAL_SIZE=2 -- --dist_url="tcp://127.0.0.1:$port" --bind_host=127.0.0.1
done
wait_all || fail "openmpi: a process failed"
check_world ompi 2 openmpi

# 4. env:// under Slurm's variables: the master is the first host of the node list.
port=$(free_port)
for r in 0 1; do
  start "slurm$r" SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_NODEID=0 \
    SLURM_TASKS_PER_NODE=2 SLURM_JOB_NODELIST=localhost MASTER_PORT=$port -- --bind_host=127.0.0.1
done
wait_all || fail "slurm: a process failed"
check_world slurm 2 slurm

# 5. A rank that never comes: the others stop within the timeout, naming it.
port=$(free_port)
start missing0 -- --dist_url="tcp://127.0.0.1:$port" --rank=0 --world_size=3 --timeout=1s \
  --bind_host=127.0.0.1
start missing1 -- --dist_url="tcp://127.0.0.1:$port" --rank=1 --world_size=3 --timeout=1s
begin=$(date +%s)
wait_all && fail "missing rank: the processes succeeded"
(( $(date +%s) - begin < 20 )) || fail "missing rank: took more than 20 s"
grep -q "2/3 ranks joined; missing: rank 2" "$tmp/missing0.err" ||
  fail "missing rank: rank 0 said: $(cat "$tmp/missing0.err")"

# 6. A busy port: the master says so at once.
port=$(free_port)
start busy0 -- --dist_url="tcp://127.0.0.1:$port" --rank=0 --world_size=2 --bind_host=127.0.0.1
sleep 0.5
env timeout 20 "$probe" --dist_url="tcp://127.0.0.1:$port" --rank=0 --world_size=2 \
  --bind_host=127.0.0.1 >"$tmp/busy_second.out" 2>"$tmp/busy_second.err" &&
  fail "busy port: a second master started"
grep -q "already in use" "$tmp/busy_second.err" ||
  fail "busy port: unclear message: $(cat "$tmp/busy_second.err")"
start busy1 -- --dist_url="tcp://127.0.0.1:$port" --rank=1 --world_size=2
wait_all || fail "busy port: the original pair failed"

# 7. Bad input: a clear message and a non-zero exit, at once.
"$probe" --dist_url="udp://x:1" >/dev/null 2>"$tmp/bad.err" && fail "bad url accepted"
grep -q "udp://x:1" "$tmp/bad.err" || fail "bad url not quoted: $(cat "$tmp/bad.err")"
RANK=abc WORLD_SIZE=2 "$probe" >/dev/null 2>"$tmp/bad.err" && fail "RANK=abc accepted"
grep -q "RANK" "$tmp/bad.err" || fail "RANK=abc not named: $(cat "$tmp/bad.err")"

# 8. Issue #29: a huge world size, and the timeout still holds: WORLD_SIZE=1000000 with --timeout=5s
# took 28 to 43 s (every rank's key sent per wait, then checked one by one). A bound of 10x the
# timeout, for a noisy machine.
port=$(free_port)
WORLD_SIZE=1000000 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  timeout 10 "$probe" --timeout=1s --bind_host=127.0.0.1 >/dev/null 2>"$tmp/huge.err"
rc=$?
(( rc != 0 && rc != 124 )) || fail "huge world: exit $rc (124: past 10x the timeout): $(cat "$tmp/huge.err")"
grep -q "(timeout 1s): 1/1000000 ranks joined; missing: rank 1, " "$tmp/huge.err" ||
  fail "huge world: unclear message: $(cat "$tmp/huge.err")"
# Above the cap on a job's ranks: refused before any store starts.
WORLD_SIZE=2000000 RANK=0 "$probe" >/dev/null 2>"$tmp/huge.err" && fail "WORLD_SIZE=2000000 accepted"
grep -q "WORLD_SIZE=2000000: at most 1048576" "$tmp/huge.err" ||
  fail "WORLD_SIZE=2000000: unclear message: $(cat "$tmp/huge.err")"

finish
