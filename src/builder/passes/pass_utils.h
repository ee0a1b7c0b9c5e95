// Helpers shared by the graph passes (passes.h): constant lookup, consumer queries, graph edits
// that keep tensor names and remember removed layers, and a per-shape-point table of inferred
// tensor states. Internal to src/builder/passes.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "src/builder/passes/passes.h"
#include "src/ir/shape_inference.h"

namespace kiln::passes {

// Appends a line to ctx.log when there is one.
void log_change(PassContext& ctx, const std::string& line);

// True when t is the output of a Constant layer.
bool is_constant(const Tensor* t);
// The value of a Constant layer's output; null for any other tensor (or a null t).
const HostTensor* constant_value(const Tensor* t);
// The value of a constant float32 tensor as floats; empty when t is not such a constant.
std::vector<float> constant_floats(const Tensor* t);

// The distinct layers reading t, in network order.
std::vector<Layer*> distinct_consumers(const Tensor* t);
// The single layer reading t, when t has exactly one reader and is not a network output.
Layer* sole_consumer(const Tensor* t);

// The layers from which a network output can be reached (membership only, never iterate).
std::set<const Layer*> live_layers(const Network& network);

// Graph edits for the passes' sweeps. A pass walks a snapshot of the layer list and skips the
// entries this editor removed (their pointers dangle), so it can edit while it walks.
class GraphEditor {
 public:
  explicit GraphEditor(Network& network) : network_(network) {}
  Network& network() { return network_; }

  // The layers in topological order, taken now.
  std::vector<Layer*> snapshot() const { return network_.topological_order(); }
  bool removed(const Layer* layer) const { return removed_.count(layer) != 0; }
  void remove_layer(Layer* layer);

  // Moves every reader of `old_out` (and its network-output mark) to `replacement` and gives
  // `replacement` the name of `old_out` (unless `replacement` is a network input or output,
  // whose names must not change). The caller then removes old_out's producer.
  void take_over(Tensor* old_out, Tensor* replacement);

  // Appends a one-input layer of `type` after network output `out` and makes its output the
  // network output under out's name (same place in the output list); `out` is renamed
  // `<name><internal_suffix>` and keeps its other readers. Returns the new layer.
  Layer* append_to_output(Tensor* out, const std::string& type, Attributes attrs, const std::string& layer_suffix,
                          const std::string& internal_suffix);

  // A new Constant layer named after `hint` (made unique); returns its output.
  Tensor* add_constant(const HostTensor& value, const std::string& hint);
  // Removes the Constant layer producing each tensor of `tensors` that nothing reads any more.
  // Takes the tensors by value, deduplicated, so that a tensor listed twice is dropped once.
  int drop_unused_constants(std::vector<Tensor*> tensors);

 private:
  Network& network_;
  std::set<const Layer*> removed_;  // membership only, never iterated
};

// infer_shapes run at every shape point of a PassContext (or at the declared input dims when
// the context has no points and every input is static; no points at all otherwise). Lookups are
// valid for the tensors that existed when the table was made.
class ShapeTable {
 public:
  ShapeTable(const Network& network, const PassContext& ctx, const ShapeInferenceOptions& options = {});
  int num_points() const { return static_cast<int>(points_.size()); }
  // Null when t was not inferred at that point.
  const TensorState* state(int point, const Tensor* t) const;
  // True when a and b were inferred with equal dims at every point (and there is a point).
  bool same_dims(const Tensor* a, const Tensor* b) const;
  // True when t was inferred as `type` at every point (and there is a point).
  bool has_type(const Tensor* t, DataType type) const;

 private:
  std::vector<TensorStates> points_;
};

// The concrete input dims to use for shape-dependent decisions: ctx.shape_points, or the
// declared dims when there are none and the inputs are static.
std::vector<std::map<std::string, Dims>> shape_points_of(const Network& network, const PassContext& ctx);

}  // namespace kiln::passes
