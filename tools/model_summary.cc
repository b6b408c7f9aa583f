// model_summary: prints a model's layers with their output shapes and
// parameter counts, like torchinfo, for a model of the registry:
//
//   model_summary --model=resnet18 --num_classes=1000 --input_shape=3,224,224
//   model_summary --model=resnet18 --num_classes=10 --input_shape=3,32,32
//       --small_input_stem
//   model_summary --list
//
// The last line is "Total params: N". Exits 0 on success, 1 with the reason on
// stderr for a bad flag value or an input the model cannot take, 2 for stray
// arguments.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "models/registry.h"
#include "models/summary.h"

ABSL_FLAG(std::string, model, "",
          "Model to summarize: one of the registry's names (see --list).");
ABSL_FLAG(int64_t, num_classes, -1,
          "Number of classes; -1: the model's default.");
ABSL_FLAG(std::string, input_shape, "",
          "Input shape without the batch dimension, as C,H,W (e.g. "
          "3,224,224); empty: the model's default.");
ABSL_FLAG(bool, small_input_stem, false,
          "resnet18 only: 3x3 stride-1 first convolution and no max-pool, for "
          "28-96 px images.");
ABSL_FLAG(int64_t, batch_size, 1, "Batch dimension of the summarized input.");
ABSL_FLAG(bool, list, false, "List the known models and exit.");

namespace {

namespace models = dtrain::models;

// ImageNet-21k has 21,841 classes.
constexpr int64_t kMaxClasses = int64_t{1} << 20;

absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1) {
      shape.clear();
      break;
    }
    shape.push_back(value);
  }
  if (shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input_shape must be C,H,W: three positive integers "
                     "separated by commas, got \"",
                     text, "\""));
  }
  return shape;
}

absl::Status Run() {
  const std::string name = absl::GetFlag(FLAGS_model);
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model is required; known models: ", models::KnownModelNames()));
  }
  DTRAIN_ASSIGN_OR_RETURN(models::ModelInfo info, models::FindModel(name));

  std::vector<int64_t> shape = info.default_input_shape;
  if (!absl::GetFlag(FLAGS_input_shape).empty()) {
    DTRAIN_ASSIGN_OR_RETURN(shape,
                            ParseShape(absl::GetFlag(FLAGS_input_shape)));
  }
  // The summary runs one forward pass on a float input of this size (its
  // activations are larger still); the classifier has a row per class.
  const int64_t batch = absl::GetFlag(FLAGS_batch_size);
  DTRAIN_RETURN_IF_ERROR(dtrain::base::CheckAtMost(
      "--batch_size", batch, dtrain::base::BatchSizeLimit()));
  DTRAIN_RETURN_IF_ERROR(dtrain::base::CheckAtMost(
      "--num_classes", absl::GetFlag(FLAGS_num_classes),
      {kMaxClasses, "a fixed cap on the classes of a classifier"}));
  double input_bytes =
      sizeof(float) * static_cast<double>(std::max<int64_t>(batch, 1));
  for (int64_t d : shape) input_bytes *= static_cast<double>(d);
  const dtrain::base::Limit memory = dtrain::base::MemoryLimit();
  if (input_bytes > static_cast<double>(memory.max)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch_size=", batch, " x --input_shape=", absl::StrJoin(shape, ","),
        ": the input alone takes ", input_bytes / (1 << 20), " MiB, more than ",
        memory.why));
  }
  models::ModelConfig config;
  if (absl::GetFlag(FLAGS_num_classes) != -1) {
    config.num_classes = absl::GetFlag(FLAGS_num_classes);
  }
  config.in_channels = shape[0];
  // Models with a fixed image size are built for square inputs; others
  // ignore it. A non-square input then fails with the model's own message.
  if (shape[1] == shape[2]) config.image_size = shape[1];
  config.small_input_stem = absl::GetFlag(FLAGS_small_input_stem);

  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<models::Model> model,
                          models::CreateModel(name, config));
  DTRAIN_ASSIGN_OR_RETURN(
      models::ModelSummary summary,
      models::Summarize(*model, shape, absl::GetFlag(FLAGS_batch_size)));

  std::printf("Model: %s, %s\n%s", name.c_str(), info.description.c_str(),
              models::FormatSummary(summary).c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints a model's layers, output shapes and parameter counts.\n"
      "  model_summary --model=resnet18 --num_classes=1000 "
      "--input_shape=3,224,224");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "model_summary: unexpected argument '%s'\n", rest[1]);
    return 2;
  }
  if (absl::GetFlag(FLAGS_list)) {
    for (const models::ModelInfo& info : models::KnownModels()) {
      std::printf("%-10s input %s, %lld classes: %s\n", info.name.c_str(),
                  absl::StrJoin(info.default_input_shape, ",").c_str(),
                  static_cast<long long>(info.default_num_classes),
                  info.description.c_str());
    }
    return 0;
  }
  const absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "model_summary: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
