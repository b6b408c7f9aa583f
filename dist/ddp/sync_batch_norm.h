// SyncBatchNorm: batch normalisation whose training statistics cover the
// union of every rank's batch, as PyTorch's torch.nn.SyncBatchNorm, so that N
// ranks with small batches normalise as one process with the global batch.
// Build models with it through SyncBatchNormLayers (a models::NormLayerFactory,
// torchvision's norm_layer argument; PyTorch converts a built model instead,
// which LibTorch cannot: see models/norm_layer.h).
//
// Semantics (PyTorch's):
// - Training: per channel (dimension 1 of an input [N, C, ...]) the mean
//   and biased variance over every element of every rank's input, then
//   (x - mean) / sqrt(var + eps) * weight + bias. running_mean and
//   running_var move towards the mean and the unbiased variance (global
//   count / (global count - 1)) by `momentum`, or by 1 / num_batches_tracked
//   when momentum is unset; num_batches_tracked counts the training
//   forwards. Ranks may have different batch sizes, none at all included:
//   counts are summed. A global count of 1 or less per channel is an error,
//   as in BatchNorm.
// - Eval: plain batch norm with the running statistics (with the rank's own
//   batch statistics when track_running_stats is off); no communication.
// - Without a backend, or with one of size 1: plain BatchNorm (PyTorch's
//   SyncBatchNorm outside a process group of more than one).
// Backward is the exact derivative, not an approximation: each rank's input
// gradient includes every rank's loss through the shared statistics; weight
// and bias gradients are this rank's share, which DDP's allreduce adds up
// (its average over ranks then equals the one-process gradient of the
// global mean loss). So results equal one BatchNorm2d on the global batch up
// to rounding (in float32 a gradient can still differ by one term
// downstream of a ReLU whose input lies within rounding of 0;
// sync_batch_norm_resnet_test explains).
// Parameter and buffer names equal BatchNorm2d's (weight, bias, running_mean,
// running_var, num_batches_tracked), and so does initialisation (weight 1,
// bias 0, running_var 1): checkpoints and state_dicts are interchangeable.
//
// How: each rank takes its per-channel mean and variance (a stable
// reduction, in float32 for half types) and turns them into sums of x and
// x^2 in float64 (so that the global variance E[x^2] - E[x]^2 keeps float32's
// precision), with its count of values; one allreduce-sum of [sums, sums of
// squares, count] gives the global
// statistics. In autograd this sum is an identity per rank whose gradient is
// itself allreduce-summed in backward (the gradient of every rank's loss with
// respect to the shared statistics), so autograd derives the rest exactly.
//
// Call order across ranks (the backend's contract, backend.h): every
// training forward of a layer issues one allreduce, and the backward through
// it one more (only when its input or its statistics require grad). So every
// rank must run the same layers' forwards in the same order, in the same
// training mode and grad mode, and run backward through them the same number
// of times (never retain_graph on some ranks only). Models built the same way
// and fed the same number of batches do. Forward waits for its allreduce
// (on CPU the host blocks until it has completed; on CUDA the stream waits
// and the host goes on, except where fewer than 2 values per channel make it
// read the count); so does the backward's, which runs inside autograd's
// backward while DDP's gradient hooks issue bucket allreduces on the same
// backend. That keeps one order and cannot deadlock: on every rank the
// autograd engine runs the same graph in the same deterministic order (one
// CPU thread, or one thread per CUDA device, and a ready queue ordered by
// node sequence numbers), so the sequence of bucket launches and statistics
// allreduces that reaches the backend is identical on every rank; the
// backend runs collectives in submission order, so the buckets issued before
// a statistics allreduce are already issued on every rank, complete without
// waiting for anything this thread still has to do, and then the statistics
// allreduce runs. With NCCL the waits order the stream rather than block.
//
// Uneven inputs (join.h): the layer is a ShadowableLayer. A rank that has
// joined issues each layer's forward and backward allreduce with count 0
// and zero sums, so the statistics are the active ranks' alone, as if the
// joined rank had an empty batch. DDP drives it (ddp.h).
//
// Errors: a failed or timed-out allreduce (a dead peer, a rank that did not
// join) throws c10::Error from forward or from backward (LibTorch propagates
// it out of Tensor::backward): "[rank 0] ddp: sync_batch_norm layer1.0.bn1:
// forward statistics allreduce (129 x float64) failed after 2.0s: <backend
// message>". After that the backend is broken; the trainer turns the
// exception into a Status. Bad input (wrong dimension or channel count)
// throws before any collective, so all ranks fail the same way when they all
// get such input, and the others time out when only one does.
//
// Thread safety: as a torch::nn::Module; one thread runs forward/backward.
// Lifetimes: the backend must outlive the module, its clones and every
// autograd graph its forward built (backward communicates).
#ifndef DTRAIN_DIST_DDP_SYNC_BATCH_NORM_H_
#define DTRAIN_DIST_DDP_SYNC_BATCH_NORM_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "dist/backend/backend.h"
#include "dist/ddp/shadowable_layer.h"
#include "models/norm_layer.h"

namespace dtrain::ddp {

struct SyncBatchNormOptions {
  explicit SyncBatchNormOptions(int64_t num_features = 0)
      : num_features(num_features) {}

  // C, the size of the input's dimension 1; >= 1.
  int64_t num_features;
  double eps = 1e-5;
  // Unset: a cumulative moving average (PyTorch's momentum=None).
  absl::optional<double> momentum = 0.1;
  // Learnable weight and bias.
  bool affine = true;
  // Keep running_mean/running_var/num_batches_tracked and use them in eval.
  bool track_running_stats = true;
  // Bounds each wait for a statistics allreduce, on top of the backend's own
  // timeout (which bounds every collective already).
  absl::Duration timeout = absl::InfiniteDuration();
};

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl>,
                          public ShadowableLayer {
 public:
  // `backend` may be null (plain batch norm); otherwise it must outlive the
  // module (see the file comment). Throws c10::Error for num_features < 1.
  explicit SyncBatchNormImpl(const SyncBatchNormOptions& options,
                             backend::Backend* backend = nullptr);

  // Input [N, C, ...] with C = num_features (N may be 0 on some ranks).
  at::Tensor forward(const at::Tensor& input);

  // Re-creates parameters and buffers (torch::nn::Cloneable).
  void reset() override;
  // weight 1, bias 0, running statistics 0 and 1, num_batches_tracked 0.
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  // Names the layer in error messages and collective labels ("layer1.0.bn1");
  // LabelSyncBatchNorms sets it from the model. Default "SyncBatchNorm(C)".
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }
  const SyncBatchNormOptions& options() const { return options_; }
  backend::Backend* backend() const { return backend_; }

  // ShadowableLayer (shadowable_layer.h). The shadows' allreduces are
  // [2C + 1] float64 zeros on the device of the layer's last forward (else
  // of its parameters or buffers, else the CPU). A clone has no observer.
  std::string ShadowName() const override { return label_; }
  bool Communicates() const override;
  absl::Status ShadowForward() override;
  absl::Status ShadowBackward() override;
  void set_observer(Observer* observer) override { observer_.get = observer; }

  // Undefined when affine (weight, bias) or track_running_stats (the rest)
  // is off, as in torch::nn::BatchNorm2d.
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor running_mean;
  at::Tensor running_var;
  at::Tensor num_batches_tracked;

 private:
  at::Tensor SynchronizedForward(const at::Tensor& input);

  // The zeros a shadow contributes, reduced under `pass`'s label.
  absl::Status Shadow(const char* pass);

  SyncBatchNormOptions options_;
  backend::Backend* backend_;
  std::string label_;
  c10::Device device_ = c10::Device(c10::kCPU);
  // Copies (Cloneable's clone) start without one.
  struct ObserverSlot {
    ObserverSlot() = default;
    ObserverSlot(const ObserverSlot&) {}
    ObserverSlot& operator=(const ObserverSlot&) { return *this; }
    Observer* get = nullptr;
  } observer_;
};

TORCH_MODULE(SyncBatchNorm);

// A norm_layer for models (models::ModelConfig::norm_layer,
// ResNet18Options::norm_layer) that builds SyncBatchNorm layers over
// `backend` with `options` (its num_features replaced by the factory's
// argument). The backend must outlive every model built with it.
models::NormLayerFactory SyncBatchNormLayers(
    backend::Backend& backend,
    const SyncBatchNormOptions& options = SyncBatchNormOptions());

// Labels every SyncBatchNorm in `model` with its path ("layer1.0.bn1"), for
// error messages. Returns how many there are.
int LabelSyncBatchNorms(torch::nn::Module& model);

}  // namespace dtrain::ddp

#endif  // DTRAIN_DIST_DDP_SYNC_BATCH_NORM_H_
