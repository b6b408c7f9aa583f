// NumpyRandomState against numbers numpy 1.24 (Debian 12's python3-numpy)
// printed, e.g.:
//   /usr/bin/python3 -c "import numpy as np; r = np.random.RandomState(0);
//     print([r.randint(1_000_000_000) for _ in range(5)])"
// and against std::mt19937, which seeds the same way.
#include "dist/ddp/hooks/numpy_random_state.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::ddp::hooks {
namespace {

using ::testing::ElementsAre;

std::vector<int64_t> Draw(NumpyRandomState& r, int64_t high, int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(r.RandInt(high));
  return out;
}

// PowerSGDState's draw: rng.randint(1_000_000_000).
TEST(NumpyRandomStateTest, RandIntAsNumpy) {
  NumpyRandomState zero(0);
  EXPECT_THAT(
      Draw(zero, 1'000'000'000, 5),
      ElementsAre(209652396, 398764591, 924231285, 404868288, 441365315));
  EXPECT_EQ(zero.key()[0], 2443250962U);
  EXPECT_EQ(zero.key()[623], 1678096082U);
  EXPECT_EQ(zero.position(), 5);

  NumpyRandomState max(4294967295U);
  EXPECT_THAT(Draw(max, 1'000'000'000, 3),
              ElementsAre(419326371, 479346978, 697429004));

  // Small ranges reject often; 2^32 takes the output as it is; a range of
  // one draws nothing.
  NumpyRandomState r(42);
  EXPECT_THAT(Draw(r, 7, 6), ElementsAre(6, 3, 4, 6, 2, 4));
  EXPECT_THAT(Draw(r, int64_t{1} << 32, 2), ElementsAre(2563451924, 670094950));
  const int before = r.position();
  EXPECT_EQ(r.RandInt(1), 0);
  EXPECT_EQ(r.position(), before);
}

TEST(NumpyRandomStateTest, SeedsAsStdMt19937) {
  for (uint32_t seed : {0U, 1U, 12345U, 4294967295U}) {
    NumpyRandomState ours(seed);
    std::mt19937 std_mt(seed);
    for (int i = 0; i < 2000; ++i) {
      ASSERT_EQ(ours.NextUint32(), std_mt())
          << "seed " << seed << " draw " << i;
    }
  }
}

// The state carried over (a checkpoint) continues the sequence: numpy's
// RandomState(5) after 700 draws of randint(1000) is at position 95 and
// draws 444597585 next.
TEST(NumpyRandomStateTest, StateRoundTrip) {
  NumpyRandomState a(5);
  Draw(a, 1000, 700);
  EXPECT_EQ(a.position(), 95);
  NumpyRandomState b(0);
  ASSERT_TRUE(b.SetState(a.key(), a.position()).ok());
  EXPECT_EQ(b.RandInt(1'000'000'000), 444597585);
  EXPECT_EQ(a.RandInt(1'000'000'000), 444597585);

  std::vector<uint32_t> short_key(10, 0);
  EXPECT_EQ(b.SetState(short_key, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.SetState(a.key(), 625).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::ddp::hooks
