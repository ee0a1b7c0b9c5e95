// Dead-layer elimination: bypasses Identity layers (their readers read the Identity's input
// directly; a network output keeps its name by renaming the forwarded tensor), then removes
// every layer none of whose outputs reaches a network output, and finally the tensors nothing
// uses. An Identity is kept where bypassing it would rename a network input or merge two network
// outputs, because there the copy is the point.
#include <set>

#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/core/text.h"

namespace kiln {
namespace {

int bypass_identities(Network& network, PassContext& ctx) {
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* layer : editor.snapshot()) {
    if (editor.removed(layer) || layer->type() != kLayerIdentity) continue;
    if (layer->num_inputs() < 1 || !layer->input(0) || layer->num_outputs() != 1) continue;
    Tensor* x = layer->input(0);
    Tensor* y = layer->output(0);
    if (y->is_network_output() && (x->is_network_input() || x->is_network_output())) continue;
    const std::string name = layer->name();
    if (y->is_network_output()) {
      editor.take_over(y, x);  // x takes the output's name
    } else {
      network.replace_all_uses(y, x);  // x keeps its own name
    }
    editor.remove_layer(layer);
    passes::log_change(ctx, "dead_layer_elimination: bypassed identity " + quote(name));
    ++changes;
  }
  return changes;
}

int remove_dead_layers(Network& network, PassContext& ctx) {
  const std::set<const Layer*> live = passes::live_layers(network);  // membership only
  // Remove the others from the outputs back, so that each removal leaves no dangling reader.
  std::vector<Layer*> order = network.topological_order();
  int changes = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (live.count(*it)) continue;
    const std::string name = (*it)->name(), type = (*it)->type();
    network.remove_layer(*it);
    passes::log_change(ctx, "dead_layer_elimination: removed " + quote(name) + " (" + type + ")");
    ++changes;
  }
  return changes;
}

}  // namespace

int pass_dead_layer_elimination(Network& network, PassContext& ctx) {
  int changes = bypass_identities(network, ctx);
  changes += remove_dead_layers(network, ctx);
  network.remove_unused_tensors();
  return changes;
}

}  // namespace kiln
