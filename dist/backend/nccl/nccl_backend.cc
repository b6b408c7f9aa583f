#include "dist/backend/nccl/nccl_backend.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "third_party/cuda_config.h"

#if DTRAIN_HAVE_NCCL

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/backend/collective.h"
#include "dist/backend/work.h"

#endif  // DTRAIN_HAVE_NCCL

namespace dtrain::backend {

#if !DTRAIN_HAVE_NCCL

bool NcclAvailable(std::string* reason) {
  if (reason != nullptr) *reason = DTRAIN_NCCL_MISSING_REASON;
  return false;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(
    const NcclBackendOptions& options) {
  return absl::FailedPreconditionError(absl::StrCat(
      "[rank ", options.rank, "] nccl: this binary was built without NCCL (",
      DTRAIN_NCCL_MISSING_REASON,
      "); rebuild with CUDA_HOME (and NCCL_HOME) pointing at a CUDA "
      "installation with NCCL"));
}

#else  // DTRAIN_HAVE_NCCL

namespace {

using internal::CompletionWork;

constexpr char kName[] = "nccl";
constexpr at::ScalarType kSupported[] = {at::kFloat,    at::kDouble, at::kHalf,
                                         at::kBFloat16, at::kInt,    at::kLong,
                                         at::kByte,     at::kChar};
constexpr absl::Duration kPollInterval = absl::Microseconds(200);

std::string CudaError(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

ncclDataType_t NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    default:
      return ncclInt8;
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

// Non-blocking communicators may answer ncclInProgress: wait until the call
// settled.
ncclResult_t Settle(ncclComm_t comm, ncclResult_t r, absl::Time deadline) {
  while (r == ncclInProgress) {
    if (absl::Now() > deadline) return ncclInProgress;
    absl::SleepFor(kPollInterval);
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
      return ncclInternalError;
  }
  return r;
}

std::string NcclError(ncclComm_t comm, ncclResult_t r) {
  std::string message = ncclGetErrorString(r);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, ": ", last);
  return message;
}

// Makes `device` current for its lifetime and restores the caller's device
// after, so that calls into the backend never move the caller's later CUDA work
// to another device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class NcclBackend : public Backend {
 public:
  NcclBackend(const NcclBackendOptions& options, ncclComm_t comm,
              cudaStream_t stream, cudaEvent_t ready)
      : rank_(options.rank),
        size_(options.world_size),
        device_(options.device),
        timeout_(options.timeout),
        comm_(comm),
        stream_(stream),
        ready_(ready),
        watchdog_([this] { Watch(); }) {}

  ~NcclBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();  // Returns once every pending collective completed,
                       // failed or was aborted.
    DeviceGuard device(device_);
    if (comm_ != nullptr) {
      // A non-blocking communicator finalizes asynchronously: wait (bounded),
      // then destroy; abort when broken or when finalizing does not finish.
      const absl::Time deadline =
          absl::Now() + std::min(timeout_, absl::Seconds(60));
      if (broken_.ok() &&
          Settle(comm_, ncclCommFinalize(comm_), deadline) == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  absl::string_view name() const override { return kName; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::shared_ptr<Work> AllReduce(at::Tensor tensor, ReduceOp op,
                                  absl::string_view label) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllReduce(kName, check_, tensor, op, {label});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Launch(*what, {tensor}, [=](std::vector<at::Tensor>&) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                           NcclType(tensor.scalar_type()), NcclOp(op), comm_,
                           stream_);
    });
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareBroadcast(kName, check_, size_, tensor, root);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Launch(*what, {tensor}, [=](std::vector<at::Tensor>&) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                           NcclType(tensor.scalar_type()), root, comm_,
                           stream_);
    });
  }

  std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                  at::Tensor input) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllGather(kName, check_, size_, outputs, input);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    std::vector<at::Tensor> keep = outputs;
    keep.push_back(input);
    return Launch(
        *what, std::move(keep), [=](std::vector<at::Tensor>& staging) {
          const size_t bytes = input.numel() * input.element_size();
          if (bytes == 0) return ncclSuccess;
          // Staging from the caching allocator, kept alive until the stream is
          // done with it.
          at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
          staging.push_back(flat);
          ncclResult_t r =
              ncclAllGather(input.data_ptr(), flat.data_ptr(), input.numel(),
                            NcclType(input.scalar_type()), comm_, stream_);
          r = Settle(comm_, r, absl::Now() + timeout_);
          for (int i = 0; r == ncclSuccess && i < size_; ++i) {
            if (cudaMemcpyAsync(outputs[i].data_ptr(),
                                static_cast<char*>(flat.data_ptr()) + i * bytes,
                                bytes, cudaMemcpyDeviceToDevice,
                                stream_) != cudaSuccess) {
              r = ncclUnhandledCudaError;
            }
          }
          return r;
        });
  }

  std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                      std::vector<at::Tensor> inputs,
                                      ReduceOp op) override {
    absl::StatusOr<internal::Description> what = internal::PrepareReduceScatter(
        kName, check_, size_, output, inputs, op);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    std::vector<at::Tensor> keep = inputs;
    keep.push_back(output);
    return Launch(
        *what, std::move(keep), [=](std::vector<at::Tensor>& staging) {
          const size_t bytes = output.numel() * output.element_size();
          if (bytes == 0) return ncclSuccess;
          at::Tensor flat =
              at::empty({size_ * output.numel()}, output.options());
          staging.push_back(flat);
          for (int i = 0; i < size_; ++i) {
            if (cudaMemcpyAsync(static_cast<char*>(flat.data_ptr()) + i * bytes,
                                inputs[i].data_ptr(), bytes,
                                cudaMemcpyDeviceToDevice,
                                stream_) != cudaSuccess) {
              return ncclUnhandledCudaError;
            }
          }
          return ncclReduceScatter(
              flat.data_ptr(), output.data_ptr(), output.numel(),
              NcclType(output.scalar_type()), NcclOp(op), comm_, stream_);
        });
  }

  std::shared_ptr<Work> Barrier() override {
    return Launch(
        internal::Description{"barrier", ""}, {},
        [=](std::vector<at::Tensor>& staging) {
          at::Tensor one = at::zeros(
              {1}, at::TensorOptions(at::kFloat).device(at::kCUDA, device_));
          staging.push_back(one);
          return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32,
                               ncclSum, comm_, stream_);
        });
  }

 private:
  struct Pending {
    std::shared_ptr<CompletionWork> work;
    cudaEvent_t done;
    absl::Time start;
    std::string what;
    std::vector<at::Tensor>
        keep_alive;  // Until the stream has finished with them.
  };
  using Enqueue = std::function<ncclResult_t(std::vector<at::Tensor>& staging)>;

  absl::Status Check(absl::string_view op, const at::Tensor& t) const {
    absl::Status s =
        internal::CheckTensor(kName, op, t, /*want_cuda=*/true, kSupported);
    if (s.ok() && t.device().index() != device_) {
      s = absl::InvalidArgumentError(
          absl::StrCat("nccl ", op, ": tensor on ", t.device().str(),
                       ", but rank ", rank_, "'s backend uses cuda:", device_));
    }
    return s;
  }

  const internal::TensorCheck check_ = [this](absl::string_view op,
                                              const at::Tensor& t) {
    return Check(op, t);
  };

  // Numbers the collective, orders it after the default stream's earlier work,
  // and enqueues it on our stream between two events. The lock keeps numbers
  // and enqueue order equal to issue order. Callers see the results once the
  // Work completes (the watchdog saw the second event).
  std::shared_ptr<Work> Launch(const internal::Description& description,
                               std::vector<at::Tensor> keep,
                               const Enqueue& enqueue) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string what = internal::Describe(description, ++seq_);
    const std::string who = absl::StrCat("[rank ", rank_, "] nccl ", what);
    if (!broken_.ok()) {
      return CompletionWork::Failed(absl::Status(
          broken_.code(), absl::StrCat(who, " not run: ", broken_.message())));
    }
    DeviceGuard device(device_);
    cudaError_t ce = cudaEventRecord(ready_, cudaStreamLegacy);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(stream_, ready_, 0);
    if (ce != cudaSuccess) {
      return AbortLocked(
          absl::InternalError(absl::StrCat(who, ": ", CudaError(ce))));
    }
    const absl::Time start = absl::Now();
    ncclResult_t r;
    try {
      r = Settle(comm_, enqueue(keep), start + timeout_);
    } catch (const c10::Error& e) {
      return AbortLocked(absl::InternalError(
          absl::StrCat(who, " failed to start: ", e.what_without_backtrace())));
    }
    if (r != ncclSuccess) {
      // NCCL may still run what it half-enqueued: abort, which also stops it
      // touching our memory.
      return AbortLocked(absl::UnavailableError(
          absl::StrCat(who, " failed to start after ",
                       internal::FormatElapsed(absl::Now() - start), ": ",
                       r == ncclInProgress ? "still in progress at the timeout"
                                           : NcclError(comm_, r))));
    }
    cudaEvent_t done = nullptr;
    ce = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventRecord(done, stream_);
    if (ce != cudaSuccess) {
      if (done != nullptr) cudaEventDestroy(done);
      return AbortLocked(
          absl::InternalError(absl::StrCat(who, ": ", CudaError(ce))));
    }
    auto work = std::make_shared<CompletionWork>(who);
    pending_.push_back(Pending{work, done, start, what, std::move(keep)});
    cv_.notify_all();
    return work;
  }

  // Aborts the communicator, fails every pending collective and returns
  // `status` as a failed Work. Requires mu_.
  std::shared_ptr<Work> AbortLocked(absl::Status status) {
    if (broken_.ok()) broken_ = status;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    for (Pending& q : pending_) {
      q.work->Complete(absl::Status(
          status.code(), absl::StrCat("[rank ", rank_, "] nccl ", q.what,
                                      " not completed: ", status.message())));
      cudaEventDestroy(q.done);
    }
    pending_.clear();
    return CompletionWork::Failed(std::move(status));
  }

  // The watchdog: completes pending work in order; aborts on an asynchronous
  // error or a timeout. It never sleeps holding the lock, so Launch is never
  // held up by a collective in flight.
  void Watch() {
    DeviceGuard device(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (pending_.empty()) {
        if (stop_) return;
        cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
        continue;
      }
      Pending& p = pending_.front();
      const cudaError_t ce = cudaEventQuery(p.done);
      if (ce == cudaSuccess) {
        cudaEventDestroy(p.done);
        p.work->Complete(absl::OkStatus());
        pending_.pop_front();
        continue;
      }
      const std::string who = absl::StrCat("[rank ", rank_, "] nccl ", p.what);
      const std::string elapsed =
          internal::FormatElapsed(absl::Now() - p.start);
      ncclResult_t async = ncclSuccess;
      if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &async);
      absl::Status failure;
      if (ce != cudaErrorNotReady) {
        failure = absl::InternalError(
            absl::StrCat(who, " failed after ", elapsed, ": ", CudaError(ce)));
      } else if (async != ncclSuccess && async != ncclInProgress) {
        failure = absl::UnavailableError(absl::StrCat(
            who, " failed after ", elapsed, ": ", NcclError(comm_, async),
            " (a peer may have died or lost its connection)"));
      } else if (absl::Now() - p.start > timeout_) {
        failure = absl::DeadlineExceededError(
            absl::StrCat(who, " timed out after ", elapsed, " (timeout ",
                         absl::FormatDuration(timeout_),
                         "): a peer never issued it, died, or is stuck; the "
                         "communicator was aborted"));
      }
      if (!failure.ok()) {
        // The first pending collective gets the failure itself, the rest "not
        // completed".
        std::shared_ptr<CompletionWork> first = p.work;
        first->Complete(failure);
        AbortLocked(failure);
        continue;
      }
      lock.unlock();
      absl::SleepFor(kPollInterval);
      lock.lock();
    }
  }

  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;

  std::mutex mu_;
  std::condition_variable cv_;
  ncclComm_t comm_;  // Null once aborted.
  cudaStream_t stream_;
  cudaEvent_t ready_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  absl::Status broken_;
  int64_t seq_ = 0;

  std::thread watchdog_;  // Last: starts once everything above is constructed.
};

}  // namespace

bool NcclAvailable(std::string* reason) {
  if (reason != nullptr) reason->clear();
  return true;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(
    const NcclBackendOptions& options) {
  const std::string who = absl::StrCat("[rank ", options.rank, "] nccl");
  DTRAIN_RETURN_IF_ERROR(internal::CheckMembership(
      who, options.store.get(), options.rank, options.world_size));
  int devices = 0;
  const cudaError_t count = cudaGetDeviceCount(&devices);
  if (count != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no CUDA device is visible (cudaGetDeviceCount: ",
                     count == cudaSuccess ? "0 devices" : CudaError(count),
                     "); use the gloo backend on CPUs"));
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": device cuda:", options.device, " does not exist (",
                     devices, " visible)"));
  }
  DeviceGuard device(options.device);

  // Rank 0 creates the communicator's id; the others read it from the store.
  DTRAIN_ASSIGN_OR_RETURN(
      std::shared_ptr<store::Store> namespaced,
      internal::BackendNamespace(options.store, kName, options.rank));
  store::Store& store = *namespaced;
  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::InternalError(
          absl::StrCat(who, ": ncclGetUniqueId: ", NcclError(nullptr, r)));
    }
    absl::Status s = store.Set(
        "unique_id", absl::string_view(id.internal, sizeof(id.internal)));
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat(who, ": publishing the unique id: ", s.message()));
    }
  } else {
    absl::StatusOr<std::string> v = store.Get("unique_id", options.timeout);
    if (!v.ok()) {
      return absl::Status(
          v.status().code(),
          absl::StrCat(
              who, ": waiting for rank 0's unique id: ", v.status().message()));
    }
    if (v->size() != sizeof(id.internal)) {
      return absl::DataLossError(
          absl::StrCat(who, ": the unique id in the store has ", v->size(),
                       " bytes, not ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, v->data(), sizeof(id.internal));
  }

  const absl::Time start = absl::Now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking =
      0;  // So that a missing peer ends in our timeout, not a hang.
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.world_size, id,
                                          options.rank, &config);
  r = Settle(comm, r, start + options.timeout);
  if (r != ncclSuccess) {
    const std::string detail =
        r == ncclInProgress
            ? absl::StrCat("timed out after ",
                           internal::FormatElapsed(absl::Now() - start))
            : NcclError(comm, r);
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::Status(
        r == ncclInProgress ? absl::StatusCode::kDeadlineExceeded
                            : absl::StatusCode::kUnavailable,
        absl::StrCat(who, ": creating the communicator of ", options.world_size,
                     " ranks on cuda:", options.device, ": ", detail));
  }
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
  cudaError_t ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (ce == cudaSuccess)
    ce = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    ncclCommAbort(comm);
    return absl::InternalError(absl::StrCat(who, ": ", CudaError(ce)));
  }
  return std::unique_ptr<Backend>(
      new NcclBackend(options, comm, stream, ready));
}

#endif  // DTRAIN_HAVE_NCCL

}  // namespace dtrain::backend
