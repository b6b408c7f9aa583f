#!/usr/bin/env bash
# The train binary as users run it, with real processes on loopback: spawning its own ranks, under
# the launcher with file://, with explicit ranks over tcp://, stopping and resuming, failing clearly on
# bad flags and missing data, a graceful stop by SIGTERM, and a killed rank restarted without lost
# work.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test train

# A small but real run: 1,024 Fashion-MNIST examples, 2 ranks of batch 64, 300 test examples.
small=(--train_limit=1024 --val_limit=300 --batch_size=64 --timeout=60s)

# 1. The binary spawns its own ranks (--nproc_per_node), as torch.multiprocessing.spawn.
port=$(free_port)
timeout 120 "$train" --nproc_per_node=2 --master_port="$port" "${small[@]}" --progress=lines \
  --print_freq=2 --metrics_json="$tmp/spawn.json" --checkpoint_dir="$tmp/spawn_ck" \
  --log_jsonl="$tmp/spawn.jsonl" --metrics_port=0 --metrics_bind=127.0.0.1 \
  >"$tmp/spawn.out" 2>"$tmp/spawn.err"
rc=$?
if [[ $rc -ne 0 ]]; then
  fail "spawn: exit $rc: $(tail -5 "$tmp/spawn.err")"
else
  [[ $(json "$tmp/spawn.json" 'm["config"]["world_size"]') == 2 ]] || fail "spawn: world size"
  [[ $(json "$tmp/spawn.json" 'm["epochs"][0]["samples"]') == 1024 ]] || fail "spawn: samples"
  [[ $(json "$tmp/spawn.json" 'm["epochs"][0]["steps"]') == 8 ]] || fail "spawn: steps"
  [[ $(json "$tmp/spawn.json" 'int(m["epochs"][0]["val_top1"] > 30)') == 1 ]] \
    || fail "spawn: validation top-1 not above 30%: $(cat "$tmp/spawn.json")"
  grep -q 'Epoch: \[0\]\[2/8\]' "$tmp/spawn.err" || fail "spawn: no progress lines"
  [[ $(grep -c 'Epoch: \[0\]\[2/8\]' "$tmp/spawn.err") == 1 ]] || fail "spawn: a rank other than 0 printed"
  ls "$tmp/spawn_ck"/checkpoint-*.dtc >/dev/null 2>&1 || fail "spawn: no checkpoint written"
  # Rank 0 alone logs JSON lines (batches 0, 2, 4, 6 and the epoch) and serves live metrics.
  lines=$(python3 -c 'import json,sys; l=[json.loads(x) for x in open(sys.argv[1])]
print(len(l), sum(x["event"] == "step" for x in l), sorted({x["rank"] for x in l}))' "$tmp/spawn.jsonl")
  [[ $lines == "5 4 [0]" ]] || fail "spawn: --log_jsonl lines (count, steps, ranks): $lines"
  [[ $(grep -c 'live metrics on http://127.0.0.1:' "$tmp/spawn.err") == 1 ]] \
    || fail "spawn: want one 'live metrics on' line: $(grep 'live metrics' "$tmp/spawn.err")"
  json "$tmp/spawn.json" 'm["metrics_url"]' | grep -q '^http://127.0.0.1:[0-9]*/metrics$' \
    || fail "spawn: metrics_url in the metrics JSON"
fi

# 2. Under the launcher, meeting through a file (file://).
port=$(free_port)
timeout 120 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" \
  --dist_url="file://$tmp/store" "${small[@]}" --max_steps=3 --skip_validation \
  --metrics_json="$tmp/file.json" >"$tmp/file.out" 2>"$tmp/file.err"
rc=$?
[[ $rc -eq 0 ]] || fail "file://: exit $rc: $(tail -5 "$tmp/file.err")"
[[ $rc -ne 0 ]] || [[ $(json "$tmp/file.json" 'm["global_step"]') == 3 ]] || fail "file://: steps"

# 3. Explicit ranks over tcp://, each process started by hand.
port=$(free_port)
for r in 0 1; do
  timeout 120 "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r \
    "${small[@]}" --max_steps=2 --skip_validation >"$tmp/tcp$r.out" 2>"$tmp/tcp$r.err" &
  pids+=($!)
done
wait_all || fail "tcp://: a rank failed: $(tail -n 5 "$tmp/tcp0.err" "$tmp/tcp1.err")"

# 4. Stopped at step 5 and resumed, a run ends exactly where an uninterrupted one does.
run() {  # run NAME ARGS...
  local name=$1; shift
  local p; p=$(free_port)
  timeout 120 "$train" --nproc_per_node=2 --master_port="$p" "${small[@]}" --epochs=2 \
    --progress=none "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || fail "$name: $(tail -5 "$tmp/$name.err")"
}
run whole --metrics_json="$tmp/whole.json"
run part --checkpoint_dir="$tmp/ck" --max_steps=5
run rest --checkpoint_dir="$tmp/ck" --resume --metrics_json="$tmp/rest.json"
grep -q 'resumed from' "$tmp/rest.err" || fail "resume: no 'resumed from' line: $(cat "$tmp/rest.err")"
whole_loss=$(json "$tmp/whole.json" 'repr(m["epochs"][-1]["val_loss"])')
rest_loss=$(json "$tmp/rest.json" 'repr(m["epochs"][-1]["val_loss"])')
[[ -n $whole_loss && $whole_loss == "$rest_loss" ]] \
  || fail "resume: final validation loss $rest_loss, uninterrupted $whole_loss"

# 5. Bad flags exit 2 naming the flag; missing data exits 1 naming the path.
"$train" --batch_size=0 >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[[ $rc -eq 2 ]] || fail "bad flag: exit $rc, want 2"
grep -q -- '--batch_size' "$tmp/bad.err" || fail "bad flag: message: $(cat "$tmp/bad.err")"
timeout 60 "$train" --dataset=mnist --data_dir=/nonexistent/mnist >"$tmp/nodata.out" 2>"$tmp/nodata.err"
rc=$?
[[ $rc -eq 1 ]] || fail "missing data: exit $rc, want 1"
grep -q '/nonexistent/mnist' "$tmp/nodata.err" || fail "missing data: message: $(cat "$tmp/nodata.err")"

# Live metrics: each flag in --help; a bad value exits 2; a busy port exits 1 naming it.
"$train" --help >"$tmp/help.out" 2>&1
for flag in metrics_port metrics_ranks metrics_bind metrics_run_id log_jsonl; do
  grep -q -- "--$flag " "$tmp/help.out" || fail "--help does not list --$flag"
done
# --help groups the flags by section: each flag under its section's heading.
section_of() {  # section_of FLAG: the heading --help lists it under
  awk -v f="    --$1 " '/Flags from/ {s=$3} index($0, f) == 1 {print s; exit}' "$tmp/help.out"
}
for pair in model:model dataset:data batch_size:data lr:optimizer amp:optimizer \
    bucket_cap_mb:data_parallel checkpoint_dir:checkpoint metrics_json:report \
    dist_url:launch store_bind:launch nproc_per_node:spawn seed:run; do
  want="trainer/flags/${pair#*:}_flags.cc:"
  got=$(section_of "${pair%%:*}")
  [[ $got == "$want" ]] || fail "--help lists --${pair%%:*} under '$got', want '$want'"
done
"$train" --metrics_ranks=some >"$tmp/bad_ranks.out" 2>"$tmp/bad_ranks.err"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- '--metrics_ranks' "$tmp/bad_ranks.err" \
  || fail "bad --metrics_ranks: exit $rc: $(cat "$tmp/bad_ranks.err")"
busy=$(free_port)
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(); print("listening", flush=True); time.sleep(120)' "$busy" >"$tmp/holder.out" &
pids+=($!)
wait_for_text "$tmp/holder.out" listening 30 || fail "busy port: the holder did not listen"
timeout 60 "$train" "${small[@]}" --max_steps=1 --skip_validation --metrics_port="$busy" \
  --metrics_bind=127.0.0.1 >"$tmp/busy.out" 2>"$tmp/busy.err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "cannot serve metrics on 127.0.0.1:$busy: Address already in use" "$tmp/busy.err" \
  || fail "busy --metrics_port: exit $rc: $(cat "$tmp/busy.err")"

# 6. SIGTERM to the spawning process: the ranks agree on a step, rank 0 checkpoints there, all exit
#    128+15; resuming ends exactly where an uninterrupted run ends.
mid=(--train_limit=8192 --val_limit=300 --batch_size=64 --timeout=60s --progress=none)
p=$(free_port)
timeout 120 "$train" --nproc_per_node=2 --master_port="$p" "${mid[@]}" \
  --metrics_json="$tmp/mid_whole.json" >/dev/null 2>"$tmp/mid_whole.err" \
  || fail "uninterrupted: $(tail -5 "$tmp/mid_whole.err")"
p=$(free_port)
"$train" --nproc_per_node=2 --master_port="$p" "${mid[@]}" --checkpoint_dir="$tmp/stop_ck" \
  >/dev/null 2>"$tmp/stop.err" &
spawner=$!
pids+=($spawner)
wait_for_text "$tmp/stop.err" "Begin training" || fail "stop: training never began"
sleep 0.5
kill -TERM "$spawner"
wait "$spawner"
rc=$?
pids=()
[[ $rc -eq 143 ]] || fail "stop: exit $rc, want 143: $(tail -5 "$tmp/stop.err")"
grep -q 'stopped by a signal at step' "$tmp/stop.err" || fail "stop: no message: $(tail -5 "$tmp/stop.err")"
ls "$tmp/stop_ck"/checkpoint-*.dtc >/dev/null 2>&1 || fail "stop: no checkpoint"
p=$(free_port)
timeout 120 "$train" --nproc_per_node=2 --master_port="$p" "${mid[@]}" --checkpoint_dir="$tmp/stop_ck" \
  --resume --metrics_json="$tmp/stop_rest.json" >/dev/null 2>"$tmp/stop_rest.err" \
  || fail "stop: resume: $(tail -5 "$tmp/stop_rest.err")"
want=$(json "$tmp/mid_whole.json" 'repr(m["epochs"][-1]["val_loss"])')
got=$(json "$tmp/stop_rest.json" 'repr(m["epochs"][-1]["val_loss"])')
[[ -n $want && $want == "$got" ]] || fail "stop: resumed run ends at val_loss $got, uninterrupted $want"

# 7. A rank killed mid-run: the launcher restarts the group (--max_restarts), which resumes from the
#    last checkpoint and ends exactly where an uninterrupted run ends.
p=$(free_port)
"$train" --nproc_per_node=2 --master_port="$p" --max_restarts=1 "${mid[@]}" \
  --checkpoint_dir="$tmp/kill_ck" --checkpoint_every_steps=10 \
  --metrics_json="$tmp/kill.json" >/dev/null 2>"$tmp/kill.err" &
spawner=$!
pids+=($spawner)
wait_for_text "$tmp/kill.err" "Begin training" || fail "kill: training never began"
# After the first checkpoint (not after a fixed time, which a loaded machine may not reach it in).
has_checkpoint() { compgen -G "$tmp/kill_ck/checkpoint-*.dtc" >/dev/null; }
wait_until 60 has_checkpoint || fail "kill: no checkpoint was written"
victim=$(pgrep -P "$spawner" | tail -1)
[[ -n $victim ]] && kill -KILL "$victim"
wait "$spawner"
rc=$?
pids=()
[[ $rc -eq 0 ]] || fail "kill: exit $rc after a restart: $(tail -8 "$tmp/kill.err")"
grep -q 'killed by signal 9' "$tmp/kill.err" || fail "kill: the launcher did not report the death: $(cat "$tmp/kill.err")"
grep -q 'resumed from' "$tmp/kill.err" || fail "kill: the restarted group did not resume"
got=$(json "$tmp/kill.json" 'repr(m["epochs"][-1]["val_loss"])')
[[ -n $want && $want == "$got" ]] || fail "kill: restarted run ends at val_loss $got, uninterrupted $want"

finish
