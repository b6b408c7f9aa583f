#!/usr/bin/env bash
# tools/cudnn_standin.sh on a library folder made here: a "user" library linked against a cuDNN-like
# libcudnn.so.9 (versioned symbols, as NVIDIA's), which is then removed. The stand-in must define
# exactly what the user imports, under the same version, load in its place, and abort naming the
# function when one is called.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"

standin=$1
start_test cudnn_standin
lib=$tmp/lib
mkdir -p "$lib"

# The "real" cuDNN, only to link the user against.
cat >"$tmp/real.c" <<'C'
int cudnnCreate(void** handle) { *handle = 0; return 0; }
unsigned long cudnnGetVersion(void) { return 90000; }
int cudnnNotUsed(void) { return 0; }
C
printf 'libcudnn.so.9 {\n  global: *;\n};\n' >"$tmp/version.map"
gcc -shared -fPIC -o "$lib/libcudnn.so.9" -Wl,-soname,libcudnn.so.9 \
  -Wl,--version-script="$tmp/version.map" "$tmp/real.c" || fail "building the test's cuDNN"
ln -s libcudnn.so.9 "$lib/libcudnn.so"
cat >"$tmp/user.c" <<'C'
int cudnnCreate(void** handle);
unsigned long cudnnGetVersion(void);
unsigned long UserVersion(void) { void* h; cudnnCreate(&h); return cudnnGetVersion(); }
C
gcc -shared -fPIC -o "$lib/libuser.so.1" -Wl,-soname,libuser.so.1 "$tmp/user.c" -L"$lib" -lcudnn ||
  fail "building the user library"
ln -s libuser.so.1 "$lib/libuser.so"
rm "$lib/libcudnn.so.9" "$lib/libcudnn.so"

# 1. Usage errors.
"$standin" >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "no argument: want exit 2"
"$standin" "$tmp/missing" >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "missing folder: want exit 2"
empty=$tmp/empty; mkdir -p "$empty"
out=$("$standin" "$empty" 2>&1); rc=$?
[[ $rc -eq 1 && $out == *"no library"*"needs libcudnn.so.9"* ]] || fail "nothing to stand in for: rc $rc: $out"

# 2. The stand-in: exactly the imported functions, versioned as cuDNN's.
out=$("$standin" "$lib" 2>&1) || fail "stand-in failed: $out"
[[ $out == *"stands in for 2 cuDNN functions used by libuser.so.1"* ]] || fail "unexpected report: $out"
nm -D --defined-only "$lib/libcudnn.so.9" >"$tmp/defined"
for fn in cudnnCreate cudnnGetVersion; do
  grep -q " T $fn@@libcudnn.so.9$" "$tmp/defined" || fail "$fn@@libcudnn.so.9 not defined: $(cat "$tmp/defined")"
done
grep -q cudnnNotUsed "$tmp/defined" && fail "defines a function nobody imports"
objdump -p "$lib/libcudnn.so.9" | grep 'SONAME *libcudnn.so.9' >/dev/null || fail "wrong SONAME"

# 3. A program using the user library links and loads with it, and calling into cuDNN aborts, named.
cat >"$tmp/main.c" <<'C'
#include <stdio.h>
unsigned long UserVersion(void);
int main(void) { printf("loaded\n"); fflush(stdout); return (int)UserVersion(); }
C
# -rpath-link: the linker resolves libuser's libcudnn.so.9 (and checks its versioned symbols) in
# $lib, not in the machine's own library folders.
gcc -o "$tmp/main" "$tmp/main.c" -L"$lib" -luser -Wl,-rpath-link,"$lib" || fail "linking against the stand-in"
# LD_LIBRARY_PATH, not an rpath: the user library's own dependencies must come from $lib too, before
# any cuDNN the machine itself has.
out=$(LD_LIBRARY_PATH=$lib "$tmp/main" 2>&1); rc=$?
[[ $out == loaded* ]] || fail "program did not load with the stand-in: $out"
[[ $rc -eq 134 ]] || fail "calling cuDNN: want abort (134), got $rc"
[[ $out == *"cudnnCreate called, but libcudnn.so.9 on this machine is a link-time stand-in"* ]] ||
  fail "abort message does not name the function and the stand-in: $out"
finish
