// An execution context's cache of shape plans (src/plan/shape_plan.h), least recently used
// first out: the key is what a plan was built for (the input dims, the CPU thread count,
// whether concatenations may be elided, and whether it is for plain launches). Lookups cost a hash of the input dims;
// the context keeps the plan of the current shapes at hand, so an inference at unchanged shapes does not even look up.
// Not thread-safe (one per context).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/plan/shape_plan.h"

namespace kiln {

struct ShapePlanKey {
  std::vector<Dims> dims;  // per network input, in binding order
  int num_threads = 1;
  bool concat_elision = true;
  bool launch_tactics = false;  // plans for plain launches (no CUDA graphs): EngineData::launch_tactics
  bool operator==(const ShapePlanKey& o) const {
    return num_threads == o.num_threads && concat_elision == o.concat_elision && launch_tactics == o.launch_tactics &&
           dims == o.dims;
  }
};

struct ShapePlanKeyHash {
  size_t operator()(const ShapePlanKey& k) const;
};

class ShapePlanCache {
 public:
  explicit ShapePlanCache(size_t capacity = 32) : capacity_(capacity ? capacity : 1) {}

  // The plan for `key`, made the most recently used; null when absent.
  ShapePlan* find(const ShapePlanKey& key);
  // Adds a plan (the most recently used) and returns the plans evicted to stay within capacity
  // (the caller drops what refers to them before destroying them).
  std::vector<std::unique_ptr<ShapePlan>> insert(const ShapePlanKey& key, std::unique_ptr<ShapePlan> plan);
  // Changes the capacity (at least 1); returns the plans evicted.
  std::vector<std::unique_ptr<ShapePlan>> set_capacity(size_t capacity);
  // Removes one plan (e.g. after its kernels failed); returns it.
  std::unique_ptr<ShapePlan> remove(const ShapePlan* plan);
  // Removes everything.
  std::vector<std::unique_ptr<ShapePlan>> clear();
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  // Every plan, most recently used first.
  std::vector<ShapePlan*> plans() const;

 private:
  struct Entry {
    ShapePlanKey key;
    std::unique_ptr<ShapePlan> plan;
  };
  std::vector<std::unique_ptr<ShapePlan>> shrink();

  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<ShapePlanKey, std::list<Entry>::iterator, ShapePlanKeyHash> index_;
};

}  // namespace kiln
