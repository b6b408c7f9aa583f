// The hierarchical backend with ranks as threads, each given a "host" by its
// key: every collective against closed forms on layouts with equal, unequal
// and interleaved hosts, bit-identical results on every rank, the simpler
// backend where the layout allows it, and a missing rank named with the step
// it failed in. Real hosts (network and PID namespaces) are tested by
// //trainer:train_two_hosts_test.

#include "dist/backend/hierarchical/hierarchical_backend.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/shm/shm_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

// Rank r runs on host hosts[r].
testing::BackendFactory OnHosts(std::vector<std::string> hosts,
                                absl::Duration timeout = absl::Seconds(60)) {
  return [=](int rank, int world_size, std::shared_ptr<store::Store> store) {
    Membership group;
    group.rank = rank;
    group.world_size = world_size;
    group.store = std::move(store);
    group.timeout = timeout;
    HierarchicalBackendOptions o;
    o.gloo.hostname = "127.0.0.1";
    o.shm_slot_bytes = 256;  // Many chunks in the shared-memory steps.
    o.host_key = hosts[rank];
    return CreateHierarchicalBackend(group, o);
  };
}

std::vector<at::Tensor> RandomPerRank(int ranks, int64_t n) {
  std::vector<at::Tensor> out;
  for (int r = 0; r < ranks; ++r) out.push_back(at::randn({n}));
  return out;
}

const std::vector<std::vector<std::string>>& Layouts() {
  static const auto* layouts = new std::vector<std::vector<std::string>>{
      {"a", "a", "b", "b"},  // two hosts of two
      {"a", "b", "a"},       // interleaved, unequal
      {"a", "a", "a", "b"},  // a host of one
  };
  return *layouts;
}

TEST(HierarchicalBackendTest, CollectivesOnEveryLayoutAndDtype) {
  for (const std::vector<std::string>& hosts : Layouts()) {
    const int w = static_cast<int>(hosts.size());
    testing::RunRanks(w, OnHosts(hosts), [&](Backend& b) {
      EXPECT_EQ(b.name(), "gloo+shm");
      EXPECT_EQ(b.size(), w);
      for (at::ScalarType dtype :
           {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt,
            at::kLong, at::kChar, at::kByte}) {
        const std::string where =
            absl::StrCat(c10::toString(dtype), " on ",
                         hosts.size() == 3 ? "a, b, a" : hosts[2]);
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{300}}) {
          at::Tensor i = at::arange(n, at::kLong).remainder(5);
          at::Tensor t = (i + b.rank() + 1).to(dtype);
          ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
          EXPECT_TRUE(at::equal(t.to(at::kLong), i * w + w * (w + 1) / 2))
              << where << " n=" << n;
          at::Tensor m = (i + b.rank()).to(dtype);
          ASSERT_TRUE(b.AllReduce(m, ReduceOp::kMin)->Wait().ok());
          EXPECT_TRUE(at::equal(m.to(at::kLong), i)) << where;
          for (int root = 0; root < w; ++root) {
            at::Tensor c = at::full({n}, b.rank(), dtype);
            ASSERT_TRUE(b.Broadcast(c, root)->Wait().ok());
            EXPECT_TRUE(at::equal(c, at::full({n}, root, dtype)))
                << where << " root " << root;
          }
          std::vector<at::Tensor> outs;
          for (int r = 0; r < w; ++r) outs.push_back(at::empty({n, 2}, dtype));
          ASSERT_TRUE(b.AllGather(outs, at::full({n, 2}, b.rank() + 1, dtype))
                          ->Wait()
                          .ok());
          for (int r = 0; r < w; ++r)
            EXPECT_TRUE(at::equal(outs[r], at::full({n, 2}, r + 1, dtype)))
                << where << " from " << r;
          std::vector<at::Tensor> ins;
          for (int r = 0; r < w; ++r)
            ins.push_back(at::full({n}, r * 10 + b.rank(), dtype));
          at::Tensor out = at::empty({n}, dtype);
          ASSERT_TRUE(b.ReduceScatter(out, ins)->Wait().ok());
          EXPECT_TRUE(at::equal(
              out, at::full({n}, b.rank() * 10 * w + w * (w - 1) / 2, dtype)))
              << where;
          ASSERT_TRUE(b.ReduceScatter(out, ins, ReduceOp::kMax)->Wait().ok());
          EXPECT_TRUE(
              at::equal(out, at::full({n}, b.rank() * 10 + w - 1, dtype)))
              << where;
          if (at::isFloatingType(dtype)) {
            ASSERT_TRUE(
                b.ReduceScatter(out, ins, ReduceOp::kAverage)->Wait().ok());
            EXPECT_TRUE(at::allclose(
                out.to(at::kDouble),
                at::full({n}, b.rank() * 10 + (w - 1) / 2.0, at::kDouble)))
                << where;
          }
        }
        if (at::isFloatingType(dtype)) {
          at::Tensor a = at::full({100}, b.rank() + 1, dtype);
          ASSERT_TRUE(b.AllReduce(a, ReduceOp::kAverage)->Wait().ok());
          EXPECT_TRUE(at::allclose(a.to(at::kDouble),
                                   at::full({100}, (w + 1) / 2.0, at::kDouble)))
              << where;
        }
      }
      ASSERT_TRUE(b.Barrier()->Wait().ok());
    });
  }
}

TEST(HierarchicalBackendTest, EveryRankGetsTheSameBits) {
  for (const std::vector<std::string>& hosts : Layouts()) {
    const int w = static_cast<int>(hosts.size());
    std::mutex mu;
    std::map<int, at::Tensor> results;
    // Values whose float sums depend on the order of addition, drawn here:
    // LibTorch's generator, used from the rank threads, would be a race that
    // ThreadSanitizer cannot see through the uninstrumented library.
    const std::vector<at::Tensor> inputs = RandomPerRank(w, 5000);
    testing::RunRanks(w, OnHosts(hosts), [&](Backend& b) {
      at::Tensor t = inputs[b.rank()] *
                     std::pow(10.0f, static_cast<float>(b.rank() % 3) * 3);
      at::Tensor h = t.to(at::kHalf);
      ASSERT_TRUE(b.AllReduce(t, ReduceOp::kAverage)->Wait().ok());
      ASSERT_TRUE(b.AllReduce(h)->Wait().ok());
      std::lock_guard<std::mutex> lock(mu);
      results[b.rank()] =
          at::cat({t.view(at::kInt), h.view(at::kShort).to(at::kInt)});
    });
    ASSERT_EQ(results.size(), static_cast<size_t>(w));
    for (int r = 1; r < w; ++r)
      EXPECT_TRUE(at::equal(results[r], results[0])) << "rank " << r;
  }
}

TEST(HierarchicalBackendTest, TakesTheSimplerBackendWhereTheLayoutAllows) {
  // Under the name the caller chose, whatever runs; layout() says how.
  testing::RunRanks(3, OnHosts({"a", "a", "a"}), [&](Backend& b) {
    EXPECT_EQ(b.name(), "gloo+shm");
    EXPECT_EQ(b.layout(), "1 host: ranks 0, 1, 2");
    EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b), 0) << "not the shm backend";
    at::Tensor t = at::ones({10});
    ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
    EXPECT_TRUE(at::equal(t, at::full({10}, 3.0)));
    // Its messages use that name too.
    absl::Status bad = b.AllReduce(at::ones({2}, at::kBool))->Wait();
    EXPECT_THAT(std::string(bad.message()), HasSubstr("gloo+shm allreduce"));
  });
  testing::RunRanks(3, OnHosts({"a", "b", "c"}), [&](Backend& b) {
    EXPECT_EQ(b.name(), "gloo+shm");
    EXPECT_EQ(b.layout(), "3 hosts: rank 0 | rank 1 | rank 2");
    EXPECT_EQ(ShmZeroCopyCollectivesForTesting(b), -1);
    at::Tensor t = at::ones({10});
    ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
    EXPECT_TRUE(at::equal(t, at::full({10}, 3.0)));
    absl::Status bad = b.AllReduce(at::ones({2}, at::kBool))->Wait();
    EXPECT_THAT(std::string(bad.message()), HasSubstr("gloo+shm allreduce"));
  });
  testing::RunRanks(4, OnHosts({"a", "a", "b", "b"}), [&](Backend& b) {
    EXPECT_EQ(b.layout(), "2 hosts: ranks 0, 1 | ranks 2, 3");
  });
}

TEST(HierarchicalBackendTest, BadArgumentsFailTheWorkNotTheBackend) {
  testing::RunRanks(4, OnHosts(Layouts()[0]), [&](Backend& b) {
    absl::Status s =
        b.AllReduce(at::ones({4}, at::kInt), ReduceOp::kAverage)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("gloo+shm"));
    s = b.Broadcast(at::ones({4}), 4)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    s = b.AllReduce(at::ones({4}, at::kBool))->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    at::Tensor t = at::ones({4});
    ASSERT_TRUE(b.AllReduce(t)->Wait().ok());
    EXPECT_TRUE(at::equal(t, at::full({4}, 4.0)));
  });
}

TEST(HierarchicalBackendTest, MissingRankIsNamedWithTheStep) {
  testing::Notification others_done;
  std::mutex mu;
  int finished = 0;
  testing::RunRanks(
      4, OnHosts(Layouts()[0], absl::Seconds(2)), [&](Backend& b) {
        if (b.rank() == 3) {
          // Joins, then never issues the collective.
          ASSERT_TRUE(
              others_done.WaitForNotificationWithTimeout(absl::Minutes(1)));
          return;
        }
        const absl::Status s =
            b.AllReduce(at::ones({8}), ReduceOp::kSum, "bucket 0")->Wait();
        EXPECT_FALSE(s.ok());
        EXPECT_THAT(std::string(s.message()),
                    HasSubstr(absl::StrCat("[rank ", b.rank(),
                                           "] gloo+shm allreduce #1")));
        if (b.rank() == 2) {
          // Rank 3's host: its own shared-memory step names local rank 1.
          EXPECT_THAT(std::string(s.message()),
                      HasSubstr("shared-memory step on host 1 (local ranks "
                                "0..1 are ranks 2, 3)"));
        }
        if (b.rank() == 0) {
          EXPECT_THAT(std::string(s.message()),
                      HasSubstr("Gloo step among the host leaders (leaders "
                                "0..1 are ranks 0, 2)"));
        }

        std::lock_guard<std::mutex> lock(mu);
        if (++finished == 3) others_done.Notify();
      });
}

// A rank that gives up (Abort, then its backend goes) ends everyone's wait
// long before the timeout: its host's ranks through the segment, the other
// host when its Gloo connections close, and that host's ranks from their
// leader's abort.
TEST(HierarchicalBackendTest, AnAbortReachesEveryHostAtOnce) {
  testing::Notification others_waiting;
  std::mutex mu;
  int waiting = 0;
  testing::RunRanks(4, OnHosts(Layouts()[0], absl::Hours(1)), [&](Backend& b) {
    if (b.rank() == 0) {
      ASSERT_TRUE(
          others_waiting.WaitForNotificationWithTimeout(absl::Minutes(1)));
      b.Abort(absl::AbortedError("rank 0's caller gave up"));
      return;  // Its backend is destroyed now.
    }
    std::shared_ptr<Work> w = b.AllReduce(at::ones({8}));
    {
      std::lock_guard<std::mutex> lock(mu);
      if (++waiting == 3) others_waiting.Notify();
    }
    const absl::Status s = w->Wait(absl::Minutes(1));
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    if (b.rank() == 1) {
      EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0 gave up"));
    }
    if (b.rank() == 2) {
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr("Gloo step among the host leaders"));
    }
    if (b.rank() == 3) {
      // Local rank 0 of host 1 is rank 2, which aborted its host.
      EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0 gave up"));
    }
  });
}

// Buffers from the hierarchical backend are the host's shared memory; an
// allreduce inside one is right on every layout, next to ordinary tensors.
TEST(HierarchicalBackendTest, BuffersWorkOnEveryLayout) {
  for (const std::vector<std::string>& hosts : Layouts()) {
    const int w = static_cast<int>(hosts.size());
    testing::RunRanks(w, OnHosts(hosts), [&](Backend& b) {
      absl::StatusOr<at::Tensor> buffer = b.AllocateBuffer(1000, at::kFloat);
      ASSERT_TRUE(buffer.ok()) << buffer.status();
      at::Tensor other = at::ones({10});
      for (int round = 0; round < 3; ++round) {
        at::Tensor part = buffer->narrow(0, 100 * round, 500);
        part.fill_(b.rank() + round);
        std::shared_ptr<Work> a = b.AllReduce(part, ReduceOp::kAverage);
        std::shared_ptr<Work> o = b.AllReduce(other);
        ASSERT_TRUE(a->Wait().ok());
        ASSERT_TRUE(o->Wait().ok());
        EXPECT_TRUE(at::allclose(
            part, at::full({500}, (w - 1) / 2.0 + round, at::kFloat)))
            << "round " << round;
      }
      EXPECT_TRUE(at::equal(other, at::full({10}, std::pow(w, 3.0))));
    });
  }
}

// A sharded optimizer's collectives on its own buffers, in place (the rank's
// share is reduce_scatter's output and allgather's input): right on every
// layout, and each reduce_scatter share with the bits of the allreduce of the
// same values (two hosts: the leaders' sum of two is the same either way).
// Then ordinary tensors again, through the kept scratch buffer, grown.
TEST(HierarchicalBackendTest, ShardedCollectivesInBuffersOnEveryLayout) {
  for (const std::vector<std::string>& hosts : Layouts()) {
    const int w = static_cast<int>(hosts.size());
    const std::vector<at::Tensor> inputs = RandomPerRank(w, w * 3000);
    testing::RunRanks(w, OnHosts(hosts), [&](Backend& b) {
      const int me = b.rank();
      const std::string where = absl::StrCat(
          hosts[0], hosts[1], hosts[2], w > 3 ? hosts[3] : "", " rank ", me);
      absl::StatusOr<at::Tensor> buffer =
          b.AllocateBuffer(w * 3000 + 5, at::kFloat);
      ASSERT_TRUE(buffer.ok()) << buffer.status();
      for (int64_t n : {int64_t{1}, int64_t{333}, int64_t{3000}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          at::Tensor all = inputs[me].narrow(0, 0, w * n).clone();
          ASSERT_TRUE(b.AllReduce(all, op)->Wait().ok());
          at::Tensor part = buffer->narrow(0, 5, w * n);
          part.copy_(inputs[me].narrow(0, 0, w * n));
          std::vector<at::Tensor> shares;
          for (int r = 0; r < w; ++r)
            shares.push_back(part.narrow(0, r * n, n));
          ASSERT_TRUE(b.ReduceScatter(shares[me], shares, op)->Wait().ok());
          EXPECT_TRUE(at::equal(shares[me].view(at::kInt),
                                all.narrow(0, me * n, n).view(at::kInt)))
              << where << " n=" << n << " " << ReduceOpName(op);
          shares[me].fill_(me + 1);
          ASSERT_TRUE(b.AllGather(shares, shares[me])->Wait().ok());
          for (int r = 0; r < w; ++r) {
            EXPECT_TRUE(at::equal(shares[r], at::full({n}, r + 1.0f)))
                << where << " n=" << n << " share " << r;
          }
        }
      }
      for (int64_t n : {int64_t{10}, int64_t{5000}}) {
        std::vector<at::Tensor> ins;
        std::vector<at::Tensor> outs;
        for (int r = 0; r < w; ++r) {
          ins.push_back(at::full({n}, r * 10 + me, at::kFloat));
          outs.push_back(at::empty({n}));
        }
        at::Tensor out = at::empty({n});
        ASSERT_TRUE(b.ReduceScatter(out, ins)->Wait().ok());
        EXPECT_TRUE(
            at::equal(out, at::full({n}, me * 10.0f * w + w * (w - 1) / 2)))
            << where << " n=" << n;
        ASSERT_TRUE(b.AllGather(outs, at::full({n}, me + 1.0f))->Wait().ok());
        for (int r = 0; r < w; ++r)
          EXPECT_TRUE(at::equal(outs[r], at::full({n}, r + 1.0f))) << where;
      }
    });
  }
}

// Messages larger than a slot at the default slot size: the mean of
// float32 values matches the double-precision mean on every rank.
TEST(HierarchicalBackendTest, LargeMessagesAverageToTheMean) {
  std::mutex mu;
  std::map<int, std::pair<at::Tensor, at::Tensor>> seen;  // input, result
  const std::vector<at::Tensor> inputs = RandomPerRank(4, 1200000);
  testing::RunRanks(
      4,
      [](int rank, int world_size, std::shared_ptr<store::Store> store) {
        Membership group;
        group.rank = rank;
        group.world_size = world_size;
        group.store = std::move(store);
        HierarchicalBackendOptions o;
        o.gloo.hostname = "127.0.0.1";
        o.host_key = rank < 2 ? "a" : "b";
        return CreateHierarchicalBackend(group, o);
      },
      [&](Backend& b) {
        at::Tensor t = inputs[b.rank()].clone();  // 4.6 MiB: two chunks
        at::Tensor input = t.to(at::kDouble);
        ASSERT_TRUE(b.AllReduce(t, ReduceOp::kAverage)->Wait().ok());
        std::lock_guard<std::mutex> lock(mu);
        seen[b.rank()] = {input, t};
      });
  ASSERT_EQ(seen.size(), 4u);
  const at::Tensor mean =
      (seen[0].first + seen[1].first + seen[2].first + seen[3].first) / 4;
  for (int r = 0; r < 4; ++r) {
    EXPECT_LT(
        (seen[r].second.to(at::kDouble) - mean).abs().max().item<double>(),
        1e-5)
        << "rank " << r;
  }
}

}  // namespace
}  // namespace dtrain::backend
