// Store round-trip latency on loopback and rendezvous time for 2 to 64 local
// ranks (threads). Targets (issue: rendezvous): median Set/Get round trip <= 50
// us; 64 ranks rendezvous in < 1 s.
//
//   bazel run //bench:store_benchmark -- --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "dist/rendezvous/rendezvous.h"
#include "dist/store/prefix_store.h"
#include "dist/store/tcp_store.h"

namespace dtrain::store {
namespace {

std::shared_ptr<TcpStore> Server() {
  TcpStoreOptions o;
  o.host = o.bind_host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  return *TcpStore::Create(o);
}

std::shared_ptr<TcpStore> Client(int port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  return *TcpStore::Create(o);
}

void BM_TcpStoreSetGetRoundTrip(benchmark::State& state) {
  auto server = Server();
  auto client = Client(server->port());
  const std::string value(state.range(0), 'v');
  for (auto _ : state) {
    benchmark::DoNotOptimize(client->Set("key", value));
    benchmark::DoNotOptimize(client->Get("key"));
  }
  state.SetLabel("one Set + one Get");
}
BENCHMARK(BM_TcpStoreSetGetRoundTrip)->Arg(8)->Arg(4096)->UseRealTime();

void BM_TcpStoreAdd(benchmark::State& state) {
  auto server = Server();
  auto client = Client(server->port());
  for (auto _ : state) benchmark::DoNotOptimize(client->Add("counter", 1));
}
BENCHMARK(BM_TcpStoreAdd)->UseRealTime();

// Each iteration: N client threads connect to one server and rendezvous (fresh
// namespace).
void BM_Rendezvous(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto server = Server();
  int generation = 0;
  for (auto _ : state) {
    const std::string prefix = absl::StrCat("gen", generation++);
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        PrefixStore store(prefix, Client(server->port()));
        rendezvous::RendezvousOptions o;
        o.rank = r;
        o.world_size = n;
        benchmark::DoNotOptimize(rendezvous::Rendezvous(store, o));
      });
    }
    for (auto& t : ranks) t.join();
  }
}
BENCHMARK(BM_Rendezvous)
    ->Arg(2)
    ->Arg(8)
    ->Arg(32)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace dtrain::store
