#include "dist/ddp/hooks/powersgd_hook.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"

namespace dtrain::ddp::hooks {

namespace {

// One shape of gradient matrices that are compressed: members are indices
// into GradBucket::gradients, in bucket order.
struct ShapeGroup {
  std::vector<int> members;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rank = 0;  // min(rows, cols, matrix_approximation_rank)
};

}  // namespace

struct PowerSgdHook::Bucket {
  // The plan, from the gradients' shapes (the same on every rank).
  std::vector<int> uncompressed;  // indices into GradBucket::gradients
  int64_t uncompressed_numel = 0;
  std::vector<ShapeGroup> groups;  // in order of first appearance
  int64_t p_numel = 0;
  int64_t q_numel = 0;
  int64_t numel = 0;
  at::TensorOptions options;

  // Setup's buffers (undefined where empty): the uncompressed gradients
  // concatenated, every P and every Q, flat in group order.
  at::Tensor uncompressed_buffer;
  at::Tensor p;
  at::Tensor q;

  // Carried from step to step. has_q: `q` holds the last step's Q (PyTorch:
  // the bucket is in p_memory_dict), so warm start reuses it instead of
  // drawing. has_error: error feedback has begun (in error_dict).
  bool has_q = false;
  bool has_error = false;
  at::Tensor error;
  at::Tensor input_copy;  // this step's gradients plus error, uncompressed
};

namespace {

constexpr char kIterName[] = "powersgd.iter";
constexpr char kRngName[] = "powersgd.rng";

// PyTorch's _should_compress.
bool ShouldCompress(int64_t rows, int64_t cols, int64_t rank, double rate) {
  return static_cast<double>((rows + cols) * rank) * rate <
         static_cast<double>(rows * cols);
}

PowerSgdHook::Bucket Plan(const std::vector<at::Tensor>& gradients,
                          const PowerSgdOptions& o) {
  PowerSgdHook::Bucket b;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const at::Tensor& g = gradients[i];
    // PyTorch views each gradient as tensor.view(tensor.shape[0], -1); a
    // scalar or empty gradient (which PyTorch cannot view so) goes
    // uncompressed.
    const bool matrix = g.dim() > 0 && g.numel() > 0;
    const int64_t rows = matrix ? g.size(0) : 0;
    const int64_t cols = matrix ? g.numel() / rows : 0;
    const int64_t rank =
        std::min({rows, cols, int64_t{o.matrix_approximation_rank}});
    if (!matrix || !ShouldCompress(rows, cols, rank, o.min_compression_rate)) {
      b.uncompressed.push_back(static_cast<int>(i));
      b.uncompressed_numel += g.numel();
      continue;
    }
    auto same = std::find_if(
        b.groups.begin(), b.groups.end(),
        [&](const ShapeGroup& s) { return s.rows == rows && s.cols == cols; });
    if (same == b.groups.end()) {
      b.groups.push_back(ShapeGroup{{}, rows, cols, rank});
      same = b.groups.end() - 1;
    }
    same->members.push_back(static_cast<int>(i));
    b.p_numel += rows * rank;
    b.q_numel += cols * rank;
  }
  return b;
}

// PyTorch's _orthogonalize_gram_schmidt on a batch (b, n, k), in place.
void GramSchmidt(const at::Tensor& m, double epsilon) {
  const int64_t k = m.size(2);
  for (int64_t i = 0; i < k; ++i) {
    at::Tensor col = m.narrow(2, i, 1);
    at::Tensor norm = at::linalg_vector_norm(col, 2, {1}, /*keepdim=*/true);
    // With epsilon 0 a zero column divides by zero (NaN), as in PyTorch.
    col.div_(epsilon == 0 ? norm : norm.add(epsilon));
    if (i + 1 < k) {
      at::Tensor rest = m.narrow(2, i + 1, k - i - 1);
      rest.sub_(at::sum(col * rest, {1}, /*keepdim=*/true) * col);
    }
  }
}

// PyTorch's _orthogonalize: Gram-Schmidt for rank <= 2 and 16-bit floats
// (QR has no half-precision kernels), else the Q of a reduced QR.
void Orthogonalize(const at::Tensor& m, double epsilon) {
  const at::ScalarType t = m.scalar_type();
  if (m.size(2) <= 2 || t == at::kHalf || t == at::kBFloat16) {
    GramSchmidt(m, epsilon);
    return;
  }
  at::Tensor q;
  std::tie(q, std::ignore) = at::linalg_qr(m);
  m.copy_(q);
}

// One step's matrices of one bucket: each (batch, rows, cols) with its P
// (batch, rows, rank) and Q (batch, cols, rank), views of the bucket's flat P
// and Q. `m` is a view of the gradient, or a stack of a group's gradients
// (batch_tensors_with_same_shape) to be copied back.
struct Matrices {
  at::Tensor m;
  at::Tensor p;
  at::Tensor q;
  const ShapeGroup* stacked_group = nullptr;
};

std::vector<Matrices> ViewMatrices(const PowerSgdHook::Bucket& b,
                                   const GradBucket& bucket, bool batch) {
  std::vector<Matrices> out;
  int64_t p_at = 0;
  int64_t q_at = 0;
  auto add = [&](at::Tensor m, const ShapeGroup& g, int64_t n,
                 const ShapeGroup* stacked) {
    Matrices x;
    x.m = std::move(m);
    x.p = b.p.narrow(0, p_at, n * g.rows * g.rank).view({n, g.rows, g.rank});
    x.q = b.q.narrow(0, q_at, n * g.cols * g.rank).view({n, g.cols, g.rank});
    x.stacked_group = stacked;
    p_at += n * g.rows * g.rank;
    q_at += n * g.cols * g.rank;
    out.push_back(std::move(x));
  };
  for (const ShapeGroup& g : b.groups) {
    const int64_t n = static_cast<int64_t>(g.members.size());
    if (batch && n > 1) {
      std::vector<at::Tensor> stack;
      for (int i : g.members)
        stack.push_back(bucket.gradients[i].view({g.rows, g.cols}));
      add(at::stack(stack), g, n, &g);
    } else {
      for (int i : g.members)
        add(bucket.gradients[i].view({1, g.rows, g.cols}), g, 1, nullptr);
    }
  }
  return out;
}

absl::Status Guard(absl::string_view doing, const std::function<void()>& f) {
  return base::GuardTorch(absl::StatusCode::kInternal,
                          absl::StrCat(doing, ": LibTorch: "), [&] {
                            at::NoGradGuard no_grad;
                            f();
                            return absl::OkStatus();
                          });
}

// A plain step: the average, divided first (PyTorch's _allreduce_fut).
class PlainWork : public BucketWork {
 public:
  PlainWork(BucketComm& comm, std::shared_ptr<backend::Work> work,
            absl::Status local)
      : comm_(comm), work_(std::move(work)), local_(std::move(local)) {}
  absl::StatusOr<Progress> Continue() override {
    DTRAIN_RETURN_IF_ERROR(comm_.Wait(*work_, "allreduce"));
    DTRAIN_RETURN_IF_ERROR(local_);
    return Progress::kDone;
  }

 private:
  BucketComm& comm_;
  std::shared_ptr<backend::Work> work_;
  absl::Status local_;
};

// A compressed step of one bucket (see the header for the stages). A local
// failure skips the arithmetic that follows but not the collectives, so the
// other ranks are not left waiting; it is reported at the end.
class PowerSgdWork : public BucketWork {
 public:
  PowerSgdWork(BucketComm& comm, GradBucket& bucket, PowerSgdHook::Bucket& b,
               const PowerSgdOptions& options, int64_t* iter)
      : comm_(comm), bucket_(bucket), b_(b), options_(options), iter_(iter) {}

  // Launch's arithmetic: error feedback in, uncompressed gradients packed,
  // Q drawn (when `seed` is set) or reused, P = M Q.
  void Start(std::optional<int64_t> seed) {
    local_ = Guard("preparing P", [&] {
      if (options_.use_error_feedback) {
        if (b_.has_error) {
          bucket_.buffer.add_(b_.error);
        } else {
          b_.error = at::zeros({b_.numel}, b_.options);
          b_.has_error = true;
        }
        if (!b_.input_copy.defined()) b_.input_copy = at::empty_like(b_.error);
        b_.input_copy.copy_(bucket_.buffer);
      }
      int64_t offset = 0;
      for (int i : b_.uncompressed) {
        const at::Tensor& g = bucket_.gradients[i];
        b_.uncompressed_buffer.narrow(0, offset, g.numel())
            .copy_(g.reshape(-1));
        offset += g.numel();
      }
      matrices_ =
          ViewMatrices(b_, bucket_, options_.batch_tensors_with_same_shape);
      if (!seed.has_value()) {
        for (Matrices& x : matrices_)
          Orthogonalize(x.q, options_.orthogonalization_epsilon);
      } else {
        // A fresh generator per draw, as torch.manual_seed in PyTorch's
        // fork_rng: the global generator is left alone.
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(*seed);
        for (Matrices& x : matrices_) {
          x.q.copy_(at::randn(x.q.sizes(), gen,
                              at::TensorOptions().dtype(b_.options.dtype())));
          Orthogonalize(x.q, options_.orthogonalization_epsilon);
        }
      }
      for (Matrices& x : matrices_) at::bmm_out(x.p, x.m, x.q);
    });
    if (b_.uncompressed_numel > 0) {
      uncompressed_work_ =
          comm_.AllReduce(b_.uncompressed_buffer, backend::ReduceOp::kSum,
                          "uncompressed allreduce");
    }
    if (b_.p_numel > 0) {
      p_work_ = comm_.AllReduce(b_.p, backend::ReduceOp::kSum, "P allreduce");
    }
  }

  absl::StatusOr<Progress> Continue() override {
    if (q_work_ == nullptr) {
      if (uncompressed_work_ != nullptr) {
        DTRAIN_RETURN_IF_ERROR(
            comm_.Wait(*uncompressed_work_, "uncompressed allreduce"));
      }
      if (p_work_ != nullptr) {
        DTRAIN_RETURN_IF_ERROR(comm_.Wait(*p_work_, "P allreduce"));
      }
      if (local_.ok()) local_ = Guard("computing Q", [&] { ComputeQ(); });
      if (b_.q_numel == 0) return Finish();
      q_work_ = comm_.AllReduce(b_.q, backend::ReduceOp::kSum, "Q allreduce");
      return Progress::kMore;
    }
    DTRAIN_RETURN_IF_ERROR(comm_.Wait(*q_work_, "Q allreduce"));
    if (local_.ok()) local_ = Guard("decompressing", [&] { Decompress(); });
    return Finish();
  }

 private:
  // The uncompressed averages back into the bucket; P orthogonalized;
  // Q = M^T P.
  void ComputeQ() {
    if (b_.uncompressed_numel > 0) {
      b_.uncompressed_buffer.div_(comm_.world_size());
      int64_t offset = 0;
      for (int i : b_.uncompressed) {
        at::Tensor& g = bucket_.gradients[i];
        g.copy_(b_.uncompressed_buffer.narrow(0, offset, g.numel()).view_as(g));
        offset += g.numel();
      }
    }
    for (Matrices& x : matrices_) {
      Orthogonalize(x.p, options_.orthogonalization_epsilon);
    }
    for (Matrices& x : matrices_) at::bmm_out(x.q, x.m.transpose(1, 2), x.p);
  }

  // M = P Q^T with Q averaged.
  void Decompress() {
    b_.q.div_(comm_.world_size());
    for (Matrices& x : matrices_) {
      at::bmm_out(x.m, x.p, x.q.transpose(1, 2));
      if (x.stacked_group == nullptr) continue;
      const ShapeGroup& g = *x.stacked_group;
      for (size_t k = 0; k < g.members.size(); ++k) {
        bucket_.gradients[g.members[k]]
            .view({g.rows, g.cols})
            .copy_(x.m[static_cast<int64_t>(k)]);
      }
    }
  }

  absl::StatusOr<Progress> Finish() {
    if (local_.ok() && options_.use_error_feedback) {
      local_ = Guard("keeping the error", [&] {
        at::sub_out(b_.error, b_.input_copy, bucket_.buffer);
      });
    }
    if (bucket_.is_last()) ++*iter_;
    DTRAIN_RETURN_IF_ERROR(local_);
    return Progress::kDone;
  }

  BucketComm& comm_;
  GradBucket& bucket_;
  PowerSgdHook::Bucket& b_;
  const PowerSgdOptions& options_;
  int64_t* iter_;
  absl::Status local_;
  std::vector<Matrices> matrices_;
  std::shared_ptr<backend::Work> uncompressed_work_;
  std::shared_ptr<backend::Work> p_work_;
  std::shared_ptr<backend::Work> q_work_;
};

std::string BucketEntry(int index, absl::string_view what) {
  return absl::StrCat("powersgd.bucket", index, ".", what);
}

}  // namespace

absl::Status CheckPowerSgdOptions(const PowerSgdOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("PowerSGD options: ", what));
  };
  if (o.matrix_approximation_rank < 1) {
    return bad(absl::StrCat("matrix_approximation_rank is ",
                            o.matrix_approximation_rank,
                            "; it must be at least 1"));
  }
  if (o.start_powersgd_iter < 0) {
    return bad(absl::StrCat("start_powersgd_iter is ", o.start_powersgd_iter,
                            "; it must be at least 0"));
  }
  if ((o.use_error_feedback || o.warm_start) && o.start_powersgd_iter <= 1) {
    return bad(absl::StrCat(
        "start_powersgd_iter is ", o.start_powersgd_iter,
        "; with use_error_feedback or warm_start it must be at least 2, as "
        "PyTorch's PowerSGDState requires"));
  }
  if (!std::isfinite(o.min_compression_rate) || o.min_compression_rate < 0) {
    return bad(absl::StrCat("min_compression_rate is ", o.min_compression_rate,
                            "; it must be finite and at least 0"));
  }
  if (!std::isfinite(o.orthogonalization_epsilon) ||
      o.orthogonalization_epsilon < 0) {
    return bad(absl::StrCat("orthogonalization_epsilon is ",
                            o.orthogonalization_epsilon,
                            "; it must be finite and at least 0"));
  }
  if (o.random_seed < 0 || o.random_seed > int64_t{0xFFFFFFFF}) {
    return bad(absl::StrCat("random_seed is ", o.random_seed,
                            "; numpy's seeds are 0 to 2^32 - 1"));
  }
  return absl::OkStatus();
}

PowerSgdHook::PowerSgdHook(const PowerSgdOptions& options)
    : options_(options), rng_(static_cast<uint32_t>(options.random_seed)) {}

PowerSgdHook::~PowerSgdHook() = default;

absl::Status PowerSgdHook::Setup(const std::vector<GradBucket>& buckets,
                                 backend::Backend& backend) {
  DTRAIN_RETURN_IF_ERROR(CheckPowerSgdOptions(options_));
  rng_ = NumpyRandomState(static_cast<uint32_t>(options_.random_seed));
  iter_ = 0;
  buckets_.clear();
  set_up_ = false;
  for (const GradBucket& gb : buckets) {
    auto b = std::make_unique<Bucket>(Plan(gb.gradients, options_));
    b->numel = gb.buffer.numel();
    b->options = gb.buffer.options();
    // Every rank plans the same sizes, so makes the same allocations in the
    // same order (a collective on the shm backend).
    auto allocate = [&](int64_t numel, at::Tensor* out) -> absl::Status {
      if (numel == 0) return absl::OkStatus();
      if (gb.buffer.is_cpu()) {
        DTRAIN_ASSIGN_OR_RETURN(
            *out, backend.AllocateBuffer(numel, gb.buffer.scalar_type()));
      } else {
        *out = at::zeros({numel}, b->options);
      }
      return absl::OkStatus();
    };
    DTRAIN_RETURN_IF_ERROR(
        allocate(b->uncompressed_numel, &b->uncompressed_buffer));
    DTRAIN_RETURN_IF_ERROR(allocate(b->p_numel, &b->p));
    DTRAIN_RETURN_IF_ERROR(allocate(b->q_numel, &b->q));
    buckets_.push_back(std::move(b));
  }
  set_up_ = true;
  return absl::OkStatus();
}

int64_t PowerSgdHook::CommunicatedBytes(const GradBucket& bucket) const {
  const Bucket b = Plan(bucket.gradients, options_);
  return (b.uncompressed_numel + b.p_numel + b.q_numel) *
         static_cast<int64_t>(bucket.buffer.element_size());
}

std::unique_ptr<BucketWork> PowerSgdHook::Launch(GradBucket& bucket,
                                                 BucketComm& comm) {
  if (iter_ < options_.start_powersgd_iter) {
    if (bucket.is_last()) ++iter_;
    absl::Status local = Guard("dividing by the world size",
                               [&] { bucket.buffer.div_(comm.world_size()); });
    return std::make_unique<PlainWork>(
        comm,
        comm.AllReduce(bucket.buffer, backend::ReduceOp::kSum, "allreduce"),
        std::move(local));
  }
  Bucket& b = *buckets_.at(bucket.index);
  // Drawn before any arithmetic that could fail, so that every rank's
  // random state moves alike.
  std::optional<int64_t> seed;
  if (!options_.warm_start || !b.has_q) {
    seed = rng_.RandInt(1'000'000'000);
    b.has_q = true;
  }
  auto work = std::make_unique<PowerSgdWork>(comm, bucket, b, options_, &iter_);
  work->Start(seed);
  return work;
}

std::vector<std::pair<std::string, at::Tensor>> PowerSgdHook::State() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back(kIterName, at::scalar_tensor(iter_, at::kLong));
  at::Tensor rng = at::empty({NumpyRandomState::kWords + 1}, at::kLong);
  int64_t* words = rng.data_ptr<int64_t>();
  std::copy(rng_.key().begin(), rng_.key().end(), words);
  words[NumpyRandomState::kWords] = rng_.position();
  out.emplace_back(kRngName, rng);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = *buckets_[i];
    // Without warm start Q is drawn afresh every step: nothing to keep.
    if (options_.warm_start && b.has_q) {
      out.emplace_back(BucketEntry(static_cast<int>(i), "q"),
                       b.q.defined()
                           ? b.q.cpu().clone()
                           : at::empty({0}, b.options.device(at::kCPU)));
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> PowerSgdHook::RankState()
    const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = *buckets_[i];
    if (b.has_error) {
      out.emplace_back(BucketEntry(static_cast<int>(i), "error"),
                       b.error.cpu().clone());
    }
  }
  return out;
}

absl::Status PowerSgdHook::TakeBucketEntry(const std::string& name,
                                           const at::Tensor& t,
                                           std::vector<at::Tensor>& errors,
                                           std::vector<at::Tensor>& qs) const {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("PowerSGD state: ", name, " ", what));
  };
  absl::string_view rest = name;
  int index = -1;
  absl::string_view what;
  if (absl::ConsumePrefix(&rest, "powersgd.bucket")) {
    const size_t dot = rest.find('.');
    if (dot != absl::string_view::npos &&
        absl::SimpleAtoi(rest.substr(0, dot), &index)) {
      what = rest.substr(dot + 1);
    }
  }
  if (what != "error" && what != "q") {
    return bad("is not an entry of the PowerSGD hook's state");
  }
  if (index < 0 || index >= static_cast<int>(buckets_.size())) {
    return bad(absl::StrCat("names a bucket this model does not have (",
                            buckets_.size(), " buckets)"));
  }
  const Bucket& b = *buckets_[index];
  const bool is_error = what == "error";
  if (is_error && !options_.use_error_feedback) {
    return bad("is there but use_error_feedback is off");
  }
  if (!is_error && !options_.warm_start) {
    return bad("is there but warm_start is off");
  }
  const int64_t want = is_error ? b.numel : b.q_numel;
  const at::ScalarType dtype = b.options.dtype().toScalarType();
  if (t.numel() != want || t.scalar_type() != dtype) {
    return bad(absl::StrCat(
        "has ", t.numel(), " ", base::DtypeName(t.scalar_type()),
        " elements; this bucket needs ", want, " ", base::DtypeName(dtype),
        " (a state saved with other options or another model?)"));
  }
  (is_error ? errors : qs)[index] = t;
  return absl::OkStatus();
}

absl::Status PowerSgdHook::SetErrors(const std::vector<at::Tensor>& errors) {
  return Guard("loading the PowerSGD errors", [&] {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = *buckets_[i];
      b.has_error = errors[i].defined();
      if (b.has_error) {
        if (!b.error.defined()) b.error = at::empty({b.numel}, b.options);
        b.error.copy_(errors[i].reshape(-1));
      }
    }
  });
}

absl::Status PowerSgdHook::LoadState(
    const std::vector<std::pair<std::string, at::Tensor>>& state) {
  if (state.empty()) return absl::OkStatus();
  auto bad = [](absl::string_view name, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("PowerSGD state: ", name, " ", what));
  };
  if (!set_up_) {
    return absl::FailedPreconditionError(
        "PowerSGD state: load it after RegisterCommHook, which plans the "
        "buckets it belongs to");
  }
  // Everything is checked first; nothing changes unless all of it fits.
  std::optional<int64_t> iter;
  std::optional<std::vector<uint32_t>> key;
  int position = 0;
  std::vector<at::Tensor> errors(buckets_.size());
  std::vector<at::Tensor> qs(buckets_.size());
  bool has_errors = false;
  for (const auto& [name, t] : state) {
    if (!t.defined()) return bad(name, "is an undefined tensor");
    if (name == kIterName) {
      if (t.scalar_type() != at::kLong || t.numel() != 1) {
        return bad(name, "is not one int64");
      }
      iter = t.cpu().reshape(-1)[0].item<int64_t>();
      if (*iter < 0) return bad(name, absl::StrCat("is negative: ", *iter));
      continue;
    }
    if (name == kRngName) {
      if (t.scalar_type() != at::kLong ||
          t.numel() != NumpyRandomState::kWords + 1) {
        return bad(name, absl::StrCat("is not ", NumpyRandomState::kWords + 1,
                                      " int64 (numpy's key and position)"));
      }
      const at::Tensor c = t.cpu().contiguous().reshape(-1);
      const int64_t* w = c.data_ptr<int64_t>();
      key.emplace();
      for (int i = 0; i < NumpyRandomState::kWords; ++i) {
        if (w[i] < 0 || w[i] > int64_t{0xFFFFFFFF}) {
          return bad(name, absl::StrCat("has key word ", i, " = ", w[i],
                                        ", not a 32-bit word"));
        }
        key->push_back(static_cast<uint32_t>(w[i]));
      }
      const int64_t pos = w[NumpyRandomState::kWords];
      if (pos < 0 || pos > NumpyRandomState::kWords) {
        return bad(name, absl::StrCat("has position ", pos, ", not 0..",
                                      NumpyRandomState::kWords));
      }
      position = static_cast<int>(pos);
      continue;
    }
    DTRAIN_RETURN_IF_ERROR(TakeBucketEntry(name, t, errors, qs));
    has_errors = has_errors || absl::EndsWith(name, ".error");
  }
  if (!iter.has_value()) return bad(kIterName, "is missing");
  if (!key.has_value()) return bad(kRngName, "is missing");

  DTRAIN_RETURN_IF_ERROR(rng_.SetState(*key, position));
  iter_ = *iter;
  if (has_errors) DTRAIN_RETURN_IF_ERROR(SetErrors(errors));
  return Guard("loading the PowerSGD state", [&] {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = *buckets_[i];
      b.has_q = qs[i].defined();
      if (b.has_q && b.q_numel > 0) b.q.copy_(qs[i].reshape(-1));
    }
  });
}

absl::Status PowerSgdHook::LoadRankState(
    const std::vector<std::pair<std::string, at::Tensor>>& state) {
  if (state.empty()) return absl::OkStatus();
  if (!set_up_) {
    return absl::FailedPreconditionError(
        "PowerSGD state: load it after RegisterCommHook, which plans the "
        "buckets it belongs to");
  }
  std::vector<at::Tensor> errors(buckets_.size());
  std::vector<at::Tensor> qs(buckets_.size());
  for (const auto& [name, t] : state) {
    if (!t.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PowerSGD state: ", name, " is an undefined tensor"));
    }
    DTRAIN_RETURN_IF_ERROR(TakeBucketEntry(name, t, errors, qs));
    if (absl::EndsWith(name, ".q")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PowerSGD state: ", name,
          " is shared state (State), not per-rank state (RankState)"));
    }
  }
  return SetErrors(errors);
}

}  // namespace dtrain::ddp::hooks
