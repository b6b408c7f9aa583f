// model_logits: a model of the registry with weights from a state_dict file,
// applied in evaluation mode to an input tensor from a file, writing the
// output: the check that a model here computes what the same weights compute
// in PyTorch (models/state_dict/pytorch_interop_test.sh).
//
//   model_logits --model=resnet18 --num_classes=10 --state_dict=w.pt
//       --input=x.pt --output=y.pt
//
// --input holds a tensor named "input" of shape [N, C, H, W] (float32); C and
// H (= W) configure the model as train does for such images. --output gets
// one tensor named "logits". Files are .pt (torch.save / torch.load) or
// .safetensors, by extension. Relative paths are taken from the directory
// `bazel run` was started in (BUILD_WORKING_DIRECTORY), else the current one;
// --output is checked for writability before the model runs. Exits 0 printing
// what it wrote ("model_logits: wrote /abs/y.pt: logits [2, 10] float32"), or
// 1 with the reason on stderr.

#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"
#include "base/user_path.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"

ABSL_FLAG(std::string, model, "", "A model of the registry (convnet, ...).");
ABSL_FLAG(int64_t, num_classes, 10,
          "Number of classes: the rows of the weights' output layer (1000 for "
          "torchvision's ImageNet weights).");
ABSL_FLAG(bool, small_input_stem, false,
          "resnet18 only: 3x3 stride-1 first convolution and no max-pool.");
ABSL_FLAG(std::string, state_dict, "",
          "The weights (.pt, .pth, .safetensors).");
ABSL_FLAG(std::string, input, "", "File with the tensor \"input\".");
ABSL_FLAG(std::string, output, "", "File to write the tensor \"logits\" to.");

namespace {

namespace models = dtrain::models;
namespace sd = dtrain::models::state_dict;

absl::Status Required(const std::string& value, const char* flag) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " is required"));
}

// When the weights' output layer has another number of rows than the model
// built with --num_classes, the flag to give; "" otherwise. The output layer
// is the model's last matrix-shaped parameter ("fc.weight", "fc2.weight").
std::string NumClassesHint(const models::Model& model,
                           const std::string& weights, int64_t num_classes) {
  std::string head;
  std::vector<int64_t> head_shape;
  for (const auto& [name, tensor] : sd::NamedState(model)) {
    if (tensor.dim() == 2) {
      head = name;
      head_shape = tensor.sizes().vec();
    }
  }
  if (head.empty() || head_shape[0] != num_classes) return "";
  auto tensors = sd::LoadTensors(weights);
  if (!tensors.ok()) return "";
  for (const auto& [name, tensor] : *tensors) {
    if (name == head && tensor.dim() == 2 && tensor.size(1) == head_shape[1] &&
        tensor.size(0) != num_classes) {
      return absl::StrCat("; the file's ", head, " has ", tensor.size(0),
                          " rows, --num_classes=", num_classes,
                          " gives the model ", num_classes,
                          ": add --num_classes=", tensor.size(0));
    }
  }
  return "";
}

absl::Status Run(const std::string& working_dir) {
  const std::string name = absl::GetFlag(FLAGS_model);
  DTRAIN_RETURN_IF_ERROR(Required(name, "model"));
  DTRAIN_RETURN_IF_ERROR(
      Required(absl::GetFlag(FLAGS_state_dict), "state_dict"));
  DTRAIN_RETURN_IF_ERROR(Required(absl::GetFlag(FLAGS_input), "input"));
  DTRAIN_RETURN_IF_ERROR(Required(absl::GetFlag(FLAGS_output), "output"));
  const std::string weights = dtrain::base::ResolveUserPath(
      absl::GetFlag(FLAGS_state_dict), working_dir);
  const std::string input_path =
      dtrain::base::ResolveUserPath(absl::GetFlag(FLAGS_input), working_dir);
  const std::string output_path =
      dtrain::base::ResolveUserPath(absl::GetFlag(FLAGS_output), working_dir);
  DTRAIN_RETURN_IF_ERROR(
      dtrain::base::CheckWritableFile("--output", output_path));

  DTRAIN_ASSIGN_OR_RETURN(auto tensors, sd::LoadTensors(input_path));
  if (tensors.size() != 1 || tensors[0].first != "input" ||
      tensors[0].second.dim() != 4 ||
      tensors[0].second.scalar_type() != at::kFloat ||
      tensors[0].second.size(2) != tensors[0].second.size(3)) {
    return absl::InvalidArgumentError(
        absl::StrCat(input_path,
                     ": expected one float32 tensor named \"input\" of shape "
                     "[N, C, H, H]"));
  }
  const at::Tensor input = tensors[0].second;
  models::ModelConfig config;
  config.num_classes = absl::GetFlag(FLAGS_num_classes);
  config.in_channels = input.size(1);
  config.image_size = input.size(2);
  config.small_input_stem = absl::GetFlag(FLAGS_small_input_stem);
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<models::Model> model,
                          models::CreateModel(name, config));
  if (absl::Status s = sd::LoadStateDict(weights, *model); !s.ok()) {
    return absl::Status(
        s.code(),
        absl::StrCat(s.message(),
                     NumClassesHint(*model, weights, *config.num_classes)));
  }
  DTRAIN_ASSIGN_OR_RETURN(
      at::Tensor logits,
      dtrain::base::GuardTorch(
          absl::StatusCode::kInvalidArgument,
          "model_logits: ", [&]() -> absl::StatusOr<at::Tensor> {
            at::NoGradGuard no_grad;
            model->eval();
            return model->Forward(input, nullptr);
          }));
  DTRAIN_RETURN_IF_ERROR(sd::SaveTensors({{"logits", logits}}, output_path));
  std::printf("model_logits: wrote %s: logits %s %s\n", output_path.c_str(),
              dtrain::base::ShapeString(logits.sizes()).c_str(),
              dtrain::base::DtypeName(logits.scalar_type()).c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Applies a model with weights from a state_dict file to an input "
      "tensor.\n  model_logits --model=resnet18 --num_classes=10 "
      "--state_dict=w.pt --input=x.pt --output=y.pt");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "model_logits: unexpected argument '%s'\n", rest[1]);
    return 2;
  }
  if (absl::Status s = Run(dtrain::base::UserWorkingDirectory(
          std::getenv("BUILD_WORKING_DIRECTORY")));
      !s.ok()) {
    std::fprintf(stderr, "model_logits: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
