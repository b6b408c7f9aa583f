// ResNet-18 (small-input stem, 16 px images) built with SyncBatchNorm and
// trained under DistributedDataParallel on 2 ranks (Gloo, threads) with 4
// images each ends, after a few SGD steps, with the parameters and running
// statistics of one process training the stock BatchNorm2d model on the
// global batch of 8. This is what --sync_batchnorm promises: the statistics
// allreduces in forward and backward interleave with DDP's bucket allreduces
// on one backend without breaking their order.
//
// In float64: in float32 the two agree to about 1e-7 in every activation,
// but ReLU is discontinuous in its gradient, and with 20 batch norms an
// activation within 1e-7 of 0 is likely somewhere; where the two sides fall
// on different sides of 0 a gradient differs by a whole term (measured here:
// 0.3% of the largest gradient, from layer3.1.bn1 backwards, bias but not
// weight, as for an element with a normalised value of 0). In float64 no
// such element turns up, and the comparison is tight.

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <vector>

#include "dist/backend/backend.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/sync_batch_norm.h"
#include "gtest/gtest.h"
#include "models/resnet.h"

namespace dtrain::ddp {
namespace {

using testing::Gloo;
using testing::MaxParameterDifference;

constexpr int kWorld = 2;
constexpr int64_t kPerRank = 4;
constexpr int kSteps = 3;
// The first step's gradients (max |g| is about 1), the losses and the
// parameters and buffers after 3 steps.
constexpr double kTolerance = 1e-10;

models::ResNet18Options Options() {
  models::ResNet18Options o;
  o.num_classes = 10;
  o.small_input_stem = true;
  return o;
}

torch::optim::SGD MakeSgd(torch::nn::Module& model) {
  return torch::optim::SGD(model.parameters(),
                           torch::optim::SGDOptions(0.01).momentum(0.9));
}

void CopyState(const torch::nn::Module& from, torch::nn::Module& to) {
  at::NoGradGuard no_grad;
  const auto params = from.named_parameters();
  for (auto& p : to.named_parameters()) p.value().copy_(params[p.key()]);
  const auto buffers = from.named_buffers();
  for (auto& b : to.named_buffers()) b.value().copy_(buffers[b.key()]);
}

TEST(SyncBatchNormResNetTest, TwoRanksWithDdpMatchOneProcessOnTheGlobalBatch) {
  torch::manual_seed(321);
  std::vector<at::Tensor> images, labels;
  for (int s = 0; s < kSteps; ++s) {
    images.push_back(at::randn({kWorld * kPerRank, 3, 16, 16}, at::kDouble));
    labels.push_back(at::randint(10, {kWorld * kPerRank}, at::kLong));
  }
  torch::manual_seed(7);
  models::ResNet18 reference(Options());
  models::ResNet18 initial(Options());
  reference->to(at::kDouble);
  initial->to(at::kDouble);
  CopyState(*reference, *initial);
  std::vector<double> reference_losses;
  std::vector<at::Tensor> reference_grads;  // the first step's
  {
    torch::optim::SGD sgd = MakeSgd(*reference);
    for (int s = 0; s < kSteps; ++s) {
      sgd.zero_grad();
      at::Tensor loss = at::cross_entropy_loss(reference(images[s]), labels[s]);
      loss.backward();
      if (s == 0) {
        for (const at::Tensor& p : reference->parameters()) {
          reference_grads.push_back(p.grad().clone());
        }
      }
      sgd.step();
      reference_losses.push_back(loss.item<double>());
    }
  }

  double grad_scale = 0;
  for (const at::Tensor& g : reference_grads) {
    grad_scale = std::max(grad_scale, g.abs().max().item<double>());
  }
  std::vector<double> differences(kWorld, -1);
  std::vector<double> grad_differences(kWorld, -1);
  std::vector<std::vector<double>> losses(kWorld);
  backend::testing::RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    const int r = b.rank();
    models::ResNet18Options o = Options();
    o.norm_layer = SyncBatchNormLayers(b);
    models::ResNet18 model(o);
    model->to(at::kDouble);
    EXPECT_EQ(LabelSyncBatchNorms(*model), 20);
    CopyState(*initial, *model);
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    torch::optim::SGD sgd = MakeSgd(*model);
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      sgd.zero_grad();
      at::Tensor loss = at::cross_entropy_loss(
          model(images[s].narrow(0, r * kPerRank, kPerRank)),
          labels[s].narrow(0, r * kPerRank, kPerRank));
      loss.backward();
      const absl::Status synced = (*ddp)->SynchronizeGradients();
      ASSERT_TRUE(synced.ok()) << synced;
      if (s == 0) {
        // .grad now holds the average over ranks, as one process's.
        double worst = 0;
        const std::vector<at::Tensor> params = model->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          worst = std::max(worst, (params[i].grad() - reference_grads[i])
                                      .abs()
                                      .max()
                                      .item<double>());
        }
        grad_differences[r] = worst / grad_scale;
      }
      sgd.step();
      losses[r].push_back(loss.item<double>());
    }
    differences[r] = MaxParameterDifference(*model, *reference);
  });
  for (int s = 0; s < kSteps; ++s) {
    // The global mean loss is the mean of the ranks' (equal batches).
    const double mean = (losses[0][s] + losses[1][s]) / 2;
    std::cout.precision(9);
    std::cout << "step " << s << ": loss " << mean << " (one process "
              << reference_losses[s] << ")\n";
    EXPECT_NEAR(mean, reference_losses[s], kTolerance);
  }
  for (int r = 0; r < kWorld; ++r) {
    std::cout << "rank " << r << ": first step's gradients: max |difference| "
              << grad_differences[r] * grad_scale << " (largest gradient "
              << grad_scale << ")\n";
    EXPECT_GE(grad_differences[r], 0);
    EXPECT_LE(grad_differences[r], kTolerance) << "rank " << r;
  }
  for (int r = 0; r < kWorld; ++r) {
    std::cout << "rank " << r << ": max |parameter or buffer difference| "
              << differences[r] << " after " << kSteps << " steps\n";
    EXPECT_GE(differences[r], 0);
    EXPECT_LE(differences[r], kTolerance) << "rank " << r;
  }
}

}  // namespace
}  // namespace dtrain::ddp
