// Tactic selection (see tactic_selection.h).
#include "src/builder/tactic_selection.h"

#include "kiln/error.h"
#include "src/backends/kernel.h"
#include "src/engine/execution_plan.h"

namespace kiln {

std::vector<TensorDesc> input_descs(const Layer& layer, const TensorStates& states) {
  std::vector<TensorDesc> descs;
  for (int i = 0; i < layer.num_inputs(); ++i) {
    TensorDesc d;
    const Tensor* t = layer.input(i);
    if (!t) {
      d.present = false;
    } else {
      const TensorState& s = states.at(t);
      d.type = s.type;
      d.dims = s.dims;
      d.format = t->format();
      d.value = s.value.get();
    }
    descs.push_back(d);
  }
  return descs;
}

std::map<std::string, std::string> select_tactics(const Network& network, const std::vector<Layer*>& steps,
                                                  const BuilderConfig& config, const std::vector<TensorStates>& states) {
  std::map<std::string, std::string> tactics;
  for (const Layer* layer : steps) {
    const auto candidates = KernelRegistry::instance().find(config.device, layer->type());
    if (candidates.empty()) {
      throw Error("layer '" + layer->name() + "' (" + layer->type() + "): no " + to_string(config.device) +
                  " kernel implements this layer type");
    }
    const KernelEntry* chosen = nullptr;
    for (const KernelEntry* e : candidates) {
      bool ok = true;
      for (const auto& st : states) {
        if (e->supports && !e->supports(*layer, input_descs(*layer, st))) {
          ok = false;
          break;
        }
      }
      if (ok) {
        chosen = e;
        break;
      }
    }
    if (!chosen) {
      std::string types;
      for (const auto& d : input_descs(*layer, states.front())) {
        types += std::string(types.empty() ? "" : ", ") + (d.present ? to_string(d.type) : "-");
      }
      throw Error("layer '" + layer->name() + "' (" + layer->type() + "): none of the " + to_string(config.device) +
                  " kernels supports it with input types (" + types + ")");
    }
    tactics[layer->name()] = chosen->tactic;
  }
  (void)network;
  return tactics;
}

}  // namespace kiln
