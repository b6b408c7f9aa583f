#!/usr/bin/env bash
# cmake/targets.cmake matches the BUILD files (tools/cmake/gen_cmake.py --check), and the check fails,
# naming the file, when a BUILD file gains a source that the CMake files lack. Reaches the source tree
# through its runfile of the root WORKSPACE (a symlink into the workspace), as //tools:format_test.
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test cmake_sync
root=$(dirname "$(readlink -f "$TEST_SRCDIR/$TEST_WORKSPACE/WORKSPACE")")
gen="$root/tools/cmake/gen_cmake.py"
command -v python3 >/dev/null || fail "python3 is not installed (tools/setup.sh installs it)"

# 1. The committed file is current.
if ! out=$(python3 "$gen" --root "$root" --check 2>&1); then
  fail "cmake/targets.cmake is stale: run tools/cmake/gen_cmake.py"
  echo "$out" | head -40 >&2
fi

# 2. A copy of the workspace (links to its files) whose //base:posix_io gains a source.
ws="$tmp/ws"
mkdir -p "$ws"
for entry in "$root"/* "$root"/.clang-format; do
  case $(basename "$entry") in bazel-*) continue ;; esac
  cp -rs "$entry" "$ws/"
done
rm "$ws/base/BUILD"
sed 's|srcs = \["posix_io.cc"\]|srcs = ["posix_io.cc", "posix_io_extra.cc"]|' "$root/base/BUILD" \
  >"$ws/base/BUILD"
grep -q posix_io_extra.cc "$ws/base/BUILD" || fail "the test could not edit //base:posix_io's srcs"
touch "$ws/base/posix_io_extra.cc"
set +e
out=$(python3 "$gen" --root "$ws" --check 2>&1)
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "--check exited $rc, not 1, when a BUILD file gained a source"
grep -q '^+.*base/posix_io_extra.cc' <<<"$out" || fail "the diff does not show the new source: $out"
grep -q 'is stale: run tools/cmake/gen_cmake.py' <<<"$out" || fail "no advice in: $out"

# 3. What the generator cannot translate stops it with the file and the rule, not a wrong CMake file.
echo 'cc_library(name = "odd", srcs = ["posix_io.cc"], copts = ["-O0"])' >>"$ws/base/BUILD"
set +e
out=$(python3 "$gen" --root "$ws" --check 2>&1)
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "an unknown attribute gave exit $rc, not 2"
grep -q "base/BUILD: cc_library(name = 'odd') has attributes this generator does not know: copts" \
  <<<"$out" || fail "unclear error for an unknown attribute: $out"
finish
