#!/usr/bin/env bash
# The example hook stays under 50 lines, from its class line to the end of the
# class, so that writing one's own looks as small as it is.
set -uo pipefail

source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test line_count

hook=$1
[[ -s $hook ]] || fail "no example at $hook"
lines=$(awk '/^class [A-Za-z]+ : public ddp::CommHook/ {on = 1} on {n++} on && /^};/ {print n; exit}' "$hook")
[[ -n $lines ]] || fail "$hook has no class deriving from ddp::CommHook"
echo "$hook: the hook is $lines lines"
[[ $lines -lt 50 ]] || fail "the hook in $hook has $lines lines; it must stay under 50"
finish
