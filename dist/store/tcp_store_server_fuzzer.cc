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

std::shared_ptr<TcpStore>& Server() {
  static auto* server = [] {
    TcpStoreOptions o;
    o.host = o.bind_host = "127.0.0.1";
    o.port = 0;
    o.is_server = true;
    auto s = TcpStore::Create(o);
    if (!s.ok()) std::abort();
    return new std::shared_ptr<TcpStore>(*s);
  }();
  return *server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace internal = dtrain::store::internal;
  std::shared_ptr<TcpStore>& store = Server();
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
  // The well-behaved client (the store's own pooled connection) still works.
  if (!store->Set("fuzz/probe", "ok").ok()) std::abort();
  auto v = store->Get("fuzz/probe", absl::Seconds(5));
  if (!v.ok() || *v != "ok") std::abort();
  return 0;
}
