#!/usr/bin/env bash
# What `train` links, read from the dynamic loader (ldd), on every platform: one LibTorch, every
# library found, and where that LibTorch is a CUDA build (Debian 13 with tools/setup.sh --cuda), its
# CUDA library, the CUDA runtime and NCCL as well, with one CUDA runtime in the process.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

train=$1
start_test train_links

if ! ldd "$train" >"$tmp/ldd" 2>&1; then
  fail "ldd $train failed: $(cat "$tmp/ldd")"
  finish
fi
# soname => path lines; prints the resolved path of the first library whose soname matches.
resolved() { awk -v re="$1" '$1 ~ re && $2 == "=>" {print $3; exit}' "$tmp/ldd"; }
count() { awk -v re="$1" '$1 ~ re' "$tmp/ldd" | wc -l; }

if grep -q 'not found' "$tmp/ldd"; then
  fail "libraries not found by the loader: $(grep 'not found' "$tmp/ldd" | tr -s ' \t' ' ')"
fi

torch=$(resolved '^libtorch\.so')
torch_cpu=$(resolved '^libtorch_cpu\.so')
[[ -n $torch && -n $torch_cpu ]] || fail "train links no LibTorch (libtorch.so, libtorch_cpu.so): $(cat "$tmp/ldd")"
[[ $(count '^libtorch_cpu\.so') -eq 1 ]] || fail "more than one LibTorch: $(grep libtorch_cpu "$tmp/ldd")"
[[ $(count '^libcudart\.so') -le 1 ]] || fail "two CUDA runtimes in one process: $(grep libcudart "$tmp/ldd")"

libdir=$(dirname "$(readlink -f "${torch:-/nonexistent}")")
if compgen -G "$libdir/libtorch_cuda.so*" >/dev/null; then
  echo "LibTorch in $libdir is a CUDA build: train must link its CUDA parts and NCCL"
  for lib in libtorch_cuda libc10_cuda libcudart libnccl; do
    path=$(resolved "^$lib\\.so")
    if [[ -n $path ]]; then
      echo "  $lib -> $path"
    else
      fail "train does not link $lib although LibTorch in $libdir has CUDA"
    fi
  done
  # NCCL's and LibTorch's CUDA runtime must be the one the NCCL backend's own code calls: the
  # same soname, which the loader loads once per process. The files may differ (a pip torch finds
  # its own copy through its RPATH, train the CUDA folder's through its RUNPATH); then train's is
  # the one loaded, and a different major version (another soname) would be a second runtime.
  cudart_soname=$(awk '$1 ~ /^libcudart\.so/ {print $1; exit}' "$tmp/ldd")
  cudart=$(resolved '^libcudart\.so')
  torch_cuda=$(resolved '^libtorch_cuda\.so')
  ldd "${torch_cuda:-/nonexistent}" >"$tmp/ldd_torch_cuda" 2>/dev/null
  torch_soname=$(awk '$1 ~ /^libcudart\.so/ {print $1; exit}' "$tmp/ldd_torch_cuda")
  torch_cudart=$(awk '$1 ~ /^libcudart\.so/ && $2 == "=>" {print $3; exit}' "$tmp/ldd_torch_cuda")
  [[ -z $torch_soname || $torch_soname == "$cudart_soname" ]] ||
    fail "train's CUDA runtime $cudart_soname ($cudart) is not LibTorch's $torch_soname ($torch_cudart): two runtimes in one process"
  # Compared as files: /lib and /usr/lib are one folder on merged-/usr systems.
  if [[ -n $torch_cudart && "$(readlink -f "$cudart")" != "$(readlink -f "$torch_cudart")" ]]; then
    echo "  note: LibTorch alone would load $torch_cudart; in train, $cudart (same soname $cudart_soname) serves both"
  fi
else
  echo "LibTorch in $libdir is a CPU build"
  [[ -z $(resolved '^libtorch_cuda\.so') ]] || fail "a CPU LibTorch, yet train links libtorch_cuda"
fi
finish
