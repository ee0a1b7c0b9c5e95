// The context's LRU cache of shape plans (shape_plan_cache.h).
#include "src/engine/shape_plan_cache.h"

namespace kiln {

size_t ShapePlanKeyHash::operator()(const ShapePlanKey& k) const {
  uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
  for (const Dims& d : k.dims) {
    mix(static_cast<uint64_t>(d.rank()));
    for (int i = 0; i < d.rank(); ++i) mix(static_cast<uint64_t>(d[i]));
  }
  mix(static_cast<uint64_t>(k.num_threads));
  mix(k.concat_elision ? 1 : 0);
  mix(k.launch_tactics ? 2 : 0);
  return static_cast<size_t>(h);
}

ShapePlan* ShapePlanCache::find(const ShapePlanKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, it->second);
  return it->second->plan.get();
}

std::vector<std::unique_ptr<ShapePlan>> ShapePlanCache::insert(const ShapePlanKey& key,
                                                               std::unique_ptr<ShapePlan> plan) {
  std::vector<std::unique_ptr<ShapePlan>> evicted;
  auto old = index_.find(key);
  if (old != index_.end()) {
    evicted.push_back(std::move(old->second->plan));
    entries_.erase(old->second);
    index_.erase(old);
  }
  entries_.push_front(Entry{key, std::move(plan)});
  index_[key] = entries_.begin();
  for (auto& p : shrink()) evicted.push_back(std::move(p));
  return evicted;
}

std::vector<std::unique_ptr<ShapePlan>> ShapePlanCache::set_capacity(size_t capacity) {
  capacity_ = capacity ? capacity : 1;
  return shrink();
}

std::unique_ptr<ShapePlan> ShapePlanCache::remove(const ShapePlan* plan) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->plan.get() != plan) continue;
    std::unique_ptr<ShapePlan> p = std::move(it->plan);
    index_.erase(it->key);
    entries_.erase(it);
    return p;
  }
  return nullptr;
}

std::vector<std::unique_ptr<ShapePlan>> ShapePlanCache::clear() {
  std::vector<std::unique_ptr<ShapePlan>> all;
  for (Entry& e : entries_) all.push_back(std::move(e.plan));
  entries_.clear();
  index_.clear();
  return all;
}

std::vector<ShapePlan*> ShapePlanCache::plans() const {
  std::vector<ShapePlan*> r;
  for (const Entry& e : entries_) r.push_back(e.plan.get());
  return r;
}

std::vector<std::unique_ptr<ShapePlan>> ShapePlanCache::shrink() {
  std::vector<std::unique_ptr<ShapePlan>> evicted;
  while (entries_.size() > capacity_) {
    Entry& last = entries_.back();
    evicted.push_back(std::move(last.plan));
    index_.erase(last.key);
    entries_.pop_back();
  }
  return evicted;
}

}  // namespace kiln
