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
    struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, -2.0))# The budgets' cases: an unknown field walked, names sharing one storage
# (memoized, as Python pickles tied weights), a run of one-byte opcodes.
header = json.dumps({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1],
                           "x": [{}, [1, {}]]}}).encode()
open(f"{sys.argv[1]}/unknown_field.safetensors", "wb").write(
    struct.pack("<Q", len(header)) + header + b"\x07")
import zipfile
def pt(name, pickle, storages):
    with zipfile.ZipFile(f"{sys.argv[1]}/{name}", "w") as z:
        z.writestr("archive/data.pkl", pickle)
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data)
        z.writestr("archive/version", "3\n")
def s(text):
    return b"X" + struct.pack("<I", len(text)) + text.encode()
tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n((" + s("storage") +
          b"ctorch\nFloatStorage\n" + s("0") + s("cpu") + b"K\x04tQK\x00K\x02\x85K\x01\x85"
          b"\x89ccollections\nOrderedDict\n)RtR")
pt("shared.pt", b"\x80\x02ccollections\nOrderedDict\n)R(" + s("a") + tensor + b"q\x01" +
   s("b") + b"h\x01" + s("c") + tensor + b"u.", {"0": b"\0" * 16})
pt("lists.pt", b"\x80\x02" + b"]" * 4096 + b".", {})
PY
exec "$out/weights_fuzzer" -timeout=10 "$@" "$out/weights-corpus"
