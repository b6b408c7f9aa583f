#!/usr/bin/env bash
# The scaling sweep on a simulated cluster (experiments/sim_cluster.sh), tiny: 2 hosts, links shaped
# to 1gbit then 10gbit, one Gloo run (3 steps, the sweep's default batch) and its no-communication
# bound at each. Checks the combined CSV (link_rate, hosts, ranks per host, the default batch, no
# failed run, a bound measured), node 0's table shown live at both rates, that the links really are
# shaped (tbf at 1Gbit on both ends of both links while it runs and in the statistics after,
# traffic through them, one TCP stream well under an unshaped veth's speed) and that nothing is
# left behind: after a normal run, after SIGINT and SIGTERM to the command mid-training, and after
# a host's sweep dies. Also the clear errors: not root, --delay without netem, a flag the command
# sets itself. Needs root, iproute2 (ip, tc with tbf), network and PID namespaces; skips with the
# reason elsewhere. The documented commands themselves: sim_cluster_commands_test.sh.
set -uo pipefail

sim=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test sim_cluster

# Not root: the command says so (a copy of it, run as nobody, who may not read the runfiles).
if command -v setpriv >/dev/null; then
  copy=$(mktemp -d /tmp/sim_cluster_test.XXXXXX)
  chmod 755 "$copy"
  cp -L "$sim" "$copy/sim_cluster.sh"
  chmod 755 "$copy/sim_cluster.sh"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$copy/sim_cluster.sh" --scaling=/bin/true \
    >"$tmp/nonroot.out" 2>&1
  rc=$?
  rm -rf "$copy"
  [[ $rc -ne 0 ]] || fail "not root: exit 0"
  grep -q 'must run as root' "$tmp/nonroot.out" || fail "not root: no clear message: $(cat "$tmp/nonroot.out")"
fi

# Issue #29: more ranks than this machine runs are refused before anything starts (as any user).
"$sim" --hosts=2 --ranks_per_host=100000 --scaling=/bin/true >"$tmp/many.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "--ranks_per_host=100000: exit $rc, want 2: $(cat "$tmp/many.out")"
grep -q -- "--ranks_per_host=100000: 2 hosts x 100000 ranks run on this machine: at most" "$tmp/many.out" ||
  fail "--ranks_per_host=100000: unclear message: $(cat "$tmp/many.out")"

[[ $(id -u) -eq 0 ]] || skip "needs root to create network and PID namespaces"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
command -v tc >/dev/null || skip "tc (iproute2) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
probe="dtrain_simtest_$$"
extra_cleanup() { ip netns del "$probe" 2>/dev/null; }
ip netns add "$probe" 2>"$tmp/probe.err" || skip "cannot create a network namespace: $(cat "$tmp/probe.err")"
ip -n "$probe" link set lo up
tc -n "$probe" qdisc add dev lo root tbf rate 1gbit burst 128kb latency 10ms 2>"$tmp/probe.err" \
  || skip "tc cannot add a tbf qdisc: $(cat "$tmp/probe.err")"
tc -n "$probe" qdisc del dev lo root
netem=0
tc -n "$probe" qdisc add dev lo root netem delay 1ms 2>/dev/null && netem=1
ip netns exec "$probe" unshare --pid --fork --kill-child --mount-proc true 2>"$tmp/probe.err" \
  || skip "cannot create a PID namespace: $(cat "$tmp/probe.err")"
ip netns del "$probe"

# No --batch_sizes: the sweep's default (128 / world size per process) must fit the world sizes the
# command passes, as in the documented commands.
sweep=(--models=convnet --backends=gloo --train_limit=512 --no_plots --run_timeout=60s)

# The namespaces of the command whose output is $1 (their prefix names its pid), once it made them.
prefix_of() { sed -n 's/.* hosts \(dtrain_sim_[0-9]*_\)host0\.\..*/\1/p' "$1" | head -1; }
leftovers() { ip netns list | grep "^$1"; }

# --- A normal run -------------------------------------------------------------------------------

out=$tmp/out
timeout 240 "$sim" --hosts=2 --rates=1gbit,10gbit --ranks_per_host=1 --output_dir="$out" -- "${sweep[@]}" \
  --max_steps=3 >"$tmp/run.out" 2>&1 &
pids+=($!)
run=$!
# While it runs: tbf at the rate on host 0's link.
if wait_for_text "$tmp/run.out" 'links shaped to 1gbit' 60; then
  prefix=$(prefix_of "$tmp/run.out")
  shown=$(tc -n "${prefix}host0" qdisc show dev eth0 2>&1)
  [[ $shown == *tbf*"rate 1Gbit"* ]] || fail "host 0's link while running: $shown"
else
  fail "the links were never shaped: $(tail -5 "$tmp/run.out")"
fi
wait "$run"
rc=$?
pids=()
[[ $rc -eq 0 ]] || fail "exit $rc: $(tail -20 "$tmp/run.out")"

csv=$out/combined.csv
if [[ -f $csv ]]; then
  got=$(python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(len(rows), *(f"{r[k]}" for r in rows for k in
      ("link_rate", "hosts", "ranks_per_host", "implementation", "world_size", "batch_size", "failed")),
      all(r["no_comm_samples_per_second"] for r in rows))' "$csv")
  [[ $got == "2 1gbit 2 1 dtrain 2 64 0 10gbit 2 1 dtrain 2 64 0 True" ]] \
    || fail "combined.csv: '$got', want a dtrain row per rate, 2 hosts x 1 rank, the default batch 64," \
      "not failed, with a bound: $(cat "$csv")"
else
  fail "no combined.csv: $(tail -20 "$tmp/run.out")"
fi
grep -q '^link .*ranks/host' "$tmp/run.out" || fail "no combined table printed: $(tail -20 "$tmp/run.out")"
[[ $(grep -c '^impl .*samples/s' "$tmp/run.out") -eq 2 ]] || fail "node 0's table not shown for both rates"
# The hosts share this machine's cores: node 0's table and the combined one say so.
grep -q "^machine: [0-9]* cores\?.*, shared by all 2 nodes (one machine)" "$out/1gbit/table.txt" \
  || fail "node 0's table.txt does not say the hosts share the cores: $(head -3 "$out/1gbit/table.txt")"
grep -q "^every host shares this machine's [0-9]* cores" "$tmp/run.out" \
  || fail "the combined table does not name the cores: $(tail -5 "$tmp/run.out")"
for rate in 1gbit 10gbit; do
  [[ -f $out/$rate/results.json && -d $out/$rate/node1/logs ]] \
    || fail "$rate: node 0's results or node 1's logs missing"
done

# The statistics after the sweep: tbf at 1Gbit on both switch ports and both hosts, with traffic.
q=$out/1gbit/qdisc.txt
for dev in p0 p1; do
  grep -q "tbf .* dev $dev root .*rate 1Gbit" "$q" || fail "switch port $dev not shaped: $(cat "$q")"
done
[[ $(grep -c 'tbf .* root .*rate 1Gbit' "$q") -eq 4 ]] || fail "not 4 shaped link ends: $(cat "$q")"
sent=$(awk '/^qdisc tbf/ { t = 1; next } t && /Sent/ { s += $2; t = 0 } END { print s + 0 }' "$q")
[[ $sent -gt 1000000 ]] || fail "only $sent bytes went through the shaped links: $(cat "$q")"
# One TCP stream: near 1 Gbit/s shaped, over 10 unshaped on any machine; the bound leaves room for
# tbf's bucket, never for an unshaped link.
gbit=$(awk 'NR == 1 { print $1 }' "$out/1gbit/link_check.txt")
python3 -c 'import sys; sys.exit(not 0 < float(sys.argv[1]) < 1.5)' "${gbit:-0}" \
  || fail "one stream over the 1gbit link: ${gbit:-nothing} Gbit/s: $(cat "$out/1gbit/link_check.txt")"
echo "link check at 1gbit: $gbit Gbit/s"
[[ -n ${prefix:-} && -z $(leftovers "$prefix") ]] || fail "namespaces left after a normal run: $(ip netns list)"
grep -q 'removed 3 namespaces' "$tmp/run.out" || fail "does not say it removed the namespaces"

# --- Interrupted, and a host that dies ----------------------------------------------------------

has_train() { ip netns pids "$1" | xargs -r -I{} cat /proc/{}/comm 2>/dev/null | grep -qx train; }

# interrupt NAME WANT COMMAND...: starts a long sweep, waits until both hosts train, runs COMMAND
# with the command's pid appended, then checks that it ended with exit WANT within 30 s, leaving no
# namespace and none of the processes its hosts had.
interrupt() {
  local name=$1 want=$2 prefix driver inside=() p left
  shift 2
  # A background job starts with SIGINT ignored; coreutils 9.10's timeout passes that on (9.1's did
  # not). The sweep gets SIGINT's default back, as from a terminal.
  (
    trap - INT QUIT
    exec timeout 200 "$sim" --hosts=2 --rates=1gbit --link_check=0 --output_dir="$tmp/$name" -- \
      "${sweep[@]}" --train_limit=60000 --max_steps=100000
  ) >"$tmp/$name.out" 2>&1 &
  pids+=($!)
  local run=$!
  wait_for_text "$tmp/$name.out" 'links shaped' 60 || {
    fail "$name: the cluster never came up: $(tail -5 "$tmp/$name.out")"
    return
  }
  prefix=$(prefix_of "$tmp/$name.out")
  driver=${prefix#dtrain_sim_}
  driver=${driver%_}
  wait_until 60 has_train "${prefix}host1" || fail "$name: host 1 never started training"
  for p in $(ip netns pids "${prefix}host0") $(ip netns pids "${prefix}host1"); do inside+=("$p"); done
  "$@" "$driver"
  wait_exit "$run" 30 || fail "$name: still running 30 s later"
  wait "$run"
  local rc=$?
  pids=()
  [[ $rc -eq $want ]] || fail "$name: exit $rc, want $want: $(tail -5 "$tmp/$name.out")"
  left=$(leftovers "$prefix")
  [[ -z $left ]] || fail "$name: namespaces left: $left"
  for p in "${inside[@]}"; do
    running "$p" && fail "$name: process $p ($(cat "/proc/$p/comm" 2>/dev/null)) still runs"
  done
  echo "$name: exit $rc, ${#inside[@]} processes in the hosts before, none after, no namespace left"
}
interrupt sigint 130 kill -INT
grep -q 'interrupted by SIGINT' "$tmp/sigint.out" || fail "SIGINT: not said: $(tail -5 "$tmp/sigint.out")"
interrupt sigterm 143 kill -TERM
# Host 1's scaling (the init of its PID namespace) killed: the command stops host 0 and says why.
# ($prefix is interrupt's: bash's locals are seen by the functions it calls.)
kill_host1() {
  local p
  for p in $(ip netns pids "${prefix}host1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == scaling ]] && kill -KILL "$p"
  done
}
interrupt host_dies 1 kill_host1
grep -q "host 1's sweep failed" "$tmp/host_dies.out" \
  || fail "a dead host: not said: $(tail -5 "$tmp/host_dies.out")"

# --- Clear errors -------------------------------------------------------------------------------

"$sim" --delay=100us --output_dir="$tmp/delay" -- "${sweep[@]}" >"$tmp/delay.out" 2>&1
rc=$?
if [[ $netem -eq 0 ]]; then
  [[ $rc -ne 0 ]] || fail "--delay without netem: exit 0"
  grep -q 'needs the netem qdisc' "$tmp/delay.out" || fail "--delay without netem: $(cat "$tmp/delay.out")"
  grep -q 'removed 1 namespaces' "$tmp/delay.out" || fail "--delay: the probe's namespace not removed"
else
  echo "this kernel has netem: the missing-netem error is not checked"
fi
"$sim" -- --world_sizes=2 >"$tmp/flag.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "--world_sizes after --: exit $rc, want 2"
grep -q "'--world_sizes=2' is set by" "$tmp/flag.out" || fail "--world_sizes: $(cat "$tmp/flag.out")"

finish
