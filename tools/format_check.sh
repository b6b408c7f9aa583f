#!/usr/bin/env bash
# Checks that every C++ file of the workspace is formatted as .clang-format says, and names the ones that
# are not. Run by `bazel test //tools:format_test`, or directly from the workspace root.
#
# Under Bazel the test reaches the source tree through its runfile of the root .clang-format (a symlink
# into the workspace); it is tagged "external" so Bazel never caches its result.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root=$(dirname "$(readlink -f "$TEST_SRCDIR/$TEST_WORKSPACE/.clang-format")")
else
  root=$(cd "$(dirname "$0")/.." && pwd)
fi
cd "$root"

if ! command -v clang-format >/dev/null 2>&1; then
  echo "format_check: clang-format is not installed; run tools/setup.sh (Debian package clang-format)." >&2
  exit 1
fi

if [[ -d .git ]] && command -v git >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu')
else
  mapfile -t files < <(find . -path ./third_party/bazel -prune -o -path './bazel-*' -prune -o \
                         \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) -print | sed 's|^\./||')
fi

present=()
for f in "${files[@]}"; do
  [[ -f "$f" ]] && present+=("$f")
done
# One clang-format for every file (one per file took most of a minute on two cores): each violation
# is reported as FILE:LINE:COLUMN: ... [-Wclang-format-violations].
status=0
report=$(clang-format --style=file --dry-run --Werror "${present[@]}" 2>&1 >/dev/null) || status=$?
mapfile -t bad < <(grep -E '\[-Wclang-format-violations\]$' <<<"$report" | cut -d: -f1 | sort -u)
if [[ $status -ne 0 && ${#bad[@]} -eq 0 ]]; then
  echo "format_check: clang-format failed (status $status) without naming a file:" >&2
  echo "$report" | head -20 >&2
  exit 1
fi

if [[ ${#bad[@]} -gt 0 ]]; then
  echo "format_check: ${#bad[@]} of ${#files[@]} C++ files in $root are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "Fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "format_check: ${#files[@]} C++ files are clang-formatted."
