#!/usr/bin/env bash
# Weights between PyTorch and the project, with Debian's own Python torch and torchvision, for the
# book's ConvNet and ResNet-18:
#  1. written by Python (torch.save, and safetensors where Debian packages it), loaded here: the
#     same output on the same input as the Python model (evaluation mode, so batch-norm statistics
#     count);
#  2. trained here for a few steps by `train`, written as .pt and .safetensors, loaded by Python
#     with strict=True (and torch.load's weights_only): the same output as the model here computes.
set -uo pipefail

logits=$1
train=$2
interop=$3
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test pytorch_interop

python=/usr/bin/python3
"$python" -c 'import torch, torchvision' 2>/dev/null ||
  skip "Debian's python3-torch and python3-torchvision are not installed (tools/setup.sh installs them)"
formats=(pt)
if "$python" "$interop" has-safetensors; then
  formats+=(safetensors)
else
  echo "NOTE: python3-safetensors is not installed (Debian 12 does not package it): .pt only"
fi

for model in convnet resnet18; do
  d=$tmp/$model
  mkdir -p "$d"
  # 1. Python's weights, here.
  "$python" "$interop" write "$model" "$d" || { fail "$model: Python could not write"; continue; }
  for f in "${formats[@]}"; do
    if ! "$logits" --model="$model" --state_dict="$d/w.$f" --input="$d/x.pt" \
        --output="$d/y_here_$f.pt" 2>"$d/err"; then
      fail "$model: Python's w.$f not loaded here: $(cat "$d/err")"
      continue
    fi
    "$python" "$interop" compare "$d/y_python.pt" "$d/y_here_$f.pt" ||
      fail "$model: Python's w.$f gives other outputs here than in Python"
  done

  # 2. Weights trained here, in Python.
  for f in "${formats[@]}"; do
    if ! timeout 300 "$train" --model="$model" --train_limit=64 --batch_size=16 --max_steps=3 \
        --skip_validation --save_state_dict="$d/t.$f" >"$d/train.out" 2>&1; then
      fail "$model: train --save_state_dict=t.$f failed: $(tail -5 "$d/train.out")"
      continue
    fi
    "$logits" --model="$model" --state_dict="$d/t.$f" --input="$d/x.pt" \
      --output="$d/t_here_$f.pt" 2>"$d/err" || fail "$model: t.$f: $(cat "$d/err")"
    if ! "$python" "$interop" logits "$model" "$d/t.$f" "$d/x.pt" "$d/t_python_$f.pt" \
        2>"$d/err"; then
      fail "$model: Python could not load train's t.$f strictly: $(tail -3 "$d/err")"
      continue
    fi
    "$python" "$interop" compare "$d/t_here_$f.pt" "$d/t_python_$f.pt" ||
      fail "$model: train's t.$f gives other outputs in Python"
  done
done
finish
