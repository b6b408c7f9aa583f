// The state a new generation starts from, with ranks as threads over Gloo on
// loopback: only the members that need it receive it, from rank 0, and a
// member that holds it takes no part.

#include "trainer/elastic_state.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "dist/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

rendezvous::GenerationMember Member(int previous_rank, int64_t step) {
  rendezvous::GenerationMember m;
  m.previous_rank = previous_rank;
  m.committed_step = step;
  return m;
}

// Generation 2 of `members`, as rank `rank` sees it.
rendezvous::Generation Formed(std::vector<rendezvous::GenerationMember> members,
                              int rank) {
  rendezvous::Generation g;
  g.generation = 2;
  g.rank = rank;
  g.world_size = static_cast<int>(members.size());
  g.committed_step = members[0].committed_step;
  g.members = std::move(members);
  return g;
}

backend::BackendConfig Loopback() {
  backend::BackendConfig c;
  c.name = "gloo";
  c.shm = false;
  c.gloo_hostname = "127.0.0.1";
  return c;
}

TEST(StateSourcesTest, JoinersAndMembersBehindTheStepReceiveFromRankZero) {
  EXPECT_THAT(StateSources(Formed({Member(1, 7), Member(0, 7)}, 0)),
              ElementsAre(-1, -1));
  EXPECT_THAT(
      StateSources(Formed(
          {Member(0, 7), Member(2, 6), Member(3, 7), Member(-1, -1)}, 0)),
      ElementsAre(-1, 0, -1, 0));
}

TEST(StateSourcesTest, FromAMemberAtTheSameAddress) {
  auto at = [](rendezvous::GenerationMember m, const char* standby) {
    m.standby = standby;
    return m;
  };
  // Host 10.0.0.2 holds rank 1 (behind) and rank 2 (at the step); the
  // joiners on 10.0.0.2 and 10.0.0.3, and rank 1, find their sources.
  EXPECT_THAT(
      StateSources(Formed(
          {at(Member(0, 7), "10.0.0.1:5000"), at(Member(1, 6), "10.0.0.2:5000"),
           at(Member(2, 7), "10.0.0.2:5001"),
           at(Member(-1, -1), "10.0.0.2:5002"),
           at(Member(-2, -1), "10.0.0.3:5000"), Member(-3, -1)},
          0)),
      ElementsAre(-1, 2, -1, 2, 0, 0));
}

TEST(ElasticStateTest, OnlyTheRanksThatNeedItReceiveIt) {
  // Rank 1 is at the step and is never called: the others would wait for it
  // if it took part.
  const std::vector<rendezvous::GenerationMember> members = {
      Member(1, 9), Member(0, 9), Member(2, 8), Member(-1, -1)};
  auto store = std::make_shared<store::HashStore>();
  const std::string state(3 << 20, 'x');
  std::vector<std::string> bytes = {state, "", "old state of step 8", ""};
  std::vector<absl::StatusOr<StateShare>> shares(4);
  std::vector<std::thread> threads;
  for (int r : {0, 2, 3}) {
    threads.emplace_back([&, r] {
      shares[r] = ShareCommittedState(Formed(members, r), store, Loopback(),
                                      absl::Seconds(30), &bytes[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r : {0, 2, 3}) ASSERT_TRUE(shares[r].ok()) << shares[r].status();
  EXPECT_EQ(shares[0]->role, StateShare::Role::kSent);
  EXPECT_THAT(shares[0]->receivers, ElementsAre(2, 3));
  EXPECT_EQ(shares[0]->bytes, static_cast<int64_t>(state.size()));
  for (int r : {2, 3}) {
    EXPECT_EQ(shares[r]->role, StateShare::Role::kReceived);
    EXPECT_EQ(shares[r]->source, 0);
    EXPECT_EQ(bytes[r], state) << "rank " << r;
  }
  EXPECT_EQ(bytes[0], state);

  // Rank 1 holds the state: it returns at once, its bytes untouched.
  std::string mine = "rank 1's own";
  absl::StatusOr<StateShare> kept = ShareCommittedState(
      Formed(members, 1), nullptr, Loopback(), absl::Seconds(30), &mine);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->role, StateShare::Role::kKept);
  EXPECT_EQ(mine, "rank 1's own");
}

TEST(ElasticStateTest, EachSourceSendsToItsOwnReceiversAtOnce) {
  auto at = [](rendezvous::GenerationMember m, const char* standby) {
    m.standby = standby;
    return m;
  };
  // Two hosts' addresses; the backends still connect on loopback. The two
  // holders' bytes differ here only to show who sent what.
  const std::vector<rendezvous::GenerationMember> members = {
      at(Member(0, 3), "10.0.0.1:1"), at(Member(1, 3), "10.0.0.2:1"),
      at(Member(-1, -1), "10.0.0.2:2"), at(Member(-2, -1), "10.0.0.1:2")};
  auto store = std::make_shared<store::HashStore>();
  std::vector<std::string> bytes = {"from rank 0", "from rank 1", "", ""};
  std::vector<absl::StatusOr<StateShare>> shares(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      shares[r] = ShareCommittedState(Formed(members, r), store, Loopback(),
                                      absl::Seconds(30), &bytes[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(shares[r].ok()) << shares[r].status();
  EXPECT_THAT(shares[0]->receivers, ElementsAre(3));
  EXPECT_THAT(shares[1]->receivers, ElementsAre(2));
  EXPECT_EQ(shares[2]->source, 1);
  EXPECT_EQ(bytes[2], "from rank 1");
  EXPECT_EQ(shares[3]->source, 0);
  EXPECT_EQ(bytes[3], "from rank 0");
}

TEST(ElasticStateTest, NoneNeedsItNoneWaits) {
  const std::vector<rendezvous::GenerationMember> members = {Member(0, 4),
                                                             Member(2, 4)};
  for (int r = 0; r < 2; ++r) {
    std::string mine = "state";
    absl::StatusOr<StateShare> share = ShareCommittedState(
        Formed(members, r), nullptr, Loopback(), absl::Seconds(30), &mine);
    ASSERT_TRUE(share.ok()) << share.status();
    EXPECT_EQ(share->role, StateShare::Role::kKept);
    EXPECT_EQ(mine, "state");
  }
}

TEST(ElasticStateTest, AReceiverThatNeverComesIsNamedOnRankZero) {
  const std::vector<rendezvous::GenerationMember> members = {Member(0, 4),
                                                             Member(-1, -1)};
  std::string mine = "state";
  absl::StatusOr<StateShare> share = ShareCommittedState(
      Formed(members, 0), std::make_shared<store::HashStore>(), Loopback(),
      absl::Milliseconds(500), &mine);
  ASSERT_FALSE(share.ok());
  EXPECT_THAT(std::string(share.status().message()),
              HasSubstr("[rank 0] elastic state: creating a backend of rank 0 "
                        "and 1 receiving from it"));
}

}  // namespace
}  // namespace dtrain::trainer
