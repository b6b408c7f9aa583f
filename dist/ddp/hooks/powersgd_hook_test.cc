// The PowerSGD hook under DDP with ranks as threads (Gloo on 127.0.0.1, and
// the shared-memory backend): plain allreduce before start_powersgd_iter and
// the stages after it, exact reconstruction of low-rank gradients (Gram-
// Schmidt, QR, batched), error feedback, bytes on the wire, identical results
// on every rank, failures naming step, bucket and stage, an exact resume from
// State, and options and states refused. The comparison with PyTorch's own
// hook is tools/hook_reference.
#include "dist/ddp/hooks/powersgd_hook.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ddp_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp::hooks {
namespace {

using ::testing::ElementsAre;
using testing::EventLog;
using testing::Gloo;
using ::testing::HasSubstr;
using testing::Loss;
using testing::Mlp;
using ::testing::Not;
using testing::RecordingBackend;
using testing::Shm;

using backend::testing::RunRanks;

constexpr int kWorld = 2;

// Three buckets of testing::Mlp: {fc3.bias, fc3.weight, fc2.bias},
// {fc2.weight}, {fc1.bias, fc1.weight} (ddp_test checks the layout).
DdpOptions ThreeBuckets() {
  DdpOptions o;
  o.first_bucket_cap_bytes = 300;
  o.bucket_cap_bytes = 600;
  return o;
}

// The global generator is shared by the rank threads: one model at a time.
std::mutex seed_mu;

// The same model on every rank and in every reference computation.
Mlp MakeMlp() {
  std::lock_guard<std::mutex> lock(seed_mu);
  torch::manual_seed(10);
  return Mlp();
}

// A different input per rank and step.
at::Tensor StepInput(int rank, int step) {
  return testing::Input(rank).mul(1.0 + 0.25 * step);
}

// One rank's local gradients of `model` (without DDP), by parameter name.
std::map<std::string, at::Tensor> LocalGradients(int rank, int step) {
  Mlp copy = MakeMlp();
  Loss(copy->forward(StepInput(rank, step))).backward();
  std::map<std::string, at::Tensor> out;
  for (const auto& p : copy->named_parameters())
    out[p.key()] = p.value().grad().clone();
  return out;
}

// Gradients concatenated in a bucket's order.
at::Tensor Flat(const std::map<std::string, at::Tensor>& grads,
                const BucketInfo& bucket) {
  std::vector<at::Tensor> parts;
  for (const std::string& name : bucket.parameters)
    parts.push_back(grads.at(name).reshape(-1));
  return at::cat(parts);
}

std::map<std::string, at::Tensor> Grads(const torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters())
    out[p.key()] = p.value().grad().clone();
  return out;
}

// One synchronised step of `model` on `input`.
void Step(DistributedDataParallel& ddp, Mlp& model, const at::Tensor& input) {
  model->zero_grad();
  ASSERT_TRUE(ddp.PrepareForward().ok());
  Loss(model->forward(input)).backward();
  absl::Status s = ddp.SynchronizeGradients();
  ASSERT_TRUE(s.ok()) << s;
}

std::shared_ptr<PowerSgdHook> Hook(int rank, int64_t start = 2,
                                   bool error_feedback = true,
                                   bool warm_start = true) {
  PowerSgdOptions o;
  o.matrix_approximation_rank = rank;
  o.start_powersgd_iter = start;
  o.use_error_feedback = error_feedback;
  o.warm_start = warm_start;
  return std::make_shared<PowerSgdHook>(o);
}

// Each bad option comes back from Setup (through RegisterCommHook) as
// kInvalidArgument naming it, before any collective.
TEST(PowerSgdHookTest, BadOptionsAreRefused) {
  const std::vector<std::pair<PowerSgdOptions, std::string>> cases = [] {
    std::vector<std::pair<PowerSgdOptions, std::string>> c;
    PowerSgdOptions o;
    o.matrix_approximation_rank = 0;
    c.emplace_back(o, "matrix_approximation_rank is 0; it must be at least 1");
    o = {};
    o.start_powersgd_iter = 1;
    c.emplace_back(o,
                   "start_powersgd_iter is 1; with use_error_feedback or "
                   "warm_start it must be at least 2");
    o = {};
    o.min_compression_rate = -1;
    c.emplace_back(o, "min_compression_rate is -1");
    o = {};
    o.orthogonalization_epsilon = std::nan("");
    c.emplace_back(o, "orthogonalization_epsilon is nan");
    o = {};
    o.random_seed = int64_t{1} << 32;
    c.emplace_back(o, "random_seed is 4294967296; numpy's seeds are 0 to");
    return c;
  }();
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    for (const auto& [options, message] : cases) {
      absl::Status s = PowerSgdHook(options).Setup({}, b);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr("PowerSGD options: " + message));
    }
    // Without error feedback and warm start, compression may start at once.
    PowerSgdOptions at_once;
    at_once.start_powersgd_iter = 0;
    at_once.use_error_feedback = at_once.warm_start = false;
    EXPECT_TRUE(PowerSgdHook(at_once).Setup({}, b).ok());

    Mlp model = MakeMlp();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    absl::Status s = (*ddp)->RegisterCommHook(Hook(/*rank=*/0));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("setting up the powersgd communication hook failed: "
                          "PowerSGD options: matrix_approximation_rank"));
  });
}

// Before start_powersgd_iter each bucket is one allreduce and the average is
// exact; from then on every rank issues, per bucket in order, the
// uncompressed sum (none for bucket 1, a lone weight) and P, then every Q.
// The bytes a step puts on the wire are what the buckets report.
TEST(PowerSgdHookTest, PlainStepsThenStagesInOrder) {
  RunRanks(kWorld, Gloo(), [&](backend::Backend& inner) {
    EventLog log;
    RecordingBackend b(inner, &log);
    Mlp model = MakeMlp();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto hook = Hook(1, /*start=*/2);
    ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
    const std::vector<BucketInfo>& buckets = (*ddp)->buckets();
    ASSERT_EQ(buckets.size(), 3u);
    // Uncompressed biases plus P and Q (rank 1) of each weight, in floats.
    EXPECT_EQ(buckets[0].communicated_bytes, ((4 + 16) + (4 + 16)) * 4);
    EXPECT_EQ(buckets[1].communicated_bytes, (16 + 16) * 4);
    EXPECT_EQ(buckets[2].communicated_bytes, (16 + (16 + 8)) * 4);

    for (int step = 1; step <= 3; ++step) {
      log.Clear();
      Step(**ddp, model, StepInput(b.rank(), step));
      if (step <= 2) {
        EXPECT_THAT(log.events(),
                    ElementsAre("allreduce bucket 0", "allreduce bucket 1",
                                "allreduce bucket 2"));
        std::map<std::string, at::Tensor> want = LocalGradients(0, step);
        std::map<std::string, at::Tensor> other = LocalGradients(1, step);
        for (auto& [name, g] : want) g = (g + other[name]) / 2;
        for (const auto& [name, g] : Grads(*model))
          EXPECT_TRUE(g.equal(want[name])) << "step " << step << " " << name;
      } else {
        EXPECT_THAT(log.events(),
                    ElementsAre("allreduce bucket 0 uncompressed allreduce",
                                "allreduce bucket 0 P allreduce",
                                "allreduce bucket 1 P allreduce",
                                "allreduce bucket 2 uncompressed allreduce",
                                "allreduce bucket 2 P allreduce",
                                "allreduce bucket 0 Q allreduce",
                                "allreduce bucket 1 Q allreduce",
                                "allreduce bucket 2 Q allreduce"));
      }
      EXPECT_EQ(hook->iteration(), step);
    }
  });
}

// What a compressed step actually sends: the sizes of the tensors allreduced.
class SizeRecordingBackend : public RecordingBackend {
 public:
  using RecordingBackend::RecordingBackend;
  std::shared_ptr<backend::Work> AllReduce(at::Tensor tensor,
                                           backend::ReduceOp op,
                                           absl::string_view label) override {
    bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    return RecordingBackend::AllReduce(std::move(tensor), op, label);
  }
  int64_t bytes = 0;
};

TEST(PowerSgdHookTest, BytesOnTheWireAreTheReportedOnes) {
  RunRanks(kWorld, Shm(), [&](backend::Backend& inner) {
    EventLog log;
    SizeRecordingBackend b(inner, &log);
    Mlp model = MakeMlp();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->RegisterCommHook(Hook(2)).ok());
    int64_t reported = 0;
    int64_t uncompressed = 0;
    for (const BucketInfo& bucket : (*ddp)->buckets()) {
      reported += bucket.communicated_bytes;
      uncompressed += bucket.bytes;
    }
    for (int step = 1; step <= 3; ++step) {
      b.bytes = 0;
      Step(**ddp, model, StepInput(b.rank(), step));
      EXPECT_EQ(b.bytes, step <= 2 ? uncompressed : reported) << step;
    }
    EXPECT_LT(reported * 2, uncompressed);
  });
}

// Two 8x8 layers and a 16x8 one without biases; one example per rank, so
// each weight's gradient has rank 1 per rank and at most 2 averaged.
struct LinearStackImpl : torch::nn::Module {
  LinearStackImpl() {
    fc1 = register_module(
        "fc1", torch::nn::Linear(torch::nn::LinearOptions(8, 8).bias(false)));
    fc2 = register_module(
        "fc2", torch::nn::Linear(torch::nn::LinearOptions(8, 8).bias(false)));
    fc3 = register_module(
        "fc3", torch::nn::Linear(torch::nn::LinearOptions(8, 16).bias(false)));
  }
  at::Tensor forward(const at::Tensor& x) { return fc3(fc2(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(LinearStack);

LinearStack MakeLinearStack() {
  std::lock_guard<std::mutex> lock(seed_mu);
  torch::manual_seed(3);
  return LinearStack();
}

// A rank-r approximation of a gradient of rank <= r is the gradient: with
// rank 2 (Gram-Schmidt), 3 (QR) and the two 8x8 weights stacked, the average
// comes back to float precision; rank 1 is visibly an approximation.
TEST(PowerSgdHookTest, LowRankGradientsAreReconstructed) {
  std::map<std::string, at::Tensor> want;
  for (int r = 0; r < kWorld; ++r) {
    LinearStack copy = MakeLinearStack();
    Loss(copy->forward(testing::Input(r, /*batch=*/1))).backward();
    for (const auto& p : copy->named_parameters()) {
      at::Tensor g = p.value().grad() / kWorld;
      want[p.key()] = want.count(p.key()) ? want[p.key()] + g : g;
    }
  }
  struct Case {
    int rank;
    bool batch;
    double tolerance;  // relative to the gradient's largest element
  };
  for (const Case& c : {Case{2, false, 1e-5}, Case{2, true, 1e-5},
                        Case{3, false, 1e-5}, Case{1, false, -1}}) {
    RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
      LinearStack model = MakeLinearStack();
      auto ddp = DistributedDataParallel::Create(model.ptr(), b);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      PowerSgdOptions o;
      o.matrix_approximation_rank = c.rank;
      o.min_compression_rate = 1;  // (8 + 8) * 3 < 64
      o.start_powersgd_iter = 0;
      o.use_error_feedback = o.warm_start = false;
      o.batch_tensors_with_same_shape = c.batch;
      ASSERT_TRUE(
          (*ddp)->RegisterCommHook(std::make_shared<PowerSgdHook>(o)).ok());
      for (const BucketInfo& bucket : (*ddp)->buckets())
        EXPECT_LT(bucket.communicated_bytes, bucket.bytes);
      ASSERT_TRUE((*ddp)->PrepareForward().ok());
      Loss(model->forward(testing::Input(b.rank(), 1))).backward();
      ASSERT_TRUE((*ddp)->SynchronizeGradients().ok());
      for (const auto& p : model->named_parameters()) {
        const at::Tensor& w = want[p.key()];
        const double scale = w.abs().max().item<double>();
        const double diff = (p.value().grad() - w).abs().max().item<double>();
        if (c.tolerance > 0) {
          EXPECT_LE(diff, c.tolerance * scale)
              << "rank " << c.rank << (c.batch ? " batched " : " ") << p.key();
        } else {
          EXPECT_GT(diff, 1e-3 * scale) << "rank 1 " << p.key();
        }
      }
    });
  }
}

// With error feedback, each compressed step starts from the local gradient
// plus the error the last one left, and leaves error = that input minus the
// result (for uncompressed gradients too, as PyTorch); the error is each
// rank's own.
TEST(PowerSgdHookTest, ErrorFeedbackAccumulates) {
  std::vector<at::Tensor> errors(kWorld);
  RunRanks(kWorld, Gloo(), [&](backend::Backend& b) {
    Mlp model = MakeMlp();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto hook = Hook(1, /*start=*/2);
    ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
    const std::vector<BucketInfo>& buckets = (*ddp)->buckets();
    std::vector<at::Tensor> previous(buckets.size());
    for (int step = 1; step <= 4; ++step) {
      Step(**ddp, model, StepInput(b.rank(), step));
      for (auto& [name, t] : hook->State()) {
        EXPECT_THAT(name, Not(HasSubstr("error"))) << "shared state";
      }
      std::map<std::string, at::Tensor> state;
      for (auto& [name, t] : hook->RankState()) state[name] = t;
      if (step <= 2) {
        EXPECT_EQ(state.count("powersgd.bucket0.error"), 0u);
        continue;
      }
      const std::map<std::string, at::Tensor> local =
          LocalGradients(b.rank(), step);
      const std::map<std::string, at::Tensor> result = Grads(*model);
      for (size_t i = 0; i < buckets.size(); ++i) {
        const std::string name = absl::StrCat("powersgd.bucket", i, ".error");
        ASSERT_EQ(state.count(name), 1u) << name;
        at::Tensor input = Flat(local, buckets[i]);
        if (previous[i].defined()) input = input + previous[i];
        const at::Tensor want = input - Flat(result, buckets[i]);
        EXPECT_LE((state[name] - want).abs().max().item<double>(), 1e-6)
            << "step " << step << " " << name;
        EXPECT_GT(state[name].abs().max().item<double>(), 1e-4) << name;
        previous[i] = state[name];
      }
    }
    errors[b.rank()] = previous[1];
  });
  EXPECT_FALSE(errors[0].equal(errors[1]));
}

// Every rank ends each step with the same bits, on Gloo and on shm (three
// ranks: Gloo's ring reduces chunks in different orders on different ranks).
// The backends agree to rounding: they sum three ranks in different orders.
TEST(PowerSgdHookTest, IdenticalOnEveryRank) {
  constexpr int kRanks = 3;
  std::map<std::string, std::vector<at::Tensor>> grads;  // per backend, rank
  std::mutex mu;
  for (bool shm : {false, true}) {
    const std::string backend = shm ? "shm" : "gloo";
    grads[backend].resize(kRanks);
    RunRanks(kRanks, shm ? Shm() : Gloo(), [&](backend::Backend& b) {
      Mlp model = MakeMlp();
      auto ddp =
          DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      ASSERT_TRUE((*ddp)->RegisterCommHook(Hook(2)).ok());
      for (int step = 1; step <= 4; ++step)
        Step(**ddp, model, StepInput(b.rank(), step));
      std::vector<at::Tensor> all;
      for (const auto& p : model->parameters())
        all.push_back(p.grad().reshape(-1));
      std::lock_guard<std::mutex> lock(mu);
      grads[backend][b.rank()] = at::cat(all);
    });
  }
  for (const auto& [backend, per_rank] : grads) {
    for (int r = 1; r < kRanks; ++r)
      EXPECT_TRUE(per_rank[r].equal(per_rank[0])) << backend << " rank " << r;
  }
  const double scale = grads["gloo"][0].abs().max().item<double>();
  EXPECT_LE((grads["gloo"][0] - grads["shm"][0]).abs().max().item<double>(),
            1e-5 * scale);
}

// A failed collective of a compressed step comes back from
// SynchronizeGradients naming the rank, step, bucket and stage.
TEST(PowerSgdHookTest, FailedStageIsAStatusNamingIt) {
  RunRanks(kWorld, Gloo(), [&](backend::Backend& inner) {
    EventLog log;
    RecordingBackend b(inner, &log, "bucket 1 P allreduce");
    Mlp model = MakeMlp();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_TRUE((*ddp)->RegisterCommHook(Hook(1)).ok());
    for (int step = 1; step <= 2; ++step)
      Step(**ddp, model, StepInput(b.rank(), step));
    ASSERT_TRUE((*ddp)->PrepareForward().ok());
    Loss(model->forward(StepInput(b.rank(), 3))).backward();
    absl::Status s = (*ddp)->SynchronizeGradients();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat(
                    "[rank ", b.rank(),
                    "] ddp: step 3, bucket 1 (1 KiB, 1 parameter fc2.weight) "
                    "P allreduce failed after ")));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("injected failure (bucket 1 P allreduce)"));
  });
}

// A run stopped after step 3 and resumed as a checkpoint resumes it (rank
// 0's State loaded on every rank, each rank's own RankState loaded on it)
// continues with exactly the gradients of a run never stopped, on every rank
// of 2 and 3; every rank's State is the same bits. With a fresh per-rank
// state instead (what a resume at another world size gets), or rank 0's
// errors on every rank, it does not. With and without warm start (then the
// random state carries the difference).
TEST(PowerSgdHookTest, ResumeFromStateIsExact) {
  constexpr int kSteps = 6;
  constexpr int kStop = 3;
  using State = std::vector<std::pair<std::string, at::Tensor>>;
  enum class PerRank { kOwn, kFresh, kRankZeros };
  for (int ranks : {2, 3}) {
    for (bool warm_start : {true, false}) {
      std::mutex mu;
      std::vector<State> shared(ranks);
      std::vector<State> own(ranks);
      RunRanks(ranks, Gloo(), [&](backend::Backend& b) {
        auto run = [&](int from, int to, const State* load,
                       const State* load_rank, bool save) {
          Mlp model = MakeMlp();
          auto ddp =
              DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
          EXPECT_TRUE(ddp.ok()) << ddp.status();
          auto hook = Hook(1, 2, /*error_feedback=*/true, warm_start);
          EXPECT_TRUE((*ddp)->RegisterCommHook(hook).ok());
          if (load != nullptr) {
            absl::Status s = (*ddp)->comm_hook().LoadState(*load);
            EXPECT_TRUE(s.ok()) << s;
          }
          if (load_rank != nullptr) {
            absl::Status s = (*ddp)->comm_hook().LoadRankState(*load_rank);
            EXPECT_TRUE(s.ok()) << s;
          }
          std::vector<at::Tensor> grads;
          for (int step = from; step <= to; ++step) {
            Step(**ddp, model, StepInput(b.rank(), step));
            std::vector<at::Tensor> all;
            for (const auto& p : model->parameters())
              all.push_back(p.grad().reshape(-1));
            grads.push_back(at::cat(all));
          }
          if (save) {
            std::lock_guard<std::mutex> lock(mu);
            shared[b.rank()] = hook->State();
            own[b.rank()] = hook->RankState();
          }
          return grads;
        };
        const std::vector<at::Tensor> whole = run(1, kSteps, nullptr, nullptr,
                                                  /*save=*/false);
        run(1, kStop, nullptr, nullptr, /*save=*/true);
        // Every rank's state is in place before any rank reads another's.
        ASSERT_TRUE(b.Barrier()->Wait().ok());
        const std::string where = absl::StrCat(
            ranks, " ranks, rank ", b.rank(), warm_start ? ", warm" : ", cold");
        std::map<std::string, int> names;
        for (const auto& [name, t] : shared[0]) ++names[name];
        EXPECT_EQ(names.count("powersgd.bucket2.q"), warm_start ? 1u : 0u);
        EXPECT_EQ(names.count("powersgd.bucket2.error"), 0u);
        ASSERT_EQ(own[b.rank()].size(), 3u) << where;
        EXPECT_EQ(own[b.rank()][2].first, "powersgd.bucket2.error");
        ASSERT_EQ(shared[b.rank()].size(), shared[0].size());
        for (size_t i = 0; i < shared[0].size(); ++i) {
          EXPECT_EQ(shared[b.rank()][i].first, shared[0][i].first);
          EXPECT_TRUE(shared[b.rank()][i].second.equal(shared[0][i].second))
              << where << " " << shared[0][i].first;
        }
        if (b.rank() > 0) {
          EXPECT_FALSE(own[b.rank()][2].second.equal(own[0][2].second));
        }

        for (PerRank per_rank :
             {PerRank::kOwn, PerRank::kFresh, PerRank::kRankZeros}) {
          const State* load_rank = per_rank == PerRank::kOwn ? &own[b.rank()]
                                   : per_rank == PerRank::kRankZeros ? &own[0]
                                                                     : nullptr;
          const std::vector<at::Tensor> resumed =
              run(kStop + 1, kSteps, &shared[0], load_rank, /*save=*/false);
          if (per_rank != PerRank::kOwn) {
            EXPECT_FALSE(resumed.back().equal(whole.back())) << where;
            continue;
          }
          for (int i = 0; i < kSteps - kStop; ++i) {
            EXPECT_TRUE(resumed[i].equal(whole[kStop + i]))
                << where << ", step " << kStop + 1 + i;
          }
        }
      });
    }
  }
}

// LoadState and LoadRankState take nothing that does not fit, and change
// nothing then.
TEST(PowerSgdHookTest, LoadStateRefusesWhatDoesNotFit) {
  RunRanks(1, Gloo(), [&](backend::Backend& b) {
    std::vector<std::pair<std::string, at::Tensor>> state;
    std::vector<std::pair<std::string, at::Tensor>> rank_state;
    {
      Mlp model = MakeMlp();
      auto ddp =
          DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      auto hook = Hook(1);
      EXPECT_EQ(hook->LoadState({{"powersgd.iter",
                                  at::scalar_tensor(int64_t{3}, at::kLong)}})
                    .code(),
                absl::StatusCode::kFailedPrecondition);
      ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
      for (int step = 1; step <= 3; ++step)
        Step(**ddp, model, StepInput(0, step));
      state = hook->State();
      rank_state = hook->RankState();
    }
    Mlp model = MakeMlp();
    auto ddp = DistributedDataParallel::Create(model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto hook = Hook(1);
    ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
    auto refused = [&](std::vector<std::pair<std::string, at::Tensor>> s,
                       const std::string& message) {
      absl::Status status = hook->LoadState(s);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr(message));
      EXPECT_EQ(hook->iteration(), 0);
    };
    auto with = [&](const std::string& name, at::Tensor t) {
      auto s = state;
      for (auto& [n, v] : s) {
        if (n == name) v = t;
      }
      return s;
    };
    auto without = [&](const std::string& name) {
      auto s = state;
      s.erase(std::remove_if(s.begin(), s.end(),
                             [&](const auto& e) { return e.first == name; }),
              s.end());
      return s;
    };
    auto plus = [&](const std::string& name, at::Tensor t) {
      auto s = state;
      s.emplace_back(name, t);
      return s;
    };
    refused(plus("powersgd.bucket7.q", at::zeros({4})),
            "powersgd.bucket7.q names a bucket this model does not have");
    refused(plus("powersgd.p", at::zeros({4})),
            "powersgd.p is not an entry of the PowerSGD hook's state");
    refused(with("powersgd.bucket0.q", at::zeros({20}, at::kDouble)),
            "powersgd.bucket0.q has 20 float64 elements");
    refused(with("powersgd.rng", at::full({625}, -1, at::kLong)),
            "powersgd.rng has key word 0 = -1");
    refused(without("powersgd.iter"), "powersgd.iter is missing");
    refused(plus("powersgd.bucket1.error", at::zeros({3})),
            "powersgd.bucket1.error has 3 float32 elements; this bucket needs "
            "256 float32");
    EXPECT_TRUE(hook->LoadState(state).ok());
    EXPECT_EQ(hook->iteration(), 3);

    // The per-rank part: errors only, each fitting its bucket; nothing
    // changes when one does not fit.
    auto refused_rank = [&](std::vector<std::pair<std::string, at::Tensor>> s,
                            const std::string& message) {
      absl::Status status = hook->LoadRankState(s);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr(message));
      EXPECT_TRUE(hook->RankState().empty());
    };
    ASSERT_EQ(rank_state.size(), 3u);
    auto rank_with = [&](size_t i, at::Tensor t) {
      auto s = rank_state;
      s[i].second = t;
      return s;
    };
    refused_rank(rank_with(1, at::zeros({3})),
                 "powersgd.bucket1.error has 3 float32 elements; this bucket "
                 "needs 256 float32");
    at::Tensor q0;
    for (const auto& [name, t] : state) {
      if (name == "powersgd.bucket0.q") q0 = t;
    }
    refused_rank({{"powersgd.bucket0.q", q0}},
                 "powersgd.bucket0.q is shared state (State), not per-rank "
                 "state (RankState)");
    refused_rank({{"powersgd.iter", at::scalar_tensor(int64_t{3}, at::kLong)}},
                 "powersgd.iter is not an entry of the PowerSGD hook's state");
    EXPECT_TRUE(hook->LoadRankState(rank_state).ok());
    const auto loaded = hook->RankState();
    ASSERT_EQ(loaded.size(), rank_state.size());
    for (size_t i = 0; i < loaded.size(); ++i)
      EXPECT_TRUE(loaded[i].second.equal(rank_state[i].second));

    // A state written before the split holds the errors beside the rest:
    // LoadState still takes them.
    Mlp old_model = MakeMlp();
    auto old_ddp =
        DistributedDataParallel::Create(old_model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(old_ddp.ok()) << old_ddp.status();
    auto old_format = Hook(1);
    ASSERT_TRUE((*old_ddp)->RegisterCommHook(old_format).ok());
    auto combined = state;
    combined.insert(combined.end(), rank_state.begin(), rank_state.end());
    EXPECT_TRUE(old_format->LoadState(combined).ok());
    EXPECT_EQ(old_format->RankState().size(), 3u);

    // A state with Q for a hook without warm start.
    Mlp cold_model = MakeMlp();
    auto cold_ddp =
        DistributedDataParallel::Create(cold_model.ptr(), b, ThreeBuckets());
    ASSERT_TRUE(cold_ddp.ok()) << cold_ddp.status();
    auto cold = Hook(1, 2, /*error_feedback=*/true, /*warm_start=*/false);
    ASSERT_TRUE((*cold_ddp)->RegisterCommHook(cold).ok());
    absl::Status s = cold->LoadState(state);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("powersgd.bucket0.q is there but warm_start is off"));
  });
}

}  // namespace
}  // namespace dtrain::ddp::hooks
