// libFuzzer target for the TcpStore server: each input is a byte stream sent by
// one hostile client on a fresh connection. After every input a well-behaved
// client must still get correct answers, so a crash, a hang (libFuzzer's
// -timeout) or a corrupted server state all count as findings.
//
// Built and run outside Bazel with clang's fuzzer runtime:
// tools/fuzz/run_store_fuzzer.sh.

#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "dist/store/tcp_socket.h"
#include "dist/store/tcp_store.h"

namespace {

using dtrain::store::TcpStore;
using dtrain::store::TcpStoreOptions;

// Two servers: one open to any client, one that needs a token, so that inputs
// reach both the request handlers and the pending-connection checks (the
// hello, its size cap and the token comparison).
std::shared_ptr<TcpStore>& Server(bool with_token) {
  static auto* servers = [] {
    auto* out = new std::shared_ptr<TcpStore>[2];
    for (int i = 0; i < 2; ++i) {
      TcpStoreOptions o;
      o.host = o.bind_host = "127.0.0.1";
      o.port = 0;
      o.is_server = true;
      if (i == 1) o.token = "fuzz";
      auto s = TcpStore::Create(o);
      if (!s.ok()) std::abort();
      out[i] = *s;
    }
    return out;
  }();
  return servers[with_token ? 1 : 0];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace internal = dtrain::store::internal;
  for (bool with_token : {false, true}) {
    std::shared_ptr<TcpStore>& store = Server(with_token);
    {
      auto fd = internal::ConnectOnce("127.0.0.1", store->port(),
                                      absl::Now() + absl::Seconds(5));
      if (!fd.ok()) std::abort();
      (void)internal::SendAll(fd->get(), reinterpret_cast<const char*>(data),
                              size, absl::Now() + absl::Seconds(1));
      ::shutdown(fd->get(), SHUT_WR);
      char buf[4096];
      (void)internal::RecvAll(fd->get(), buf, sizeof(buf),
                              absl::Now() + absl::Milliseconds(5));
    }
    // The well-behaved client (the store's own pooled connection) still
    // works.
    if (!store->Set("fuzz/probe", "ok").ok()) std::abort();
    auto v = store->Get("fuzz/probe", absl::Seconds(5));
    if (!v.ok() || *v != "ok") std::abort();
  }
  return 0;
}
