#include "dist/ddp/ddp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/tensor_text.h"
#include "dist/backend/describe.h"
#include "dist/ddp/bucket_assignment.h"
#include "dist/ddp/model_fingerprint.h"

namespace dtrain::ddp {
namespace {

using backend::FormatBytes;
using backend::FormatElapsed;
using base::DtypeName;

// One line of the cross-rank model check: "parameter fc1.weight [64, 4608]
// float32", with " (frozen)" when it does not require grad and the device
// type when not the CPU.
std::string DescribeEntry(absl::string_view kind, const std::string& name,
                          const at::Tensor& t) {
  std::string s =
      absl::StrCat(kind, " ", name, " [", absl::StrJoin(t.sizes(), ", "), "] ",
                   DtypeName(t.scalar_type()));
  // The device type only: ranks use different CUDA devices.
  if (!t.is_cpu()) {
    absl::StrAppend(&s, " (",
                    c10::DeviceTypeName(t.device().type(), /*lower_case=*/true),
                    ")");
  }
  if (kind == "parameter" && !t.requires_grad()) {
    absl::StrAppend(&s, " (frozen)");
  }
  return s;
}

// Runs `f`, turning a LibTorch (or any standard) exception into kInternal
// with `what` in front of the exception's message.
template <typename F>
absl::Status Guarded(absl::string_view what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, e.what()));
  }
}

struct Param {
  std::string name;
  at::Tensor tensor;
  int bucket = -1;
  // The parameter's slice of its bucket, shaped like the parameter.
  at::Tensor view;
  bool hooked = false;
  unsigned hook = 0;
};

struct Bucket {
  std::vector<int> params;  // Indices into State::params.
  at::Tensor flat;
  // What is allreduced: `flat`, or its float16 copy with fp16 compression.
  at::Tensor comm;
  bool compressed = false;
  std::string label;        // "bucket 3", for the backend's messages.
  std::string description;  // "bucket 3 (2.1 MiB, 14 parameters a..b)".
  // Per step.
  int pending = 0;
  std::shared_ptr<backend::Work> work;
  absl::Time launched_at;
  bool launched_in_backward = false;
};

}  // namespace

struct DistributedDataParallel::State {
  State(backend::Backend& backend, const DdpOptions& options,
        const std::atomic<bool>& gradient_sync)
      : backend(backend),
        options(options),
        gradient_sync(gradient_sync),
        prefix(absl::StrCat("[rank ", backend.rank(), "] ddp: ")) {}

  backend::Backend& backend;
  const DdpOptions& options;
  const std::atomic<bool>& gradient_sync;
  const std::string prefix;

  std::vector<Param> params;  // Bucketed ones, in bucket order.
  std::vector<Bucket> buckets;
  std::vector<at::Tensor> buffers;
  at::Device control_device = at::kCPU;

  std::mutex mu;
  // A communication failure or a broken invariant: returned by every call.
  absl::Status broken;
  int64_t steps = 0;  // Synchronised steps completed.
  bool require_forward_param_sync = true;
  absl::Duration buffer_broadcast;
  // Per synchronised step, reset by SynchronizeGradients.
  std::vector<char> ready;
  int next_launch = 0;
  bool step_started = false;
  absl::Time first_hook;
  absl::Time last_launch;
  absl::Duration hooks;
  absl::Status hook_error;
  std::vector<std::string> twice;

  std::string StepName() const { return absl::StrCat("step ", steps + 1); }

  // The gradient hook of params[index].
  void OnGradient(int index, const at::Tensor& grad) {
    if (!gradient_sync.load()) return;
    const absl::Time start = absl::Now();
    std::lock_guard<std::mutex> lock(mu);
    if (!broken.ok()) return;
    if (!step_started) {
      step_started = true;
      first_hook = start;
    }
    Param& p = params[index];
    if (ready[index]) {
      // Its bucket may be on the wire already: leave it alone and report.
      if (std::find(twice.begin(), twice.end(), p.name) == twice.end())
        twice.push_back(p.name);
      return;
    }
    absl::Status s = Guarded("LibTorch: ", [&] {
      if (grad.is_sparse()) {
        return absl::UnimplementedError("sparse gradients are not supported");
      }
      at::NoGradGuard no_grad;
      const at::Tensor& existing = p.tensor.grad();
      // The hook runs before AccumulateGrad: the bucket takes what .grad will
      // hold after it, as PyTorch's DDP reads it.
      if (existing.defined()) {
        at::add_out(p.view, existing, grad);
      } else {
        p.view.copy_(grad);
      }
      return absl::OkStatus();
    });
    if (!s.ok() && hook_error.ok()) {
      hook_error = absl::Status(
          s.code(),
          absl::StrCat(prefix, StepName(), ": copying the gradient of ", p.name,
                       " into ", buckets[p.bucket].description,
                       " failed: ", s.message()));
    }
    MarkReady(index, /*in_backward=*/true);
    hooks += absl::Now() - start;
  }

  // Requires mu.
  void MarkReady(int index, bool in_backward) {
    ready[index] = 1;
    if (--buckets[params[index].bucket].pending == 0) {
      while (next_launch < static_cast<int>(buckets.size()) &&
             buckets[next_launch].pending == 0) {
        Launch(buckets[next_launch++], in_backward);
      }
    }
  }

  // Requires mu. Always issues the allreduce, so that ranks stay in step even
  // when preparing the bucket failed here.
  void Launch(Bucket& b, bool in_backward) {
    if (b.compressed) {
      absl::Status s = Guarded("LibTorch: ", [&] {
        at::NoGradGuard no_grad;
        // PyTorch's fp16_compress_hook: cast, divide, sum.
        b.comm.copy_(b.flat);
        b.comm.div_(backend.size());
        return absl::OkStatus();
      });
      if (!s.ok() && hook_error.ok()) {
        hook_error = absl::Status(
            s.code(), absl::StrCat(prefix, StepName(), ": compressing ",
                                   b.description, " failed: ", s.message()));
      }
      b.work = backend.AllReduce(b.comm, backend::ReduceOp::kSum, b.label);
    } else {
      b.work = backend.AllReduce(b.comm, backend::ReduceOp::kAverage, b.label);
    }
    b.launched_at = last_launch = absl::Now();
    b.launched_in_backward = in_backward;
  }

  // Waits for `work` within the options' timeout; the error names `what`.
  absl::Status Wait(backend::Work& work, absl::string_view what,
                    absl::Time started) {
    absl::Status s = work.Wait(options.timeout);
    if (s.ok()) return s;
    const std::string elapsed = FormatElapsed(absl::Now() - started);
    if (!work.IsCompleted()) {
      return absl::DeadlineExceededError(absl::StrCat(
          prefix, what, " did not finish within ", elapsed,
          " (DdpOptions::timeout); the backend is still running it"));
    }
    return absl::Status(s.code(), absl::StrCat(prefix, what, " failed after ",
                                               elapsed, ": ", s.message()));
  }

  // Rank r's 1-D `mine` lands in row r of `*rows` ([world, n]) on every rank.
  //
  // This and BroadcastFromRank0 run as sums over zero-filled tensors rather
  // than the backend's AllGather and Broadcast: with Debian's Gloo, one
  // broadcast or allgather (Gloo's algorithm classes) slows every later ring
  // allreduce on the same backend by up to 1000x (1.2 MiB: 1.5 ms before, 0.6 s
  // after; measured here), which would ruin every gradient bucket. Sums are
  // exact here: every element has one nonzero term.
  std::shared_ptr<backend::Work> GatherBySum(const at::Tensor& mine,
                                             at::Tensor* rows,
                                             absl::string_view label) {
    *rows = at::zeros({backend.size(), mine.numel()},
                      mine.options().device(control_device));
    rows->select(0, backend.rank()).copy_(mine.reshape(-1));
    return backend.AllReduce(*rows, backend::ReduceOp::kSum, label);
  }

  // Copies `tensors` from rank 0 to every rank: one collective per dtype and
  // device, all issued before the first wait (see GatherBySum for why sums).
  absl::Status BroadcastFromRank0(const std::vector<at::Tensor>& tensors,
                                  absl::string_view what) {
    struct Group {
      std::vector<at::Tensor> members;
      at::Tensor flat;
      std::shared_ptr<backend::Work> work;
    };
    std::vector<Group> groups;
    const bool root = backend.rank() == 0;
    absl::Status prepared = Guarded(absl::StrCat(prefix, "LibTorch: "), [&] {
      at::NoGradGuard no_grad;
      for (const at::Tensor& t : tensors) {
        auto it = std::find_if(groups.begin(), groups.end(), [&](Group& g) {
          return g.members.front().scalar_type() == t.scalar_type() &&
                 g.members.front().device() == t.device();
        });
        if (it == groups.end()) {
          groups.emplace_back();
          it = groups.end() - 1;
        }
        it->members.push_back(t);
      }
      for (Group& g : groups) {
        // Always a copy: a failed collective must not leave zeros behind.
        std::vector<at::Tensor> flat;
        for (const at::Tensor& t : g.members) flat.push_back(t.reshape(-1));
        g.flat = at::cat(flat);
        // Backends sum no bool: one byte each.
        if (g.flat.scalar_type() == at::kBool) g.flat = g.flat.to(at::kByte);
        if (!root) g.flat.zero_();
      }
      return absl::OkStatus();
    });
    if (!prepared.ok()) return prepared;
    const absl::Time start = absl::Now();
    const std::string label = absl::StrCat("ddp broadcast of ", what);
    for (Group& g : groups) {
      g.work = backend.AllReduce(g.flat, backend::ReduceOp::kSum, label);
    }
    absl::Status result;
    for (Group& g : groups) {
      absl::Status s =
          Wait(*g.work,
               absl::StrCat(
                   "broadcast of ", what, " from rank 0 (", g.members.size(),
                   " x ", DtypeName(g.members[0].scalar_type()), ", ",
                   FormatBytes(g.flat.numel() * g.flat.element_size()), ")"),
               start);
      if (!s.ok() && result.ok()) result = s;
    }
    if (!result.ok() || root) return result;
    return Guarded(absl::StrCat(prefix, "LibTorch: "), [&] {
      at::NoGradGuard no_grad;
      for (Group& g : groups) {
        int64_t offset = 0;
        for (at::Tensor& t : g.members) {
          t.copy_(g.flat.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      }
      return absl::OkStatus();
    });
  }

  // Every rank compares a fingerprint of its entries; when they differ, the
  // ranks exchange the entries themselves to name the first difference.
  absl::Status CheckSameModel(const std::vector<std::string>& entries) {
    const int world = backend.size();
    const uint64_t fingerprint = internal::Fingerprint(entries);
    int64_t signed_fingerprint;
    std::memcpy(&signed_fingerprint, &fingerprint, sizeof(fingerprint));
    const std::string joined = internal::JoinEntries(entries);
    const absl::Time start = absl::Now();
    // Fingerprint and description length in one collective.
    at::Tensor header;
    absl::Status s =
        Wait(*GatherBySum(at::tensor({signed_fingerprint,
                                      static_cast<int64_t>(joined.size())},
                                     at::kLong),
                          &header, "ddp model fingerprints"),
             "exchange of model fingerprints", start);
    if (!s.ok()) return s;
    header = header.cpu();
    const auto h = header.accessor<int64_t, 2>();
    bool same = true;
    int64_t longest = 1;
    for (int r = 0; r < world; ++r) {
      same = same && h[r][0] == signed_fingerprint;
      longest = std::max(longest, h[r][1]);
    }
    if (same) return absl::OkStatus();

    at::Tensor mine = at::zeros({longest}, at::kByte);
    std::memcpy(mine.data_ptr(), joined.data(), joined.size());
    at::Tensor all;
    s = Wait(*GatherBySum(mine, &all, "ddp model descriptions"),
             "exchange of model descriptions", start);
    if (!s.ok()) return s;
    all = all.cpu();
    std::vector<std::vector<std::string>> per_rank;
    for (int r = 0; r < world; ++r) {
      per_rank.push_back(internal::SplitEntries(absl::string_view(
          static_cast<const char*>(all.select(0, r).data_ptr()),
          static_cast<size_t>(h[r][1]))));
    }
    std::string mismatch = internal::DescribeFirstMismatch(per_rank);
    if (mismatch.empty())
      mismatch = "fingerprints differ but descriptions match";
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "the model differs across ranks at ", mismatch,
        " (parameters, then buffers, in registration order; every rank must "
        "build the same model)"));
  }

  // Requires mu. Clears the per-step state for the next synchronised step.
  void ResetStep() {
    std::fill(ready.begin(), ready.end(), 0);
    for (Bucket& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.work.reset();
      b.launched_in_backward = false;
    }
    next_launch = 0;
    step_started = false;
    hooks = absl::ZeroDuration();
    buffer_broadcast = absl::ZeroDuration();
    twice.clear();
  }
};

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.gradient_sync()) {
  ddp_.set_gradient_sync(false);
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.set_gradient_sync(previous_);
}

DistributedDataParallel::DistributedDataParallel(
    std::shared_ptr<torch::nn::Module> module, backend::Backend& backend,
    const DdpOptions& options)
    : module_(std::move(module)),
      backend_(backend),
      options_(options),
      state_(std::make_unique<State>(backend_, options_, gradient_sync_)) {}

DistributedDataParallel::~DistributedDataParallel() {
  for (Param& p : state_->params) {
    if (!p.hooked) continue;
    try {
      p.tensor.remove_hook(p.hook);
    } catch (const std::exception&) {
      // The tensor lost its autograd metadata: nothing left to call the hook.
    }
  }
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>>
DistributedDataParallel::Create(std::shared_ptr<torch::nn::Module> module,
                                backend::Backend& backend,
                                const DdpOptions& options) {
  const std::string prefix = absl::StrCat("[rank ", backend.rank(), "] ddp: ");
  if (module == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "module is null"));
  }
  if (options.first_bucket_cap_bytes <= 0 || options.bucket_cap_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "bucket caps must be positive, got first_bucket_cap_bytes = ",
        options.first_bucket_cap_bytes,
        " and bucket_cap_bytes = ", options.bucket_cap_bytes));
  }
  std::unique_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(std::move(module), backend, options));
  State& state = *ddp->state_;

  // Entries for the model check, and the tensors to broadcast.
  std::vector<std::string> entries;
  std::vector<at::Tensor> all_tensors;
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  absl::Status s = Guarded(absl::StrCat(prefix, "LibTorch: "), [&] {
    for (const auto& item : ddp->module_->named_parameters(/*recurse=*/true)) {
      const at::Tensor& t = item.value();
      if (!t.defined()) continue;
      entries.push_back(DescribeEntry("parameter", item.key(), t));
      all_tensors.push_back(t);
      if (t.requires_grad()) trainable.emplace_back(item.key(), t);
    }
    for (const auto& item : ddp->module_->named_buffers(/*recurse=*/true)) {
      const at::Tensor& t = item.value();
      if (!t.defined()) continue;
      entries.push_back(DescribeEntry("buffer", item.key(), t));
      all_tensors.push_back(t);
      state.buffers.push_back(t);
    }
    if (!all_tensors.empty()) state.control_device = all_tensors[0].device();
    return absl::OkStatus();
  });
  if (!s.ok()) return s;

  s = state.CheckSameModel(entries);
  if (!s.ok()) return s;
  s = state.BroadcastFromRank0(all_tensors, "parameters and buffers");
  if (!s.ok()) return s;

  // Buckets over the trainable parameters in reverse registration order.
  std::reverse(trainable.begin(), trainable.end());
  std::vector<int64_t> bytes;
  std::vector<int> keys;
  std::vector<std::pair<at::ScalarType, at::Device>> key_values;
  for (const auto& [name, t] : trainable) {
    bytes.push_back(t.numel() * static_cast<int64_t>(t.element_size()));
    const std::pair<at::ScalarType, at::Device> key(t.scalar_type(),
                                                    t.device());
    auto it = std::find(key_values.begin(), key_values.end(), key);
    keys.push_back(static_cast<int>(it - key_values.begin()));
    if (it == key_values.end()) key_values.push_back(key);
  }
  absl::StatusOr<std::vector<internal::BucketAssignment>> assignment =
      internal::AssignBuckets(
          bytes, keys,
          {options.first_bucket_cap_bytes, options.bucket_cap_bytes});
  if (!assignment.ok()) return assignment.status();

  s = Guarded(absl::StrCat(prefix, "LibTorch: "), [&] {
    at::NoGradGuard no_grad;
    for (const internal::BucketAssignment& a : *assignment) {
      const int index = static_cast<int>(state.buckets.size());
      Bucket b;
      BucketInfo info;
      info.index = index;
      const at::Tensor& first = trainable[a.members.front()].second;
      int64_t numel = 0;
      for (int m : a.members) numel += trainable[m].second.numel();
      b.flat = at::zeros({numel}, first.options().requires_grad(false));
      b.compressed =
          options.fp16_compression && (first.scalar_type() == at::kFloat ||
                                       first.scalar_type() == at::kDouble);
      b.comm = b.compressed
                   ? at::zeros({numel}, b.flat.options().dtype(at::kHalf))
                   : b.flat;
      int64_t offset = 0;
      for (int m : a.members) {
        Param p;
        p.name = trainable[m].first;
        p.tensor = trainable[m].second;
        p.bucket = index;
        p.view =
            b.flat.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes());
        offset += p.tensor.numel();
        b.params.push_back(static_cast<int>(state.params.size()));
        info.parameters.push_back(p.name);
        state.params.push_back(std::move(p));
      }
      info.numel = numel;
      info.dtype = first.scalar_type();
      info.bytes = a.bytes;
      info.communicated_bytes = numel * b.comm.element_size();
      b.label = absl::StrCat("bucket ", index);
      b.description = absl::StrCat(
          b.label, " (", FormatBytes(info.bytes), ", ", a.members.size(),
          a.members.size() == 1 ? " parameter " : " parameters ",
          info.parameters.front(),
          a.members.size() == 1 ? "" : ".." + info.parameters.back(),
          b.compressed ? ", float16 on the wire" : "", ")");
      state.buckets.push_back(std::move(b));
      ddp->bucket_info_.push_back(std::move(info));
    }
    state.ready.assign(state.params.size(), 0);
    state.ResetStep();
    State* raw = &state;
    for (size_t i = 0; i < state.params.size(); ++i) {
      Param& p = state.params[i];
      const int index = static_cast<int>(i);
      p.hook = p.tensor.register_hook([raw, index](const at::Tensor& grad) {
        raw->OnGradient(index, grad);
      });
      p.hooked = true;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return ddp;
}

absl::Status DistributedDataParallel::PrepareForward() {
  State& state = *state_;
  std::lock_guard<std::mutex> lock(state.mu);
  if (!state.broken.ok()) return state.broken;
  if (state.step_started) {
    return absl::FailedPreconditionError(absl::StrCat(
        state.prefix, state.StepName(),
        ": a synchronised backward ran since the last SynchronizeGradients; "
        "call SynchronizeGradients after each backward that is not under "
        "NoSync"));
  }
  const bool sync_buffers = options_.broadcast_buffers &&
                            state.require_forward_param_sync &&
                            !state.buffers.empty();
  state.require_forward_param_sync =
      at::GradMode::is_enabled() && gradient_sync_.load();
  if (!sync_buffers) return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::Status s = state.BroadcastFromRank0(
      state.buffers, absl::StrCat("buffers before ", state.StepName()));
  state.buffer_broadcast += absl::Now() - start;
  if (!s.ok()) state.broken = s;
  return s;
}

absl::Status DistributedDataParallel::SynchronizeGradients() {
  if (!gradient_sync_.load()) return absl::OkStatus();
  State& state = *state_;
  const absl::Time start = absl::Now();
  std::unique_lock<std::mutex> lock(state.mu);
  if (!state.broken.ok()) return state.broken;
  const std::string step_name = state.StepName();

  // Parameters whose hook did not run contribute .grad or zeros; this also
  // launches every bucket still pending, in order. A LibTorch error here is
  // reported after the waits: the buckets are launched regardless, so that the
  // ranks stay in step.
  StepStats stats;
  std::vector<char> unused(state.params.size(), 0);
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (state.ready[i]) continue;
    Param& p = state.params[i];
    unused[i] = 1;
    stats.unused_parameters.push_back(p.name);
    absl::Status s = Guarded("LibTorch: ", [&] {
      at::NoGradGuard no_grad;
      const at::Tensor& grad = p.tensor.grad();
      if (grad.defined()) {
        p.view.copy_(grad);
      } else {
        p.view.zero_();
      }
      return absl::OkStatus();
    });
    if (!s.ok() && state.hook_error.ok()) {
      state.hook_error = absl::Status(
          s.code(),
          absl::StrCat(state.prefix, step_name, ": filling in ", p.name,
                       " (no gradient) failed: ", s.message()));
    }
    state.MarkReady(static_cast<int>(i), /*in_backward=*/false);
  }
  if (!state.step_started) state.first_hook = start;

  // Which parameters went unused where, for kError.
  std::shared_ptr<backend::Work> unused_work;
  at::Tensor unused_maps;
  if (options_.unused_parameters == UnusedParameters::kError) {
    absl::Status s = Guarded(absl::StrCat(state.prefix, "LibTorch: "), [&] {
      at::Tensor mine =
          at::empty({static_cast<int64_t>(unused.size())}, at::kByte);
      std::copy(unused.begin(), unused.end(), mine.data_ptr<uint8_t>());
      unused_work =
          state.GatherBySum(mine, &unused_maps, "ddp unused parameters");
      return absl::OkStatus();
    });
    if (!s.ok()) {
      state.broken = s;
      return s;
    }
  }
  lock.unlock();

  // Wait in launch order; the first failure wins.
  absl::Duration waited;
  absl::Status failure;
  for (Bucket& b : state.buckets) {
    const absl::Time wait_start = absl::Now();
    absl::Status w = state.Wait(
        *b.work, absl::StrCat(step_name, ", ", b.description, " allreduce"),
        b.launched_at);
    waited += absl::Now() - wait_start;
    if (!w.ok() && failure.ok()) failure = w;
  }
  absl::Status unused_status;
  if (unused_work != nullptr) {
    const absl::Time wait_start = absl::Now();
    unused_status = state.Wait(
        *unused_work,
        absl::StrCat(step_name, ", exchange of unused-parameter flags"),
        wait_start);
    waited += absl::Now() - wait_start;
    if (!unused_status.ok() && failure.ok()) failure = unused_status;
  }

  lock.lock();
  if (failure.ok()) failure = state.hook_error;
  if (!failure.ok()) {
    state.broken = failure;
    return failure;
  }

  // Averages into .grad.
  absl::Status s = Guarded(absl::StrCat(state.prefix, "LibTorch: "), [&] {
    at::NoGradGuard no_grad;
    for (Bucket& b : state.buckets) {
      if (b.compressed) b.flat.copy_(b.comm);
    }
    for (Param& p : state.params) {
      at::Tensor& grad = p.tensor.mutable_grad();
      if (grad.defined()) {
        grad.copy_(p.view);
      } else {
        grad = at::empty_like(p.tensor, at::MemoryFormat::Preserve)
                   .copy_(p.view)
                   .set_requires_grad(false);
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) {
    state.broken = s;
    return s;
  }

  // The step is done: statistics, then the usage errors that leave the ranks
  // in step.
  ++state.steps;
  stats.step = state.steps;
  stats.num_buckets = static_cast<int>(state.buckets.size());
  for (const Bucket& b : state.buckets) {
    stats.buckets_launched_in_backward += b.launched_in_backward ? 1 : 0;
    stats.bucket_launch_offsets.push_back(b.launched_at - state.first_hook);
  }
  for (const BucketInfo& info : bucket_info_)
    stats.bucket_bytes.push_back(info.bytes);
  stats.backward_until_last_launch = state.buckets.empty()
                                         ? absl::ZeroDuration()
                                         : state.last_launch - state.first_hook;
  stats.hooks = state.hooks;
  stats.exposed_communication = waited;
  stats.buffer_broadcast = state.buffer_broadcast;
  std::vector<std::string> twice = state.twice;
  state.ResetStep();
  stats.synchronize = absl::Now() - start;
  last_stats_ = std::move(stats);

  if (!twice.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        state.prefix, step_name, ": ", twice.size(),
        " parameter(s) received a gradient more than once before "
        "SynchronizeGradients (",
        absl::StrJoin(twice, ", "),
        "): the later gradients are in .grad locally but were not averaged; "
        "run all but the last backward of a step under NoSync"));
  }
  if (unused_work != nullptr) {
    s = Guarded(absl::StrCat(state.prefix, "LibTorch: "), [&] {
      const at::Tensor maps = unused_maps.cpu();
      const auto flags = maps.accessor<uint8_t, 2>();
      std::vector<std::string> named;
      for (size_t i = 0; i < state.params.size(); ++i) {
        std::vector<int> ranks;
        for (int r = 0; r < backend_.size(); ++r) {
          if (flags[r][static_cast<int64_t>(i)] != 0) ranks.push_back(r);
        }
        if (ranks.empty()) continue;
        named.push_back(absl::StrCat(state.params[i].name, " (",
                                     internal::FormatRanks(ranks), ")"));
      }
      if (named.empty()) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(
          state.prefix, step_name, ": ", named.size(),
          named.size() == 1 ? " parameter" : " parameters",
          " received no gradient: ", absl::StrJoin(named, ", "),
          "; they were averaged as zeros (or their accumulated .grad). Use "
          "UnusedParameters::kZero if the model leaves them unused on "
          "purpose"));
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace dtrain::ddp
