// The parts a training run is built of, from its resolved options: the
// device, the optimizer and the data loaders (trainer.cc's Run assembles
// them). Stateless functions; thread-safe.
#ifndef DTRAIN_TRAINER_RUN_PARTS_H_
#define DTRAIN_TRAINER_RUN_PARTS_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data/example_source.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "dist/rendezvous/init.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

// The device the caller chose (TrainContext::cuda_device, -1 for the CPU),
// checked against the options: kInvalidArgument when the two disagree,
// kFailedPrecondition when LibTorch cannot use the CUDA device.
absl::StatusOr<c10::Device> TrainingDevice(const TrainOptions& o,
                                           int cuda_device);

// SGD (lr, momentum, weight decay) or Adadelta (lr, weight decay), as the
// options say.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const TrainOptions& o, std::vector<at::Tensor> params);

// A loader over `source` in this rank's DistributedSampler order (shuffled
// or not, seeded from the options), batch_size and workers from the options.
absl::StatusOr<std::unique_ptr<data::DataLoader>> MakeLoader(
    const std::shared_ptr<const data::ExampleSource>& source,
    const data::TransformPipeline& transforms, const TrainOptions& o,
    const rendezvous::World& world, bool shuffle, bool pin_memory);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_RUN_PARTS_H_
