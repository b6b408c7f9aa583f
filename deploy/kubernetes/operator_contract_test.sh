#!/usr/bin/env bash
# The manifests held to PyTorchJob's, Trainer v2's and Volcano's contracts, pods as namespaces
# (operator_contract.py says how). Needs root, iproute2, util-linux and Debian's python3-yaml (which
# python3-torch brings) for /usr/bin/python3; skips with the reason elsewhere. The schema check also
# needs python3-kubernetes, and says so where it is missing.
set -uo pipefail
train=$1
launch=$2
here="${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/kubernetes"
/usr/bin/python3 -c 'import yaml' 2>/dev/null \
  || { echo "SKIP: /usr/bin/python3 has no yaml module (apt-get install python3-yaml)"; exit 0; }
/usr/bin/python3 "$here/operator_contract.py" "$train" "$launch"
rc=$?
[[ $rc -eq 77 ]] && exit 0 # skipped, with the reason printed
exit "$rc"
