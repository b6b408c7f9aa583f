#!/usr/bin/env bash
# tools/launch/torchrun.py as docs/LAUNCHERS.md runs it: directly, through its #!/usr/bin/python3
# line (Debian's python3-torch); and started by a Python without torch (a virtualenv, as a pyenv or
# venv `python3` first on PATH is) it stops at once with exit status 2, naming /usr/bin/python3.
# (trainer/torchrun_test.sh runs trainings under it.)
set -uo pipefail

torchrun_py=$1
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/testing/shell_test_lib.sh"
start_test torchrun_py

[[ $(head -1 "$torchrun_py") == "#!/usr/bin/python3" ]] ||
  fail "first line is '$(head -1 "$torchrun_py")', want #!/usr/bin/python3"
[[ -x $torchrun_py ]] || fail "$torchrun_py is not executable"

# 1. A Python without torch: a virtualenv of Debian's Python without its system packages.
if /usr/bin/python3 -m venv --without-pip "$tmp/venv" 2>"$tmp/venv.err"; then
  no_torch=("$tmp/venv/bin/python3")
  fix="Run it with Debian's /usr/bin/python3"
else
  # Without the venv module: Debian's Python without site packages.
  echo "NOTE: no venv module ($(cat "$tmp/venv.err")): /usr/bin/python3 -S instead"
  no_torch=(/usr/bin/python3 -S)
  fix="Install Debian's python3-torch"
fi
if "${no_torch[@]}" -c 'import torch' 2>/dev/null; then
  fail "${no_torch[*]} has torch: nothing to test"
else
  "${no_torch[@]}" "$torchrun_py" --nproc_per_node=2 --no_python /bin/true >"$tmp/no_torch.out" \
    2>"$tmp/no_torch.err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "without torch: exit $rc, want 2: $(cat "$tmp/no_torch.err")"
  grep -qF "cannot import torch (No module named 'torch'). $fix" "$tmp/no_torch.err" ||
    fail "without torch: $(cat "$tmp/no_torch.err")"
  [[ $(wc -l <"$tmp/no_torch.err") -eq 1 ]] ||
    fail "without torch: more than one line (a traceback?): $(cat "$tmp/no_torch.err")"
fi

# 2. Run directly: Debian's torchrun starts (its usage), where python3-torch is installed.
if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  "$torchrun_py" --help >"$tmp/help.out" 2>"$tmp/help.err" ||
    fail "directly: --help failed: $(cat "$tmp/help.err")"
  grep -q "^usage: torchrun.py .*--nproc_per_node" <(tr -s ' \n' ' ' <"$tmp/help.out") ||
    fail "directly: no torchrun usage: $(head -5 "$tmp/help.out")"
else
  echo "NOTE: Debian's python3-torch is not installed: not run directly"
fi

finish
