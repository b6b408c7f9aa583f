#!/usr/bin/env bash
# The scaling sweep (//experiments:scaling) on a simulated cluster on this one machine: N "hosts",
# each its own network namespace and PID namespace, joined by veth links through a bridge in a
# "switch" namespace of its own, every link shaped with tc tbf to a link rate in both directions.
# One scaling process per host (node ranks 0..N-1, the master on host 0), once per link rate, then
# one combined CSV and table of all rates. Why: loopback has neither a cluster's bandwidth limit nor
# separate hosts (the hierarchical backend tells hosts apart by boot id and PID namespace, so each
# host needs its own). Needs root. Removes every namespace (with it the veths, bridge and qdiscs)
# and every process it started, also when interrupted or when a node fails. See docs/MULTI_NODE.md.
set -uo pipefail

readonly PROG=sim_cluster
readonly SUBNET=10.200.0
# One namespace per host plus the switch, named with the pid so that runs can sit side by side.
readonly PREFIX="dtrain_sim_$$_"
readonly SWITCH="${PREFIX}switch"

usage() {
  cat <<'EOF'
Usage: sim_cluster [OPTIONS] [-- SCALING_FLAGS...]
       bazel run //experiments:sim_cluster -- [OPTIONS] [-- SCALING_FLAGS...]

Runs the scaling sweep on N simulated hosts on this machine (as root): each host is a network
namespace with its own PID namespace, linked by a veth pair to a bridge in a switch namespace; each
link is shaped with tc tbf to the link rate in both directions (host egress and switch-port egress).
Host k (address 10.200.0.<k+1>, interface eth0) runs
  scaling --nnodes=HOSTS --node_rank=k --master_addr=10.200.0.1 --master_port=P
          --world_sizes=... --output_dir=... --nodes_share_cores SCALING_FLAGS
with GLOO_SOCKET_IFNAME=eth0 (read by our trainer and by PyTorch's Gloo alike).

Options:
  --hosts=N              simulated hosts (default 2)
  --rates=R1,R2,...      link rates in tc's units: bit, kbit, mbit, gbit, tbit (default 1gbit,10gbit);
                         the sweep runs once per rate
  --ranks_per_host=L     ranks per host, becomes scaling's --world_sizes (N times each; default 1);
                         N x L at most 16x this machine's cores, where every host runs
  --delay=TIME           one-way delay added at each host's egress (e.g. 100us, 1ms), with netem;
                         exits with an error where the kernel has no netem
  --output_dir=DIR       default sim_cluster_results (relative to where bazel run started)
  --link_check=SECONDS   before each rate's sweep, one TCP stream from host 1 to host 0 for this long,
                         its throughput in the table (default 1; 0: none)
  --scaling=PATH         the scaling binary (default: from the runfiles)
  --run=COMMAND          instead of the sweep, run COMMAND (a shell command line, as root, on this
                         machine outside the hosts) once per rate, with SIM_CLUSTER_NAMESPACES (the
                         hosts' network namespaces, in order), SIM_CLUSTER_ADDRESSES (their
                         addresses), SIM_CLUSTER_RATE and SIM_CLUSTER_OUTPUT_DIR (DIR/R) set: for
                         measurements that place processes themselves (experiments/elastic_recovery,
                         with ip netns exec); SCALING_FLAGS and --ranks_per_host are not allowed
  --help                 this text

SCALING_FLAGS go to every host's scaling unchanged (--models, --backends, --batch_sizes,
--max_steps, --reference=pytorch, ...), except those the command sets itself: --nnodes, --node_rank,
--master_addr, --master_port, --world_sizes, --output_dir. Without --batch_sizes each world size N
trains with scaling's default, 128 / N per process (a global batch of 128).

Outputs, per rate R: DIR/R/ holds node 0's table output (node0.out), results.csv, results.json, plots
and logs; DIR/R/node<k>/ the logs of host k; DIR/R/qdisc.txt the links' tc statistics after the
sweep; DIR/R/link_check.txt the measured stream. DIR/combined.csv: every rate's results.csv rows with
link_rate, measured_link_gbit, hosts and ranks_per_host in front; printed as a table at the end.

Exit status: 0 when every host's sweep succeeded, 1 when a host failed or the machine lacks what is
needed (the message says what), 2 on bad flags, 130/143 when interrupted.
EOF
}

log() { echo "$PROG: $*" >&2; }
die() {
  log "$*"
  exit 1
}
usage_error() {
  log "$*"
  log "see --help"
  exit 2
}

# --- Flags --------------------------------------------------------------------------------------

hosts=2
rates=1gbit,10gbit
ranks_per_host=1
delay=""
output_dir=sim_cluster_results
link_check=1
scaling=""
run_command=""
ranks_per_host_given=0
sweep_flags=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts=*) hosts=${1#*=} ;;
    --rates=*) rates=${1#*=} ;;
    --ranks_per_host=*)
      ranks_per_host=${1#*=}
      ranks_per_host_given=1
      ;;
    --delay=*) delay=${1#*=} ;;
    --output_dir=*) output_dir=${1#*=} ;;
    --link_check=*) link_check=${1#*=} ;;
    --scaling=*) scaling=${1#*=} ;;
    --run=*) run_command=${1#*=} ;;
    --help | -h)
      usage
      exit 0
      ;;
    --)
      shift
      sweep_flags=("$@")
      break
      ;;
    *) usage_error "unknown option '$1' (scaling's flags go after '--')" ;;
  esac
  shift
done

[[ $hosts =~ ^[0-9]+$ && $hosts -ge 2 && $hosts -le 250 ]] \
  || usage_error "--hosts: '$hosts' is not a number in 2..250"
IFS=, read -ra rate_list <<<"$rates"
[[ ${#rate_list[@]} -gt 0 ]] || usage_error "--rates: empty"
for r in "${rate_list[@]}"; do
  [[ $r =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit)$ ]] \
    || usage_error "--rates: '$r' is not a rate like 1gbit, 500mbit, 2.5gbit"
done
IFS=, read -ra rph_list <<<"$ranks_per_host"
world_sizes=()
# Every host's ranks run on this machine: at most 16x its cores in all, base/machine_limits.h's bound
# (and no overflow in the product).
cores=$(nproc)
max_ranks=$((16 * cores))
for n in "${rph_list[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage_error "--ranks_per_host: '$n' is not a positive number"
  (( ${#n} <= 6 && n * hosts <= max_ranks )) || usage_error "--ranks_per_host=$n: $hosts hosts x $n" \
    "ranks run on this machine: at most $max_ranks in all (16x this machine's $cores cores)"
  world_sizes+=($((n * hosts)))
done
[[ ${#world_sizes[@]} -gt 0 ]] || usage_error "--ranks_per_host: empty"
[[ -z $delay || $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] \
  || usage_error "--delay: '$delay' is not a time like 100us or 1ms"
[[ $link_check =~ ^[0-9]+$ && ${#link_check} -le 4 && $link_check -le 3600 ]] \
  || usage_error "--link_check: '$link_check' is not a whole number of seconds in 0..3600"
[[ -n $output_dir ]] || usage_error "--output_dir: empty"
for f in "${sweep_flags[@]}"; do
  case $f in
    --nnodes=* | --node_rank=* | --master_addr=* | --master_port=* | --world_sizes=* | --output_dir=* | \
      --nnodes | --node_rank | --master_addr | --master_port | --world_sizes | --output_dir)
      usage_error "scaling flag '$f' is set by $PROG itself (use --hosts, --ranks_per_host, --output_dir)"
      ;;
  esac
done

if [[ -n $run_command ]]; then
  [[ ${#sweep_flags[@]} -eq 0 && $ranks_per_host_given -eq 0 ]] \
    || usage_error "--run places its own processes: no scaling flags and no --ranks_per_host with it"
fi

# bazel run starts in the runfiles tree: a relative output dir means where the user ran it.
[[ $output_dir == /* ]] || output_dir="${BUILD_WORKING_DIRECTORY:-$PWD}/$output_dir"

# The scaling binary and the runfiles it finds train, launch and pytorch_reference.py in.
# The workspace's folder in a runfiles tree is "dtrain" under Bazel 4 and "_main" under Bazel 7.
runfiles=""
workspace=dtrain
for root in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles" "$(dirname "$PWD")"; do
  for ws in dtrain _main; do
    if [[ -n $root && -x $root/$ws/experiments/scaling ]]; then
      runfiles=$(cd "$root" && pwd)
      workspace=$ws
      break 2
    fi
  done
done
if [[ -z $run_command ]]; then
  if [[ -z $scaling ]]; then
    [[ -n $runfiles ]] \
      || die "cannot find the scaling binary: run through 'bazel run //experiments:sim_cluster', or give --scaling"
    scaling=$runfiles/$workspace/experiments/scaling
  fi
  [[ -x $scaling ]] || die "--scaling: '$scaling' is not an executable"
  scaling=$(cd "$(dirname "$scaling")" && pwd)/$(basename "$scaling")
fi
# The Python helpers (experiments/sim_cluster_*.py): from the runfiles, else beside this script in
# the source tree.
helpers=$runfiles/$workspace/experiments
if [[ -z $runfiles || ! -f $helpers/sim_cluster_combine.py ]]; then
  helpers=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
fi

# --- What the machine must have -----------------------------------------------------------------

[[ $(id -u) -eq 0 ]] || die "must run as root (network and PID namespaces, veth links and tc need it); try sudo"
for tool in ip tc unshare python3; do
  command -v "$tool" >/dev/null \
    || die "'$tool' is not installed (tools/setup.sh installs it: ip and tc are iproute2, unshare util-linux)"
done
for helper in free_ports link_receive link_send combine; do
  [[ -f $helpers/sim_cluster_$helper.py ]] \
    || die "cannot find sim_cluster_$helper.py in $helpers: run through 'bazel run //experiments:sim_cluster'"
done

# --- Teardown -----------------------------------------------------------------------------------

namespaces=() # created, in order
node_pids=()  # unshare of each host's sweep (its child is the PID namespace's init)
procs=()      # everything else started: the live output's tail, link check processes

running() { kill -0 "$1" 2>/dev/null && ! grep -q ') Z ' "/proc/$1/stat" 2>/dev/null; }

# Waits up to $1 seconds for every pid given to end.
wait_gone() {
  local tenths=$(($1 * 10)) pid left
  shift
  for _ in $(seq "$tenths"); do
    left=0
    for pid in "$@"; do running "$pid" && left=1; done
    [[ $left -eq 0 ]] && return 0
    sleep 0.1
  done
  return 1
}

# SIGTERM to each host's init, which passes it on to scaling (and scaling to its run); SIGKILL 5 s
# later to what is left: killing unshare kills the init (--kill-child), and with it the namespace.
stop_nodes() {
  local pid child children
  for pid in "${node_pids[@]}"; do
    running "$pid" || continue
    read -ra children <"/proc/$pid/task/$pid/children" 2>/dev/null
    for child in "${children[@]}"; do kill -TERM "$child" 2>/dev/null; done
  done
  for pid in "${procs[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  wait_gone 5 "${node_pids[@]}" "${procs[@]}"
  for pid in "${node_pids[@]}" "${procs[@]}"; do
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  node_pids=()
  procs=()
}

teardown() {
  local rc=$? ns pid left
  # A second Ctrl-C must not cut the cleanup short; it is bounded (seconds) anyway.
  trap - EXIT
  trap '' INT TERM
  stop_nodes
  for ((i = ${#namespaces[@]} - 1; i >= 0; i--)); do
    ns=${namespaces[i]}
    # A PID namespace whose init died empties within moments; anything still in our network
    # namespace after that is ours all the same.
    for _ in $(seq 50); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
      sleep 0.1
    done
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      log "killing leftover process $pid in $ns"
      kill -KILL "$pid" 2>/dev/null
    done
    [[ -e /run/netns/$ns ]] || continue # interrupted before it was made
    ip netns del "$ns" 2>/dev/null || log "could not delete namespace $ns"
  done
  # Deleting a namespace removes its links, the bridge and their qdiscs; nothing was made outside.
  left=$(ip netns list 2>/dev/null | grep -c "^$PREFIX")
  if [[ ${#namespaces[@]} -gt 0 ]]; then
    if [[ $left -eq 0 ]]; then
      log "removed ${#namespaces[@]} namespaces with their links, bridge and qdiscs"
    else
      log "LEFT BEHIND: namespaces $(ip netns list | grep "^$PREFIX" | tr '\n' ' ')"
      [[ $rc -eq 0 ]] && rc=1
    fi
  fi
  exit "$rc"
}
on_signal() {
  log "interrupted by SIG$1: stopping the hosts and removing the cluster"
  [[ $1 == INT ]] && exit 130
  exit 143
}
trap teardown EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

# --- The cluster --------------------------------------------------------------------------------

add_namespace() {
  local err
  # Listed first, so that a signal right after `ip netns add` cannot leave it behind.
  namespaces+=("$1")
  if ! err=$(ip netns add "$1" 2>&1); then
    unset 'namespaces[-1]' # not ours: it may exist from someone else
    die "cannot create network namespace $1: $err"
  fi
  ip -n "$1" link set lo up
}

add_namespace "$SWITCH"
err=$(ip -n "$SWITCH" link add br0 type bridge 2>&1) || die "cannot create a bridge (kernel module 'bridge'): $err"
ip -n "$SWITCH" link set br0 up
# Probes on the switch's loopback: tbf always, netem only when asked for.
err=$(tc -n "$SWITCH" qdisc add dev lo root tbf rate 1gbit burst 128kb latency 10ms 2>&1) \
  || die "tc cannot add a tbf qdisc (kernel module sch_tbf): $err"
tc -n "$SWITCH" qdisc del dev lo root
if [[ -n $delay ]]; then
  err=$(tc -n "$SWITCH" qdisc add dev lo root netem delay "$delay" 2>&1) \
    || die "--delay=$delay needs the netem qdisc, which this kernel lacks (tc: $err); run without --delay"
  tc -n "$SWITCH" qdisc del dev lo root
fi
err=$(ip netns exec "$SWITCH" unshare --pid --fork --kill-child --mount-proc true 2>&1) \
  || die "cannot create a PID namespace (unshare --pid): $err"

for ((k = 0; k < hosts; k++)); do
  add_namespace "${PREFIX}host$k"
  # Made in the switch namespace with the host's end moved at once: nothing appears in the root one.
  err=$(ip -n "$SWITCH" link add "p$k" type veth peer name eth0 netns "${PREFIX}host$k" 2>&1) \
    || die "cannot create a veth pair (kernel module 'veth'): $err"
  ip -n "$SWITCH" link set "p$k" master br0 up
  ip -n "${PREFIX}host$k" addr add "$SUBNET.$((k + 1))/24" dev eth0
  ip -n "${PREFIX}host$k" link set eth0 up
done
log "$hosts hosts ${PREFIX}host0..$((hosts - 1)) ($SUBNET.1-$((hosts)), eth0) on bridge br0 in $SWITCH"

# tbf's bucket must hold a GSO packet (64 KiB) and let the timer keep up with the rate: 128 KiB or
# 1 ms of the rate, whichever is larger. 10 ms of queue before drops, as in a switch.
shape() {
  local rate=$1 bits burst k parent=root
  bits=$(awk -v r="$rate" 'BEGIN {
    n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    printf "%.0f", n * m[u] }')
  burst=$((bits / 8 / 1000))
  [[ $burst -lt 131072 ]] && burst=131072
  for ((k = 0; k < hosts; k++)); do
    if [[ -n $delay ]]; then
      # Delay on the host's egress only: one way between hosts is --delay, a round trip twice that.
      tc -n "${PREFIX}host$k" qdisc replace dev eth0 root handle 1: netem delay "$delay" limit 100000 \
        || die "cannot add netem to host $k"
      parent="parent 1:1 handle 10:"
    fi
    # shellcheck disable=SC2086  # $parent is two or four words
    tc -n "${PREFIX}host$k" qdisc replace dev eth0 $parent tbf rate "$rate" burst "$burst" latency 10ms \
      || die "cannot shape host $k's link to $rate"
    tc -n "$SWITCH" qdisc replace dev "p$k" root tbf rate "$rate" burst "$burst" latency 10ms \
      || die "cannot shape switch port $k to $rate"
  done
}

# A base port below the ephemeral range (where Gloo's own connections live) whose next 256 ports,
# as many as the sweep's runs may take, are free in host 0's namespace (only our runs use it).
pick_port() {
  ip netns exec "${PREFIX}host0" python3 "$helpers/sim_cluster_free_ports.py"
}

# One TCP stream from host 1 to host 0 for $link_check seconds; the receiver's Gbit/s go to
# $dir/link_check.txt and into measured[$rate]. Not in a subshell: the teardown must know its pids.
measure_link() {
  local dir=$1
  local out=$dir/link_check.txt
  rm -f "$dir/link_port"
  ip netns exec "${PREFIX}host0" python3 "$helpers/sim_cluster_link_receive.py" "$SUBNET.1" "$dir/link_port" \
    >"$out" 2>&1 &
  procs+=($!)
  local receiver=$!
  for _ in $(seq 100); do [[ -f $dir/link_port ]] && break; sleep 0.1; done
  ip netns exec "${PREFIX}host1" python3 "$helpers/sim_cluster_link_send.py" "$SUBNET.1" \
    "$(cat "$dir/link_port" 2>/dev/null || echo 0)" "$link_check" >>"$out" 2>&1 &
  procs+=($!)
  wait_gone $((link_check + 25)) "$receiver" "$!"
  stop_nodes # reaps both (and stops them if the check hung)
  rm -f "$dir/link_port"
  measured[$rate]=$(awk 'NR == 1 && $2 == "Gbit/s:" { print $1 }' "$out")
}

# --- The sweep, once per rate -------------------------------------------------------------------

# Each host's init. Not scaling itself: a PID namespace's init receives only the signals it has a
# handler for, so SIGTERM would be dropped; this shell passes it on and exits with scaling's status.
# shellcheck disable=SC2016  # expanded by the host's shell, not this one
readonly NODE_INIT='trap "kill -TERM \$child 2>/dev/null" TERM
"$@" &
child=$!
while wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null; do :; done
exit "$rc"'

world_sizes_flag=$(
  IFS=,
  echo "${world_sizes[*]}"
)
mkdir -p "$output_dir" || die "cannot create $output_dir"
declare -A measured
for rate in "${rate_list[@]}"; do
  dir=$output_dir/$rate
  rm -rf "$dir"
  mkdir -p "$dir"
  shape "$rate"
  log "links shaped to $rate${delay:+, $delay delay per host egress}"
  measured[$rate]=""
  if [[ $link_check -gt 0 ]]; then
    measure_link "$dir"
    if [[ -n ${measured[$rate]} ]]; then
      log "link check at $rate: ${measured[$rate]} Gbit/s"
    else
      log "link check at $rate failed: $(cat "$dir/link_check.txt")"
    fi
  fi
  if [[ -n $run_command ]]; then
    addresses=()
    for ((k = 0; k < hosts; k++)); do addresses+=("$SUBNET.$((k + 1))"); done
    SIM_CLUSTER_NAMESPACES="${namespaces[*]:1}" SIM_CLUSTER_ADDRESSES="${addresses[*]}" \
      SIM_CLUSTER_RATE="$rate" SIM_CLUSTER_OUTPUT_DIR="$dir" bash -c "$run_command" &
    procs+=($!)
    wait "$!" || die "--run failed at $rate (exit $?)"
    stop_nodes
    continue
  fi
  port=$(pick_port)
  [[ -n $port ]] || die "found no free ports in host 0's namespace"

  for ((k = 0; k < hosts; k++)); do
    node_dir=$dir
    [[ $k -gt 0 ]] && node_dir=$dir/node$k
    ip netns exec "${PREFIX}host$k" unshare --pid --fork --kill-child --mount-proc \
      bash -c "$NODE_INIT" init env GLOO_SOCKET_IFNAME=eth0 ${runfiles:+RUNFILES_DIR="$runfiles"} \
      "$scaling" "${sweep_flags[@]}" \
      --world_sizes="$world_sizes_flag" --nnodes="$hosts" --node_rank="$k" --master_addr="$SUBNET.1" \
      --master_port="$port" --output_dir="$node_dir" --nodes_share_cores >"$dir/node$k.out" 2>&1 &
    node_pids+=($!)
  done
  # Node 0's table and progress, live (the file made here: its host may not have opened it yet).
  touch "$dir/node0.out"
  tail -n +1 -f --pid="${node_pids[0]}" "$dir/node0.out" &
  procs+=($!)

  # Until every host is done; the first one that fails stops the others (they would wait for it
  # until the rendezvous timeout, run after run).
  declare -A rc=()
  while [[ ${#rc[@]} -lt $hosts ]]; do
    for ((k = 0; k < hosts; k++)); do
      [[ -n ${rc[$k]:-} ]] && continue
      running "${node_pids[k]}" && continue
      wait "${node_pids[k]}"
      rc[$k]=$?
      if [[ ${rc[$k]} -ne 0 ]]; then
        log "host $k's sweep failed (exit ${rc[$k]}) at $rate; its last lines ($dir/node$k.out):"
        tail -n 15 "$dir/node$k.out" >&2
        die "stopping the other hosts"
      fi
    done
    sleep 0.5
  done
  wait_gone 5 "${procs[@]}"
  stop_nodes
  unset rc
  tc -s -n "$SWITCH" qdisc show >"$dir/qdisc.txt"
  for ((k = 0; k < hosts; k++)); do
    echo "host $k:" >>"$dir/qdisc.txt"
    tc -s -n "${PREFIX}host$k" qdisc show dev eth0 >>"$dir/qdisc.txt"
  done
  [[ -f $dir/results.csv ]] || die "host 0 wrote no $dir/results.csv"
done

# --- All rates in one CSV and table -------------------------------------------------------------

[[ -n $run_command ]] && exit 0

combine_args=()
for rate in "${rate_list[@]}"; do combine_args+=("$rate" "${measured[$rate]}" "$output_dir/$rate/results.csv"); done
python3 "$helpers/sim_cluster_combine.py" "$hosts" "$output_dir/combined.csv" "${combine_args[@]}" \
  || die "cannot write the combined CSV"
# The table from the runner's own code (experiments/results.cc).
"$scaling" --cluster_table="$output_dir/combined.csv" || die "cannot print the combined table"
