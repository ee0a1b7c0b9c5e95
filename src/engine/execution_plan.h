// The execution plan shared by the builder (for its memory report) and the runtime: which
// layers run as kernels, which tensors are host-known (computed during shape inference and
// copied in), and where every activation lives in the context's arena.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiln/network.h"
#include "src/ir/shape_inference.h"

namespace kiln {

struct ActivationPlan {
  std::unordered_map<const Tensor*, uint64_t> offsets;  // arena offset per activation tensor
  uint64_t peak = 0;
  uint64_t naive = 0;
};

// Layers in execution order, excluding Constant layers (their outputs are weights).
std::vector<Layer*> execution_steps(const Network& network);

// True for a layer whose outputs are all known on the host for these shapes (no kernel runs;
// its values are copied into place).
bool is_host_known(const Layer& layer, const TensorStates& states);

// Plans arena offsets for every tensor written by a step that is neither a network input nor a
// network output nor a constant.
ActivationPlan plan_activations(const Network& network, const std::vector<Layer*>& steps, const TensorStates& states);

}  // namespace kiln
