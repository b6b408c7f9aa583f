#!/usr/bin/env bash
# The example program must stay a complete training in under 100 lines (wc -l: includes and
# comments count), so that it can be read at one sitting.
set -uo pipefail

source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test line_count

example=$1
[[ -s $example ]] || fail "no example at $example"
lines=$(wc -l <"$example")
echo "$example: $lines lines"
[[ $lines -lt 100 ]] || fail "$example has $lines lines; it must stay under 100"
# Complete, not a fragment: it has a main() and trains through DDP.
grep -q '^int main(' "$example" || fail "$example has no main()"
grep -q 'DistributedDataParallel::Create' "$example" || fail "$example does not use DDP"
finish
