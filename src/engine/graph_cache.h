// An execution context's CUDA graphs, keyed by (shape plan, I/O addresses), least recently used
// first out. A serving context that rotates K buffer sets over S shapes replays S x K cached
// graphs once each was captured; when the cache is full, a new graph of a shape that already
// has one updates the least recently used graph of that shape in place (Backend::update_graph,
// cudaGraphExecUpdate: same kernels, other pointers), which is cheaper than instantiating a
// new one. Works through the Backend's graph calls only (unit-tested with a recording backend).
// Not thread-safe (one per context).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

#include "kiln/runtime.h"
#include "src/backends/backend.h"

namespace kiln {

class GraphCache {
 public:
  GraphCache(Backend& backend, size_t capacity = 16) : backend_(backend), capacity_(capacity ? capacity : 1) {}
  ~GraphCache() { clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The executable graph of (plan, addresses), made the most recently used; null when absent.
  void* find(uint64_t plan, const std::vector<void*>& addresses);
  // Makes `captured` (a graph of `plan` with `addresses`, from Backend::end_capture, still the
  // caller's to destroy) executable and caches it: when the cache is full and its least recently
  // used graph of the same plan can be updated in place, that one is re-keyed; otherwise a new
  // graph is instantiated (evicting the least recently used). Returns the executable graph.
  void* store(uint64_t plan, const std::vector<void*>& addresses, void* captured, ContextStats& stats);
  // Destroys the graphs of one plan (when the plan is dropped), or all (memory moved).
  void drop_plan(uint64_t plan);
  void clear();
  void set_capacity(size_t capacity);
  size_t capacity() const { return capacity_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t plan = 0;
    std::vector<void*> addresses;
    void* exec = nullptr;
  };
  void evict_to(size_t size);

  Backend& backend_;
  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace kiln
