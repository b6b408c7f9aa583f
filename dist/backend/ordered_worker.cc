#include "dist/backend/ordered_worker.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/backend/describe.h"

namespace dtrain::backend::internal {

OrderedWorker::OrderedWorker(std::string backend, int rank)
    : backend_(std::move(backend)), rank_(rank), thread_([this] { Loop(); }) {}

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
    queue_.push_back(Task{std::move(what), std::move(run), work});
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
    if (!broken.ok()) {
      task.work->Complete(absl::Status(
          broken.code(), absl::StrCat(who, " not run: ", broken.message())));
      continue;
    }
    const absl::Time start = absl::Now();
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
    task.work->Complete(result);
  }
}

}  // namespace dtrain::backend::internal
