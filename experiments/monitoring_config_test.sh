#!/usr/bin/env bash
# The monitoring files without any server: Prometheus's config passes promtool, every Grafana
# dashboard parses and each of its panels queries the provisioned datasource (uid dtrain-prometheus)
# with a real expression, and the provisioning files name that datasource and a dashboard folder.
#
# Every metric name a dashboard's queries use (ddp_..., dtrain_train_...) must be one the code exports:
# a name registered in the exporters' sources (experiments/prometheus_export.cc for the sweep,
# trainer/report/live_metrics.cc for a training), with a histogram's _bucket, _sum and _count.
#
# Usage: monitoring_config_test.sh [FILE...]   (the files of //experiments:monitoring_files and the
# exporters' sources; without arguments, those under grafana/ and monitoring/ next to this script
# and the two exporters in this checkout)
set -uo pipefail

# The library: from the runfiles under Bazel, from this checkout when run by hand.
source "${TEST_SRCDIR:-$(dirname "$0")/..}${TEST_SRCDIR:+/${TEST_WORKSPACE}}/tools/testing/shell_test_lib.sh"

files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
  here=$(dirname "$0")
  mapfile -t files < <(find "$here/grafana" "$here/monitoring" -type f 2>/dev/null | sort)
  files+=("$here/prometheus_export.cc" "$here/../trainer/report/live_metrics.cc")
fi
prometheus_ymls=() dashboards=() datasources=() providers=() exporters=()
for f in "${files[@]}"; do
  case "$f" in
    */monitoring/prometheus.yml) prometheus_ymls+=("$f") ;;
    */grafana/dashboards/*.json) dashboards+=("$f") ;;
    */grafana/provisioning/datasources/*.yml) datasources+=("$f") ;;
    */grafana/provisioning/dashboards/*.yml) providers+=("$f") ;;
    */prometheus_export.cc | */live_metrics.cc) exporters+=("$f") ;;
  esac
done
[[ ${#prometheus_ymls[@]} -eq 1 ]] || fail "want one monitoring/prometheus.yml, got ${#prometheus_ymls[@]}"
[[ ${#dashboards[@]} -ge 1 ]] || fail "no dashboard JSON under grafana/dashboards/"
[[ ${#datasources[@]} -ge 1 ]] || fail "no datasource under grafana/provisioning/datasources/"
[[ ${#providers[@]} -ge 1 ]] || fail "no dashboard provider under grafana/provisioning/dashboards/"
[[ ${#exporters[@]} -eq 2 ]] || fail "want the two exporters' sources, got ${#exporters[@]}"

# 1. Prometheus's config: valid, and scraping the Pushgateway with the pushed labels kept.
if command -v promtool >/dev/null 2>&1; then
  for f in "${prometheus_ymls[@]}"; do
    out=$(promtool check config "$f" 2>&1) || fail "promtool check config $f: $out"
  done
else
  echo "SKIP: promtool check config (promtool is not installed; tools/setup.sh installs prometheus)"
fi
for f in "${prometheus_ymls[@]}"; do
  grep -q 'localhost:9091' "$f" || fail "$f: does not scrape the Pushgateway at localhost:9091"
  grep -q 'localhost:9464' "$f" || fail "$f: does not scrape the sweep's --metrics_port 9464"
  grep -q 'localhost:9465' "$f" || fail "$f: does not scrape train's --metrics_port 9465"
  grep -q 'honor_labels: true' "$f" || fail "$f: no honor_labels: true (the pushed job label is lost)"
done

# 2. The provisioning files: the datasource the dashboards use, and a file provider.
for f in "${datasources[@]}"; do
  grep -qE '^\s*uid:\s*dtrain-prometheus\s*$' "$f" || fail "$f: no datasource with uid dtrain-prometheus"
  grep -qE '^\s*type:\s*prometheus\s*$' "$f" || fail "$f: datasource type is not prometheus"
  grep -qE '^\s*url:\s*http://localhost:9090\s*$' "$f" || fail "$f: url is not http://localhost:9090"
done
for f in "${providers[@]}"; do
  grep -qE '^\s*type:\s*file\s*$' "$f" || fail "$f: not a file provider"
  grep -qE '^\s*path:\s*\S+' "$f" || fail "$f: no dashboard path"
done

# 3. Each dashboard: parses, and every panel has a title, a description and a real query on the
# dtrain-prometheus datasource.
for f in "${dashboards[@]}"; do
  out=$(python3 - "$f" <<'PY'
import json, sys

UID = "dtrain-prometheus"
path = sys.argv[1]
try:
    dash = json.load(open(path))
except ValueError as e:
    print(f"does not parse: {e}")
    sys.exit(1)
problems = []
for key in ("uid", "title", "panels", "schemaVersion"):
    if key not in dash:
        problems.append(f"no top-level {key!r}")


def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))


def uid(ds):
    return ds.get("uid") if isinstance(ds, dict) else ds


ids = []
for p in walk(dash.get("panels", [])):
    ids.append(p.get("id"))
    if p.get("type") == "row":
        continue
    name = f"panel {p.get('id')} {p.get('title')!r}"
    if not p.get("title"):
        problems.append(f"{name}: no title")
    if not p.get("description"):
        problems.append(f"{name}: no description (say what a good value is)")
    if "gridPos" not in p:
        problems.append(f"{name}: no gridPos")
    targets = p.get("targets", [])
    if not any(t.get("expr", "").strip() for t in targets):
        problems.append(f"{name}: no target with an expr")
    if uid(p.get("datasource")) != UID:
        problems.append(f"{name}: datasource {p.get('datasource')!r}, want uid {UID}")
    for t in targets:
        if not t.get("expr", "").strip():
            problems.append(f"{name}: target {t.get('refId')} has no expr")
        if "datasource" in t and uid(t["datasource"]) != UID:
            problems.append(f"{name}: target {t.get('refId')} datasource {t['datasource']!r}")
if len(ids) != len(set(ids)):
    problems.append(f"panel ids repeat: {ids}")
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") == "query" and uid(v.get("datasource")) != UID:
        problems.append(f"variable {v.get('name')}: datasource {v.get('datasource')!r}, want uid {UID}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
  ) || fail "$f:"$'\n'"$out"
done

# 4. Every metric a dashboard names is exported: the names registered in the exporters' sources
# (string literals starting ddp_ or dtrain_train_), a histogram's with its three series.
out=$(python3 - "${exporters[@]}" -- "${dashboards[@]}" <<'PY'
import json, re, sys

args = sys.argv[1:]
sources, dashboards = args[:args.index("--")], args[args.index("--") + 1:]
exported = set()
for path in sources:
    text = open(path).read()
    names = set(re.findall(r'"((?:ddp|dtrain_train)_[a-z0-9_]+)"', text))
    if not names:
        print(f"{path}: no metric name found")
    exported |= names
    for name in re.findall(r'BuildHistogram\(\)\s*\.Name\("(\w+)"\)', text):
        exported.update(name + s for s in ("_bucket", "_sum", "_count"))


def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))


problems = []
for path in dashboards:
    dash = json.load(open(path))
    exprs = [t.get("expr", "") for p in walk(dash.get("panels", [])) for t in p.get("targets", [])]
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        exprs.append(q.get("query", "") if isinstance(q, dict) else (q or ""))
    used = set()
    for e in exprs:
        # Names outside label matchers and strings: drop {...} and "..." first.
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)
        used.update(re.findall(r'\b((?:ddp|dtrain_train)_[a-z0-9_]+)\b', bare))
    if not used:
        problems.append(f"{path}: no ddp_ or dtrain_train_ metric in any query")
    for name in sorted(used - exported):
        problems.append(f"{path}: {name} is not exported by {', '.join(sources)}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
) || fail "dashboard metric names:"$'\n'"$out"

finish
