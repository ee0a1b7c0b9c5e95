// The execution context's cache of shape plans (src/engine/shape_plan_cache.h): lookups by input
// dims, thread count and elision setting; least recently used out first; capacity changes.
#include <gtest/gtest.h>

#include "src/engine/shape_plan_cache.h"

namespace kiln {
namespace {

ShapePlanKey key(int64_t batch, int threads = 1, bool elision = true) {
  ShapePlanKey k;
  k.dims = {Dims{batch, 3, 8, 8}, Dims{batch, 4}};
  k.num_threads = threads;
  k.concat_elision = elision;
  return k;
}

std::unique_ptr<ShapePlan> plan(uint64_t id) {
  auto p = std::make_unique<ShapePlan>();
  p->id = id;
  return p;
}

TEST(ShapePlanCache, FindsByEveryPartOfTheKey) {
  ShapePlanCache cache(8);
  EXPECT_EQ(cache.find(key(1)), nullptr);
  EXPECT_TRUE(cache.insert(key(1), plan(1)).empty());
  EXPECT_TRUE(cache.insert(key(1, 2), plan(2)).empty());
  EXPECT_TRUE(cache.insert(key(1, 1, false), plan(3)).empty());
  ASSERT_NE(cache.find(key(1)), nullptr);
  EXPECT_EQ(cache.find(key(1))->id, 1u);
  EXPECT_EQ(cache.find(key(1, 2))->id, 2u);
  EXPECT_EQ(cache.find(key(1, 1, false))->id, 3u);
  EXPECT_EQ(cache.find(key(2)), nullptr);
  ShapePlanKey other = key(1);
  other.dims[1] = Dims{1, 5};
  EXPECT_EQ(cache.find(other), nullptr) << "the second input's dims are part of the key";
  EXPECT_EQ(cache.size(), 3u);
}

TEST(ShapePlanCache, EvictsTheLeastRecentlyUsed) {
  ShapePlanCache cache(2);
  cache.insert(key(1), plan(1));
  cache.insert(key(2), plan(2));
  ASSERT_NE(cache.find(key(1)), nullptr);  // 1 is now the most recently used
  auto evicted = cache.insert(key(3), plan(3));
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0]->id, 2u);
  EXPECT_NE(cache.find(key(1)), nullptr);
  EXPECT_NE(cache.find(key(3)), nullptr);
  EXPECT_EQ(cache.find(key(2)), nullptr);
  const auto order = cache.plans();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0]->id, 3u) << "most recently used first";
}

TEST(ShapePlanCache, CapacityRemoveAndClear) {
  ShapePlanCache cache(4);
  for (uint64_t i = 1; i <= 4; ++i) cache.insert(key(static_cast<int64_t>(i)), plan(i));
  auto evicted = cache.set_capacity(2);
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0]->id, 1u);
  EXPECT_EQ(evicted[1]->id, 2u);
  EXPECT_EQ(cache.set_capacity(0).size(), 1u) << "capacity is at least 1";
  EXPECT_EQ(cache.capacity(), 1u);
  ShapePlan* last = cache.find(key(4));
  ASSERT_NE(last, nullptr);
  auto removed = cache.remove(last);
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->id, 4u);
  EXPECT_EQ(cache.size(), 0u);
  cache.insert(key(7), plan(7));
  auto replaced = cache.insert(key(7), plan(8));
  ASSERT_EQ(replaced.size(), 1u) << "inserting an existing key replaces its plan";
  EXPECT_EQ(replaced[0]->id, 7u);
  EXPECT_EQ(cache.clear().size(), 1u);
  EXPECT_EQ(cache.find(key(7)), nullptr);
}

}  // namespace
}  // namespace kiln
