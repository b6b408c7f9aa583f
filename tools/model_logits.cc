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
// .safetensors, by extension. Exits 0 on success, 1 with the reason on stderr.

#include <ATen/core/grad_mode.h>

#include <cstdio>
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
#include "base/torch_guard.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/state_dict/state_dict.h"

ABSL_FLAG(std::string, model, "", "A model of the registry (convnet, ...).");
ABSL_FLAG(int64_t, num_classes, 10, "Number of classes.");
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

absl::Status Run() {
  const std::string name = absl::GetFlag(FLAGS_model);
  const std::string weights = absl::GetFlag(FLAGS_state_dict);
  const std::string input_path = absl::GetFlag(FLAGS_input);
  const std::string output_path = absl::GetFlag(FLAGS_output);
  DTRAIN_RETURN_IF_ERROR(Required(name, "model"));
  DTRAIN_RETURN_IF_ERROR(Required(weights, "state_dict"));
  DTRAIN_RETURN_IF_ERROR(Required(input_path, "input"));
  DTRAIN_RETURN_IF_ERROR(Required(output_path, "output"));

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
  DTRAIN_RETURN_IF_ERROR(sd::LoadStateDict(weights, *model));
  DTRAIN_ASSIGN_OR_RETURN(
      at::Tensor logits,
      dtrain::base::GuardTorch(
          absl::StatusCode::kInvalidArgument,
          "model_logits: ", [&]() -> absl::StatusOr<at::Tensor> {
            at::NoGradGuard no_grad;
            model->eval();
            return model->Forward(input, nullptr);
          }));
  return sd::SaveTensors({{"logits", logits}}, output_path);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Applies a model with weights from a state_dict file to an input "
      "tensor.\n  model_logits --model=resnet18 --state_dict=w.pt "
      "--input=x.pt --output=y.pt");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "model_logits: unexpected argument '%s'\n", rest[1]);
    return 2;
  }
  if (absl::Status s = Run(); !s.ok()) {
    std::fprintf(stderr, "model_logits: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
