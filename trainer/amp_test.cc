#include "trainer/amp.h"

#include <ATen/Functions.h>
#include <torch/cuda.h>

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

TEST(PrecisionTest, NamesRoundTripAndUnknownOnesAreListed) {
  for (Precision p :
       {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16}) {
    EXPECT_EQ(*ParsePrecision(PrecisionName(p)), p);
  }
  absl::StatusOr<Precision> bad = ParsePrecision("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("off, bf16, fp16"),
            std::string::npos);
}

TEST(PrecisionTest, Float16IsForCudaOnly) {
  const c10::Device cpu(c10::kCPU);
  EXPECT_TRUE(CheckPrecision(Precision::kBFloat16, cpu).ok());
  absl::Status s = CheckPrecision(Precision::kFloat16, cpu);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("use --amp=bf16"), std::string::npos);
  EXPECT_TRUE(
      CheckPrecision(Precision::kFloat16, c10::Device(c10::kCUDA, 0)).ok());
}

TEST(AutocastGuardTest, MatmulRunsInBFloat16InsideAndFloat32After) {
  const at::Tensor a = at::randn({4, 8});
  const at::Tensor b = at::randn({8, 3});
  {
    AutocastGuard guard(Precision::kBFloat16, c10::Device(c10::kCPU));
    EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kBFloat16);
    {
      // Nested: the inner guard's exit keeps the outer one's state.
      AutocastGuard inner(Precision::kBFloat16, c10::Device(c10::kCPU));
    }
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
  {
    AutocastGuard off(Precision::kFloat32, c10::Device(c10::kCPU));
    EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
  }
}

TEST(LossScalerTest, UnscalesAndFindsNonFiniteGradients) {
  LossScaler scaler(LossScalerOptions{/*init_scale=*/8.0});
  at::Tensor p = at::zeros({3}).requires_grad_();
  p.mutable_grad() = at::full({3}, 16.0);
  at::Tensor q = at::zeros({2}).requires_grad_();  // no gradient: skipped
  EXPECT_FALSE(scaler.UnscaleAndCheck({p, q}));
  EXPECT_TRUE(p.grad().equal(at::full({3}, 2.0)));

  p.mutable_grad()[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(scaler.UnscaleAndCheck({p}));
  p.mutable_grad()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(scaler.UnscaleAndCheck({p}));
}

TEST(LossScalerTest, BacksOffOnOverflowAndGrowsAfterCleanSteps) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler scaler(o);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  scaler.Update(false);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  // An overflow restarts the count of clean steps.
  scaler.Update(false);
  scaler.Update(true);
  scaler.Update(false);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

// fp16 is CUDA's: matrix products in float16 under autocast, the loss scaled
// before backward and the gradients unscaled after, ending close to float32's.
TEST(AutocastGuardTest, Float16OnCudaWithLossScalingMatchesFloat32) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device is visible (or LibTorch is built without "
                    "CUDA); --amp=fp16 runs on CUDA only";
  }
  const c10::Device cuda(c10::kCUDA, 0);
  const at::Tensor x = at::randn({16, 32}).to(cuda);
  const at::Tensor w0 = at::randn({32, 8}).mul_(0.1).to(cuda);
  auto gradient = [&](Precision precision, LossScaler* scaler) {
    at::Tensor w = w0.clone().requires_grad_();
    at::Tensor loss;
    {
      AutocastGuard guard(precision, cuda);
      const at::Tensor y = at::matmul(x, w);
      if (precision == Precision::kFloat16) {
        EXPECT_EQ(y.scalar_type(), at::kHalf);
      }
      loss = y.to(at::kFloat).pow(2).mean();
    }
    (scaler != nullptr ? loss.mul(scaler->scale()) : loss).backward();
    if (scaler != nullptr) {
      EXPECT_FALSE(scaler->UnscaleAndCheck({w}));
    }
    EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
    return w.grad().cpu();
  };
  LossScaler scaler;
  const at::Tensor fp32 = gradient(Precision::kFloat32, nullptr);
  const at::Tensor fp16 = gradient(Precision::kFloat16, &scaler);
  EXPECT_TRUE(at::allclose(fp16, fp32, /*rtol=*/1e-2, /*atol=*/1e-3))
      << fp16.sub(fp32).abs().max().item<double>();
}

}  // namespace
}  // namespace dtrain::trainer
