#!/usr/bin/env bash
# Builds a container image of dtrain (train and launch in /usr/local/bin) from Debian's package
# archive alone: no registry, no base image, nothing from anywhere else. See deploy/container/README.md.
#
# Usage: deploy/container/build_image.sh [--suite trixie] [--tag dtrain:latest] [--engine podman|docker]
#                                        [--output FILE.tar] [--no-dataset] [--cache DIR]
#   --suite    the Debian release of the image (default trixie; bookworm, trixie, forky or sid)
#   --tag      the image's name (default dtrain:latest)
#   --engine   podman or docker, which imports the image (default: podman where installed, else docker)
#   --output   also save the image to FILE.tar (docker-archive format: `docker load`, `podman load`,
#              `kind load image-archive`)
#   --no-dataset  leave Fashion-MNIST (dataset-fashion-mnist, /usr/share/datasets) out of the image
#   --cache    where the build root, its Bazel caches and downloaded packages are kept between runs
#              (default /var/cache/dtrain, as tools/debian_root.sh)
#
# Steps: (1) builds //trainer:train and //tools/launch:launch in a Debian root of the same release,
# prepared by tools/setup.sh (tools/debian_root.sh --suite SUITE --setup ""), so that the binaries
# link against that release's libraries whatever the host runs, and lists the packages that hold
# every library in their ldd output (dpkg -S in that root); (2) makes a minimal root with
# debootstrap --variant=minbase and installs those packages (and dataset-fashion-mnist) into it
# from the release's main, -updates and -security suites; (3) copies the binaries to /usr/local/bin,
# removes apt's caches and lists, and imports the root as a one-layer image (podman/docker import).
# Needs root; installs debootstrap, and podman when neither podman nor docker is there, from
# Debian's archive. The mirror is DEBIAN_MIRROR (default
# http://deb.debian.org/debian; security updates from DEBIAN_SECURITY_MIRROR, default
# http://deb.debian.org/debian-security). Idempotent: a rerun replaces the tag (and removes the image
# it named, when nothing else uses it). Temporary files are removed, also when interrupted.
# Exit status: 0 when the image is built, 1 on a failure or a missing tool (the message says which),
# 2 on bad arguments.
set -euo pipefail

readonly PROG=build_image

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
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

suite=trixie
tag=dtrain:latest
engine=
output=
dataset=1
cache=/var/cache/dtrain
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=

parse_flags() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --suite|--tag|--engine|--output|--cache)
        [[ $# -ge 2 && -n $2 ]] || usage_error "$1 needs a value"
        case "$1" in
          --suite) suite=$2 ;;
          --tag) tag=$2 ;;
          --engine) engine=$2 ;;
          --output) output=$(realpath -m "$2") ;;
          --cache) cache=$(realpath -m "$2") ;;
        esac
        shift 2
        ;;
      --suite=*|--tag=*|--engine=*|--output=*|--cache=*)
        parse_flags "${1%%=*}" "${1#*=}"
        shift
        ;;
      --no-dataset) dataset=0; shift ;;
      -h|--help) usage; exit 0 ;;
      *) usage_error "unknown argument '$1'" ;;
    esac
  done
}

check_machine() {
  case "$suite" in
    bookworm|trixie|forky|sid) ;;
    *) usage_error "--suite must be bookworm, trixie, forky or sid, not '$suite'" ;;
  esac
  if [[ -z $engine ]]; then
    if command -v podman >/dev/null 2>&1; then
      engine=podman
    elif command -v docker >/dev/null 2>&1; then
      engine=docker
    fi
  fi
  case "$engine" in
    podman|docker|"") ;;
    *) usage_error "--engine must be podman or docker, not '$engine'" ;;
  esac
  [[ $(id -u) -eq 0 ]] ||
    die "must run as root (debootstrap, chroot and the build root's mounts need it; try sudo)"
  # What is missing comes from Debian's archive, as tools/setup.sh does for the build.
  local missing=()
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  [[ -z $engine ]] && engine=podman && missing+=(podman)
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing ${missing[*]} from Debian's archive"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$work/apt.log" 2>&1 ||
      die "apt-get install ${missing[*]} failed: $(tail -3 "$work/apt.log")"
  fi
  local tool
  for tool in debootstrap unshare chroot tar realpath "$engine"; do
    command -v "$tool" >/dev/null 2>&1 ||
      die "$tool is missing: apt-get install debootstrap util-linux tar coreutils $engine"
  done
  # Before the long build: the engine must answer (docker needs its daemon).
  "$engine" info >/dev/null 2>"$work/engine.err" ||
    die "'$engine info' failed, so no image could be imported: $(tail -3 "$work/engine.err")"
  if [[ -n $output ]]; then
    [[ -d $(dirname "$output") ]] || die "--output: no folder $(dirname "$output")"
  fi
}

cleanup() {
  if [[ -n $work && -d $work ]]; then
    rm -rf --one-file-system "$work"
  fi
}

# Seconds since the build started, for the log.
elapsed() { echo "$(($(date +%s) - start))s"; }

# (1) The binaries and their packages, from a root of the image's release.
build_binaries() {
  log "building train and launch in a Debian $suite root (tools/debian_root.sh; the first run makes it)"
  # build_in_root.sh writes its results as a tar archive to descriptor 3, which tools/debian_root.sh
  # passes through (chroot and unshare keep open descriptors), so its own output stays a log.
  "$src/tools/debian_root.sh" --suite "$suite" --setup "" --cache "$cache" -- \
    deploy/container/build_in_root.sh 3>"$work/build.tar" ||
    die "the build in the Debian $suite root failed (see above)"
  mkdir "$work/build"
  tar -C "$work/build" -xf "$work/build.tar" ||
    die "the build in the root returned no results (see above)"
  [[ -x $work/build/bin/train && -x $work/build/bin/launch && -s $work/build/packages.txt ]] ||
    die "the build in the root returned no binaries or no package list"
  log "binaries built after $(elapsed); runtime packages: $(tr '\n' ' ' <"$work/build/packages.txt")"
}

# (2) A minimal root with the runtime packages.
make_root() {
  local root=$work/root archives=$cache/apt-archives-$suite
  # The package folder tools/debian_root.sh keeps for this release: apt and debootstrap lock it.
  mkdir -p "$archives/partial"
  local script=()
  [[ -e /usr/share/debootstrap/scripts/$suite ]] || script=(/usr/share/debootstrap/scripts/sid)
  log "debootstrap --variant=minbase $suite (log: debootstrap.log, shown on failure)"
  # debootstrap mounts /proc and /sys in the root: in a mount namespace of its own they cannot
  # outlive it.
  unshare --mount --propagation private \
    debootstrap --variant=minbase --cache-dir="$archives" "$suite" "$root" "$mirror" "${script[@]}" \
      >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; die "debootstrap $suite from $mirror failed"; }

  # The release's updates, as a Debian installation has them (testing and unstable have none).
  local sources="deb $mirror $suite main"$'\n'
  if [[ $suite == bookworm || $suite == trixie ]]; then
    sources+="deb $mirror $suite-updates main"$'\n'
    sources+="deb $security_mirror $suite-security main"$'\n'
  fi
  printf '%s' "$sources" >"$root/etc/apt/sources.list"
  # No services start in the root while packages are installed.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  install -m 0644 /etc/resolv.conf "$root/etc/resolv.conf"

  local packages
  mapfile -t packages <"$work/build/packages.txt"
  # Testing's Release files are valid for a week, which a lagging mirror exceeds.
  local apt_options=()
  [[ $suite == forky || $suite == sid ]] && apt_options=(-o Acquire::Check-Valid-Until=false)
  log "installing ${#packages[@]} runtime packages into the image's root"
  # In a mount and PID namespace of their own: the mounts and any process a package starts vanish
  # with it.
  # shellcheck disable=SC2016  # expanded by the inner bash
  unshare --mount --pid --fork --kill-child --propagation private \
    bash -euc '
      root=$1 archives=$2 dataset=$3; shift 3
      n=$1; shift
      apt_options=("${@:1:$n}"); shift "$n"
      mount -t proc proc "$root/proc"
      mount -t tmpfs tmpfs "$root/tmp"
      mount --bind "$archives" "$root/var/cache/apt/archives"
      in_root() {
        chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
          PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
      }
      in_root apt-get "${apt_options[@]}" update -q
      if [[ $dataset -eq 1 ]]; then
        if [[ "$(in_root apt-cache policy dataset-fashion-mnist)" == *"Candidate: "[0-9]* ]]; then
          set -- "$@" dataset-fashion-mnist
        else
          echo "build_image: dataset-fashion-mnist is not in the archive: the image has no Fashion-MNIST" >&2
        fi
      fi
      in_root apt-get install -y -q --no-install-recommends "$@"
    ' bash "$root" "$archives" "$dataset" "${#apt_options[@]}" "${apt_options[@]}" "${packages[@]}" \
      >"$work/apt.log" 2>&1 ||
    { tail -30 "$work/apt.log" >&2; die "installing the runtime packages failed (apt's output above)"; }
  grep '^build_image:' "$work/apt.log" >&2 || true
}

# (3) The binaries, a manifest, and nothing that belongs to this machine or to apt's caches.
finish_root() {
  local root=$work/root
  install -m 0755 "$work/build/bin/train" "$work/build/bin/launch" "$root/usr/local/bin/"
  local revision
  revision=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  mkdir -p "$root/usr/local/share/dtrain"
  {
    echo "dtrain image: Debian $suite, revision $revision, built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "Libraries of train and launch, and the packages holding them:"
    cat "$work/build/libraries.txt"
    echo "Installed packages:"
    # shellcheck disable=SC2016  # dpkg-query format, not shell
    chroot "$root" dpkg-query -W -f='${Package} ${Version}\n'
  } >"$root/usr/local/share/dtrain/manifest.txt"
  # A folder any user may write in, the image's working directory.
  install -d -m 1777 "$root/work"

  rm -f "$root/usr/sbin/policy-rc.d"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*
  rm -rf "$root"/var/log/apt/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
  rm -rf "${root:?}"/tmp/* "$root"/var/tmp/* "$root"/root/.cache
  : >"$root/var/log/dpkg.log"
  # The runtime provides these.
  install -m 0644 /dev/null "$root/etc/resolv.conf"
  [[ -e $root/etc/hostname ]] && : >"$root/etc/hostname"
  [[ -e $root/etc/machine-id ]] && : >"$root/etc/machine-id"
  # Smoke test in the root before it becomes an image: every library resolves.
  if chroot "$root" ldd /usr/local/bin/train /usr/local/bin/launch | grep 'not found' >&2; then
    die "the image's root lacks libraries of the binaries (above)"
  fi
  echo "$revision" >"$work/revision"
}

import_image() {
  local root=$work/root old_id new_id revision
  revision=$(cat "$work/revision")
  # podman reports each blob it copies; docker's import and save print nothing.
  local quiet=()
  [[ $engine == podman ]] && quiet=(--quiet)
  old_id=$("$engine" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  log "importing the root as $tag ($engine import)"
  tar --numeric-owner -C "$root" -c . |
    "$engine" import "${quiet[@]}" \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'WORKDIR /work' \
      --change 'CMD ["train"]' \
      --change "LABEL org.opencontainers.image.title=dtrain" \
      --change "LABEL org.opencontainers.image.revision=$revision" \
      --change "LABEL org.opencontainers.image.base.name=debian:$suite" \
      - "$tag" >/dev/null ||
    die "$engine import failed"
  new_id=$("$engine" image inspect --format '{{.Id}}' "$tag")
  # The image the tag named before, now nameless: removed unless a container uses it.
  if [[ -n $old_id && $old_id != "$new_id" ]]; then
    "$engine" rmi "$old_id" >/dev/null 2>&1 || true
  fi
  if [[ -n $output ]]; then
    log "saving $tag to $output"
    rm -f "$output.partial"
    if [[ $engine == podman ]]; then
      podman save --quiet --format docker-archive -o "$output.partial" "$tag" >/dev/null
    else
      docker save -o "$output.partial" "$tag"
    fi
    mv "$output.partial" "$output"
  fi
  local size
  size=$("$engine" image inspect --format '{{.Size}}' "$tag")
  log "built $tag (Debian $suite, $((size / 1000000)) MB) in $(elapsed)${output:+; saved to $output}"
}

main() {
  parse_flags "$@"
  start=$(date +%s)
  work=$(mktemp -d /var/tmp/dtrain-image.XXXXXX)
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  check_machine
  build_binaries
  make_root
  finish_root
  import_image
}

main "$@"
