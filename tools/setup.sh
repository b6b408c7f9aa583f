#!/usr/bin/env bash
# Installs, from Debian's package archive, everything the project needs to build, test and run its main
# job, on Debian 12 (bookworm: LibTorch 1.13, CPU), Debian 13 (trixie: LibTorch 2.6, CPU or CUDA) or
# Debian testing and unstable (forky and sid: LibTorch 2.14, CPU).
# Idempotent: installs only what is missing and says what it installs. Works as root or via sudo.
#
# Usage: tools/setup.sh [--cuda [--cudnn-standin]] [--dry-run | --list]
#   --cuda            Debian 13 only: LibTorch built with CUDA, NCCL and the CUDA toolkit, from the
#                     archive's contrib and non-free components (enabled for this, and only then)
#   --cudnn-standin   with --cuda, where NVIDIA's site is unreachable (CI): decline the cuDNN download
#                     and install a link-time stand-in for libcudnn.so.9 instead (docs/PLATFORMS.md)
#   --dry-run         print the packages that would be installed and exit (status 0 when none are missing)
#   --list            print the package list for these options, whatever the machine, and exit
set -euo pipefail

# "a|b" is satisfied by either package; the first is installed, or, with --cuda, the last.
readonly COMMON_PACKAGES=(
  # Build systems and toolchain: Bazel, and CMake with Ninja for the CMake build (docs/CMAKE.md).
  bazel-bootstrap g++ clang-format cmake ninja-build
  # Libraries wrapped in third_party/. LibTorch and Gloo come as a CPU or a CUDA build.
  "libtorch-dev|libtorch-cuda-dev" "libgloo-dev|libgloo-cuda-dev" libabsl-dev libgtest-dev libgmock-dev
  libbenchmark-dev prometheus-cpp-dev zlib1g-dev nlohmann-json3-dev
  # Image decoding for --dataset=imagefolder (libjpeg-turbo and libpng, Debian 12 and 13 alike).
  libjpeg62-turbo-dev libpng-dev
  # Without OpenBLAS, LibTorch runs on the reference BLAS (about 2x slower training here).
  libopenblas0-pthread
  # The default dataset (Fashion-MNIST, IDX files under /usr/share/datasets/fashion-mnist).
  dataset-fashion-mnist
  # Metrics: the experiment runner pushes to a Pushgateway that Prometheus scrapes; tests start both.
  prometheus prometheus-pushgateway
  # The experiment runner's plots (PNG through gnuplot's cairo terminal).
  gnuplot-nox
  # `ip netns`, `tc` (tbf) and `bridge` for the two-host test and the simulated cluster
  # (trainer/multihost_test.sh, experiments/sim_cluster.sh, run as root; their unshare is util-linux's,
  # essential in Debian, so always there); pgrep and ps for the tests that find and kill ranks.
  iproute2 procps
  # The experiment runner's PyTorch comparison (--reference=pytorch) runs the same training in Python;
  # the shell tests use python3 for free ports and JSON checks.
  python3 "python3-torch|python3-torch-cuda"
  # The PyTorch interop tests: torchvision's ResNet-18 loads the weights `train` writes, and the other way.
  python3-torchvision
  # The real launchers the tests run `train` under: Open MPI's mpirun and a one-host Slurm cluster.
  openmpi-bin slurm-wlm
)
# Only in Debian 13's archive and later (the Debian 12 tests of these files skip, saying so).
readonly TRIXIE_PACKAGES=(python3-safetensors)
# Debian 13 with --cuda: NCCL and the CUDA toolkit (nvcc, headers, libcudart) besides the CUDA builds
# of LibTorch, Gloo and PyTorch chosen above.
readonly CUDA_PACKAGES=(libnccl-dev nvidia-cuda-toolkit)

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
log() { echo "setup.sh: $*"; }
die() { echo "setup.sh: $*" >&2; exit 1; }

dry_run=0
list=0
cuda=0
cudnn_standin=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    --list) list=1 ;;
    --cuda) cuda=1 ;;
    --cudnn-standin) cudnn_standin=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
if [[ $cudnn_standin -eq 1 && $cuda -eq 0 ]]; then
  echo "setup.sh: --cudnn-standin only makes sense with --cuda" >&2
  exit 2
fi

if [[ $list -eq 1 ]]; then
  printf '%s\n' "${COMMON_PACKAGES[@]}" "${TRIXIE_PACKAGES[@]}"
  [[ $cuda -eq 1 ]] && printf '%s\n' "${CUDA_PACKAGES[@]}"
  [[ $cudnn_standin -eq 1 ]] && echo "(cuDNN stand-in)"
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup.sh: this script needs Debian 12, 13 or testing (apt-get and dpkg)." >&2
  echo "setup.sh: install these packages (or their equivalents) by hand: ${COMMON_PACKAGES[*]}" >&2
  exit 1
fi

installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

# Which Debian this is. SETUP_OS_RELEASE lets the tests present another release's file.
os_release=${SETUP_OS_RELEASE:-/etc/os-release}
version_id=$( (. "$os_release" 2>/dev/null && echo "${VERSION_ID:-}") || true)
codename=$( (. "$os_release" 2>/dev/null && echo "${VERSION_CODENAME:-}") || true)
case "$version_id" in
  12) release="Debian 12 (bookworm): LibTorch 1.13, CPU" ;;
  13)
    flavour=CPU
    if [[ $cuda -eq 1 ]]; then
      flavour=CUDA
    elif installed libtorch-cuda-dev; then
      flavour="CUDA (installed earlier with --cuda)"
    fi
    release="Debian 13 (trixie): LibTorch 2.6, $flavour"
    ;;
  "")
    # Testing and unstable carry no VERSION_ID; both name the next release (unstable as
    # "forky/sid" in PRETTY_NAME).
    if [[ $codename == forky ]]; then
      version_id=testing
      release="Debian testing/unstable (forky): LibTorch 2.14, CPU"
    else
      pretty=$( (. "$os_release" 2>/dev/null && echo "${PRETTY_NAME:-}") || true)
      die "found '${pretty:-an unknown system}': supported are Debian 12 (bookworm), Debian 13 (trixie) and Debian testing (forky)."
    fi
    ;;
  *)
    pretty=$( (. "$os_release" 2>/dev/null && echo "${PRETTY_NAME:-}") || true)
    die "found '${pretty:-an unknown system}': supported are Debian 12 (bookworm), Debian 13 (trixie) and Debian testing (forky)."
    ;;
esac
log "found $release"
if [[ $cuda -eq 1 && $version_id != 13 ]]; then
  die "--cuda needs Debian 13: Debian 12's and testing's archives have no CUDA build of LibTorch (docs/PLATFORMS.md)."
fi

wanted=("${COMMON_PACKAGES[@]}")
[[ $version_id == 13 || $version_id == testing ]] && wanted+=("${TRIXIE_PACKAGES[@]}")
[[ $cuda -eq 1 ]] && wanted+=("${CUDA_PACKAGES[@]}")
missing=()
for entry in "${wanted[@]}"; do
  IFS='|' read -r -a choices <<<"$entry"
  if [[ $cuda -eq 1 ]]; then
    # The CUDA build is wanted even where the CPU one is installed (apt replaces it).
    installed "${choices[-1]}" || missing+=("${choices[-1]}")
    continue
  fi
  found=0
  for choice in "${choices[@]}"; do
    if installed "$choice"; then found=1; break; fi
  done
  [[ $found -eq 1 ]] || missing+=("${choices[0]}")
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
as_root() {
  if [[ ${#sudo_cmd[@]} -gt 0 ]] && ! command -v sudo >/dev/null 2>&1; then
    die "not root and sudo is not available; run as root: $*"
  fi
  "${sudo_cmd[@]}" "$@"
}

# The folder Debian installs LibTorch's CUDA library (and cuDNN) in, once LibTorch is installed.
cuda_libdir() {
  local lib
  lib=$(dpkg -L libtorch-cuda-dev 2>/dev/null | grep '/libtorch_cuda\.so$' | head -1 || true)
  [[ -n $lib ]] && dirname "$lib"
}
# True when LibTorch's CUDA library is installed but libcudnn.so.9 beside it is not.
cudnn_missing() {
  local dir
  dir=$(cuda_libdir) || return 1
  [[ ! -e $dir/libcudnn.so.9 ]]
}
# True when libcudnn.so.9 is the stand-in (it carries a marker symbol) rather than NVIDIA's.
cudnn_is_standin() {
  local dir
  dir=$(cuda_libdir) || return 1
  [[ -e $dir/libcudnn.so.9 ]] && grep -qa dtrain_cudnn_standin "$dir/libcudnn.so.9"
}

if [[ ${#missing[@]} -eq 0 ]] && { [[ $cuda -eq 0 ]] || ! cudnn_missing; }; then
  log "all ${#wanted[@]} required packages are installed."
  if cudnn_is_standin; then
    log "note: libcudnn.so.9 is the link-time stand-in (tools/setup.sh --cudnn-standin), not NVIDIA's cuDNN."
  fi
  exit 0
fi
if [[ $dry_run -eq 1 ]]; then
  [[ ${#missing[@]} -gt 0 ]] && log "would install ${#missing[@]} missing package(s): ${missing[*]}"
  [[ $cuda -eq 1 ]] && cudnn_missing && log "would install cuDNN (libcudnn.so.9 is missing)"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive

apt_update() {
  as_root apt-get update -q || die "'apt-get update' failed: is Debian's package archive reachable?"
}
has_candidate() { [[ "$(apt-cache policy "$1" 2>/dev/null)" == *"Candidate: "[0-9]* ]]; }

# contrib and non-free, for --cuda only: a sources file of the project's own beside the system's.
readonly cuda_sources=/etc/apt/sources.list.d/dtrain-cuda.sources
enable_contrib_non_free() {
  apt_update
  has_candidate nvidia-cuda-toolkit && return 0
  local mirror
  mirror=$(apt-cache policy 2>/dev/null |
             awk -v suite="$codename/main" '$3 == suite && $2 ~ /^https?:/ {print $2; exit}')
  mirror=${mirror:-http://deb.debian.org/debian}
  # apt refuses two entries for one archive whose Signed-By differ: take the system entry's.
  local signed_by
  signed_by=$(awk -v uri="$mirror" 'BEGINFILE {u = 0} /^URIs:/ {u = index($0, uri) > 0}
                u && /^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  log "enabling the contrib and non-free components of $mirror for the CUDA packages"
  { printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: contrib non-free\n' \
      "$mirror" "$codename" "$codename"
    # An if, not `&&`: a false test as the group's last command fails the pipe under pipefail.
    if [[ -n $signed_by ]]; then printf 'Signed-By: %s\n' "$signed_by"; fi
  } | as_root tee "$cuda_sources" >/dev/null
  if ! as_root apt-get update -q || ! has_candidate nvidia-cuda-toolkit; then
    as_root rm -f "$cuda_sources"
    die "nvidia-cuda-toolkit is not available from $mirror's contrib and non-free components."
  fi
}

if [[ $cuda -eq 1 ]]; then
  enable_contrib_non_free
  if [[ $cudnn_standin -eq 1 ]]; then
    # nvidia-cudnn downloads cuDNN from NVIDIA in its post-install script once its licence is
    # accepted; declining makes it install nothing, so the stand-in below takes its place.
    echo "nvidia-cudnn nvidia-cudnn/question select I Decline" | as_root debconf-set-selections
  elif [[ -t 0 ]]; then
    # On a terminal, let nvidia-cudnn show NVIDIA's cuDNN licence and ask.
    unset DEBIAN_FRONTEND
  elif ! installed nvidia-cudnn; then
    log "note: installing nvidia-cudnn without a terminal takes its default answer to NVIDIA's cuDNN"
    log "licence question (\"I Agree\"); run tools/setup.sh --cuda on a terminal to read it first."
  fi
fi

if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${#missing[@]} missing package(s): ${missing[*]}"
  [[ $cuda -eq 1 ]] || apt_update
  # A cuDNN download that failed earlier leaves packages unconfigured; --cudnn-standin finishes them.
  if [[ $cudnn_standin -eq 1 ]] && ! as_root dpkg --configure -a; then
    die "'dpkg --configure -a' failed (see dpkg's message above)."
  fi
  if ! as_root apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    cudnn_status=$(dpkg-query -W -f='${Status}' nvidia-cudnn 2>/dev/null || true)
    if [[ $cuda -eq 1 && ( $cudnn_status == *" half-configured" || $cudnn_status == *" unpacked" ) ]]; then
      echo "setup.sh: cuDNN could not be installed: nvidia-cudnn downloads it from NVIDIA's site when it" >&2
      echo "setup.sh: is configured (see its message above). Where that site cannot be reached, run" >&2
      echo "setup.sh: 'tools/setup.sh --cuda --cudnn-standin' to build and link against a stand-in that" >&2
      echo "setup.sh: cannot run cuDNN (docs/PLATFORMS.md); on a GPU machine, fix the download instead." >&2
      exit 1
    fi
    die "'apt-get install ${missing[*]}' failed (see apt's message above)."
  fi
fi

if [[ $cuda -eq 1 ]] && cudnn_missing; then
  if [[ $cudnn_standin -eq 0 ]]; then
    die "libcudnn.so.9 is missing (nvidia-cudnn's licence was declined?): run 'update-nvidia-cudnn -u' as root."
  fi
  log "installing the cuDNN stand-in (libcudnn.so.9 that links but aborts when called)"
  as_root "$(dirname "$0")/cudnn_standin.sh" "$(cuda_libdir)"
  as_root ldconfig
fi
log "done."
