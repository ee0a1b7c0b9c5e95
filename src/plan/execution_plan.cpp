// Execution steps and activation memory planning by liveness, with concatenation elision (see
// execution_plan.h). An elided concatenation's output and inputs form one group: one request
// to the memory planner, as large as the output and alive from the first input's producer to
// the last reader of any member, so that nothing else is placed inside it while any member is
// in use; the inputs' offsets follow from the output's.
#include "src/plan/execution_plan.h"

#include <algorithm>
#include <unordered_set>

#include "src/ir/data_params.h"
#include "src/ir/op_params.h"
#include "src/plan/memory_planner.h"
#include "src/core/text.h"

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

namespace {

// Steps that write (first) and last read each arena activation, in the order they are written.
struct Liveness {
  std::unordered_map<const Tensor*, int> first, last;
  std::vector<const Tensor*> order;
};

Liveness compute_liveness(const std::vector<Layer*>& steps) {
  Liveness live;
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    const Layer* l = steps[static_cast<size_t>(s)];
    for (int i = 0; i < l->num_inputs(); ++i) {
      const Tensor* t = l->input(i);
      if (t && live.first.count(t)) live.last[t] = s;
    }
    for (int i = 0; i < l->num_outputs(); ++i) {
      const Tensor* t = l->output(i);
      if (t->is_network_output() || t->is_network_input()) continue;
      live.first[t] = s;
      live.last[t] = s;
      live.order.push_back(t);
    }
  }
  return live;
}

// Data-dependent sizes are read in the middle of an inference and change the shapes of later
// tensors (and may move some into overflow buffers), which would invalidate the inputs' offsets.
bool has_data_dependent_sizes(const TensorStates& states) {
  return std::any_of(states.begin(), states.end(), [](const auto& kv) {
    return kv.second.dd_size || kv.second.data_dependent || kv.second.dd_axes != 0;
  });
}

// An elided concatenation: its inputs and their byte offsets inside its output.
struct ConcatGroup {
  const Tensor* output = nullptr;
  std::vector<std::pair<const Tensor*, uint64_t>> members;
};

struct ElisionState {
  std::unordered_map<const Tensor*, const Tensor*> container;  // placed input -> concat output
  std::unordered_set<const Tensor*> group_outputs;             // outputs of elided concatenations
};

std::string quoted(const Tensor* t) { return quote(t->name()); }

// The axes of a tensor in memory order, outermost first (channels-last stores dim 1 innermost).
std::vector<int> memory_order(int rank, TensorFormat format) {
  std::vector<int> order;
  if (format == TensorFormat::kChannelsLast && rank >= 2) {
    order.push_back(0);
    for (int k = 2; k < rank; ++k) order.push_back(k);
    order.push_back(1);
  } else {
    for (int k = 0; k < rank; ++k) order.push_back(k);
  }
  return order;
}

// Why the concatenation `l` cannot be elided for these shapes ("" when it can; then `group`
// holds the placement).
std::string elision_blocker(const Layer& l, const TensorStates& states, const Liveness& live, const ElisionState& es,
                            ConcatGroup& group) {
  const Tensor* out = l.output(0);
  if (out->is_network_output()) return "its output " + quoted(out) + " is a network output";
  if (!live.first.count(out)) return "its output " + quoted(out) + " is not an arena activation";
  const TensorState& os = states.at(out);
  const int rank = os.dims.rank();
  int64_t axis = l.attrs().get_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return "its axis is out of range";
  // Each input is one contiguous slice of the output (at the same offset in every format) only
  // when the dims stored outside the axis multiply to 1.
  const TensorFormat format = out->format();
  int64_t outer = 1;
  for (int k : memory_order(rank, format)) {
    if (k == axis) break;
    outer *= os.dims[k];
  }
  if (outer != 1) {
    return "the output dims stored outside axis " + std::to_string(axis) + " (" + os.dims.to_string() + ", " +
           to_string(format) + ") multiply to " + std::to_string(outer) + ", so each input would be " +
           std::to_string(outer) + " separate slices";
  }
  group.output = out;
  group.members.clear();
  std::unordered_set<const Tensor*> seen;
  uint64_t offset = 0;
  for (int i = 0; i < l.num_inputs(); ++i) {
    const Tensor* t = l.input(i);
    if (!t) return "input " + std::to_string(i) + " is missing";
    const std::string name = "input " + quoted(t);
    if (!seen.insert(t).second) return name + " appears more than once";
    if (t->is_network_input()) return name + " is a network input";
    if (t->is_network_output()) return name + " is also a network output";
    if (!t->producer() || !live.first.count(t)) return name + " is not an activation written by a kernel";
    if (is_host_known(*t->producer(), states)) return name + " is computed on the host";
    if (es.group_outputs.count(t)) return name + " is the output of an elided concatenation (no nesting)";
    auto c = es.container.find(t);
    if (c != es.container.end()) return name + " is already placed inside " + quoted(c->second);
    const TensorState& st = states.at(t);
    if (st.type != os.type) return name + " has type " + to_string(st.type) + ", the output " + to_string(os.type);
    if (t->format() != format) {
      return name + " is in the " + std::string(to_string(t->format())) + " format, the output in " + to_string(format);
    }
    const uint64_t bytes = tensor_bytes(st);
    if (bytes == 0) return name + " is empty";
    if (offset % kActivationAlignment != 0) {
      return name + " would start at byte " + std::to_string(offset) + " of the output, not a multiple of " +
             std::to_string(kActivationAlignment);
    }
    group.members.emplace_back(t, offset);
    offset += bytes;
  }
  return "";
}

// Why output `out` of step `s` cannot take the place of its input `in`, which the plugin
// (Plugin::aliased_input) or the kernel (KernelEntry::in_place_input) declared it may reuse; ""
// when it can.
std::string alias_blocker(const Layer& l, size_t s, const Tensor* in, const Tensor* out, const TensorStates& states,
                          const Liveness& live, const ElisionState& es) {
  if (!in) return "the input is missing";
  if (!live.first.count(in)) return "input " + quoted(in) + " is not an arena activation (a network input or constant)";
  if (!live.first.count(out)) return "output " + quoted(out) + " is a network output";
  if (live.last.at(in) != static_cast<int>(s)) return "input " + quoted(in) + " is read by a later layer";
  int reads = 0;
  for (int i = 0; i < l.num_inputs(); ++i) reads += l.input(i) == in;
  if (reads != 1) return "input " + quoted(in) + " is read more than once by the layer";
  if (!in->producer() || is_host_known(*in->producer(), states))
    return "input " + quoted(in) + " is computed on the host";
  if (es.container.count(in) || es.group_outputs.count(in))
    return "input " + quoted(in) + " is part of an elided concatenation";
  if (es.container.count(out) || es.group_outputs.count(out))
    return "output " + quoted(out) + " is part of an elided concatenation";
  const TensorState& a = states.at(in);
  const TensorState& b = states.at(out);
  if (a.type != b.type || in->format() != out->format()) return "the input and the output differ in type or format";
  if (tensor_bytes(a) != tensor_bytes(b) || tensor_bytes(a) == 0) return "the input and the output differ in size";
  return "";
}

// Whether Shuffle step `l` only reshapes (its transposes, if any, leave the order unchanged).
bool only_reshapes(const Layer& l) {
  if (l.type() != kLayerShuffle || l.num_outputs() != 1 || l.num_inputs() < 1) return false;
  const ShuffleParams& p = params_of<ShuffleParams>(l);
  for (const std::vector<int64_t>* perm : {&p.first_transpose, &p.second_transpose}) {
    for (size_t i = 0; i < perm->size(); ++i) {
      if ((*perm)[i] != static_cast<int64_t>(i)) return false;
    }
  }
  return true;
}

// Why the output of reshape step `l` cannot be its input's memory; "" when it can.
std::string reshape_blocker(const Layer& l, const TensorStates& states, const Liveness& live, const ElisionState& es,
                            const std::unordered_set<const Tensor*>& plugin_aliased) {
  const Tensor* in = l.input(0);
  const Tensor* out = l.output(0);
  if (!in) return "the input is missing";
  if (!live.first.count(in)) return "input " + quoted(in) + " is not an arena activation (a network input or constant)";
  if (!live.first.count(out)) return "output " + quoted(out) + " is a network output";
  if (!in->producer() || is_host_known(*in->producer(), states))
    return "input " + quoted(in) + " is computed on the host";
  for (const Tensor* t : {in, out}) {
    if (es.container.count(t) || es.group_outputs.count(t)) return quoted(t) + " is part of an elided concatenation";
    if (plugin_aliased.count(t)) return quoted(t) + " is shared with an in-place plugin output";
  }
  if (in->format() != TensorFormat::kLinear || out->format() != TensorFormat::kLinear)
    return "the input or the output is not in the linear format";
  const TensorState& a = states.at(in);
  const TensorState& b = states.at(out);
  if (a.type != b.type) return "the input and the output differ in type";
  if (tensor_bytes(a) != tensor_bytes(b) || tensor_bytes(a) == 0) return "the input and the output differ in size";
  return "";
}

}  // namespace

uint64_t tensor_bytes(const TensorState& st) { return tensor_byte_size(st.type, st.dims); }

std::string describe_plan_memory(const ActivationPlan& plan, const std::string& what) {
  const Tensor* largest = nullptr;
  uint64_t largest_bytes = 0;
  for (const auto& [t, bytes] : plan.bytes) {
    if (!largest || bytes > largest_bytes || (bytes == largest_bytes && t->name() < largest->name())) {
      largest = t;
      largest_bytes = bytes;
    }
  }
  if (!largest) return what;
  return what + " (" + std::to_string(plan.peak) + " bytes; largest tensor " + quote(largest->name()) +
         (largest->producer() ? ", output of layer " + quote(largest->producer()->name()) : std::string()) + ": " +
         std::to_string(largest_bytes) + " bytes)";
}

ActivationPlan plan_activations(const Network& network, const std::vector<Layer*>& steps, const TensorStates& states,
                                const ActivationPlanOptions& options,
                                const std::unordered_map<const Tensor*, uint64_t>* min_bytes) {
  (void)network;
  const Liveness live = compute_liveness(steps);
  ActivationPlan plan;
  plan.elided.assign(steps.size(), false);

  std::vector<ConcatGroup> groups;
  ElisionState es;
  const bool dd = has_data_dependent_sizes(states);
  for (size_t s = 0; s < steps.size(); ++s) {
    const Layer& l = *steps[s];
    if (l.type() != kLayerConcatenation || is_host_known(l, states)) continue;
    ConcatDecision d;
    d.step = static_cast<int>(s);
    ConcatGroup g;
    if (!options.concat_elision) {
      d.reason = "concatenation elision is off";
    } else if (dd) {
      d.reason = "the network has data-dependent sizes";
    } else {
      d.reason = elision_blocker(l, states, live, es, g);
    }
    d.elided = d.reason.empty();
    if (d.elided) {
      plan.elided[s] = true;
      es.group_outputs.insert(g.output);
      for (const auto& [t, off] : g.members) es.container[t] = g.output;
      groups.push_back(std::move(g));
    }
    plan.concats.push_back(std::move(d));
  }

  // In-place outputs: the output shares its input's request (chains share the first's). Plugins'
  // first, then reshapes (which may not touch a plugin's in-place tensors), then kernels' (which
  // may not touch either: their decision sees only the input's own last reader, not those of the
  // reshapes sharing its memory).
  std::unordered_map<const Tensor*, const Tensor*> alias_root;
  auto shared_so_far = [&alias_root] {  // every tensor that shares a request with another
    std::unordered_set<const Tensor*> shared;
    for (const auto& [out, root] : alias_root) {
      shared.insert(out);
      shared.insert(root);
    }
    return shared;
  };
  // Plugins' outputs (plugins = true) or kernels' whose input and output are not in `taken`.
  auto in_place_pass = [&](bool plugins, const std::unordered_set<const Tensor*>& taken) {
    for (size_t s = 0; s < steps.size(); ++s) {
      const Layer& l = *steps[s];
      std::vector<int64_t> aliases;  // per output: the input it may take the place of, or -1
      if (l.type() == kLayerPlugin && l.attrs().has("plugin_aliased_inputs")) {
        if (plugins) aliases = l.attrs().get_ints("plugin_aliased_inputs");
      } else if (!plugins && s < options.kernel_in_place->size() && (*options.kernel_in_place)[s] >= 0) {
        aliases = {(*options.kernel_in_place)[s]};
      }
      for (int o = 0; o < l.num_outputs() && o < static_cast<int>(aliases.size()); ++o) {
        const int64_t i = aliases[static_cast<size_t>(o)];
        if (i < 0 || i >= l.num_inputs()) continue;
        const Tensor* in = l.input(static_cast<int>(i));
        if (!in && !plugins) continue;  // an optional input the layer goes without
        const Tensor* out = l.output(o);
        InPlaceDecision d{static_cast<int>(s), o, alias_blocker(l, s, in, out, states, live, es)};
        for (const Tensor* t : {in, out}) {
          if (d.reason.empty() && taken.count(t)) {
            d.reason = quoted(t) + " shares its memory with an elided reshape or an in-place plugin output";
          }
        }
        if (d.reason.empty()) {
          auto r = alias_root.find(in);
          alias_root[out] = r == alias_root.end() ? in : r->second;
        }
        plan.in_place.push_back(std::move(d));
      }
    }
  };
  if (options.in_place_plugins && !dd) in_place_pass(true, {});

  // Reshapes: the output shares its input's request (a chain of reshapes shares the first input's).
  if (options.reshape_elision && !dd) {
    const std::unordered_set<const Tensor*> plugin_aliased = shared_so_far();
    for (size_t s = 0; s < steps.size(); ++s) {
      const Layer& l = *steps[s];
      if (!only_reshapes(l) || is_host_known(l, states)) continue;
      ConcatDecision d;
      d.step = static_cast<int>(s);
      d.reason = reshape_blocker(l, states, live, es, plugin_aliased);
      d.elided = d.reason.empty();
      if (d.elided) {
        plan.elided[s] = true;
        const Tensor* in = l.input(0);
        auto r = alias_root.find(in);
        alias_root[l.output(0)] = r == alias_root.end() ? in : r->second;
      }
      plan.reshapes.push_back(std::move(d));
    }
  }
  if (options.kernel_in_place && !dd) {
    in_place_pass(false, shared_so_far());
    std::stable_sort(plan.in_place.begin(), plan.in_place.end(),
                     [](const InPlaceDecision& x, const InPlaceDecision& y) { return x.step < y.step; });
  }

  // One request per tensor that is not placed inside a group; a group's request spans its members.
  std::vector<BufferRequest> requests;
  std::vector<const Tensor*> roots;
  std::unordered_map<const Tensor*, size_t> request_of;
  for (const Tensor* t : live.order) {
    if (es.container.count(t) || alias_root.count(t)) continue;
    BufferRequest r;
    r.size = tensor_bytes(states.at(t));
    if (min_bytes) {
      auto m = min_bytes->find(t);
      if (m != min_bytes->end()) r.size = std::max(r.size, m->second);
    }
    r.first_use = live.first.at(t);
    r.last_use = live.last.at(t);
    request_of[t] = requests.size();
    requests.push_back(r);
    roots.push_back(t);
  }
  for (const ConcatGroup& g : groups) {
    BufferRequest& r = requests[request_of.at(g.output)];
    for (const auto& [t, off] : g.members) {
      r.first_use = std::min(r.first_use, live.first.at(t));
      r.last_use = std::max(r.last_use, live.last.at(t));
    }
  }
  for (const auto& [out, root] : alias_root) {
    BufferRequest& r = requests[request_of.at(root)];
    r.last_use = std::max(r.last_use, live.last.at(out));
  }
  const MemoryPlan mp = plan_memory(requests, kActivationAlignment);
  for (size_t i = 0; i < roots.size(); ++i) {
    plan.offsets[roots[i]] = mp.offsets[i];
    plan.bytes[roots[i]] = requests[i].size;
  }
  for (const ConcatGroup& g : groups) {
    const uint64_t base = plan.offsets.at(g.output);
    for (const auto& [t, off] : g.members) {
      plan.offsets[t] = base + off;
      plan.bytes[t] = tensor_bytes(states.at(t));
    }
  }
  for (const auto& [out, root] : alias_root) {
    plan.offsets[out] = plan.offsets.at(root);
    plan.bytes[out] = tensor_bytes(states.at(out));
  }
  plan.peak = mp.peak;
  plan.naive = mp.naive;
  return plan;
}

ActivationPlan plan_profile_activations(const Network& network, const std::vector<Layer*>& steps,
                                        const TensorStates& opt, const TensorStates& min, const TensorStates& max) {
  std::unordered_map<const Tensor*, uint64_t> largest;
  for (const TensorStates* states : {&opt, &min}) {
    for (const auto& [t, st] : *states) {
      uint64_t& b = largest[t];
      b = std::max(b, tensor_bytes(st));
    }
  }
  ActivationPlanOptions options;
  options.concat_elision = false;
  // In-place outputs are decided per shape (the sizes must match at that shape): the profile
  // plan, which any shape of the profile may fall back to, gives every output its own buffer.
  options.in_place_plugins = false;
  options.reshape_elision = false;
  return plan_activations(network, steps, max, options, &largest);
}

}  // namespace kiln
