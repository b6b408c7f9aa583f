#!/usr/bin/env bash
# Builds the TcpStore server fuzzer with clang's libFuzzer, AddressSanitizer and UBSan (from Debian's
# clang and libclang-rt-14-dev), and runs it. Extra arguments go to libFuzzer, e.g. -runs=100000 or
# -max_total_time=60. Prints libFuzzer's statistics; exits non-zero on a finding.
#
#   tools/fuzz/run_store_fuzzer.sh -max_total_time=60
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

source tools/fuzz/fuzz_lib.sh
out=${FUZZ_OUT:-/tmp/dtrain-fuzz}
mkdir -p "$out/corpus"
fuzz_build "$out/tcp_store_server_fuzzer" dist/store/tcp_store_server_fuzzer.cc dist/store/tcp_store.cc \
  dist/store/tcp_store_server.cc dist/store/tcp_store_protocol.cc dist/store/tcp_socket.cc \
  dist/store/store_util.cc base/byte_codec.cc base/posix_io.cc
# Seeds: one well-formed frame per request type, so mutations start past the header checks, and one
# behind the token server's hello.
python3 - "$out/corpus" <<'PY'
import struct, sys
def b(x): return struct.pack('<I', len(x)) + x
def frame(t, payload): return struct.pack('<IBBHI', 0x5653544B, 2, t, 0, len(payload)) + payload
seeds = {
    'ping': frame(1, b''), 'set': frame(2, b(b'k') + b(b'v')),
    'get': frame(2, b(b'k') + b(b'v')) + frame(3, struct.pack('<q', 10) + b(b'k')),
    'add': frame(4, b(b'n') + struct.pack('<q', 1)),
    'cas': frame(5, b(b'k') + b(b'') + b(b'x')),
    'check': frame(6, struct.pack('<I', 2) + b(b'a') + b(b'k')),
    'wait': frame(7, struct.pack('<q', 10) + struct.pack('<I', 1) + b(b'z')),
    'delete': frame(8, b(b'k')), 'numkeys': frame(9, b''),
    # The token server's hello ("fuzz"), then a request.
    'hello-set': frame(1, b(b'fuzz')) + frame(2, b(b'k') + b(b'v')),
}
for name, data in seeds.items():
    open(f'{sys.argv[1]}/seed-{name}', 'wb').write(data)
PY
exec "$out/tcp_store_server_fuzzer" -timeout=10 "$@" "$out/corpus"
