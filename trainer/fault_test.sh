#!/usr/bin/env bash
# Faults around the train binary, with real processes on loopback: a rank SIGKILLed mid-training
# (the survivor names it and exits within the timeout; under the launcher nothing is left behind and
# the launcher names the dead rank), a rank stopped with SIGSTOP (named, with what it last did, while
# the job runs and when it times out; the job ends within the timeout plus 5 s), and startup errors that must end in seconds with a clear
# message: a malformed --dist_url, a busy port, ranks that disagree on the world size, a master that
# never comes, a rank outside the world.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test fault

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
# expect NAME MAX_SECONDS WANT_TEXT -- COMMAND...: runs COMMAND, wants a non-zero exit within
# MAX_SECONDS and WANT_TEXT in its output.
expect() {
  local name=$1 max=$2 want=$3; shift 4
  local start; start=$(now)
  timeout 120 "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  local took; took=$(elapsed "$start" "$(now)")
  [[ $rc -ne 0 ]] || fail "$name: exited 0"
  grep -q -- "$want" "$tmp/$name.out" || fail "$name: no '$want' in: $(tail -3 "$tmp/$name.out")"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$took" "$max" \
    || fail "$name: took ${took}s, more than ${max}s"
  echo "$name: exit $rc after ${took}s: $(tail -1 "$tmp/$name.out")"
}

run=(--train_limit=20000 --batch_size=64 --progress=none --skip_validation)

# 1. Explicit ranks, no launcher: rank 1 is SIGKILLed; rank 0 names it and exits well within the
#    collective timeout.
port=$(free_port)
"$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=0 --timeout=30s "${run[@]}" \
  >"$tmp/r0.out" 2>&1 &
r0=$!
"$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=1 --timeout=30s "${run[@]}" \
  >"$tmp/r1.out" 2>&1 &
r1=$!
pids+=($r0 $r1)
wait_for_text "$tmp/r0.out" "Begin training" || fail "kill: training never began"
sleep 1
killed=$(now)
kill -KILL "$r1"
wait "$r0"
rc=$?
took=$(elapsed "$killed" "$(now)")
pids=()
[[ $rc -eq 1 ]] || fail "kill: rank 0 exited $rc, want 1"
grep -q 'rank 1' "$tmp/r0.out" || fail "kill: rank 0 does not name rank 1: $(tail -2 "$tmp/r0.out")"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 30 else 1)" "$took" \
  || fail "kill: rank 0 took ${took}s to notice"
echo "rank death without launcher: rank 0 exited after ${took}s: $(tail -1 "$tmp/r0.out")"

# 2. Under the launcher: a rank SIGKILLed makes the launcher stop the rest, name the rank and how it
#    died, and exit non-zero; no rank outlives it.
port=$(free_port)
"$launch" --nproc_per_node=3 --master_port="$port" -- "$train" "${run[@]}" >"$tmp/l.out" 2>&1 &
launcher=$!
pids+=($launcher)
wait_for_text "$tmp/l.out" "Begin training" || fail "launcher kill: training never began"
sleep 1
ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
victim=$(pgrep -P "$launcher" | sed -n 2p)
killed=$(now)
kill -KILL "$victim"
wait "$launcher"
rc=$?
took=$(elapsed "$killed" "$(now)")
pids=()
[[ $rc -ne 0 ]] || fail "launcher kill: exit 0"
grep -q 'killed by signal 9' "$tmp/l.out" || fail "launcher kill: no report: $(tail -3 "$tmp/l.out")"
for pid in $ranks; do
  if running "$pid"; then
    fail "launcher kill: rank pid $pid outlived the launcher"
    kill -9 "$pid"
  fi
done
echo "rank death under the launcher: exit $rc after ${took}s: $(grep 'killed by signal' "$tmp/l.out" | head -1)"

# 2b. Under the launcher, a rank that is alive but stuck (SIGSTOP): a warning names it while the job
#     still runs, the timeout's error names it with what it last did, and the job ends within
#     --timeout (a bare number of seconds, as torch.distributed users write it) plus the launcher's
#     failure grace; the stopped rank does not outlive the launcher.
port=$(free_port)
"$launch" --nproc_per_node=2 --master_port="$port" -- "$train" "${run[@]}" --timeout=10 \
  >"$tmp/stop.out" 2>&1 &
launcher=$!
pids+=($launcher)
wait_for_text "$tmp/stop.out" "Begin training" || fail "stop: training never began"
sleep 1
victim=
for pid in $(pgrep -P "$launcher"); do
  # No pipe: under pipefail, grep -q leaving early can fail the pipeline (tr's SIGPIPE).
  grep -qxz RANK=1 "/proc/$pid/environ" && victim=$pid
done
stopped=$(now)
kill -STOP "$victim"
wait "$launcher"
rc=$?
took=$(elapsed "$stopped" "$(now)")
pids=()
[[ $rc -ne 0 ]] || fail "stop: exit 0"
# Stopped between collectives, rank 1 has not joined the one rank 0 waits in; stopped inside one,
# it has, and only its process state names it. Either way the words name rank 1 as stopped.
stopped_rank1='rank 1 \(pid [0-9]+\) is stopped \(SIGSTOP or a tracer\): last seen at collective #[0-9]+ .* ago'
grep -Eq "has waited .*$stopped_rank1" "$tmp/stop.out" ||
  fail "stop: no warning naming rank 1 while waiting: $(tail -5 "$tmp/stop.out")"
grep -Eq "stall report: $stopped_rank1" "$tmp/stop.out" ||
  fail "stop: the error does not name rank 1 and what it last did: $(tail -5 "$tmp/stop.out")"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 15 else 1)" "$took" ||
  fail "stop: the job took ${took}s to end, more than --timeout=10 + 5 s"
if running "$victim"; then
  fail "stop: the stopped rank outlived the launcher"
  kill -9 "$victim"
fi
echo "stopped rank under the launcher: exit $rc after ${took}s: $(grep -o 'stall report: [^]]*' "$tmp/stop.out" | head -1)"

# 2c. A store token (DTRAIN_STORE_TOKEN): a job whose ranks share it trains as without one; a rank
#     with another token is refused at its first contact, within seconds, saying why.
port=$(free_port)
DTRAIN_STORE_TOKEN=job-secret timeout 120 "$launch" --nproc_per_node=2 --master_port="$port" -- \
  "$train" "${run[@]}" --max_steps=3 >"$tmp/token.out" 2>&1 ||
  fail "token: a job with a token did not train: $(tail -3 "$tmp/token.out")"
port=$(free_port)
DTRAIN_STORE_TOKEN=job-secret "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=0 \
  --timeout=20s "${run[@]}" >"$tmp/token0.out" 2>&1 &
pids+=($!)
DTRAIN_STORE_TOKEN=guess expect wrong_token 10 "this store needs the job's token" -- \
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=1 --timeout=20s "${run[@]}"
grep -q "refused a connection from 127.0.0.1:.*a wrong token" "$tmp/token0.out" ||
  fail "token: rank 0 did not log the refused peer: $(tail -2 "$tmp/token0.out")"
stop_processes "${pids[@]}"
pids=()

# 3. Startup errors, each clear and quick.
expect bad_url 15 "missing port" -- "$train" --dist_url=tcp://nohostport --world_size=2 --rank=0
expect bad_rank 15 "rank=5" -- "$train" --dist_url=tcp://127.0.0.1:1 --world_size=2 --rank=5
port=$(free_port)
python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',$port)); s.listen(); time.sleep(60)" &
holder=$!
pids+=($holder)
sleep 0.5
expect busy_port 10 "$port" -- "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=0 \
  --timeout=60s
kill "$holder"; pids=()
expect no_master 10 "could not reach" -- "$train" --dist_url="tcp://127.0.0.1:$(free_port)" \
  --world_size=2 --rank=1 --timeout=3s
# Ranks that disagree on the world size both fail at once, each naming both numbers (the first to
# check waits for the other to read its error, since the store may live in its process).
port=$(free_port)
"$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=0 --timeout=20s \
  >"$tmp/ws0.out" 2>&1 &
pids+=($!)
expect world_size 15 "rendezvous at" -- "$train" --dist_url="tcp://127.0.0.1:$port" \
  --world_size=3 --rank=1 --timeout=20s
wait "${pids[0]}"
rc=$?
pids=()
[[ $rc -ne 0 ]] || fail "world_size: rank 0 exited 0"
for f in "$tmp/ws0.out" "$tmp/world_size.out"; do
  grep -q "disagree on the world size: .* says [23], .* says [23]" "$f" ||
    fail "world_size: $(basename "$f") does not name both numbers: $(tail -1 "$f")"
done
echo "world_size (rank 0): $(tail -1 "$tmp/ws0.out")"

finish
