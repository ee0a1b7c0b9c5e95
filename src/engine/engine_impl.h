// What a deserialized engine holds (Engine's implementation): the engine data, its steps and
// their kernel entries, the constants in device memory, the I/O bindings' order, and what is
// computed once per optimization profile and shared by the engine's contexts (the tensor
// states at the profile's points and the profile plan that sizes every context's arena).
// Internal to the runtime (src/engine) and the tools.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/runtime.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/engine/engine_format.h"
#include "src/plan/execution_plan.h"
#include "src/plan/kernel_config.h"
#include "src/plan/shape_plan.h"

namespace kiln {

// Computed once per optimization profile of an engine.
struct ProfileInfo {
  ProfileStates states;  // shape inference at the profile's opt, min and max dims
  ActivationPlan plan;   // the profile plan (plan_profile_activations)
  // The activation arena a context reserves for the profile: the profile plan's peak, or more
  // where a plan with copy elision (concatenations, reshapes, in-place plugins) at the profile's
  // opt, min or max shapes needs more (aliasing lengthens lifetimes). Shapes whose elided plan
  // fits use it; others fall back to the profile plan.
  uint64_t arena_bytes = 0;
  bool has_data_dependent = false;  // some tensor's size is only known during the inference
};

struct EngineImpl {
  EngineData data;
  std::string source;
  Backend* backend = nullptr;
  std::vector<TensorInfo> io;  // inputs first, then outputs: the binding order
  int num_inputs = 0;
  std::vector<std::string> input_names;  // io[0 .. num_inputs)
  std::unordered_map<std::string, int> io_by_name;
  std::unordered_map<const Tensor*, int> io_index;
  std::vector<Layer*> steps;
  std::vector<const KernelEntry*> kernels;  // per step
  // Per step: the kernel for plain launches (EngineData::launch_tactics; kernels[s] elsewhere).
  std::vector<const KernelEntry*> launch_kernels;
  // Per step: the input both its kernels may overwrite with output 0 (KernelEntry::in_place_input),
  // -1 where either may not.
  std::vector<int> in_place_inputs;
  // Constant tensors in device memory (CPU: the host tensors themselves).
  std::unordered_map<const Tensor*, void*> weights;
  std::vector<DeviceBuffer> weight_buffers;
  PlanEnvironment env;                // points into the fields above
  std::atomic<int> live_contexts{0};  // for the CPU threads of contexts that set none
  // Keeps the engine file's compiled plans findable (hold_prepared_states) while the engine lives
  // (with Runtime::set_allow_compiled_plans; data.prepared_states is emptied after loading).
  std::shared_ptr<const void> prepared_states;

  // The binding index of an I/O tensor; throws naming the tensor and listing the engine's.
  int binding(const std::string& name) const;
  // Per profile, computed on first use; thread-safe.
  std::shared_ptr<const ProfileInfo> profile_info(int profile);
  uint64_t device_memory_size(int profile);
  // Bytes of the per-step device error flags (device engines; 0 on the CPU).
  uint64_t error_flag_bytes() const;

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<const ProfileInfo>> profile_infos_;
  std::vector<uint64_t> device_memory_;  // 0: not computed yet
};

}  // namespace kiln
