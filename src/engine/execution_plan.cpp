// Execution steps and activation memory planning by liveness (see execution_plan.h).
#include "src/engine/execution_plan.h"

#include "src/builder/memory_planner.h"

namespace kiln {

std::vector<Layer*> execution_steps(const Network& network) {
  std::vector<Layer*> steps;
  for (Layer* l : network.topological_order()) {
    if (l->type() != kLayerConstant) steps.push_back(l);
  }
  return steps;
}

bool is_host_known(const Layer& layer, const TensorStates& states) {
  if (layer.type() == kLayerPlugin) return false;
  for (int i = 0; i < layer.num_outputs(); ++i) {
    auto it = states.find(layer.output(i));
    if (it == states.end() || !it->second.value) return false;
  }
  return true;
}

ActivationPlan plan_activations(const Network& network, const std::vector<Layer*>& steps, const TensorStates& states) {
  std::unordered_map<const Tensor*, int> first, last;
  std::vector<const Tensor*> order;
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    const Layer* l = steps[static_cast<size_t>(s)];
    for (int i = 0; i < l->num_inputs(); ++i) {
      const Tensor* t = l->input(i);
      if (t && first.count(t)) last[t] = s;
    }
    for (int i = 0; i < l->num_outputs(); ++i) {
      const Tensor* t = l->output(i);
      if (t->is_network_output() || t->is_network_input()) continue;
      first[t] = s;
      last[t] = s;
      order.push_back(t);
    }
  }
  std::vector<BufferRequest> requests;
  for (const Tensor* t : order) {
    const TensorState& st = states.at(t);
    BufferRequest r;
    r.size = static_cast<uint64_t>(st.dims.volume()) * data_type_size(st.type);
    r.first_use = first[t];
    r.last_use = last[t];
    requests.push_back(r);
  }
  const MemoryPlan mp = plan_memory(requests);
  ActivationPlan plan;
  for (size_t i = 0; i < order.size(); ++i) plan.offsets[order[i]] = mp.offsets[i];
  plan.peak = mp.peak;
  plan.naive = mp.naive;
  return plan;
}

}  // namespace kiln
