#!/usr/bin/env bash
# Runs each benchmark binary given as an argument for a minimal time: they must start, run every
# benchmark and exit 0. Timings from this run mean nothing.
set -euo pipefail
for bin in "$@"; do
  echo "== $bin"
  "$bin" --benchmark_min_time=0.001 --benchmark_repetitions=1
done
