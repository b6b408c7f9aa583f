#include "dist/backend/ordered_worker.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/describe.h"
#include "dist/backend/flight_recorder.h"

namespace dtrain::backend::internal {

OrderedWorker::OrderedWorker(std::string backend, int rank)
    : backend_(std::move(backend)),
      rank_(rank),
      instance_(FlightRecorder::Process().NextInstance(backend_, rank)),
      thread_([this] { Loop(); }) {}

OrderedWorker::~OrderedWorker() { Shutdown().IgnoreError(); }

absl::Status OrderedWorker::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!joined_) {
    thread_.join();
    joined_ = true;
  }
  return broken();
}

absl::Status OrderedWorker::broken() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void OrderedWorker::Break(const absl::Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = reason;
}

std::shared_ptr<Work> OrderedWorker::Enqueue(const Description& description,
                                             Run run) {
  std::shared_ptr<CompletionWork> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string what = Describe(description, ++seq_);
    work = std::make_shared<CompletionWork>(
        absl::StrCat("[rank ", rank_, "] ", backend_, " ", what));
    const int64_t ticket = FlightRecorder::Process().Issued(
        backend_, instance_, rank_, seq_, description.op, description.details);
    queue_.push_back(Task{std::move(what), std::move(run), work, ticket});
  }
  cv_.notify_one();
  return work;
}

void OrderedWorker::Loop() {
  // Results are written in place, also into tensors that require grad
  // (parameters being averaged), which autograd would refuse.
  at::NoGradGuard no_grad;
  while (true) {
    Task task;
    absl::Status broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      broken = broken_;
    }
    const std::string who =
        absl::StrCat("[rank ", rank_, "] ", backend_, " ", task.what);
    FlightRecorder& recorder = FlightRecorder::Process();
    if (!broken.ok()) {
      const absl::Status not_run(
          broken.code(), absl::StrCat(who, " not run: ", broken.message()));
      recorder.Finished(task.flight_ticket, not_run);
      task.work->Complete(not_run);
      continue;
    }
    const absl::Time start = absl::Now();
    recorder.Started(task.flight_ticket);
    task.work->MarkStarted();
    absl::Status result;
    try {
      result = task.run(who);
    } catch (const c10::Error& e) {
      result = absl::InternalError(e.what_without_backtrace());
    }
    if (!result.ok()) {
      result = absl::Status(
          result.code(), absl::StrCat(who, " failed after ",
                                      FormatElapsed(absl::Now() - start), ": ",
                                      result.message()));
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.ok()) broken_ = result;
    }
    recorder.Finished(task.flight_ticket, result);
    task.work->Complete(result);
  }
}

}  // namespace dtrain::backend::internal
