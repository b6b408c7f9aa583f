#!/usr/bin/env bash
# Gathers what a GPU machine lacks to build this project with CMake (README.md beside this file): the
# Debian 12 packages of the libraries the build links besides LibTorch and CUDA (Abseil, GoogleTest,
# Google Benchmark, nlohmann-json, prometheus-cpp, libpng, libjpeg, zlib), unpacked into one prefix
# and packed as tools/gpu_kit/out/prefix.tar.gz (git-ignored; at most 40 MiB), with a manifest of
# the packages and versions.
#
# Runs on a Debian 12 machine with the package archive reachable (apt-get download); Debian 12's
# libraries need glibc 2.36, older than any current GPU image's, so they run there. Needs no root.
# Usage: tools/gpu_kit/prepare.sh [--out DIR]   (default: tools/gpu_kit/out)
set -euo pipefail

kit=$(cd "$(dirname "$0")" && pwd)
out=$kit/out
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) [[ $# -ge 2 ]] || { echo "prepare.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prepare.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

# The runtime package of each library comes with its development package: the build links the
# shared libraries and the programs load them from the prefix (through their RUNPATH).
packages=(
  libabsl-dev libabsl20220623
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
  nlohmann-json3-dev
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb1
  libpng-dev libpng16-16
  libjpeg62-turbo-dev libjpeg62-turbo
  zlib1g-dev zlib1g
)
limit_mib=40

. /etc/os-release
if [[ ${VERSION_CODENAME:-} != bookworm ]]; then
  echo "prepare.sh: this is ${PRETTY_NAME:-an unknown system}; run it on Debian 12 (bookworm): newer" \
       "releases' libraries need a newer glibc than GPU images have" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/prefix"
if ! (cd "$work/debs" && apt-get download "${packages[@]}") >"$work/download.log" 2>&1; then
  echo "prepare.sh: apt-get download failed:" >&2
  tail -5 "$work/download.log" >&2
  exit 1
fi
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$work/prefix"
done
prefix=$work/prefix
# One library folder (zlib's runtime package still installs to /lib), no documentation.
if [[ -d $prefix/lib ]]; then
  mkdir -p "$prefix/usr/lib"
  cp -a "$prefix/lib/." "$prefix/usr/lib/"
  rm -rf "$prefix/lib"
fi
rm -rf "$prefix/usr/share/doc" "$prefix/usr/share/man" "$prefix/usr/share/lintian" \
       "$prefix/usr/src"
# Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) would point at the GPU machine's
# own files: make them relative, inside the prefix.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  [[ $target == /* ]] || continue
  inside=$prefix/usr${target#/usr}
  [[ -e $inside ]] || { echo "prepare.sh: $link points at $target, not in the prefix" >&2; exit 1; }
  ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$inside")" "$link"
done < <(find "$prefix" -type l -print0)

mkdir -p "$out"
{
  echo "# Debian 12 packages in prefix.tar.gz (tools/gpu_kit/prepare.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ))"
  for deb in "$work"/debs/*.deb; do
    dpkg-deb -f "$deb" Package Version | paste -sd' '
  done
} >"$out/manifest.txt"
tar -C "$prefix" -czf "$out/prefix.tar.gz" usr
size=$(stat -c %s "$out/prefix.tar.gz")
mib=$(( (size + 1048575) / 1048576 ))
if [[ $mib -gt $limit_mib ]]; then
  echo "prepare.sh: $out/prefix.tar.gz is $mib MiB, over the kit's $limit_mib MiB" >&2
  exit 1
fi
echo "prepare.sh: $out/prefix.tar.gz: ${#packages[@]} packages, $(du -sm "$prefix" | cut -f1) MiB" \
     "unpacked, $mib MiB packed (limit $limit_mib MiB)"
