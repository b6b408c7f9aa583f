// Gloo backend correctness with ranks as threads: every operation and dtype,
// element counts from 0 to 1M+3, world sizes 1 to 8, every allreduce algorithm;
// fill values derived from rank and index so that each expected result has a
// closed form. Then argument errors and timeouts.

#include "dist/backend/gloo/gloo_backend.h"

#include <ATen/ATen.h>

#include <atomic>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;
using testing::RunRanks;

constexpr at::ScalarType kDtypes[] = {at::kFloat,    at::kDouble, at::kHalf,
                                      at::kBFloat16, at::kInt,    at::kLong,
                                      at::kByte,     at::kChar};
constexpr int64_t kCounts[] = {0, 1, 7, 1023};

testing::BackendFactory Gloo(GlooAlgorithm algorithm = GlooAlgorithm::kAuto,
                             absl::Duration timeout = absl::Seconds(60)) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    Membership group;
    group.rank = rank;
    group.world_size = world_size;
    group.store = std::move(store);
    group.timeout = timeout;
    GlooBackendOptions o;
    o.hostname = "127.0.0.1";
    o.algorithm = algorithm;
    return CreateGlooBackend(group, o);
  };
}

at::Tensor Index(int64_t n) { return at::arange(n, at::kLong); }

// Rank r holds (r + 1) + (i % 3): sums of up to 8 ranks fit every dtype
// exactly.
at::Tensor Fill(int rank, int64_t n, at::ScalarType dtype) {
  return (Index(n).remainder(3) + (rank + 1)).to(dtype);
}

// For products: 1 or 2, so that a product over 8 ranks is at most 256... and
// fits int8 only up to 64, hence the dtype-dependent world-size check below.
at::Tensor ProductFill(int rank, int64_t n, at::ScalarType dtype) {
  return ((Index(n) + rank).remainder(2) + 1).to(dtype);
}

at::Tensor Expected(ReduceOp op, int w, int64_t n) {
  at::Tensor m = Index(n).remainder(3).to(at::kDouble);
  switch (op) {
    case ReduceOp::kSum:
      return m * w + w * (w + 1) / 2.0;
    case ReduceOp::kAverage:
      return m + (w + 1) / 2.0;
    case ReduceOp::kMin:
      return m + 1;
    case ReduceOp::kMax:
      return m + w;
    case ReduceOp::kProduct: {
      at::Tensor p = at::ones({n}, at::kDouble);
      for (int r = 0; r < w; ++r)
        p *= ((Index(n) + r).remainder(2) + 1).to(at::kDouble);
      return p;
    }
  }
  return {};
}

void ExpectEqual(const at::Tensor& got, const at::Tensor& want,
                 const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  if (got.numel() == 0) return;
  const at::Tensor diff =
      (got.to(at::kDouble).view({-1}) - want.view({-1})).abs();
  EXPECT_EQ(diff.max().item<double>(), 0.0)
      << what << ": first mismatch at " << diff.argmax().item<int64_t>();
}

bool ProductFits(at::ScalarType dtype, int w) {
  // 2^w must be exact: int8 holds 64, uint8 128, float16/bfloat16 any power of
  // two in range.
  return !((dtype == at::kChar && w > 6) || (dtype == at::kByte && w > 7));
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, AllReduceEveryOpDtypeAndCount) {
  const int w = GetParam();
  RunRanks(w, Gloo(), [&](Backend& b) {
    for (at::ScalarType dtype : kDtypes) {
      for (int64_t n : kCounts) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                            ReduceOp::kMax, ReduceOp::kProduct}) {
          if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
          if (op == ReduceOp::kProduct && !ProductFits(dtype, w)) continue;
          at::Tensor t = op == ReduceOp::kProduct
                             ? ProductFill(b.rank(), n, dtype)
                             : Fill(b.rank(), n, dtype);
          const std::string what =
              absl::StrCat("rank ", b.rank(), " allreduce ", ReduceOpName(op),
                           " ", c10::toString(dtype), " n=", n);
          {
            absl::Status s = b.AllReduce(t, op)->Wait();
            ASSERT_TRUE(s.ok()) << what << ": " << s;
          }
          ExpectEqual(t, Expected(op, w, n), what);
        }
      }
    }
  });
}

TEST_P(GlooCollectivesTest, BroadcastAllGatherReduceScatterBarrier) {
  const int w = GetParam();
  RunRanks(w, Gloo(), [&](Backend& b) {
    const int r = b.rank();
    for (at::ScalarType dtype : kDtypes) {
      for (int64_t n : kCounts) {
        const std::string what =
            absl::StrCat("rank ", r, " ", c10::toString(dtype), " n=", n);
        // Broadcast from the last rank.
        at::Tensor t = Fill(r, n, dtype);
        ASSERT_TRUE(b.Broadcast(t, w - 1)->Wait().ok()) << what;
        ExpectEqual(t, Fill(w - 1, n, dtype).to(at::kDouble),
                    "broadcast " + what);
        // AllGather: slot p holds rank p's fill.
        std::vector<at::Tensor> outputs;
        for (int p = 0; p < w; ++p) outputs.push_back(at::zeros({n}, dtype));
        ASSERT_TRUE(b.AllGather(outputs, Fill(r, n, dtype))->Wait().ok())
            << what;
        for (int p = 0; p < w; ++p) {
          ExpectEqual(outputs[p], Fill(p, n, dtype).to(at::kDouble),
                      "allgather " + what);
        }
        // Into outputs back to back in one tensor (gathered in place), from
        // a separate input and from this rank's own output.
        for (bool own : {false, true}) {
          at::Tensor whole = at::zeros({w * n}, dtype);
          std::vector<at::Tensor> parts;
          for (int p = 0; p < w; ++p)
            parts.push_back(whole.narrow(0, p * n, n));
          at::Tensor input = Fill(r, n, dtype);
          if (own) {
            parts[r].copy_(input);
            input = parts[r];
          }
          ASSERT_TRUE(b.AllGather(parts, input)->Wait().ok()) << what;
          for (int p = 0; p < w; ++p) {
            ExpectEqual(parts[p], Fill(p, n, dtype).to(at::kDouble),
                        absl::StrCat("allgather back to back",
                                     own ? " in place " : " ", what));
          }
        }
        // ReduceScatter: rank r's input for slot p is Fill(r) + p; rank p
        // receives the sum.
        std::vector<at::Tensor> inputs;
        for (int p = 0; p < w; ++p)
          inputs.push_back((Fill(r, n, at::kLong) + p).to(dtype));
        at::Tensor out = at::zeros({n}, dtype);
        ASSERT_TRUE(b.ReduceScatter(out, inputs)->Wait().ok()) << what;
        ExpectEqual(out, Expected(ReduceOp::kSum, w, n) + w * r,
                    "reduce_scatter " + what);
        // The other reductions: each slot's offset p passes through.
        for (ReduceOp op :
             {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAverage}) {
          if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
          ASSERT_TRUE(b.ReduceScatter(out, inputs, op)->Wait().ok()) << what;
          ExpectEqual(
              out, Expected(op, w, n) + r,
              absl::StrCat("reduce_scatter ", ReduceOpName(op), " ", what));
        }
        // In place: the inputs back to back in one tensor, the output this
        // rank's own part of it.
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
          at::Tensor whole = at::cat(inputs);
          std::vector<at::Tensor> parts;
          for (int p = 0; p < w; ++p)
            parts.push_back(whole.narrow(0, p * n, n));
          ASSERT_TRUE(b.ReduceScatter(parts[r], parts, op)->Wait().ok())
              << what;
          ExpectEqual(parts[r],
                      Expected(op, w, n) + (op == ReduceOp::kSum ? w * r : r),
                      absl::StrCat("reduce_scatter in place ", ReduceOpName(op),
                                   " ", what));
        }
      }
    }
    ASSERT_TRUE(b.Barrier()->Wait().ok());
  });
}

// Every operation and dtype once more at a large, odd size (1M+3 elements), on
// 3 ranks.
TEST(GlooLargeMessageTest, EveryOperationAndDtypeAtOneMillionPlusThree) {
  constexpr int w = 3;
  constexpr int64_t n = (1 << 20) + 3;
  RunRanks(w, Gloo(), [&](Backend& b) {
    const int r = b.rank();
    for (at::ScalarType dtype : kDtypes) {
      const std::string what =
          absl::StrCat("rank ", r, " ", c10::toString(dtype));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                          ReduceOp::kMax, ReduceOp::kProduct}) {
        if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
        at::Tensor t = op == ReduceOp::kProduct ? ProductFill(r, n, dtype)
                                                : Fill(r, n, dtype);
        absl::Status s = b.AllReduce(t, op)->Wait();
        ASSERT_TRUE(s.ok()) << what << ": " << s;
        ExpectEqual(t, Expected(op, w, n),
                    absl::StrCat("allreduce ", ReduceOpName(op), " ", what));
      }
      at::Tensor t = Fill(r, n, dtype);
      ASSERT_TRUE(b.Broadcast(t, 1)->Wait().ok()) << what;
      ExpectEqual(t, Fill(1, n, dtype).to(at::kDouble), "broadcast " + what);
      std::vector<at::Tensor> outputs;
      for (int p = 0; p < w; ++p) outputs.push_back(at::zeros({n}, dtype));
      ASSERT_TRUE(b.AllGather(outputs, Fill(r, n, dtype))->Wait().ok()) << what;
      for (int p = 0; p < w; ++p) {
        ExpectEqual(outputs[p], Fill(p, n, dtype).to(at::kDouble),
                    "allgather " + what);
      }
      std::vector<at::Tensor> inputs;
      for (int p = 0; p < w; ++p)
        inputs.push_back((Fill(r, n, at::kLong) + p).to(dtype));
      at::Tensor out = at::zeros({n}, dtype);
      ASSERT_TRUE(b.ReduceScatter(out, inputs)->Wait().ok()) << what;
      ExpectEqual(out, Expected(ReduceOp::kSum, w, n) + w * r,
                  "reduce_scatter " + what);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectivesTest,
                         ::testing::Range(1, 9), [](const auto& info) {
                           return absl::StrCat("w", info.param);
                         });

class GlooAlgorithmTest
    : public ::testing::TestWithParam<std::tuple<GlooAlgorithm, int>> {};

TEST_P(GlooAlgorithmTest, LargeAndOddSizedAllReduce) {
  const auto [algorithm, w] = GetParam();
  if (algorithm == GlooAlgorithm::kBcube && (w & (w - 1)) != 0) {
    GTEST_SKIP() << "bcube needs a power-of-2 world size (see BcubeRejects...)";
  }
  RunRanks(w, Gloo(algorithm), [&](Backend& b) {
    for (int64_t n : {int64_t{1}, int64_t{1023}, int64_t{(1 << 20) + 3}}) {
      for (at::ScalarType dtype : {at::kFloat, at::kLong, at::kHalf}) {
        at::Tensor t = Fill(b.rank(), n, dtype);
        const std::string what =
            absl::StrCat(GlooAlgorithmName(algorithm), " w=", w, " n=", n, " ",
                         c10::toString(dtype));
        {
          absl::Status s = b.AllReduce(t, ReduceOp::kSum)->Wait();
          ASSERT_TRUE(s.ok()) << what << ": " << s;
        }
        ExpectEqual(t, Expected(ReduceOp::kSum, w, n), what);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, GlooAlgorithmTest,
    ::testing::Combine(::testing::Values(GlooAlgorithm::kRing,
                                         GlooAlgorithm::kRingChunked,
                                         GlooAlgorithm::kHalvingDoubling,
                                         GlooAlgorithm::kBcube),
                       ::testing::Values(2, 3, 4, 8)),
    [](const auto& info) {
      return absl::StrCat(GlooAlgorithmName(std::get<0>(info.param)), "_w",
                          std::get<1>(info.param));
    });

TEST(GlooBackendTest, ArgumentErrorsAreClear) {
  RunRanks(2, Gloo(), [&](Backend& b) {
    auto expect_invalid = [](const std::shared_ptr<Work>& work,
                             const std::string& text) {
      ASSERT_TRUE(work->IsCompleted());
      absl::Status s = work->Wait();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr(text));
    };
    expect_invalid(b.AllReduce(at::ones({4}, at::kBool)),
                   "does not support dtype bool");
    expect_invalid(b.AllReduce(at::ones({4}, at::kComplexFloat)),
                   "supported: float32");
    expect_invalid(b.AllReduce(at::ones({4, 4}).t()), "contiguous");
    expect_invalid(b.AllReduce(at::Tensor()), "undefined tensor");
    expect_invalid(b.AllReduce(at::ones({4}, at::kInt), ReduceOp::kAverage),
                   "average of int32");
    expect_invalid(b.Broadcast(at::ones({4}), 2), "root 2 is outside [0, 2)");
    expect_invalid(b.AllGather({at::ones({4})}, at::ones({4})),
                   "one tensor per rank (2), got 1");
    expect_invalid(b.AllGather({at::ones({4}), at::ones({5})}, at::ones({4})),
                   "tensor 1");
    expect_invalid(b.ReduceScatter(at::ones({4}),
                                   {at::ones({4}), at::ones({4}, at::kDouble)}),
                   "tensor 1");
    // A rejected call issues nothing: the ranks are still in step afterwards.
    at::Tensor t = at::ones({3});
    ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
    ExpectEqual(t, at::full({3}, 2.0, at::kDouble), "after errors");
  });
}

TEST(GlooBackendTest, WorkIsAsynchronousAndOrdered) {
  RunRanks(3, Gloo(), [&](Backend& b) {
    std::vector<at::Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 20; ++i) {
      tensors.push_back(at::full({257}, static_cast<double>(i), at::kFloat));
      works.push_back(b.AllReduce(tensors.back()));
    }
    for (int i = 19; i >= 0; --i) {
      ASSERT_TRUE(works[i]->Wait(absl::Seconds(60)).ok());
      ExpectEqual(tensors[i], at::full({257}, 3.0 * i, at::kDouble),
                  absl::StrCat("work ", i));
    }
  });
}

TEST(GlooBackendTest, MissingPeerTimesOutNamingTheOperation) {
  // Rank 1 stays connected but issues nothing: rank 0's allreduce fails with
  // Gloo's timeout, and so does every later call.
  testing::Notification rank0_done;
  RunRanks(
      2, Gloo(GlooAlgorithm::kAuto, absl::Milliseconds(500)), [&](Backend& b) {
        if (b.rank() == 1) {
          rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60));
          return;
        }
        absl::Status s =
            b.AllReduce(at::ones({1000}), ReduceOp::kSum, "bucket 3")->Wait();
        EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
        const std::string m(s.message());
        EXPECT_THAT(m, HasSubstr("[rank 0] gloo allreduce #1 (sum, 1000 "
                                 "x float32 = 3.91 KiB"));
        EXPECT_THAT(m, HasSubstr("bucket 3"));
        EXPECT_THAT(m, HasSubstr("failed after"));
        absl::Status later = b.Barrier()->Wait(absl::Seconds(10));
        EXPECT_FALSE(later.ok());
        EXPECT_THAT(std::string(later.message()),
                    HasSubstr("barrier #2 not run"));
        rank0_done.Notify();
      });
}

TEST(GlooBackendTest, WaitWithTimeoutReturnsWhileStillRunning) {
  testing::Notification rank0_done;
  RunRanks(2, Gloo(GlooAlgorithm::kAuto, absl::Seconds(2)), [&](Backend& b) {
    if (b.rank() == 1) {
      rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60));
      return;
    }
    std::shared_ptr<Work> work = b.AllReduce(at::ones({10}));
    absl::Status s = work->Wait(absl::Milliseconds(50));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_FALSE(work->IsCompleted());
    EXPECT_FALSE(work->Wait().ok());  // Then Gloo's own timeout ends it.
    rank0_done.Notify();
  });
}

// Model averaging: parameters require grad, and the backend writes into them in
// place.
TEST(GlooBackendTest, AveragesTensorsThatRequireGrad) {
  RunRanks(2, Gloo(), [&](Backend& b) {
    at::Tensor p = at::full({5}, b.rank() + 1.0).set_requires_grad(true);
    absl::Status s = b.AllReduce(p, ReduceOp::kAverage)->Wait();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(at::allclose(p.detach(), at::full({5}, 1.5)));
  });
}

TEST(GlooBackendTest, RejectsSparseTensors) {
  RunRanks(1, Gloo(), [&](Backend& b) {
    absl::Status s = b.AllReduce(at::ones({4}).to_sparse())->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("dense (strided)"));
  });
}

// A second backend over the same store gets its own namespace (PyTorch's
// process groups likewise).
TEST(GlooBackendTest, BackendsCreatedOneAfterAnotherOverOneStoreDoNotClash) {
  auto store = std::make_shared<store::HashStore>(absl::Seconds(30));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      for (int generation = 0; generation < 3; ++generation) {
        auto b = Gloo()(rank, 2, store);
        if (!b.ok()) {
          ADD_FAILURE() << b.status();
          return;
        }
        at::Tensor t = at::ones({3});
        if ((*b)->AllReduce(t)->Wait().ok() &&
            at::allclose(t, at::full({3}, 2.0)))
          ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
}

// Gloo's bcube returns wrong sums at world size 3 instead of failing: the
// backend must refuse it.
TEST(GlooBackendTest, BcubeRejectsWorldSizesThatAreNotPowersOfTwo) {
  Membership group;
  group.world_size = 3;
  group.store = std::make_shared<store::HashStore>();
  GlooBackendOptions o;
  o.algorithm = GlooAlgorithm::kBcube;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateGlooBackend(group, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("power of 2"));
}

// Two Gloo ranks, as threads, whose collectives wait an hour.
void TwoRanksWithAnHourTimeout(std::unique_ptr<Backend> (&backends)[2]) {
  auto store = std::make_shared<store::HashStore>(absl::Seconds(60));
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      absl::StatusOr<std::unique_ptr<Backend>> b =
          Gloo(GlooAlgorithm::kAuto, absl::Hours(1))(r, 2, store);
      ASSERT_TRUE(b.ok()) << b.status();
      backends[r] = *std::move(b);
    });
  }
  for (std::thread& t : threads) t.join();
}

// An abort breaks this rank's backend for every later collective, and its
// destruction then does not wait for its peer to leave too (without the
// abort it would, for a minute: the timeout is an hour here).
TEST(GlooBackendTest, AbortFailsLaterCollectivesAndSkipsTheExitWait) {
  std::unique_ptr<Backend> backends[2];
  TwoRanksWithAnHourTimeout(backends);
  ASSERT_TRUE(backends[0] && backends[1]);
  backends[1]->Abort(absl::AbortedError("the caller gave up"));
  const absl::Status s = backends[1]->AllReduce(at::ones({4}))->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("[rank 1] gloo allreduce #1 (sum, 4 x float32 = 16 B, "
                        "ring) not run: the caller gave up"));
  const absl::Time start = absl::Now();
  backends[1].reset();  // Rank 0 is alive and has not left.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  backends[0].reset();  // Rank 1 said it was leaving: no wait either.
}

// A rank that aborts and lives on (an elastic run forming its next
// generation) closes its connections: a peer waiting in a collective it will
// never join fails at once, naming it, not at the hour's timeout.
TEST(GlooBackendTest, AbortFailsThePeersWaitingCollective) {
  std::unique_ptr<Backend> backends[2];
  TwoRanksWithAnHourTimeout(backends);
  ASSERT_TRUE(backends[0] && backends[1]);
  std::shared_ptr<Work> waiting = backends[0]->AllReduce(at::ones({4}));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(waiting->IsCompleted());
  backends[1]->Abort(absl::AbortedError("the caller gave up"));
  const absl::Status s = waiting->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer: rank 1"));
  backends[1].reset();
  backends[0].reset();
}

TEST(GlooAlgorithmNameTest, ParsesKnownNamesAndListsThemOtherwise) {
  EXPECT_EQ(*ParseGlooAlgorithm("ring_chunked"), GlooAlgorithm::kRingChunked);
  absl::StatusOr<GlooAlgorithm> bad = ParseGlooAlgorithm("tree");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("halving_doubling"));
  EXPECT_EQ(ChooseGlooAllReduceAlgorithm(4, 4), GlooAlgorithm::kRing);
  EXPECT_EQ(ChooseGlooAllReduceAlgorithm(64 << 20, 4), GlooAlgorithm::kRing);
  EXPECT_EQ(ChooseGlooAllReduceAlgorithm(4, 32),
            GlooAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseGlooAllReduceAlgorithm(64 << 20, 32), GlooAlgorithm::kRing);
}

}  // namespace
}  // namespace dtrain::backend
