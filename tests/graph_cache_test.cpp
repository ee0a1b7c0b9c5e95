// The execution context's CUDA graph cache (src/engine/graph_cache.h), its policy checked through
// a backend that records the graph calls: cached per (plan, addresses); when full, a new graph of
// a plan already cached updates that plan's least recently used graph in place instead of
// instantiating; a failed update falls back to instantiating; dropping a plan destroys its graphs.
// The real CUDA calls are exercised by the GPU suite (ServingRuntime.* and CudaGraphCapture.*).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "src/engine/graph_cache.h"

namespace kiln {
namespace {

// Records graph calls; "captured" graphs and executables are small integers.
class RecordingBackend : public Backend {
 public:
  DeviceType device() const override { return DeviceType::kCUDA; }
  bool available(std::string*) const override { return true; }
  void* allocate(size_t) override { return nullptr; }
  void release(void*) override {}
  void copy_host_to_device(void*, const void*, size_t, void*) override {}
  void copy_device_to_host(void*, const void*, size_t, void*) override {}
  void copy_device_to_device(void*, const void*, size_t, void*) override {}
  void memset_device(void*, int, size_t, void*) override {}
  void* create_stream() override { return nullptr; }
  void destroy_stream(void*) override {}
  void synchronize(void*) override {}
  bool supports_graphs() const override { return true; }
  void* instantiate_graph(void* captured) override {
    ++instantiations;
    void* exec = reinterpret_cast<void*>(next++);
    runs[exec] = captured;
    live.insert(exec);
    return exec;
  }
  bool update_graph(void* exec, void* captured) override {
    ++updates;
    if (refuse_updates) return false;
    runs[exec] = captured;
    return true;
  }
  void destroy_graph(void* exec) override {
    ++destroyed;
    live.erase(exec);
  }
  int instantiations = 0, updates = 0, destroyed = 0;
  bool refuse_updates = false;
  uintptr_t next = 1000;
  std::map<void*, void*> runs;  // exec -> the captured graph it runs
  std::set<void*> live;
};

void* captured(uintptr_t v) { return reinterpret_cast<void*>(v); }
std::vector<void*> addresses(uintptr_t a) { return {reinterpret_cast<void*>(a), reinterpret_cast<void*>(a + 8)}; }

TEST(GraphCache, HitsPerPlanAndAddresses) {
  RecordingBackend b;
  ContextStats stats;
  GraphCache cache(b, 4);
  EXPECT_EQ(cache.find(1, addresses(100)), nullptr);
  void* e1 = cache.store(1, addresses(100), captured(1), stats);
  void* e2 = cache.store(1, addresses(200), captured(2), stats);
  void* e3 = cache.store(2, addresses(100), captured(3), stats);
  EXPECT_EQ(cache.find(1, addresses(100)), e1);
  EXPECT_EQ(cache.find(1, addresses(200)), e2);
  EXPECT_EQ(cache.find(2, addresses(100)), e3);
  EXPECT_EQ(cache.find(2, addresses(200)), nullptr);
  EXPECT_EQ(b.instantiations, 3);
  EXPECT_EQ(stats.graph_instantiations, 3u);
  EXPECT_EQ(stats.graph_updates, 0u);
}

TEST(GraphCache, WhenFullUpdatesTheSamePlansLeastRecentlyUsedGraph) {
  RecordingBackend b;
  ContextStats stats;
  GraphCache cache(b, 2);
  void* a = cache.store(1, addresses(100), captured(1), stats);
  void* c = cache.store(1, addresses(200), captured(2), stats);
  EXPECT_EQ(cache.find(1, addresses(100)), a);  // c is now the least recently used
  void* d = cache.store(1, addresses(300), captured(3), stats);
  EXPECT_EQ(d, c) << "the least recently used graph of plan 1 was updated in place";
  EXPECT_EQ(b.updates, 1);
  EXPECT_EQ(b.instantiations, 2);
  EXPECT_EQ(b.runs[d], captured(3));
  EXPECT_EQ(cache.find(1, addresses(300)), d);
  EXPECT_EQ(cache.find(1, addresses(200)), nullptr) << "re-keyed";
  EXPECT_EQ(stats.graph_updates, 1u);
  // A plan with no graph in the cache: the least recently used graph is destroyed, a new one made.
  void* e = cache.store(2, addresses(100), captured(4), stats);
  EXPECT_EQ(b.instantiations, 3);
  EXPECT_EQ(b.destroyed, 1);
  EXPECT_EQ(cache.find(1, addresses(100)), nullptr) << "a (least recently used) was evicted";
  EXPECT_EQ(cache.find(2, addresses(100)), e);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(GraphCache, FailedUpdateInstantiatesInstead) {
  RecordingBackend b;
  b.refuse_updates = true;
  ContextStats stats;
  GraphCache cache(b, 1);
  void* a = cache.store(1, addresses(100), captured(1), stats);
  void* c = cache.store(1, addresses(200), captured(2), stats);
  EXPECT_NE(a, c);
  EXPECT_EQ(b.updates, 1);
  EXPECT_EQ(b.instantiations, 2);
  EXPECT_EQ(b.live.count(a), 0u) << "the graph that could not be updated was destroyed";
  EXPECT_EQ(stats.graph_updates, 0u);
  EXPECT_EQ(cache.find(1, addresses(200)), c);
}

TEST(GraphCache, DropPlanClearAndCapacity) {
  RecordingBackend b;
  ContextStats stats;
  {
    GraphCache cache(b, 8);
    cache.store(1, addresses(100), captured(1), stats);
    cache.store(2, addresses(100), captured(2), stats);
    cache.store(1, addresses(200), captured(3), stats);
    cache.drop_plan(1);
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(b.live.size(), 1u);
    cache.store(3, addresses(100), captured(4), stats);
    cache.store(4, addresses(100), captured(5), stats);
    cache.set_capacity(1);
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_NE(cache.find(4, addresses(100)), nullptr);
    cache.set_capacity(0);
    EXPECT_EQ(cache.capacity(), 1u);
  }
  EXPECT_TRUE(b.live.empty()) << "the cache destroys its graphs";
}

}  // namespace
}  // namespace kiln
