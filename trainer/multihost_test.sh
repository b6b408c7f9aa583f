#!/usr/bin/env bash
# Two "hosts" on one machine, each in its own network, PID and mount namespaces (so each sees only its
# own processes, as a real host does), joined by a veth pair; two ranks on each, the master on the
# first host's address and GLOO_SOCKET_IFNAME choosing the interface. With shared memory on (the
# default) the ranks of each host reduce through shared memory and the two leaders over Gloo: the
# metrics must say "gloo+shm", every rank must end with identical parameters, and the result must
# match four ranks on one host to float tolerance (the order of additions differs). With
# --shm=false, Gloo over TCP everywhere, the result must equal four Gloo ranks on one host exactly.
# Then a rank of the second host is SIGKILLed mid-training: both hosts' jobs end non-zero well within
# the timeout, and the second host's output names the dead rank and the step that saw it.
# Needs root and iproute2 (`ip netns`) and util-linux's unshare; skips with the reason elsewhere.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
[[ $(id -u) -eq 0 ]] || skip "needs root to create network and PID namespaces"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"

a="dtrain_a_$$"
b="dtrain_b_$$"
extra_cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
}
start_test multihost

ip netns add "$a" 2>"$tmp/netns.err" || skip "cannot create a network namespace: $(cat "$tmp/netns.err")"
ip netns add "$b" || skip "cannot create a second network namespace"
ip link add "va$$" type veth peer name "vb$$" || skip "cannot create a veth pair"
ip link set "va$$" netns "$a"
ip link set "vb$$" netns "$b"
ip -n "$a" addr add 10.213.0.1/24 dev "va$$"
ip -n "$b" addr add 10.213.0.2/24 dev "vb$$"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "va$$" up
ip -n "$b" link set "vb$$" up
ip netns exec "$a" unshare --pid --fork --kill-child --mount-proc true 2>"$tmp/pidns.err" \
  || skip "cannot create a PID namespace: $(cat "$tmp/pidns.err")"

# SGD rather than the book's Adadelta: Adadelta's normalised steps turn the last-bit differences of
# another order of additions into percent-level ones within 16 steps; SGD keeps them at that level.
args=(--train_limit=2048 --val_limit=500 --batch_size=32 --epochs=1 --timeout=60s --progress=none
  --optimizer=sgd --lr=0.05 --momentum=0.9)

# Four ranks on one host: the references, with and without shared memory.
for shm in true false; do
  timeout 120 "$train" --nproc_per_node=4 --master_port="$(free_port)" --shm=$shm "${args[@]}" \
    --metrics_json="$tmp/single_$shm.json" >/dev/null 2>"$tmp/single_$shm.out" \
    || fail "single host, --shm=$shm: $(tail -5 "$tmp/single_$shm.out")"
done

# Two ranks on each host; rank 0 (and its store) on host a. When unshare's child (the PID
# namespace's init) ends, the kernel kills whatever is left in that namespace.
two_hosts() {
  local name=$1 shm=$2 port=$3 node ns ifname
  shift 3
  for node in 0 1; do
    ns=$a; ifname="va$$"
    [[ $node -eq 1 ]] && ns=$b && ifname="vb$$"
    # timeout outside the namespace: coreutils 9.10's exits 125 as a PID namespace's first process.
    timeout -k 5 120 ip netns exec "$ns" unshare --pid --fork --kill-child --mount-proc \
      env GLOO_SOCKET_IFNAME="$ifname" "$launch" --nnodes=2 \
      --node_rank=$node --nproc_per_node=2 --master_addr=10.213.0.1 --master_port="$port" -- \
      "$train" "${args[@]}" "$@" --shm="$shm" --metrics_json="$tmp/multi_${name}_$node.json" \
      >"$tmp/node${node}_$name.out" 2>&1 &
    pids+=($!)
  done
}
two_hosts true true 29572
wait_all || fail "--shm=true: a node failed: $(tail -n 5 "$tmp/node0_true.out" "$tmp/node1_true.out")"
two_hosts false false 29573
wait_all || fail "--shm=false: a node failed: $(tail -n 5 "$tmp/node0_false.out" "$tmp/node1_false.out")"

# The kill: rank 3 is the train process in host b's network namespace whose environment says RANK=3.
rank_pid() {
  local p
  for p in $(ip netns pids "$b" 2>/dev/null); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == train ]] || continue
    # No pipe: under pipefail, grep -q leaving early can fail the pipeline (tr's SIGPIPE).
    grep -qxz "RANK=$1" "/proc/$p/environ" 2>/dev/null && echo "$p" && return 0
  done
  return 1
}
two_hosts kill true 29574 --train_limit=60000 --epochs=3 --skip_validation --timeout=30s
wait_for_text "$tmp/node0_kill.out" "Begin training" 60 || fail "kill: training never began"
sleep 1
victim=$(rank_pid 3) || fail "kill: no rank 3 in host b"
start=$(date +%s)
[[ -n $victim ]] && kill -KILL "$victim"
for pid in "${pids[@]}"; do
  wait "$pid" && fail "kill: a host's job exited 0 after rank 3 was killed"
done
pids=()
took=$(($(date +%s) - start))
[[ $took -lt 30 ]] || fail "kill: the job took ${took}s to end, the timeout is 30s"
grep -q 'rank 3' "$tmp/node1_kill.out" || fail "kill: host b does not name rank 3: $(tail -5 "$tmp/node1_kill.out")"
grep -q 'local ranks 0..1 are ranks 2, 3' "$tmp/node1_kill.out" \
  || fail "kill: host b's error does not map its local ranks: $(tail -5 "$tmp/node1_kill.out")"
echo "kill: both hosts ended ${took}s after rank 3 was killed"
echo "host a:"; cat "$tmp/node0_kill.out"
echo "host b:"; cat "$tmp/node1_kill.out"

have() { [[ -f $1 ]] || { fail "no metrics $1"; return 1; }; }
if have "$tmp/multi_true_0.json" && have "$tmp/single_true.json"; then
  m=$tmp/multi_true_0.json
  [[ $(json "$m" 'm["config"]["world_size"]') == 4 ]] || fail "multi-host world size"
  [[ $(json "$m" 'm["backend"]') == gloo+shm ]] \
    || fail "two hosts with shared memory ran '$(json "$m" 'm["backend"]')', want gloo+shm"
  [[ $(json "$tmp/single_true.json" 'm["backend"]') == gloo+shm ]] \
    || fail "one host with shared memory ran '$(json "$tmp/single_true.json" 'm["backend"]')', want gloo+shm"
  [[ $(json "$m" 'm["ranks_identical"]') == True ]] || fail "gloo+shm: ranks ended with different parameters"
  close=$(python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["epochs"][-1]["val_loss"]
b = json.load(open(sys.argv[2]))["epochs"][-1]["val_loss"]
print(abs(a - b) <= 1e-5 * abs(b), a, b)' "$m" "$tmp/single_true.json")
  [[ $close == True* ]] || fail "gloo+shm on two hosts and shm on one end at val_loss far apart: $close"
fi
if have "$tmp/multi_false_0.json" && have "$tmp/single_false.json"; then
  [[ $(json "$tmp/multi_false_0.json" 'm["backend"]') == gloo ]] || fail "--shm=false did not run gloo"
  want=$(json "$tmp/single_false.json" 'repr(m["epochs"][-1]["val_loss"])')
  got=$(json "$tmp/multi_false_0.json" 'repr(m["epochs"][-1]["val_loss"])')
  [[ $want == "$got" ]] || fail "gloo on two hosts ends at val_loss $got, on one host at $want"
fi

finish
