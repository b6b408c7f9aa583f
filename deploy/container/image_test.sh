#!/usr/bin/env bash
# The container image end to end: builds it with deploy/container/build_image.sh (or takes a built
# one), then runs in it, each in a container of its own without a network: train on synthetic data
# to --max_steps, train on the image's Fashion-MNIST (its default dataset), train as a user other
# than root, and launch with 2 ranks in one container (shared memory from --shm-size). Slow (a
# build of the image, minutes when warm), so not part of `bazel test //...`: run it by hand, as root.
#
# Usage: deploy/container/image_test.sh [--image TAG] [--engine podman|docker] [--suite trixie]
#   --image    test this image instead of building one (it is left in place)
#   --engine   podman or docker (default: podman where installed, else docker)
#   --suite    the Debian release of the image the test builds (default trixie)
#
# Prints SKIP and exits 0 where it cannot run: not root, no engine, or an engine that cannot start
# containers on this machine (the engine's error is printed). A machine whose engine starts
# containers only with extra options (a hybrid cgroup hierarchy needs runc instead of crun; a
# missing CAP_SYS_RESOURCE needs lower --ulimit values) gets them: the test tries a few and says
# which worked. DTRAIN_IMAGE_RUN_OPTS (words) replaces that search. Removes every container and
# image it made, and its temporary files, also when interrupted.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tools/testing/shell_test_lib.sh
source "$src/tools/testing/shell_test_lib.sh"

image=
engine=
suite=trixie
built_image=
probe_image=
containers=()
run_opts=()

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --image|--engine|--suite)
      [[ $# -ge 2 ]] || { echo "image_test: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --image) image=$2 ;;
        --engine) engine=$2 ;;
        --suite) suite=$2 ;;
      esac
      shift 2
      ;;
    -h|--help) usage; exit 0 ;;
    *) echo "image_test: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

if [[ -z $engine ]]; then
  if command -v podman >/dev/null 2>&1; then engine=podman
  elif command -v docker >/dev/null 2>&1; then engine=docker
  fi
fi
[[ -n $engine ]] || skip "neither podman nor docker is installed"
command -v "$engine" >/dev/null 2>&1 || skip "$engine is not installed"
[[ -n $image || $(id -u) -eq 0 ]] || skip "building the image needs root (or pass --image)"
"$engine" info >/dev/null 2>&1 || skip "'$engine info' fails: $("$engine" info 2>&1 | tail -1)"

start_test image_test

# shellcheck disable=SC2317  # called by the EXIT trap (shell_test_lib.sh)
extra_cleanup() {
  local c
  for c in "${containers[@]}"; do "$engine" rm -f "$c" >/dev/null 2>&1 || true; done
  [[ -z $probe_image ]] || "$engine" rmi -f "$probe_image" >/dev/null 2>&1 || true
  [[ -z $built_image ]] || "$engine" rmi -f "$built_image" >/dev/null 2>&1 || true
}

# A throwaway image of this machine's /bin/true and its libraries, to learn within seconds, before
# any build, whether and how the engine starts containers here.
make_probe_image() {
  local root=$tmp/probe f
  mkdir -p "$root"
  for f in /bin/true $(ldd /bin/true | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
  done
  probe_image=localhost/dtrain-image-probe:$$
  tar -C "$root" -c . | "$engine" import - "$probe_image" >/dev/null 2>"$tmp/probe_import.err" ||
    { cat "$tmp/probe_import.err" >&2; return 1; }
}

# Sets run_opts to the first option set that starts the probe image, or skips.
find_run_opts() {
  if [[ -n ${DTRAIN_IMAGE_RUN_OPTS:-} ]]; then
    read -r -a run_opts <<<"$DTRAIN_IMAGE_RUN_OPTS"
    "$engine" run --rm --network=none "${run_opts[@]}" "$probe_image" /bin/true 2>"$tmp/probe.err" ||
      skip "DTRAIN_IMAGE_RUN_OPTS='$DTRAIN_IMAGE_RUN_OPTS' does not start a container: $(tail -1 "$tmp/probe.err")"
    return
  fi
  # Limits the container may have without CAP_SYS_RESOURCE: this machine's hard limits (the
  # process limit also at most pid_max, which runc's check here found to bind).
  local nofile nproc pid_max
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo "$nproc")
  [[ $nproc == unlimited || $nproc -gt $pid_max ]] && nproc=$pid_max
  [[ $nofile == unlimited ]] && nofile=1048576
  local limits="--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
  local candidates=("" "$limits")
  if [[ $engine == podman ]] && command -v runc >/dev/null 2>&1; then
    candidates+=("--runtime runc" "--runtime runc $limits")
  fi
  local c errors=""
  for c in "${candidates[@]}"; do
    read -r -a run_opts <<<"$c"
    if "$engine" run --rm --network=none "${run_opts[@]}" "$probe_image" /bin/true \
         2>"$tmp/probe.err"; then
      [[ -z $c ]] || echo "image_test: $engine starts containers here with: $c"
      return
    fi
    errors+="  [${c:-no options}] $(tail -1 "$tmp/probe.err")"$'\n'
  done
  skip "$engine cannot start a container on this machine; it said:"$'\n'"$errors"
}

# run NAME TIMEOUT ENGINE_OPTIONS... -- COMMAND...: runs COMMAND in a fresh container of the image,
# output in $tmp/NAME.out, and returns its exit status.
run() {
  local name=$1 limit=$2
  shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  local container=dtrain-image-test-$$-$name
  containers+=("$container")
  local t0=$SECONDS rc=0
  timeout "$limit" "$engine" run --rm --name "$container" --network=none "${run_opts[@]}" \
    "${opts[@]}" "$image" "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  "$engine" rm -f "$container" >/dev/null 2>&1 || true
  echo "image_test: $name: exit $rc after $((SECONDS - t0)) s"
  return "$rc"
}

make_probe_image || { fail "could not import a probe image"; finish; }
find_run_opts

if [[ -z $image ]]; then
  built_image=localhost/dtrain-image-test:$$
  image=$built_image
  t0=$SECONDS
  if ! "$src/deploy/container/build_image.sh" --suite "$suite" --tag "$image" --engine "$engine" \
       >"$tmp/build.log" 2>&1; then
    tail -30 "$tmp/build.log" >&2
    fail "build_image.sh failed (its output above)"
    finish
  fi
  grep '^build_image:' "$tmp/build.log"
  echo "image_test: image built in $((SECONDS - t0)) s"
fi
"$engine" image inspect "$image" >/dev/null 2>&1 || { fail "no image $image"; finish; }
echo "image_test: $image, $(( $("$engine" image inspect --format '{{.Size}}' "$image") / 1000000 )) MB"

small=(--dataset=synthetic --synthetic_train_size=512 --batch_size=32 --epochs=1)

# 1. train alone, to --max_steps.
if run synthetic 300 -- train "${small[@]}" --max_steps=10; then
  grep -q 'stopped at --max_steps=10' "$tmp/synthetic.out" ||
    fail "synthetic: no 'stopped at --max_steps=10': $(tail -5 "$tmp/synthetic.out")"
else
  fail "synthetic: $(tail -5 "$tmp/synthetic.out")"
fi

# 2. The image's Fashion-MNIST, where train looks by default.
if run fashion 300 -- train --train_limit=1024 --val_limit=300 --batch_size=64 --epochs=1 \
     --max_steps=5; then
  grep -q '^data: fashion-mnist from /usr/share/datasets/fashion-mnist' "$tmp/fashion.out" ||
    fail "fashion: not Fashion-MNIST from /usr/share/datasets: $(head -3 "$tmp/fashion.out")"
  grep -q 'stopped at --max_steps=5' "$tmp/fashion.out" ||
    fail "fashion: no 'stopped at --max_steps=5': $(tail -5 "$tmp/fashion.out")"
else
  fail "fashion-mnist: $(tail -5 "$tmp/fashion.out")"
fi

# 3. As a user other than root (Kubernetes' runAsNonRoot), writing into the working directory.
if run nonroot 300 --user 1000:1000 -- train "${small[@]}" --max_steps=3 \
     --metrics_json=metrics.json --checkpoint_dir=ck; then
  grep -q 'stopped at --max_steps=3' "$tmp/nonroot.out" ||
    fail "nonroot: no 'stopped at --max_steps=3': $(tail -5 "$tmp/nonroot.out")"
else
  fail "nonroot: $(tail -5 "$tmp/nonroot.out")"
fi

# 4. The launcher with 2 ranks in one container, over shared memory and loopback (8 steps each).
if run launch 300 --shm-size=256m -- launch --nproc_per_node=2 -- train "${small[@]}" \
     --max_steps=5; then
  grep -q 'all 2 rank(s) exited with code 0' "$tmp/launch.out" ||
    fail "launch: no 'all 2 rank(s) exited with code 0': $(tail -5 "$tmp/launch.out")"
  grep -q 'stopped at --max_steps=5' "$tmp/launch.out" ||
    fail "launch: no 'stopped at --max_steps=5': $(tail -5 "$tmp/launch.out")"
else
  fail "launch: $(tail -5 "$tmp/launch.out")"
fi

# 5. What the image says about itself: train by default, and the manifest.
cmd=$("$engine" image inspect --format '{{json .Config.Cmd}}' "$image")
[[ $cmd == '["train"]' ]] || fail "the image's command is $cmd, not [\"train\"]"
if run manifest 60 -- cat /usr/local/share/dtrain/manifest.txt; then
  grep -q '^dtrain image: Debian ' "$tmp/manifest.out" || fail "manifest: $(head -3 "$tmp/manifest.out")"
else
  fail "manifest: $(tail -3 "$tmp/manifest.out")"
fi

finish
