// TrainElastic with ranks as threads: one of three ranks dies in the middle
// of training (its allreduce fails with an error of its own, and it leaves);
// the two others form the next generation through their standby stores and
// train to the end of the epoch, identical, every remaining example once.

#include "trainer/elastic_run.h"

#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "dist/backend/backend.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/trainer_testing.h"

namespace dtrain::trainer {
namespace {

using testing::ExpectSameParameters;
using ::testing::HasSubstr;
using testing::SmallRun;

TEST(ElasticRunTest, SurvivorsOfADeadRankTrainToTheEnd) {
  TrainOptions o = SmallRun();
  o.optim.epochs = 1;
  o.skip_validation = true;
  o.launch.timeout = absl::Seconds(10);
  auto store = std::make_shared<store::HashStore>();
  std::vector<absl::StatusOr<TrainResult>> results(
      3, absl::UnknownError("rank did not run"));
  std::vector<std::string> logs(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<backend::Backend>> gloo =
          testing::Gloo(r, 3, store);
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      rendezvous::World world;
      world.rank = r;
      world.world_size = 3;
      world.local_rank = r;
      world.local_world_size = 3;
      world.store = store;
      std::ostringstream log;
      TrainContext context;
      context.log = &log;
      ElasticOptions elastic;
      elastic.stopped_grace = absl::Seconds(1);
      // Rank 1's allreduce fails with an error of its own (kInternal), so
      // that TrainElastic lets it end.
      testing::FailingBackend dying(
          **gloo, r == 1 ? 8 : 0,
          absl::InternalError("injected: this rank dies here"));
      results[r] = TrainElastic(o, world, dying, context, elastic);
      // The dead rank's connections close now, as its process's would.
      if (!results[r].ok()) (*gloo)->Abort(results[r].status());
      logs[r] = log.str();
    });
  }
  for (std::thread& t : ranks) t.join();

  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInternal);
  for (int r : {0, 2}) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    EXPECT_THAT(logs[r], HasSubstr("forming generation 1"));
    EXPECT_THAT(logs[r], HasSubstr("generation 1: rank"));
    EXPECT_THAT(logs[r], HasSubstr("of 2, going on from step"));
  }
  ExpectSameParameters(*results[0], *results[2]);
  // The last generation's epoch: 2 ranks, every example left once.
  const int64_t left = results[0]->metrics.epochs[0].samples;
  const int64_t committed = (384 - left) / 48;
  EXPECT_EQ((384 - left) % 48, 0) << "left " << left;
  EXPECT_EQ(results[0]->metrics.global_step, committed + (left + 31) / 32);
}

}  // namespace
}  // namespace dtrain::trainer
