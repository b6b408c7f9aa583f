#!/usr/bin/env bash
# The installed package as a user's project sees it: `cmake --install` of this build into a fresh
# prefix, examples/own_model configured and built out of tree against it with find_package(dtrain),
# then trained with 2 processes under the installed launcher to a falling loss. Run by ctest (CMake
# build only). Usage: consumer_test.sh CMAKE SOURCE_DIR [PREFIX_PATH], PREFIX_PATH with : for ;
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test consumer
cmake=$1
src=$2
prefix_path=${3:-}
prefix_path=${prefix_path//:/;}
build=$(pwd)

"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 \
  || { fail "cmake --install: $(tail -5 "$tmp/install.log")"; finish; }
[[ -f $tmp/prefix/include/dtrain/dist/ddp/ddp.h ]] || fail "no include/dtrain/dist/ddp/ddp.h installed"
[[ -x $tmp/prefix/bin/launch && -x $tmp/prefix/bin/train ]] || fail "launch and train not installed"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
"$cmake" -S "$src/examples/own_model" -B "$tmp/own" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix;$prefix_path" >"$tmp/configure.log" 2>&1 \
  || { fail "configuring examples/own_model: $(tail -20 "$tmp/configure.log")"; finish; }
"$cmake" --build "$tmp/own" >"$tmp/build.log" 2>&1 \
  || { fail "building examples/own_model: $(tail -20 "$tmp/build.log")"; finish; }

port=$(free_port)
timeout 300 "$tmp/prefix/bin/launch" --nproc_per_node=2 --master_port="$port" -- \
  "$tmp/own/train_own_model" --steps=100 --checkpoint_dir="$tmp/ck" >"$tmp/train.out" 2>"$tmp/train.err"
rc=$?
[[ $rc -eq 0 ]] || fail "train_own_model with 2 processes: exit $rc: $(tail -5 "$tmp/train.err")"
mapfile -t losses < <(grep -oE 'step [0-9]+ loss [0-9.]+' "$tmp/train.out" | awk '{print $4}')
echo "losses: ${losses[*]}"
if [[ ${#losses[@]} -ne 5 ]]; then
  fail "want 5 loss lines (steps 20..100, rank 0 only), got: $(cat "$tmp/train.out")"
else
  python3 -c "import sys; sys.exit(0 if ${losses[4]} < 0.7 * ${losses[0]} else 1)" \
    || fail "the loss did not fall: ${losses[*]}"
fi
[[ -f $tmp/ck/checkpoint-000000100.dtc ]] || fail "no checkpoint at step 100: $(ls "$tmp/ck")"
finish
