#!/usr/bin/env bash
# Builds the weight-file fuzzer (models/state_dict/weights_fuzzer.cc: torch.save's zip and legacy
# formats, safetensors) with clang's libFuzzer, AddressSanitizer and UBSan, and runs it from seeds
# written by Python's torch.save and by the project's writers. Extra arguments go to libFuzzer, e.g.
# -max_total_time=60. Exits non-zero on a finding.
#
#   tools/fuzz/run_weights_fuzzer.sh -max_total_time=60
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

source tools/fuzz/fuzz_lib.sh
out=${FUZZ_OUT:-/tmp/dtrain-fuzz}
mkdir -p "$out/weights-corpus"
fuzz_build "$out/weights_fuzzer" models/state_dict/weights_fuzzer.cc \
  models/state_dict/torch_save.cc models/state_dict/torch_pickle.cc \
  models/state_dict/zip_archive.cc models/state_dict/safetensors.cc base/byte_codec.cc \
  base/crc32.cc -- -lz
cp models/state_dict/testdata/*.pt "$out/weights-corpus/"
# A small safetensors file, laid out by hand as the format's spec says.
python3 - "$out/weights-corpus" <<'PY'
import json, struct, sys
header = json.dumps({"__metadata__": {"format": "pt"},
                     "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
header += b" " * (-len(header) % 8)
open(f"{sys.argv[1]}/seed.safetensors", "wb").write(
    struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, -2.0))
PY
exec "$out/weights_fuzzer" -timeout=10 "$@" "$out/weights-corpus"
