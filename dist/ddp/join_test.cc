// Uneven inputs (join.h) with ranks as threads over Gloo: ranks with 3, 5 and
// 8 batches end without a hang; at every step each rank's .grad (the active
// ranks' after SynchronizeGradients, the joined ranks' after their shadow)
// equals PyTorch's Join semantics computed here without DDP (the active
// ranks' local gradients summed, divided by the world size or by the active
// ranks); the final models are identical everywhere and equal the last
// joiner's. With SyncBatchNorm (statistics over the active ranks' batches
// only), gradient accumulation, the fp16 hook, kError's flag exchange; a
// stalled rank, disagreeing ranks and misuse fail as Status.

#include "dist/ddp/join.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "dist/ddp/hooks/compress_hook.h"
#include "dist/ddp/sync_batch_norm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp {
namespace {

using testing::Gloo;
using ::testing::HasSubstr;
using testing::Loss;

using backend::testing::RunRanks;

constexpr int kWorld = 3;
constexpr double kLr = 0.1;

// Rank r's input at its micro-batch t: 4 + r rows, different everywhere.
at::Tensor StepInput(int rank, int t) {
  const int64_t rows = 4 + rank;
  return at::arange(rows * 8, at::kFloat)
      .reshape({rows, 8})
      .mul(0.37 * (rank + 1) + 0.11 * t)
      .sin();
}

// fc1 -> norm -> tanh -> fc2 -> norm -> tanh -> fc3. The norms are
// SyncBatchNorm over `backend`, plain BatchNorm1d without one (the
// single-process reference), or absent. Registration order and names are
// the same either way.
class NetImpl : public torch::nn::Module {
 public:
  NetImpl(bool norms, backend::Backend* backend) {
    fc1 = register_module("fc1", torch::nn::Linear(8, 12));
    if (norms) bn1 = Norm("bn1", 12, backend);
    fc2 = register_module("fc2", torch::nn::Linear(12, 12));
    if (norms) bn2 = Norm("bn2", 12, backend);
    fc3 = register_module("fc3", torch::nn::Linear(12, 4));
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = fc1(x);
    if (!bn1.is_empty()) h = bn1.forward(h);
    h = fc2(h.tanh());
    if (!bn2.is_empty()) h = bn2.forward(h);
    return fc3(h.tanh());
  }

  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::nn::AnyModule bn1, bn2;

 private:
  torch::nn::AnyModule Norm(const std::string& name, int64_t c,
                            backend::Backend* backend) {
    if (backend == nullptr) {
      return torch::nn::AnyModule(
          register_module(name, torch::nn::BatchNorm1d(c)));
    }
    return torch::nn::AnyModule(
        register_module(name, SyncBatchNorm(SyncBatchNormOptions(c), backend)));
  }
};
TORCH_MODULE(Net);

at::Tensor Flat(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return at::zeros({0}, at::kDouble);
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors)
    parts.push_back(t.detach().to(at::kDouble).reshape(-1));
  return at::cat(parts);
}

at::Tensor FlatGrads(torch::nn::Module& m) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : m.parameters())
    grads.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
  return Flat(grads);
}

at::Tensor FlatBuffers(torch::nn::Module& m) { return Flat(m.buffers()); }

struct Scenario {
  std::vector<int> steps = {3, 5, 8};  // optimizer steps per rank
  int micro_batches = 1;               // per step, all but the last no_sync
  bool norms = false;
  bool fp16 = false;
  bool bucket_view = true;
  UnusedParameters unused = UnusedParameters::kZero;
  JoinOptions join;
};

struct Reference {
  std::vector<at::Tensor> grads;  // per step
  at::Tensor params;              // after the last step
  at::Tensor buffers;
};

// PyTorch's Join semantics without DDP: at step s the ranks with more than s
// steps are active; the gradient is the sum of their local gradients (over
// their micro-batches) divided by the world size or by their number; SGD
// steps with it. Batch norm statistics span the active ranks' batches: one
// forward over their inputs concatenated, each rank's loss on its rows.
Reference Compute(const Scenario& sc, Net ref) {
  Reference out;
  int steps = 0;
  for (int n : sc.steps) steps = std::max(steps, n);
  for (int s = 0; s < steps; ++s) {
    ref->zero_grad();
    std::vector<int> active;
    for (int r = 0; r < kWorld; ++r) {
      if (s < sc.steps[r]) active.push_back(r);
    }
    for (int j = 0; j < sc.micro_batches; ++j) {
      std::vector<at::Tensor> inputs;
      for (int r : active)
        inputs.push_back(StepInput(r, s * sc.micro_batches + j));
      at::Tensor out_all = ref->forward(at::cat(inputs));
      at::Tensor loss = at::zeros({});
      int64_t row = 0;
      for (const at::Tensor& x : inputs) {
        loss = loss + Loss(out_all.narrow(0, row, x.size(0)));
        row += x.size(0);
      }
      loss.backward();
    }
    const double divisor = sc.join.divide_by_initial_world_size
                               ? kWorld
                               : static_cast<double>(active.size());
    at::NoGradGuard no_grad;
    out.grads.push_back(FlatGrads(*ref) / divisor);
    for (at::Tensor& p : ref->parameters()) p.sub_(p.grad() / divisor * kLr);
  }
  out.params = Flat(ref->parameters());
  out.buffers = FlatBuffers(*ref);
  return out;
}

// Records a joined rank's .grad after each synchronised shadow.
class GradRecorder : public Joinable {
 public:
  GradRecorder(torch::nn::Module& m, std::vector<at::Tensor>* out)
      : m_(m), out_(out) {}
  std::string JoinableName() const override { return "grad recorder"; }
  absl::Status Shadow(const JoinRound& round) override {
    if (round.grad_sync) out_->push_back(FlatGrads(m_));
    return absl::OkStatus();
  }

 private:
  torch::nn::Module& m_;
  std::vector<at::Tensor>* out_;
};

struct RankResult {
  std::vector<at::Tensor> grads;
  at::Tensor params;
  at::Tensor buffers;
  JoinSummary summary;
};

// Trains `sc` on kWorld thread ranks with DDP in a Join and checks every
// step's gradients and the final models against Compute.
void RunScenario(const Scenario& sc, double tolerance) {
  torch::manual_seed(7);
  Net ref(sc.norms, nullptr);
  std::vector<RankResult> results(kWorld);

  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    const int rank = b.rank();
    Net model(sc.norms, &b);
    {
      // Every rank starts from the reference's weights.
      at::NoGradGuard no_grad;
      auto mine = model->parameters();
      auto theirs = ref->parameters();
      for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(theirs[i]);
    }
    DdpOptions options;
    options.first_bucket_cap_bytes = 256;  // several buckets
    options.bucket_cap_bytes = 512;
    options.gradient_as_bucket_view = sc.bucket_view;
    options.unused_parameters = sc.unused;
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_GT((*ddp)->buckets().size(), 1u);
    if (sc.fp16) {
      ASSERT_TRUE((*ddp)->RegisterCommHook(hooks::Fp16CompressHook()).ok());
    }
    RankResult& out = results[rank];
    GradRecorder recorder(*model, &out.grads);
    auto join = Join::Create({ddp->get(), &recorder}, b, sc.join);
    ASSERT_TRUE(join.ok()) << join.status();
    torch::optim::SGD sgd(model->parameters(), kLr);
    for (int s = 0; s < sc.steps[rank]; ++s) {
      model->zero_grad(/*set_to_none=*/false);
      for (int j = 0; j < sc.micro_batches; ++j) {
        const bool last = j + 1 == sc.micro_batches;
        absl::optional<DistributedDataParallel::NoSyncGuard> no_sync;
        if (!last) no_sync.emplace(**ddp);
        ASSERT_TRUE((*ddp)->PrepareForward().ok());
        Loss(model->forward(StepInput(rank, s * sc.micro_batches + j)))
            .backward();
      }
      absl::Status synced = (*ddp)->SynchronizeGradients();
      ASSERT_TRUE(synced.ok()) << synced;
      out.grads.push_back(FlatGrads(*model));
      sgd.step();
    }
    absl::StatusOr<JoinSummary> summary = (*join)->JoinAndShadow();
    ASSERT_TRUE(summary.ok()) << summary.status();
    out.summary = *summary;
    out.params = Flat(model->parameters());
    out.buffers = FlatBuffers(*model);
  });
  if (::testing::Test::HasFatalFailure()) return;

  const Reference want = Compute(sc, ref);
  for (int r = 0; r < kWorld; ++r) {
    const RankResult& got = results[r];
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (size_t s = 0; s < want.grads.size(); ++s) {
      const double scale = want.grads[s].abs().max().item<double>();
      EXPECT_LE((got.grads[s] - want.grads[s]).abs().max().item<double>(),
                tolerance * scale + 1e-6)
          << "step " << s
          << (s >= static_cast<size_t>(sc.steps[r]) ? " (shadowed)"
                                                    : " (active)");
    }
    // The last joiner's model everywhere, bit for bit.
    EXPECT_TRUE(at::equal(got.params, results[kWorld - 1].params));
    EXPECT_TRUE(at::equal(got.buffers, results[kWorld - 1].buffers));
    EXPECT_LE((got.params - want.params).abs().max().item<double>(),
              tolerance + 1e-6);
    if (sc.norms) {
      EXPECT_LE((got.buffers - want.buffers).abs().max().item<double>(),
                tolerance + 1e-6);
    }
    const int steps = want.grads.size();
    const int rounds = steps * sc.micro_batches;
    EXPECT_EQ(got.summary.rounds, rounds);
    EXPECT_EQ(got.summary.shadowed, (steps - sc.steps[r]) * sc.micro_batches);
    EXPECT_EQ(got.summary.is_last_joiner, sc.steps[r] == steps);
    EXPECT_EQ(got.summary.final_rank, kWorld - 1);
  }
}

TEST(JoinTest, UnevenRanksAverageOverTheInitialWorldSize) {
  RunScenario(Scenario{}, 1e-5);
}

TEST(JoinTest, DivideByTheActiveRanks) {
  Scenario sc;
  sc.join.divide_by_initial_world_size = false;
  RunScenario(sc, 1e-5);
}

TEST(JoinTest, Fp16HookShadowsOnZeros) {
  Scenario sc;
  sc.fp16 = true;
  RunScenario(sc, 3e-3);
}

// Statistics over the active ranks' batches only; backward allreduces before
// the buckets on every rank; no_sync micro-batches shadowed too; kError's
// flags exchanged while shadowing; gradients copied into buckets.
TEST(JoinTest, SyncBatchNormWithAccumulation) {
  Scenario sc;
  sc.norms = true;
  sc.micro_batches = 2;
  sc.bucket_view = false;
  sc.unused = UnusedParameters::kError;
  RunScenario(sc, 1e-4);
}

TEST(JoinTest, RankWithoutInputsJoinsAtOnce) {
  Scenario sc;
  sc.steps = {0, 2, 4};
  sc.norms = true;
  RunScenario(sc, 1e-4);
}

// A rank stalls while the others shadow its iteration: they fail within the
// timeout, saying which round and what they were shadowing.
TEST(JoinTest, StalledRankFailsTheShadowWithinTheTimeout) {
  backend::testing::Notification done;
  RunRanks(kWorld, Gloo(absl::Seconds(2)), [&](backend::Backend& b) {
    Net model(false, &b);
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto join = Join::Create({ddp->get()}, b);
    ASSERT_TRUE(join.ok()) << join.status();
    const int steps = b.rank() == 2 ? 4 : 2;
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      if (b.rank() == 2 && s == 3) {
        // Notified, then silent: the others are inside the shadow.
        done.WaitForNotificationWithTimeout(absl::Seconds(60));
        return;
      }
      Loss(model->forward(StepInput(b.rank(), s))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<JoinSummary> summary = (*join)->JoinAndShadow();
    EXPECT_FALSE(summary.ok());
    const std::string message(summary.status().message());
    EXPECT_THAT(message,
                HasSubstr(absl::StrCat("[rank ", b.rank(),
                                       "] join: round 4 (rank 2 active, "
                                       "authoritative rank 2), shadowing ddp: "
                                       "[rank ",
                                       b.rank(),
                                       "] ddp: step 4 (shadowed), "
                                       "bucket 0")));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    // Broken: the same error again, at once.
    EXPECT_EQ((*join)->JoinAndShadow().status(), summary.status());
    if (b.rank() == 0) {
      // Let rank 1 finish its wait before rank 2 leaves the group.
      absl::SleepFor(absl::Seconds(3));
      done.Notify();
    }
  });
}

TEST(JoinTest, ThrowOnEarlyTerminationFailsEveryRankInTheSameRound) {
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Net model(false, &b);
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    JoinOptions options;
    options.throw_on_early_termination = true;
    auto join = Join::Create({ddp->get()}, b, options);
    ASSERT_TRUE(join.ok()) << join.status();
    const int steps = b.rank() == 0 ? 2 : 4;
    absl::Status failed;
    for (int s = 0; s < steps && failed.ok(); ++s) {
      failed = (*ddp)->PrepareForward();
      if (!failed.ok()) break;
      Loss(model->forward(StepInput(b.rank(), s))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
    }
    if (failed.ok()) failed = (*join)->JoinAndShadow().status();
    EXPECT_EQ(failed.code(), absl::StatusCode::kOutOfRange) << failed;
    EXPECT_THAT(std::string(failed.message()), HasSubstr("round 3"));
    EXPECT_THAT(std::string(failed.message()),
                HasSubstr(b.rank() == 0 ? "this rank ran out of inputs"
                                        : "rank 0 ran out of inputs"));
  });
}

// Active ranks that disagree on gradient sync would issue different
// collectives: every rank fails in that round instead.
TEST(JoinTest, DisagreeingNoSyncFailsEveryRank) {
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Net model(false, &b);
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto join = Join::Create({ddp->get()}, b);
    ASSERT_TRUE(join.ok()) << join.status();
    absl::optional<DistributedDataParallel::NoSyncGuard> no_sync;
    if (b.rank() == 1) no_sync.emplace(**ddp);
    absl::Status s = (*ddp)->PrepareForward();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("round 1: the active ranks' iterations differ "
                          "(rank 1 active, no gradient sync; ranks 0, 2 "
                          "active, synchronising gradients)"));
  });
}

TEST(JoinTest, MisuseIsRefused) {
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    Net model(false, &b);
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    EXPECT_EQ(Join::Create({}, b).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Join::Create({nullptr}, b).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Join::Create({ddp->get(), ddp->get()}, b).status().code(),
              absl::StatusCode::kInvalidArgument);
    auto join = Join::Create({ddp->get()}, b);
    ASSERT_TRUE(join.ok()) << join.status();
    EXPECT_EQ(Join::Create({ddp->get()}, b).status().code(),
              absl::StatusCode::kFailedPrecondition);
    absl::StatusOr<JoinSummary> summary = (*join)->JoinAndShadow();
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_TRUE(summary->is_last_joiner);
    EXPECT_EQ((*join)->NotifyActive(true, true).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*join)->JoinAndShadow().status().code(),
              absl::StatusCode::kFailedPrecondition);
    join->reset();
    // Detached: a new Join is fine, and DDP alone works again.
    EXPECT_TRUE(Join::Create({ddp->get()}, b).ok());
    EXPECT_TRUE((*ddp)->PrepareForward().ok());
  });
}

}  // namespace
}  // namespace dtrain::ddp
