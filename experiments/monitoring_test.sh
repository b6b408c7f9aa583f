#!/usr/bin/env bash
# Metrics end to end with the real servers on loopback: the scaling sweep pushes a tiny run to a
# Pushgateway, Prometheus scrapes the gateway, and every query of the Grafana dashboard must return
# data for that run, for both of its process counts (world_size 1 and 2). Also checks the pushed
# text with promtool and the metric names, types and labels that the dashboard relies on.
# Then a training's live metrics: two ranks under the launcher serve /metrics (train
# --metrics_port=0 --metrics_ranks=all), Prometheus scrapes both, their series carry rank labels and
# sane values, and every query of the training dashboard returns data for ranks 0 and 1.
#
# Usage: monitoring_test.sh [--fake_push] SCALING_BINARY DASHBOARD_JSON [PROMETHEUS_YML
#                           [TRAIN_BINARY LAUNCH_BINARY TRAINING_DASHBOARD_JSON]]
#   --fake_push (or FAKE_PUSH=1)  push a hand-written exposition instead of running the sweep, so the
#                                 dashboard part can be checked without the binary
#   PROMETHEUS_YML                experiments/monitoring/prometheus.yml (or its folder): Prometheus
#                                 starts from it, its targets moved to this test's ports; without
#                                 it, a minimal config scraping the gateway is generated
#   TRAIN_BINARY ...              the training part runs only when these three are given
# Skips (exit 0) only when prometheus, prometheus-pushgateway or promtool is not installed.
set -uo pipefail

fake=${FAKE_PUSH:-0}
if [[ ${1:-} == --fake_push ]]; then
  fake=1
  shift
fi
if [[ $# -lt 2 ]]; then
  echo "usage: $0 [--fake_push] SCALING_BINARY DASHBOARD_JSON [PROMETHEUS_YML" \
    "[TRAIN_BINARY LAUNCH_BINARY TRAINING_DASHBOARD_JSON]]" >&2
  exit 2
fi
scaling=$1
dashboard=$2
template=${3:-}
train=${4:-}
launch=${5:-}
train_dashboard=${6:-}
[[ -z $template || -f $template ]] || template=$template/prometheus.yml

# The library: from the runfiles under Bazel, from this checkout when run by hand.
source "${TEST_SRCDIR:-$(dirname "$0")/..}${TEST_SRCDIR:+/${TEST_WORKSPACE}}/tools/testing/shell_test_lib.sh"

for tool in prometheus prometheus-pushgateway promtool; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "$tool is not installed (tools/setup.sh installs prometheus and prometheus-pushgateway)"
done

run_id=monitoring_test
start_test monitoring

# HTTP, the exposition checks and the dashboard's queries, in Python's standard library only.
cat >"$tmp/mon.py" <<'PY'
import json, math, re, sys, time, urllib.error, urllib.parse, urllib.request

EXPECTED = {  # the sweep's metric families and their types (docs/MONITORING.md)
    "ddp_epoch_duration_seconds": "gauge",
    "ddp_no_communication_epoch_duration_seconds": "gauge",
    "ddp_wall_duration_seconds": "gauge",
    "ddp_startup_duration_seconds": "gauge",
    "ddp_samples_per_second": "gauge",
    "ddp_speedup_ratio": "gauge",
    "ddp_efficiency_ratio": "gauge",
    "ddp_communication_efficiency_ratio": "gauge",
    "ddp_exposed_communication_seconds": "gauge",
    "ddp_exposed_communication_ratio": "gauge",
    "ddp_data_wait_seconds": "gauge",
    "ddp_step_communication_seconds": "gauge",
    "ddp_step_duration_seconds": "histogram",
    "ddp_runs_total": "counter",
}
# The no-sync trainings run only at np > 1 (the dashboard takes the epoch itself as the bound at 1).
SIZES = {"ddp_no_communication_epoch_duration_seconds": {"2"}}
LABELS = ("implementation", "backend", "model", "comm_hook", "zero", "world_size", "batch_size",
          "run_id")


def http(method, url, data=None):
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def samples(text):
    """(name, labels, value) of each sample line of a text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)', line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def wait_ready(url, deadline_s):
    end = time.time() + float(deadline_s)
    while time.time() < end:
        if http("GET", url)[0] == 200:
            return 0
        time.sleep(0.2)
    print(f"{url} not ready after {deadline_s} s", file=sys.stderr)
    return 1


def push(url, path):
    code, body = http("PUT", url, open(path, "rb").read())
    if code // 100 != 2:
        print(f"push to {url}: HTTP {code}: {body}", file=sys.stderr)
        return 1
    return 0


def get(url):
    code, body = http("GET", url)
    sys.stdout.write(body)
    return 0 if code == 200 else 1


def check_gateway(path, run_id):
    """The pushed families: present, typed, labelled, with both process counts."""
    text = open(path).read()
    if not any(n.startswith("ddp_") and l.get("run_id") == run_id for n, l, _ in samples(text)):
        print(f"no ddp_ metric with run_id {run_id} on the gateway: nothing was pushed")
        return 1
    types = dict(re.findall(r'^# TYPE (\S+) (\S+)', text, re.M))
    ok = True
    for name, kind in EXPECTED.items():
        if types.get(name) != kind:
            print(f"{name}: type {types.get(name)!r} on the gateway, want {kind}")
            ok = False
    seen, problems = {}, {}
    for name, labels, value in samples(text):
        if not name.startswith("ddp_") or labels.get("run_id") != run_id:
            continue
        family = re.sub(r'_(bucket|sum|count)$', '', name)
        missing = [l for l in LABELS if not labels.get(l)]
        if family == "ddp_runs_total" and labels.get("status") not in ("ok", "failed"):
            missing.append("status (ok|failed)")
        if missing:
            problems.setdefault(f"{family}: missing label(s) {', '.join(missing)}", labels)
        if not math.isfinite(value) and not name.endswith("_bucket"):
            problems.setdefault(f"{family}: non-finite value {value}", labels)
        seen.setdefault(family, set()).add(labels.get("world_size"))
    for problem, labels in problems.items():
        print(f"{problem} (e.g. {labels})")
        ok = False
    for name in EXPECTED:
        want = SIZES.get(name, {"1", "2"})
        if not want <= seen.get(name, set()):
            print(f"{name}: pushed for world_size {sorted(x for x in seen.get(name, set()) if x)}, "
                  f"want {' and '.join(sorted(want))} (run_id {run_id})")
            ok = False
    return 0 if ok else 1


def query(prom, expr):
    code, body = http("GET", f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    try:
        return json.loads(body)
    except ValueError:
        return {"status": "error", "error": f"HTTP {code}: {body[:300]}"}


def wait_scraped(prom, gateway_metrics, run_id, deadline_s):
    """Until Prometheus holds the gateway's last push of the run (push_time_seconds)."""
    pushed = [v for n, l, v in samples(open(gateway_metrics).read())
              if n == "push_time_seconds" and l.get("run_id") == run_id]
    if not pushed:
        print(f"the gateway has no push_time_seconds for run_id {run_id}: nothing was pushed")
        return 1
    expr = f'max(push_time_seconds{{job="dtrain_scaling", run_id="{run_id}"}})'
    end = time.time() + float(deadline_s)
    while time.time() < end:
        r = query(prom, expr).get("data", {}).get("result", [])
        if r and float(r[0]["value"][1]) >= max(pushed) - 1e-3:
            return 0
        time.sleep(0.5)
    print(f"Prometheus did not scrape the run's last push within {deadline_s} s")
    return 1


VARIABLES = {"run_id": None, "backend": ".*", "model": ".*", "implementation": ".*", "rank": ".*",
             "comm_hook": ".*", "zero": ".*",
             "__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__range_s": "3600",
             "__range_ms": "3600000", "__interval_ms": "15000"}


def substitute(expr, run_id):
    values = dict(VARIABLES, run_id=run_id)

    def one(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, m.group(0))  # unknown ($1 of label_replace): left as it is
    return re.sub(r'\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]', one, expr)


def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))


def check_dashboard(prom, path, run_id, label="world_size", want="1,2"):
    """Every query returns finite data; series that carry `label` cover each value in `want`."""
    want = set(want.split(","))
    dash = json.load(open(path))
    failed = checked = 0
    for p in walk(dash.get("panels", [])):
        for t in p.get("targets", []):
            raw = t.get("expr", "")
            if not raw.strip():
                print(f"FAIL [{p.get('title')}] target {t.get('refId')}: no expr")
                failed += 1
                continue
            checked += 1
            expr = substitute(raw, run_id)
            r = query(prom, expr)
            problem = None
            result = r.get("data", {}).get("result", [])
            if r.get("status") != "success":
                problem = f"{r.get('errorType', '')} {r.get('error', r)}"
            elif not result:
                problem = "empty result"
            else:
                series = result if isinstance(result[0], dict) else [{"metric": {}, "value": result}]
                bad = [s for s in series if not math.isfinite(float(s["value"][1]))]
                sizes = {s["metric"][label] for s in series if label in s["metric"]}
                if bad:
                    problem = f"non-finite value(s): {bad[:3]}"
                elif any(label in s["metric"] for s in series) and not want <= sizes:
                    problem = f"{label} {sorted(sizes)} in the result, want {sorted(want)}"
            if problem:
                failed += 1
                print(f"FAIL [{p.get('title')}] {t.get('refId')}: {problem}\n  expr: {expr}")
            else:
                print(f"ok   [{p.get('title')}] {t.get('refId')}: {len(result)} series")
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r'\s*label_values\((.*),\s*(\w+)\s*\)\s*', q)
        if not m:
            continue
        checked += 1
        selector = substitute(m.group(1), run_id)
        code, body = http("GET", f"{prom}/api/v1/label/{m.group(2)}/values?" +
                          urllib.parse.urlencode({"match[]": selector}))
        values = json.loads(body).get("data", []) if code == 200 else []
        if not values or (m.group(2) == "run_id" and run_id not in values):
            failed += 1
            print(f"FAIL [variable {v.get('name')}] {q}: HTTP {code}, values {values}")
        else:
            print(f"ok   [variable {v.get('name')}] {values}")
    if checked == 0:
        print(f"FAIL no query found in {path}")
        return 1
    return 1 if failed else 0


# The trainer's live families (docs/MONITORING.md) and their types.
LIVE = {
    "dtrain_train_step_duration_seconds": "histogram",
    "dtrain_train_steps_total": "counter",
    "dtrain_train_samples_total": "counter",
    "dtrain_train_data_wait_seconds_total": "counter",
    "dtrain_train_exposed_communication_seconds_total": "counter",
    "dtrain_train_samples_per_second": "gauge",
    "dtrain_train_loss": "gauge",
    "dtrain_train_learning_rate": "gauge",
    "dtrain_train_epoch": "gauge",
    "dtrain_train_global_step": "gauge",
}


def wait_live(prom, run_id, ranks, deadline_s):
    """Until Prometheus holds at least 3 scrapes of every rank's step counter (enough for rate())."""
    want = set(ranks.split(","))
    expr = f'count_over_time(dtrain_train_steps_total{{run_id="{run_id}"}}[1m]) >= 3'
    end = time.time() + float(deadline_s)
    seen = set()
    while time.time() < end:
        seen = {s["metric"].get("rank") for s in query(prom, expr).get("data", {}).get("result", [])}
        if want <= seen:
            return 0
        time.sleep(0.5)
    print(f"Prometheus has not scraped ranks {sorted(want - seen)} 3 times within {deadline_s} s")
    return 1


def check_live(prom, run_id, ranks, batch_size, lr):
    """The live series as Prometheus holds them: every family for every rank, its labels, sane values."""
    want = set(ranks.split(","))
    ok = True
    values = {}
    for name in LIVE:
        series = name + ("_count" if LIVE[name] == "histogram" else "")
        r = query(prom, f'{series}{{run_id="{run_id}"}}').get("data", {}).get("result", [])
        by_rank = {s["metric"].get("rank"): s for s in r}
        if not want <= set(by_rank):
            print(f"{series}: ranks {sorted(k for k in by_rank if k)}, want {sorted(want)}")
            ok = False
            continue
        for rank, s in by_rank.items():
            m = s["metric"]
            if m.get("world_size") != str(len(want)) or m.get("model") != "convnet" or not m.get("backend"):
                print(f"{series} rank {rank}: labels {m}, want world_size {len(want)}, model convnet, a backend")
                ok = False
            values[(name, rank)] = float(s["value"][1])
    for rank in want:
        v = lambda name: values.get((name, rank), float("nan"))
        steps = v("dtrain_train_steps_total")
        checks = {
            "steps > 0": steps > 0,
            f"samples ~ {batch_size} x steps": abs(v("dtrain_train_samples_total") - int(batch_size) * steps)
                                               <= int(batch_size),
            "histogram count ~ steps": abs(v("dtrain_train_step_duration_seconds") - steps) <= 1,
            "global step >= steps": v("dtrain_train_global_step") >= steps - 1,
            "loss finite and > 0": math.isfinite(v("dtrain_train_loss")) and v("dtrain_train_loss") > 0,
            f"lr {lr}": abs(v("dtrain_train_learning_rate") - float(lr)) < 1e-9,
            "epoch >= 0": v("dtrain_train_epoch") >= 0,
            "samples/s > 0": v("dtrain_train_samples_per_second") > 0,
            "exposed communication >= 0": v("dtrain_train_exposed_communication_seconds_total") >= 0,
            "data wait >= 0": v("dtrain_train_data_wait_seconds_total") >= 0,
        }
        for what, good in checks.items():
            if not good:
                print(f"rank {rank}: not {what} ({ {k[0]: x for k, x in values.items() if k[1] == rank} })")
                ok = False
    return 0 if ok else 1


def fake_exposition(out, run_id):
    """What the sweep pushes for the tiny run below (convnet on gloo, np=1 at batch 32 and np=2 at
    batch 16 per process), for dtrain and the PyTorch reference: the no-communication bound only
    at np > 1, ddp_runs_total for both outcomes."""
    buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    gauges = {name: [] for name, kind in EXPECTED.items() if kind == "gauge"}
    hist, runs = [], []
    for impl, backend in (("dtrain", "gloo"), ("dtrain", "gloo+shm"), ("pytorch", "gloo")):
        # Epoch seconds at np=1; shared memory shortens the epochs with communication.
        one = 0.065 * (1.2 if impl == "pytorch" else 1.0)
        shm = 0.8 if backend == "gloo+shm" else 1.0
        for ws, bs in ((1, 32), (2, 16)):
            bound = one / ws * 1.1
            epoch = one if ws == 1 else bound + 0.01 * shm
            startup = 1.0 + 0.4 * ws
            values = {
                "ddp_epoch_duration_seconds": epoch,
                "ddp_wall_duration_seconds": startup + epoch,
                "ddp_startup_duration_seconds": startup,
                "ddp_samples_per_second": 128 / epoch,
                "ddp_speedup_ratio": one / epoch,
                "ddp_efficiency_ratio": one / epoch / ws,
                "ddp_communication_efficiency_ratio": 1.0 if ws == 1 else bound / epoch,
                "ddp_exposed_communication_seconds": 0.0 if ws == 1 else epoch - bound,
                "ddp_exposed_communication_ratio": 0.0 if ws == 1 else (epoch - bound) / epoch,
                "ddp_data_wait_seconds": 0.002 * ws,
                # 4 steps per epoch (the histogram below).
                "ddp_step_communication_seconds": 0.0 if ws == 1 else (epoch - bound) / 4,
            }
            if ws > 1:
                values["ddp_no_communication_epoch_duration_seconds"] = bound
            labels = (f'implementation="{impl}",backend="{backend}",model="convnet",'
                      f'comm_hook="allreduce",zero="0",world_size="{ws}",batch_size="{bs}",'
                      f'run_id="{run_id}"')
            for name, v in values.items():
                gauges[name].append(f"{name}{{{labels}}} {v!r}")
            steps = [epoch / 4 * f for f in (0.8, 0.9, 1.0, 1.3)]
            for le in buckets:
                n = sum(s <= le for s in steps)
                hist.append(f'ddp_step_duration_seconds_bucket{{{labels},le="{le}"}} {n}')
            hist.append(f'ddp_step_duration_seconds_bucket{{{labels},le="+Inf"}} {len(steps)}')
            hist.append(f"ddp_step_duration_seconds_sum{{{labels}}} {sum(steps)!r}")
            hist.append(f"ddp_step_duration_seconds_count{{{labels}}} {len(steps)}")
            runs.append(f'ddp_runs_total{{{labels},status="ok"}} 1')
            runs.append(f'ddp_runs_total{{{labels},status="failed"}} 0')
    lines = []
    for name, rows in gauges.items():
        lines += [f"# HELP {name} {name} of the scaling sweep (fake push)", f"# TYPE {name} gauge"]
        lines += rows
    lines += ["# HELP ddp_step_duration_seconds Training step time (fake push)",
              "# TYPE ddp_step_duration_seconds histogram"] + hist
    lines += ["# HELP ddp_runs_total Completed runs (fake push)", "# TYPE ddp_runs_total counter"]
    lines += runs
    open(out, "w").write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    sys.exit({"wait_ready": wait_ready, "push": push, "get": get, "check_gateway": check_gateway,
              "wait_scraped": wait_scraped, "check_dashboard": check_dashboard,
              "fake_exposition": fake_exposition, "wait_live": wait_live,
              "check_live": check_live}[cmd](*args))
PY
mon() { python3 "$tmp/mon.py" "$@"; }

[[ -f $dashboard ]] || { fail "no dashboard at $dashboard"; finish; }

# 1. The Pushgateway and Prometheus, each on a free loopback port.
gw_port=$(free_port)
prom_port=$(free_port)
gateway=http://127.0.0.1:$gw_port
prom=http://127.0.0.1:$prom_port
# In memory only: Debian's build otherwise keeps every push in /var/lib/prometheus/pushgateway.data.
prometheus-pushgateway --web.listen-address="127.0.0.1:$gw_port" --persistence.file= \
  >"$tmp/gateway.log" 2>&1 &
pids+=($!)

if [[ -n $template ]]; then
  # The project's config, its targets moved here (nothing listens on the sweep's metrics port).
  unused_port=$(free_port)
  unused_train_port=$(free_port)  # until a training runs (step 5)
  sed -e "s/localhost:9091/127.0.0.1:$gw_port/" -e "s/localhost:9464/127.0.0.1:$unused_port/" \
    -e "s/localhost:9465/127.0.0.1:$unused_train_port/" \
    -e 's/scrape_interval: 5s/scrape_interval: 1s/' "$template" >"$tmp/prometheus.yml"
  grep -q "127.0.0.1:$gw_port" "$tmp/prometheus.yml" || fail "$template does not scrape localhost:9091"
else
  cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$gw_port"]
EOF
fi
promtool check config "$tmp/prometheus.yml" >"$tmp/check_config.out" 2>&1 \
  || fail "promtool check config: $(cat "$tmp/check_config.out")"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
pids+=($prom_pid)

mon wait_ready "$gateway/-/ready" 30 || fail "Pushgateway: $(tail -5 "$tmp/gateway.log")"
mon wait_ready "$prom/-/ready" 30 || fail "Prometheus: $(tail -5 "$tmp/prometheus.log")"
[[ $failures -eq 0 ]] || finish

# 2. A tiny sweep pushes its results (or, with --fake_push, a hand-written exposition).
if [[ $fake == 1 ]]; then
  echo "FAKE_PUSH: pushing a hand-written exposition instead of running $scaling"
  mon fake_exposition "$tmp/fake.prom" "$run_id" \
    && mon push "$gateway/metrics/job/dtrain_scaling/run_id/$run_id" "$tmp/fake.prom" \
    || fail "fake push"
else
  timeout 240 "$scaling" --models=convnet --backends=gloo,gloo+shm --world_sizes=1,2 --batch_sizes=32,16 \
    --max_steps=4 --train_limit=512 --repeats=1 --output_dir="$tmp/out" \
    --pushgateway="127.0.0.1:$gw_port" --run_id="$run_id" --no_plots \
    >"$tmp/scaling.out" 2>"$tmp/scaling.err"
  rc=$?
  [[ $rc -eq 0 ]] || fail "scaling sweep: exit $rc: $(tail -20 "$tmp/scaling.err")"
fi

# 3. What the gateway holds: promtool finds nothing wrong with the ddp_ families, and every family
# the dashboard reads is there, typed and labelled, for both process counts.
mon get "$gateway/metrics" >"$tmp/gateway.prom" || fail "GET $gateway/metrics"
promtool check metrics <"$tmp/gateway.prom" >"$tmp/check_metrics.out" 2>&1
if grep -q 'ddp_' "$tmp/check_metrics.out"; then
  fail "promtool check metrics on the pushed families: $(grep 'ddp_' "$tmp/check_metrics.out")"
fi
mon check_gateway "$tmp/gateway.prom" "$run_id" >"$tmp/check_gateway.out" \
  || fail "pushed metrics:"$'\n'"$(cat "$tmp/check_gateway.out")"

# 4. Once Prometheus holds the last push, every dashboard query returns data for world sizes 1 and 2.
if mon wait_scraped "$prom" "$tmp/gateway.prom" "$run_id" 30 >"$tmp/scraped.out"; then
  mon check_dashboard "$prom" "$dashboard" "$run_id" >"$tmp/dashboard.out"
  rc=$?
  cat "$tmp/dashboard.out"
  [[ $rc -eq 0 ]] || fail "dashboard queries: $(grep -c '^FAIL' "$tmp/dashboard.out") failed (above)"
else
  fail "$(cat "$tmp/scraped.out"); Prometheus log: $(tail -5 "$tmp/prometheus.log")"
fi

# 5. A training's live metrics. Two ranks under the launcher each serve /metrics on a port of their
# own (--metrics_port=0: the kernel's choice, printed); Prometheus, its config reloaded with those
# targets, scrapes them while the training runs (it runs until this test stops it).
live_ports() { grep -so 'live metrics on http://127.0.0.1:[0-9]*' "$tmp/train.err" | grep -o '[0-9]*$'; }
two_ports() { [[ $(live_ports | sort -u | wc -l) -eq 2 ]]; }
ports_or_gone() { two_ports || ! running "$train_pid"; }
if [[ -n $train && ( -z $template || ! -f $train_dashboard ) ]]; then
  fail "the training part needs PROMETHEUS_YML (its train job) and the training dashboard"
elif [[ -n $train ]]; then
  timeout 300 "$launch" --nproc_per_node=2 --master_port="$(free_port)" -- "$train" \
    --dataset=synthetic --synthetic_train_size=4096 --synthetic_shape=1,12,12 --batch_size=16 \
    --epochs=1000 --lr_step_epochs=1000 --skip_validation --lr=0.5 --metrics_port=0 \
    --metrics_ranks=all \
    --metrics_bind=127.0.0.1 --metrics_run_id="$run_id" --progress=lines --print_freq=50 \
    --log_jsonl="$tmp/steps.{rank}.jsonl" >"$tmp/train.out" 2>"$tmp/train.err" &
  train_pid=$!
  pids+=($train_pid)
  wait_until 120 ports_or_gone
  if ! two_ports; then
    fail "train: no two 'live metrics on' lines: $(tail -5 "$tmp/train.err")"
  else
    targets=$(live_ports | sort -u | sed 's/.*/"127.0.0.1:&"/' | paste -sd, -)
    sed -e "s/\"127.0.0.1:$unused_train_port\"/$targets/" "$tmp/prometheus.yml" >"$tmp/prometheus2.yml"
    grep -qF "$targets" "$tmp/prometheus2.yml" || fail "the train job's target was not replaced"
    cp "$tmp/prometheus2.yml" "$tmp/prometheus.yml"
    kill -HUP "$prom_pid"
    if mon wait_live "$prom" "$run_id" 0,1 60 >"$tmp/live.out"; then
      mon check_live "$prom" "$run_id" 0,1 16 0.5 >"$tmp/check_live.out" \
        || fail "live series:"$'\n'"$(cat "$tmp/check_live.out")"
      mon check_dashboard "$prom" "$train_dashboard" "$run_id" rank 0,1 >"$tmp/train_dashboard.out"
      rc=$?
      cat "$tmp/train_dashboard.out"
      [[ $rc -eq 0 ]] || fail "training dashboard queries: $(grep -c '^FAIL' "$tmp/train_dashboard.out") failed"
    else
      fail "$(cat "$tmp/live.out"); Prometheus log: $(tail -5 "$tmp/prometheus.log")"
    fi
    mon get "http://127.0.0.1:$(live_ports | head -1)/metrics" >"$tmp/live.prom" \
      || fail "GET rank's /metrics"
    promtool check metrics <"$tmp/live.prom" >"$tmp/check_live_metrics.out" 2>&1
    if grep -q 'dtrain_train_' "$tmp/check_live_metrics.out"; then
      fail "promtool check metrics: $(grep 'dtrain_train_' "$tmp/check_live_metrics.out")"
    fi
  fi
  # Stopped as a user would (SIGTERM through timeout and the launcher): the ranks stop at a step
  # boundary and their metrics servers close.
  kill -TERM "$train_pid"
  wait_exit "$train_pid" 60 || fail "train did not stop within 60 s of SIGTERM"
  for port in $(live_ports); do
    python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)) == 0)" \
      || fail "port $port still served after the training stopped"
  done
  if two_ports; then
    for rank in 0 1; do
      python3 -c "import json,sys; assert [json.loads(l) for l in open(sys.argv[1])]" \
        "$tmp/steps.$rank.jsonl" || fail "--log_jsonl: rank $rank's lines do not parse"
    done
  fi
fi

finish
