// Whole-network shape and type inference for concrete input dims, with host evaluation of
// small integer subgraphs (the exporters' Shape/Gather/Concat/Reshape arithmetic): a tensor
// whose value can be computed on the host from constants and input shapes gets `value` set.
// Used by the builder (per profile), the runtime (on every input-shape change), constant
// folding and the op harness.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"

namespace kiln {

struct TensorState {
  DataType type = DataType::kFloat32;
  Dims dims;
  // Host value when known: constants (always) and host-evaluable tensors.
  std::shared_ptr<HostTensor> value;
  // Data-dependent sizes (ShapeContext::data_dependent_extent). `dd_size`: an int64 scalar a
  // kernel writes at run time to give another output's extent; the runtime reads it after the
  // layer ran. `data_dependent`: dims (and value, for shape arithmetic) hold upper bounds
  // until those sizes are read, directly or through the layers that consume such tensors.
  bool dd_size = false;
  bool data_dependent = false;
  // Axes (bit k = axis k) whose extent is data-dependent; all axes of derived tensors.
  uint32_t dd_axes = 0;
};

// Which outputs of a layer are data-dependent size outputs (filled by infer_layer).
struct DataDependence {
  std::vector<int> size_outputs;
  bool unknown = false;  // some extent is an upper bound
};

struct ShapeInferenceOptions {
  // Evaluate layers on the host when all their inputs are known and every output has at most
  // this many elements (shape arithmetic). Constants are always known.
  int64_t max_host_eval_elements = 4096;
  // Also evaluate layers whose inputs are all constants regardless of size (constant folding).
  bool fold_all_constants = false;
  // Values of data-dependent size outputs read at run time (keyed by the size tensor).
  const std::unordered_map<const Tensor*, int64_t>* known_sizes = nullptr;
};

using TensorStates = std::unordered_map<const Tensor*, TensorState>;

// Infers every tensor reachable from the inputs. `input_dims` must give concrete dims for every
// network input (missing or dynamic dims are an error naming the input). `input_values`
// optionally supplies host values of inputs. Throws kiln::Error naming the failing layer.
TensorStates infer_shapes(const Network& network, const std::map<std::string, Dims>& input_dims,
                          const ShapeInferenceOptions& options = {},
                          const std::map<std::string, HostTensor>* input_values = nullptr);

// Runs one layer on the host with the CPU reference kernel. Inputs must all be present (null
// HostTensor for omitted optional inputs); output dims come from the layer's shape inference.
std::vector<HostTensor> evaluate_on_host(const Layer& layer, const std::vector<const HostTensor*>& inputs);

// Shape inference of a single layer for given input states (used by the above and by tests).
// Returns (type, dims) per output.
std::vector<std::pair<DataType, Dims>> infer_layer(
    const Layer& layer, const std::vector<const TensorState*>& inputs,
    const std::unordered_map<const Tensor*, int64_t>* known_sizes = nullptr, DataDependence* dependence = nullptr);

}  // namespace kiln
