#!/usr/bin/env bash
# Installs, from Debian's package archive, everything the project needs to build, test and run its main
# job. Idempotent: installs only what is missing and says what it installs. Works as root or via sudo.
#
# Usage: tools/setup.sh [--dry-run]
#   --dry-run   print the packages that would be installed and exit (status 0 when none are missing)
set -euo pipefail

readonly PACKAGES=(
  # Build system and toolchain.
  bazel-bootstrap g++ clang-format
  # Libraries wrapped in third_party/.
  libtorch-dev libgloo-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev zlib1g-dev nlohmann-json3-dev
  # Without OpenBLAS, LibTorch runs on the reference BLAS (about 2x slower training here).
  libopenblas0-pthread
  # The default dataset (Fashion-MNIST, IDX files under /usr/share/datasets/fashion-mnist).
  dataset-fashion-mnist
  # Metrics: the experiment runner pushes to a Pushgateway that Prometheus scrapes; tests start both.
  prometheus prometheus-pushgateway
  # The experiment runner's plots (PNG through gnuplot's cairo terminal).
  gnuplot-nox
  # `ip netns` for the two-host test (trainer/multihost_test.sh, run as root).
  iproute2
  # The experiment runner's PyTorch comparison (--reference=pytorch) runs the same training in Python;
  # the shell tests use python3 for free ports and JSON checks.
  python3 python3-torch
)

dry_run=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup.sh: this script needs a Debian-based system with apt-get and dpkg (Debian 12 is tested)." >&2
  echo "setup.sh: install these packages (or their equivalents) by hand: ${PACKAGES[*]}" >&2
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#PACKAGES[@]} required packages are installed."
  exit 0
fi

echo "setup.sh: installing ${#missing[@]} missing package(s): ${missing[*]}"
if [[ $dry_run -eq 1 ]]; then
  exit 1
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup.sh: not root and sudo is not available; run as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_cmd[@]}" apt-get update -q; then
  echo "setup.sh: 'apt-get update' failed: is Debian's package archive reachable?" >&2
  exit 1
fi
if ! "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  echo "setup.sh: 'apt-get install ${missing[*]}' failed (see apt's message above)." >&2
  exit 1
fi
echo "setup.sh: done."
