// The shared-memory backend with ranks as threads: every collective against
// closed forms, every dtype, chunking (slots far smaller than the messages)
// that changes nothing, bit-identical results on every rank and for any slot
// size, argument errors, and a rank that leaves. Buffers from AllocateBuffer:
// the zero-copy allreduce gives the copying path's bits for every dtype and
// op, interleaves with the other collectives, falls back for tensors only
// partly in a buffer, and refuses ranks that disagree.

#include "dist/backend/shm/shm_backend.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/shm/shm_testing.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;
using testing::OpValues;
using testing::SameBytes;
using testing::Shm;
using testing::Values;

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

// Collectives of every kind back to back, in many chunks: none may overwrite
// memory a slower rank is still reading (the two-barrier schedule's rule),
// including the zero-copy allreduces of parts of a shared buffer, which
// other ranks read and write.
TEST(ShmBackendTest, InterleavedCollectivesStayCorrect) {
  constexpr int kRanks = 3;
  testing::RunRanks(kRanks, Shm(64), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(300, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    for (int round = 0; round < 150; ++round) {
      const int64_t n = 1 + (round * 37) % 200;
      at::Tensor i = at::arange(n, at::kFloat);
      at::Tensor t = i + b.rank() + round;
      ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
      ASSERT_TRUE(at::equal(t, i * kRanks + 3 + kRanks * round))
          << "round " << round;
      // Two parts of the buffer back to back, at offsets that move.
      at::Tensor part = buffer->narrow(0, round % 50, n);
      part.copy_(i - b.rank() + round);
      at::Tensor rest = buffer->narrow(0, round % 50 + n, 250 - n - round % 50);
      rest.fill_(b.rank());
      ASSERT_TRUE(b.AllReduce(part)->Wait().ok());
      ASSERT_TRUE(b.AllReduce(rest, ReduceOp::kMax)->Wait().ok());
      ASSERT_TRUE(at::equal(part, i * kRanks - 3 + kRanks * round))
          << "round " << round;
      ASSERT_TRUE(at::equal(rest, at::full_like(rest, kRanks - 1)))
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

TEST(ShmBackendTest, BufferAllReduceHasTheCopyingPathsBits) {
  const std::vector<at::ScalarType> dtypes = {
      at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
      at::kInt,   at::kLong,   at::kChar, at::kByte};
  for (int w : {1, 2, 3, 4}) {
    // 256-byte slots: the copying path goes in many chunks.
    testing::RunRanks(w, Shm(256), [&](Backend& b) {
      const int64_t before = ShmZeroCopyCollectivesForTesting(b);
      int64_t expected_zero_copy = 0;
      for (at::ScalarType dtype : dtypes) {
        absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(5000, dtype);
        ASSERT_TRUE(buffer.ok()) << buffer.status();
        ASSERT_EQ(buffer->scalar_type(), dtype);
        ASSERT_TRUE(at::equal(*buffer, at::zeros({5000}, dtype)));
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                            ReduceOp::kMax, ReduceOp::kProduct}) {
          if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
          for (int64_t n : {int64_t{1}, int64_t{77}, int64_t{4999}}) {
            const at::Tensor values = OpValues(n, b.rank(), dtype);
            at::Tensor copied = values.clone();
            // An odd offset: shares start off 64-element boundaries.
            at::Tensor shared = buffer->narrow(0, 5000 - n, n);
            shared.copy_(values);
            ASSERT_TRUE(b.AllReduce(copied, op)->Wait().ok());
            ASSERT_TRUE(b.AllReduce(shared, op)->Wait().ok());
            ++expected_zero_copy;
            EXPECT_TRUE(SameBytes(shared, copied))
                << c10::toString(dtype) << " " << ReduceOpName(op) << " n=" << n
                << " w=" << w << " rank " << b.rank();
          }
        }
      }
      EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b) - before,
                expected_zero_copy);
    });
  }
}

// A broadcast of a part of a buffer copies straight from the root's buffer:
// every rank gets the root's bytes, from every root, for every dtype.
TEST(ShmBackendTest, BufferBroadcastFromEveryRoot) {
  for (int w : {1, 2, 3, 4}) {
    testing::RunRanks(w, Shm(256), [&](Backend& b) {
      const int64_t before = ShmZeroCopyCollectivesForTesting(b);
      int64_t expected_zero_copy = 0;
      for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kLong}) {
        absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(3000, dtype);
        ASSERT_TRUE(buffer.ok()) << buffer.status();
        for (int root = 0; root < w; ++root) {
          // Past a slot, at an odd offset.
          at::Tensor part = buffer->narrow(0, 7, 2900);
          part.copy_(OpValues(2900, b.rank(), dtype));
          ASSERT_TRUE(b.Broadcast(part, root)->Wait().ok());
          ++expected_zero_copy;
          EXPECT_TRUE(SameBytes(part, OpValues(2900, root, dtype)))
              << c10::toString(dtype) << " root " << root << " rank "
              << b.rank();
        }
      }
      EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b) - before,
                expected_zero_copy);
    });
  }
}

TEST(ShmBackendTest, RanksThatDisagreeOnTheRootFailNotHang) {
  testing::RunRanks(2, Shm(4096, absl::Seconds(20)), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(64, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    const absl::Status s = b.Broadcast(*buffer, b.rank())->Wait();
    EXPECT_FALSE(s.ok());
    // Each rank names the other, unless the other's abort reached it first.
    EXPECT_TRUE(absl::StrContains(s.message(), "did not broadcast") ||
                absl::StrContains(s.message(), "gave up"))
        << s;
  });
}

// The hierarchical backend's first step: rank 0 gets the allreduce's bits,
// the others keep their values.
TEST(ShmBackendTest, ReduceToRankZeroHasTheAllReducesBits) {
  for (int w : {1, 2, 3, 4}) {
    testing::RunRanks(w, Shm(256), [&](Backend& b) {
      for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kInt}) {
        absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(5000, dtype);
        ASSERT_TRUE(buffer.ok()) << buffer.status();
        for (ReduceOp op :
             {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
          if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
          for (int64_t n : {int64_t{1}, int64_t{77}, int64_t{4999}}) {
            const at::Tensor values = OpValues(n, b.rank(), dtype);
            at::Tensor all = values.clone();
            ASSERT_TRUE(b.AllReduce(all, op)->Wait().ok());
            at::Tensor shared = buffer->narrow(0, 5000 - n, n);
            shared.copy_(values);
            ASSERT_TRUE(ShmReduceToRankZero(b, shared, op)->Wait().ok());
            EXPECT_TRUE(SameBytes(shared, b.rank() == 0 ? all : values))
                << c10::toString(dtype) << " " << ReduceOpName(op) << " n=" << n
                << " w=" << w << " rank " << b.rank();
          }
        }
      }
    });
  }
}

TEST(ShmBackendTest, ReduceToRankZeroOutsideABufferFailsOnEveryRank) {
  testing::RunRanks(2, Shm(4096, absl::Seconds(20)), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(64, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    at::Tensor t = b.rank() == 0 ? *buffer : at::ones({64});
    const absl::Status s = ShmReduceToRankZero(b, t, ReduceOp::kSum)->Wait();
    EXPECT_FALSE(s.ok());
    if (b.rank() == 1) {
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr("does not lie in a buffer from AllocateBuffer"));
    }
  });
}

TEST(ShmBackendTest, TensorsOnlyPartlyInABufferTakeTheCopyingPath) {
  testing::RunRanks(2, Shm(256), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(960, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    // Runs past the buffer's 3840 bytes into the rest of its last page,
    // which is mapped, so only the path taken can go wrong.
    at::Tensor across = at::from_blob(buffer->data_ptr<float>() + 950, {32});
    across.fill_(b.rank() + 1);
    ASSERT_TRUE(b.AllReduce(across)->Wait().ok());
    EXPECT_TRUE(at::equal(across, at::full({32}, 3.0f)));
    // A tensor elsewhere, and an empty part of the buffer.
    at::Tensor elsewhere = at::ones({8});
    ASSERT_TRUE(b.AllReduce(elsewhere)->Wait().ok());
    EXPECT_TRUE(at::equal(elsewhere, at::full({8}, 2.0f)));
    ASSERT_TRUE(b.AllReduce(buffer->narrow(0, 10, 0))->Wait().ok());
    EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b), 0);
    // The whole buffer does take the zero-copy path.
    buffer->fill_(1);
    ASSERT_TRUE(b.AllReduce(*buffer)->Wait().ok());
    EXPECT_TRUE(at::equal(*buffer, at::full({960}, 2.0f)));
    EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b), 1);
  });
}

TEST(ShmBackendTest, RanksThatDisagreeOnTheBufferPartFailNotHang) {
  testing::RunRanks(3, Shm(4096, absl::Seconds(20)), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(256, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    // Rank 2 passes another part of its buffer.
    const absl::Status s =
        b.AllReduce(buffer->narrow(0, b.rank() == 2 ? 128 : 0, 64))->Wait();
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "rank(s) 2 did not allreduce "
                                  "the same part") ||
                absl::StrContains(s.message(), "rank(s) 0, 1 did not") ||
                absl::StrContains(s.message(), "gave up"))
        << s;
  });
}

TEST(ShmBackendTest, BufferOnOneRankOrdinaryTensorOnAnotherFails) {
  testing::RunRanks(2, Shm(4096, absl::Seconds(20)), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(64, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    buffer->fill_(1);
    at::Tensor t = b.rank() == 0 ? *buffer : at::ones({64});
    EXPECT_FALSE(b.AllReduce(t)->Wait().ok());
  });
}

TEST(ShmBackendTest, RanksThatAllocateDifferentBuffersFailAlike) {
  testing::RunRanks(2, Shm(64), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer =
        b.AllocateBuffer(100 + b.rank(), at::kFloat);
    EXPECT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument)
        << buffer.status();
    EXPECT_THAT(std::string(buffer.status().message()),
                HasSubstr("(rank 0 asked for 100 x Float, rank 1 asked for "
                          "101 x Float)"));
    EXPECT_EQ(b.AllocateBuffer(-1, at::kFloat).status().code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(ShmBackendTest, BuffersOutliveTheBackend) {
  std::vector<at::Tensor> kept(2);
  testing::RunRanks(2, Shm(), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(1000, at::kDouble);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    buffer->fill_(b.rank() + 1);
    ASSERT_TRUE(b.AllReduce(*buffer)->Wait().ok());
    kept[b.rank()] = *buffer;
  });
  for (const at::Tensor& t : kept) {
    EXPECT_TRUE(at::equal(t, at::full({1000}, 3.0, at::kDouble)));
    t.add_(1);  // Still mapped and writable.
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
  Membership group;
  ShmBackendOptions o;
  EXPECT_EQ(CreateShmBackend(group, o).status().code(),
            absl::StatusCode::kInvalidArgument);  // No store.
  group.store = std::make_shared<store::HashStore>();
  o.slot_bytes = 100;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateShmBackend(group, o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("slot_bytes 100"));
  o.slot_bytes = 4096;
  group.world_size = 1000;
  EXPECT_EQ(CreateShmBackend(group, o).status().code(),
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
