#!/usr/bin/env bash
# Runs the same fixed-seed trainings with two train binaries and compares what they wrote, for a
# change that must not change results (a refactor, a faster kernel that claims exactness):
#   the ConvNet on 1 process, on 2 with gradient accumulation, on 2 with checkpoints inside the
#   epoch, --max_steps and JSON lines, and ResNet-18 with --sync_batchnorm on 2.
# Same means: the saved weights (safetensors) and every checkpoint byte for byte, and the metrics
# JSON and JSON lines equal once timings and paths are left out (compare_results.py).
#
#   tools/same_results/same_results.sh BEFORE_TRAIN AFTER_TRAIN [OUT_DIR]
#   bazel run //tools/same_results -- /path/to/old/train bazel-bin/trainer/train
#
# Exit status: 0 when every run matches, 1 when one differs or fails (named), 2 for bad arguments.
set -uo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
if [[ $# -lt 2 || $# -gt 3 || ${1:-} == --help ]]; then usage >&2; exit 2; fi
before=$1 after=$2
out=${3:-$(mktemp -d -t same_results.XXXXXX)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
compare="$here/compare_results.py"
if [[ ! -f $compare ]]; then
  for c in "${RUNFILES_DIR:-$0.runfiles}"/*/tools/same_results/compare_results.py; do compare=$c; done
fi
for bin in "$before" "$after"; do
  [[ -x $bin ]] || { echo "same_results: $bin is not an executable" >&2; exit 2; }
done

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

common=(--progress=none --timeout=120s --seed=7)
runs=(
  "conv1|--nproc_per_node=1 --train_limit=2048 --val_limit=500 --batch_size=64 --epochs=2"
  "conv2|--nproc_per_node=2 --train_limit=2048 --val_limit=500 --batch_size=64 --epochs=2 --accumulate_steps=2"
  "conv2_ck|--nproc_per_node=2 --train_limit=2048 --val_limit=500 --batch_size=64 --epochs=2 --checkpoint_every_steps=5 --max_steps=12 --print_freq=3 --log_jsonl={dir}/conv2_ck.jsonl"
  "rn2|--nproc_per_node=2 --model=resnet18 --dataset=synthetic --synthetic_shape=3,32,32 --synthetic_train_size=256 --synthetic_val_size=64 --batch_size=16 --epochs=1 --sync_batchnorm"
)

failed=0
for side in before after; do
  bin=${!side}
  mkdir -p "$out/$side"
  for run in "${runs[@]}"; do
    name=${run%%|*}
    read -r -a args <<<"${run#*|}"
    args=("${args[@]//\{dir\}/$out/$side}")
    timeout 900 "$bin" --master_port="$(free_port)" "${common[@]}" \
      --metrics_json="$out/$side/$name.json" --save_state_dict="$out/$side/$name.safetensors" \
      --checkpoint_dir="$out/$side/$name.ck" "${args[@]}" \
      >"$out/$side/$name.out" 2>"$out/$side/$name.err"
    rc=$?
    if [[ $rc -ne 0 ]]; then
      echo "same_results: $side $name failed (exit $rc): $(tail -3 "$out/$side/$name.err")" >&2
      failed=1
    fi
  done
done
[[ $failed -eq 0 ]] || exit 1
python3 "$compare" "$out/before" "$out/after"
