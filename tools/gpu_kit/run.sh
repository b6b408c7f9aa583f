#!/usr/bin/env bash
# The GPU evidence kit's run (README.md beside this file): on a machine with one GPU or more, a pip
# torch, CUDA, NCCL, CMake and ninja, and no Bazel, no Debian packages and no network, it builds the
# project with CMake against the machine's own torch (the libraries the machine lacks come from
# prepare.sh's prefix), runs every GPU test, trains ResNet-18 and the ConvNet on the GPU with one
# rank and with two ranks sharing it, measures NCCL's bandwidth and host time per collective, runs
# tools/gpu_check.sh, trains the same with the machine's PyTorch (experiments/pytorch_reference.py)
# side by side, and writes one report: OUT/report.md, with every log under OUT/logs.
#
# --cpu rehearses the same steps on a machine without a GPU, against its CPU LibTorch (Debian's),
# so that the kit cannot rot: CI runs it. There the GPU steps must end in their "no GPU" answers.
#
# Usage: tools/gpu_kit/run.sh [--cpu] [--out DIR] [--build DIR] [--jobs N] [--system-libs]
#   --out          where the report and logs go (default: out/gpu_kit in the checkout)
#   --build        the CMake build folder (default: /tmp/dtrain-gpu-kit-build); an existing one is
#                  built incrementally
#   --jobs         parallel compile jobs (default: all cores)
#   --system-libs  build against the system's libraries rather than prepare.sh's prefix, and only
#                  configure a scratch build against the prefix to check it (CI, where the system
#                  has them and a build of them is already cached)
# Exits 0 when every step passed (in --cpu mode: the GPU steps said "no GPU"), 1 otherwise, 2 for
# bad arguments. A step that fails does not stop the run: the report says what ran.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
kit=$src/tools/gpu_kit
mode=gpu
out=$src/out/gpu_kit
build=/tmp/dtrain-gpu-kit-build
jobs=$(nproc)
system_libs=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) mode=cpu; shift ;;
    --system-libs) system_libs=1; shift ;;
    --out|--build|--jobs)
      [[ $# -ge 2 ]] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --out) out=$2 ;;
        --build) build=$2 ;;
        --jobs) jobs=$2 ;;
      esac
      shift 2
      ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --jobs=$jobs is not a number" >&2; exit 2; }
mkdir -p "$out/logs" "$out/metrics"
out=$(cd "$out" && pwd)
logs=$out/logs
: >"$out/steps.tsv"
run_start=$(date +%s)

# step NAME SECONDS CMD...: runs CMD with its output in logs/NAME.log, records status and time.
step() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  if declare -F "$1" >/dev/null; then
    # A function of this script: timeout runs programs, so it runs in a bash of its own.
    timeout --kill-after=10 "$limit" bash -c "$(declare -f "$1"); \"\$@\"" _ "$@" \
      >"$logs/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  fi
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - start))" >>"$out/steps.tsv"
  if [[ $rc -eq 0 ]]; then
    echo "run.sh: $name: ok ($(($(date +%s) - start)) s)"
  else
    echo "run.sh: $name: status $rc ($(($(date +%s) - start)) s): $(tail -1 "$logs/$name.log")"
  fi
  return "$rc"
}
# gpu_only NAME: in --cpu mode, a GPU step that failed saying there is no GPU did what it must:
# its status becomes "no-gpu". Any other failure stays one.
gpu_only() {
  local name=$1
  [[ $mode == cpu ]] || return 0
  grep -q "^$name"$'\t''0'$'\t' "$out/steps.tsv" && return 0
  if grep -qiE 'no GPU|no CUDA device|cannot run here|sees no device' "$logs/$name.log"; then
    sed -i "s/^$name\t[0-9]*\t/$name\tno-gpu\t/" "$out/steps.tsv"
    echo "run.sh: $name: said there is no GPU, as it must here"
  fi
}

# --- The machine -----------------------------------------------------------------------------------
if [[ $mode == gpu ]]; then
  python=${PYTHON:-python3}
  device=cuda
  backend=nccl
else
  python=/usr/bin/python3
  device=cpu
  backend=gloo
fi
{
  echo "mode: $mode"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -r)"
  echo "cores: $(nproc)"
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "compiler: $(c++ --version 2>/dev/null | head -1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1)"
  echo "ninja: $(ninja --version 2>/dev/null || echo none)"
  gpus=$(nvidia-smi -L 2>/dev/null | paste -sd';')
  echo "gpus: ${gpus:-none}"
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  "$python" - <<'PY' 2>&1
import torch
print("python torch:", torch.__version__)
print("python torch cuda:", torch.version.cuda, "available:", torch.cuda.is_available())
try:
    print("python torch nccl:", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e:  # CPU builds
    print("python torch nccl: none (%s)" % e)
PY
  echo "kit: $(head -1 "$kit/out/manifest.txt" 2>/dev/null || echo 'no prefix (run prepare.sh)')"
  echo "commit: $(git -C "$src" log -1 --format='%h %s' 2>/dev/null || echo unknown)"
} >"$out/environment.txt" 2>&1
cat "$out/environment.txt"

# --- Build -----------------------------------------------------------------------------------------
export kit build python
export prefix=$build/kit-prefix
unpack() {
  [[ -f $kit/out/prefix.tar.gz ]] || {
    echo "no $kit/out/prefix.tar.gz: run tools/gpu_kit/prepare.sh on a Debian 12 machine first"
    return 1
  }
  rm -rf "$prefix" && mkdir -p "$prefix" && tar -C "$prefix" -xzf "$kit/out/prefix.tar.gz"
}
prefix_path=()
if [[ $mode == gpu ]]; then
  torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  prefix_path+=("$torch_prefix")
  [[ -n ${CUDA_HOME:-} || ! -d /usr/local/cuda ]] || export CUDA_HOME=/usr/local/cuda
fi
mkdir -p "$build"
step unpack 120 unpack
configure_args=(-DCMAKE_BUILD_TYPE=Release)
command -v ninja >/dev/null 2>&1 && [[ ! -f $build/CMakeCache.txt ]] && configure_args+=(-G Ninja)
command -v ccache >/dev/null 2>&1 && configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Warnings fail the rehearsal (Debian's toolchain, as CI builds it); a GPU machine's newer compiler
# may warn where GCC 12 did not, and that must not cost the evidence.
if [[ $mode == cpu ]]; then configure_args+=(-DDTRAIN_WERROR=ON); else configure_args+=(-DDTRAIN_WERROR=OFF); fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$src}
if [[ $system_libs == 1 ]]; then
  # The prefix still has to work: configure a scratch build against it and check what it found.
  step prefix_check 300 bash -c '
    set -e
    cmake -S "$1" -B "$2/prefix-check" -DCMAKE_PREFIX_PATH="$3" -DDTRAIN_WERROR=ON
    grep -q "^absl_DIR:PATH=$4" "$2/prefix-check/CMakeCache.txt"
    grep -q "^GTest_DIR:PATH=$4" "$2/prefix-check/CMakeCache.txt"
    grep -q "^prometheus-cpp_DIR:PATH=$4" "$2/prefix-check/CMakeCache.txt"
    echo "the prefix gave Abseil, GoogleTest and prometheus-cpp"' \
    _ "$src" "$build" "$(IFS=';'; echo "${prefix_path[*]:+${prefix_path[*]};}$prefix/usr")" "$prefix/usr"
else
  prefix_path+=("$prefix/usr")
fi
step configure 300 cmake -S "$src" -B "$build" "${configure_args[@]}" \
  -DCMAKE_PREFIX_PATH="$(IFS=';'; echo "${prefix_path[*]}")"
targets=(dtrain_trainer_train dtrain_bench_nccl_allreduce_bandwidth
  dtrain_dist_backend_nccl_nccl_backend_test dtrain_dist_backend_nccl_nccl_multiprocess_test
  dtrain_dist_backend_nccl_watchdog_test dtrain_dist_backend_nccl_peers_test
  dtrain_base_cuda_device_test dtrain_dist_ddp_ddp_cuda_test dtrain_dist_ddp_sync_batch_norm_test
  dtrain_bench_nccl_allreduce_bandwidth_test dtrain_trainer_train_nccl_test
  dtrain_trainer_train_links_test dtrain_third_party_smoke_test_nccl_test)
step build 1200 cmake --build "$build" -j "$jobs" --target "${targets[@]}"
train=$build/trainer/train
bandwidth=$build/bench/nccl_allreduce_bandwidth

# --- Tests -----------------------------------------------------------------------------------------
# Every test that touches CUDA or NCCL, one at a time on a GPU (they share it).
test_jobs=1
[[ $mode == cpu ]] && test_jobs=$jobs
step tests 600 ctest --test-dir "$build" -V -j "$test_jobs" --timeout 300 \
  -R '(nccl|cuda|watchdog|peers|sync_batch_norm_test|train_links|smoke_test_nccl)'

# --- Data ------------------------------------------------------------------------------------------
# Random IDX files in the MNIST layout, for the runs that PyTorch repeats: both read the same bytes.
export data=$build/idx-data
make_idx() {
  "$python" - "$data" "$1" <<'PY'
import os, struct, sys
folder, train = sys.argv[1], int(sys.argv[2])
os.makedirs(folder, exist_ok=True)
def write(prefix, n):
    with open(os.path.join(folder, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + os.urandom(n * 28 * 28))
    with open(os.path.join(folder, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(b % 10 for b in os.urandom(n)))
write("train", train)
write("t10k", 1000)
PY
}

# --- Trainings -------------------------------------------------------------------------------------
# train_run NAME ARGS...: our trainer, metrics in metrics/NAME.json.
train_run() {
  local name=$1
  shift
  step "$name" 300 "$train" --device="$device" --progress=lines --timeout=120s \
    --metrics_json="$out/metrics/$name.json" "$@"
}
# reference_run NAME RANKS ARGS...: the machine's PyTorch, the same training, metrics in
# metrics/NAME.json; two ranks are two processes (on one GPU each its own NCCL host id, as ours).
reference_run() {
  local name=$1 ranks=$2
  shift 2
  step "$name" 300 bash -c '
    python=$1 script=$2 ranks=$3 name=$4 out=$5 device=$6 backend=$7
    shift 7
    port=$("$python" -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])")
    pids=()
    for ((r = 0; r < ranks; r++)); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port NCCL_HOSTID="gpu-kit-rank-$r" \
        "$python" "$script" --device="$device" --dist_backend="$backend" --progress=lines \
        --metrics_json="$out/metrics/$name.json" "$@" &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    exit $rc' _ "$python" "$src/experiments/pytorch_reference.py" "$ranks" "$name" "$out" \
    "$([[ $device == cuda ]] && echo cuda:0 || echo cpu)" "$backend" "$@"
}

export DTRAIN_NCCL_SHARE_GPU=1  # Two ranks on one GPU, where there is one (the backend's rule).
if [[ $mode == gpu ]]; then
  resnet=(--model=resnet18 --dataset=synthetic --synthetic_shape=3,224,224
          --synthetic_train_size=2048 --synthetic_val_size=256 --epochs=2)
  idx_train=60000
  convnet=(--model=convnet --dataset=mnist --data_dir="$data" --batch_size=128 --epochs=1
           --skip_validation)
  resnet_idx=(--model=resnet18 --dataset=mnist --data_dir="$data" --image_size=112 --batch_size=64
              --train_limit=8192 --epochs=1 --skip_validation)
else
  resnet=(--model=resnet18 --dataset=synthetic --synthetic_shape=3,32,32 --synthetic_train_size=256
          --synthetic_val_size=64 --epochs=2)
  idx_train=2048
  convnet=(--model=convnet --dataset=mnist --data_dir="$data" --batch_size=128 --epochs=1
           --skip_validation)
  resnet_idx=(--model=resnet18 --dataset=mnist --data_dir="$data" --image_size=32 --batch_size=32
              --train_limit=256 --epochs=1 --skip_validation)
fi
shared=(--nproc_per_node=2 --dist_backend="$backend")
train_run resnet18_1rank "${resnet[@]}" --batch_size=64
train_run resnet18_2ranks "${resnet[@]}" --batch_size=32 "${shared[@]}"
if [[ $mode == gpu ]]; then
  train_run resnet18_2ranks_amp_fp16 "${resnet[@]}" --batch_size=32 "${shared[@]}" --amp=fp16
else
  train_run resnet18_2ranks_amp_bf16 "${resnet[@]}" --batch_size=32 "${shared[@]}" --amp=bf16
fi
train_run resnet18_2ranks_syncbn "${resnet[@]}" --batch_size=32 "${shared[@]}" --sync_batchnorm
step idx_data 120 make_idx "$idx_train"
train_run convnet_1rank "${convnet[@]}"
reference_run pytorch_convnet_1rank 1 "${convnet[@]}"
train_run convnet_2ranks "${convnet[@]}" "${shared[@]}"
reference_run pytorch_convnet_2ranks 2 "${convnet[@]}"
train_run resnet18_idx_1rank "${resnet_idx[@]}"
reference_run pytorch_resnet18_idx_1rank 1 "${resnet_idx[@]}"
train_run resnet18_idx_2ranks "${resnet_idx[@]}" "${shared[@]}"
reference_run pytorch_resnet18_idx_2ranks 2 "${resnet_idx[@]}"

# --- Elastic ---------------------------------------------------------------------------------------
# train --elastic on the device, three ranks (sharing the GPU where there is one): rank 1 SIGKILLed
# once training runs, the two others abort their backend and make one of two in the same processes
# (on NCCL a new communicator), then a process joins them (--join: a third backend, the state sent
# from a member). Every process left must exit 0, and the three end with the same weights (rank 0
# checks them at the end of every run).
elastic_run() {
  local train=$1 dir=$2 python=$3 steps=$4 port r rc=0 joiner
  shift 4
  local -a pids=()
  port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # seen FILE TEXT SECONDS: TEXT appears in FILE within SECONDS.
  seen() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
      grep -q -- "$2" "$1" 2>/dev/null && return 0
      sleep 0.1
    done
    echo "elastic: '$2' not in $1 after $3 s: $(tail -3 "$1")"
    return 1
  }
  for r in 0 1 2; do
    "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=3 --rank=$r --elastic \
      --max_steps="$steps" --metrics_json="$dir/elastic$r.json" "$@" >"$dir/elastic$r.log" 2>&1 &
    pids+=($!)
  done
  if seen "$dir/elastic0.log" "Begin training" 120; then
    sleep 1
    kill -KILL "${pids[1]}"
    seen "$dir/elastic2.log" "forming generation 1" 60 || rc=1
    "$train" --join --dist_url="tcp://127.0.0.1:$port" --elastic --max_steps="$steps" "$@" \
      >"$dir/elastic_joiner.log" 2>&1 &
    joiner=$!
    wait "$joiner" || { echo "elastic: the joiner exited $?: $(tail -3 "$dir/elastic_joiner.log")"; rc=1; }
  else
    rc=1
    kill -KILL "${pids[@]}" 2>/dev/null
  fi
  for r in 0 2; do
    wait "${pids[$r]}" || { echo "elastic: rank $r exited $?: $(tail -3 "$dir/elastic$r.log")"; rc=1; }
  done
  wait "${pids[1]}" 2>/dev/null
  [[ $rc -eq 0 ]] || return 1
  grep -h "\] elastic" "$dir"/elastic*.log
  # Rank 0 checks at the end that every rank holds its weights, or fails the run.
  "$python" - "$dir/elastic0.json" <<'PY' || return 1
import json, sys
m = json.load(open(sys.argv[1]))
assert m["config"]["world_size"] == 3 and m["ranks_identical"], (m["config"], m["ranks_identical"])
PY
  echo "elastic: the two survivors and the joiner finished, three ranks with the same weights"
}
mkdir -p "$out/elastic"
if [[ $mode == gpu ]]; then elastic_steps=3000; else elastic_steps=300; fi
step elastic 300 elastic_run "$train" "$out/elastic" "$python" "$elastic_steps" \
  --device="$device" --dist_backend="$backend" --dataset=synthetic --synthetic_train_size=9600 \
  --batch_size=32 --epochs=100 --skip_validation --progress=none --timeout=30s --seed=7
gpu_only elastic

# --- NCCL bandwidth and host time per collective ------------------------------------------------------
step bandwidth_1rank 180 "$bandwidth" --gpus=1 --min_bytes=4K --max_bytes=256M --step_factor=4
gpu_only bandwidth_1rank
# The host time per collective with a blocking communicator, for comparison (docs/GPU.md).
step bandwidth_1rank_blocking 180 env DTRAIN_NCCL_BLOCKING=1 "$bandwidth" --gpus=1 \
  --min_bytes=4K --max_bytes=256M --step_factor=4
gpu_only bandwidth_1rank_blocking
step bandwidth_2ranks_shared 240 bash -c '
  store=$(mktemp -u /tmp/gpu_kit_bw.XXXXXX)
  "$1" --store_path="$store" --world_size=2 --rank=1 --device=0 --min_bytes=4K --max_bytes=256M \
    --step_factor=4 >"$2.rank1" 2>&1 &
  "$1" --store_path="$store" --world_size=2 --rank=0 --device=0 --min_bytes=4K --max_bytes=256M \
    --step_factor=4
  rc=$?
  wait $! || rc=1
  cat "$2.rank1"
  rm -f "$store"*
  exit $rc' _ "$bandwidth" "$logs/bandwidth_2ranks_shared"
gpu_only bandwidth_2ranks_shared

# --- First contact -------------------------------------------------------------------------------------
step gpu_check 600 "$src/tools/gpu_check.sh" --train "$train" --bandwidth "$bandwidth" --no_scaling \
  --logs "$logs/gpu_check"
gpu_only gpu_check

# --- Report ------------------------------------------------------------------------------------------
"$python" "$kit/report.py" --out "$out" --mode "$mode" \
  --seconds "$(($(date +%s) - run_start))" >"$out/report.md" 2>"$logs/report.log"
report_rc=$?
[[ $report_rc -eq 0 ]] || echo "run.sh: writing the report failed: $(tail -1 "$logs/report.log")"
echo "run.sh: report in $out/report.md ($(($(date +%s) - run_start)) s in all)"
# Every step passed (or, in --cpu mode, said there is no GPU where it needs one).
if [[ $report_rc -ne 0 ]] || awk -F'\t' '$2 != "0" && $2 != "no-gpu"' "$out/steps.tsv" | grep -q .; then
  exit 1
fi
exit 0
