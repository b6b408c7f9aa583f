#include "dist/ddp/reducer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/backend/describe.h"
#include "dist/ddp/bucket_assignment.h"
#include "dist/ddp/model_fingerprint.h"

namespace dtrain::ddp::internal {

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(
    const std::vector<std::pair<std::string, at::Tensor>>& parameters,
    at::Device control_device, backend::Backend& backend,
    const DdpOptions& options, const std::atomic<bool>& gradient_sync) {
  std::unique_ptr<Reducer> reducer(
      new Reducer(backend, options, gradient_sync, control_device));
  DTRAIN_RETURN_IF_ERROR(reducer->Init(parameters));
  return reducer;
}

Reducer::Reducer(backend::Backend& backend, const DdpOptions& options,
                 const std::atomic<bool>& gradient_sync,
                 at::Device control_device)
    : comm_(DdpCollectives(backend, options.timeout)),
      options_(options),
      gradient_sync_(gradient_sync),
      control_device_(control_device) {}

Reducer::~Reducer() {
  for (Param& p : params_) {
    if (!p.hooked) continue;
    try {
      p.tensor.remove_hook(p.hook);
    } catch (const std::exception&) {
      // The tensor lost its autograd metadata: nothing left to call the hook.
    }
  }
}

absl::Status Reducer::Init(
    const std::vector<std::pair<std::string, at::Tensor>>& parameters) {
  // Buckets over the trainable parameters in reverse registration order.
  std::vector<std::pair<std::string, at::Tensor>> trainable(parameters.rbegin(),
                                                            parameters.rend());
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
  DTRAIN_ASSIGN_OR_RETURN(const std::vector<BucketAssignment> assignment,
                          AssignBuckets(bytes, keys,
                                        {options_.first_bucket_cap_bytes,
                                         options_.bucket_cap_bytes}));

  return base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(),
                          [&] {
                            at::NoGradGuard no_grad;
                            for (const BucketAssignment& a : assignment) {
                              DTRAIN_RETURN_IF_ERROR(AddBucket(a, trainable));
                            }
                            ready_.assign(params_.size(), 0);
                            ResetStep();
                            RegisterHooks();
                            return absl::OkStatus();
                          });
}

absl::Status Reducer::AddBucket(
    const BucketAssignment& a,
    const std::vector<std::pair<std::string, at::Tensor>>& trainable) {
  const int index = static_cast<int>(buckets_.size());
  Bucket b;
  BucketInfo info;
  info.index = index;
  const at::Tensor& first = trainable[a.members.front()].second;
  int64_t numel = 0;
  for (int m : a.members) numel += trainable[m].second.numel();
  b.compressed =
      options_.fp16_compression &&
      (first.scalar_type() == at::kFloat || first.scalar_type() == at::kDouble);
  // What is allreduced lives where the backend reduces it with the fewest
  // copies (shm: shared memory); only CPU buckets, since backends allocate
  // CPU tensors. Every rank buckets the same checked parameters the same
  // way, so every rank makes the same allocations in the same order.
  const at::ScalarType comm_dtype =
      b.compressed ? at::kHalf : first.scalar_type();
  if (first.is_cpu()) {
    absl::StatusOr<at::Tensor> comm =
        comm_.backend().AllocateBuffer(numel, comm_dtype);
    if (!comm.ok()) {
      return absl::Status(
          comm.status().code(),
          absl::StrCat(
              comm_.prefix(), "allocating bucket ", index, " (", numel, " x ",
              c10::toString(comm_dtype),
              ") through the backend failed: ", comm.status().message()));
    }
    b.comm = *std::move(comm);
  } else {
    b.comm = at::zeros({numel}, first.options().dtype(comm_dtype));
  }
  b.comm.set_requires_grad(false);
  b.flat = b.compressed
               ? at::zeros({numel}, first.options().requires_grad(false))
               : b.comm;
  int64_t offset = 0;
  for (int m : a.members) {
    Param p;
    p.name = trainable[m].first;
    p.tensor = trainable[m].second;
    p.bucket = index;
    p.view = b.flat.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes());
    offset += p.tensor.numel();
    b.params.push_back(static_cast<int>(params_.size()));
    info.parameters.push_back(p.name);
    params_.push_back(std::move(p));
  }
  info.numel = numel;
  info.dtype = first.scalar_type();
  info.device = b.flat.device();
  info.bytes = a.bytes;
  info.communicated_bytes = numel * b.comm.element_size();
  b.label = absl::StrCat("bucket ", index);
  b.description = absl::StrCat(
      b.label, " (", backend::FormatBytes(info.bytes), ", ", a.members.size(),
      a.members.size() == 1 ? " parameter " : " parameters ",
      info.parameters.front(),
      a.members.size() == 1 ? "" : ".." + info.parameters.back(),
      b.compressed ? ", float16 on the wire" : "", ")");
  buckets_.push_back(std::move(b));
  bucket_info_.push_back(std::move(info));
  return absl::OkStatus();
}

void Reducer::RegisterHooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const int index = static_cast<int>(i);
    // `this` stays valid: the destructor removes the hooks.
    p.hook = p.tensor.register_hook(
        [this, index](const at::Tensor& grad) { OnGradient(index, grad); });
    p.hooked = true;
  }
}

std::string Reducer::StepName() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StepNameLocked();
}

std::string Reducer::StepNameLocked() const {
  return absl::StrCat("step ", steps_ + 1);
}

absl::Status Reducer::CheckReadyForForward() const {
  std::lock_guard<std::mutex> lock(mu_);
  DTRAIN_RETURN_IF_ERROR(broken_);
  if (step_started_) {
    return absl::FailedPreconditionError(absl::StrCat(
        comm_.prefix(), StepNameLocked(),
        ": a synchronised backward ran since the last SynchronizeGradients; "
        "call SynchronizeGradients after each backward that is not under "
        "NoSync"));
  }
  return absl::OkStatus();
}

void Reducer::RecordBufferBroadcast(absl::Duration elapsed,
                                    const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  buffer_broadcast_ += elapsed;
  if (!status.ok()) broken_ = status;
}

void Reducer::OnGradient(int index, const at::Tensor& grad) {
  if (!gradient_sync_.load()) return;
  const absl::Time start = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return;
  if (!step_started_) {
    step_started_ = true;
    first_hook_ = start;
  }
  Param& p = params_[index];
  if (ready_[index]) {
    // Its bucket may be on the wire already: leave it alone and report.
    if (std::find(twice_.begin(), twice_.end(), p.name) == twice_.end())
      twice_.push_back(p.name);
    return;
  }
  absl::Status s =
      base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
        if (grad.is_sparse()) {
          return absl::UnimplementedError("sparse gradients are not supported");
        }
        at::NoGradGuard no_grad;
        const at::Tensor& existing = p.tensor.grad();
        // The hook runs before AccumulateGrad: the bucket takes what .grad
        // will hold after it, as PyTorch's DDP reads it.
        if (existing.defined()) {
          at::add_out(p.view, existing, grad);
        } else {
          p.view.copy_(grad);
        }
        return absl::OkStatus();
      });
  if (!s.ok()) {
    KeepFirstError(s, absl::StrCat("copying the gradient of ", p.name, " into ",
                                   buckets_[p.bucket].description));
  }
  MarkReady(index, /*in_backward=*/true);
  last_hook_ = absl::Now();
  hooks_ += last_hook_ - start;
}

void Reducer::MarkReady(int index, bool in_backward) {
  ready_[index] = 1;
  if (--buckets_[params_[index].bucket].pending == 0) {
    while (next_launch_ < static_cast<int>(buckets_.size()) &&
           buckets_[next_launch_].pending == 0) {
      Launch(buckets_[next_launch_++], in_backward);
    }
  }
}

void Reducer::Launch(Bucket& b, bool in_backward) {
  backend::Backend& backend = comm_.backend();
  // Before the call: the backend's thread may start it before it returns.
  b.launched_at = last_launch_ = absl::Now();
  b.launched_in_backward = in_backward;
  if (b.compressed) {
    absl::Status s =
        base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
          at::NoGradGuard no_grad;
          // PyTorch's fp16_compress_hook: cast, divide, sum.
          b.comm.copy_(b.flat);
          b.comm.div_(backend.size());
          return absl::OkStatus();
        });
    if (!s.ok()) KeepFirstError(s, absl::StrCat("compressing ", b.description));
    b.work = backend.AllReduce(b.comm, backend::ReduceOp::kSum, b.label);
  } else {
    b.work = backend.AllReduce(b.comm, backend::ReduceOp::kAverage, b.label);
  }
}

void Reducer::KeepFirstError(const absl::Status& s, absl::string_view doing) {
  if (!hook_error_.ok()) return;
  hook_error_ = absl::Status(
      s.code(), absl::StrCat(comm_.prefix(), StepNameLocked(), ": ", doing,
                             " failed: ", s.message()));
}

absl::Status Reducer::Synchronize() {
  const absl::Time start = absl::Now();
  std::unique_lock<std::mutex> lock(mu_);
  DTRAIN_RETURN_IF_ERROR(broken_);
  const std::string step_name = StepNameLocked();

  StepStats stats;
  const std::vector<char> unused = FillInUnused(&stats.unused_parameters);
  if (!step_started_) first_hook_ = last_hook_ = start;

  // Which parameters went unused where, for kError.
  std::shared_ptr<backend::Work> unused_work;
  at::Tensor unused_maps;
  if (options_.unused_parameters == UnusedParameters::kError) {
    absl::Status s = base::GuardTorch(
        absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
          at::Tensor mine =
              at::empty({static_cast<int64_t>(unused.size())}, at::kByte);
          std::copy(unused.begin(), unused.end(), mine.data_ptr<uint8_t>());
          unused_work = comm_.GatherBySum(mine, control_device_, &unused_maps,
                                          "ddp unused parameters");
          return absl::OkStatus();
        });
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
  }
  lock.unlock();

  absl::Duration waited;
  absl::Status failure = WaitForBuckets(step_name, unused_work.get(), &waited);

  lock.lock();
  if (failure.ok()) failure = hook_error_;
  if (failure.ok()) failure = WriteAverages();
  if (!failure.ok()) {
    broken_ = failure;
    return failure;
  }

  // The step is done: statistics, then the usage errors that leave the ranks
  // in step.
  ++steps_;
  stats.step = steps_;
  stats.num_buckets = static_cast<int>(buckets_.size());
  for (const Bucket& b : buckets_) {
    stats.buckets_launched_in_backward += b.launched_in_backward ? 1 : 0;
    stats.bucket_launch_offsets.push_back(b.launched_at - first_hook_);
    if (const absl::optional<backend::WorkTimes> t = b.work->times()) {
      stats.bucket_start_offsets.push_back(t->started - first_hook_);
      stats.bucket_finish_offsets.push_back(t->finished - first_hook_);
    }
  }
  // All or nothing: offsets line up with buckets.
  if (stats.bucket_start_offsets.size() != buckets_.size()) {
    stats.bucket_start_offsets.clear();
    stats.bucket_finish_offsets.clear();
  }
  stats.backward_until_last_gradient = last_hook_ - first_hook_;
  for (const BucketInfo& info : bucket_info_)
    stats.bucket_bytes.push_back(info.bytes);
  stats.backward_until_last_launch =
      buckets_.empty() ? absl::ZeroDuration() : last_launch_ - first_hook_;
  stats.hooks = hooks_;
  stats.exposed_communication = waited;
  stats.buffer_broadcast = buffer_broadcast_;
  const std::vector<std::string> twice = twice_;
  last_works_.clear();
  for (const Bucket& b : buckets_) {
    last_works_.push_back(
        {b.work, absl::StrCat(step_name, ", ", b.description, " allreduce"),
         b.launched_at});
  }
  ResetStep();
  stats.synchronize = absl::Now() - start;
  last_stats_ = std::move(stats);

  if (!twice.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        comm_.prefix(), step_name, ": ", twice.size(),
        " parameter(s) received a gradient more than once before "
        "SynchronizeGradients (",
        absl::StrJoin(twice, ", "),
        "): the later gradients are in .grad locally but were not averaged; "
        "run all but the last backward of a step under NoSync"));
  }
  if (unused_work == nullptr) return absl::OkStatus();
  return CheckUnused(step_name, unused_maps);
}

std::vector<char> Reducer::FillInUnused(std::vector<std::string>* names) {
  // Parameters whose hook did not run contribute .grad or zeros (PyTorch's
  // find_unused_parameters); marking them ready launches every bucket still
  // pending, in order, even when a copy failed, so the ranks stay in step.
  std::vector<char> unused(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    Param& p = params_[i];
    unused[i] = 1;
    names->push_back(p.name);
    absl::Status s =
        base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
          at::NoGradGuard no_grad;
          const at::Tensor& grad = p.tensor.grad();
          if (grad.defined()) {
            p.view.copy_(grad);
          } else {
            p.view.zero_();
          }
          return absl::OkStatus();
        });
    if (!s.ok()) {
      KeepFirstError(s, absl::StrCat("filling in ", p.name, " (no gradient)"));
    }
    MarkReady(static_cast<int>(i), /*in_backward=*/false);
  }
  return unused;
}

absl::Status Reducer::WaitForBuckets(const std::string& step_name,
                                     backend::Work* unused_work,
                                     absl::Duration* waited) {
  absl::Status failure;
  for (Bucket& b : buckets_) {
    const absl::Time wait_start = absl::Now();
    absl::Status w = comm_.Wait(
        *b.work, absl::StrCat(step_name, ", ", b.description, " allreduce"),
        b.launched_at);
    *waited += absl::Now() - wait_start;
    if (!w.ok() && failure.ok()) failure = w;
  }
  if (unused_work != nullptr) {
    const absl::Time wait_start = absl::Now();
    // CheckUnused reads the flags on the host.
    absl::Status w = comm_.WaitForResult(
        *unused_work,
        absl::StrCat(step_name, ", exchange of unused-parameter flags"),
        wait_start);
    *waited += absl::Now() - wait_start;
    if (!w.ok() && failure.ok()) failure = w;
  }
  return failure;
}

absl::Status Reducer::WriteAverages() {
  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        for (Bucket& b : buckets_) {
          if (b.compressed) b.flat.copy_(b.comm);
        }
        for (Param& p : params_) {
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
}

absl::Status Reducer::CheckUnused(const std::string& step_name,
                                  const at::Tensor& unused_maps) const {
  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        const at::Tensor maps = unused_maps.cpu();
        const auto flags = maps.accessor<uint8_t, 2>();
        std::vector<std::string> named;
        for (size_t i = 0; i < params_.size(); ++i) {
          std::vector<int> ranks;
          for (int r = 0; r < comm_.backend().size(); ++r) {
            if (flags[r][static_cast<int64_t>(i)] != 0) ranks.push_back(r);
          }
          if (ranks.empty()) continue;
          named.push_back(
              absl::StrCat(params_[i].name, " (", FormatRanks(ranks), ")"));
        }
        if (named.empty()) return absl::OkStatus();
        return absl::FailedPreconditionError(absl::StrCat(
            comm_.prefix(), step_name, ": ", named.size(),
            named.size() == 1 ? " parameter" : " parameters",
            " received no gradient: ", absl::StrJoin(named, ", "),
            "; they were averaged as zeros (or their accumulated .grad). Use "
            "UnusedParameters::kZero if the model leaves them unused on "
            "purpose"));
      });
}

absl::Status Reducer::ConfirmLastStep() {
  std::vector<Launched> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DTRAIN_RETURN_IF_ERROR(broken_);
    works = last_works_;
  }
  for (const Launched& l : works) {
    absl::Status s = comm_.WaitForResult(*l.work, l.what, l.launched_at);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.ok()) broken_ = s;
      return s;
    }
  }
  return absl::OkStatus();
}

void Reducer::ResetStep() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.work.reset();
    b.launched_in_backward = false;
  }
  next_launch_ = 0;
  step_started_ = false;
  hooks_ = absl::ZeroDuration();
  buffer_broadcast_ = absl::ZeroDuration();
  twice_.clear();
}

}  // namespace dtrain::ddp::internal
