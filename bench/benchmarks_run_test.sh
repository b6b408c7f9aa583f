#!/usr/bin/env bash
# Runs benchmark binaries for a minimal time: each must start, run its benchmarks and exit 0. Timings
# from this run mean nothing. Arguments: binaries, each optionally followed by flags of its own
# (e.g. a --benchmark_filter that keeps a slow suite short).
set -euo pipefail
run() {
  [[ $# -gt 0 ]] || return 0
  echo "== $*"
  "$@" --benchmark_min_time=0.001 --benchmark_repetitions=1
}
cmd=()
for arg in "$@"; do
  if [[ $arg == --* ]]; then
    cmd+=("$arg")
  else
    run "${cmd[@]}"
    cmd=("$arg")
  fi
done
run "${cmd[@]}"
