// The Store contract (store_conformance.h) on HashStore and PrefixStore, and
// what PrefixStore adds.

#include <memory>

#include "dist/store/hash_store.h"
#include "dist/store/prefix_store.h"
#include "dist/store/store_conformance.h"
#include "gtest/gtest.h"

namespace dtrain::store {
namespace {

using testing::StoreConformanceTest;
using testing::StoreFactory;

StoreFactory HashStoreFactory() {
  return {"HashStore",
          [](absl::Duration t) { return std::make_shared<HashStore>(t); },
          // Threads share the one in-memory store.
          [](Store& first, absl::Duration) {
            return std::shared_ptr<Store>(&first, [](Store*) {});
          },
          nullptr};
}

StoreFactory PrefixStoreFactory() {
  return {"PrefixStore",
          [](absl::Duration t) {
            return std::make_shared<PrefixStore>(
                "group", std::make_shared<HashStore>(t));
          },
          [](Store& first, absl::Duration) {
            auto& prefix = static_cast<PrefixStore&>(first);
            // A second PrefixStore over the same base: the same namespace seen
            // by another client.
            std::shared_ptr<Store> base(&prefix.base(), [](Store*) {});
            return std::make_shared<PrefixStore>("group", base);
          },
          nullptr};
}

INSTANTIATE_TEST_SUITE_P(InMemory, StoreConformanceTest,
                         ::testing::Values(HashStoreFactory(),
                                           PrefixStoreFactory()),
                         [](const auto& info) { return info.param.name; });

TEST(PrefixStoreTest, NamespacesDoNotClash) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  ASSERT_TRUE(a.Set("key", "from a").ok());
  ASSERT_TRUE(b.Set("key", "from b").ok());
  EXPECT_EQ(*a.Get("key"), "from a");
  EXPECT_EQ(*b.Get("key"), "from b");
  EXPECT_EQ(*base->Get("a/key"), "from a");
  EXPECT_EQ(*a.Add("n", 2), 2);
  EXPECT_FALSE(*b.Check({"n"}));
}

TEST(PrefixStoreTest, TimeoutNamesFullKey) {
  PrefixStore store("group", std::make_shared<HashStore>());
  absl::StatusOr<std::string> v = store.Get("k", absl::Milliseconds(10));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("group/k"), std::string::npos)
      << v.status();
}

}  // namespace
}  // namespace dtrain::store
