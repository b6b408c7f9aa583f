#!/usr/bin/env bash
# //data:make_image_folder as users run it (`bazel run //data:make_image_folder -- /tmp/pets 4 16 4`):
# the folder it writes, the one line it prints naming the absolute folder, a relative folder taken
# from BUILD_WORKING_DIRECTORY (where `bazel run` started) rather than the current directory, and a
# folder it cannot create refused with the reason before anything is written.
set -uo pipefail

make_folder=$(realpath -s "$1")  # absolute: some runs below start elsewhere
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test make_image_folder

# Images (not README.txt) under DIR/SPLIT/class_K.
count() { find "$1" -type f \( -name '*.jpg' -o -name '*.png' \) | wc -l; }

# 1. An absolute folder, parents created as needed.
if "$make_folder" "$tmp/a/b/pets" 4 16 4 >"$tmp/run1.out" 2>"$tmp/run1.err"; then
  want="make_image_folder: wrote 4 classes x 16 train + 4 val images to $tmp/a/b/pets"
  [[ $(cat "$tmp/run1.out") == "$want" ]] || fail "absolute: printed '$(cat "$tmp/run1.out")', want '$want'"
  [[ $(count "$tmp/a/b/pets/train") -eq 64 ]] || fail "absolute: $(count "$tmp/a/b/pets/train") train images, want 64"
  [[ $(count "$tmp/a/b/pets/val") -eq 16 ]] || fail "absolute: $(count "$tmp/a/b/pets/val") val images, want 16"
  [[ $(ls "$tmp/a/b/pets/val") == $'class_0\nclass_1\nclass_2\nclass_3' ]] ||
    fail "absolute: val classes: $(ls "$tmp/a/b/pets/val")"
else
  fail "absolute: exit non-zero: $(cat "$tmp/run1.err")"
fi

# 2. Under `bazel run`: a relative folder lands in BUILD_WORKING_DIRECTORY, not the current one.
mkdir -p "$tmp/work" "$tmp/elsewhere"
if (cd "$tmp/elsewhere" && BUILD_WORKING_DIRECTORY=$tmp/work "$make_folder" pets 2 3 1 \
    >"$tmp/run2.out" 2>"$tmp/run2.err"); then
  want="make_image_folder: wrote 2 classes x 3 train + 1 val images to $tmp/work/pets"
  [[ $(cat "$tmp/run2.out") == "$want" ]] || fail "bazel run: printed '$(cat "$tmp/run2.out")', want '$want'"
  [[ $(count "$tmp/work/pets") -eq 8 ]] || fail "bazel run: $(count "$tmp/work/pets") images in $tmp/work/pets, want 8"
  [[ -z $(ls -A "$tmp/elsewhere") ]] || fail "bazel run: wrote into the current directory"
else
  fail "bazel run: exit non-zero: $(cat "$tmp/run2.err")"
fi

# 3. Run directly: a relative folder lands in the current directory, named absolutely.
if (cd "$tmp/elsewhere" && env -u BUILD_WORKING_DIRECTORY "$make_folder" here 1 1 1 \
    >"$tmp/run3.out" 2>"$tmp/run3.err"); then
  want="make_image_folder: wrote 1 class x 1 train + 1 val images to $tmp/elsewhere/here"
  [[ $(cat "$tmp/run3.out") == "$want" ]] || fail "direct: printed '$(cat "$tmp/run3.out")', want '$want'"
  [[ $(count "$tmp/elsewhere/here") -eq 2 ]] || fail "direct: $(count "$tmp/elsewhere/here") images, want 2"
else
  fail "direct: exit non-zero: $(cat "$tmp/run3.err")"
fi

# 4. A folder under a regular file: refused naming it, nothing printed on stdout.
touch "$tmp/file"
if "$make_folder" "$tmp/file/pets" 1 1 1 >"$tmp/run4.out" 2>"$tmp/run4.err"; then
  fail "under a file: accepted"
else
  grep -qF "DIR: cannot write $tmp/file/pets: " "$tmp/run4.err" ||
    fail "under a file: $(cat "$tmp/run4.err")"
  [[ ! -s $tmp/run4.out ]] || fail "under a file: printed '$(cat "$tmp/run4.out")'"
fi

finish
