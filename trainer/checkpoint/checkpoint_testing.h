// Fixtures of the checkpoint tests: small models, training steps and
// checkpoints of them, snapshots that tell whether a failed decode changed a
// model or an optimizer, a gMock matcher for statuses, payloads built field by
// field, and temporary directories.
#ifndef DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_TESTING_H_
#define DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_TESTING_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "trainer/checkpoint/checkpoint.h"

namespace dtrain::trainer::testing {

// A small network with buffers (batch norm's running statistics and its
// int64 num_batches_tracked), unlike the ConvNet.
struct TinyImpl : torch::nn::Module {
  explicit TinyImpl(int64_t in = 4, int64_t hidden = 8, bool extra = false);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear head{nullptr};
  torch::nn::Linear tail{nullptr};
};
TORCH_MODULE(Tiny);

// One optimizer step on a fixed batch of 6 drawn from `seed`.
void TinyStep(Tiny& model, torch::optim::Optimizer& optimizer, int64_t seed);

// A TrainingState with every field set, none to its default.
TrainingState SomeState(absl::string_view model, absl::string_view optimizer);

// A hook state with a float32 matrix "q.0" (2 x 3) and an int64 scalar
// "steps", named "tiny_hook".
HookState SomeHookState();

// A valid checkpoint of a Tiny model with SGD state (momentum buffers),
// SomeState("tiny", "sgd") and SomeHookState(); its last section is HOOK.
std::string TinyCheckpoint(int64_t seed = 1);

// Same dtype, shape and bytes.
bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b);

// The same name and entries (names in order, tensors bit for bit).
void ExpectSameHookState(const HookState& a, const HookState& b);

// Every parameter and buffer, by name, bit for bit.
void ExpectSameTensors(const torch::nn::Module& a, const torch::nn::Module& b);

// Copies of a module's tensors, to check later that it did not change.
std::vector<torch::Tensor> Snapshot(const torch::nn::Module& module);
void ExpectUnchanged(const std::vector<torch::Tensor>& snapshot,
                     const torch::nn::Module& module);

// The momentum buffer of `param` in `sgd`, or null when it has none.
const torch::Tensor* MomentumOf(torch::optim::SGD& sgd,
                                const torch::Tensor& param);

// A copy of an optimizer's per-parameter state, parameter by parameter in
// group order. Knows the state of torch::optim::SGD and optim::Adadelta; a
// parameter with state of another type fails the test.
struct OptimizerSnapshot {
  struct ParamState {
    bool present = false;
    int64_t step = 0;                    // Adadelta's
    std::vector<torch::Tensor> tensors;  // undefined where the state has none
  };
  size_t state_size = 0;  // the optimizer's state() entries
  std::vector<ParamState> params;
};
OptimizerSnapshot Snapshot(const torch::optim::Optimizer& optimizer);
void ExpectUnchanged(const OptimizerSnapshot& snapshot,
                     const torch::optim::Optimizer& optimizer);

// Matches an absl::Status whose code `code` matches and whose message
// `message` matches: StatusIs(absl::StatusCode::kDataLoss,
// HasSubstr("truncated")).
::testing::Matcher<const absl::Status&> StatusIs(
    const ::testing::Matcher<absl::StatusCode>& code,
    const ::testing::Matcher<const std::string&>& message);

// Decodes `bytes` into `model` and `optimizer` (DecodeCheckpoint with the
// expected names) and expects it to fail with a status that `status`
// matches, leaving the model's tensors and the optimizer's state as they
// were.
void ExpectDecodeRejected(absl::string_view bytes, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer,
                          const ::testing::Matcher<const absl::Status&>& status,
                          absl::string_view expected_model_name = "",
                          absl::string_view expected_optimizer_name = "");

// The 24-byte header of a checkpoint of format `version` holding `payload`.
std::string MakeHeader(uint32_t version, absl::string_view payload);

// Builds payloads field by field, as docs/FORMATS.md describes the format.
class Payload {
 public:
  Payload& U8(uint8_t v);
  Payload& U32(uint32_t v);
  Payload& U64(uint64_t v);
  Payload& I64(int64_t v);
  Payload& F64(double v);
  // A u32 length, then the bytes.
  Payload& Str(absl::string_view s);
  Payload& Raw(absl::string_view s);
  Payload& Floats(const std::vector<float>& values);
  // The 4-byte tag, a u64 length, then the body.
  Payload& Section(absl::string_view tag, const Payload& body);

  const std::string& bytes() const { return bytes_; }

 private:
  Payload& Put(uint64_t v, int size);

  std::string bytes_;
};

// A fresh empty directory under the test's temporary directory.
std::string MakeTempDir();

// Writes `bytes` to `path`, failing the test on error.
void WriteRaw(const std::string& path, absl::string_view bytes);

bool Exists(const std::string& path);

// The names in `dir` (without "." and ".."), sorted.
std::vector<std::string> FilesIn(const std::string& dir);

}  // namespace dtrain::trainer::testing

#endif  // DTRAIN_TRAINER_CHECKPOINT_CHECKPOINT_TESTING_H_
