#!/usr/bin/env bash
# Our DDP communication hooks against PyTorch's own, with Debian's Python torch: the same 6-step
# training (hook_reference.py states it) under the built-in allreduce, fp16 and bf16 compression and
# three PowerSGD configurations (Gram-Schmidt at rank 1 with error feedback and warm start; QR at
# rank 3 without warm start, with epsilon, another seed and same-shape batching; rank 2 without
# error feedback, a weight left uncompressed by min_compression_rate), 2 ranks as processes: ours
# over Gloo and over shm, PyTorch's DDP over Gloo. Every step's gradients must agree within
# TOLERANCE of the step's largest gradient, the ranks of each run bit for bit, and the buckets
# PowerSGD compressed in must be the same.
#
# TOLERANCE: both sides run the same LibTorch kernels (Debian builds python3-torch and libtorch-dev
# from one source) on the same float32 inputs, and with two ranks each allreduce is one commutative
# addition: the runs agree to the bit (measured: every difference 0, on Gloo and on shm). What could
# still differ elsewhere is summation order inside an operation (a reduction or GEMM blocked
# differently by another LibTorch build or thread count): float32 rounding, about 1e-7 of a value,
# grown over six steps of training and PowerSGD's orthogonalization. 1e-5 of the step's largest
# gradient leaves a factor of 100 for that, and stays below every real difference: float16
# compression moves the gradients 3e-4 from float32's, bfloat16 2e-3, PowerSGD 5-30%, and another
# seed or a missed error feedback as much (compare also checks that each hook is more than 10
# tolerances from plain allreduce).
set -uo pipefail

ours=$1
reference=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test hook_reference

TOLERANCE=1e-5
STEPS=6
CONFIGS="allreduce;fp16;bf16;powersgd:rank=1,start=2"
CONFIGS+=";powersgd:rank=3,start=3,warm_start=0,epsilon=1e-8,seed=7,batch=1"
CONFIGS+=";powersgd:rank=2,start=2,error_feedback=0,seed=12345,min_rate=4"

python=/usr/bin/python3
"$python" -c 'import numpy, torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook' \
  2>/dev/null || skip "$python cannot import torch's DDP hooks (apt-get install python3-torch)"

mkdir -p "$tmp/pytorch"
timeout 150 "$python" "$reference" run --configs="$CONFIGS" --steps=$STEPS \
  --output_dir="$tmp/pytorch" >"$tmp/pytorch.out" 2>&1 ||
  fail "PyTorch's run: $(tail -20 "$tmp/pytorch.out")"
grep NOTE "$tmp/pytorch.out"

for backend in gloo shm; do
  out=$tmp/$backend
  mkdir -p "$out"
  for rank in 0 1; do
    timeout 120 "$ours" --rank=$rank --world_size=2 --init_method="file://$tmp/rdv_$backend" \
      --backend=$backend --configs="$CONFIGS" --steps=$STEPS --output_dir="$out" \
      >"$out/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  wait_all || fail "$backend: hook_reference failed: $(cat "$out"/rank*.log)"
  echo "ours on $backend against PyTorch on Gloo:"
  "$python" "$reference" compare --configs="$CONFIGS" --steps=$STEPS --ours="$out" \
    --theirs="$tmp/pytorch" --tolerance=$TOLERANCE || fail "$backend: differs from PyTorch"
done
finish
