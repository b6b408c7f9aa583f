#include "dist/ddp/reducer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <exception>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/backend/describe.h"
#include "dist/ddp/bucket_assignment.h"
#include "dist/ddp/hooks/allreduce_hook.h"

namespace dtrain::ddp::internal {
namespace {

// Runs `fn` after AccumulateGrad has added a gradient into .grad, as
// PyTorch's reducer hooks the gradient accumulator.
class AfterAccumulation : public torch::autograd::FunctionPostHook {
 public:
  explicit AfterAccumulation(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// The part of `buffer` from `offset`, shaped `sizes`: the same memory, but
// not an autograd view, so that code which detaches .grad in place (LibTorch
// 1.13's Optimizer::zero_grad) works on it.
at::Tensor Slice(const at::Tensor& buffer, int64_t offset,
                 at::IntArrayRef sizes) {
  at::Tensor t = at::empty({0}, buffer.options());
  t.set_(buffer.storage(), buffer.storage_offset() + offset, sizes,
         c10::contiguous_strides(sizes));
  return t;
}

}  // namespace

bool Reducer::IsView(const at::Tensor& grad, const at::Tensor& view) {
  return grad.defined() && grad.is_alias_of(view) &&
         grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides();
}

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
      hook_(std::make_shared<hooks::AllReduceHook>()),
      gradient_sync_(gradient_sync),
      control_device_(control_device) {}

Reducer::~Reducer() {
  for (Param& p : params_) {
    if (p.hooked) p.grad_accumulator->del_post_hook(p.hook);
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

  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        for (const BucketAssignment& a : assignment) {
          DTRAIN_RETURN_IF_ERROR(AddBucket(a, trainable));
        }
        ready_.assign(params_.size(), 0);
        hook_counts_.assign(params_.size(), 0);
        for (Bucket& b : buckets_) {
          b.grad.num_buckets = static_cast<int>(buckets_.size());
        }
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
  const int64_t world = comm_.world_size();
  const int64_t allocated = options_.pad_buckets_to_world_size
                                ? (numel + world - 1) / world * world
                                : numel;
  // The bucket lives where the backend reduces it with the fewest copies
  // (shm: shared memory); only CPU buckets, since backends allocate CPU
  // tensors. Every rank buckets the same checked parameters the same way,
  // so every rank makes the same allocations in the same order.
  if (first.is_cpu()) {
    absl::StatusOr<at::Tensor> flat =
        comm_.backend().AllocateBuffer(allocated, first.scalar_type());
    if (!flat.ok()) {
      return absl::Status(
          flat.status().code(),
          absl::StrCat(
              comm_.prefix(), "allocating bucket ", index, " (", allocated,
              " x ", c10::toString(first.scalar_type()),
              ") through the backend failed: ", flat.status().message()));
    }
    b.grad.padded = *std::move(flat);
  } else {
    b.grad.padded = at::zeros({allocated}, first.options());
  }
  b.grad.padded.set_requires_grad(false);
  b.grad.buffer =
      allocated == numel ? b.grad.padded : b.grad.padded.narrow(0, 0, numel);
  b.grad.index = index;
  int64_t offset = 0;
  for (int m : a.members) {
    Param p;
    p.name = trainable[m].first;
    p.tensor = trainable[m].second;
    p.bucket = index;
    p.view = Slice(b.grad.buffer, offset, p.tensor.sizes());
    offset += p.tensor.numel();
    if (options_.gradient_as_bucket_view) {
      // PyTorch's rule: an existing .grad moves into the bucket.
      at::Tensor& grad = p.tensor.mutable_grad();
      if (grad.defined()) {
        p.view.copy_(grad);
        grad = p.view;
      }
    }
    b.params.push_back(static_cast<int>(params_.size()));
    b.grad.parameters.push_back(p.tensor);
    b.grad.names.push_back(p.name);
    b.grad.gradients.push_back(p.view);
    info.parameters.push_back(p.name);
    params_.push_back(std::move(p));
  }
  info.numel = numel;
  info.dtype = first.scalar_type();
  info.device = b.grad.buffer.device();
  info.bytes = a.bytes;
  const std::string label = absl::StrCat("bucket ", index);
  b.grad.description = absl::StrCat(
      label, " (", backend::FormatBytes(info.bytes), ", ", a.members.size(),
      a.members.size() == 1 ? " parameter " : " parameters ",
      info.parameters.front(),
      a.members.size() == 1 ? "" : ".." + info.parameters.back(), ")");
  b.comm = std::make_unique<BucketComm>(comm_, label);
  info.communicated_bytes = hook_->CommunicatedBytes(b.grad);
  buckets_.push_back(std::move(b));
  bucket_info_.push_back(std::move(info));
  return absl::OkStatus();
}

absl::Status Reducer::RegisterCommHook(std::shared_ptr<CommHook> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  DTRAIN_RETURN_IF_ERROR(broken_);
  if (hook == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(comm_.prefix(), "the communication hook is null"));
  }
  if (hook_registered_) {
    return absl::FailedPreconditionError(
        absl::StrCat(comm_.prefix(), "a communication hook (", hook_->name(),
                     ") is registered already; register one, once"));
  }
  if (steps_ > 0 || step_started_) {
    return absl::FailedPreconditionError(
        absl::StrCat(comm_.prefix(), "register the communication hook (",
                     hook->name(), ") before the first synchronised backward"));
  }
  std::vector<GradBucket> buckets;
  for (const Bucket& b : buckets_) buckets.push_back(b.grad);
  absl::Status s =
      base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(),
                       [&] { return hook->Setup(buckets, comm_.backend()); });
  if (!s.ok()) {
    // Setup may have issued some of its allocations: the ranks may be out
    // of step.
    broken_ = absl::Status(
        s.code(), absl::StrCat(comm_.prefix(), "setting up the ", hook->name(),
                               " communication hook failed: ", s.message()));
    return broken_;
  }
  hook_ = std::move(hook);
  hook_registered_ = true;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    bucket_info_[i].communicated_bytes =
        hook_->CommunicatedBytes(buckets_[i].grad);
  }
  return absl::OkStatus();
}

void Reducer::RegisterHooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const int index = static_cast<int>(i);
    auto accumulator =
        std::make_shared<decltype(torch::autograd::impl::grad_accumulator(
            p.tensor))>(torch::autograd::impl::grad_accumulator(p.tensor));
    p.grad_accumulator = accumulator->get();
    p.keep_accumulator = accumulator;
    // `this` stays valid: the destructor removes the hooks.
    p.hook =
        p.grad_accumulator->add_post_hook(std::make_unique<AfterAccumulation>(
            [this, index] { OnGradient(index); }));
    p.hooked = true;
  }
}

std::string Reducer::StepName() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StepNameLocked();
}

std::string Reducer::StepNameLocked() const {
  return absl::StrCat("step ", steps_ + 1, step_suffix_);
}

void Reducer::set_divisor(int divisor) {
  std::lock_guard<std::mutex> lock(mu_);
  const int world = comm_.world_size();
  scale_ = divisor <= 0 || divisor == world
               ? 1.0
               : static_cast<double>(world) / divisor;
}

void Reducer::set_launch_in_backward(bool launch) {
  std::lock_guard<std::mutex> lock(mu_);
  launch_in_backward_ = launch;
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

void Reducer::OnGradient(int index) {
  if (!gradient_sync_.load()) return;
  const absl::Time start = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return;
  if (!step_started_) {
    step_started_ = true;
    first_hook_ = start;
    MarkKnownUnusedReady();
  }
  last_hook_ = start;
  Param& p = params_[index];
  if (options_.static_graph) {
    const int count = ++hook_counts_[index];
    // The first step only counts: its buckets go out in Synchronize.
    if (!static_known_) return;
    if (count != expected_hooks_[index]) {
      if (count > expected_hooks_[index] &&
          std::find(graph_changed_.begin(), graph_changed_.end(), p.name) ==
              graph_changed_.end()) {
        graph_changed_.push_back(p.name);
      }
      return;
    }
  } else if (ready_[index]) {
    // Its bucket may be on the wire already: leave it alone and report.
    if (std::find(twice_.begin(), twice_.end(), p.name) == twice_.end())
      twice_.push_back(p.name);
    return;
  }
  CopyGradIntoBucket(p);
  MarkReady(index, /*in_backward=*/true);
  last_hook_ = absl::Now();
  hooks_ += last_hook_ - start;
}

void Reducer::CopyGradIntoBucket(Param& p) {
  absl::Status s =
      base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
        at::NoGradGuard no_grad;
        at::Tensor& grad = p.tensor.mutable_grad();
        if (grad.defined() && grad.is_sparse()) {
          return absl::UnimplementedError("sparse gradients are not supported");
        }
        if (options_.gradient_as_bucket_view) {
          // After the first step .grad is the view and AccumulateGrad added
          // into it in place: nothing to copy.
          if (IsView(grad, p.view)) return absl::OkStatus();
          if (grad.defined()) {
            p.view.copy_(grad);
          } else {
            p.view.zero_();
          }
          grad = p.view;
        } else if (grad.defined()) {
          p.view.copy_(grad);
        } else {
          p.view.zero_();
        }
        return absl::OkStatus();
      });
  if (!s.ok()) {
    KeepFirstError(s, absl::StrCat("copying the gradient of ", p.name, " into ",
                                   buckets_[p.bucket].grad.description));
  }
}

void Reducer::MarkKnownUnusedReady() {
  if (!options_.static_graph || !static_known_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (expected_hooks_[i] != 0 || ready_[i]) continue;
    CopyGradIntoBucket(params_[i]);
    MarkReady(static_cast<int>(i), /*in_backward=*/true);
  }
}

void Reducer::MarkReady(int index, bool in_backward) {
  ready_[index] = 1;
  if (--buckets_[params_[index].bucket].pending == 0 &&
      (launch_in_backward_ || !in_backward)) {
    LaunchReady(in_backward);
  }
}

void Reducer::LaunchReady(bool in_backward) {
  while (next_launch_ < static_cast<int>(buckets_.size()) &&
         buckets_[next_launch_].pending == 0) {
    Launch(buckets_[next_launch_++], in_backward);
  }
}

void Reducer::Launch(Bucket& b, bool in_backward) {
  b.launched_at = last_launch_ = absl::Now();
  b.launched_in_backward = in_backward;
  b.comm->Reset(absl::StrCat(StepNameLocked(), ", ", b.grad.description));
  absl::Status s =
      base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
        at::NoGradGuard no_grad;
        // Join's divide_by_initial_world_size=false: hooks average over
        // the world size, which this turns into the active ranks.
        if (scale_ != 1.0) b.grad.buffer.mul_(scale_);
        b.work = hook_->Launch(b.grad, *b.comm);
        if (b.work == nullptr) {
          return absl::InternalError("the hook returned no work");
        }
        return absl::OkStatus();
      });
  if (!s.ok()) {
    b.work.reset();
    KeepFirstError(
        s, absl::StrCat("the ", hook_->name(), " communication hook on ",
                        b.grad.description));
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
  if (!step_started_) {
    first_hook_ = last_hook_ = start;
    MarkKnownUnusedReady();
  }
  const std::vector<char> unused = FillInUnused(&stats.unused_parameters);
  // Buckets held back by set_launch_in_backward(false).
  LaunchReady(/*in_backward=*/false);

  // Which parameters went unused where, for kError.
  at::Tensor unused_maps;
  absl::StatusOr<std::shared_ptr<backend::Work>> unused_work =
      ExchangeUnused(unused, &unused_maps);
  if (!unused_work.ok()) {
    broken_ = unused_work.status();
    return broken_;
  }
  lock.unlock();

  absl::Duration waited;
  absl::Status failure = WaitForBuckets(step_name, unused_work->get(), &waited);

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
  FillStepStats(&stats);
  stats.hooks = hooks_;
  stats.exposed_communication = waited;
  stats.buffer_broadcast = buffer_broadcast_;
  const std::vector<std::string> twice = twice_;
  const std::vector<std::string> changed = graph_changed_;
  const bool learned_graph = options_.static_graph && !static_known_;
  if (learned_graph) {
    expected_hooks_ = hook_counts_;
    static_known_ = true;
  }
  KeepLaunchedWorks();
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
        "run all but the last backward of a step under NoSync, or set "
        "DdpOptions::static_graph if every step does this the same way"));
  }
  if (!changed.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        comm_.prefix(), step_name,
        ": static_graph is set but the graph "
        "changed since the first step: ",
        changed.size(),
        " parameter(s) received a different number of gradients (",
        absl::StrJoin(changed, ", "),
        "); their buckets were averaged with what they held when the "
        "first step's count was reached. Turn static_graph off for a model "
        "whose graph changes"));
  }
  if (*unused_work == nullptr) return absl::OkStatus();
  return CheckUnused(step_name, unused_maps);
}

void Reducer::KeepLaunchedWorks() {
  last_works_.clear();
  for (const Bucket& b : buckets_) {
    for (const BucketComm::Launched& l : b.comm->launched())
      last_works_.push_back(l);
  }
}

absl::Status Reducer::WaitForBuckets(const std::string& step_name,
                                     backend::Work* unused_work,
                                     absl::Duration* waited) {
  absl::Status failure;
  const absl::Time wait_start = absl::Now();
  // Rounds: every unfinished bucket's work continues once per round, in
  // bucket order, so multi-stage hooks issue their stages alike everywhere.
  std::vector<char> done(buckets_.size(), 0);
  size_t remaining = buckets_.size();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i].work == nullptr) {
      done[i] = 1;
      --remaining;
    }
  }
  while (remaining > 0) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (done[i]) continue;
      Bucket& b = buckets_[i];
      absl::StatusOr<BucketWork::Progress> progress =
          BucketWork::Progress::kDone;
      absl::Status s =
          base::GuardTorch(absl::StatusCode::kInternal, "LibTorch: ", [&] {
            at::NoGradGuard no_grad;
            progress = b.work->Continue();
            return absl::OkStatus();
          });
      if (s.ok()) s = progress.status();
      if (!s.ok() && !absl::StartsWith(s.message(), comm_.prefix())) {
        s = absl::Status(
            s.code(),
            absl::StrCat(comm_.prefix(), step_name, ", ", b.grad.description,
                         ": the ", hook_->name(),
                         " communication hook failed: ", s.message()));
      }
      if (!s.ok() || *progress == BucketWork::Progress::kDone) {
        done[i] = 1;
        --remaining;
      }
      if (!s.ok() && failure.ok()) failure = s;
    }
  }
  if (unused_work != nullptr) {
    // CheckUnused reads the flags on the host.
    absl::Status w = comm_.WaitForResult(
        *unused_work,
        absl::StrCat(step_name, ", exchange of unused-parameter flags"),
        absl::Now());
    if (!w.ok() && failure.ok()) failure = w;
  }
  *waited = absl::Now() - wait_start;
  return failure;
}

absl::Status Reducer::WriteAverages() {
  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        for (Param& p : params_) {
          at::Tensor& grad = p.tensor.mutable_grad();
          if (options_.gradient_as_bucket_view) {
            // CopyGradIntoBucket made .grad the view; the user may have
            // replaced it since.
            if (!IsView(grad, p.view)) grad = p.view;
          } else if (grad.defined()) {
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

absl::Status Reducer::ConfirmLastStep() {
  std::vector<BucketComm::Launched> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DTRAIN_RETURN_IF_ERROR(broken_);
    works = last_works_;
  }
  for (const BucketComm::Launched& l : works) {
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
  std::fill(hook_counts_.begin(), hook_counts_.end(), 0);
  graph_changed_.clear();
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
