// Activation memory planning (memory_planner.h): greedy best-fit by size, the strategy of
// TFLite's "greedy by size" arena planner. Requests are placed largest first; each goes into
// the smallest gap left between already-placed buffers whose lifetimes overlap its own, or
// after the last of them when no gap is large enough. Placing big buffers first keeps the
// small ones from fragmenting the arena. Every tie is broken by (first_use, request index), so
// the same requests always give the same offsets.
#include "src/plan/memory_planner.h"

#include <algorithm>
#include <numeric>

#include "kiln/error.h"

namespace kiln {
namespace {

uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

struct Placed {
  uint64_t offset;
  uint64_t end;  // offset + aligned size
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
  std::vector<uint64_t> sizes(n);
  for (size_t i = 0; i < n; ++i) {
    const BufferRequest& r = requests[i];
    if (r.last_use < r.first_use) {
      throw Error("memory planner: buffer " + std::to_string(i) + " is read (step " + std::to_string(r.last_use) +
                  ") before it is written (step " + std::to_string(r.first_use) + ")");
    }
    sizes[i] = align_up(r.size, alignment);
    plan.naive += sizes[i];
  }

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    if (requests[a].first_use != requests[b].first_use) return requests[a].first_use < requests[b].first_use;
    return a < b;
  });

  std::vector<size_t> placed;  // request indices already given an offset
  placed.reserve(n);
  std::vector<Placed> live;
  for (size_t idx : order) {
    const uint64_t size = sizes[idx];
    if (size == 0) {  // empty tensors need no memory; offset 0 is as good as any
      plan.offsets[idx] = 0;
      continue;
    }
    // The placed buffers that are alive at the same time, by offset.
    live.clear();
    for (size_t p : placed) {
      if (lifetimes_overlap(requests[idx], requests[p])) live.push_back({plan.offsets[p], plan.offsets[p] + sizes[p]});
    }
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
    plan.peak = std::max(plan.peak, plan.offsets[idx] + size);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace kiln
