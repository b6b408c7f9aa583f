#!/usr/bin/env bash
# Configuring without an optional library (Google Benchmark, prometheus-cpp: as if not installed)
# succeeds, leaves out exactly the targets that need it, and says so once per library, naming them;
# without Gloo, a stand-in says the build has none; without LibTorch it stops with advice. Configure only (seconds). Run by ctest (CMake build only).
# Usage: missing_deps_test.sh CMAKE SOURCE_DIR [PREFIX_PATH], PREFIX_PATH with : for ;
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test missing_deps
cmake=$1
src=$2
prefix_path=${3:-}
prefix_path=${prefix_path//:/;}

"$cmake" -S "$src" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON -DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON \
  >"$tmp/out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "configuring without Benchmark and prometheus-cpp: exit $rc: $(tail -20 "$tmp/out")"
# CMake wraps warnings: join the lines first.
text=$(tr '\n' ' ' <"$tmp/out" | tr -s ' ')
grep -q 'Google Benchmark not found: no benchmarks in bench/. Left out ([0-9]*): .*bench_data_benchmark' \
  <<<"$text" || fail "no warning naming Google Benchmark and bench_data_benchmark: $text"
grep -q 'prometheus-cpp not found: .* Left out ([0-9]*): .*trainer_report_live_metrics' <<<"$text" \
  || fail "no warning naming prometheus-cpp and trainer_report_live_metrics: $text"
[[ $(grep -c 'not found:' "$tmp/out") -eq 2 ]] || fail "want exactly two missing libraries: $text"
targets=$(grep -oE '^build [^:]+' "$tmp/b/build.ninja" "$tmp/b/Makefile" 2>/dev/null; \
          "$cmake" --build "$tmp/b" --target help 2>/dev/null)
grep -q 'dtrain_bench_data_benchmark' <<<"$targets" && fail "bench_data_benchmark was not left out"
grep -q 'dtrain_dist_ddp' <<<"$targets" || fail "dtrain_dist_ddp (needs neither) was left out"
grep -q 'dtrain_base_crc32_test' <<<"$targets" || fail "base/crc32_test (needs neither) was left out"

# Without Gloo (a pip torch on a GPU machine): the Gloo backend is a stand-in that says so, and all
# that creates backends by name (the factory, train, launch) still builds; tests that link the
# stand-in are left out, the NCCL backend's are not.
"$cmake" -S "$src" -B "$tmp/nogloo" -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON >"$tmp/nogloo.out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "configuring without Gloo: exit $rc: $(tail -20 "$tmp/nogloo.out")"
text=$(tr '\n' ' ' <"$tmp/nogloo.out" | tr -s ' ')
grep -q "Gloo not found: no TCP between CPU ranks on different hosts: .* Built with a stand-in: dist_backend_gloo\. Left out ([0-9]*): .*dist_backend_gloo_gloo_backend_test" \
  <<<"$text" || fail "no warning naming Gloo, its stand-in and gloo_backend_test: $text"
targets=$("$cmake" --build "$tmp/nogloo" --target help 2>/dev/null)
for want in dtrain_dist_backend_factory dtrain_trainer_train \
            dtrain_tools_launch dtrain_dist_backend_nccl_nccl_backend_test \
            dtrain_dist_backend_gloo_gloo_unavailable_test; do
  grep -qE "(^|[ /])$want(:|$| )" <<<"$targets" || fail "$want was left out without Gloo"
done
for unwanted in dtrain_dist_backend_gloo_gloo_backend_test dtrain_dist_backend_factory_test \
                dtrain_dist_backend_gloo_gloo_store; do
  grep -qE "(^|[ /])$unwanted(:|$| )" <<<"$targets" && fail "$unwanted was built without Gloo"
done

# Without LibTorch: a clear stop, not a CMake trace.
"$cmake" -S "$src" -B "$tmp/none" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >"$tmp/none.out" 2>&1
rc=$?
[[ $rc -ne 0 ]] || fail "configuring without LibTorch succeeded"
text=$(tr '\n' ' ' <"$tmp/none.out" | tr -s ' ')
grep -q 'LibTorch not found. Point CMAKE_PREFIX_PATH at it' <<<"$text" \
  || fail "no advice without LibTorch: $text"
finish
