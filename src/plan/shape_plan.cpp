// Shape plans (shape_plan.h): built once per input shape by an execution context, then bound to
// its memory and the caller's addresses and launched as they are.
#include "src/plan/shape_plan.h"

#include <algorithm>
#include <sstream>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/plan/kernel_config.h"
#include "src/core/out_of_memory.h"
#include "src/core/text.h"

namespace kiln {

namespace {

// Says (verbose) which concatenations this plan elided and why the others were not.
void log_concat_elision(const ShapePlan& plan, const std::vector<Layer*>& steps) {
  if (plan.memory.concats.empty()) return;
  std::ostringstream os;
  os << "activation plan for input shapes";
  for (const auto& [name, dims] : plan.input_dims) os << " " << name << ":" << dims.to_string();
  os << " (" << plan.memory.peak << " bytes" << (plan.uses_profile_plan ? ", the profile plan" : "") << "): ";
  std::string elided, kept;
  for (const ConcatDecision& d : plan.memory.concats) {
    const std::string name = quote(steps[static_cast<size_t>(d.step)]->name());
    if (d.elided) {
      elided += (elided.empty() ? "" : ", ") + name;
    } else {
      kept += (kept.empty() ? "" : "; ") + name + " (" + d.reason + ")";
    }
  }
  os << "concatenations elided (producers write into the output, no copy): " << (elided.empty() ? "none" : elided);
  if (!kept.empty()) os << "; not elided: " << kept;
  log(Severity::kVerbose, os.str());
}

// Says (verbose) which in-place outputs (plugins', kernels') share their input's memory and why
// others do not.
void log_in_place(const ShapePlan& plan, const std::vector<Layer*>& steps) {
  if (plan.memory.in_place.empty()) return;
  std::string shared, own;
  for (const InPlaceDecision& d : plan.memory.in_place) {
    const std::string name = "'" + steps[static_cast<size_t>(d.step)]->name() + "' output " + std::to_string(d.output);
    if (d.reason.empty()) {
      shared += (shared.empty() ? "" : ", ") + name;
    } else {
      own += (own.empty() ? "" : "; ") + name + " (" + d.reason + ")";
    }
  }
  log(Severity::kVerbose, "in-place outputs sharing their input's memory: " + (shared.empty() ? "none" : shared) +
                              (own.empty() ? "" : "; with their own buffer: " + own));
}

// Says (verbose) which reshapes share their input's memory (no kernel) and why the others copy.
void log_reshape_elision(const ShapePlan& plan, const std::vector<Layer*>& steps) {
  if (plan.memory.reshapes.empty()) return;
  std::string elided, kept;
  for (const ConcatDecision& d : plan.memory.reshapes) {
    const std::string name = quote(steps[static_cast<size_t>(d.step)]->name());
    if (d.elided) {
      elided += (elided.empty() ? "" : ", ") + name;
    } else {
      kept += (kept.empty() ? "" : "; ") + name + " (" + d.reason + ")";
    }
  }
  log(Severity::kVerbose, "reshapes elided (the output is the input's memory, no copy): " +
                              (elided.empty() ? "none" : elided) + (kept.empty() ? "" : "; not elided: " + kept));
}

// Whether every arena tensor of `states` fits its reservation in `plan`.
bool fits(const ActivationPlan& plan, const TensorStates& states, std::string* first_misfit) {
  for (const auto& [t, off] : plan.offsets) {
    (void)off;
    auto it = states.find(t);
    if (it == states.end()) continue;
    const uint64_t need = tensor_bytes(it->second);
    auto b = plan.bytes.find(t);
    if (b == plan.bytes.end() || need > b->second) {
      if (first_misfit) {
        *first_misfit = "tensor " + quote(t->name()) + " needs " + std::to_string(need) + " bytes for dims " +
                        it->second.dims.to_string() + ", the profile plan reserves " +
                        std::to_string(b == plan.bytes.end() ? 0 : b->second);
      }
      return false;
    }
  }
  return true;
}

// Where tensor `t` lives in this plan.
TensorLocation locate(const PlanEnvironment& env, const ShapePlan& plan,
                      const std::unordered_map<const Tensor*, void*>& host_values, const Tensor* t) {
  TensorLocation loc;
  if (!t) return loc;
  auto w = env.weights->find(t);
  if (w != env.weights->end()) {
    loc.kind = TensorLocation::Kind::kFixed;
    loc.fixed = w->second;
    return loc;
  }
  auto h = host_values.find(t);
  if (h != host_values.end()) {
    loc.kind = TensorLocation::Kind::kFixed;
    loc.fixed = h->second;
    return loc;
  }
  if (t->is_network_input() || t->is_network_output()) {
    loc.kind = t->is_network_input() ? TensorLocation::Kind::kInput : TensorLocation::Kind::kOutput;
    loc.io = env.io_index->at(t);
    return loc;
  }
  auto o = plan.memory.offsets.find(t);
  if (o == plan.memory.offsets.end()) throw Error("internal: tensor " + quote(t->name()) + " has no memory assigned");
  loc.kind = TensorLocation::Kind::kArena;
  loc.offset = o->second;
  return loc;
}

TensorView view_of(const TensorState& st, const Tensor* t) {
  TensorView v;
  v.type = st.type;
  v.dims = st.dims;
  v.format = t->format();
  return v;
}

// Prepares the kernels of steps [first, end) for plan.states and (re)builds their launches.
void prepare_steps(const PlanEnvironment& env, ShapePlan& plan, size_t first, const ShapePlanOptions& options,
                   const std::unordered_map<const Tensor*, void*>& host_values) {
  const std::vector<Layer*>& steps = *env.steps;
  for (size_t s = first; s < steps.size(); ++s) {
    const Layer& l = *steps[s];
    StepLaunch& launch = plan.launches[s];
    launch.ctx.layer = &l;
    launch.ctx.inputs.clear();
    launch.ctx.outputs.clear();
    launch.inputs.clear();
    launch.outputs.clear();
    plan.reports_errors[s] = false;
    if (!plan.runs[s]) continue;
    for (int i = 0; i < l.num_inputs(); ++i) {
      const Tensor* t = l.input(i);
      launch.ctx.inputs.push_back(t ? view_of(plan.states.at(t), t) : TensorView{});
      launch.inputs.push_back(locate(env, plan, host_values, t));
    }
    for (int i = 0; i < l.num_outputs(); ++i) {
      const Tensor* t = l.output(i);
      launch.ctx.outputs.push_back(view_of(plan.states.at(t), t));
      launch.outputs.push_back(locate(env, plan, host_values, t));
    }
    launch.ctx.num_threads = options.num_threads;
    std::unique_ptr<Kernel>& kernel = plan.kernels[s];
    if (!kernel) kernel = options.make_kernel(s);
    try {
      kernel->prepare(l, input_descs(l, plan.states), output_descs(l, plan.states), options.num_threads);
    } catch (const std::exception& ex) {
      const std::string msg = exception_text(ex);
      if (msg.rfind("layer '", 0) == 0) throw Error(msg);
      throw Error("layer " + quote(l.name()) + " (" + l.type() +
                  "): preparing its kernel for input shapes failed: " + msg);
    }
    plan.workspace_bytes = std::max(plan.workspace_bytes, kernel->workspace_size());
    plan.reports_errors[s] = kernel->reports_device_errors();
  }
  plan.any_reports_errors =
      std::any_of(plan.reports_errors.begin(), plan.reports_errors.end(), [](uint8_t b) { return b; });
  plan.io_slots.clear();
  for (size_t s = 0; s < steps.size(); ++s) {
    const StepLaunch& launch = plan.launches[s];
    for (size_t k = 0; k < launch.inputs.size(); ++k) {
      if (launch.inputs[k].io >= 0)
        plan.io_slots.push_back({static_cast<uint32_t>(s), false, static_cast<uint32_t>(k), launch.inputs[k].io});
    }
    for (size_t k = 0; k < launch.outputs.size(); ++k) {
      if (launch.outputs[k].io >= 0)
        plan.io_slots.push_back({static_cast<uint32_t>(s), true, static_cast<uint32_t>(k), launch.outputs[k].io});
    }
  }
  std::vector<uint8_t> needed(env.num_bindings, 0);
  for (const ShapePlan::IoSlot& slot : plan.io_slots) {
    const StepLaunch& l = plan.launches[slot.step];
    const TensorView& v = slot.output ? l.ctx.outputs[slot.slot] : l.ctx.inputs[slot.slot];
    if (v.dims.volume()) needed[static_cast<size_t>(slot.io)] = 1;
  }
  for (const OutputCopy& c : plan.output_copies) needed[static_cast<size_t>(c.io)] = 1;
  plan.required_io.clear();
  for (size_t i = 0; i < needed.size(); ++i) {
    if (needed[i]) plan.required_io.push_back(static_cast<int>(i));
  }
  plan.bound_memory = plan.bound_io = ~uint64_t{0};  // launches changed: bind everything again
}

// Host-computed values the kernels read, by tensor: their device copies (uploaded here, once per
// plan) or, on the CPU, the values themselves. Also the copies into network outputs that no
// kernel writes.
// The copies into network outputs that no kernel writes: constants and host-computed values.
void make_output_copies(const PlanEnvironment& env, ShapePlan& plan) {
  const std::unordered_map<const Tensor*, void*>& where = plan.host_value_addresses;
  plan.output_copies.clear();
  const Network& net = *env.network;
  for (int i = 0; i < net.num_outputs(); ++i) {
    const Tensor* t = net.output(i);
    if (t->is_network_input()) continue;  // the same buffer
    const uint64_t bytes = tensor_bytes(plan.states.at(t));
    if (!bytes) continue;
    const void* source = nullptr;
    auto w = env.weights->find(t);
    if (w != env.weights->end()) {
      source = w->second;
    } else if (auto h = where.find(t); h != where.end()) {
      source = h->second;
    }
    if (source) plan.output_copies.push_back(OutputCopy{env.io_index->at(t), source, static_cast<size_t>(bytes)});
  }
}

std::unordered_map<const Tensor*, void*> place_host_values(const PlanEnvironment& env, ShapePlan& plan) {
  std::unordered_map<const Tensor*, void*> where;
  const std::vector<Layer*>& steps = *env.steps;
  const bool device = env.backend->device() != DeviceType::kCPU;
  std::vector<std::pair<const Tensor*, uint64_t>> uploads;
  uint64_t total = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (!plan.host_known[s]) continue;
    const Layer& l = *steps[s];
    for (int i = 0; i < l.num_outputs(); ++i) {
      const Tensor* t = l.output(i);
      const HostTensor& v = *plan.states.at(t).value;
      if (!v.nbytes()) continue;
      if (!device) {
        where[t] = const_cast<void*>(v.data());
        continue;
      }
      uploads.emplace_back(t, total);
      total += (v.nbytes() + kActivationAlignment - 1) / kActivationAlignment * kActivationAlignment;
    }
  }
  if (total) {
    // One buffer and one copy per plan, so that an inference (and a captured graph) never
    // copies from pageable host memory.
    std::vector<uint8_t> staging(total, 0);
    for (const auto& [t, off] : uploads) {
      const HostTensor& v = *plan.states.at(t).value;
      std::copy_n(static_cast<const uint8_t*>(v.data()), v.nbytes(), staging.data() + off);
    }
    plan.host_values = DeviceBuffer(*env.backend, total);
    env.backend->copy_host_to_device(plan.host_values.data(), staging.data(), total, nullptr);
    for (const auto& [t, off] : uploads) where[t] = static_cast<uint8_t*>(plan.host_values.data()) + off;
  }
  return where;
}

}  // namespace

std::unique_ptr<ShapePlan> build_shape_plan(const PlanEnvironment& env, const std::map<std::string, Dims>& input_dims,
                                            const ShapePlanOptions& options) {
  const Network& net = *env.network;
  const std::vector<Layer*>& steps = *env.steps;
  auto plan = std::make_unique<ShapePlan>();
  plan->input_dims = input_dims;
  plan->num_threads = options.num_threads;
  plan->concat_elision = options.concat_elision;
  plan->launch_tactics = options.launch_tactics;
  plan->states = infer_shapes(net, input_dims);
  const size_t n = steps.size();
  plan->host_known.assign(n, 0);
  plan->dd_step.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    const Layer& l = *steps[s];
    plan->host_known[s] = is_host_known(l, plan->states);
    for (int i = 0; i < l.num_outputs(); ++i) {
      const TensorState& st = plan->states.at(l.output(i));
      if (st.dd_size && !st.value) plan->dd_step[s] = plan->has_dd = true;
    }
  }

  ActivationPlanOptions memory_options;
  memory_options.concat_elision = options.concat_elision;
  memory_options.reshape_elision = options.concat_elision;  // one switch for copy elision
  memory_options.kernel_in_place = env.in_place_inputs;
  plan->memory = plan_activations(net, steps, plan->states, memory_options);
  if (options.arena_bytes && plan->memory.peak > options.arena_bytes) {
    std::string why;
    if (options.profile_plan && options.profile_plan->peak <= options.arena_bytes &&
        fits(*options.profile_plan, plan->states, &why)) {
      plan->memory = *options.profile_plan;
      plan->memory.elided.assign(n, false);
      plan->memory.concats.clear();
      plan->memory.in_place.clear();
      plan->memory.reshapes.clear();
      plan->uses_profile_plan = true;
    }
    // Otherwise the caller decides: grow its own arena, or fail for user-managed memory.
  }
  if (plan->memory.elided.size() != n) plan->memory.elided.assign(n, false);
  log_concat_elision(*plan, steps);
  log_in_place(*plan, steps);
  log_reshape_elision(*plan, steps);

  plan->runs.assign(n, 0);
  for (size_t s = 0; s < n; ++s) plan->runs[s] = !plan->host_known[s] && !plan->memory.elided[s];
  plan->kernels.resize(n);
  plan->launches.resize(n);
  plan->reports_errors.assign(n, 0);
  if (plan->has_dd) plan->base_states = plan->states;
  plan->host_value_addresses = place_host_values(env, *plan);
  make_output_copies(env, *plan);
  prepare_steps(env, *plan, 0, options, plan->host_value_addresses);
  return plan;
}

void bind_plan(ShapePlan& plan, const PlanMemory& memory, const std::vector<void*>& addresses, uint64_t io_generation) {
  const auto address = [&](const TensorLocation& loc, const TensorView& view) -> void* {
    if (!view.dims.volume()) return nullptr;
    switch (loc.kind) {
      case TensorLocation::Kind::kNone:
        return nullptr;
      case TensorLocation::Kind::kArena:
        return memory.arena + loc.offset;
      case TensorLocation::Kind::kFixed:
        return loc.fixed;
      case TensorLocation::Kind::kInput:
      case TensorLocation::Kind::kOutput:
        return addresses[static_cast<size_t>(loc.io)];
    }
    return nullptr;
  };
  if (plan.bound_memory != memory.generation) {
    for (size_t s = 0; s < plan.launches.size(); ++s) {
      StepLaunch& l = plan.launches[s];
      if (!plan.runs[s]) continue;
      for (size_t k = 0; k < l.inputs.size(); ++k) l.ctx.inputs[k].data = address(l.inputs[k], l.ctx.inputs[k]);
      for (size_t k = 0; k < l.outputs.size(); ++k) l.ctx.outputs[k].data = address(l.outputs[k], l.ctx.outputs[k]);
      l.ctx.workspace = memory.workspace;
      l.ctx.workspace_size = memory.workspace_bytes;
      l.ctx.strings = memory.strings;
      l.ctx.device_error = memory.error_flags && plan.reports_errors[s] ? memory.error_flags + s : nullptr;
    }
    plan.bound_memory = memory.generation;
    plan.bound_io = io_generation;
    return;
  }
  if (plan.bound_io != io_generation) {
    for (const ShapePlan::IoSlot& slot : plan.io_slots) {
      StepLaunch& l = plan.launches[slot.step];
      TensorView& v = slot.output ? l.ctx.outputs[slot.slot] : l.ctx.inputs[slot.slot];
      v.data = v.dims.volume() ? addresses[static_cast<size_t>(slot.io)] : nullptr;
    }
    plan.bound_io = io_generation;
  }
}

void retarget_plan(const PlanEnvironment& env, ShapePlan& plan, size_t after,
                   const std::unordered_map<const Tensor*, int64_t>& sizes, const ShapePlanOptions& options,
                   const std::function<void*(const Tensor*, uint64_t bytes)>& overflow,
                   const std::function<void*(const Tensor*, const void* data, size_t bytes)>& stage) {
  const std::vector<Layer*>& steps = *env.steps;
  ShapeInferenceOptions inference;
  inference.known_sizes = &sizes;
  plan.states = infer_shapes(*env.network, plan.input_dims, inference);
  plan.retargeted = true;
  // Later steps: computed on the host or by a kernel, for the sizes just read (a Fill whose
  // extent follows a count is empty, hence host-computed, at the upper bound, and runs after).
  for (size_t s = after + 1; s < steps.size(); ++s) {
    const Layer& l = *steps[s];
    plan.host_known[s] = is_host_known(l, plan.states);
    plan.runs[s] = !plan.host_known[s] && !plan.memory.elided[s];
    for (int i = 0; i < l.num_outputs(); ++i) {
      const Tensor* t = l.output(i);
      plan.host_value_addresses.erase(t);
      if (!plan.host_known[s]) continue;
      const HostTensor& v = *plan.states.at(t).value;
      if (v.nbytes()) plan.host_value_addresses[t] = stage(t, v.data(), v.nbytes());
    }
  }
  make_output_copies(env, plan);
  prepare_steps(env, plan, after + 1, options, plan.host_value_addresses);
  // Tensors that outgrew their planned bytes move to overflow buffers, for their readers too.
  for (size_t s = after + 1; s < steps.size(); ++s) {
    const Layer& later = *steps[s];
    StepLaunch& launch = plan.launches[s];
    for (int i = 0; i < later.num_outputs() && plan.runs[s]; ++i) {
      const Tensor* t = later.output(i);
      const uint64_t need = tensor_bytes(plan.states.at(t));
      const uint64_t planned = t->is_network_output() ? tensor_bytes(plan.base_states.at(t))
                                                      : (plan.memory.bytes.count(t) ? plan.memory.bytes.at(t) : 0);
      if (need <= planned) continue;
      if (t->is_network_output()) {
        throw Error("output " + quote(t->name()) + " needs " + std::to_string(need) + " bytes for dims " +
                    plan.states.at(t).dims.to_string() + " after layer '" + steps[after]->name() +
                    "' wrote its data-dependent size, more than the " + std::to_string(planned) +
                    " bytes of its upper bound " + plan.base_states.at(t).dims.to_string() +
                    " (the model's shape arithmetic grows as that size shrinks; the output buffer cannot be sized in "
                    "advance)");
      }
      void* big = overflow(t, need);
      for (size_t r = s; r < steps.size(); ++r) {
        StepLaunch& reader = plan.launches[r];
        const Layer& rl = *steps[r];
        for (size_t k = 0; k < reader.inputs.size(); ++k) {
          if (rl.input(static_cast<int>(k)) == t) {
            reader.inputs[k].kind = TensorLocation::Kind::kFixed;
            reader.inputs[k].fixed = big;
          }
        }
      }
      launch.outputs[static_cast<size_t>(i)].kind = TensorLocation::Kind::kFixed;
      launch.outputs[static_cast<size_t>(i)].fixed = big;
    }
  }
}

void reset_plan_states(ShapePlan& plan) {
  if (!plan.retargeted) return;
  plan.states = plan.base_states;
  plan.retargeted = false;
}

}  // namespace kiln
