#!/usr/bin/env bash
# The CMake build and its tests, as CI runs them on each platform (docs/CMAKE.md): configure with
# warnings as errors, build everything, run every test with ctest. Compiles through ccache when it is
# installed (CCACHE_DIR says where its cache lives), so that a fresh clone does not recompile what an
# earlier run compiled. Prints each phase's time.
# Usage: tools/cmake/build_and_test.sh BUILD_DIR [extra cmake arguments...]
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR [cmake arguments...]" >&2; exit 2; }
build=$1
shift
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
phase build cmake --build "$build" -j "$jobs"
phase ctest ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 1800
