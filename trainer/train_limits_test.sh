#!/usr/bin/env bash
# Issue #29, through the real train binary: knobs beyond what the machine (or any job) holds end at
# once with exit 2 (bad flags) or 1 (a bad launcher environment) and a message naming the flag, the
# value, the bound and why; before, --workers=100000 aborted on std::system_error,
# --intra_op_threads=100000 hung, --nproc_per_node=1000 started ranks until the OOM killer came and
# --bucket_cap_mb=1e300 printed -9223372036854775808.
set -uo pipefail

train=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test train_limits

# refuse RC MESSAGE [ENV=VALUE...] -- FLAGS...: train exits RC within 60 s and says MESSAGE.
refuse() {
  local want_rc=$1 message=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 60 "$train" "$@" --dataset=synthetic >/dev/null 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq $want_rc ]] || fail "$*: exit $rc, want $want_rc (124: hung, 134: aborted): $(cat "$tmp/err")"
  grep -Fq -- "$message" "$tmp/err" || fail "$*: stderr lacks '$message': $(cat "$tmp/err")"
  echo "ok: $*"
}

refuse 2 "--workers=100000: at most " -- --workers=100000
refuse 2 "x this machine's " -- --workers=100000
refuse 2 "--intra_op_threads=100000: at most " -- --intra_op_threads=100000
refuse 2 "--bucket_cap_mb=1e+300: at most " -- --bucket_cap_mb=1e300
refuse 2 "--bucket_cap_mb=nan: must be a finite number > 0" -- --bucket_cap_mb=nan
refuse 2 "--batch_size=4611686018427387904: at most 1048576" -- --batch_size=4611686018427387904
refuse 2 "--nproc_per_node=100000: at most " -- --nproc_per_node=100000
refuse 2 "--nnodes=2147483647: at most 1048576" -- --nproc_per_node=1 --nnodes=2147483647
refuse 1 "WORLD_SIZE=2000000: at most 1048576" RANK=0 WORLD_SIZE=2000000 --
refuse 1 "explicit world_size=2000000: at most 1048576" -- --rank=0 --world_size=2000000
compgen -G "$tmp/*.pt" >/dev/null && fail "something was written"

finish
