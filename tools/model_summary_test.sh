#!/usr/bin/env bash
# Runs //tools:model_summary as a user would: the totals and a few layer rows for each model, and the
# errors for bad flags (non-zero exit, a message that says what to fix).
set -euo pipefail
bin="$1"
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

# expect_ok NAME EXPECTED_LAST_LINE PATTERN... -- ARGS...: exit 0, last line and each (grep -E) pattern.
expect_ok() {
  local name="$1" last="$2"
  shift 2
  local patterns=()
  while [[ "$1" != "--" ]]; do
    patterns+=("$1")
    shift
  done
  shift
  local out
  if ! out=$("$bin" "$@" 2>&1); then
    fail "$name: exited non-zero: $out"
    return
  fi
  [[ "$(tail -n 1 <<<"$out")" == "$last" ]] || fail "$name: last line is '$(tail -n 1 <<<"$out")', want '$last'"
  for p in "${patterns[@]}"; do
    grep -Eq -- "$p" <<<"$out" || fail "$name: no line matches '$p' in:
$out"
  done
  echo "ok: $name"
}

# expect_error NAME CODE MESSAGE ARGS...: exits with CODE and prints MESSAGE (fixed string) on stderr.
expect_error() {
  local name="$1" code="$2" message="$3"
  shift 3
  local err rc=0
  err=$("$bin" "$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc -eq $code ]] || fail "$name: exit code $rc, want $code ($err)"
  grep -Fq -- "$message" <<<"$err" || fail "$name: stderr lacks '$message': $err"
  echo "ok: $name"
}

expect_ok "resnet18, 1000 classes, 224 px" "Total params: 11,689,512" \
  '^  conv1 \(Conv2d\) +\[1, 64, 112, 112\] +9,408$' \
  '^  maxpool \(MaxPool2d\) +\[1, 64, 56, 56\] +--$' \
  '^      layer2\.0\.downsample \(Sequential\) +\[1, 128, 28, 28\] +--$' \
  '^  layer4 \(Sequential\) +\[1, 512, 7, 7\] +--$' \
  '^  fc \(Linear\) +\[1, 1000\] +513,000$' \
  '^Trainable params: 11,689,512$' \
  -- --model=resnet18 --num_classes=1000 --input_shape=3,224,224

expect_ok "resnet18, 10 classes, default shape" "Total params: 11,181,642" \
  '^Input shape: \[1, 3, 224, 224\]$' '^  fc \(Linear\) +\[1, 10\] +5,130$' \
  -- --model=resnet18 --num_classes=10

expect_ok "resnet18, small stem, 32 px, batch 4" "Total params: 11,173,962" \
  '^  conv1 \(Conv2d\) +\[4, 64, 32, 32\] +1,728$' '^  layer4 \(Sequential\) +\[4, 512, 4, 4\]' \
  -- --model=resnet18 --num_classes=10 --small_input_stem --input_shape=3,32,32 --batch_size=4

expect_ok "convnet, defaults" "Total params: 300,426" \
  '^ConvNet +\[1, 10\] +--$' '^  flatten \(Flatten\) +\[1, 4608\] +--$' '^  fc1 \(Linear\) +\[1, 64\] +294,976$' \
  -- --model=convnet

if "$bin" --model=resnet18 --small_input_stem --input_shape=3,32,32 | grep maxpool >/dev/null; then
  fail "small stem: a maxpool row"
fi

list=$("$bin" --list)
grep -q '^convnet ' <<<"$list" && grep -q '^resnet18 ' <<<"$list" || fail "--list: $list"

expect_error "unknown model" 1 'unknown model "resnet50"; known models: convnet, resnet18' --model=resnet50
expect_error "unknown model: the alwayslink hint" 1 'linked only with alwayslink = True on that library' --model=resnet50
expect_error "no model" 1 "--model is required; known models: convnet, resnet18"
expect_error "two dimensions" 1 '--input_shape must be C,H,W: three positive integers separated by commas, got "3,224"' \
  --model=resnet18 --input_shape=3,224
expect_error "not a number" 1 'got "3,x,224"' --model=resnet18 --input_shape=3,x,224
expect_error "zero size" 1 'got "3,0,224"' --model=resnet18 --input_shape=3,0,224
expect_error "no classes" 1 "num_classes must be positive, got 0" --model=resnet18 --num_classes=0
expect_error "convnet with 3 channels of 30x28" 1 \
  "ConvNet cannot take input of shape [1, 3, 30, 28]: ConvNet expects input of shape [N, 3, 28, 28]" \
  --model=convnet --input_shape=3,30,28
expect_error "stem on convnet" 1 "convnet has no small_input_stem option" --model=convnet --small_input_stem
expect_error "batch 0" 1 "batch size must be positive, got 0" --model=convnet --batch_size=0
# Issue #29: sizes beyond memory are refused before the forward pass allocates them.
expect_error "huge batch" 1 "--batch_size=4611686018427387904: at most 1048576" --model=convnet \
  --batch_size=4611686018427387904
expect_error "huge input" 1 "--batch_size=1048576 x --input_shape=3,100000,100000: the input alone" \
  --model=resnet18 --batch_size=1048576 --input_shape=3,100000,100000
expect_error "huge classifier" 1 "--num_classes=4611686018427387904: at most 1048576" \
  --model=resnet18 --num_classes=4611686018427387904
expect_error "unknown flag" 1 "Unknown command line flag 'modle'" --modle=convnet
expect_error "stray argument" 2 "unexpected argument 'resnet18'" resnet18

finish
