#include "dist/store/store_conformance.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"

namespace dtrain::store::testing {
namespace {

using ::testing::HasSubstr;

}  // namespace

void StoreConformanceTest::SetUp() {
  first_ = GetParam().open(absl::Seconds(30));
  ASSERT_NE(first_, nullptr);
}

void StoreConformanceTest::TearDown() {
  first_.reset();
  if (GetParam().close) GetParam().close();
}

std::shared_ptr<Store> StoreConformanceTest::Connect(absl::Duration timeout) {
  return GetParam().connect(*first_, timeout);
}

TEST_P(StoreConformanceTest, SetThenGetReturnsValue) {
  ASSERT_TRUE(store().Set("alpha", "one").ok());
  absl::StatusOr<std::string> v = store().Get("alpha", absl::Seconds(5));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "one");
  ASSERT_TRUE(store().Set("alpha", "two").ok());
  EXPECT_EQ(*store().Get("alpha", absl::Seconds(5)), "two");
}

TEST_P(StoreConformanceTest, ValuesAreBytes) {
  const std::string binary("a\0b\xff\n", 5);
  const std::string big(1 << 20, 'x');
  ASSERT_TRUE(store().Set("binary", binary).ok());
  ASSERT_TRUE(store().Set("big", big).ok());
  ASSERT_TRUE(store().Set("empty", "").ok());
  EXPECT_EQ(*store().Get("binary", absl::Seconds(5)), binary);
  EXPECT_EQ(*store().Get("big", absl::Seconds(5)), big);
  EXPECT_EQ(*store().Get("empty", absl::Seconds(5)), "");
}

TEST_P(StoreConformanceTest, GetOfMissingKeyTimesOutNamingKey) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> v =
      store().Get("never/set", absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(v.status().message(), HasSubstr("never/set"));
  EXPECT_THAT(v.status().message(), HasSubstr(store().Describe()));
  EXPECT_GE(waited, absl::Milliseconds(150));
  EXPECT_LT(waited, absl::Seconds(10));
}

TEST_P(StoreConformanceTest, GetBlocksUntilAnotherClientSets) {
  std::shared_ptr<Store> peer = Connect();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(peer->Set("late", "value").ok());
  });
  absl::StatusOr<std::string> v = store().Get("late", absl::Seconds(20));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "value");
}

TEST_P(StoreConformanceTest, AddKeepsDecimalCounter) {
  EXPECT_EQ(*store().Add("counter", 3), 3);
  EXPECT_EQ(*store().Add("counter", -5), -2);
  EXPECT_EQ(*store().Add("counter", 0), -2);
  EXPECT_EQ(*store().Get("counter", absl::Seconds(5)), "-2");
  ASSERT_TRUE(store().Set("text", "abc").ok());
  absl::StatusOr<int64_t> bad = store().Add("text", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("text"));
}

TEST_P(StoreConformanceTest, CompareSetFollowsC10dSemantics) {
  // Absent key, empty expectation: set.
  EXPECT_EQ(*store().CompareSet("cas", "", "first"), "first");
  // Wrong expectation: unchanged, current value returned.
  EXPECT_EQ(*store().CompareSet("cas", "wrong", "second"), "first");
  // Right expectation: swapped.
  EXPECT_EQ(*store().CompareSet("cas", "first", "second"), "second");
  EXPECT_EQ(*store().Get("cas", absl::Seconds(5)), "second");
  // Absent key, non-empty expectation: nothing set, empty returned.
  EXPECT_EQ(*store().CompareSet("absent", "x", "y"), "");
  EXPECT_FALSE(*store().Check({"absent"}));
}

TEST_P(StoreConformanceTest, CheckAndDeleteAndNumKeys) {
  const int64_t before = *store().NumKeys();
  EXPECT_FALSE(*store().Check({"k1"}));
  ASSERT_TRUE(store().Set("k1", "v").ok());
  ASSERT_TRUE(store().Set("k2", "v").ok());
  EXPECT_TRUE(*store().Check({"k1", "k2"}));
  EXPECT_FALSE(*store().Check({"k1", "k3"}));
  EXPECT_EQ(*store().NumKeys(), before + 2);
  EXPECT_TRUE(*store().Delete("k1"));
  EXPECT_FALSE(*store().Delete("k1"));
  EXPECT_FALSE(*store().Check({"k1"}));
  EXPECT_EQ(*store().NumKeys(), before + 1);
}

TEST_P(StoreConformanceTest, WaitReturnsWhenAllKeysExist) {
  std::shared_ptr<Store> peer = Connect();
  std::thread setter([&] {
    ASSERT_TRUE(peer->Set("w1", "1").ok());
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(peer->Set("w2", "2").ok());
  });
  absl::Status s = store().Wait({"w1", "w2"}, absl::Seconds(20));
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST_P(StoreConformanceTest, WaitTimesOutNamingMissingKeys) {
  ASSERT_TRUE(store().Set("present", "1").ok());
  absl::Status s =
      store().Wait({"present", "missing/a"}, absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("missing/a"));
}

TEST_P(StoreConformanceTest, StoreUsableAfterTimeout) {
  EXPECT_FALSE(store().Get("nothing", absl::Milliseconds(50)).ok());
  ASSERT_TRUE(store().Set("after", "ok").ok());
  EXPECT_EQ(*store().Get("after", absl::Seconds(5)), "ok");
}

TEST_P(StoreConformanceTest, ConcurrentAddsFromManyClientsSum) {
  constexpr int kClients = 8;
  constexpr int kAddsEach = 50;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Connect());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kAddsEach; ++j) {
        if (!clients[i]->Add("sum", 1).ok()) ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(*store().Add("sum", 0), kClients * kAddsEach);
}

TEST_P(StoreConformanceTest, OneHandleSharedByThreads) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const std::string key = absl::StrCat("thread/", i);
      EXPECT_TRUE(store().Set(key, std::to_string(i)).ok());
      // Each thread also waits for its neighbour's key.
      const std::string next = absl::StrCat("thread/", (i + 1) % kThreads);
      absl::StatusOr<std::string> v = store().Get(next, absl::Seconds(20));
      EXPECT_TRUE(v.ok()) << v.status();
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace dtrain::store::testing
