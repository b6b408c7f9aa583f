#!/usr/bin/env bash
# The CMake build and its tests, as CI runs them on each platform (docs/CMAKE.md): configure with
# warnings as errors, build everything, run every test with ctest. Compiles through ccache when it is
# installed (CCACHE_DIR says where its cache lives), so that a fresh clone does not recompile what an
# earlier run compiled. Prints each phase's time.
# Usage: tools/cmake/build_and_test.sh BUILD_DIR [--tests LABELS] [extra cmake arguments...]
#   --tests LABELS  builds everything but the tests (the dtrain_programs target) and only the tests
#                   named, as comma-separated Bazel labels (//tools/cmake:consumer_test,...), and runs
#                   only those: what CI does where Bazel has run every test on the same platform.
set -euo pipefail
usage="usage: $0 BUILD_DIR [--tests //PACKAGE:NAME,...] [cmake arguments...]"
[[ $# -ge 1 ]] || { echo "$usage" >&2; exit 2; }
build=$1
shift
targets=()
ctest_filter=()
if [[ ${1:-} == --tests ]]; then
  [[ -n ${2:-} ]] || { echo "$usage" >&2; exit 2; }
  IFS=, read -r -a labels <<<"$2"
  shift 2
  targets=(dtrain_programs)
  names=()
  for label in "${labels[@]}"; do
    if [[ ! $label =~ ^//([A-Za-z0-9_/]*):([A-Za-z0-9_]+)$ ]]; then
      echo "$0: --tests: '$label' is not a label of the form //package:name" >&2
      exit 2
    fi
    package=${BASH_REMATCH[1]} name=${BASH_REMATCH[2]}
    # The target's CMake name, as tools/cmake/gen_cmake.py makes it (cmake_name).
    target=dtrain_${package//\//_}
    [[ ${package##*/} == "$name" ]] || target+=_$name
    targets+=("$target")
    names+=("$label")
  done
  ctest_filter=(-R "^($(IFS='|'; echo "${names[*]}"))\$")
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
args=(-DDTRAIN_WERROR=ON)
command -v ninja >/dev/null 2>&1 && args+=(-G Ninja)
if command -v ccache >/dev/null 2>&1; then
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths under the source tree hash as relative ones: another clone hits the same entries.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$src}
fi
jobs=$(nproc)

phase() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  set +e
  "$@"
  rc=$?
  set -e
  echo "build_and_test: $name: $(($(date +%s) - start)) s, status $rc"
  return "$rc"
}

# A build folder configured from another source tree (another clone) is started afresh.
if [[ -f $build/CMakeCache.txt ]] &&
   ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
phase configure cmake -S "$src" -B "$build" "${args[@]}" "$@"
phase build cmake --build "$build" -j "$jobs" ${targets[@]:+--target "${targets[@]}"}
if [[ ${#ctest_filter[@]} -gt 0 ]]; then
  # Every label must name a test: a misspelt one would otherwise pass by running nothing.
  listed=$(ctest --test-dir "$build" -N "${ctest_filter[@]}" | grep -c '^ *Test *#' || true)
  if [[ $listed -ne ${#names[@]} ]]; then
    echo "build_and_test: --tests names ${#names[@]} tests, ctest found $listed" >&2
    exit 1
  fi
fi
phase ctest ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 1800 \
  "${ctest_filter[@]}"
