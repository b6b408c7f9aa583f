// What the flight recorder (dist/backend/flight_recorder.h) costs a
// collective: one Issued, Started and Finished, as a backend notes it, with
// 1 to 4 threads noting at once (ranks as threads, or a backend's worker
// beside the NCCL watchdog). Compare with a step's time: a DDP step issues a
// few collectives (its buckets and the stop vote) per tens of milliseconds.
//
//   bazel run //bench:flight_recorder_benchmark

#include "absl/status/status.h"
#include "benchmark/benchmark.h"
#include "dist/backend/flight_recorder.h"

namespace dtrain::backend {
namespace {

FlightRecorder& Shared() {
  static FlightRecorder* r = new FlightRecorder(2048);
  return *r;
}

void BM_NoteACollective(benchmark::State& state) {
  FlightRecorder& r = Shared();
  int64_t seq = 0;
  for (auto _ : state) {
    const int64_t t =
        r.Issued("gloo+shm", 0, state.thread_index(), ++seq, "allreduce",
                 "average, 295626 x float32 = 1.13 MiB, bucket 0");
    r.Started(t);
    r.Finished(t, absl::OkStatus());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NoteACollective)->ThreadRange(1, 4)->UseRealTime();

// Off (DTRAIN_FLIGHT_RECORDER=0): what remains is a branch.
void BM_NoteACollectiveOff(benchmark::State& state) {
  FlightRecorder r(0);
  int64_t seq = 0;
  for (auto _ : state) {
    const int64_t t = r.Issued("gloo+shm", 0, 0, ++seq, "allreduce", "sum");
    r.Started(t);
    r.Finished(t, absl::OkStatus());
  }
}
BENCHMARK(BM_NoteACollectiveOff);

}  // namespace
}  // namespace dtrain::backend
