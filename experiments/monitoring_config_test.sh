#!/usr/bin/env bash
# The monitoring files without any server: Prometheus's config passes promtool, every Grafana
# dashboard parses and each of its panels queries the provisioned datasource (uid dtrain-prometheus)
# with a real expression, and the provisioning files name that datasource and a dashboard folder.
#
# Usage: monitoring_config_test.sh [FILE...]   (the files of //experiments:monitoring_files; without
# arguments, those under grafana/ and monitoring/ next to this script)
set -uo pipefail

# The library: from the runfiles under Bazel, from this checkout when run by hand.
source "${TEST_SRCDIR:-$(dirname "$0")/..}${TEST_SRCDIR:+/dtrain}/tools/testing/shell_test_lib.sh"

files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
  here=$(dirname "$0")
  mapfile -t files < <(find "$here/grafana" "$here/monitoring" -type f 2>/dev/null | sort)
fi
prometheus_ymls=() dashboards=() datasources=() providers=()
for f in "${files[@]}"; do
  case "$f" in
    */monitoring/prometheus.yml) prometheus_ymls+=("$f") ;;
    */grafana/dashboards/*.json) dashboards+=("$f") ;;
    */grafana/provisioning/datasources/*.yml) datasources+=("$f") ;;
    */grafana/provisioning/dashboards/*.yml) providers+=("$f") ;;
  esac
done
[[ ${#prometheus_ymls[@]} -eq 1 ]] || fail "want one monitoring/prometheus.yml, got ${#prometheus_ymls[@]}"
[[ ${#dashboards[@]} -ge 1 ]] || fail "no dashboard JSON under grafana/dashboards/"
[[ ${#datasources[@]} -ge 1 ]] || fail "no datasource under grafana/provisioning/datasources/"
[[ ${#providers[@]} -ge 1 ]] || fail "no dashboard provider under grafana/provisioning/dashboards/"

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

finish
