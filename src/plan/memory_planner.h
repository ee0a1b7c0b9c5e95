// Activation memory planning: assigns each buffer an offset in one arena so that buffers whose
// lifetimes overlap never overlap in memory, reusing space by liveness. Deterministic.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

struct BufferRequest {
  uint64_t size = 0;  // bytes
  int first_use = 0;  // index of the step that writes it
  int last_use = 0;   // index of the last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<uint64_t> offsets;  // per request, aligned to `alignment`
  uint64_t peak = 0;              // arena bytes needed
  uint64_t naive = 0;             // sum of aligned sizes (no reuse)
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, uint64_t alignment = 256);

}  // namespace kiln
