#include "dist/store/store_clock.h"

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/store/hash_store.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

TEST(StoreClockTest, OneHostsClocksAgreeWithinTheStatedError) {
  HashStore store;
  absl::Status answered;
  std::thread reference(
      [&] { answered = AnswerClock(store, "t", 3, 5, absl::Seconds(10)); });
  absl::StatusOr<ClockOffset> c = AskClock(store, "t", 3, 5, absl::Seconds(10));
  reference.join();
  ASSERT_TRUE(answered.ok()) << answered;
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rounds, 5);
  EXPECT_GT(c->round_trip, absl::ZeroDuration());
  EXPECT_EQ(c->error, c->round_trip / 2);
  // The same clock: the true offset is 0.
  EXPECT_LE(absl::AbsDuration(c->offset), c->error);
}

// A reference whose clock runs 5 s ahead, answered by hand.
TEST(StoreClockTest, AReferenceAheadGivesAPositiveOffset) {
  HashStore store;
  std::thread reference([&] {
    for (int i = 0; i < 3; ++i) {
      const std::string round = absl::StrCat("t/clock/1/", i);
      ASSERT_TRUE(store.Get(round + "/ask", absl::Seconds(10)).ok());
      ASSERT_TRUE(store
                      .Set(round + "/time",
                           absl::StrCat(absl::ToUnixNanos(absl::Now() +
                                                          absl::Seconds(5))))
                      .ok());
    }
  });
  absl::StatusOr<ClockOffset> c = AskClock(store, "t", 1, 3, absl::Seconds(10));
  reference.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LE(absl::AbsDuration(c->offset - absl::Seconds(5)), c->error);
}

TEST(StoreClockTest, AnAnswerThatIsNotATimeIsRefused) {
  HashStore store;
  ASSERT_TRUE(store.Set("t/clock/1/0/time", "noon").ok());
  absl::StatusOr<ClockOffset> c = AskClock(store, "t", 1, 1, absl::Seconds(1));
  ASSERT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
  EXPECT_NE(c.status().message().find("\"noon\""), std::string::npos);
}

TEST(StoreClockTest, NoReferenceTimesOut) {
  HashStore store;
  absl::StatusOr<ClockOffset> c =
      AskClock(store, "t", 1, 2, absl::Milliseconds(50));
  EXPECT_FALSE(c.ok());
  absl::Status st = AnswerClock(store, "u", 1, 1, absl::Milliseconds(50));
  EXPECT_FALSE(st.ok());
}

}  // namespace
}  // namespace dtrain::store
