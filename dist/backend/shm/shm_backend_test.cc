// The shared-memory backend with ranks as threads: every collective against
// closed forms, every dtype, chunking (slots far smaller than the messages)
// that changes nothing, bit-identical results on every rank and for any slot
// size, argument errors, and a rank that leaves.

#include "dist/backend/shm/shm_backend.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

testing::BackendFactory Shm(int64_t slot_bytes = int64_t{4} << 20,
                            absl::Duration timeout = absl::Seconds(60)) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    ShmBackendOptions o;
    o.rank = rank;
    o.world_size = world_size;
    o.store = std::move(store);
    o.slot_bytes = slot_bytes;
    o.timeout = timeout;
    return CreateShmBackend(o);
  };
}

TEST(ShmBackendTest, CollectivesOnEveryDtype) {
  for (int w : {1, 2, 3, 4}) {
    // 256-byte slots: every message but the smallest goes in many chunks.
    testing::RunRanks(w, Shm(256), [&](Backend& b) {
      EXPECT_EQ(b.name(), "shm");
      for (at::ScalarType dtype :
           {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt,
            at::kLong, at::kChar, at::kByte}) {
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{1000}}) {
          at::Tensor i = at::arange(n, at::kLong).remainder(5);
          at::Tensor t = (i + b.rank() + 1).to(dtype);
          ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
          EXPECT_TRUE(at::equal(t.to(at::kLong), i * w + w * (w + 1) / 2))
              << c10::toString(dtype) << " n=" << n << " w=" << w;
          at::Tensor m = (i + b.rank()).to(dtype);
          ASSERT_TRUE(b.AllReduce(m, ReduceOp::kMax)->Wait().ok());
          EXPECT_TRUE(at::equal(m.to(at::kLong), i + (w - 1)));
          at::Tensor c = at::full({n}, b.rank(), dtype);
          ASSERT_TRUE(b.Broadcast(c, w - 1)->Wait().ok());
          EXPECT_TRUE(at::equal(c, at::full({n}, w - 1, dtype)));
          std::vector<at::Tensor> outs;
          for (int r = 0; r < w; ++r) outs.push_back(at::empty({n}, dtype));
          ASSERT_TRUE(
              b.AllGather(outs, (i + 10 * b.rank()).to(dtype))->Wait().ok());
          for (int r = 0; r < w; ++r) {
            EXPECT_TRUE(at::equal(outs[r].to(at::kLong), i + 10 * r));
          }
          // inputs[r] = i + rank + r: rank r keeps the sum over ranks.
          std::vector<at::Tensor> inputs;
          for (int r = 0; r < w; ++r) {
            inputs.push_back((i + b.rank() + r).to(dtype));
          }
          at::Tensor out = at::empty({n}, dtype);
          ASSERT_TRUE(b.ReduceScatter(out, inputs)->Wait().ok());
          EXPECT_TRUE(at::equal(out.to(at::kLong),
                                i * w + w * (w - 1) / 2 + w * b.rank()));
        }
      }
      ASSERT_TRUE(b.Barrier()->Wait().ok());
    });
  }
}

// Deterministic values of every magnitude, different per rank.
at::Tensor Values(int64_t n, int rank) {
  return at::sin(at::arange(n, at::kFloat) * 0.37f * (rank + 1)) *
         std::pow(10.0f, rank);
}

// Collectives of every kind back to back, in many chunks: none may overwrite
// memory a slower rank is still reading (the two-barrier schedule's rule).
TEST(ShmBackendTest, InterleavedCollectivesStayCorrect) {
  constexpr int kRanks = 3;
  testing::RunRanks(kRanks, Shm(64), [&](Backend& b) {
    for (int round = 0; round < 150; ++round) {
      const int64_t n = 1 + (round * 37) % 200;
      at::Tensor i = at::arange(n, at::kFloat);
      at::Tensor t = i + b.rank() + round;
      ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
      ASSERT_TRUE(at::equal(t, i * kRanks + 3 + kRanks * round))
          << "round " << round;
      const int root = round % kRanks;
      at::Tensor c = i * (b.rank() + 1) + round;
      ASSERT_TRUE(b.Broadcast(c, root)->Wait().ok());
      ASSERT_TRUE(at::equal(c, i * (root + 1) + round)) << "round " << round;
      std::vector<at::Tensor> outs;
      for (int r = 0; r < kRanks; ++r) outs.push_back(at::empty({n}));
      ASSERT_TRUE(b.AllGather(outs, i - b.rank())->Wait().ok());
      for (int r = 0; r < kRanks; ++r) {
        ASSERT_TRUE(at::equal(outs[r], i - r)) << "round " << round;
      }
      std::vector<at::Tensor> inputs;
      for (int r = 0; r < kRanks; ++r) inputs.push_back(i * (r + 1));
      at::Tensor out = at::empty({n});
      ASSERT_TRUE(b.ReduceScatter(out, inputs)->Wait().ok());
      ASSERT_TRUE(at::equal(out, i * (b.rank() + 1) * kRanks))
          << "round " << round;
    }
  });
}

TEST(ShmBackendTest, AverageAndBitIdenticalResultsForAnySlotSize) {
  constexpr int kRanks = 3;
  const int64_t n = 100003;
  std::mutex mu;
  std::map<int64_t, std::vector<at::Tensor>> results;  // slot -> per rank
  for (int64_t slot : {int64_t{64}, int64_t{4096}, int64_t{4} << 20}) {
    testing::RunRanks(kRanks, Shm(slot), [&](Backend& b) {
      at::Tensor t = Values(n, b.rank());
      at::Tensor h = t.to(at::kBFloat16);
      ASSERT_TRUE(b.AllReduce(t, ReduceOp::kAverage)->Wait().ok());
      ASSERT_TRUE(b.AllReduce(h, ReduceOp::kAverage)->Wait().ok());
      std::lock_guard<std::mutex> lock(mu);
      auto& v = results[slot];
      v.resize(2 * kRanks);
      v[b.rank()] = t;
      v[kRanks + b.rank()] = h;
    });
  }
  const std::vector<at::Tensor>& first = results.begin()->second;
  // The expected average, in rank order, computed here.
  const at::Tensor want = (Values(n, 0) + Values(n, 1) + Values(n, 2)) / kRanks;
  EXPECT_TRUE(at::allclose(first[0], want, 1e-6, 1e-5));
  for (const auto& [slot, v] : results) {
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(at::equal(v[r], first[0]))
          << "slot " << slot << " rank " << r;
      EXPECT_TRUE(at::equal(v[kRanks + r], first[kRanks]))
          << "bfloat16, slot " << slot << " rank " << r;
    }
  }
}

TEST(ShmBackendTest, BadArgumentsFailTheWorkNotTheBackend) {
  testing::RunRanks(2, Shm(), [&](Backend& b) {
    absl::Status s =
        b.AllReduce(at::ones({4}, at::kInt), ReduceOp::kAverage)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    s = b.AllReduce(at::ones({4, 4}).t())->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    s = b.Broadcast(at::ones({4}), 2)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    // Still healthy.
    at::Tensor t = at::ones({4});
    ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
    EXPECT_TRUE(at::equal(t, at::full({4}, 2.0)));
  });
}

TEST(ShmBackendTest, RefusesBadOptions) {
  ShmBackendOptions o;
  EXPECT_EQ(CreateShmBackend(o).status().code(),
            absl::StatusCode::kInvalidArgument);  // No store.
  o.store = std::make_shared<store::HashStore>();
  o.slot_bytes = 100;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateShmBackend(o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("slot_bytes 100"));
  o.slot_bytes = 4096;
  o.world_size = 1000;
  EXPECT_EQ(CreateShmBackend(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An abort from another thread ends the collective this rank's peers wait
// in at once (not at the one-hour timeout), and fails this rank's later
// collectives with the reason.
TEST(ShmBackendTest, AbortFromAnotherThreadFailsThePeersAtOnce) {
  testing::Notification rank0_waiting;
  testing::RunRanks(2, Shm(4096, absl::Hours(1)), [&](Backend& b) {
    if (b.rank() == 1) {
      ASSERT_TRUE(
          rank0_waiting.WaitForNotificationWithTimeout(absl::Minutes(1)));
      b.Abort(absl::AbortedError("the caller gave up"));
      const absl::Status s = b.Barrier()->Wait();
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr("[rank 1] shm barrier #1 not run: the caller "
                            "gave up"));
      return;
    }
    std::shared_ptr<Work> w = b.AllReduce(at::ones({8}));
    rank0_waiting.Notify();
    const absl::Status s = w->Wait(absl::Minutes(1));
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1 gave up"));
  });
}

TEST(ShmBackendTest, MissingPeerTimesOutNamingIt) {
  testing::Notification rank0_done;
  testing::RunRanks(3, Shm(4096, absl::Seconds(1)), [&](Backend& b) {
    if (b.rank() == 2) {
      // Joins, then never issues the collective.
      ASSERT_TRUE(rank0_done.WaitForNotificationWithTimeout(absl::Minutes(1)));
      return;
    }
    const absl::Status s =
        b.AllReduce(at::ones({8}), ReduceOp::kSum, "bucket 0")->Wait();
    EXPECT_THAT(
        std::string(s.message()),
        HasSubstr(absl::StrCat("[rank ", b.rank(),
                               "] shm allreduce #1 (sum, 8 x float32")));
    // Rank 0 or 1 times out first, naming rank 2; the other may learn of it
    // from the first giving up.
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 2 has not arrived") ||
                absl::StrContains(s.message(), "gave up"))
        << s;
    const absl::Status later = b.Barrier()->Wait();
    EXPECT_THAT(std::string(later.message()), HasSubstr("not run"));
    if (b.rank() == 0) rank0_done.Notify();
  });
}

}  // namespace
}  // namespace dtrain::backend
