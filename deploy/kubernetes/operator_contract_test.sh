#!/usr/bin/env bash
# The manifests held to PyTorchJob's, Trainer v2's and Volcano's contracts, pods as namespaces
# (operator_contract.py says how). Needs root, iproute2, util-linux and Debian's python3-yaml and
# python3-kubernetes (for /usr/bin/python3); skips with the reason elsewhere.
set -uo pipefail
train=$1
launch=$2
here="${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/kubernetes"
for module in yaml:python3-yaml kubernetes:python3-kubernetes; do
  /usr/bin/python3 -c "import ${module%%:*}" 2>/dev/null \
    || { echo "SKIP: /usr/bin/python3 has no ${module%%:*} module (apt-get install ${module#*:})"; exit 0; }
done
/usr/bin/python3 "$here/operator_contract.py" "$train" "$launch"
rc=$?
[[ $rc -eq 77 ]] && exit 0 # skipped, with the reason printed
exit "$rc"
