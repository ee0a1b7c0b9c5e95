// Helpers shared by the graph passes; see pass_utils.h.
#include "src/builder/passes/pass_utils.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln::passes {

void log_change(PassContext& ctx, const std::string& line) {
  if (ctx.log) ctx.log->push_back(line);
}

bool is_constant(const Tensor* t) { return t && t->producer() && t->producer()->type() == kLayerConstant; }

const HostTensor* constant_value(const Tensor* t) {
  if (!is_constant(t)) return nullptr;
  const Layer* layer = t->producer();
  if (!layer->attrs().has("value")) return nullptr;
  return &layer->attrs().get_tensor("value");
}

std::vector<float> constant_floats(const Tensor* t) {
  const HostTensor* value = constant_value(t);
  if (!value || value->type() != DataType::kFloat32 || value->empty()) return {};
  const float* p = value->as<float>();
  return std::vector<float>(p, p + value->count());
}

std::vector<Layer*> distinct_consumers(const Tensor* t) {
  std::vector<Layer*> out;
  if (!t) return out;
  for (Layer* layer : t->consumers()) {
    if (std::find(out.begin(), out.end(), layer) == out.end()) out.push_back(layer);
  }
  return out;
}

Layer* sole_consumer(const Tensor* t) {
  if (!t || t->is_network_output()) return nullptr;
  const std::vector<Layer*> consumers = distinct_consumers(t);
  return consumers.size() == 1 ? consumers[0] : nullptr;
}

std::set<const Layer*> live_layers(const Network& network) {
  std::set<const Layer*> live;
  std::vector<const Layer*> stack;
  for (int i = 0; i < network.num_outputs(); ++i) {
    const Layer* producer = network.output(i)->producer();
    if (producer && live.insert(producer).second) stack.push_back(producer);
  }
  while (!stack.empty()) {
    const Layer* layer = stack.back();
    stack.pop_back();
    for (int i = 0; i < layer->num_inputs(); ++i) {
      const Tensor* in = layer->input(i);
      const Layer* producer = in ? in->producer() : nullptr;
      if (producer && live.insert(producer).second) stack.push_back(producer);
    }
  }
  return live;
}

void GraphEditor::remove_layer(Layer* layer) {
  removed_.insert(layer);
  network_.remove_layer(layer);
}

void GraphEditor::take_over(Tensor* old_out, Tensor* replacement) {
  const std::string name = old_out->name();
  const bool rename = !replacement->is_network_input() && !replacement->is_network_output();
  if (rename) old_out->set_name(network_.unique_name(name + "_replaced"));
  network_.replace_all_uses(old_out, replacement);
  if (rename) replacement->set_name(name);
}

Layer* GraphEditor::append_to_output(Tensor* out, const std::string& type, Attributes attrs,
                                     const std::string& layer_suffix, const std::string& internal_suffix) {
  const std::string name = out->name();
  const std::vector<Layer*> readers = distinct_consumers(out);
  Layer* layer = network_.add_layer(type, {out}, 1, std::move(attrs), network_.unique_name(name + layer_suffix));
  Tensor* result = layer->output(0);
  network_.replace_all_uses(out, result);  // moves the output mark (and the readers, put back below)
  layer->set_input(0, out);
  for (Layer* r : readers) {
    for (int i = 0; i < r->num_inputs(); ++i) {
      if (r->input(i) == result) r->set_input(i, out);
    }
  }
  out->set_name(network_.unique_name(name + internal_suffix));
  result->set_name(name);
  return layer;
}

Tensor* GraphEditor::add_constant(const HostTensor& value, const std::string& hint) {
  Layer* layer = network_.add_constant(value, network_.unique_name(hint));
  return layer->output(0);
}

int GraphEditor::drop_unused_constants(std::vector<Tensor*> tensors) {
  std::vector<Tensor*> seen;
  int dropped = 0;
  for (Tensor* t : tensors) {
    if (!t || std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    if (!is_constant(t) || t->is_network_output() || !t->consumers().empty()) continue;
    remove_layer(t->producer());
    ++dropped;
  }
  return dropped;
}

std::vector<std::map<std::string, Dims>> shape_points_of(const Network& network, const PassContext& ctx) {
  if (!ctx.shape_points.empty()) return ctx.shape_points;
  std::map<std::string, Dims> declared;
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* in = network.input(i);
    if (in->dims().is_dynamic()) return {};
    declared[in->name()] = in->dims();
  }
  return {declared};
}

ShapeTable::ShapeTable(const Network& network, const PassContext& ctx, const ShapeInferenceOptions& options) {
  for (const auto& point : shape_points_of(network, ctx)) points_.push_back(infer_shapes(network, point, options));
}

const TensorState* ShapeTable::state(int point, const Tensor* t) const {
  const TensorStates& states = points_.at(static_cast<size_t>(point));
  const auto it = states.find(t);
  return it == states.end() ? nullptr : &it->second;
}

bool ShapeTable::same_dims(const Tensor* a, const Tensor* b) const {
  if (points_.empty() || !a || !b) return false;
  for (int p = 0; p < num_points(); ++p) {
    const TensorState* sa = state(p, a);
    const TensorState* sb = state(p, b);
    if (!sa || !sb || sa->dims != sb->dims) return false;
  }
  return true;
}

bool ShapeTable::has_type(const Tensor* t, DataType type) const {
  if (points_.empty() || !t) return false;
  for (int p = 0; p < num_points(); ++p) {
    const TensorState* s = state(p, t);
    if (!s || s->type != type) return false;
  }
  return true;
}

}  // namespace kiln::passes
