#include "optim/adadelta.h"

#include <torch/optim/schedulers/step_lr.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::optim {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ::torch::optim::OptimizerParamGroup;

// Gradient of the test objective at step t for element i: a pull towards a
// target plus a wobble, so that gradients change sign and size over time.
double Gradient(int t, int i, double param) {
  const double target = 0.5 * i - 1.0;
  return 2 * (param - target) + 0.3 * std::cos(0.1 * t + i);
}

torch::Tensor GradientTensor(int t, const torch::Tensor& param) {
  torch::NoGradGuard no_grad;
  torch::Tensor grad = torch::empty_like(param);
  auto p = param.accessor<double, 1>();
  auto g = grad.accessor<double, 1>();
  for (int i = 0; i < param.size(0); ++i) g[i] = Gradient(t, i, p[i]);
  return grad;
}

// Adadelta written out element by element from the paper's equations with
// PyTorch's conventions (eps inside both roots, lr multiplying the delta,
// weight decay added to the gradient, maximize negating it).
struct HandAdadelta {
  double lr, rho, eps, weight_decay;
  bool maximize;
  std::vector<double> param, square_avg, acc_delta;

  void Step(int t) {
    for (size_t i = 0; i < param.size(); ++i) {
      double g = Gradient(t, static_cast<int>(i), param[i]);
      if (maximize) g = -g;
      g += weight_decay * param[i];
      square_avg[i] = rho * square_avg[i] + (1 - rho) * g * g;
      const double delta =
          std::sqrt(acc_delta[i] + eps) / std::sqrt(square_avg[i] + eps) * g;
      acc_delta[i] = rho * acc_delta[i] + (1 - rho) * delta * delta;
      param[i] -= lr * delta;
    }
  }
};

TEST(AdadeltaOptionsTest, DefaultsArePyTorchs) {
  const AdadeltaOptions options;
  EXPECT_EQ(options.lr(), 1.0);
  EXPECT_EQ(options.rho(), 0.9);
  EXPECT_EQ(options.eps(), 1e-6);
  EXPECT_EQ(options.weight_decay(), 0.0);
  EXPECT_FALSE(options.maximize());
  EXPECT_EQ(AdadeltaOptions(0.5).lr(), 0.5);
  EXPECT_EQ(AdadeltaOptions(0.5).rho(), 0.9);
}

TEST(AdadeltaOptionsTest, ValidateRejectsWhatPyTorchRejects) {
  EXPECT_TRUE(Validate(AdadeltaOptions()).ok());
  EXPECT_TRUE(Validate(AdadeltaOptions(0).rho(0).eps(0)).ok());
  EXPECT_TRUE(Validate(AdadeltaOptions().rho(1)).ok());
  struct Case {
    AdadeltaOptions options;
    std::string message;
  };
  const std::vector<Case> cases = {
      {AdadeltaOptions(-0.1), "invalid learning rate -0.1"},
      {AdadeltaOptions(std::nan("")), "invalid learning rate"},
      {AdadeltaOptions().rho(1.5), "invalid rho 1.5"},
      {AdadeltaOptions().rho(-0.1), "invalid rho"},
      {AdadeltaOptions().eps(-1e-8), "invalid eps"},
      {AdadeltaOptions().weight_decay(-1), "invalid weight_decay -1"},
  };
  for (const Case& c : cases) {
    const absl::Status status = Validate(c.options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
}

TEST(AdadeltaTest, InvalidOptionsThrowOrReturnAStatus) {
  torch::Tensor p = torch::zeros({2}, torch::requires_grad());
  EXPECT_THROW(Adadelta({p}, AdadeltaOptions().rho(2)), c10::Error);
  auto created =
      Adadelta::Create({OptimizerParamGroup({p})}, AdadeltaOptions().eps(-1));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);

  // A group's own options are checked as well as the defaults.
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p},
                      std::make_unique<AdadeltaOptions>(-1.0));
  created = Adadelta::Create(groups);
  EXPECT_THAT(std::string(created.status().message()),
              HasSubstr("parameter group 0: Adadelta: invalid learning rate"));

  // Options of another optimizer.
  groups.clear();
  groups.emplace_back(std::vector<torch::Tensor>{p},
                      std::make_unique<torch::optim::SGDOptions>(0.1));
  created = Adadelta::Create(groups);
  EXPECT_THAT(std::string(created.status().message()),
              HasSubstr("options of another optimizer"));

  // A parameter twice would be stepped twice; PyTorch rejects it too.
  created =
      Adadelta::Create({OptimizerParamGroup({p}), OptimizerParamGroup({p})});
  EXPECT_THAT(
      std::string(created.status().message()),
      HasSubstr("parameter 0 of group 1 is also parameter 0 of group 0"));
  created = Adadelta::Create({OptimizerParamGroup({p, p})});
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THROW(Adadelta({p, p}), c10::Error);

  created = Adadelta::Create({OptimizerParamGroup({p})}, AdadeltaOptions(0.5));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)->param_groups()[0].options().get_lr(), 0.5);
}

// 100 steps on float64 parameters in two groups with different options
// (weight decay, maximize), against HandAdadelta.
TEST(AdadeltaTest, FollowsTheUpdateRuleComputedByHandFor100Steps) {
  const std::vector<double> init_a = {0.5, -1.25, 2.0, 0.0, 3.5};
  const std::vector<double> init_b = {0.1, -0.2, 0.7};
  torch::Tensor a = torch::tensor(init_a, torch::kFloat64).requires_grad_();
  torch::Tensor b = torch::tensor(init_b, torch::kFloat64).requires_grad_();
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a});
  groups.emplace_back(
      std::vector<torch::Tensor>{b},
      std::make_unique<AdadeltaOptions>(
          AdadeltaOptions(2.0).rho(0.95).eps(1e-4).weight_decay(0.05)));
  Adadelta optimizer(std::move(groups), AdadeltaOptions(0.5));

  HandAdadelta hand_a{0.5,
                      0.9,
                      1e-6,
                      0,
                      false,
                      init_a,
                      std::vector<double>(5),
                      std::vector<double>(5)};
  HandAdadelta hand_b{2.0,
                      0.95,
                      1e-4,
                      0.05,
                      false,
                      init_b,
                      std::vector<double>(3),
                      std::vector<double>(3)};
  for (int t = 1; t <= 100; ++t) {
    a.mutable_grad() = GradientTensor(t, a);
    b.mutable_grad() = GradientTensor(t, b);
    optimizer.step();
    hand_a.Step(t);
    hand_b.Step(t);
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(a[i].item<double>(), hand_a.param[i], 1e-6) << i;
    EXPECT_NEAR(optimizer.StateOf(a)->square_avg()[i].item<double>(),
                hand_a.square_avg[i], 1e-6);
    EXPECT_NEAR(optimizer.StateOf(a)->acc_delta()[i].item<double>(),
                hand_a.acc_delta[i], 1e-6);
    // The test would not notice much if nothing moved.
    EXPECT_GT(std::abs(hand_a.param[i] - init_a[i]), 1e-3) << i;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(b[i].item<double>(), hand_b.param[i], 1e-6) << i;
  }
  EXPECT_EQ(optimizer.StateOf(a)->step(), 100);
  EXPECT_EQ(optimizer.StateOf(b)->step(), 100);
}

TEST(AdadeltaTest, MaximizeFollowsTheRuleWithTheGradientNegated) {
  const std::vector<double> init = {0.3, -0.4};
  torch::Tensor p = torch::tensor(init, torch::kFloat64).requires_grad_();
  Adadelta optimizer({p},
                     AdadeltaOptions(1.0).maximize(true).weight_decay(0.1));
  HandAdadelta hand{1.0, 0.9, 1e-6, 0.1, true, init, {0, 0}, {0, 0}};
  for (int t = 1; t <= 100; ++t) {
    p.mutable_grad() = GradientTensor(t, p);
    optimizer.step();
    hand.Step(t);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(p[i].item<double>(), hand.param[i], 1e-6) << i;
  }
}

// float32 parameters through autograd, against torch.optim.Adadelta in
// PyTorch 1.13.1:
//
//   w = torch.tensor([0.5, -1.25, 2.0, 0.0, 3.5, -0.75], requires_grad=True)
//   b = torch.tensor([0.1, -0.2], requires_grad=True)
//   target = torch.tensor([1.0, -1.0, 0.5, 0.25, -2.0, 0.0])
//   opt = torch.optim.Adadelta([{'params': [w], 'lr': 0.5},
//       {'params': [b], 'lr': 1.0, 'rho': 0.95, 'eps': 1e-5,
//        'weight_decay': 0.01}])
//   for t in range(100):
//       opt.zero_grad()
//       loss = ((w - target) ** 2).sum() + (b.pow(2) * 0.5 + b.sin()).sum()
//       loss.backward(); opt.step()
TEST(AdadeltaTest, MatchesPyTorchOver100Steps) {
  torch::Tensor w =
      torch::tensor({0.5f, -1.25f, 2.0f, 0.0f, 3.5f, -0.75f}).requires_grad_();
  torch::Tensor b = torch::tensor({0.1f, -0.2f}).requires_grad_();
  const torch::Tensor target =
      torch::tensor({1.0f, -1.0f, 0.5f, 0.25f, -2.0f, 0.0f});
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{w},
                      std::make_unique<AdadeltaOptions>(0.5));
  groups.emplace_back(
      std::vector<torch::Tensor>{b},
      std::make_unique<AdadeltaOptions>(
          AdadeltaOptions(1.0).rho(0.95).eps(1e-5).weight_decay(0.01)));
  Adadelta optimizer(std::move(groups));
  for (int t = 0; t < 100; ++t) {
    optimizer.zero_grad();
    const torch::Tensor loss =
        (w - target).pow(2).sum() + (b.pow(2) * 0.5 + b.sin()).sum();
    loss.backward();
    optimizer.step();
  }
  auto expect_near = [](const torch::Tensor& actual,
                        std::vector<float> expected, double tol) {
    ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(actual[i].item<float>(), expected[i],
                  tol * std::max(1.0f, std::abs(expected[i])))
          << i;
    }
  };
  expect_near(w,
              {0.674414933f, -1.10019529f, 1.80695653f, 0.149804562f,
               3.29970908f, -0.566504478f},
              1e-6);
  expect_near(b, {-0.668528795f, -0.726740658f}, 1e-6);
  const AdadeltaParamState* state = optimizer.StateOf(w);
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->step(), 100);
  expect_near(state->square_avg(),
              {0.47141543f, 0.0518216789f, 7.05352402f, 0.0518217795f,
               113.291679f, 1.37260175f},
              1e-6);
  expect_near(state->acc_delta(),
              {1.20066898e-05f, 6.6816292e-06f, 1.73876088e-05f,
               6.68164421e-06f, 1.98206089e-05f, 1.44762498e-05f},
              1e-6);
}

TEST(AdadeltaTest, SkipsParametersWithoutAGradient) {
  torch::Tensor used = torch::ones({3}, torch::requires_grad());
  torch::Tensor unused = torch::ones({3}, torch::requires_grad());
  Adadelta optimizer({used, unused});
  used.mutable_grad() = torch::ones({3});
  optimizer.step();
  EXPECT_NE(optimizer.StateOf(used), nullptr);
  EXPECT_EQ(optimizer.StateOf(unused), nullptr);
  EXPECT_TRUE(torch::equal(unused, torch::ones({3})));
  EXPECT_FALSE(torch::equal(used, torch::ones({3})));
}

TEST(AdadeltaTest, ClosureIsEvaluatedWithGradientsAndItsLossReturned) {
  torch::Tensor p = torch::tensor({2.0f}).requires_grad_();
  Adadelta optimizer({p});
  const torch::Tensor loss = optimizer.step([&] {
    optimizer.zero_grad();
    torch::Tensor l = (p * p).sum();
    l.backward();
    return l;
  });
  EXPECT_FLOAT_EQ(loss.item<float>(), 4.0f);
  EXPECT_LT(p.item<float>(), 2.0f);
}

TEST(AdadeltaTest, RejectsSparseGradients) {
  torch::Tensor p = torch::zeros({4}, torch::requires_grad());
  Adadelta optimizer({p});
  p.mutable_grad() = torch::sparse_coo_tensor(torch::tensor({{1}}),
                                              torch::tensor({1.0f}), {4});
  try {
    optimizer.step();
    ADD_FAILURE() << "no error for a sparse gradient";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(),
                HasSubstr("does not support sparse gradients"));
  }
}

// PyTorch updates complex parameters through their real view.
TEST(AdadeltaTest, ComplexParametersStepAsTheirRealAndImaginaryParts) {
  torch::Tensor z = torch::complex(torch::tensor({1.0, -2.0}, torch::kFloat64),
                                   torch::tensor({0.5, 3.0}, torch::kFloat64))
                        .requires_grad_();
  torch::Tensor r = torch::view_as_real(z.detach()).clone().requires_grad_();
  Adadelta complex_optimizer({z}, AdadeltaOptions(0.7).weight_decay(0.1));
  Adadelta real_optimizer({r}, AdadeltaOptions(0.7).weight_decay(0.1));
  for (int t = 0; t < 20; ++t) {
    const torch::Tensor g_real =
        torch::tensor({{0.3, -0.1}, {0.2, 0.4}}, torch::kFloat64) * (t + 1);
    r.mutable_grad() = g_real;
    z.mutable_grad() = torch::view_as_complex(g_real.clone());
    complex_optimizer.step();
    real_optimizer.step();
  }
  EXPECT_TRUE(torch::allclose(torch::view_as_real(z.detach()), r.detach(),
                              1e-12, 1e-12));
  EXPECT_FALSE(torch::allclose(
      r.detach(), torch::tensor({{1.0, 0.5}, {-2.0, 3.0}}, torch::kFloat64)));
}

// LibTorch's schedulers change lr through OptimizerOptions::set_lr.
TEST(AdadeltaTest, WorksWithLibTorchsLrSchedulers) {
  torch::Tensor p = torch::zeros({1}, torch::requires_grad());
  Adadelta optimizer({p}, AdadeltaOptions(0.5));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.7);
  // LibTorch's first step() is epoch 0, as the constructor's in PyTorch.
  scheduler.step();
  EXPECT_EQ(optimizer.param_groups()[0].options().get_lr(), 0.5);
  scheduler.step();
  EXPECT_DOUBLE_EQ(optimizer.param_groups()[0].options().get_lr(), 0.35);
  EXPECT_DOUBLE_EQ(
      static_cast<AdadeltaOptions&>(optimizer.param_groups()[0].options()).lr(),
      0.35);
}

// Trains `params` with `optimizer` on the Gradient objective for steps
// [first, last).
void Train(Adadelta& optimizer, std::vector<torch::Tensor>& params, int first,
           int last) {
  for (int t = first; t < last; ++t) {
    for (torch::Tensor& p : params) p.mutable_grad() = GradientTensor(t, p);
    optimizer.step();
  }
}

std::vector<torch::Tensor> CopyOf(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : params) {
    out.push_back(p.detach().clone().requires_grad_());
  }
  return out;
}

std::vector<OptimizerParamGroup> TwoGroups(std::vector<torch::Tensor>& params,
                                           const AdadeltaOptions& second) {
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{params[0], params[1]});
  groups.emplace_back(std::vector<torch::Tensor>{params[2]},
                      std::make_unique<AdadeltaOptions>(second));
  return groups;
}

std::string Save(const Adadelta& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void Load(Adadelta& optimizer, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

// Saved after 50 steps and loaded into a fresh optimizer (constructed with
// other options) over copies of the parameters, training goes on exactly as
// in an optimizer that never stopped.
TEST(AdadeltaTest, SaveAndLoadContinueIdentically) {
  const AdadeltaOptions second =
      AdadeltaOptions(2.0).rho(0.8).weight_decay(0.01);
  std::vector<torch::Tensor> params = {
      torch::tensor({0.5, -1.5, 2.0}, torch::kFloat64).requires_grad_(),
      torch::tensor({1.0, 0.0}, torch::kFloat64).requires_grad_(),
      torch::tensor({-0.3, 0.9, 0.4, 2.2}, torch::kFloat64).requires_grad_()};
  Adadelta original(TwoGroups(params, second), AdadeltaOptions(0.5));
  Train(original, params, 0, 50);
  const std::string bytes = Save(original);

  std::vector<torch::Tensor> restored_params = CopyOf(params);
  Adadelta restored(TwoGroups(restored_params, AdadeltaOptions(9.0)),
                    AdadeltaOptions(7.0).rho(0.1));
  Load(restored, bytes);
  std::vector<torch::Tensor> fresh_params = CopyOf(params);
  Adadelta fresh(TwoGroups(fresh_params, second), AdadeltaOptions(0.5));

  // Options and state came back.
  EXPECT_TRUE(
      static_cast<AdadeltaOptions&>(restored.param_groups()[0].options()) ==
      AdadeltaOptions(0.5));
  EXPECT_TRUE(static_cast<AdadeltaOptions&>(
                  restored.param_groups()[1].options()) == second);
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_NE(restored.StateOf(restored_params[i]), nullptr) << i;
    EXPECT_TRUE(*restored.StateOf(restored_params[i]) ==
                *original.StateOf(params[i]))
        << i;
    EXPECT_EQ(restored.StateOf(restored_params[i])->step(), 50);
  }

  Train(original, params, 50, 100);
  Train(restored, restored_params, 50, 100);
  Train(fresh, fresh_params, 50, 100);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(restored_params[i], params[i])) << i;
    // Without the state the trajectory differs: the test can tell.
    EXPECT_FALSE(torch::allclose(fresh_params[i], params[i])) << i;
  }
}

TEST(AdadeltaTest, SavedStateUsesPyTorchsNames) {
  torch::Tensor p = torch::ones({2}, torch::requires_grad());
  Adadelta optimizer({p}, AdadeltaOptions(0.25));
  p.mutable_grad() = torch::ones({2});
  optimizer.step();
  torch::serialize::OutputArchive out;
  optimizer.save(out);
  std::ostringstream stream;
  out.save_to(stream);
  std::istringstream in_stream(stream.str());
  torch::serialize::InputArchive in;
  in.load_from(in_stream);

  torch::serialize::InputArchive state;
  ASSERT_TRUE(in.try_read("state", state));
  const std::vector<std::string> keys = state.keys();
  ASSERT_EQ(keys.size(), 1u);
  torch::serialize::InputArchive param_state;
  state.read(keys[0], param_state);
  EXPECT_THAT(param_state.keys(),
              UnorderedElementsAre("step", "square_avg", "acc_delta"));
  c10::IValue step;
  param_state.read("step", step);
  EXPECT_EQ(step.toInt(), 1);

  torch::serialize::InputArchive groups;
  in.read("param_groups", groups);
  torch::serialize::InputArchive group;
  groups.read("param_groups/0", group);
  torch::serialize::InputArchive options;
  group.read("options", options);
  EXPECT_THAT(options.keys(), UnorderedElementsAre("lr", "rho", "eps",
                                                   "weight_decay", "maximize"));
  c10::IValue lr;
  options.read("lr", lr);
  EXPECT_EQ(lr.toDouble(), 0.25);
}

TEST(AdadeltaTest, TorchSaveAndLoadRoundTripThroughAFile) {
  torch::Tensor p = torch::tensor({1.0f, 2.0f}).requires_grad_();
  Adadelta optimizer({p});
  p.mutable_grad() = torch::tensor({0.5f, -0.5f});
  optimizer.step();
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                             : "/tmp") +
      "/adadelta.pt";
  torch::save(optimizer, path);
  torch::Tensor q = p.detach().clone().requires_grad_();
  Adadelta loaded({q});
  torch::load(loaded, path);
  ASSERT_NE(loaded.StateOf(q), nullptr);
  EXPECT_TRUE(*loaded.StateOf(q) == *optimizer.StateOf(p));
  std::remove(path.c_str());
}

TEST(AdadeltaTest, LoadRejectsAnArchiveThatDoesNotFitAndKeepsItsState) {
  std::vector<torch::Tensor> params = {
      torch::ones({3}, torch::kFloat64).requires_grad_(),
      torch::ones({2}, torch::kFloat64).requires_grad_(),
      torch::ones({4}, torch::kFloat64).requires_grad_()};
  Adadelta source(TwoGroups(params, AdadeltaOptions()));
  Train(source, params, 0, 3);
  const std::string bytes = Save(source);

  // One group instead of two.
  torch::Tensor single = torch::ones({3}, torch::kFloat64).requires_grad_();
  Adadelta one_group({single}, AdadeltaOptions(0.3));
  single.mutable_grad() = torch::ones({3}, torch::kFloat64);
  one_group.step();
  const AdadeltaParamState before = *one_group.StateOf(single);
  try {
    Load(one_group, bytes);
    ADD_FAILURE() << "loaded 2 groups into 1";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("parameter groups"));
  }
  ASSERT_NE(one_group.StateOf(single), nullptr);
  EXPECT_TRUE(*one_group.StateOf(single) == before);
  EXPECT_EQ(one_group.param_groups()[0].options().get_lr(), 0.3);

  // Same structure, other shapes.
  std::vector<torch::Tensor> other = {
      torch::ones({3}, torch::kFloat64).requires_grad_(),
      torch::ones({5}, torch::kFloat64).requires_grad_(),
      torch::ones({4}, torch::kFloat64).requires_grad_()};
  Adadelta reshaped(TwoGroups(other, AdadeltaOptions()));
  try {
    Load(reshaped, bytes);
    ADD_FAILURE() << "loaded state of the wrong shape";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("does not fit"));
  }
  EXPECT_EQ(reshaped.StateOf(other[0]), nullptr);
}

TEST(AdadeltaTest, LoadFollowsTheParametersFloatingPointType) {
  torch::Tensor p = torch::ones({2}, torch::kFloat64).requires_grad_();
  Adadelta source({p});
  p.mutable_grad() = torch::ones({2}, torch::kFloat64);
  source.step();
  torch::Tensor q = torch::ones({2}, torch::kFloat32).requires_grad_();
  Adadelta target({q});
  Load(target, Save(source));
  ASSERT_NE(target.StateOf(q), nullptr);
  EXPECT_EQ(target.StateOf(q)->square_avg().scalar_type(), torch::kFloat32);
  EXPECT_EQ(target.StateOf(q)->acc_delta().scalar_type(), torch::kFloat32);
}

}  // namespace
}  // namespace dtrain::optim
