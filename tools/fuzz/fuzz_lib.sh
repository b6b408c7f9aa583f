# Shared by the fuzzer scripts (sourced): fuzz_build OUT SOURCES... [-- LIBS...] compiles SOURCES with
# clang's libFuzzer, AddressSanitizer and UBSan against Debian's Abseil into the binary OUT, after
# checking that clang++ is there.

fuzz_abseil=(-labsl_status -labsl_statusor -labsl_cord -labsl_cordz_info -labsl_cord_internal
             -labsl_cordz_functions -labsl_cordz_handle -labsl_str_format_internal -labsl_strings
             -labsl_strings_internal -labsl_int128 -labsl_throw_delegate -labsl_raw_hash_set
             -labsl_hash -labsl_city -labsl_low_level_hash -labsl_synchronization
             -labsl_graphcycles_internal -labsl_time -labsl_time_zone -labsl_stacktrace
             -labsl_symbolize -labsl_malloc_internal -labsl_base -labsl_spinlock_wait
             -labsl_raw_logging_internal)

fuzz_build() {
  local out=$1
  shift
  local srcs=() libs=()
  while [[ $# -gt 0 && $1 != -- ]]; do srcs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  libs=("$@")
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "$(basename "$0"): clang++ is not installed (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
  fi
  clang++ -std=c++17 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    "${srcs[@]}" "${fuzz_abseil[@]}" "${libs[@]}" -lpthread -o "$out"
}
