// Activation memory planning (memory_planner.h): greedy best-fit by size, the strategy of
// TFLite's "greedy by size" arena planner. Requests are placed largest first; each goes into
// the smallest gap left between already-placed buffers whose lifetimes overlap its own, or
// after the last of them when no gap is large enough. Placing big buffers first keeps the
// small ones from fragmenting the arena. Every tie is broken by (first_use, request index), so
// the same requests always give the same offsets.
#include "src/plan/memory_planner.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "kiln/error.h"
#include "src/core/checked_math.h"

namespace kiln {
namespace {

uint64_t align_up(uint64_t value, uint64_t alignment, size_t index) {
  uint64_t r = 0;
  if (__builtin_add_overflow(value, alignment - 1, &r)) {
    throw Error("memory planner: buffer " + std::to_string(index) + " of " + std::to_string(value) +
                " bytes overflows 64-bit sizes when aligned");
  }
  return r / alignment * alignment;
}

struct Placed {
  uint64_t offset;
  uint64_t end;  // offset + aligned size
};

// The placed buffers whose lifetimes overlap a query lifetime [f, l], found without scanning
// every placed buffer (which made planning quadratic in the number of layers): those alive at
// step f come from a segment tree over the steps (each lifetime stored at O(log steps) nodes),
// those that start inside (f, l] from a map by first step. Cost per query: O(log steps + the
// number of overlapping buffers).
class LifetimeIndex {
 public:
  LifetimeIndex(int first_step, int last_step)
      : base_(first_step), steps_(static_cast<size_t>(last_step - first_step) + 1), nodes_(4 * steps_) {}

  void insert(size_t id, int first, int last) {
    insert(1, 0, steps_ - 1, pos(first), pos(last), id);
    by_start_.emplace(first, id);
  }

  // Appends the ids overlapping [first, last] to `out` (each once).
  void query(int first, int last, std::vector<size_t>& out) const {
    const size_t f = pos(first);
    size_t node = 1, lo = 0, hi = steps_ - 1;
    for (;;) {
      out.insert(out.end(), nodes_[node].begin(), nodes_[node].end());
      if (lo == hi) break;
      const size_t mid = lo + (hi - lo) / 2;
      if (f <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    for (auto it = by_start_.upper_bound(first); it != by_start_.end() && it->first <= last; ++it) {
      out.push_back(it->second);
    }
  }

 private:
  size_t pos(int step) const { return static_cast<size_t>(step - base_); }
  void insert(size_t node, size_t lo, size_t hi, size_t a, size_t b, size_t id) {
    if (b < lo || hi < a) return;
    if (a <= lo && hi <= b) {
      nodes_[node].push_back(id);
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    insert(2 * node, lo, mid, a, b, id);
    insert(2 * node + 1, mid + 1, hi, a, b, id);
  }

  int base_;
  size_t steps_;
  std::vector<std::vector<size_t>> nodes_;
  std::multimap<int, size_t> by_start_;
};

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, uint64_t alignment) {
  if (alignment == 0) alignment = 1;
  if ((alignment & (alignment - 1)) != 0) {
    throw Error("memory planner: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  const size_t n = requests.size();
  MemoryPlan plan;
  plan.offsets.assign(n, 0);
  if (n == 0) return plan;
  std::vector<uint64_t> sizes(n);
  int first_step = requests[0].first_use, last_step = requests[0].last_use;
  for (size_t i = 0; i < n; ++i) {
    const BufferRequest& r = requests[i];
    if (r.last_use < r.first_use) {
      throw Error("memory planner: buffer " + std::to_string(i) + " is read (step " + std::to_string(r.last_use) +
                  ") before it is written (step " + std::to_string(r.first_use) + ")");
    }
    sizes[i] = align_up(r.size, alignment, i);
    plan.naive = checked_add_bytes(plan.naive, sizes[i], "memory planner: the sum of the activation sizes");
    first_step = std::min(first_step, r.first_use);
    last_step = std::max(last_step, r.last_use);
  }

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    if (requests[a].first_use != requests[b].first_use) return requests[a].first_use < requests[b].first_use;
    return a < b;
  });

  LifetimeIndex placed(first_step, last_step);  // request indices already given an offset
  std::vector<size_t> overlapping;
  std::vector<Placed> live;
  for (size_t idx : order) {
    const uint64_t size = sizes[idx];
    if (size == 0) {  // empty tensors need no memory; offset 0 is as good as any
      plan.offsets[idx] = 0;
      continue;
    }
    // The placed buffers that are alive at the same time, by offset.
    overlapping.clear();
    placed.query(requests[idx].first_use, requests[idx].last_use, overlapping);
    live.clear();
    for (size_t p : overlapping) live.push_back({plan.offsets[p], plan.offsets[p] + sizes[p]});
    std::sort(live.begin(), live.end(), [](const Placed& a, const Placed& b) {
      return a.offset != b.offset ? a.offset < b.offset : a.end < b.end;
    });
    // Walk the gaps between them; keep the smallest gap that fits (lowest offset on ties).
    uint64_t best_offset = 0;
    uint64_t best_gap = UINT64_MAX;
    bool found = false;
    uint64_t cursor = 0;  // end of the occupied region so far
    for (const Placed& b : live) {
      if (b.offset > cursor) {
        const uint64_t gap = b.offset - cursor;
        if (gap >= size && gap < best_gap) {
          best_gap = gap;
          best_offset = cursor;
          found = true;
        }
      }
      cursor = std::max(cursor, b.end);
    }
    plan.offsets[idx] = found ? best_offset : cursor;
    plan.peak = std::max(plan.peak, checked_add_bytes(plan.offsets[idx], size, "memory planner: the arena size"));
    placed.insert(idx, requests[idx].first_use, requests[idx].last_use);
  }
  return plan;
}

}  // namespace kiln
