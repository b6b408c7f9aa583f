// One thread that runs a backend's collectives in issue order, numbering
// them and completing their Work handles: the asynchrony the CPU backends
// share. A collective that fails breaks the worker: every later one fails at
// once with the first error, as backend.h requires.
//
// Every collective is noted in the process's flight recorder
// (flight_recorder.h) as issued, started and finished.
//
// Thread safety: Enqueue may be called from any thread; the one lock that
// numbers collectives also queues them, so numbers follow issue order.
// Shutdown (or destruction) runs what was queued, then joins the thread.
#ifndef DTRAIN_DIST_BACKEND_ORDERED_WORKER_H_
#define DTRAIN_DIST_BACKEND_ORDERED_WORKER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "dist/backend/backend.h"
#include "dist/backend/collective.h"
#include "dist/backend/work.h"

namespace dtrain::backend::internal {

class OrderedWorker {
 public:
  // `backend` ("shm") and `rank` prefix every message: "[rank 1] shm
  // allreduce #3 (...) failed after 1.2s: <the run's message>".
  OrderedWorker(std::string backend, int rank);
  ~OrderedWorker();
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;

  // Runs a collective on the worker thread; `who` names it for messages.
  // LibTorch exceptions become kInternal.
  using Run = std::function<absl::Status(const std::string& who)>;
  std::shared_ptr<Work> Enqueue(const Description& description, Run run);

  // The first failure, or OK.
  absl::Status broken();

  // Breaks the worker with `reason` unless it is broken already: queued and
  // later collectives fail at once; the one running finishes.
  void Break(const absl::Status& reason);

  // Runs what was queued, stops the thread and returns broken(). Later
  // Enqueue calls must not happen. Idempotent.
  absl::Status Shutdown();

 private:
  struct Task {
    std::string what;
    Run run;
    std::shared_ptr<CompletionWork> work;
    int64_t flight_ticket = -1;  // FlightRecorder::Process()'s.
  };
  void Loop();

  const std::string backend_;
  const int rank_;
  const int instance_;  // FlightRecorder::NextInstance's.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  absl::Status broken_;
  bool stop_ = false;
  bool joined_ = false;
  int64_t seq_ = 0;
  std::thread thread_;  // Last: starts once everything above exists.
};

}  // namespace dtrain::backend::internal

#endif  // DTRAIN_DIST_BACKEND_ORDERED_WORKER_H_
