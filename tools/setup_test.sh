#!/usr/bin/env bash
# Tests for tools/setup.sh that change nothing on the machine: argument handling, the message without apt,
# and that a machine able to run this test already has every required package.
set -uo pipefail

setup="$TEST_SRCDIR/$TEST_WORKSPACE/tools/setup.sh"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

out=$("$setup" --bogus 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "unknown argument: want exit 2, got $rc"
[[ "$out" == *"unknown argument '--bogus'"* ]] || fail "unknown argument not named: $out"

# Without apt-get and dpkg on PATH the script must say what to install, not crash.
empty=$(mktemp -d)
out=$(PATH="$empty" /bin/bash "$setup" 2>&1); rc=$?
[[ $rc -eq 1 ]] || fail "no apt: want exit 1, got $rc"
[[ "$out" == *"needs a Debian-based system with apt-get"* ]] || fail "no apt: unclear message: $out"
[[ "$out" == *"libtorch-dev"* ]] || fail "no apt: package list missing: $out"
rmdir "$empty"

# This test only builds on a machine that setup.sh prepared, so a dry run must find nothing missing.
out=$("$setup" --dry-run 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "dry run on a prepared machine: want exit 0, got $rc: $out"
[[ "$out" == *"required packages are installed"* ]] || fail "dry run: unexpected output: $out"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "setup_test: all checks passed"
