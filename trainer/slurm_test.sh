#!/usr/bin/env bash
# The train binary started by Slurm (`srun -n 2`) on a one-host cluster this test starts from Debian's
# slurm-wlm: munged with its own key and socket, slurmctld and slurmd in the foreground on loopback,
# every file of theirs in a temporary directory, no cgroups and no accounting. Each task learns its
# place only from SLURM_PROCID, SLURM_NTASKS and the step's node list (whose first host is the master
# address): the run must say it found Slurm (launch_source "slurm") and end with a state_dict
# byte-identical to the same training under the project's launcher, with shared memory between the
# ranks (the default) and with Gloo over TCP (--shm=false). Every daemon is stopped by its PID.
# Needs root (slurmd starts each job's tasks as the job's user); skips only where the Slurm or munge
# programs are not installed (tools/setup.sh installs slurm-wlm and munge) or when not root.
set -uo pipefail

train=$1
launch=$2
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
# The daemons live in sbin, which a test's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin
for tool in srun sinfo scancel squeue slurmctld slurmd munged; do
  command -v "$tool" >/dev/null \
    || skip "$tool is not installed (Debian's slurm-wlm and munge; tools/setup.sh installs them)"
done
[[ $(id -u) -eq 0 ]] \
  || skip "needs root: slurmd runs as root to start a job's tasks as the job's user"

# Only this test's cluster: a Slurm job around the test must not leak its variables into srun.
for var in $(compgen -e | grep '^SLURM_'); do unset "$var"; done

# The cluster's directory is short and under /tmp: munged's socket and slurmd's per-step sockets are
# Unix sockets, whose paths may not exceed 107 bytes (Bazel's TEST_TMPDIR often does).
cluster=$(mktemp -d /tmp/dtrain-slurm.XXXXXX)
daemons=()  # slurmd, slurmctld, munged: stopped in that order
extra_cleanup() {
  # Jobs first, while the daemons that end them still run; slurmstepd outlives a stopped slurmd.
  if [[ ${#daemons[@]} -ge 2 ]]; then
    timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null
    wait_until 10 no_jobs
  fi
  local pid
  for pid in "${daemons[@]}"; do stop_processes "$pid"; done
  rm -rf "$cluster"
}
no_jobs() { [[ -z $(squeue -h -o %i 2>/dev/null) ]]; }
start_test slurm
# Bazel ends a test that overruns its timeout with SIGTERM: exit, so the EXIT trap still stops the
# daemons (slurmstepd and the tasks it starts do not share the test's process group).
trap 'exit 143' TERM INT

# munged insists that every directory above its socket be searchable by all.
chmod 755 "$cluster"
mkdir "$cluster/state" "$cluster/spool"

# Authentication: munge with a key of our own, reached through our own socket (AuthInfo below), so
# no system configuration or running munged is needed or touched.
head -c 1024 /dev/urandom >"$cluster/munge.key"
chmod 600 "$cluster/munge.key"
munged --foreground --key-file="$cluster/munge.key" --socket="$cluster/munge.sock" \
  --pid-file="$cluster/munged.pid" --seed-file="$cluster/munged.seed" \
  >"$cluster/munged.log" 2>&1 &
daemons=($!)
if ! wait_until 10 test -S "$cluster/munge.sock"; then
  fail "munged did not start: $(tail -5 "$cluster/munged.log")"
  finish
fi

node=$(hostname -s)
ctld_port=$(free_port)
slurmd_port=$(free_port)
export SLURM_CONF=$cluster/slurm.conf
# proctrack/linuxproc and task/none: no cgroups (none may be writable here). Accounting, job
# completion logging and MPI plugins off: nothing but slurmctld and slurmd to run.
cat >"$SLURM_CONF" <<EOF
ClusterName=dtrain
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$cluster/munge.sock
CredType=cred/munge
StateSaveLocation=$cluster/state
SlurmdSpoolDir=$cluster/spool
SlurmctldPidFile=$cluster/slurmctld.pid
SlurmdPidFile=$cluster/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=dtrain Nodes=$node Default=YES MaxTime=10 State=UP
EOF
slurmctld -D -f "$SLURM_CONF" >"$cluster/slurmctld.log" 2>&1 &
daemons=($! "${daemons[@]}")
slurmd -D -f "$SLURM_CONF" >"$cluster/slurmd.log" 2>&1 &
daemons=($! "${daemons[@]}")

node_idle() { [[ $(sinfo -h -n "$node" -o %t 2>/dev/null) == idle ]]; }
if ! wait_until 60 node_idle; then
  fail "node $node not idle after 60 s: $(sinfo -h -o '%n %t' 2>&1)"
  echo "slurmctld:"; tail -20 "$cluster/slurmctld.log"
  echo "slurmd:"; tail -20 "$cluster/slurmd.log"
  finish
fi
echo "$(srun --version) on node $node"

# Rank 0's store listens at the step's first host, as Slurm names it: that name must resolve here.
# Where it does not, MASTER_ADDR stands in (and the nodelist is then not what this test covers).
if ! getent hosts "$node" >/dev/null; then
  echo "note: $node does not resolve; setting MASTER_ADDR=127.0.0.1"
  export MASTER_ADDR=127.0.0.1
fi

# A few steps of the ConvNet on 1,024 Fashion-MNIST examples, 2 ranks of batch 64.
small=(--train_limit=1024 --batch_size=64 --max_steps=4 --skip_validation --timeout=60s
  --progress=none)

for shm in true false; do
  name=shm_$shm
  port=$(free_port)
  timeout 60 "$launch" --nproc_per_node=2 --master_port="$port" -- "$train" --dist_url=env:// \
    "${small[@]}" --shm=$shm --save_state_dict="$tmp/launch_$name.safetensors" \
    --metrics_json="$tmp/launch_$name.json" >"$tmp/launch_$name.out" 2>&1 \
    || fail "launch, --shm=$shm: $(tail -5 "$tmp/launch_$name.out")"

  # --overcommit: two tasks even where the node has one CPU. --kill-on-bad-exit: a failing rank ends
  # the step at once instead of leaving the other waiting out its timeout.
  port=$(free_port)
  MASTER_PORT=$port timeout 60 srun --ntasks=2 --overcommit --kill-on-bad-exit=1 --time=5 \
    "$train" --dist_url=env:// "${small[@]}" --shm=$shm \
    --save_state_dict="$tmp/srun_$name.safetensors" --metrics_json="$tmp/srun_$name.json" \
    </dev/null >"$tmp/srun_$name.out" 2>&1 \
    || fail "srun, --shm=$shm: $(tail -20 "$tmp/srun_$name.out")"

  [[ -f $tmp/launch_$name.json && -f $tmp/srun_$name.json ]] || continue
  m=$tmp/srun_$name.json
  [[ $(json "$m" 'm["launch_source"]') == slurm ]] \
    || fail "srun, --shm=$shm: launch source '$(json "$m" 'm["launch_source"]')', want slurm"
  [[ $(json "$m" 'm["config"]["world_size"]') == 2 ]] || fail "srun, --shm=$shm: world size"
  [[ $(json "$m" 'm["global_step"]') == 4 ]] || fail "srun, --shm=$shm: steps"
  want_backend=gloo
  [[ $shm == true ]] && want_backend=gloo+shm
  [[ $(json "$m" 'm["backend"]') == "$want_backend" ]] \
    || fail "srun, --shm=$shm: backend '$(json "$m" 'm["backend"]')', want $want_backend"
  [[ $(json "$m" 'm["backend"]') == $(json "$tmp/launch_$name.json" 'm["backend"]') ]] \
    || fail "--shm=$shm: the launchers ran different backends"
  cmp "$tmp/launch_$name.safetensors" "$tmp/srun_$name.safetensors" \
    || fail "--shm=$shm: the state_dict after srun differs from the project's launcher's"
done

if [[ $failures -ne 0 ]]; then
  echo "slurmctld:"; tail -20 "$cluster/slurmctld.log"
  echo "slurmd:"; tail -20 "$cluster/slurmd.log"
fi
finish
