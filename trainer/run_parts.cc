#include "trainer/run_parts.h"

#include <torch/cuda.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "data/distributed_sampler.h"
#include "optim/adadelta.h"

namespace dtrain::trainer {

// The device the caller chose (TrainContext::cuda_device), checked against
// the options: the choice itself is made once, before the backend exists.
absl::StatusOr<c10::Device> TrainingDevice(const TrainOptions& o,
                                           int cuda_device) {
  if (o.device == "cpu") {
    if (cuda_device < 0) return c10::Device(c10::kCPU);
    return absl::InvalidArgumentError(
        absl::StrCat("--device=cpu, but TrainContext::cuda_device is ",
                     cuda_device, " (leave it -1 for the CPU)"));
  }
  if (cuda_device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", o.device,
        ": TrainContext::cuda_device is not set; choose it with "
        "ChooseCudaDevice and make it current before creating the backend"));
  }
  if (!torch::cuda::is_available() ||
      cuda_device >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", o.device, ": cuda:", cuda_device,
        " is not usable from LibTorch (it sees ",
        torch::cuda::is_available() ? torch::cuda::device_count() : 0,
        " CUDA devices; a CPU-only LibTorch sees none)"));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const TrainOptions& o, std::vector<torch::Tensor> params) {
  if (*o.optimizer == "sgd") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::SGD(
        std::move(params), torch::optim::SGDOptions(*o.lr)
                               .momentum(*o.momentum)
                               .weight_decay(*o.weight_decay)));
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(params));
  DTRAIN_ASSIGN_OR_RETURN(
      std::unique_ptr<optim::Adadelta> adadelta,
      optim::Adadelta::Create(
          std::move(groups),
          optim::AdadeltaOptions(*o.lr).weight_decay(*o.weight_decay)));
  return std::unique_ptr<torch::optim::Optimizer>(std::move(adadelta));
}

absl::StatusOr<std::unique_ptr<data::DataLoader>> MakeLoader(
    const std::shared_ptr<const data::ExampleSource>& source,
    const data::TransformPipeline& transforms, const TrainOptions& o,
    const rendezvous::World& world, bool shuffle, bool pin_memory) {
  data::DistributedSamplerOptions s;
  s.num_replicas = world.world_size;
  s.rank = world.rank;
  s.shuffle = shuffle;
  s.seed = o.seed;
  DTRAIN_ASSIGN_OR_RETURN(data::DistributedSampler sampler,
                          data::DistributedSampler::Create(source->size(), s));
  data::LoaderOptions l;
  l.batch_size = *o.batch_size;
  l.num_workers = o.workers;
  l.seed = o.seed;
  l.pin_memory = pin_memory;
  return data::DataLoader::Create(source, std::move(sampler), transforms, l);
}

}  // namespace dtrain::trainer
