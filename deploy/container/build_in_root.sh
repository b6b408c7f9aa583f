#!/usr/bin/env bash
# The build half of deploy/container/build_image.sh, run by it inside the Debian root that
# tools/debian_root.sh prepares (the same release as the image): builds //trainer:train and
# //tools/launch:launch, and finds the Debian packages that hold the shared libraries they load.
# Not meant to be run by hand.
#
# Usage (in the root, in /src): deploy/container/build_in_root.sh
#   Writes to file descriptor 3 a tar archive of: bin/train, bin/launch, packages.txt (one package a
#   line, the owners of every library in the binaries' ldd output) and libraries.txt (what ldd found
#   and which package holds it, for the build log). Everything else goes to stdout and stderr.
set -euo pipefail

readonly PROG=build_in_root
readonly TARGETS=(//trainer:train //tools/launch:launch)

log() { echo "$PROG: $*" >&2; }
die() {
  log "$*"
  exit 1
}

# The package that holds a file, by its path as ldd gives it, as the link resolves (alternatives:
# libblas.so.3 is a link through /etc/alternatives that no package owns) or with /usr in front
# or taken away (Debian 12 records most libraries under /lib, Debian 13 under /usr/lib).
owner_of() {
  local path=$1 candidate pkg
  for candidate in "$path" "$(realpath -e "$path")" "/usr${path}" "${path#/usr}"; do
    [[ -n $candidate ]] || continue
    # "pkg:arch: /path", or "diversion by pkg from: /path" lines, which are not owners.
    pkg=$(dpkg-query -S "$candidate" 2>/dev/null | grep -v '^diversion by' | head -1 | cut -d: -f1) ||
      true
    if [[ -n $pkg ]]; then
      echo "$pkg"
      return 0
    fi
  done
  return 1
}

main() {
  [[ -e /proc/self/fd/3 ]] || die "file descriptor 3 (where the results go) is not open"
  command -v bazel >/dev/null 2>&1 || die "bazel is missing in the build root (tools/setup.sh failed?)"

  # --symlink_prefix=/: no bazel-* links in the source tree, whose own links belong to the host's
  # Bazel (the tree is shared with it).
  log "building ${TARGETS[*]}"
  bazel build --symlink_prefix=/ "${TARGETS[@]}"
  local bin
  bin=$(bazel info --symlink_prefix=/ bazel-bin 2>/dev/null)

  local out
  out=$(mktemp -d)
  mkdir "$out/bin"
  cp "$bin/trainer/train" "$bin/tools/launch/launch" "$out/bin/"

  # Every library either binary loads, and the package that holds it. ldd lines: "name => path
  # (addr)", or "path (addr)" for the loader ("FILE:" heads each binary's list; linux-vdso has no
  # file).
  local libs lib pkg missing=()
  libs=$(ldd "$out/bin/train" "$out/bin/launch" |
           awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
  if ldd "$out/bin/train" "$out/bin/launch" | grep -q 'not found'; then
    die "a library of the binaries is not found: $(ldd "$out/bin/train" | grep 'not found')"
  fi
  : >"$out/libraries.txt"
  while IFS= read -r lib; do
    if pkg=$(owner_of "$lib"); then
      printf '%s %s\n' "$lib" "$pkg" >>"$out/libraries.txt"
    else
      missing+=("$lib")
    fi
  done <<<"$libs"
  [[ ${#missing[@]} -eq 0 ]] || die "no Debian package holds these libraries: ${missing[*]}"
  cut -d' ' -f2 "$out/libraries.txt" | sort -u >"$out/packages.txt"
  log "$(wc -l <"$out/libraries.txt") libraries, from $(wc -l <"$out/packages.txt") packages"

  tar -C "$out" -c bin packages.txt libraries.txt >&3
  rm -rf "$out"
}

main "$@"
