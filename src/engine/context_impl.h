// An execution context's implementation, one part per concern: the I/O bindings (bindings.h),
// the device memory (context_memory.h), the shape plans (shape_plan_cache.h, with the plan of
// the current shapes at hand), the CUDA graphs (graph_cache.h), layer profiling, the strings
// kernels write, and the counters. The orchestration (which plan, graph or plain launch) is
// context.cpp's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/runtime.h"
#include "src/engine/bindings.h"
#include "src/engine/context_memory.h"
#include "src/engine/engine_impl.h"
#include "src/engine/graph_cache.h"
#include "src/engine/shape_plan_cache.h"
#include "src/engine/thread_adaptation.h"

namespace kiln {

// Per-layer wall-clock profiling (set_profiling).
struct LayerProfile {
  bool enabled = false;
  std::vector<double> ms;  // per step
  std::vector<int64_t> runs;
  std::vector<int64_t> elided;  // runs in which the step was an elided concatenation
};

struct ContextImpl {
  ContextImpl(EngineImpl& engine, ContextMemory memory_mode);
  ~ContextImpl();

  EngineImpl* engine = nullptr;
  int profile = 0;
  std::shared_ptr<const ProfileInfo> profile_info;
  int num_threads = 0;          // set_num_threads (0: automatic)
  ThreadAdaptation adaptation;  // CPU engines: fewer threads while the cores are shared
  bool concat_elision = true;
  std::map<std::string, Dims> input_dims;  // current input dims
  ShapePlanKey key;                        // of the current input dims
  Bindings bindings;
  ContextDeviceMemory memory;
  // Kernels made when the profile was selected, one per step (null where no kernel can run);
  // each plan's kernels are another_instance() of these, sharing what does not depend on shapes.
  std::vector<std::unique_ptr<Kernel>> prototypes;
  ShapePlanCache plans;
  ShapePlan* current = nullptr;  // the plan of `key`, when looked up since it changed
  // Shape queries without a plan (context.cpp, queried_states): the states of query_dims.
  bool query_valid = false;
  std::map<std::string, Dims> query_dims;
  TensorStates query_states;
  uint64_t next_plan_id = 1;
  GraphCache graphs;
  void* own_stream = nullptr;  // device engines: for null-stream calls
  // Graphs: set_graph_capture(true) / automatic (no call yet) / an automatic capture failed.
  bool graph_explicit = false;
  bool graph_auto = true;
  bool warned_capture = false;
  LayerProfile profiling;
  // Data-dependent sizes read during the current inference, and tensors that outgrew their plan.
  std::unordered_map<const Tensor*, int64_t> sizes;
  std::unordered_map<const Tensor*, DeviceBuffer> overflow_buffers;
  std::unordered_map<const Tensor*, DeviceBuffer> dd_value_buffers;  // host-computed values that follow sizes
  // Strings kernels write (CPU), reset at the start of each inference.
  StringArena strings;
  ContextStats stats;
  uint64_t memory_allocations_at_reset = 0;
  uint64_t graph_memory_generation = 0;  // the memory generation the cached graphs were captured with
};

}  // namespace kiln
