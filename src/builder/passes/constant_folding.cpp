// Constant folding. Two kinds of tensors become Constant layers:
//  1. outputs of layers whose inputs are all constants (weights transposed or cast by the
//     exporter, ...): the layer runs once on the host with its CPU reference kernel;
//  2. tensors whose value infer_shapes computes on the host (the exporters' Shape -> Gather ->
//     Concat -> Reshape arithmetic) and finds IDENTICAL at every shape point of every profile.
//     A static model loses all of its shape arithmetic; a dynamic-batch model keeps exactly the
//     part that depends on the batch.
// The two alternate until nothing changes, because a folded shape can make a large layer (e.g.
// ConstantOfShape) all-constant. A new Constant's output keeps the folded tensor's name, so
// network outputs stay named. Outputs over 64 MiB stay unfolded (they would bloat the engine);
// Plugin layers are never run at build time.
#include <algorithm>
#include <cstring>
#include <set>

#include "kiln/error.h"
#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/ir/shape_inference.h"
#include "src/core/text.h"

namespace kiln {
namespace {

constexpr uint64_t kMaxFoldBytes = 64ull << 20;

bool any_output_used(const Layer* layer) {
  for (int i = 0; i < layer->num_outputs(); ++i) {
    const Tensor* t = layer->output(i);
    if (t->is_network_output() || !t->consumers().empty()) return true;
  }
  return false;
}

bool foldable_type(const Layer* layer) { return layer->type() != kLayerConstant && layer->type() != kLayerPlugin; }

std::vector<Tensor*> inputs_of(const Layer* layer) {
  std::vector<Tensor*> inputs;
  for (int i = 0; i < layer->num_inputs(); ++i) inputs.push_back(layer->input(i));
  return inputs;
}

bool same_value(const HostTensor& a, const HostTensor& b) {
  return a.type() == b.type() && a.dims() == b.dims() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

// Replaces output `index` of `layer` by a Constant holding `value`.
void replace_output(passes::GraphEditor& editor, Layer* layer, int index, const HostTensor& value) {
  Tensor* out = layer->output(index);
  Tensor* folded = editor.add_constant(value, out->name() + "_folded");
  editor.take_over(out, folded);
}

// Kind 1: layers whose inputs are all constants. One sweep in topological order reaches every
// chain of such layers.
int fold_constant_layers(Network& network, PassContext& ctx) {
  passes::GraphEditor editor(network);
  const std::set<const Layer*> live = passes::live_layers(network);  // dead layers are DLE's
  int changes = 0;
  for (Layer* layer : editor.snapshot()) {
    if (editor.removed(layer) || !foldable_type(layer) || !live.count(layer)) continue;
    std::vector<TensorState> states(static_cast<size_t>(layer->num_inputs()));
    std::vector<const TensorState*> state_ptrs;
    std::vector<const HostTensor*> values;
    bool all_constant = true;
    int present = 0;
    for (int i = 0; i < layer->num_inputs() && all_constant; ++i) {
      const Tensor* in = layer->input(i);
      if (!in) {
        state_ptrs.push_back(nullptr);
        values.push_back(nullptr);
        continue;
      }
      const HostTensor* value = passes::constant_value(in);
      if (!value) {
        all_constant = false;
        break;
      }
      TensorState& s = states[static_cast<size_t>(i)];
      s.type = value->type();
      s.dims = value->dims();
      s.value = std::make_shared<HostTensor>(*value);  // shares the storage
      state_ptrs.push_back(&s);
      values.push_back(value);
      ++present;
    }
    if (!all_constant || present == 0) continue;
    bool foldable = true;  // not too large, and not empty (a Constant cannot hold an empty tensor)
    for (const auto& [type, dims] : infer_layer(*layer, state_ptrs)) {
      const uint64_t bytes = tensor_byte_size(type, dims);
      if (bytes > kMaxFoldBytes || bytes == 0) foldable = false;
    }
    if (!foldable) continue;
    const std::vector<HostTensor> results = evaluate_on_host(*layer, values);
    if (static_cast<int>(results.size()) != layer->num_outputs()) {
      throw Error("constant folding: evaluating layer " + quote(layer->name()) + " gave " +
                  std::to_string(results.size()) + " outputs, expected " + std::to_string(layer->num_outputs()));
    }
    const std::string name = layer->name(), type = layer->type();
    for (int i = 0; i < layer->num_outputs(); ++i) replace_output(editor, layer, i, results[static_cast<size_t>(i)]);
    const std::vector<Tensor*> inputs = inputs_of(layer);
    editor.remove_layer(layer);
    editor.drop_unused_constants(inputs);
    passes::log_change(ctx, "constant_folding: folded " + quote(name) + " (" + type + ") into a constant");
    ++changes;
  }
  return changes;
}

// Kind 2: host-known values identical at every shape point. Visited from the outputs back, so
// that only the last tensor of a chain of known values becomes a constant: the layers before it
// lose their readers. Liveness is tracked along the way (a layer is live when an output is a
// network output or read by a live layer, and all readers come later in topological order), so
// that layers made dead by a fold, or dead from the start, are not folded but left to dead-layer
// elimination.
int fold_known_values(Network& network, PassContext& ctx) {
  const passes::ShapeTable table(network, ctx);
  if (table.num_points() == 0) return 0;
  passes::GraphEditor editor(network);
  std::set<const Layer*> live;  // membership only
  auto reaches_output = [&](const Tensor* t) {
    if (t->is_network_output()) return true;
    for (const Layer* reader : t->consumers()) {
      if (live.count(reader)) return true;
    }
    return false;
  };
  int changes = 0;
  std::vector<Layer*> order = editor.snapshot();
  std::reverse(order.begin(), order.end());
  for (Layer* layer : order) {
    if (editor.removed(layer)) continue;
    std::vector<int> fold;  // outputs to replace
    std::vector<const HostTensor*> fold_values;
    bool is_live = false;
    for (int i = 0; i < layer->num_outputs(); ++i) {
      const Tensor* out = layer->output(i);
      if (!reaches_output(out)) continue;
      is_live = true;
      if (!foldable_type(layer)) continue;
      const TensorState* first = table.state(0, out);
      if (!first || !first->value || first->data_dependent) continue;  // upper bounds are no values
      if (first->value->nbytes() > kMaxFoldBytes || first->value->count() == 0) continue;
      bool identical = true;
      for (int p = 1; p < table.num_points() && identical; ++p) {
        const TensorState* s = table.state(p, out);
        identical = s && s->value && same_value(*first->value, *s->value);
      }
      if (!identical) continue;
      fold.push_back(i);
      fold_values.push_back(first->value.get());
    }
    if (!is_live) continue;
    if (fold.empty()) {
      live.insert(layer);
      continue;
    }
    const std::string name = layer->name(), type = layer->type();
    std::string folded_names;
    for (size_t k = 0; k < fold.size(); ++k) {
      Tensor* out = layer->output(fold[k]);
      folded_names += (k ? ", '" : "'") + out->name() + "'";
      replace_output(editor, layer, fold[k], *fold_values[k]);
    }
    if (!any_output_used(layer)) {
      const std::vector<Tensor*> inputs = inputs_of(layer);
      editor.remove_layer(layer);
      editor.drop_unused_constants(inputs);
    } else if (fold.size() < static_cast<size_t>(layer->num_outputs())) {
      // Still live only through an output that was not folded.
      for (int i = 0; i < layer->num_outputs(); ++i) {
        if (reaches_output(layer->output(i))) live.insert(layer);
      }
    }
    passes::log_change(ctx, "constant_folding: replaced " + folded_names + " of " + quote(name) + " (" + type +
                                ") by a constant (same value at every shape point)");
    ++changes;
  }
  return changes;
}

}  // namespace

int pass_constant_folding(Network& network, PassContext& ctx) {
  int changes = fold_constant_layers(network, ctx);
  for (;;) {
    const int known = fold_known_values(network, ctx);
    if (known == 0) break;
    changes += known + fold_constant_layers(network, ctx);
  }
  if (changes > 0) network.sort_topologically();
  return changes;
}

}  // namespace kiln
