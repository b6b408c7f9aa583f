# Shared by the project's shell tests (sourced, not run). Provides:
#   start_test NAME   a fresh $tmp, the $pids array, and a trap that, on exit, stops every pid in it
#                     (stop_processes) and removes $tmp (calls `extra_cleanup` first when the test
#                     defines it)
#   fail MESSAGE...   records a failure and goes on
#   finish            exits 1 with the number of failed checks, or prints PASS and exits 0
#   skip MESSAGE...   prints SKIP: MESSAGE and exits 0 (for a machine that lacks what the test needs)
#   free_port         a TCP port free on loopback right now
#   free_ports N      the first of N consecutive ports free on loopback right now, below the
#                     kernel's ephemeral range, so that no outgoing connection takes one meanwhile
#   wait_until SECONDS COMMAND...       runs COMMAND every 0.1 s until it succeeds; 1 on timeout
#   wait_for_text FILE TEXT [SECONDS]   until TEXT appears in FILE (default 60 s); 1 on timeout
#   running PID       succeeds while PID runs (a zombie, exited but not yet reaped, has stopped)
#   wait_exit PID [SECONDS]             until PID no longer runs (default 5 s); 1 on timeout
#   wait_all          waits for every pid in $pids, then empties it; returns how many exited non-zero
#   stop_processes PID...               SIGTERM to each, SIGKILL to those still running 5 s later,
#                     then reaps them. TERM first: `timeout` and the launcher pass it on to what
#                     they run, and servers shut down cleanly.
#   json FILE EXPR    a Python expression evaluated on the parsed JSON file, bound to m
# Tests that start processes add their pids to $pids, so nothing outlives a failing test. Only those
# pids are ever signalled. Works under `set -e` and `set -u`.

failures=0
pids=()

start_test() {
  tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  failures=0
  trap _shell_test_cleanup EXIT
}

_shell_test_cleanup() {
  if declare -F extra_cleanup >/dev/null; then extra_cleanup || true; fi
  stop_processes "${pids[@]}"
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

skip() {
  echo "SKIP: $*"
  exit 0
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

free_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    ephemeral_low = int(f.read().split()[0])
for _ in range(200):
    base = random.randrange(10000, ephemeral_low - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("free_ports: no %d consecutive free ports below %d" % (n, ephemeral_low))
PY
}

wait_until() {
  local tenths=$(($1 * 10))
  shift
  for _ in $(seq "$tenths"); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

_shell_test_has_text() { grep -q -- "$2" "$1" 2>/dev/null; }

wait_for_text() {
  wait_until "${3:-60}" _shell_test_has_text "$1" "$2"
}

running() {
  kill -0 "$1" 2>/dev/null && ! grep -q ') Z ' "/proc/$1/stat" 2>/dev/null
}

_shell_test_stopped() { ! running "$1"; }

wait_exit() {
  wait_until "${2:-5}" _shell_test_stopped "$1"
}

wait_all() {
  local pid bad=0
  for pid in "${pids[@]}"; do wait "$pid" || bad=$((bad + 1)); done
  pids=()
  return $bad
}

stop_processes() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    wait_exit "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

json() {
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print($2)" "$1"
}
