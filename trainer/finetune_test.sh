#!/usr/bin/env bash
# Fine-tuning torchvision's ImageNet ResNet-18 on one's own classes: torchvision.models.resnet18()
# (1000 classes; random weights, nothing downloaded) saved by Debian's Python torch, then
# `train --init_state_dict=... --init_state_dict_exclude=fc` on a generated 3-class image folder.
# Every weight but the head's starts from the file, the head keeps its fresh 3-class initialisation;
# without the exclusion the run is refused naming fc.weight and the flag, and a misspelt exclusion
# or --init_state_dict_strict=false alone (shapes must still match, as in PyTorch) is refused too.
set -uo pipefail

train=$1
make_folder=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test finetune

python=/usr/bin/python3
"$python" -c 'import torch, torchvision' 2>/dev/null ||
  skip "Debian's python3-torch and python3-torchvision are not installed (tools/setup.sh installs them)"

"$python" -c '
import sys, torch, torchvision
torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), sys.argv[1])' "$tmp/imagenet.pth" ||
  fail "Python could not save torchvision's resnet18"
"$make_folder" "$tmp/pets" 3 8 2 || fail "make_image_folder failed"

# One step at a learning rate so small that every weight stays within 1e-4 of where it started.
common=(--model=resnet18 --dataset=imagefolder --data_dir="$tmp/pets" --image_size=32 --batch_size=8
  --workers=1 --max_steps=1 --lr=1e-6 --skip_validation --progress=none)

# 1. Fine-tuned: the file's weights, a fresh head. And a run from fresh weights, to compare heads.
if ! timeout 300 "$train" "${common[@]}" --init_state_dict="$tmp/imagenet.pth" \
    --init_state_dict_exclude=fc --save_state_dict="$tmp/tuned.pt" \
    --metrics_json="$tmp/tuned.json" >"$tmp/tuned.out" 2>&1; then
  fail "fine-tuning run failed: $(tail -5 "$tmp/tuned.out")"
fi
grep -q "weights from $tmp/imagenet.pth: 120 of 122 entries loaded; left out (kept as initialised): fc.weight, fc.bias$" \
  "$tmp/tuned.out" || fail "no report of the head left out: $(grep -m1 'weights from' "$tmp/tuned.out")"
[[ $(json "$tmp/tuned.json" 'm["global_step"]') == 1 ]] || fail "fine-tuning: not one step"
timeout 300 "$train" "${common[@]}" --save_state_dict="$tmp/fresh.pt" >"$tmp/fresh.out" 2>&1 ||
  fail "fresh run failed: $(tail -5 "$tmp/fresh.out")"

"$python" -c '
import sys, torch
imagenet, tuned, fresh = (torch.load(p, map_location="cpu") for p in sys.argv[1:])
bad = []
def close(a, b):
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=0, atol=1e-4)
params = [k for k in imagenet if "running_" not in k and "num_batches" not in k]
for k in params:
    if k.startswith("fc."):
        continue
    if not close(tuned[k], imagenet[k]):
        bad.append(k + " did not start from the file")
if close(fresh["conv1.weight"], imagenet["conv1.weight"]):
    bad.append("fresh weights too close to the file: the check above proves nothing")
if list(tuned["fc.weight"].shape) != [3, 512] or list(tuned["fc.bias"].shape) != [3]:
    bad.append("head not 3-class: %s" % list(tuned["fc.weight"].shape))
for k in ("fc.weight", "fc.bias"):
    if not close(tuned[k], fresh[k]):
        bad.append(k + " is not the fresh initialisation")
if sorted(tuned) != sorted(imagenet):
    bad.append("other names than torchvision")
print("\n".join(bad))
sys.exit(1 if bad else 0)' "$tmp/imagenet.pth" "$tmp/tuned.pt" "$tmp/fresh.pt" >"$tmp/compare.out" 2>&1 ||
  fail "weights: $(cat "$tmp/compare.out")"

# 2. Refusals, each before any training (exit 1, one message).
expect_error() {  # expect_error NAME ARGS... -- TEXT...
  local name=$1
  shift
  local args=()
  while [[ $1 != -- ]]; do args+=("$1"); shift; done
  shift
  timeout 120 "$train" "${common[@]}" --init_state_dict="$tmp/imagenet.pth" "${args[@]}" \
    >"$tmp/$name.out" 2>&1
  local rc=$?
  [[ $rc -eq 1 ]] || fail "$name: exit $rc, want 1: $(tail -3 "$tmp/$name.out")"
  local text
  for text in "$@"; do
    grep -qF -- "$text" "$tmp/$name.out" || fail "$name: no '$text' in: $(tail -3 "$tmp/$name.out")"
  done
}
expect_error strict -- "mismatched: fc.weight (file [1000, 512] float32, model [3, 512] float32)" \
  "leave them out: --init_state_dict_exclude=fc"
expect_error not_strict --init_state_dict_strict=false -- "mismatched: fc.weight" \
  "--init_state_dict_exclude=fc"
expect_error typo --init_state_dict_exclude=fc,fcc -- \
  "--init_state_dict_exclude: 'fcc' names no entry of the file or the model"
finish
