// The context's cache of executable CUDA graphs (graph_cache.h).
#include "src/engine/graph_cache.h"

#include <chrono>

namespace kiln {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void* GraphCache::find(uint64_t plan, const std::vector<void*>& addresses) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->plan != plan || it->addresses != addresses) continue;
    if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
    return entries_.front().exec;
  }
  return nullptr;
}

void* GraphCache::store(uint64_t plan, const std::vector<void*>& addresses, void* captured, ContextStats& stats) {
  if (entries_.size() >= capacity_) {
    // Full: update the least recently used graph of this plan in place, when there is one.
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->plan != plan) continue;
      const auto t0 = std::chrono::steady_clock::now();
      const bool updated = backend_.update_graph(it->exec, captured);
      stats.update_ms += since(t0);
      if (!updated) break;
      ++stats.graph_updates;
      it->addresses = addresses;
      auto fwd = std::next(it).base();
      entries_.splice(entries_.begin(), entries_, fwd);
      return entries_.front().exec;
    }
    evict_to(capacity_ - 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  void* exec = backend_.instantiate_graph(captured);
  stats.instantiate_ms += since(t0);
  ++stats.graph_instantiations;
  entries_.push_front(Entry{plan, addresses, exec});
  return exec;
}

void GraphCache::drop_plan(uint64_t plan) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->plan == plan) {
      backend_.destroy_graph(it->exec);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void GraphCache::clear() { evict_to(0); }

void GraphCache::set_capacity(size_t capacity) {
  capacity_ = capacity ? capacity : 1;
  evict_to(capacity_);
}

void GraphCache::evict_to(size_t size) {
  while (entries_.size() > size) {
    backend_.destroy_graph(entries_.back().exec);
    entries_.pop_back();
  }
}

}  // namespace kiln
