// The factory: names map to backends; an unknown name lists the known ones;
// "gloo" uses shared memory between ranks of one host unless told not to.

#include "dist/backend/factory.h"

#include <ATen/ATen.h>

#include "dist/backend/backend_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

TEST(FactoryTest, UnknownNameListsKnownBackends) {
  BackendConfig c;
  c.name = "mpi";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(c);
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
          c.rank = rank;
          c.world_size = world_size;
          c.store = std::move(store);
          c.gloo_hostname = "127.0.0.1";
          c.shm = shm;
          return CreateBackend(c);
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
        c.rank = rank;
        c.world_size = world_size;
        c.store = std::move(store);
        return CreateBackend(c);
      },
      [](Backend& b) {
        EXPECT_EQ(b.name(), "shm");
        EXPECT_EQ(b.layout(), "1 host: ranks 0, 1");
      });
}

TEST(FactoryTest, NcclByNameSaysWhyItCannotRunWithoutAGpu) {
  BackendConfig c;
  c.name = "nccl";
  c.store = nullptr;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(c);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("nccl"));
}

}  // namespace
}  // namespace dtrain::backend
