#include "dist/ddp/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"
#include "dist/ddp/collectives.h"

namespace dtrain::ddp {
namespace {

// Allreduce-sums `tensor` (contiguous, not needing grad) in place and waits
// (for the result itself when the host will read it: on CUDA a plain wait
// only orders the stream). Errors name the layer and the pass.
absl::Status AllReduceSum(backend::Backend& backend, absl::Duration timeout,
                          const std::string& label, absl::string_view pass,
                          const at::Tensor& tensor, bool host_reads = false) {
  const std::string what = absl::StrCat(
      "sync_batch_norm ", label, ": ", pass, " statistics allreduce (",
      tensor.numel(), " x ", base::DtypeName(tensor.scalar_type()), ")");
  const absl::Time started = absl::Now();
  const backend::SmallCollectives collectives =
      internal::DdpCollectives(backend, timeout);
  std::shared_ptr<backend::Work> work =
      backend.AllReduce(tensor, backend::ReduceOp::kSum,
                        absl::StrCat("sync_batch_norm ", label, " ", pass));
  return host_reads ? collectives.WaitForResult(*work, what, started)
                    : collectives.Wait(*work, what, started);
}

// The same, throwing c10::Error when it fails: inside forward and autograd.
void AllReduceSumOrThrow(backend::Backend& backend, absl::Duration timeout,
                         const std::string& label, absl::string_view pass,
                         const at::Tensor& tensor, bool host_reads = false) {
  const absl::Status status =
      AllReduceSum(backend, timeout, label, pass, tensor, host_reads);
  TORCH_CHECK(status.ok(), std::string(status.message()));
}

// The sum of `local` over ranks. In autograd an identity whose incoming
// gradient is summed over ranks in backward: every rank's loss depends on the
// sum, so d(sum of losses)/d(local) is the sum of each rank's gradient with
// respect to the sum. `local - local.detach()` is exactly zero, so the value
// is the allreduced one, bit for bit the same on every rank. `host_reads`:
// the caller reads the sum on the host.
at::Tensor DifferentiableAllReduceSum(backend::Backend& backend,
                                      absl::Duration timeout,
                                      const std::string& label,
                                      const at::Tensor& local,
                                      bool host_reads) {
  at::Tensor reduced = local.detach().clone(at::MemoryFormat::Contiguous);
  AllReduceSumOrThrow(backend, timeout, label, "forward", reduced, host_reads);
  if (!local.requires_grad()) return reduced;
  at::Tensor global = reduced + (local - local.detach());
  backend::Backend* b = &backend;
  global.register_hook([b, timeout, label](const at::Tensor& grad) {
    at::Tensor summed = grad.clone(at::MemoryFormat::Contiguous);
    AllReduceSumOrThrow(*b, timeout, label, "backward", summed);
    return summed;
  });
  return global;
}

// [1, C, 1, ...] for broadcasting a per-channel vector against `input`.
std::vector<int64_t> ChannelShape(const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return shape;
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const SyncBatchNormOptions& options,
                                     backend::Backend* backend)
    : options_(options),
      backend_(backend),
      label_(absl::StrCat("SyncBatchNorm(", options.num_features, ")")) {
  reset();
}

void SyncBatchNormImpl::reset() {
  TORCH_CHECK(options_.num_features >= 1,
              "SyncBatchNorm: num_features must be >= 1, got ",
              options_.num_features);
  const int64_t c = options_.num_features;
  if (options_.affine) {
    weight = register_parameter("weight", at::empty({c}));
    bias = register_parameter("bias", at::empty({c}));
  } else {
    weight = register_parameter("weight", at::Tensor(), false);
    bias = register_parameter("bias", at::Tensor(), false);
  }
  if (options_.track_running_stats) {
    running_mean = register_buffer("running_mean", at::zeros({c}));
    running_var = register_buffer("running_var", at::ones({c}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
  reset_parameters();
}

void SyncBatchNormImpl::reset_parameters() {
  at::NoGradGuard no_grad;
  if (options_.track_running_stats) {
    running_mean.zero_();
    running_var.fill_(1);
    num_batches_tracked.zero_();
  }
  if (options_.affine) {
    weight.fill_(1);
    bias.zero_();
  }
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "dtrain::ddp::SyncBatchNorm(" << options_.num_features
         << ", eps=" << options_.eps << ", momentum=";
  if (options_.momentum.has_value()) {
    stream << *options_.momentum;
  } else {
    stream << "None";
  }
  stream << ", affine=" << options_.affine
         << ", track_running_stats=" << options_.track_running_stats << ")";
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "SyncBatchNorm ", label_,
              ": expected at least 2D input, got ", input.dim(), "D ",
              input.sizes());
  TORCH_CHECK(input.size(1) == options_.num_features, "SyncBatchNorm ", label_,
              ": expected ", options_.num_features, " channels, got input ",
              input.sizes());
  const bool use_batch_stats = is_training() || !options_.track_running_stats;
  // PyTorch's exponential_average_factor.
  double factor = 0;
  if (is_training() && options_.track_running_stats) {
    at::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    factor = options_.momentum.has_value()
                 ? *options_.momentum
                 : 1.0 / num_batches_tracked.item<double>();
  }
  // As PyTorch, only training synchronises (eval without running statistics
  // normalises each rank's batch by itself).
  if (!use_batch_stats || !is_training() || backend_ == nullptr ||
      backend_->size() <= 1) {
    return at::batch_norm(input, weight, bias, running_mean, running_var,
                          use_batch_stats, factor, options_.eps,
                          /*cudnn_enabled=*/true);
  }

  const int64_t c = options_.num_features;
  device_ = input.device();
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d != 1) dims.push_back(d);
  }
  const int64_t local_count = input.numel() / c;
  // This rank's per-channel mean and variance where the input is (half types
  // in float32), then its sums and sums of squares in float64 per channel:
  // no float64 copy of the whole input (at ResNet-18's first layer, batch 32,
  // two of them took about 400 MB).
  const double n = static_cast<double>(local_count);
  at::Tensor sums, squares;
  if (local_count == 0) {
    // No values on this rank: zeros, still tied to the input, so that this
    // rank's backward issues the statistics allreduce as the others' do.
    sums = input.sum(at::IntArrayRef(dims)).to(at::kDouble);
    squares = sums;
  } else {
    const bool reduced = input.scalar_type() == at::kHalf ||
                         input.scalar_type() == at::kBFloat16;
    const auto [local_var, local_mean] =
        at::var_mean(reduced ? input.to(at::kFloat) : input,
                     at::IntArrayRef(dims), /*unbiased=*/false,
                     /*keepdim=*/false);
    const at::Tensor mean_d = local_mean.to(at::kDouble);
    sums = mean_d * n;
    squares = (local_var.to(at::kDouble) + mean_d * mean_d) * n;
  }
  const at::Tensor local =
      at::cat({sums, squares, at::full({1}, n, sums.options())});
  // The hook's allreduce in backward follows exactly when local needs grad.
  if (observer_.get != nullptr) {
    observer_.get->OnForward(*this, local.requires_grad());
  }
  const at::Tensor global =
      DifferentiableAllReduceSum(*backend_, options_.timeout, label_, local,
                                 /*host_reads=*/local_count < 2);
  const at::Tensor count = global.narrow(0, 2 * c, 1);
  // A rank with 2 or more values per channel knows that the sum is above 1;
  // the others look (on the host), and then all of them look and agree.
  if (local_count < 2) {
    const double total = count.item<double>();
    TORCH_CHECK(total > 1, "SyncBatchNorm ", label_,
                ": expected more than 1 value per channel when training, got ",
                total, " over all ranks (this rank's input ", input.sizes(),
                ")");
  }
  const at::Tensor mean = global.narrow(0, 0, c) / count;
  const at::Tensor var =
      (global.narrow(0, c, c) / count - mean * mean).clamp_min(0);
  const at::Tensor invstd = (var + options_.eps).rsqrt();

  if (options_.track_running_stats) {
    at::NoGradGuard no_grad;
    const at::Tensor unbiased = var * count / (count - 1);
    running_mean.copy_(running_mean.to(at::kDouble) * (1 - factor) +
                       mean * factor);
    running_var.copy_(running_var.to(at::kDouble) * (1 - factor) +
                      unbiased * factor);
  }

  const std::vector<int64_t> shape = ChannelShape(input);
  at::Tensor scale = invstd.to(input.scalar_type());
  if (weight.defined()) scale = scale * weight;
  at::Tensor out =
      (input - mean.to(input.scalar_type()).view(shape)) * scale.view(shape);
  if (bias.defined()) out = out + bias.view(shape);
  return out;
}

bool SyncBatchNormImpl::Communicates() const {
  return backend_ != nullptr && backend_->size() > 1;
}

absl::Status SyncBatchNormImpl::Shadow(const char* pass) {
  if (!Communicates()) return absl::OkStatus();
  at::Tensor zeros;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal,
      absl::StrCat("sync_batch_norm ", label_, ": LibTorch: "), [&] {
        c10::Device device = device_;
        // Before any forward: where the layer's tensors are.
        if (device.is_cpu()) {
          if (weight.defined()) {
            device = weight.device();
          } else if (running_mean.defined()) {
            device = running_mean.device();
          }
        }
        // Count 0, sums 0: the shape and dtype of a forward's [sums, squares,
        // count] and of its gradient.
        zeros =
            at::zeros({2 * options_.num_features + 1},
                      at::TensorOptions().dtype(at::kDouble).device(device));
        return absl::OkStatus();
      }));
  return AllReduceSum(*backend_, options_.timeout, label_,
                      absl::StrCat(pass, " (shadowed)"), zeros);
}

absl::Status SyncBatchNormImpl::ShadowForward() { return Shadow("forward"); }

absl::Status SyncBatchNormImpl::ShadowBackward() { return Shadow("backward"); }

models::NormLayerFactory SyncBatchNormLayers(
    backend::Backend& backend, const SyncBatchNormOptions& options) {
  backend::Backend* b = &backend;
  return [b, options](int64_t num_features) {
    SyncBatchNormOptions o = options;
    o.num_features = num_features;
    return torch::nn::AnyModule(SyncBatchNorm(o, b));
  };
}

int LabelSyncBatchNorms(torch::nn::Module& model) {
  int count = 0;
  for (const auto& item : model.named_modules()) {
    if (auto* layer = item.value()->as<SyncBatchNormImpl>()) {
      if (!item.key().empty()) layer->set_label(item.key());
      ++count;
    }
  }
  return count;
}

}  // namespace dtrain::ddp
