#!/usr/bin/env bash
# //tools:sampler_indices prints what PyTorch 1.13's DistributedSampler yields (expected arrays from
# python3 -c 'from torch.utils.data.distributed import DistributedSampler as D; ...'), and refuses
# bad arguments with a message and a non-zero exit.
set -uo pipefail

tool=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test sampler_indices

# expect ARRAY ARGS...: the tool prints exactly ARRAY and exits 0.
expect() {
  local want=$1; shift
  local got
  got=$(timeout 60 "$tool" "$@" 2>&1)
  local rc=$?
  [[ $rc -eq 0 ]] || fail "$* exited $rc: $got"
  [[ "$got" == "$want" ]] || fail "$*: got '$got', want '$want'"
}

# refuse RC MESSAGE ARGS...: the tool exits RC and says MESSAGE on stderr, nothing on stdout.
refuse() {
  local want_rc=$1 message=$2; shift 2
  local out err rc
  out=$(timeout 60 "$tool" "$@" 2>"$tmp/err")
  rc=$?
  err=$(cat "$tmp/err")
  [[ $rc -eq $want_rc ]] || fail "$*: exit $rc, want $want_rc ($err)"
  [[ "$err" == *"$message"* ]] || fail "$*: stderr '$err' lacks '$message'"
  [[ -z "$out" ]] || fail "$*: printed '$out' on stdout"
}

expect '[6,0,3,5]' --size=10 --num_replicas=3 --rank=1 --epoch=1 --seed=0 --shuffle=true --drop_last=false
expect '[9,3,11]' --size=12 --num_replicas=4 --rank=1 --epoch=2 --seed=7
expect '[3,2,6]' --size=7 --num_replicas=2 --rank=1 --epoch=3 --seed=42 --drop_last=true
expect '[1,4,7,0]' --size=10 --num_replicas=3 --rank=1 --shuffle=false
expect '[0]' --size=3 --num_replicas=8 --rank=6 --shuffle=false
expect '[]' --size=3 --num_replicas=8 --rank=6 --drop_last=true
expect '[10,13,4,6,7]' --size=17 --num_replicas=4 --rank=0 --epoch=3 --seed=1099511627781
expect '[8,7,4,6,5,1,2,0,3]' --size=9 --epoch=2 --seed=3 --drop_last

refuse 1 'invalid rank 3' --size=10 --num_replicas=3 --rank=3
refuse 1 'num_replicas must be >= 1' --size=10 --num_replicas=0
refuse 2 '--size=N' --num_replicas=2
refuse 2 "unexpected argument 'extra'" --size=4 extra
refuse 1 'Unknown command line flag' --size=4 --world_size=2
# Issue #29: sizes beyond memory and replica counts beyond any job, refused before allocating.
refuse 2 '--size=9223372036854775807: at most' --size=9223372036854775807
refuse 2 '--num_replicas=4611686018427387904: at most 1048576' --size=4 \
  --num_replicas=4611686018427387904

finish
