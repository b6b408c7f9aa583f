#include "dist/backend/nccl/nccl_backend.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/backend/collective.h"
#include "third_party/cuda_config.h"

#if DTRAIN_HAVE_NCCL

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/cuda_device.h"
#include "base/process_liveness.h"
#include "dist/backend/nccl/peers.h"
#include "dist/backend/nccl/watchdog.h"
#include "dist/backend/work.h"
#include "dist/store/store.h"
#include "third_party/torch_config.h"

#if DTRAIN_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#endif  // DTRAIN_HAVE_NCCL

namespace dtrain::backend {

#if !DTRAIN_HAVE_NCCL

bool NcclAvailable(std::string* reason) {
  if (reason != nullptr) *reason = DTRAIN_NCCL_MISSING_REASON;
  return false;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(
    const Membership& group, const NcclBackendOptions&) {
  // Bad arguments are named as such whatever the build has.
  const std::string who = absl::StrCat("[rank ", group.rank, "] nccl");
  DTRAIN_RETURN_IF_ERROR(group.Check(who));
  return absl::FailedPreconditionError(absl::StrCat(
      who, ": this binary was built without NCCL (", DTRAIN_NCCL_MISSING_REASON,
      "); rebuild with CUDA_HOME (and NCCL_HOME) pointing at a CUDA "
      "installation with NCCL"));
}

#else  // DTRAIN_HAVE_NCCL

namespace {

using internal::CompletionWork;
using nccl_internal::CommOps;
using nccl_internal::Enqueuer;
using nccl_internal::Watchdog;
using nccl_internal::WorkKind;

constexpr char kName[] = "nccl";
constexpr absl::Duration kPollInterval = absl::Microseconds(200);

// "1" in the environment.
bool EnvSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && absl::string_view(v) == "1";
}

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
// settled. For creating and finalizing, where no other thread uses the
// communicator; collectives settle through the watchdog (Enqueuer::Settle).
ncclResult_t Settle(ncclComm_t comm, ncclResult_t r, absl::Time deadline) {
  for (int n = 0; r == ncclInProgress; ++n) {
    if (absl::Now() > deadline) return ncclInProgress;
    nccl_internal::PauseBeforePoll(n, kPollInterval);
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

// Settings NCCL reads from the environment once per process (its first call
// caches them, ~/.nccl.conf included), made before any NCCL call and never
// over the user's own, and the one rank of this process that shares a GPU.
struct ProcessSettings {
  std::mutex mu;
  bool configured = false;
  bool share_gpu = false;
  int sharing_rank = -1;  // The live backend's rank that shares the GPU.
};

ProcessSettings& Settings() {
  static ProcessSettings* settings = new ProcessSettings;
  return *settings;
}

// Held by a backend whose rank shares the GPU (DTRAIN_NCCL_SHARE_GPU=1); gone
// with it, so that a later backend of this process, of any rank (an elastic
// job's next generation), may share it in turn.
class SharedGpuClaim {
 public:
  SharedGpuClaim() = default;
  explicit SharedGpuClaim(bool held) : held_(held) {}
  SharedGpuClaim(SharedGpuClaim&& other) noexcept
      : held_(std::exchange(other.held_, false)) {}
  SharedGpuClaim& operator=(SharedGpuClaim&&) = delete;
  ~SharedGpuClaim() {
    if (!held_) return;
    ProcessSettings& s = Settings();
    std::lock_guard<std::mutex> lock(s.mu);
    s.sharing_rank = -1;
  }

 private:
  bool held_ = false;
};

// kFailedPrecondition when this process set NCCL up otherwise (sharing a GPU
// or not), or when another live backend of this process shares the GPU: ranks
// that share one are processes of their own, each a host of its own to NCCL.
absl::StatusOr<SharedGpuClaim> ConfigureNccl(int rank, bool share_gpu) {
  ProcessSettings& s = Settings();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.configured && share_gpu != s.share_gpu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this process set NCCL up ", s.share_gpu ? "" : "not ",
        "sharing a GPU already, and NCCL reads its settings once per process; "
        "set DTRAIN_NCCL_SHARE_GPU alike for every backend of a process"));
  }
  if (share_gpu && s.sharing_rank >= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", s.sharing_rank,
        " of this process shares the GPU already; ranks that share a GPU "
        "(DTRAIN_NCCL_SHARE_GPU=1) must be processes of their own"));
  }
  if (!s.configured) {
    s.configured = true;
    s.share_gpu = share_gpu;
    // NCCL 2.22+ connects each algorithm in its first collective, which then
    // waits for peers inside an enqueue; connecting while the communicator
    // is created keeps that wait where the timeout bounds it and an abort
    // ends it cleanly.
    ::setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
    // Ranks sharing a GPU (tests on a one-GPU machine): NCCL refuses two
    // ranks of one host on one device, so each process claims a host of its
    // own and the ranks talk over sockets. The process id, not the rank: an
    // elastic job's later generations give the process other ranks.
    if (share_gpu) {
      char host[256] = {};
      if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
      ::setenv("NCCL_HOSTID",
               absl::StrCat(host, "-dtrain-pid-", ::getpid()).c_str(),
               /*overwrite=*/0);
    }
  }
  if (!share_gpu) return SharedGpuClaim();
  s.sharing_rank = rank;
  return SharedGpuClaim(/*held=*/true);
}

// The stream LibTorch queues the calling thread's kernels on for `device`:
// collectives start after the work already there, and Wait makes it wait for
// them. A LibTorch without CUDA cannot make CUDA tensors; there the legacy
// default stream stands in.
cudaStream_t CurrentStream(int device) {
#if DTRAIN_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device))
      .stream();
#else
  (void)device;
  return cudaStreamLegacy;
#endif
}

// The device and the communicator as the watchdog sees them.
class NcclOps : public CommOps {
 public:
  NcclOps(int device, ncclComm_t comm, cudaStream_t stream,
          std::vector<nccl_internal::Peer> peers, nccl_internal::Peer self)
      : device_(device),
        comm_(comm),
        stream_(stream),
        peers_(std::move(peers)),
        self_(std::move(self)) {}

  EventState Query(void* event, std::string* error) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaSuccess) return EventState::kDone;
    if (e == cudaErrorNotReady) return EventState::kPending;
    *error = CudaError(e);
    return EventState::kFailed;
  }

  EventState Settled(std::string* error) override {
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
    if (r == ncclInProgress) return EventState::kPending;
    if (r == ncclSuccess) return EventState::kDone;
    *error = NcclError(comm_, r);
    return EventState::kFailed;
  }

  std::string AsyncError() override {
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
    if (r == ncclSuccess || r == ncclInProgress) return "";
    return NcclError(comm_, r);
  }

  std::string LostPeers() override {
    return nccl_internal::DescribeLostPeers(peers_, self_,
                                            base::ProcessRunning);
  }

  void Abort() override {
    base::CudaDeviceGuard device(device_);
    ncclCommAbort(comm_);
  }

  bool StreamIdle() override {
    return cudaStreamQuery(stream_) != cudaErrorNotReady;
  }

  absl::Status OrderCurrentStreamAfter(void* event) override {
    base::CudaDeviceGuard device(device_);
    const cudaError_t e = cudaStreamWaitEvent(
        CurrentStream(device_), static_cast<cudaEvent_t>(event), 0);
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("nccl: ordering the current stream after a collective: ",
                     CudaError(e)));
  }

  // The backend's device has its context already (the communicator lives
  // there), so this creates nothing; it keeps NCCL's and CUDA's calls from
  // this thread off device 0.
  void BindThread() override { cudaSetDevice(device_); }

 private:
  const int device_;
  const ncclComm_t comm_;
  const cudaStream_t stream_;
  const std::vector<nccl_internal::Peer> peers_;
  const nccl_internal::Peer self_;
};

class NcclBackend : public Backend {
 public:
  NcclBackend(const Membership& group, const NcclBackendOptions& options,
              ncclComm_t comm, cudaStream_t stream, cudaEvent_t ready,
              std::vector<nccl_internal::Peer> peers, SharedGpuClaim claim)
      : claim_(std::move(claim)),
        rank_(group.rank),
        size_(group.world_size),
        device_(options.device),
        timeout_(group.timeout),
        comm_(comm),
        stream_(stream),
        ready_(ready),
        ops_(options.device, comm, stream, std::move(peers),
             nccl_internal::ThisProcess(group.rank)),
        watchdog_(WatchdogOptionsFor(group), &ops_) {}

  ~NcclBackend() override {
    const bool healthy = watchdog_.Shutdown();
    base::CudaDeviceGuard device(device_);
    if (healthy) {
      // A non-blocking communicator finalizes asynchronously: wait (bounded),
      // then destroy; abort when finalizing does not finish.
      const absl::Time deadline =
          absl::Now() + std::min(timeout_, absl::Seconds(60));
      if (Settle(comm_, ncclCommFinalize(comm_), deadline) == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }  // else the watchdog aborted it, which also freed it.
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  absl::string_view name() const override { return kName; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void Abort(const absl::Status& reason) override { watchdog_.Abort(reason); }

  std::shared_ptr<Work> AllReduce(at::Tensor tensor, ReduceOp op,
                                  absl::string_view label) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllReduce(kName, check_, tensor, op, {label});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    auto all_reduce = [=, this](Enqueuer& q) {
      return Call(q, [&] {
        return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(),
                             tensor.numel(), NcclType(tensor.scalar_type()),
                             NcclOp(op), comm_, stream_);
      });
    };
    return Launch(*what, WorkKind::kCollective, {tensor}, all_reduce);
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareBroadcast(kName, check_, size_, tensor, root);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    auto broadcast = [=, this](Enqueuer& q) {
      return Call(q, [&] {
        return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(),
                             tensor.numel(), NcclType(tensor.scalar_type()),
                             root, comm_, stream_);
      });
    };
    return Launch(*what, WorkKind::kCollective, {tensor}, broadcast);
  }

  std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                  at::Tensor input) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllGather(kName, check_, size_, outputs, input);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    std::vector<at::Tensor> keep = outputs;
    keep.push_back(input);
    return Launch(
        *what, WorkKind::kCollective, std::move(keep), [=, this](Enqueuer& q) {
          const size_t bytes = input.numel() * input.element_size();
          if (bytes == 0) return absl::OkStatus();
          if (internal::BackToBack(outputs)) {
            // Straight into the outputs; in place when the input is this
            // rank's own (NCCL's in-place form).
            return Call(q, [&] {
              return ncclAllGather(input.data_ptr(), outputs[0].data_ptr(),
                                   input.numel(), NcclType(input.scalar_type()),
                                   comm_, stream_);
            });
          }
          // Scratch from the caching allocator, kept alive (with the outputs)
          // until the stream is done with it, also after an abort.
          at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
          q.Keep(flat);
          absl::Status s = Call(q, [&] {
            return ncclAllGather(input.data_ptr(), flat.data_ptr(),
                                 input.numel(), NcclType(input.scalar_type()),
                                 comm_, stream_);
          });
          // The copies must follow the gather on the stream: NCCL may still
          // be enqueuing it.
          if (s.ok()) s = q.Settle();
          for (int i = 0; s.ok() && i < size_; ++i) {
            s = CudaCall(
                "copying out of the gather",
                cudaMemcpyAsync(outputs[i].data_ptr(),
                                static_cast<char*>(flat.data_ptr()) + i * bytes,
                                bytes, cudaMemcpyDeviceToDevice, stream_));
          }
          return s;
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
        *what, WorkKind::kCollective, std::move(keep), [=, this](Enqueuer& q) {
          const size_t bytes = output.numel() * output.element_size();
          if (bytes == 0) return absl::OkStatus();
          if (internal::BackToBack(inputs)) {
            // Straight from the inputs (in place when the output is this
            // rank's own input).
            return Call(q, [&] {
              return ncclReduceScatter(
                  inputs[0].data_ptr(), output.data_ptr(), output.numel(),
                  NcclType(output.scalar_type()), NcclOp(op), comm_, stream_);
            });
          }
          at::Tensor flat =
              at::empty({size_ * output.numel()}, output.options());
          q.Keep(flat);
          for (int i = 0; i < size_; ++i) {
            DTRAIN_RETURN_IF_ERROR(CudaCall(
                "copying into the reduce-scatter",
                cudaMemcpyAsync(static_cast<char*>(flat.data_ptr()) + i * bytes,
                                inputs[i].data_ptr(), bytes,
                                cudaMemcpyDeviceToDevice, stream_)));
          }
          return Call(q, [&] {
            return ncclReduceScatter(
                flat.data_ptr(), output.data_ptr(), output.numel(),
                NcclType(output.scalar_type()), NcclOp(op), comm_, stream_);
          });
        });
  }

  std::shared_ptr<Work> Barrier() override {
    return Launch(
        internal::Description{"barrier", ""}, WorkKind::kBarrier, {},
        [=, this](Enqueuer& q) {
          // Its value does not matter: empty, so no kernel fills it.
          at::Tensor one = at::empty(
              {1}, at::TensorOptions(at::kFloat).device(at::kCUDA, device_));
          q.Keep(one);
          return Call(q, [&] {
            return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32,
                                 ncclSum, comm_, stream_);
          });
        });
  }

 private:
  // Enqueues the collective through `q`, giving it any scratch to keep.
  using Body = std::function<absl::Status(Enqueuer& q)>;

  // One NCCL call through the watchdog (never on an aborted communicator);
  // ncclInProgress is fine here, Launch settles it.
  absl::Status Call(Enqueuer& q, const std::function<ncclResult_t()>& call) {
    return q.Call([&] {
      const ncclResult_t r = call();
      if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
      return absl::UnavailableError(NcclError(comm_, r));
    });
  }

  static absl::Status CudaCall(absl::string_view what, cudaError_t e) {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": ", CudaError(e)));
  }

  static nccl_internal::WatchdogOptions WatchdogOptionsFor(
      const Membership& group) {
    nccl_internal::WatchdogOptions w;
    w.rank = group.rank;
    w.timeout = group.timeout;
    w.shutdown_grace = std::min(group.timeout, absl::Seconds(2));
    w.poll_interval = kPollInterval;
    return w;
  }

  absl::Status Check(absl::string_view op, const at::Tensor& t) const {
    absl::Status s = internal::CheckTensor(kName, op, t, /*want_cuda=*/true,
                                           internal::kCollectiveDtypes);
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

  // Orders the collective after the work already queued on the caller's
  // current stream and enqueues it on the backend's stream, followed by the
  // event the watchdog and Wait use. The watchdog serializes issues, so
  // numbers and enqueue order equal issue order.
  std::shared_ptr<Work> Launch(const internal::Description& description,
                               WorkKind kind, std::vector<at::Tensor> keep,
                               const Body& body) {
    return watchdog_.Issue(
        description, kind,
        [&](const std::string& who,
            Enqueuer& q) -> absl::StatusOr<Watchdog::Enqueued> {
          base::CudaDeviceGuard device(device_);
          cudaError_t ce = cudaEventRecord(ready_, CurrentStream(device_));
          if (ce == cudaSuccess) ce = cudaStreamWaitEvent(stream_, ready_, 0);
          if (ce != cudaSuccess) {
            return absl::InternalError(absl::StrCat(who, ": ", CudaError(ce)));
          }
          const absl::Time start = absl::Now();
          // Kept from here on, also if the enqueue fails part way.
          for (at::Tensor& t : keep) q.Keep(std::move(t));
          absl::Status s;
          try {
            s = body(q);
          } catch (const c10::Error& e) {
            return absl::InternalError(absl::StrCat(
                who, " failed to start: ", e.what_without_backtrace()));
          }
          // The enqueuer's own errors name the collective already.
          if (!s.ok() && !absl::StartsWith(s.message(), who)) {
            s = absl::Status(
                s.code(),
                absl::StrCat(who, " failed to start after ",
                             internal::FormatElapsed(absl::Now() - start), ": ",
                             s.message()));
          }
          DTRAIN_RETURN_IF_ERROR(s);
          DTRAIN_RETURN_IF_ERROR(q.Settle());
          cudaEvent_t done = nullptr;
          ce = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
          if (ce == cudaSuccess) ce = cudaEventRecord(done, stream_);
          if (ce != cudaSuccess) {
            if (done != nullptr) cudaEventDestroy(done);
            return absl::InternalError(absl::StrCat(who, ": ", CudaError(ce)));
          }
          Watchdog::Enqueued out;
          out.event = std::shared_ptr<void>(done, [](void* e) {
            cudaEventDestroy(static_cast<cudaEvent_t>(e));
          });
          return out;
        });
  }

  // First: released last, once the communicator is gone.
  SharedGpuClaim claim_;
  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;
  const ncclComm_t comm_;
  const cudaStream_t stream_;
  const cudaEvent_t ready_;  // Reused under the watchdog's issue lock.
  NcclOps ops_;
  Watchdog watchdog_;  // Last: its thread starts once everything else exists.
};

}  // namespace

bool NcclAvailable(std::string* reason) {
  if (reason != nullptr) reason->clear();
  return true;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(
    const Membership& group, const NcclBackendOptions& options) {
  const std::string who = absl::StrCat("[rank ", group.rank, "] nccl");
  DTRAIN_RETURN_IF_ERROR(group.Check(who));
  const absl::StatusOr<int> devices = base::CudaDeviceCount();
  if (!devices.ok() || *devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no CUDA device is visible (",
                     devices.ok() ? "0 devices" : devices.status().message(),
                     "); use the gloo backend on CPUs"));
  }
  if (options.device < 0 || options.device >= *devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": device cuda:", options.device, " does not exist (",
                     *devices, " visible)"));
  }
  // A no-op when the caller made the device current first, as train does.
  base::CudaDeviceGuard device(options.device);
  const bool share_gpu = EnvSet("DTRAIN_NCCL_SHARE_GPU");
  absl::StatusOr<SharedGpuClaim> claim = ConfigureNccl(group.rank, share_gpu);
  if (!claim.ok()) {
    return absl::Status(claim.status().code(),
                        absl::StrCat(who, ": ", claim.status().message()));
  }

  // Rank 0 creates the communicator's id; the others read it from the store.
  DTRAIN_ASSIGN_OR_RETURN(
      std::shared_ptr<store::Store> namespaced,
      internal::BackendNamespace(group.store, kName, group.rank));
  store::Store& store = *namespaced;
  ncclUniqueId id;
  if (group.rank == 0) {
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
    absl::StatusOr<std::string> v = store.Get("unique_id", group.timeout);
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

  // Every rank's host, pid and GPU: errors name a peer that exited, and
  // ranks that would share a GPU are refused by name (NCCL's own refusal
  // names none).
  nccl_internal::Peer self = nccl_internal::ThisProcess(group.rank);
  self.device = options.device;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, options.device) ==
      cudaSuccess) {
    self.bus_id = absl::AsciiStrToLower(bus_id);
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, options.device) == cudaSuccess) {
    const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    self.uuid = absl::StrFormat(
        "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x"
        "%02x",
        u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
        u[11], u[12], u[13], u[14], u[15]);
  }
  if (absl::Status s = store.Set(absl::StrCat("process/", group.rank),
                                 nccl_internal::EncodePeer(self));
      !s.ok()) {
    return absl::Status(
        s.code(),
        absl::StrCat(who, ": publishing this process's record: ", s.message()));
  }
  std::vector<nccl_internal::Peer> peers;
  for (int r = 0; r < group.world_size; ++r) {
    absl::StatusOr<std::string> v =
        store.Get(absl::StrCat("process/", r), group.timeout);
    absl::StatusOr<nccl_internal::Peer> peer =
        v.ok() ? nccl_internal::DecodePeer(r, *v)
               : absl::StatusOr<nccl_internal::Peer>(v.status());
    if (!peer.ok()) {
      return absl::Status(
          peer.status().code(),
          absl::StrCat(who, ": reading rank ", r,
                       "'s process record: ", peer.status().message()));
    }
    peers.push_back(*std::move(peer));
  }
  if (!share_gpu) {
    if (absl::Status s = nccl_internal::CheckDevicesDistinct(peers); !s.ok())
      return absl::Status(s.code(), absl::StrCat(who, ": ", s.message()));
  }

  const absl::Time start = absl::Now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking unless DTRAIN_NCCL_BLOCKING=1: creating the communicator
  // (which connects every peer, see ConfigureNccl) then ends in our
  // timeout rather than a hang when a peer never comes.
  const bool blocking = EnvSet("DTRAIN_NCCL_BLOCKING");
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r =
      ncclCommInitRankConfig(&comm, group.world_size, id, group.rank, &config);
  r = Settle(comm, r, start + group.timeout);
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
        absl::StrCat(who, ": creating the communicator of ", group.world_size,
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
  return std::unique_ptr<Backend>(new NcclBackend(group, options, comm, stream,
                                                  ready, std::move(peers),
                                                  *std::move(claim)));
}

#endif  // DTRAIN_HAVE_NCCL

}  // namespace dtrain::backend
