// The example hook with two ranks as threads: each rank's local norms are
// its own, the averaged ones are every rank's alike and are the norms of the
// averaged gradients that .grad holds.
#include "examples/comm_hook/norm_hook.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "gtest/gtest.h"

namespace dtrain::examples {
namespace {

using ddp::testing::Gloo;
using ddp::testing::Input;
using ddp::testing::Loss;
using ddp::testing::Mlp;

TEST(NormHookTest, RecordsLocalAndAveragedNorms) {
  constexpr int kWorld = 2;
  std::vector<Mlp> models;
  std::vector<std::shared_ptr<NormHook>> hooks;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(10);
    models.emplace_back();
    hooks.push_back(std::make_shared<NormHook>());
  }
  backend::testing::RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = models[b.rank()];
    ddp::DdpOptions options;
    options.first_bucket_cap_bytes = 300;
    auto ddp = ddp::DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->RegisterCommHook(hooks[b.rank()]).ok());
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(Input(b.rank()))).backward();
    ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    // Bucket 0 holds fc3 and fc2.bias (reverse order): .grad is the average.
    const double want = at::cat({model->fc3->bias.grad().reshape(-1),
                                 model->fc3->weight.grad().reshape(-1),
                                 model->fc2->bias.grad().reshape(-1)})
                            .norm()
                            .item<double>();
    EXPECT_NEAR(hooks[b.rank()]->averaged[0], want, 1e-6 * want);
  });
  ASSERT_EQ(hooks[0]->local.size(), 2u);
  for (size_t i = 0; i < hooks[0]->local.size(); ++i) {
    EXPECT_NE(hooks[0]->local[i], hooks[1]->local[i]) << i;
    EXPECT_EQ(hooks[0]->averaged[i], hooks[1]->averaged[i]) << i;
    EXPECT_GT(hooks[0]->averaged[i], 0) << i;
  }
}

}  // namespace
}  // namespace dtrain::examples
