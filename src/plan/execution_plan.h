// The execution plan shared by the builder (for its memory report) and the runtime: which
// layers run as kernels, which tensors are host-known (computed during shape inference and
// copied in), and where every activation lives in the context's arena. A plan is made for
// concrete shapes (the runtime keeps one per input shape it has seen, src/plan/shape_plan.h),
// so decisions that depend on shapes, such as concatenation elision, are made here per shape;
// the profile plan (sizes at least those of the profile's min, opt and max shapes, no elision)
// is what a context's arena is sized by.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/network.h"
#include "src/ir/shape_inference.h"

namespace kiln {

// Every activation's offset in the arena is a multiple of this; kernels are prepared assuming
// it (cuBLASLt and cuDNN plans, vectorized loads).
inline constexpr uint64_t kActivationAlignment = 256;

struct ActivationPlanOptions {
  // Concatenation elision (as TensorRT does): where the shapes allow it, each input of a
  // Concatenation is placed inside the output's buffer at its offset, so that its producer
  // writes there directly and the concatenation runs no kernel. Conditions: the output and
  // every input are arena activations written by kernels (no network input/output, constant
  // or host-known value), each input appears once and is placed in no other concatenation (no
  // nesting), all share one type and format, the dims stored outside the axis multiply to 1
  // (the dims before the axis in memory order; channels-last stores dim 1 innermost), inputs
  // are non-empty and start at multiples of kActivationAlignment. The group is one planner
  // request alive from the first input's producer to the last reader of any of its tensors,
  // so readers of an input after the concatenation still find it intact.
  bool concat_elision = true;
  // In-place plugin outputs (Plugin::aliased_input, the layer attribute plugin_aliased_inputs):
  // an output takes its input's place when the input is an arena activation of the same type,
  // format and byte size, written by a kernel, read once by the plugin and by no later layer, in
  // no elided concatenation, and the network has no data-dependent sizes.
  bool in_place_plugins = true;
  // In-place kernel outputs: per step, the input its kernel may write output 0 into
  // (KernelEntry::in_place_input), -1 for none; null for none at all. The same conditions as for
  // plugins' in-place outputs.
  const std::vector<int>* kernel_in_place = nullptr;
  // Reshape elision: a Shuffle that only reshapes (no transpose, or identity ones) gives its
  // output its input's memory and runs no kernel, when both are arena activations of the linear
  // format (the input written by a kernel, the output not a network output), neither takes part
  // in an elided concatenation or an in-place plugin output, and the network has no
  // data-dependent sizes. The input's buffer then lives until the last reader of either.
  bool reshape_elision = true;
};

// What the planner decided for one output a plugin or its kernel declared in-place.
struct InPlaceDecision {
  int step = 0;        // index into the steps given to plan_activations
  int output = 0;      // the layer's output index
  std::string reason;  // why it got its own buffer (empty when it shares its input's)
};

// What the planner decided for one Concatenation step.
struct ConcatDecision {
  int step = 0;  // index into the steps given to plan_activations
  bool elided = false;
  std::string reason;  // why it was not elided (empty when elided)
};

struct ActivationPlan {
  // Arena offset per activation tensor. The inputs of an elided concatenation have offsets
  // inside their concatenation output's range.
  std::unordered_map<const Tensor*, uint64_t> offsets;
  // Bytes reserved for each tensor of `offsets` (elided inputs: their own size).
  std::unordered_map<const Tensor*, uint64_t> bytes;
  uint64_t peak = 0;
  uint64_t naive = 0;
  // Per step: a Concatenation whose inputs were placed inside its output (no kernel runs).
  std::vector<bool> elided;
  // One entry per Concatenation step that runs as a kernel or was elided (host-known ones are
  // left out), in step order.
  std::vector<ConcatDecision> concats;
  // One entry per output a plugin or its kernel declared in-place, in step order.
  std::vector<InPlaceDecision> in_place;
  // One entry per Shuffle step that only reshapes a tensor computed on the device (elided or not,
  // with the reason), in step order.
  std::vector<ConcatDecision> reshapes;
};

// "optimization profile 0 (largest tensor 'y', output of layer 'expand': 4398046511104 bytes)"
// style text for messages about the plan's memory (out of memory): `what` and the tensor that
// needs the most.
std::string describe_plan_memory(const ActivationPlan& plan, const std::string& what);

// Layers in execution order, excluding Constant layers (their outputs are weights).
std::vector<Layer*> execution_steps(const Network& network);

// True for a layer whose outputs are all known on the host for these shapes (no kernel runs;
// its values are copied into place).
bool is_host_known(const Layer& layer, const TensorStates& states);

// Plans arena offsets for every tensor written by a step that is neither a network input nor a
// network output nor a constant, and decides which concatenations are elided (see
// ActivationPlanOptions; never for networks with data-dependent sizes, whose shapes change in
// the middle of an inference).
// `min_bytes` (optional) raises tensors' sizes: each gets max(its bytes under `states`,
// min_bytes[t]) (the profile plan passes the sizes at the profile's other points).
ActivationPlan plan_activations(const Network& network, const std::vector<Layer*>& steps, const TensorStates& states,
                                const ActivationPlanOptions& options = {},
                                const std::unordered_map<const Tensor*, uint64_t>* min_bytes = nullptr);

// Bytes of a tensor with these dims and type.
uint64_t tensor_bytes(const TensorState& state);

// The profile plan: one activation plan valid for every input shape of an optimization profile
// whose tensors are no larger than at the profile's min, opt or max point (every network whose
// tensor sizes grow with its input dims): each tensor is given its largest size of the three
// points, and no concatenation is elided (elision depends on the shapes).
ActivationPlan plan_profile_activations(const Network& network, const std::vector<Layer*>& steps,
                                        const TensorStates& opt, const TensorStates& min, const TensorStates& max);

}  // namespace kiln
