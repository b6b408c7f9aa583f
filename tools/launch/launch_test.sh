#!/usr/bin/env bash
# The launch binary end to end: signals forwarded to every rank, ranks dying with a SIGKILLed
# launcher, and real processes finding each other under it.
set -uo pipefail

launch=$1
probe=$2
source "${TEST_SRCDIR}/dtrain/tools/testing/shell_test_lib.sh"
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

finish
