#!/usr/bin/env bash
# tools/gpu_check.sh where no GPU is visible (this machine, CI): it must stop at its first check with
# one FAIL line saying there is no GPU and what to do, and exit 1, without building anything (the
# binaries come from this test's data). With stand-ins for nvidia-smi it must tell a CPU-only
# LibTorch and a driver that does not answer apart from "no GPU". Bad arguments exit 2. Where a GPU is
# visible the test skips, saying so: run tools/gpu_check.sh itself there.
set -uo pipefail
# shellcheck source=tools/testing/shell_test_lib.sh
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

check=$1
train=$2
bandwidth=$3
start_test gpu_check

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
  skip "nvidia-smi lists a GPU here: run tools/gpu_check.sh itself (this test covers machines without one)"
fi
count=$("$train" --print_cuda_devices 2>/dev/null)
[[ $count == 0 ]] || skip "LibTorch sees $count CUDA device(s) here: run tools/gpu_check.sh itself"

# A bazel that records being called: nothing here may build.
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "$@" >>"%s/bazel_called"\nexit 1\n' "$tmp" >"$tmp/bin/bazel"
chmod +x "$tmp/bin/bazel"
given=(--train "$train" --bandwidth "$bandwidth")

# run NAME [PATH_PREFIX]: runs the check with the given binaries, output in $tmp/NAME.out, status in $rc.
run() {
  PATH="$tmp/bin:${2:+$2:}$PATH" "$check" "${given[@]}" --logs "$tmp/$1.logs" >"$tmp/$1.out" 2>&1
  rc=$?
}

# 1. As it is here: no GPU.
run plain
[[ $rc -eq 1 ]] || fail "no GPU: exit $rc, want 1"
first=$(head -1 "$tmp/plain.out")
if command -v nvidia-smi >/dev/null 2>&1; then
  want_prefix="FAIL (a) driver and devices: no GPU: nvidia-smi lists 0 GPU(s) and the project's LibTorch sees 0 CUDA devices."
else
  want_prefix="FAIL (a) driver and devices: no GPU: nvidia-smi not found and the project's LibTorch sees 0 CUDA devices."
fi
want="$want_prefix Run this on a machine with NVIDIA GPUs and their driver; check CUDA_VISIBLE_DEVICES."
[[ $first == "$want" ]] || fail "no GPU: first line is '$first', want '$want'"
[[ $(grep -c '^FAIL' "$tmp/plain.out") -eq 1 ]] || fail "no GPU: want one FAIL line: $(cat "$tmp/plain.out")"
grep -q '^PASS' "$tmp/plain.out" && fail "no GPU: a check passed: $(cat "$tmp/plain.out")"
grep -q "(logs: $tmp/plain.logs)" "$tmp/plain.out" || fail "no GPU: logs folder not named"
echo "no GPU: exit $rc: $first"

# with_smi NAME SCRIPT WANT: runs the check with SCRIPT (sh) as nvidia-smi; wants exit 1 and a first
# line matching the regular expression WANT.
with_smi() {
  mkdir -p "$tmp/$1.smi"
  printf '#!/bin/sh\n%s\n' "$2" >"$tmp/$1.smi/nvidia-smi"
  chmod +x "$tmp/$1.smi/nvidia-smi"
  run "$1" "$tmp/$1.smi"
  [[ $rc -eq 1 ]] || fail "$1: exit $rc, want 1"
  head -1 "$tmp/$1.out" | grep -q -- "$3" || fail "$1: first line '$(head -1 "$tmp/$1.out")', want /$3/"
  echo "$1: exit $rc: $(head -1 "$tmp/$1.out")"
}

# 2. A driver that lists two GPUs, with this machine's CPU-only LibTorch.
with_smi cpu_only_torch \
  'echo "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0)"; echo "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-1)"' \
  "^FAIL (a) driver and devices: nvidia-smi lists 2 GPU(s) (2 x NVIDIA A100-SXM4-40GB) but the project's LibTorch sees 0 CUDA devices\. This build's LibTorch is CPU-only"

# 3. A driver that does not answer.
with_smi broken_driver \
  "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9" \
  "^FAIL (a) driver and devices: nvidia-smi failed: NVIDIA-SMI has failed.*NVIDIA driver\. Is the NVIDIA kernel driver installed and loaded"

# 4. Bad arguments.
"$check" --min_busbw=fast >"$tmp/args.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "bad --min_busbw: exit $rc, want 2"
"$check" --frobnicate >"$tmp/args.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "unknown argument: exit $rc, want 2"

[[ ! -e "$tmp/bazel_called" ]] || fail "bazel was called: $(cat "$tmp/bazel_called")"
finish
