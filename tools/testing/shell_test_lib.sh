# Shared by the project's shell tests (sourced, not run). Provides:
#   start_test NAME   a fresh $tmp, the $pids array, and a trap that kills every pid in it and
#                     removes $tmp on exit (calls `extra_cleanup` first when the test defines it)
#   fail MESSAGE...   records a failure and goes on
#   finish            exits 1 with the number of failed checks, or prints PASS and exits 0
#   free_port         a TCP port free on loopback right now
#   wait_for_text FILE TEXT [SECONDS]   until TEXT appears in FILE (default 60 s); 1 on timeout
#   json FILE EXPR    a Python expression evaluated on the parsed JSON file, bound to m
# Tests that start processes add their pids to $pids, so nothing outlives a failing test.

start_test() {
  tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  failures=0
  trap _shell_test_cleanup EXIT
}

_shell_test_cleanup() {
  if declare -F extra_cleanup >/dev/null; then extra_cleanup; fi
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "PASS"
  exit 0
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_for_text() {
  local tenths=$((${3:-60} * 10))
  for _ in $(seq "$tenths"); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

json() {
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print($2)" "$1"
}
