#!/usr/bin/env bash
# Tests for tools/setup.sh that change nothing on the machine: argument handling, the release check
# (other releases presented through SETUP_OS_RELEASE), the message without apt, and that a machine
# able to run this test already has every required package.
set -uo pipefail

setup="$TEST_SRCDIR/$TEST_WORKSPACE/tools/setup.sh"
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test setup_test

out=$("$setup" --bogus 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "unknown argument: want exit 2, got $rc"
[[ "$out" == *"unknown argument '--bogus'"* ]] || fail "unknown argument not named: $out"

out=$("$setup" --cudnn-standin 2>&1); rc=$?
[[ $rc -eq 2 && "$out" == *"--cudnn-standin only makes sense with --cuda"* ]] ||
  fail "--cudnn-standin alone: want exit 2 and a reason, got $rc: $out"

out=$("$setup" --help 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"--cuda"*"Debian 13 only"* ]] || fail "--help: $rc: $out"

# The package list, whatever the machine (tools/debian_root.sh keys its roots on it).
out=$("$setup" --list --cuda 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"libtorch-dev|libtorch-cuda-dev"*"nvidia-cuda-toolkit"* ]] || fail "--list --cuda: $rc: $out"
out=$("$setup" --list 2>&1)
[[ "$out" != *"nvidia-cuda-toolkit"* ]] || fail "--list without --cuda lists CUDA packages: $out"

# Without apt-get and dpkg on PATH the script must say what to install, not crash.
empty=$tmp/empty
mkdir "$empty"
out=$(PATH="$empty" /bin/bash "$setup" 2>&1); rc=$?
[[ $rc -eq 1 ]] || fail "no apt: want exit 1, got $rc"
[[ "$out" == *"needs Debian 12, 13 or testing (apt-get and dpkg)"* ]] || fail "no apt: unclear message: $out"
[[ "$out" == *"libtorch-dev"* ]] || fail "no apt: package list missing: $out"

# Other releases, as /etc/os-release would describe them.
release() { printf 'PRETTY_NAME="%s"\nVERSION_ID="%s"\nVERSION_CODENAME=%s\n' "$1" "$2" "$3" >"$tmp/os-release"; }
release "Debian GNU/Linux 11 (bullseye)" 11 bullseye
out=$(SETUP_OS_RELEASE=$tmp/os-release "$setup" --dry-run 2>&1); rc=$?
[[ $rc -eq 1 && "$out" == *"Debian GNU/Linux 11 (bullseye)"*"supported are Debian 12 (bookworm), Debian 13 (trixie) and Debian testing (forky)"* ]] ||
  fail "Debian 11: want exit 1 naming the release and the supported ones, got $rc: $out"
release "Debian GNU/Linux 12 (bookworm)" 12 bookworm
out=$(SETUP_OS_RELEASE=$tmp/os-release "$setup" --cuda --dry-run 2>&1); rc=$?
[[ $rc -eq 1 && "$out" == *"found Debian 12 (bookworm)"*"--cuda needs Debian 13"* ]] ||
  fail "--cuda on Debian 12: want exit 1 and the reason, got $rc: $out"
# Testing and unstable have no VERSION_ID: recognised by their codename, CPU only.
release "Debian GNU/Linux forky/sid" "" forky
out=$(SETUP_OS_RELEASE=$tmp/os-release "$setup" --dry-run 2>&1) || true
[[ "$out" == *"found Debian testing/unstable (forky): LibTorch 2.14, CPU"* ]] ||
  fail "forky: want it recognised, got: $out"
out=$(SETUP_OS_RELEASE=$tmp/os-release "$setup" --cuda --dry-run 2>&1); rc=$?
[[ $rc -eq 1 && "$out" == *"--cuda needs Debian 13"* ]] || fail "--cuda on forky: want exit 1, got $rc: $out"

# This test only builds on a machine that setup.sh prepared, so a dry run must find nothing missing,
# and name the release it runs on.
out=$("$setup" --dry-run 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "dry run on a prepared machine: want exit 0, got $rc: $out"
[[ "$out" == *"found Debian "@(1[23]" ("|"testing/unstable (")*"required packages are installed"* ]] \
  || fail "dry run: unexpected output: $out"

finish
