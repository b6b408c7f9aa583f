// A build without Gloo: asking for the Gloo backend fails at once, naming the
// rank and the backend, saying why and what to do instead.
#include <memory>

#include "absl/status/status.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::backend {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(GlooUnavailableTest, SaysTheBuildHasNoGlooAndWhatToUseInstead) {
  EXPECT_FALSE(GlooBuilt());
  Membership group;
  group.rank = 1;
  group.world_size = 2;
  group.store = std::make_shared<store::HashStore>();
  GlooBackendOptions options;
  options.name = "gloo+shm";
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateGlooBackend(group, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(),
              AllOf(HasSubstr("[rank 1] gloo+shm"), HasSubstr("has no Gloo"),
                    HasSubstr("'shm'"), HasSubstr("libgloo-dev"),
                    HasSubstr("CMAKE_PREFIX_PATH")));
}

TEST(GlooUnavailableTest, ABadMembershipIsNamedAsSuch) {
  Membership group;
  group.rank = 2;
  group.world_size = 2;
  group.store = std::make_shared<store::HashStore>();
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateGlooBackend(group);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.status().message(),
              HasSubstr("[rank 2] gloo: rank 2 is outside [0, 2)"));
}

TEST(GlooUnavailableTest, OptionsParseAsInTheRealBackend) {
  EXPECT_EQ(*ParseGlooAlgorithm("ring_chunked"), GlooAlgorithm::kRingChunked);
  EXPECT_FALSE(ParseGlooAlgorithm("ring2").ok());
}

}  // namespace
}  // namespace dtrain::backend
