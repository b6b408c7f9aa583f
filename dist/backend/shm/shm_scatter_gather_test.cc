// The shm backend's reduce_scatter and allgather, the collectives of a
// sharded optimizer, with ranks as threads: on parts of shared buffers (the
// zero-copy paths, in place or not) and through the slots, each with an
// allreduce's bits for every dtype, op and slot size; interleaved with the
// other collectives without a race; and ranks that disagree fail, not hang.

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/backend/shm/shm_testing.h"
#include "dist/store/hash_store.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using testing::OpValues;
using testing::SameBytes;
using testing::Shm;

// The shares of `n` elements each, back to back from `offset`.
std::vector<at::Tensor> Shares(const at::Tensor& t, int64_t offset, int w,
                               int64_t n) {
  std::vector<at::Tensor> out;
  for (int r = 0; r < w; ++r) out.push_back(t.narrow(0, offset + r * n, n));
  return out;
}

const std::vector<at::ScalarType> kDtypes = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
    at::kInt,   at::kLong,   at::kChar, at::kByte};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAverage,
                                    ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProduct};

// Each rank's share of a reduce_scatter is, bit for bit, its share of an
// allreduce of the same values: from a shared buffer into a private tensor,
// in place into the rank's own share, and through 256-byte slots. From a
// shared buffer, rank 0's inputs are left holding every share's result.
TEST(ShmScatterGatherTest, ReduceScatterHasTheAllReducesBits) {
  for (int w : {1, 2, 3, 4}) {
    testing::RunRanks(w, Shm(256), [&](Backend& b) {
      const int me = b.rank();
      const int64_t before = ShmZeroCopyCollectivesForTesting(b);
      int64_t zero_copy = 0;
      for (at::ScalarType dtype : kDtypes) {
        // Room for the largest case at an odd offset (off 64-element lines).
        absl::StatusOr<at::Tensor> buffer =
            b.AllocateBuffer(4 * 1250 + 3, dtype);
        ASSERT_TRUE(buffer.ok()) << buffer.status();
        for (ReduceOp op : kOps) {
          if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
          for (int64_t n : {int64_t{1}, int64_t{77}, int64_t{1250}}) {
            const std::string what =
                absl::StrCat(c10::toString(dtype), " ", ReduceOpName(op),
                             " n=", n, " w=", w, " rank ", me);
            const at::Tensor values = OpValues(w * n, me, dtype);
            at::Tensor all = values.clone();
            ASSERT_TRUE(b.AllReduce(all, op)->Wait().ok());
            const at::Tensor want = all.narrow(0, me * n, n);

            std::vector<at::Tensor> shared = Shares(*buffer, 3, w, n);
            buffer->narrow(0, 3, w * n).copy_(values);
            at::Tensor out = at::empty({n}, dtype);
            ASSERT_TRUE(b.ReduceScatter(out, shared, op)->Wait().ok());
            EXPECT_TRUE(SameBytes(out, want)) << "private output, " << what;
            // Rank 0's buffer now holds every share's result (as after an
            // allreduce); the others' inputs are as they were.
            if (me == 0) {
              EXPECT_TRUE(SameBytes(buffer->narrow(0, 3, w * n), all)) << what;
            } else {
              EXPECT_TRUE(SameBytes(buffer->narrow(0, 3, w * n), values))
                  << what;
            }
            buffer->narrow(0, 3, w * n).copy_(values);
            ASSERT_TRUE(b.ReduceScatter(shared[me], shared, op)->Wait().ok());
            EXPECT_TRUE(SameBytes(shared[me], want)) << "in place, " << what;
            zero_copy += 2;

            at::Tensor copied = values.clone();
            ASSERT_TRUE(
                b.ReduceScatter(out, Shares(copied, 0, w, n), op)->Wait().ok());
            EXPECT_TRUE(SameBytes(out, want)) << "through slots, " << what;
          }
        }
      }
      EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b) - before, zero_copy);
    });
  }
}

// Slots too small for one element of every share (64 bytes, 9 ranks,
// doubles) still reduce_scatter correctly.
TEST(ShmScatterGatherTest, ReduceScatterThroughTinySlots) {
  constexpr int kRanks = 9;
  testing::RunRanks(kRanks, Shm(64), [&](Backend& b) {
    const int64_t n = 20;
    at::Tensor values = OpValues(kRanks * n, b.rank(), at::kDouble);
    at::Tensor all = values.clone();
    ASSERT_TRUE(b.AllReduce(all)->Wait().ok());
    at::Tensor out = at::empty({n}, at::kDouble);
    ASSERT_TRUE(
        b.ReduceScatter(out, Shares(values, 0, kRanks, n))->Wait().ok());
    EXPECT_TRUE(SameBytes(out, all.narrow(0, b.rank() * n, n)));
  });
}

// An allgather into the shares of a shared buffer: from each rank's own
// share (in place, as a sharded optimizer gathers its parameters) and from a
// private tensor.
TEST(ShmScatterGatherTest, AllGatherIntoABuffer) {
  for (int w : {1, 2, 3, 4}) {
    testing::RunRanks(w, Shm(256), [&](Backend& b) {
      const int me = b.rank();
      for (at::ScalarType dtype : kDtypes) {
        for (int64_t n : {int64_t{1}, int64_t{77}, int64_t{1250}}) {
          absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(w * n, dtype);
          ASSERT_TRUE(buffer.ok()) << buffer.status();
          std::vector<at::Tensor> shares = Shares(*buffer, 0, w, n);
          shares[me].copy_(OpValues(n, me, dtype));
          ASSERT_TRUE(b.AllGather(shares, shares[me])->Wait().ok());
          for (int r = 0; r < w; ++r) {
            EXPECT_TRUE(SameBytes(shares[r], OpValues(n, r, dtype)))
                << c10::toString(dtype) << " n=" << n << " w=" << w << " share "
                << r << " on rank " << me;
          }
          at::Tensor mine = OpValues(n, me + 5, dtype);
          ASSERT_TRUE(b.AllGather(shares, mine)->Wait().ok());
          for (int r = 0; r < w; ++r) {
            EXPECT_TRUE(SameBytes(shares[r], OpValues(n, r + 5, dtype)));
          }
        }
      }
    });
  }
}

// A sharded optimizer's step, many times over, in many chunks: gradients
// reduce_scattered from a shared bucket into each rank's own share, the
// share changed, the parameters gathered back in place, with the copying
// collectives in between. No rank may read or write memory another rank is
// still using (the two-barrier rule).
TEST(ShmScatterGatherTest, InterleavedShardedStepsStayCorrect) {
  constexpr int kRanks = 3;
  testing::RunRanks(kRanks, Shm(64), [&](Backend& b) {
    const int me = b.rank();
    absl::StatusOr<at::Tensor> grads = b.AllocateBuffer(3 * 200, at::kFloat);
    absl::StatusOr<at::Tensor> params = b.AllocateBuffer(3 * 200, at::kFloat);
    ASSERT_TRUE(grads.ok() && params.ok());
    params->zero_();
    for (int round = 0; round < 150; ++round) {
      const int64_t n = 1 + (round * 37) % 200;
      at::Tensor i = at::arange(3 * n, at::kFloat);
      grads->narrow(0, 0, 3 * n).copy_(i + me + round);
      std::vector<at::Tensor> g = Shares(*grads, 0, kRanks, n);
      std::vector<at::Tensor> p = Shares(*params, 0, kRanks, n);
      ASSERT_TRUE(b.ReduceScatter(g[me], g)->Wait().ok());
      ASSERT_TRUE(at::equal(g[me], i.narrow(0, me * n, n) * 3 + 3 + 3 * round))
          << "round " << round;
      p[me].copy_(g[me]);
      ASSERT_TRUE(b.AllGather(p, p[me])->Wait().ok());
      for (int r = 0; r < kRanks; ++r) {
        ASSERT_TRUE(at::equal(p[r], i.narrow(0, r * n, n) * 3 + 3 + 3 * round))
            << "round " << round << " share " << r;
      }
      at::Tensor t = i + me;
      ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
      ASSERT_TRUE(at::equal(t, i * 3 + 3)) << "round " << round;
      at::Tensor whole = grads->narrow(0, 0, 3 * n);
      whole.fill_(me);
      ASSERT_TRUE(b.AllReduce(whole, ReduceOp::kMax)->Wait().ok());
      ASSERT_TRUE(at::equal(whole, at::full_like(whole, 2))) << round;
    }
  });
}

TEST(ShmScatterGatherTest, RanksThatDisagreeOnTheSharesFailNotHang) {
  testing::RunRanks(3, Shm(4096, absl::Seconds(20)), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(400, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    // Rank 2's shares start elsewhere.
    std::vector<at::Tensor> shares =
        Shares(*buffer, b.rank() == 2 ? 100 : 0, 3, 64);
    const absl::Status s = b.ReduceScatter(at::empty({64}), shares)->Wait();
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "rank(s) 2 did not reduce_scatter the same "
                                  "part of shared buffer #0 (192 elements") ||
                absl::StrContains(s.message(), "rank(s) 0, 1 did not") ||
                absl::StrContains(s.message(), "gave up"))
        << s;
  });
  testing::RunRanks(2, Shm(4096, absl::Seconds(20)), [&](Backend& b) {
    absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(128, at::kFloat);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    // Rank 1 gathers into an ordinary tensor: the ranks take different paths.
    at::Tensor other = at::empty({128});
    std::vector<at::Tensor> shares =
        Shares(b.rank() == 0 ? *buffer : other, 0, 2, 64);
    EXPECT_FALSE(b.AllGather(shares, at::ones({64}))->Wait().ok());
  });
}

}  // namespace
}  // namespace dtrain::backend
