#!/usr/bin/env bash
# The train binary started by Debian's Open MPI (`mpirun -np 2`), which tells each process its place
# only through OMPI_COMM_WORLD_*: the run must say it found Open MPI (launch_source "openmpi") and end
# with a state_dict byte-identical to the same training under the project's launcher. Training is
# deterministic, so the same world size and backend give the same bits whoever started the
# processes; a difference means a launcher changed what a rank computes (its rank, its data shard).
# Both with shared memory between the ranks (the default) and with Gloo over TCP (--shm=false).
# Skips only where mpirun is not installed (tools/setup.sh installs openmpi-bin).
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
command -v mpirun >/dev/null \
  || skip "mpirun is not installed (Debian's openmpi-bin; tools/setup.sh installs it)"
start_test mpi
# Open MPI 5 stops with "Unable to get the user home directory" without HOME (Bazel's test
# environment has none); one of the test's own also keeps a user's ~/.openmpi settings out.
export HOME=$tmp

echo "$(mpirun --version 2>&1 | head -1)"

# A few steps of the ConvNet on 1,024 Fashion-MNIST examples, 2 ranks of batch 64.
small=(--train_limit=1024 --batch_size=64 --max_steps=4 --skip_validation --timeout=60s
  --progress=none)

# --allow-run-as-root: CI runs tests as root, which mpirun refuses without it. --oversubscribe: two
# ranks must start on a machine with fewer cores. oob_tcp_if_include keeps mpirun's own control
# traffic on loopback; as a network, since Open MPI 5 (PRRTE) finds no interface named "lo". (train
# never calls MPI_Init, so Open MPI's byte transfer layers play no part.) Open MPI sets no master
# address: MASTER_ADDR and MASTER_PORT are passed with -x, as on several hosts.
mpirun_args=(--allow-run-as-root --oversubscribe -np 2 --mca oob_tcp_if_include 127.0.0.0/8)

for shm in true false; do
  name=shm_$shm
  port=$(free_port)
  timeout 60 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" --dist_url=env:// \
    "${small[@]}" --shm=$shm --save_state_dict="$tmp/launch_$name.safetensors" \
    --metrics_json="$tmp/launch_$name.json" >"$tmp/launch_$name.out" 2>&1 \
    || fail "launch, --shm=$shm: $(tail -5 "$tmp/launch_$name.out")"

  port=$(free_port)
  timeout 60 mpirun "${mpirun_args[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" \
    "$train" --dist_url=env:// "${small[@]}" --shm=$shm \
    --save_state_dict="$tmp/mpirun_$name.safetensors" --metrics_json="$tmp/mpirun_$name.json" \
    >"$tmp/mpirun_$name.out" 2>&1 \
    || fail "mpirun, --shm=$shm: $(tail -20 "$tmp/mpirun_$name.out")"

  [[ -f $tmp/launch_$name.json && -f $tmp/mpirun_$name.json ]] || continue
  m=$tmp/mpirun_$name.json
  [[ $(json "$m" 'm["launch_source"]') == openmpi ]] \
    || fail "mpirun, --shm=$shm: launch source '$(json "$m" 'm["launch_source"]')', want openmpi"
  source=$(json "$tmp/launch_$name.json" 'm["launch_source"]')
  [[ $source == torchrun ]] || fail "launch, --shm=$shm: launch source '$source', want torchrun"
  [[ $(json "$m" 'm["config"]["world_size"]') == 2 ]] || fail "mpirun, --shm=$shm: world size"
  [[ $(json "$m" 'm["global_step"]') == 4 ]] || fail "mpirun, --shm=$shm: steps"
  want_backend=gloo
  [[ $shm == true ]] && want_backend=gloo+shm
  [[ $(json "$m" 'm["backend"]') == "$want_backend" ]] \
    || fail "mpirun, --shm=$shm: backend '$(json "$m" 'm["backend"]')', want $want_backend"
  [[ $(json "$m" 'm["backend"]') == $(json "$tmp/launch_$name.json" 'm["backend"]') ]] \
    || fail "--shm=$shm: the launchers ran different backends"
  cmp "$tmp/launch_$name.safetensors" "$tmp/mpirun_$name.safetensors" \
    || fail "--shm=$shm: the state_dict after mpirun differs from the project's launcher's"
done

finish
