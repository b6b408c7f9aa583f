// The factory: names map to backends; an unknown name lists the known ones;
// "gloo" uses shared memory between ranks of one host unless told not to.

#include "dist/backend/factory.h"

#include <ATen/ATen.h>

#include "dist/backend/backend_testing.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

// Rank `rank` of `world_size` over `store`.
Membership Group(int rank, int world_size,
                 std::shared_ptr<store::Store> store) {
  Membership m;
  m.rank = rank;
  m.world_size = world_size;
  m.store = std::move(store);
  return m;
}

TEST(FactoryTest, UnknownNameListsKnownBackends) {
  BackendConfig c;
  c.name = "mpi";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend({}, c);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("unknown backend 'mpi' (known: gloo, nccl, shm)"));
}

TEST(FactoryTest, GlooByNameRunsACollectiveThroughSharedMemoryOrTcp) {
  for (bool shm : {true, false}) {
    testing::RunRanks(
        2,
        [shm](int rank, int world_size, std::shared_ptr<store::Store> store) {
          BackendConfig c;
          c.name = "gloo";
          c.gloo_hostname = "127.0.0.1";
          c.shm = shm;
          return CreateBackend(Group(rank, world_size, std::move(store)), c);
        },
        [shm](Backend& b) {
          // Both ranks are threads of this process: one host, which the
          // layout says; the name stays the one chosen.
          EXPECT_EQ(b.name(), shm ? "gloo+shm" : "gloo");
          if (shm) {
            EXPECT_EQ(b.layout(), "1 host: ranks 0, 1");
          }
          at::Tensor t = at::full({3}, b.rank() + 1.0);
          ASSERT_TRUE(b.AllReduce(t, ReduceOp::kAverage)->Wait().ok());
          EXPECT_TRUE(at::allclose(t, at::full({3}, 1.5)));
        });
  }
}

TEST(FactoryTest, ShmByNameKeepsItsName) {
  testing::RunRanks(
      2,
      [](int rank, int world_size, std::shared_ptr<store::Store> store) {
        BackendConfig c;
        c.name = "shm";
        return CreateBackend(Group(rank, world_size, std::move(store)), c);
      },
      [](Backend& b) {
        EXPECT_EQ(b.name(), "shm");
        EXPECT_EQ(b.layout(), "1 host: ranks 0, 1");
      });
}

TEST(FactoryTest, NcclByNameSaysWhyItCannotRunWithoutAGpu) {
  BackendConfig c;
  c.name = "nccl";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend({}, c);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("nccl"));
}

// Every backend checks the membership alike (Membership::Check), before
// anything else.
TEST(FactoryTest, EveryBackendRefusesABadMembershipAlike) {
  for (const char* name : {"gloo", "nccl", "shm"}) {
    for (bool shm : {true, false}) {
      BackendConfig c;
      c.name = name;
      c.shm = shm;
      absl::StatusOr<std::unique_ptr<Backend>> b =
          CreateBackend(Group(2, 2, std::make_shared<store::HashStore>()), c);
      EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument)
          << name << ": " << b.status();
      EXPECT_THAT(std::string(b.status().message()),
                  HasSubstr("rank 2 is outside [0, 2)"))
          << name;
      b = CreateBackend(Group(0, 2, nullptr), c);
      EXPECT_THAT(std::string(b.status().message()),
                  HasSubstr(": no store given"))
          << name;
    }
  }
}

}  // namespace
}  // namespace dtrain::backend
