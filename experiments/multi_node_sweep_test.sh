#!/usr/bin/env bash
# The scaling sweep over two nodes, as on two hosts but on loopback: two scaling processes with the
# same flags but --node_rank (0 and 1), --nnodes=2, master 127.0.0.1. Node 0 measures world sizes 2
# and 4 (1 process cannot spread over 2 nodes) and writes the table and results; node 1 takes part
# in every run and writes no table. Also: bad multi-node flags exit 2 naming the flag.
set -uo pipefail

scaling=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

# The cleanup's SIGTERM reaches `timeout`, which passes it on to scaling; a scaling that dies takes
# its run's launcher with it (and the launcher its ranks).
start_test multi_node_sweep

# Run slot i rendezvouses on port + i (six slots: three world sizes, with and without sync).
port=$(free_ports 6)
common=(--models=convnet --backends=gloo --world_sizes=1,2,4 --batch_sizes=32 --max_steps=3
  --train_limit=512 --no_plots --run_timeout=120s --nnodes=2 --master_addr=127.0.0.1
  --master_port="$port")
for node in 0 1; do
  timeout 300 "$scaling" "${common[@]}" --node_rank="$node" --output_dir="$tmp/node$node" \
    >"$tmp/node$node.out" 2>"$tmp/node$node.err" &
  pids+=("$!")
done
wait "${pids[0]}"
rc0=$?
wait "${pids[1]}"
rc1=$?
pids=()

# Node 0: the table and results for np=2 and np=4, each measured with and without sync.
if [[ $rc0 -ne 0 ]]; then
  fail "node 0: exit $rc0: $(tail -5 "$tmp/node0.err")"
fi
csv=$tmp/node0/results.csv
if [[ ! -f $csv ]]; then
  fail "node 0 wrote no results.csv: $(tail -5 "$tmp/node0.err")"
else
  sizes=$(python3 -c 'import csv,sys; print(" ".join(r["world_size"] for r in csv.DictReader(open(sys.argv[1]))))' "$csv")
  [[ $sizes == "2 4" ]] || fail "node 0's results.csv has world sizes '$sizes', want '2 4': $(cat "$csv")"
  failed=$(python3 -c 'import csv,sys; print(sum(int(r["failed"]) for r in csv.DictReader(open(sys.argv[1]))))' "$csv")
  [[ $failed == 0 ]] || fail "node 0: $failed failed run(s): $(cat "$csv")"
  [[ $(json "$tmp/node0/results.json" 'm["results"][0]["no_comm_samples_per_second"] is not None') == True ]] \
    || fail "node 0: no no-communication bound measured"
fi
grep -q 'samples/s' "$tmp/node0.out" || fail "node 0 printed no table: $(cat "$tmp/node0.out")"
grep -q 'skipped np=1: world size 1 does not spread evenly over 2 nodes' "$tmp/node0.out" \
  || fail "node 0 does not say why np=1 was skipped: $(cat "$tmp/node0.out")"

# Node 1: took part in the same 4 runs (its ranks are 2-3 of 4 in the np=4 runs), wrote no table.
[[ $rc1 -eq 0 ]] || fail "node 1: exit $rc1: $(tail -5 "$tmp/node1.err")"
for f in results.csv results.json plots; do
  [[ ! -e $tmp/node1/$f ]] || fail "node 1 wrote $f"
done
grep -q 'samples/s' "$tmp/node1.out" && fail "node 1 printed a table: $(cat "$tmp/node1.out")"
grep -q 'node 1 took part in 4 runs (0 failed)' "$tmp/node1.out" \
  || fail "node 1 does not say it took part: $(cat "$tmp/node1.out")"
grep -q 'starting ranks 2-3 of 4 (node 1 of 2' "$tmp/node1/logs/dtrain_gloo_convnet_np4_bs32_sync_r0.log" \
  || fail "node 1 did not run ranks 2-3 of the np=4 run"

# Bad flags fail before any training, naming the flag.
check_bad() {
  local want=$1
  shift
  timeout 60 "$scaling" --models=convnet --output_dir="$tmp/bad" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err" &
  pids+=("$!")
  wait "${pids[0]}"
  local rc=$?
  pids=()
  [[ $rc -eq 2 ]] || fail "$*: exit $rc, want 2"
  grep -q -- "$want" "$tmp/bad.err" || fail "$*: message does not name $want: $(cat "$tmp/bad.err")"
}
check_bad --master_addr --nnodes=2 --node_rank=1
check_bad --node_rank --nnodes=2 --node_rank=2 --master_addr=127.0.0.1

finish
