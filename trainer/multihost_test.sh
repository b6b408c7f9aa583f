#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, two ranks in each, Gloo
# across them with the master on the first host's address and GLOO_SOCKET_IFNAME choosing the
# interface. The result must equal the same training with four ranks on one host. Needs root and
# iproute2 (`ip netns`); skips with the reason elsewhere.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/dtrain/tools/testing/shell_test_lib.sh"
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"

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

args=(--train_limit=2048 --val_limit=500 --batch_size=32 --epochs=1 --timeout=60s --progress=none)

# Four ranks on one host: the reference.
timeout 120 "$train" --nproc_per_node=4 --master_port=29571 "${args[@]}" \
  --metrics_json="$tmp/single.json" >/dev/null 2>"$tmp/single.err" \
  || fail "single host: $(tail -5 "$tmp/single.err")"

# Two ranks on each host; rank 0 (and its store) on host a.
for node in 0 1; do
  ns=$a; ifname="va$$"
  [[ $node -eq 1 ]] && ns=$b && ifname="vb$$"
  ip netns exec "$ns" env GLOO_SOCKET_IFNAME="$ifname" timeout 120 "$launch" --nnodes=2 \
    --node_rank=$node --nproc_per_node=2 --master_addr=10.213.0.1 --master_port=29572 -- \
    "$train" "${args[@]}" --metrics_json="$tmp/multi$node.json" \
    >"$tmp/node$node.out" 2>"$tmp/node$node.err" &
  pids+=($!)
done
wait_all || fail "a node failed: $(tail -5 "$tmp/node0.err" "$tmp/node1.err")"

if [[ -f $tmp/multi0.json && -f $tmp/single.json ]]; then
  [[ $(json "$tmp/multi0.json" 'm["config"]["world_size"]') == 4 ]] || fail "multi-host world size"
  want=$(json "$tmp/single.json" 'repr(m["epochs"][-1]["val_loss"])')
  got=$(json "$tmp/multi0.json" 'repr(m["epochs"][-1]["val_loss"])')
  [[ $want == "$got" ]] || fail "two hosts end at val_loss $got, one host at $want"
else
  fail "no metrics from both runs"
fi

finish
