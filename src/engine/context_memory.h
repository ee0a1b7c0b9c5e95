// An execution context's device memory: the activation arena, the kernels' workspace and the
// per-step error flags, either allocated by the context (ContextMemory::kStatic: three buffers,
// the arena sized when a profile is selected, each grown only when a shape needs more) or one
// region given by the caller and laid out as [arena | workspace | flags] (kUserManaged:
// set_device_memory; never grown, except workspace a shape needs beyond what
// Engine::device_memory_size reserved, which goes to a separate buffer with a warning).
// `generation` changes whenever any pointer changes, so that plans re-bind and graphs that
// baked in the old pointers are dropped.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/runtime.h"
#include "kiln/error.h"
#include "src/backends/backend.h"
#include "src/plan/shape_plan.h"

namespace kiln {

class ContextDeviceMemory {
 public:
  ContextDeviceMemory(Backend& backend, ContextMemory mode, uint64_t error_flag_bytes);

  ContextMemory mode() const { return mode_; }
  // Sizes the memory for a profile whose plan needs `arena` bytes. kStatic: allocates (keeping
  // the current buffer when large enough). kUserManaged: only records the sizes. A failed
  // allocation's message ends with "for the activation memory of <what>".
  void reserve_for_profile(uint64_t arena, const std::string& what = "the optimization profile");
  // kUserManaged: the caller's memory. Throws when `size` is below `required` (naming both).
  void set_user_memory(void* memory, uint64_t size, uint64_t required, int profile);
  bool ready() const { return base_ != nullptr || mode_ == ContextMemory::kStatic; }
  // Makes room for a plan needing `arena` and `workspace` bytes. kStatic grows (allocating);
  // kUserManaged throws when the arena does not fit (naming the sizes and `what`), and puts
  // extra workspace in a buffer of its own (warning once).
  void ensure(uint64_t arena, uint64_t workspace, const std::string& what);
  // True when ensure(arena, workspace, ...) would change nothing (the inference's check: no
  // message is built unless something has to change).
  bool fits(uint64_t arena, uint64_t workspace) const {
    return base_ && arena <= arena_ && workspace <= view_.workspace_bytes;
  }
  // The pointers plans bind to (valid until the generation changes).
  const PlanMemory& view() const { return view_; }
  uint64_t arena_bytes() const { return arena_; }
  // Allocations this object made (ContextStats::device_allocations).
  uint64_t allocations() const { return allocations_; }

 private:
  void layout(uint8_t* base, uint64_t size);
  void grow_static(uint64_t arena, uint64_t workspace, const std::string& what);

  Backend& backend_;
  ContextMemory mode_;
  uint64_t flags_ = 0;
  DeviceBuffer own_arena_, own_workspace_, own_flags_;  // kStatic
  uint8_t* base_ = nullptr;                             // the region in use
  uint64_t size_ = 0;
  uint64_t arena_ = 0;            // bytes reserved for the arena at the start of the region
  DeviceBuffer extra_workspace_;  // kUserManaged: workspace beyond the reserved region
  bool warned_ = false;
  uint64_t allocations_ = 0;
  PlanMemory view_;
};

// Rounds up to the 256-byte granule of the region's parts.
inline uint64_t memory_granule(uint64_t bytes) {
  if (bytes > UINT64_MAX - 255) throw Error("a memory size of " + std::to_string(bytes) + " bytes overflows 64 bits");
  return (bytes + 255) / 256 * 256;
}

}  // namespace kiln
