// A shape plan: everything an execution context prepares for one set of input shapes, so that
// running at those shapes again costs nothing but the kernels' launches. It holds the shape and
// value of every tensor (shape inference with host evaluation), the activation memory plan,
// one kernel object per step prepared for these shapes (cuDNN / cuBLASLt plans, oneDNN
// primitives), the device copy of the host-computed values, and one ready KernelContext per
// step whose data pointers are filled in by bind_plan() from the context's memory and the
// caller's I/O addresses. Contexts keep plans in a bounded cache (src/engine/shape_plan_cache.h).
//
// Memory: tensor locations are offsets into the context's arena; the plan chooses between its
// own tight plan for these shapes (with concatenation elision) and the profile plan (sizes of
// the profile's largest shapes, which the arena is sized by) so that it fits the arena.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/network.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/ir/shape_inference.h"
#include "src/plan/execution_plan.h"

namespace kiln {

// Where a tensor's data is during an inference.
struct TensorLocation {
  enum class Kind : uint8_t {
    kNone,   // an omitted optional input
    kArena,  // `offset` bytes into the context's arena
    kFixed,  // `fixed`: a constant's weights, a host-computed value, an overflow buffer
    kInput,  // the address bound to network input/output `io`
    kOutput,
  };
  Kind kind = Kind::kNone;
  int io = -1;
  uint64_t offset = 0;
  void* fixed = nullptr;
};

// One step as it is launched: its kernel's context, with the locations its data pointers come from.
struct StepLaunch {
  KernelContext ctx;
  std::vector<TensorLocation> inputs, outputs;
};

// A network output no kernel writes (a constant, a host-computed value): copied from `source`
// into the caller's buffer at the end of each inference.
struct OutputCopy {
  int io = -1;
  const void* source = nullptr;
  size_t bytes = 0;
};

// What is the same for every plan of an engine (owned by the engine).
struct PlanEnvironment {
  const Network* network = nullptr;
  const std::vector<Layer*>* steps = nullptr;
  const std::unordered_map<const Tensor*, void*>* weights = nullptr;  // constants' data (device or host)
  const std::unordered_map<const Tensor*, int>* io_index = nullptr;   // network input/output -> binding index
  size_t num_bindings = 0;                                            // network inputs + outputs
  Backend* backend = nullptr;
  // Per step: the input its kernel may write output 0 into, -1 for none (KernelEntry::in_place_input).
  const std::vector<int>* in_place_inputs = nullptr;
};

struct ShapePlanOptions {
  int num_threads = 1;
  bool concat_elision = true;
  bool launch_tactics = false;  // recorded in the plan; make_kernel makes the kernels accordingly
  // Arena bytes the context has (0: as many as the plan needs). When this shape's own plan
  // needs more, the profile plan is used when every tensor fits it.
  uint64_t arena_bytes = 0;
  const ActivationPlan* profile_plan = nullptr;
  // Makes an unprepared kernel for step s, configured for the context's profile.
  std::function<std::unique_ptr<Kernel>(size_t step)> make_kernel;
};

struct ShapePlan {
  uint64_t id = 0;  // unique within its context (graph cache keys)
  std::map<std::string, Dims> input_dims;
  int num_threads = 1;
  bool concat_elision = true;
  bool launch_tactics = false;  // kernels chosen for plain launches

  TensorStates states;  // current shapes (after data-dependent sizes were read)
  ActivationPlan memory;
  bool uses_profile_plan = false;                   // this shape's own plan did not fit the arena
  size_t workspace_bytes = 0;                       // the largest workspace_size() of its kernels
  std::vector<std::unique_ptr<Kernel>> kernels;     // per step; null where no kernel runs
  std::vector<StepLaunch> launches;                 // per step
  std::vector<uint8_t> runs;                        // per step: a kernel runs (not host-known, not elided)
  std::vector<uint8_t> host_known, reports_errors;  // elided steps: memory.elided
  bool any_reports_errors = false;
  std::vector<OutputCopy> output_copies;
  DeviceBuffer host_values;  // device engines: all host-computed values, uploaded once
  std::unordered_map<const Tensor*, void*> host_value_addresses;  // where kernels read each of them
  // The (step, input/output slot) of every location bound to a network input/output.
  struct IoSlot {
    uint32_t step;
    bool output;
    uint32_t slot;
    int io;
  };
  std::vector<IoSlot> io_slots;
  std::vector<int> required_io;  // bindings this plan reads or writes (non-empty tensors)

  // Data-dependent sizes (NonZero, NonMaxSuppression, plugins' size tensors): after a step that
  // writes one, the runtime reads it and re-targets the later steps (retarget_plan).
  std::vector<uint8_t> dd_step;
  bool has_dd = false;
  TensorStates base_states;  // with the sizes' upper bounds
  bool retargeted = false;   // states differ from base_states (an inference read sizes)

  // Graph state (CUDA): ran once without a graph (the warm-up before any capture), and whether
  // a capture of this plan failed (no more attempts).
  bool warmed = false;
  bool capture_failed = false;
  // bind_plan's last inputs, so that an unchanged binding costs nothing.
  uint64_t bound_memory = ~uint64_t{0};
  uint64_t bound_io = ~uint64_t{0};
};

// Builds the plan for `input_dims`: shape inference, memory plan, kernels made and prepared,
// launches, host-computed values uploaded (device engines). Throws kiln::Error naming the
// layer whose shape inference or kernel preparation failed, or the tensor that fits neither
// this shape's plan nor the profile plan within options.arena_bytes.
std::unique_ptr<ShapePlan> build_shape_plan(const PlanEnvironment& env, const std::map<std::string, Dims>& input_dims,
                                            const ShapePlanOptions& options);

// The memory a plan's launches point into.
struct PlanMemory {
  uint8_t* arena = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int32_t* error_flags = nullptr;  // one per step (device engines), or null
  StringArena* strings = nullptr;  // CPU: owner of the strings kernels write
  uint64_t generation = 0;         // changes whenever any pointer above changes
};

// Fills the data pointers of the plan's launches. `addresses[io]` is the caller's address of
// network input/output io, `io_generation` changes whenever one changes. Cheap when nothing
// changed; patches only the I/O pointers when only addresses changed.
void bind_plan(ShapePlan& plan, const PlanMemory& memory, const std::vector<void*>& addresses, uint64_t io_generation);

// After step `after` wrote its data-dependent sizes (`sizes`, keyed by size tensor): re-infers
// every shape, decides anew which later steps are computed on the host (their values may follow
// the sizes), re-prepares the kernels of the later steps and rebuilds their launches. A tensor
// that now needs more than its planned bytes is given a buffer by `overflow` (tensor, bytes ->
// address); a network output that would is an error naming it. A later host-computed value is
// placed by `stage` (tensor, host data, bytes -> the address kernels read it at: the data itself
// on the CPU, a device copy elsewhere). The caller binds the plan again.
void retarget_plan(const PlanEnvironment& env, ShapePlan& plan, size_t after,
                   const std::unordered_map<const Tensor*, int64_t>& sizes, const ShapePlanOptions& options,
                   const std::function<void*(const Tensor*, uint64_t bytes)>& overflow,
                   const std::function<void*(const Tensor*, const void* data, size_t bytes)>& stage);

// Restores a retargeted plan to its upper-bound states (before the next inference).
void reset_plan_states(ShapePlan& plan);

}  // namespace kiln
