// Train your own model: data-parallel training of a model defined in this
// file, with dtrain's public API (docs/OWN_MODEL.md). Every rank runs it:
//   launch --nproc_per_node=2 -- train_own_model --steps=300
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "base/status_macros.h"
#include "data/loader.h"
#include "data/mnist.h"
#include "dist/backend/process_group.h"
#include "dist/ddp/ddp.h"
#include "trainer/loop_checkpoints.h"

ABSL_FLAG(int64_t, steps, 300, "Train until this many steps in all.");
ABSL_FLAG(std::string, checkpoint_dir, "own_model_checkpoints",
          "Continue from the newest checkpoint here; save one at the end.");

namespace dtrain::examples {
namespace {

// The model: a two-layer perceptron, written as any LibTorch module.
struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(784, 128))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(128, 10))};
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
};

absl::Status Run(int64_t steps, const std::string& checkpoint_dir) {
  // 1. InitWorld (the launcher's rank, world size, master), CPU, gloo backend.
  DTRAIN_ASSIGN_OR_RETURN(backend::ProcessGroup group,
                          backend::InitProcessGroup());
  // 2. The same model and optimizer on every rank.
  torch::manual_seed(0);
  auto model = std::make_shared<MlpImpl>();
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.9));
  // 3. This rank's share of Fashion-MNIST, reshuffled every epoch.
  DTRAIN_ASSIGN_OR_RETURN(
      data::Dataset train,
      data::LoadMnist(data::kFashionMnistDir, data::Split::kTrain));
  DTRAIN_ASSIGN_OR_RETURN(data::TransformPipeline to_float,
                          data::TransformPipeline::Builder().ToFloat().Build());
  DTRAIN_ASSIGN_OR_RETURN(
      auto loader, data::DataLoader::Create(train, {group.size(), group.rank()},
                                            to_float, /*options=*/{}));
  // 4. Continue from the newest checkpoint (model, optimizer, data), if any.
  DTRAIN_ASSIGN_OR_RETURN(
      auto checkpoints,
      trainer::LoopCheckpoints::Open(checkpoint_dir, *group.backend));
  DTRAIN_ASSIGN_OR_RETURN(trainer::TrainingState state,
                          checkpoints.Resume(*model, optimizer, loader.get()));
  // 5. DDP: rank 0's weights to all, gradients averaged during backward.
  DTRAIN_ASSIGN_OR_RETURN(
      auto ddp, ddp::DistributedDataParallel::Create(model, *group.backend));
  // 6. Train, printing the mean loss of every 20 steps on rank 0.
  int64_t step = state.global_step;
  double loss_sum = 0;
  for (int64_t epoch = state.epoch; step < steps; ++epoch) {
    loader->SetEpoch(epoch);
    while (step < steps) {
      DTRAIN_ASSIGN_OR_RETURN(auto batch, loader->Next());
      if (!batch.has_value()) break;  // the end of the epoch
      DTRAIN_RETURN_IF_ERROR(ddp->PrepareForward());
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(batch->images), batch->labels);
      optimizer.zero_grad();
      loss.backward();
      DTRAIN_RETURN_IF_ERROR(ddp->SynchronizeGradients());
      optimizer.step();
      loss_sum += loss.item<double>();
      if (++step % 20 == 0 && group.rank() == 0) {
        std::printf("step %ld loss %.4f\n", step, loss_sum / 20);
        loss_sum = 0;
      }
    }
  }
  // 7. Rank 0 saves where the run stands.
  return checkpoints.Save(*model, optimizer, step, *loader).status();
}

}  // namespace
}  // namespace dtrain::examples

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = dtrain::examples::Run(
      absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_checkpoint_dir));
  if (status.ok()) return 0;
  std::fprintf(stderr, "train_own_model: %s\n", status.ToString().c_str());
  return 1;
}
