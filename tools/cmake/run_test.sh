#!/usr/bin/env bash
# Runs one test of the CMake build the way `bazel test` runs it (ctest calls this for every test):
# from the build tree, which mirrors Bazel's runfiles tree (cmake/dtrain_rules.cmake), with a fresh
# TEST_TMPDIR and Bazel's TEST_SRCDIR, TEST_WORKSPACE and RUNFILES_DIR, one compute thread per process
# (as .bazelrc's --test_env), and a test's exit status as it is. Usage: run_test.sh BUILD_DIR TEST [ARGS...]
set -euo pipefail
build=$1
test=$2
shift 2
# Bazel's runfiles root holds the workspace under its name: CMakeLists.txt links _runfiles/dtrain.
runfiles="$build/_runfiles"
export TEST_TMPDIR="$build/_tmp/$test"
rm -rf "$TEST_TMPDIR"
mkdir -p "$TEST_TMPDIR"
export TEST_SRCDIR="$runfiles" RUNFILES_DIR="$runfiles" TEST_WORKSPACE=dtrain OMP_NUM_THREADS=1
cd "$build"
exec "./$test" "$@"
