#!/usr/bin/env bash
# Runs a command on this source tree inside a Debian root made with debootstrap and prepared by
# tools/setup.sh, so that one machine builds and tests the project on another Debian release (CI runs
# Debian 13 with the CUDA stack this way on its Debian 12 machine). Needs root, debootstrap and unshare.
#
# Usage: tools/debian_root.sh [--suite trixie] [--setup "--cuda --cudnn-standin"] [--cache DIR] -- CMD...
#   --suite   the Debian release of the root (default trixie; bookworm, trixie, forky or sid)
#   --setup   arguments for tools/setup.sh inside the root (default --cuda --cudnn-standin)
#   --cache   where roots, downloaded packages and Bazel's caches are kept between runs
#             (default /var/cache/dtrain)
#
# The root is built on first use and rebuilt when the package list tools/setup.sh gives for these
# options, or tools/cudnn_standin.sh, changes; downloaded packages survive a rebuild, Bazel's caches do
# not (they may hold objects built against the old root's headers). One run at a time uses a root.
# CMD runs as root in /src (this tree, mounted read-write) in private mount and PID namespaces: every
# mount and every process it starts, Bazel's server included, is gone when it returns, also when it is
# interrupted. Exits with CMD's status.
set -euo pipefail

suite=trixie
setup_args="--cuda --cudnn-standin"
cache=/var/cache/dtrain
while [[ $# -gt 0 ]]; do
  case "$1" in
    --suite|--setup|--cache)
      [[ $# -ge 2 ]] || { echo "debian_root.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --suite) suite=$2 ;;
        --setup) setup_args=$2 ;;
        --cache) cache=$(realpath -m "$2") ;;
      esac
      shift 2
      ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "debian_root.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "debian_root.sh: no command given (usage: tools/debian_root.sh [options] -- CMD...)" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "debian_root.sh: must run as root (debootstrap, chroot and mounts need it)" >&2
  exit 1
fi
for tool in debootstrap unshare chroot sha256sum flock realpath; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "debian_root.sh: $tool is missing: apt-get install debootstrap util-linux coreutils" >&2
    exit 1
  fi
done

src=$(cd "$(dirname "$0")/.." && pwd)
flavour=$(tr -c 'a-z0-9\n' '-' <<<"$setup_args" | sed 's/-\{2,\}/-/g; s/^-//; s/-$//')
root="$cache/root-$suite${flavour:+-$flavour}"
archives="$cache/apt-archives-$suite"
home="$cache/home-$suite${flavour:+-$flavour}"
stamp_file="$root/.dtrain-root-stamp"
# What the root holds: the release, setup.sh's package list for these options, and the stand-in.
# shellcheck disable=SC2086  # setup_args are words for setup.sh
packages=$("$src/tools/setup.sh" --list $setup_args) ||
  { echo "debian_root.sh: tools/setup.sh --list $setup_args failed" >&2; exit 1; }
stamp=$(printf '%s\n' "$suite $setup_args" "$packages" | cat - "$src/tools/cudnn_standin.sh" |
          sha256sum | cut -d' ' -f1)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

mkdir -p "$cache" "$archives/partial" "$home"
# One user of a root at a time (a CI run, or a developer's, on the same machine); roots of other
# releases or flavours are independent (apt locks the shared package folder itself).
exec 9>"$root.lock"
if ! flock -n 9; then
  echo "debian_root.sh: waiting for another run using $root" >&2
  flock 9
fi

# Everything below runs in a private mount namespace, so these mounts vanish with it.
mount_root() {
  # The root must be a mount point of its own: `ip netns exec` remounts / (as rslave) inside it.
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/run"
  mount -t tmpfs tmpfs "$root/tmp"
  mkdir -p "$root/src" "$root/root" "$root/var/cache/apt/archives"
  mount --bind "$src" "$root/src"
  mount --bind "$home" "$root/root"
  mount --bind "$archives" "$root/var/cache/apt/archives"
  cp /etc/resolv.conf /etc/hosts "$root/etc/"
}
export -f mount_root

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
export -f in_root
export root src home archives

if [[ ! -f $stamp_file || "$(cat "$stamp_file")" != "$stamp" ]]; then
  echo "debian_root.sh: building the Debian $suite root in $root (setup.sh $setup_args)"
  start=$(date +%s)
  umount -R "$root" 2>/dev/null || true
  rm -rf --one-file-system "$root"
  # Objects compiled against the old root's headers must not be reused: Bazel does not hash
  # system headers.
  rm -rf "${home:?}/.cache"
  # debootstrap mounts /proc and /sys in the root: in a namespace of its own they cannot outlive it.
  # A debootstrap older than the suite (Debian 12's knows no forky) bootstraps it with sid's script,
  # which testing shares.
  script=()
  [[ -e /usr/share/debootstrap/scripts/$suite ]] || script=(/usr/share/debootstrap/scripts/sid)
  unshare --mount --propagation private \
    debootstrap --variant=minbase --cache-dir="$archives" "$suite" "$root" "$mirror" "${script[@]}" \
      >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; echo "debian_root.sh: debootstrap failed (log: $cache/debootstrap.log)" >&2; exit 1; }
  # Keep downloaded packages for the next rebuild (Debian's apt keeps them unless told otherwise).
  rm -f "$root/etc/apt/apt.conf.d/docker-clean"
  # Testing's Release files are valid for a week; a mirror that lags (as this workplace's does) would
  # make every apt-get update in a test root fail. Test roots only: setup.sh never does this.
  if [[ $suite == forky || $suite == sid ]]; then
    echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99dtrain-valid-until"
  fi
  unshare --mount --pid --fork --kill-child --propagation private \
    bash -euc 'mount_root; in_root /src/tools/setup.sh $0' "$setup_args"
  echo "$stamp" >"$stamp_file"
  echo "debian_root.sh: root ready after $(($(date +%s) - start)) s"
fi

quoted=$(printf '%q ' "$@")
exec unshare --mount --pid --fork --kill-child --propagation private \
  bash -euc 'mount_root; in_root bash -c "cd /src && $0"' "$quoted"
