#!/usr/bin/env bash
# The launch binary end to end: signals forwarded to every rank, ranks dying with a SIGKILLed
# launcher, real processes finding each other under it, two jobs side by side with --master_port=0,
# and a busy port named with the flag that moves it.
set -uo pipefail

launch=$1
probe=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test launch

# 1. SIGTERM to the launcher reaches every rank; the launcher exits 128+15.
"$launch" --nproc_per_node=2 --master_port=29998 -- /bin/sh -c \
  "trap 'echo TERM > $tmp/term.\$RANK; exit 0' TERM; echo \$\$ > $tmp/ready.\$RANK; while :; do sleep 0.05; done" \
  2>"$tmp/launch1.err" &
launcher=$!
pids+=("$launcher")
wait_until 10 test -e "$tmp/ready.0" -a -e "$tmp/ready.1" || fail "sigterm: ranks did not start"
kill -TERM "$launcher"
wait "$launcher"
rc=$?
[[ $rc -eq 143 ]] || fail "sigterm: launcher exited $rc, want 143: $(cat "$tmp/launch1.err")"
[[ -e $tmp/term.0 && -e $tmp/term.1 ]] || fail "sigterm: not every rank got SIGTERM"

# 2. A SIGKILLed launcher takes its ranks with it.
"$launch" --nproc_per_node=2 --master_port=29997 -- /bin/sh -c \
  "echo \$\$ > $tmp/pid.\$RANK; while :; do sleep 0.05; done" 2>/dev/null &
launcher=$!
pids+=("$launcher")
wait_until 10 test -e "$tmp/pid.0" -a -e "$tmp/pid.1" || fail "sigkill: ranks did not start"
kill -KILL "$launcher"
wait "$launcher" 2>/dev/null
for r in 0 1; do
  rank_pid=$(cat "$tmp/pid.$r")
  if ! wait_exit "$rank_pid" 5; then
    fail "sigkill: rank $r (pid $rank_pid) outlived the launcher"
    kill -9 "$rank_pid"
  fi
done

# 3. Real processes rendezvous under the launcher (env:// from its variables).
port=$(free_port)
"$launch" --nproc_per_node=4 --master_port="$port" -- "$probe" --bind_host=127.0.0.1 --timeout=60s \
  >"$tmp/probe.out" 2>"$tmp/probe.err"
rc=$?
[[ $rc -eq 0 ]] || fail "probe: launcher exited $rc: $(cat "$tmp/probe.err")"
lines=$(grep -c '"source":"torchrun"' "$tmp/probe.out")
[[ $lines -eq 4 ]] || fail "probe: want 4 ranks reporting torchrun, got $lines: $(cat "$tmp/probe.out")"

# 4. A command line without a program is refused with usage help.
"$launch" --nproc_per_node=2 2>"$tmp/noprog.err" && fail "no program: accepted"
grep -q "no program to launch" "$tmp/noprog.err" || fail "no program: $(cat "$tmp/noprog.err")"

# 5. Two jobs side by side on one host with --master_port=0: each launcher picks a free port of its
#    own and both succeed. The first job's rank 1 waits until the second job is done, so that the
#    first job's store is up the whole time.
"$launch" --nproc_per_node=2 --master_port=0 -- /bin/sh -c \
  "if [ \$RANK = 1 ]; then while [ ! -e $tmp/go ]; do sleep 0.05; done; fi; exec $probe --timeout=60s" \
  >"$tmp/jobA.out" 2>"$tmp/jobA.err" &
job_a=$!
pids+=("$job_a")
wait_for_text "$tmp/jobA.err" "a free port)" 10 || fail "port 0: job A did not start: $(cat "$tmp/jobA.err")"
"$launch" --nproc_per_node=2 --master_port=0 -- "$probe" --timeout=60s >"$tmp/jobB.out" 2>"$tmp/jobB.err"
rc=$?
touch "$tmp/go"
wait "$job_a"
rc_a=$?
pids=()
[[ $rc -eq 0 ]] || fail "port 0: job B exited $rc beside job A: $(cat "$tmp/jobB.err")"
[[ $rc_a -eq 0 ]] || fail "port 0: job A exited $rc_a: $(cat "$tmp/jobA.err")"
port_of() { sed -n 's/.*master 127\.0\.0\.1:\([0-9]*\), a free port).*/\1/p' "$1" | head -1; }
port_a=$(port_of "$tmp/jobA.err")
port_b=$(port_of "$tmp/jobB.err")
[[ -n $port_a && -n $port_b && $port_a != "$port_b" ]] ||
  fail "port 0: ports '$port_a' and '$port_b', want two different ones"
for job in jobA jobB; do
  lines=$(grep -c '"world_size":2' "$tmp/$job.out")
  [[ $lines -eq 2 ]] || fail "port 0: $job: want 2 ranks, got $lines: $(cat "$tmp/$job.out")"
done
"$launch" --nnodes=2 --master_port=0 -- true 2>"$tmp/port0_nodes.err" && fail "port 0: --nnodes=2 accepted"
grep -q -- "--master_port=0 (a free port) works on one node only" "$tmp/port0_nodes.err" ||
  fail "port 0 on two nodes: $(cat "$tmp/port0_nodes.err")"

# 6. A second job on a port in use: its rank 0 says so and names the flag that moves it. The port is
#    held by a plain listener, which no rank of the second job can join or end.
python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(60)' >"$tmp/holder.port" &
holder=$!
pids+=("$holder")
wait_until 10 test -s "$tmp/holder.port" || fail "clash: no listener"
port=$(cat "$tmp/holder.port")
"$launch" --nproc_per_node=2 --master_port="$port" -- "$probe" --timeout=20s >/dev/null \
  2>"$tmp/clash.err" && fail "clash: a second job started on a busy port"
grep -q "cannot listen on 127.0.0.1:$port: Address already in use; is another job" "$tmp/clash.err" &&
  grep -q -- "choose another port with --master_port (MASTER_PORT), or --master_port=0 for a free one" \
    "$tmp/clash.err" || fail "clash: unclear message: $(cat "$tmp/clash.err")"
stop_processes "$holder"
pids=()

# 7. Issue #29: --nproc_per_node=1000 started 1,000 ranks until the launcher was OOM-killed. It is
# refused at once, naming the bound, and nothing starts.
timeout 20 "$launch" --nproc_per_node=100000 -- /bin/sh -c "touch $tmp/started.\$RANK" \
  2>"$tmp/many.err"
rc=$?
[[ $rc -eq 2 ]] || fail "nproc_per_node=100000: exit $rc, want 2: $(cat "$tmp/many.err")"
grep -q -- "--nproc_per_node=100000: at most [0-9]* (" "$tmp/many.err" ||
  fail "nproc_per_node=100000: unclear message: $(cat "$tmp/many.err")"
compgen -G "$tmp/started.*" >/dev/null && fail "nproc_per_node=100000: ranks started"

finish
