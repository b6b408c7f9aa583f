// Membership::Check: the one check of rank, world size and store that every
// backend runs first.
#include "dist/backend/membership.h"

#include <memory>

#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::HasSubstr;

Membership Of(int rank, int world_size) {
  Membership m;
  m.rank = rank;
  m.world_size = world_size;
  m.store = std::make_shared<store::HashStore>();
  return m;
}

TEST(MembershipTest, RanksInsideTheWorldWithAStorePass) {
  EXPECT_TRUE(Of(0, 1).Check("[rank 0] gloo").ok());
  EXPECT_TRUE(Of(3, 4).Check("[rank 3] gloo").ok());
}

TEST(MembershipTest, NoStoreIsNamed) {
  Membership m = Of(0, 2);
  m.store = nullptr;
  absl::Status s = m.Check("[rank 0] shm");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "[rank 0] shm: no store given");
}

TEST(MembershipTest, ARankOutsideTheWorldIsNamed) {
  for (const auto& [rank, size] :
       {std::pair{2, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    absl::Status s = Of(rank, size).Check("[rank R] nccl");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << rank;
    EXPECT_THAT(s.message(), HasSubstr("[rank R] nccl: rank "));
    EXPECT_THAT(s.message(), HasSubstr(" is outside [0, "));
  }
  EXPECT_EQ(Of(2, 2).Check("who").message(), "who: rank 2 is outside [0, 2)");
}

}  // namespace
}  // namespace dtrain::backend
