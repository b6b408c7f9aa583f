#!/usr/bin/env bash
# //tools:model_logits as users run it (no Python torch needed): weights from `train`, an input
# written as safetensors; the one line it prints on success naming the absolute file it wrote;
# relative paths taken from BUILD_WORKING_DIRECTORY (where `bazel run` started) rather than the
# current directory (inside the runfiles under `bazel run`), else from the current directory; an
# unwritable --output refused before anything is read; a head of another size naming --num_classes.
set -uo pipefail

logits=$(realpath -s "$1")  # absolute: some runs below start elsewhere
train=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test model_logits

work=$tmp/work
elsewhere=$tmp/elsewhere
mkdir -p "$work/out" "$elsewhere"

# A float32 [2, 1, 28, 28] tensor named "input", as safetensors.save_file writes it.
python3 - "$work/x.safetensors" <<'PY'
import json, struct, sys
n = 2 * 1 * 28 * 28
data = struct.pack("<%df" % n, *((i % 255) / 255.0 for i in range(n)))
header = json.dumps({"input": {"dtype": "F32", "shape": [2, 1, 28, 28],
                               "data_offsets": [0, len(data)]}}).encode()
header += b" " * (-len(header) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + data)
PY
timeout 300 "$train" --model=convnet --train_limit=32 --batch_size=16 --max_steps=1 \
  --skip_validation --progress=none --save_state_dict="$work/w.safetensors" >"$tmp/train.out" 2>&1 ||
  fail "train: $(tail -5 "$tmp/train.out")"

# 1. Under `bazel run`: relative paths from BUILD_WORKING_DIRECTORY, not the current directory.
if (cd "$elsewhere" && BUILD_WORKING_DIRECTORY=$work "$logits" --model=convnet \
    --state_dict=w.safetensors --input=x.safetensors --output=out/y.safetensors \
    >"$tmp/run1.out" 2>"$tmp/run1.err"); then
  want="model_logits: wrote $work/out/y.safetensors: logits [2, 10] float32"
  [[ $(cat "$tmp/run1.out") == "$want" ]] ||
    fail "bazel run: printed '$(cat "$tmp/run1.out")', want '$want'"
  [[ -s $work/out/y.safetensors ]] || fail "bazel run: nothing written to $work/out/y.safetensors"
  [[ -z $(ls -A "$elsewhere") ]] || fail "bazel run: wrote into the current directory: $(ls -A "$elsewhere")"
else
  fail "bazel run: exit non-zero: $(cat "$tmp/run1.err")"
fi

# 2. Run directly: relative paths from the current directory; the line names the absolute path.
if (cd "$work" && env -u BUILD_WORKING_DIRECTORY "$logits" --model=convnet \
    --state_dict=w.safetensors --input=x.safetensors --output=y2.pt >"$tmp/run2.out" 2>"$tmp/run2.err"); then
  want="model_logits: wrote $work/y2.pt: logits [2, 10] float32"
  [[ $(cat "$tmp/run2.out") == "$want" ]] || fail "direct: printed '$(cat "$tmp/run2.out")', want '$want'"
  [[ -s $work/y2.pt ]] || fail "direct: nothing written to $work/y2.pt"
else
  fail "direct: exit non-zero: $(cat "$tmp/run2.err")"
fi

# 3. An --output that cannot be written is refused before the weights and input are read (both
# are missing here, and the message is about --output).
if BUILD_WORKING_DIRECTORY=$work "$logits" --model=convnet --state_dict=missing.pt \
    --input=missing.pt --output=no_such_dir/y.pt >"$tmp/run3.out" 2>"$tmp/run3.err"; then
  fail "unwritable output: accepted"
else
  grep -qF -- "--output: cannot write $work/no_such_dir/y.pt" "$tmp/run3.err" ||
    fail "unwritable output: $(cat "$tmp/run3.err")"
  [[ ! -s $tmp/run3.out ]] || fail "unwritable output: printed '$(cat "$tmp/run3.out")'"
fi

# 4. Weights with 10 classes, a model built for 5: the message says which flag to give.
if "$logits" --model=convnet --num_classes=5 --state_dict="$work/w.safetensors" \
    --input="$work/x.safetensors" --output="$work/y5.pt" >/dev/null 2>"$tmp/run4.err"; then
  fail "num_classes: accepted"
else
  grep -qF "fc2.weight has 10 rows, --num_classes=5 gives the model 5: add --num_classes=10" \
    "$tmp/run4.err" || fail "num_classes: no hint: $(cat "$tmp/run4.err")"
  [[ ! -e $work/y5.pt ]] || fail "num_classes: wrote $work/y5.pt"
fi

finish
