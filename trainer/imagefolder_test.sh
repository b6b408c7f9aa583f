#!/usr/bin/env bash
# `train --dataset=imagefolder` as users run it: a generated folder of 64 small JPEG and PNG training
# images in 4 classes (and 16 validation images), 2 ranks under the launcher with loader workers, the
# ConvNet and ResNet-18; and the errors a user can make with a folder: train and val with different
# classes, a missing split, a damaged image.
set -uo pipefail

train=$1
launch=$2
make_folder=$3
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test imagefolder

"$make_folder" "$tmp/pets" 4 16 4 || fail "make_image_folder failed"
common=(--dataset=imagefolder --data_dir="$tmp/pets" --image_size=32 --batch_size=8 --workers=2
  --timeout=60s --progress=none)

# 1. The ConvNet (3 input channels, 32 px from the options), one epoch: 64 images / (2 x 8) = 4 steps.
port=$(free_port)
timeout 180 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" "${common[@]}" \
  --metrics_json="$tmp/convnet.json" >"$tmp/convnet.out" 2>"$tmp/convnet.err"
rc=$?
if [[ $rc -ne 0 ]]; then
  fail "convnet: exit $rc: $(tail -5 "$tmp/convnet.err")"
else
  [[ $(json "$tmp/convnet.json" 'm["config"]["world_size"]') == 2 ]] || fail "convnet: world size"
  [[ $(json "$tmp/convnet.json" 'm["epochs"][0]["samples"]') == 64 ]] || fail "convnet: samples"
  [[ $(json "$tmp/convnet.json" 'm["epochs"][0]["steps"]') == 4 ]] || fail "convnet: steps"
  [[ $(json "$tmp/convnet.json" 'int(m["epochs"][0]["val_top1"] is not None)') == 1 ]] \
    || fail "convnet: no validation: $(cat "$tmp/convnet.json")"
  grep -q 'imagefolder from .*: 64 train, 16 val, 4 classes, 3x32x32 (8 other files ignored)' \
    "$tmp/convnet.err" || fail "convnet: no data line: $(grep -m1 data: "$tmp/convnet.err")"
fi

# 2. ResNet-18, a few steps, on 16 of the 64 images (spread over the 4 classes).
port=$(free_port)
timeout 180 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" "${common[@]}" \
  --model=resnet18 --max_steps=2 --skip_validation --train_limit=16 --metrics_json="$tmp/resnet.json" \
  >"$tmp/resnet.out" 2>"$tmp/resnet.err"
rc=$?
[[ $rc -eq 0 ]] || fail "resnet18: exit $rc: $(tail -5 "$tmp/resnet.err")"
[[ $rc -ne 0 ]] || [[ $(json "$tmp/resnet.json" 'm["global_step"]') == 2 ]] || fail "resnet18: steps"
grep -q 'imagefolder from .*: 16 train, 16 val, 4 classes' "$tmp/resnet.err" \
  || fail "resnet18: --train_limit: $(grep -m1 data: "$tmp/resnet.err")"

# 3. Mistakes: each exits 1 with a message that names the paths involved.
expect_error() {  # expect_error NAME TEXT ARGS...
  local name=$1 text=$2
  shift 2
  timeout 60 "$train" "${common[@]}" --max_steps=1 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  [[ $rc -eq 1 ]] || fail "$name: exit $rc, want 1: $(tail -3 "$tmp/$name.err")"
  grep -q -- "$text" "$tmp/$name.err" || fail "$name: no '$text' in: $(tail -3 "$tmp/$name.err")"
}
cp -r "$tmp/pets" "$tmp/extra"
mkdir "$tmp/extra/val/class_9" && cp "$tmp/extra/val/class_0/0.jpg" "$tmp/extra/val/class_9/"
expect_error mismatch "$tmp/extra/train (4: .*$tmp/extra/val (5: " --data_dir="$tmp/extra"
mkdir -p "$tmp/noval/train" && cp -r "$tmp/pets/train/class_0" "$tmp/noval/train/"
expect_error noval "$tmp/noval/val" --data_dir="$tmp/noval"
cp -r "$tmp/pets" "$tmp/damaged"
head -c 300 "$tmp/pets/train/class_1/3.png" >"$tmp/damaged/train/class_1/3.png"
expect_error damaged "$tmp/damaged/train/class_1/3.png: " --data_dir="$tmp/damaged" \
  --batch_size=64 --nproc_per_node=1
"$train" --dataset=imagefolder >"$tmp/nodir.out" 2>"$tmp/nodir.err"
[[ $? -eq 2 ]] || fail "no --data_dir: want exit 2 (a bad flag)"
grep -q -- '--data_dir' "$tmp/nodir.err" || fail "no --data_dir: message: $(cat "$tmp/nodir.err")"

finish
