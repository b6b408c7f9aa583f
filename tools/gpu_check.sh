#!/usr/bin/env bash
# First contact with a GPU machine: the checks to run before anything else, in order, one line of
# result each, stopping at the first failure with what to do about it (docs/GPU.md). On a machine
# with one GPU the two-rank checks put both ranks on it (DTRAIN_NCCL_SHARE_GPU=1: NCCL then connects
# them over sockets, so (b) checks correctness and a low bound only).
#   (a) driver and devices: nvidia-smi, and how many CUDA devices the project's LibTorch sees
#   (b) the project's NCCL allreduce bus bandwidth over all GPUs, against a rough lower bound
#   (c) a 2-process ResNet-18 DDP training over NCCL on synthetic data: it finishes, the loss falls
#       and the ranks end with identical parameters
#   (d) one of two NCCL ranks SIGKILLed: the other ends within --timeout and names it
#   (e) the scaling sweep with --backends=nccl
#
# Usage: tools/gpu_check.sh [--train PATH] [--bandwidth PATH] [--scaling PATH | --no_scaling]
#                           [--min_busbw GBPS] [--logs DIR]
#   --train, --bandwidth, --scaling   already built //trainer:train, //bench:nccl_allreduce_bandwidth
#                    and //experiments:scaling (the last with its runfiles); each one not given is built
#                    with Bazel from this checkout when a check first needs it
#   --no_scaling     skip (e) (a machine without Bazel and no --scaling)
#   --min_busbw      the lower bound for (b), in GB/s (default: 20 with NVLink, 4 without, 0.1 for
#                    ranks sharing one GPU; rough)
#   --logs           where each check's output goes (default: a new folder under /tmp, kept)
# Exits 0 when every check passed, 1 at the first failure, 2 for bad arguments. Run it from a
# checkout after tools/setup.sh --cuda (Debian 13) or with LIBTORCH_HOME/CUDA_HOME set (docs/GPU.md).
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

root=$(cd "$(dirname "$0")/.." && pwd)
train=""
bandwidth=""
scaling=""
no_scaling=0
min_busbw=""
logs=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no_scaling) no_scaling=1; shift ;;
    --train|--bandwidth|--scaling|--min_busbw|--logs)
      [[ $# -ge 2 ]] || { echo "gpu_check.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --train) train=$2 ;;
        --bandwidth) bandwidth=$2 ;;
        --scaling) scaling=$2 ;;
        --min_busbw) min_busbw=$2 ;;
        --logs) logs=$2 ;;
      esac
      shift 2
      ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
if [[ -n $min_busbw ]] && ! [[ $min_busbw =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "gpu_check.sh: --min_busbw=$min_busbw is not a number of GB/s" >&2
  exit 2
fi
if [[ -z $logs ]]; then
  logs=$(mktemp -d /tmp/gpu_check.XXXXXX)
else
  mkdir -p "$logs"
fi

pass() { echo "PASS $1: $2"; }
# fail CHECK WHAT TODO: the failure line, then the logs folder, then exit 1.
fail() {
  echo "FAIL $1: ${2%.}. $3"
  echo "     (logs: $logs)"
  exit 1
}

# binary VAR TARGET: sets VAR to the given binary, or builds TARGET with Bazel and uses bazel-bin's.
binary() {
  local var=$1 target=$2
  if [[ -n ${!var} ]]; then
    [[ -x ${!var} ]] || { echo "gpu_check.sh: --$var=${!var} is not an executable file" >&2; exit 2; }
    return 0
  fi
  local path=${target#//} bin
  if ! (cd "$root" && bazel build "$target" && bazel info bazel-bin >"$logs/bazel_bin") \
      >"$logs/build_$var.log" 2>&1; then
    fail "build" "bazel build $target failed (see $logs/build_$var.log)" \
      "Run tools/setup.sh --cuda (Debian 13) or set LIBTORCH_HOME and CUDA_HOME (docs/GPU.md)."
  fi
  bin=$(cat "$logs/bazel_bin")
  printf -v "$var" '%s' "$bin/${path/://}"
}

# A free TCP port on loopback.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# --- (a) driver and devices -----------------------------------------------------------------------
check="(a) driver and devices"
smi_count=""
smi_names=""
if command -v nvidia-smi >/dev/null 2>&1; then
  # With the driver but no device, nvidia-smi -L says "No devices were found" and fails.
  if ! nvidia-smi -L >"$logs/nvidia_smi.log" 2>&1 &&
      ! grep -q 'No devices were found' "$logs/nvidia_smi.log"; then
    fail "$check" "nvidia-smi failed: $(head -1 "$logs/nvidia_smi.log")" \
      "Is the NVIDIA kernel driver installed and loaded (lsmod | grep nvidia; dmesg)?"
  fi
  smi_count=$(grep -c '^GPU [0-9]' "$logs/nvidia_smi.log" || true)
  smi_names=$(sed -n 's/^GPU [0-9]*: \(.*\) (UUID.*/\1/p' "$logs/nvidia_smi.log" | sort | uniq -c |
                awk '{c = $1; sub(/^ *[0-9]+ /, ""); printf "%s%d x %s", (NR > 1 ? ", " : ""), c, $0}')
fi
binary train //trainer:train
if ! torch_count=$("$train" --print_cuda_devices 2>"$logs/print_cuda_devices.log"); then
  fail "$check" "'train --print_cuda_devices' failed: $(tail -1 "$logs/print_cuda_devices.log")" \
    "A library is missing or mismatched: see the log, and docs/GPU.md for the supported versions."
fi
if [[ -z $smi_count ]]; then
  smi_text="nvidia-smi not found"
else
  smi_text="nvidia-smi lists $smi_count GPU(s)${smi_names:+ ($smi_names)}"
fi
if ! [[ $torch_count =~ ^[0-9]+$ ]]; then
  fail "$check" "'train --print_cuda_devices' printed '$torch_count', not a number" \
    "Is $train the project's train binary?"
fi
if [[ $torch_count -eq 0 ]]; then
  if [[ -z $smi_count || $smi_count -eq 0 ]]; then
    fail "$check" "no GPU: $smi_text and the project's LibTorch sees 0 CUDA devices" \
      "Run this on a machine with NVIDIA GPUs and their driver; check CUDA_VISIBLE_DEVICES."
  fi
  fail "$check" "$smi_text but the project's LibTorch sees 0 CUDA devices" \
    "This build's LibTorch is CPU-only (Debian 12, or Debian 13 without --cuda): run tools/setup.sh --cuda on Debian 13, or set LIBTORCH_HOME to a CUDA LibTorch, and rebuild (docs/GPU.md)."
fi
gpus=$torch_count
shared=0
if [[ $gpus -eq 1 ]]; then
  # Two ranks on the one GPU: the NCCL backend refuses that unless told (it is for testing).
  shared=1
  export DTRAIN_NCCL_SHARE_GPU=1
  pass "$check" "$smi_text; the project's LibTorch sees 1 CUDA device: the two-rank checks share it"
else
  pass "$check" "$smi_text; the project's LibTorch sees $torch_count CUDA devices"
fi

# --- (b) NCCL allreduce bus bandwidth ---------------------------------------------------------------
check="(b) NCCL allreduce bus bandwidth"
# Rough lower bounds for the best size: well below what healthy links give (typical published
# nccl-tests busbw, not measured here: ~130 GB/s on 8 x V100 NVLink, ~230 on 8 x A100 NVSwitch,
# 10-20 over PCIe 3/4 peer-to-peer; a 2-GPU NVLink bridge gives less than a switch), meant to catch
# a path gone wrong (peer-to-peer off, traffic through host memory or sockets), not to grade the
# hardware.
link="PCIe (no NVLink reported)"
bound=4
if nvidia-smi nvlink --status 2>/dev/null | grep -q 'GB/s'; then
  link="NVLink"
  bound=20
fi
if [[ $shared -eq 1 ]]; then
  link="2 ranks sharing one GPU, over sockets"
  bound=0.1
fi
if [[ -n $min_busbw ]]; then
  bound=$min_busbw
  link="$link, --min_busbw"
fi
binary bandwidth //bench:nccl_allreduce_bandwidth
# shared_bandwidth ARGS...: two processes on cuda:0 meeting through a file store; rank 0 reports.
shared_bandwidth() {
  local store
  store=$(mktemp -u "$logs/bandwidth_store.XXXXXX")
  "$bandwidth" --store_path="$store" --world_size=2 --rank=1 --device=0 "$@" \
    >"$logs/bandwidth_rank1.log" 2>&1 &
  local peer=$! rc=0
  "$bandwidth" --store_path="$store" --world_size=2 --rank=0 --device=0 "$@" || rc=$?
  wait "$peer" || rc=1
  return $rc
}
if [[ $shared -eq 1 ]]; then
  bandwidth_run=(shared_bandwidth)
  gpus_text="2 ranks on 1 GPU"
else
  bandwidth_run=("$bandwidth")
  gpus_text="$gpus GPUs"
fi
if ! timeout 600 "${bandwidth_run[@]}" --min_bytes=1M --max_bytes=256M >"$logs/bandwidth.log" \
    2>"$logs/bandwidth.err"; then
  fail "$check" "nccl_allreduce_bandwidth failed: $(tail -1 "$logs/bandwidth.err")" \
    "Rerun with NCCL_DEBUG=INFO (see $logs/bandwidth.log) and check nvidia-smi topo -m."
fi
read -r busbw at_bytes < <(tail -1 "$logs/bandwidth.log" | python3 -c '
import json, sys
m = json.load(sys.stdin)
best = max(m["results"], key=lambda r: r["busbw_GBps"])
print(f"{best[\"busbw_GBps\"]:.1f} {best[\"bytes\"]}")' 2>"$logs/bandwidth_json.err") ||
  fail "$check" "no JSON result on the driver's last line" "See $logs/bandwidth.log."
if ! python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' \
    "$busbw" "$bound"; then
  fail "$check" "busbw $busbw GB/s over $gpus_text is below $bound GB/s ($link)" \
    "Check nvidia-smi topo -m, NCCL_P2P_DISABLE/NCCL_SHM_DISABLE, and NCCL_DEBUG=INFO's transport lines."
fi
pass "$check" "busbw $busbw GB/s at $at_bytes bytes over $gpus_text (bound $bound GB/s, $link)"

# --- (c) 2-process ResNet-18 DDP over NCCL ------------------------------------------------------------
check="(c) ResNet-18 DDP, 2 processes, NCCL"
# shellcheck disable=SC2054  # the commas are in --synthetic_shape's value
run=(--dist_backend=nccl --model=resnet18 --dataset=synthetic --synthetic_shape=3,224,224
     --synthetic_train_size=512 --synthetic_val_size=128 --batch_size=32 --progress=lines)
if ! timeout 900 "$train" --nproc_per_node=2 --master_port="$(free_port)" --device=cuda \
    --timeout=120s --epochs=3 "${run[@]}" --metrics_json="$logs/ddp.json" >"$logs/ddp.log" 2>&1; then
  fail "$check" "training failed: $(tail -1 "$logs/ddp.log")" \
    "See $logs/ddp.log; rerun with NCCL_DEBUG=INFO."
fi
read -r ws backend identical first last < <(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
e = m["epochs"]
print(m["config"]["world_size"], m["backend"], m.get("ranks_identical"), e[0]["train_loss"],
      e[-1]["train_loss"])' "$logs/ddp.json" \
  2>"$logs/ddp_json.err") || fail "$check" "no metrics in $logs/ddp.json" "See $logs/ddp.log."
if [[ $ws != 2 || $backend != nccl ]]; then
  fail "$check" "the metrics say world size $ws, backend $backend" "Want 2 and nccl: see $logs/ddp.json."
fi
# train compares every parameter's bytes across the ranks at the end and fails when they differ.
if [[ $identical != True ]]; then
  fail "$check" "the ranks' parameters were not confirmed identical (ranks_identical: $identical)" \
    "See $logs/ddp.log and $logs/ddp.json."
fi
if ! python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) < float(sys.argv[1]) else 1)' \
    "$first" "$last"; then
  fail "$check" "the training loss did not fall: epoch 1 $first, epoch 3 $last" \
    "Gradients are probably not averaged correctly over NCCL: see $logs/ddp.log."
fi
pass "$check" "train loss $first -> $last over 3 epochs, parameters identical on both ranks"

# --- (d) a rank killed ---------------------------------------------------------------------------------
check="(d) a rank killed"
port=$(free_port)
fault_timeout=60
pids=()
for r in 0 1; do
  "$train" --dist_url="tcp://127.0.0.1:$port" --world_size=2 --rank=$r \
    --device="cuda:$((shared ? 0 : r))" \
    --timeout="${fault_timeout}s" --epochs=100 --skip_validation "${run[@]}" \
    >"$logs/fault$r.log" 2>&1 &
  pids+=($!)
done
# Stops both ranks if the script ends early.
trap 'kill -KILL "${pids[@]}" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q 'Begin training' "$logs/fault0.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 1
done
grep -q 'Begin training' "$logs/fault0.log" ||
  fail "$check" "the ranks never began training: $(tail -1 "$logs/fault0.log")" "See $logs/fault0.log."
sleep 3
kill -KILL "${pids[1]}"
killed=$(date +%s)
for _ in $(seq $((fault_timeout + 60))); do
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 1
done
took=$(($(date +%s) - killed))
if kill -0 "${pids[0]}" 2>/dev/null; then
  fail "$check" "rank 0 still ran ${took}s after rank 1 was killed (--timeout=${fault_timeout}s)" \
    "The NCCL backend's watchdog did not abort the communicator: see $logs/fault0.log."
fi
rc=0
wait "${pids[0]}" || rc=$?
wait "${pids[1]}" 2>/dev/null || true
trap - EXIT
if [[ $rc -eq 0 ]] || ! grep -q 'rank 1' "$logs/fault0.log"; then
  fail "$check" "rank 0 exited $rc without naming rank 1: $(tail -1 "$logs/fault0.log")" \
    "See $logs/fault0.log."
fi
if [[ $took -gt $((fault_timeout + 10)) ]]; then
  fail "$check" "rank 0 took ${took}s to end, more than --timeout=${fault_timeout}s" "See $logs/fault0.log."
fi
pass "$check" "rank 0 exited $rc after ${took}s naming rank 1: $(tail -1 "$logs/fault0.log")"

# --- (e) the scaling sweep over NCCL --------------------------------------------------------------------
check="(e) scaling sweep, NCCL"
if [[ $no_scaling -eq 1 ]]; then
  echo "SKIP $check: --no_scaling"
  echo "All checks passed but (e) (logs: $logs)."
  exit 0
fi
sizes=1
for n in 2 4 8; do
  [[ $n -le $gpus ]] && sizes="$sizes,$n"
done
binary scaling //experiments:scaling
if ! timeout 1800 "$scaling" --backends=nccl --models=resnet18 --world_sizes="$sizes" \
    --batch_sizes=32 --output_dir="$logs/sweep" --no_plots >"$logs/sweep.log" 2>&1; then
  fail "$check" "the sweep failed: $(tail -1 "$logs/sweep.log")" "See $logs/sweep.log."
fi
pass "$check" "world sizes $sizes: results in $logs/sweep/results.csv"
echo "All checks passed (logs: $logs)."
