#!/usr/bin/env bash
# experiments/elastic_recovery.py, the measurement of an elastic run's recovery, with real
# processes: on loopback, rank 1 and then rank 0 (the first store's host) of 3 SIGKILLed, and rank 2
# SIGSTOPped past the timeout, then let go on, when it must say it was left out; a third process
# joining two; as root, also on two simulated hosts of 2 ranks (sim_cluster --run) at 1 Gbit, the
# other host's leader killed.
# Each time the survivors train again and finish, and the CSV has the repeat's times in order. Also
# torchrun's restart on the same failure, where Debian's python3-torch is installed: it goes on
# from its checkpoint.
set -uo pipefail

recovery=$1
sim=$2
# shellcheck source=tools/testing/shell_test_lib.sh
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test elastic_recovery

# About 4 s of training on 3 idle ranks here, so that the signal 1.5 s in lands mid-training.
short=(--dataset=synthetic --synthetic_train_size=16000 --batch_size=16 --max_steps=400)

# check NAME LIMIT [LAUNCHERS]: the CSV of $tmp/NAME holds one repeat per launcher (default:
# elastic); elastic's times are in order, every first step under LIMIT seconds, no elastic step
# lost.
check() {
  local csv=$tmp/$1/elastic_recovery.csv
  [[ -f $csv ]] || csv=$tmp/$1/1gbit/elastic_recovery.csv
  python3 - "$csv" "$2" "${3:-elastic}" <<'PY' || fail "$1: $(cat "$csv" 2>&1)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["launcher"] for r in rows] == sys.argv[3].split(","), rows
for r in rows:
    first = float(r["first_step_s"])
    assert 0 < first < float(sys.argv[2]), r
    assert int(r["steps_lost"]) >= 0, r
    if r["launcher"] == "elastic":
        assert 0 < float(r["failure_seen_s"]) <= float(r["generation_formed_s"]) <= first, r
        assert int(r["went_on_from_step"]) > 0 and int(r["steps_lost"]) == 0, r
PY
}

# run NAME ARGS...: the driver, which must succeed.
run() {
  local name=$1
  shift
  if ! "$recovery" --repeats=1 --output_dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1; then
    fail "$name: exit $?: $(tail -30 "$tmp/$name.out")"
    return 1
  fi
  echo "$name: $(grep 'signal to the next step' "$tmp/$name.out")"
}

run kill1 --ranks=3 --kill=1 -- "${short[@]}" && check kill1 60
run kill0 --ranks=3 --kill=0 -- "${short[@]}" && check kill0 60
# Stopped: found at the 3 s timeout, waited for the 5 s grace, then left out. Let go on, it finds
# the others' generation 1, or, when they have finished meanwhile, that nobody answers: either way
# it says it was left out of generation 1.
if run stop2 --ranks=3 --kill=2 --signal=STOP --after_stop=CONT -- "${short[@]}" --timeout=3s; then
  check stop2 60
  grep -q "rank 2 was left out of generation 1" "$tmp/stop2/elastic/repeat0/rank2.log" \
    || fail "stop2: rank 2 did not say it was left out: $(tail -3 "$tmp/stop2/elastic/repeat0/rank2.log")"
fi

# torchrun's restart, in turn with ours: killed after its first checkpoint (every 10 steps).
if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  run both --ranks=2 --kill=1 --launchers=elastic,torchrun --kill_after=1 -- "${short[@]}" \
    --synthetic_train_size=20000 --max_steps=600 \
    && check both 120 elastic,torchrun
else
  echo "Debian's python3-torch is not installed: torchrun's case is not run"
fi

# A process joining two: admitted, and every rank (the joiner too) trains on and finishes.
if run join --ranks=2 --join --kill_after=1 -- "${short[@]}" --synthetic_train_size=20000 \
  --max_steps=600; then
  python3 - "$tmp/join/elastic_recovery.csv" <<'PY' || fail "join: $(cat "$tmp/join/elastic_recovery.csv")"
import csv, sys
(r,) = list(csv.DictReader(open(sys.argv[1])))
assert r["signal"] == "JOIN", r
assert 0 < float(r["joined_s"]) <= float(r["joiner_first_step_s"]) < 60, r
assert 0 < float(r["first_step_s"]) < 60, r
PY
fi

# Bad flags: exit 2, naming the flag.
"$recovery" --ranks=3 --kill=3 >"$tmp/bad.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--kill=3" "$tmp/bad.out" || fail "--kill=3: exit $rc: $(cat "$tmp/bad.out")"

# Two simulated hosts, where namespaces can be made.
if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null && command -v tc >/dev/null; then
  "$sim" --hosts=2 --rates=1gbit --link_check=0 --output_dir="$tmp/sim" \
    --run="$recovery --ranks=4 --kill=2 --repeats=1 --output_dir=\$SIM_CLUSTER_OUTPUT_DIR -- ${short[*]}" \
    >"$tmp/sim.out" 2>&1 || fail "sim_cluster --run: exit $?: $(tail -30 "$tmp/sim.out")"
  check sim 60
  grep -q "4 ranks on 2 simulated hosts" "$tmp/sim.out" || fail "sim: not on the hosts: $(cat "$tmp/sim.out")"
  "$sim" --run=true -- --models=convnet >"$tmp/simbad.out" 2>&1
  rc=$?
  [[ $rc -eq 2 ]] && grep -q "no scaling flags" "$tmp/simbad.out" \
    || fail "--run with scaling flags: exit $rc: $(cat "$tmp/simbad.out")"
else
  echo "not root or no iproute2: the simulated hosts' case is not run"
fi

finish
