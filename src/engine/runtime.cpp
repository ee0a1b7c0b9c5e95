// The runtime: engine deserialization, I/O description, what an engine computes once per
// optimization profile for its contexts (the profile plan, device_memory_size), and context
// creation. Execution contexts are context.cpp's.
#include "kiln/runtime.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/core/file_io.h"
#include "src/engine/context_impl.h"
#include "src/engine/engine_format.h"
#include "src/engine/engine_impl.h"
#include "src/engine/runtime_access.h"
#include "src/ir/shape_inference.h"
#include "src/plan/execution_plan.h"
#include "src/plan/kernel_config.h"
#include "src/plugins/plugin_layer.h"
#include "src/core/out_of_memory.h"
#include "src/core/text.h"

namespace kiln {

// ---- Runtime ------------------------------------------------------------------------------

std::shared_ptr<Engine> Runtime::deserialize(const void* data, size_t size, const std::string& source) try {
  auto impl = std::make_unique<EngineImpl>();
  impl->source = source;
  impl->data = engine_deserialize(static_cast<const uint8_t*>(data), size, source);
  EngineData& d = impl->data;
  impl->backend = &get_backend(d.device);
  load_engine_plugins_from_search_path(d, source);            // KILN_PLUGIN_PATH
  load_embedded_plugins(d, source, allow_embedded_plugins_);  // only with the opt-in
  check_engine_plugins(d, source);
  // The compiled plans the engine carries, findable by the kernels' prepare() while it lives:
  // GPU code from the file, so only with the opt-in.
  if (allow_compiled_plans_) {
    impl->prepared_states = hold_prepared_states(d.prepared_states);
  } else if (!d.prepared_states.empty()) {
    log(Severity::kInfo, source + ": the engine carries " + std::to_string(d.prepared_states.size()) +
                             " compiled plan(s) (GPU code) that are not loaded; its plans are built instead. For "
                             "engines you built or trust, kiln run / bench --allow-compiled-plans "
                             "(Runtime::set_allow_compiled_plans(true)) loads them: faster start-up");
  }
  d.prepared_states.clear();  // the holder keeps those in use; nothing reads them from the data again
  const Network& net = *d.network;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Tensor* t = net.input(i);
    impl->io.push_back(TensorInfo{t->name(), TensorIOMode::kInput, t->type(), t->dims(), t->format()});
  }
  impl->num_inputs = net.num_inputs();
  for (int i = 0; i < net.num_outputs(); ++i) {
    const Tensor* t = net.output(i);
    impl->io.push_back(TensorInfo{t->name(), TensorIOMode::kOutput, t->type(), t->dims(), t->format()});
  }
  for (int i = 0; i < net.num_inputs(); ++i) {
    impl->input_names.push_back(net.input(i)->name());
    impl->io_index[net.input(i)] = i;
  }
  for (int i = 0; i < net.num_outputs(); ++i) impl->io_index.emplace(net.output(i), net.num_inputs() + i);
  for (size_t i = 0; i < impl->io.size(); ++i) impl->io_by_name.emplace(impl->io[i].name, static_cast<int>(i));
  if (d.profiles.empty()) throw EngineFormatError(source + ": the engine has no optimization profile");
  impl->steps = execution_steps(net);
  for (const Layer* l : impl->steps) {
    auto it = d.tactics.find(l->name());
    if (it == d.tactics.end()) throw EngineFormatError(source + ": no kernel recorded for layer " + quote(l->name()));
    const KernelEntry* e = KernelRegistry::instance().find(d.device, l->type(), it->second);
    if (!e) {
      throw Error(source + ": layer " + quote(l->name()) + " (" + l->type() + ") uses kernel " + quote(it->second) +
                  " on " + to_string(d.device) +
                  ", which this kiln library does not have (rebuild the engine with this version)");
    }
    impl->kernels.push_back(e);
    const KernelEntry* launch = e;
    if (auto lt = d.launch_tactics.find(l->name()); lt != d.launch_tactics.end()) {
      launch = KernelRegistry::instance().find(d.device, l->type(), lt->second);
      if (!launch) {
        throw Error(source + ": layer " + quote(l->name()) + " (" + l->type() + ") uses kernel '" + lt->second +
                    "' for plain launches on " + to_string(d.device) +
                    ", which this kiln library does not have (rebuild the engine with this version)");
      }
    }
    impl->launch_kernels.push_back(launch);
    impl->in_place_inputs.push_back(e->in_place_input == launch->in_place_input ? e->in_place_input : -1);
  }
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    if (l->type() != kLayerConstant) continue;
    const HostTensor& v = l->attrs().get_tensor("value");
    if (d.device == DeviceType::kCPU) {
      impl->weights[l->output(0)] = const_cast<void*>(v.data());
    } else {
      DeviceBuffer buf;
      try {
        buf = DeviceBuffer(*impl->backend, v.nbytes());
      } catch (const Error& e) {
        throw Error(source + ": weights of constant layer " + quote(l->name()) + ": " + e.what());
      }
      impl->backend->copy_host_to_device(buf.data(), v.data(), v.nbytes(), nullptr);
      impl->weights[l->output(0)] = buf.data();
      impl->weight_buffers.push_back(std::move(buf));
    }
  }
  PlanEnvironment& env = impl->env;
  env.network = d.network.get();
  env.steps = &impl->steps;
  env.weights = &impl->weights;
  env.io_index = &impl->io_index;
  env.num_bindings = impl->io.size();
  env.backend = impl->backend;
  env.in_place_inputs = &impl->in_place_inputs;
  return detail::RuntimeAccess::make_engine(std::move(impl));
} catch (const std::bad_alloc&) {
  throw_out_of_host_memory("loading engine " + quote(source));
}

std::shared_ptr<Engine> Runtime::deserialize_file(const std::string& path) {
  const auto bytes = read_whole_file(path, "engine file");
  return deserialize(bytes.data(), bytes.size(), path);
}

// ---- Engine -------------------------------------------------------------------------------

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
DeviceType Engine::device() const { return impl_->data.device; }
const std::vector<TensorInfo>& Engine::io_tensors() const { return impl_->io; }

const TensorInfo& Engine::io_tensor(const std::string& name) const {
  return impl_->io[static_cast<size_t>(impl_->binding(name))];
}

int Engine::num_profiles() const { return static_cast<int>(impl_->data.profiles.size()); }

const OptimizationProfile& Engine::profile(int index) const {
  if (index < 0 || index >= num_profiles()) {
    throw Error("optimization profile " + std::to_string(index) + " does not exist (the engine has " +
                std::to_string(num_profiles()) + ")");
  }
  return impl_->data.profiles[static_cast<size_t>(index)];
}

uint64_t Engine::activation_peak_bytes(int profile_index) const {
  (void)profile(profile_index);
  const auto& v = impl_->data.activation_peak_bytes;
  return static_cast<size_t>(profile_index) < v.size() ? v[static_cast<size_t>(profile_index)] : 0;
}

std::string Engine::describe() const {
  const EngineData& d = impl_->data;
  const Network& net = *d.network;
  std::ostringstream os;
  os << "engine: " << impl_->source << "\n";
  os << "device: " << to_string(d.device) << ", threads: " << (d.num_threads ? std::to_string(d.num_threads) : "all")
     << "\n";
  for (const auto& [k, v] : d.build_info) os << "build." << k << ": " << v << "\n";
  os << "inputs/outputs:\n";
  for (const auto& t : impl_->io) {
    os << "  " << (t.mode == TensorIOMode::kInput ? "input  " : "output ") << t.name << ": " << to_string(t.type) << " "
       << t.dims.to_string() << " " << to_string(t.format) << "\n";
  }
  for (int p = 0; p < num_profiles(); ++p) {
    os << "profile " << p << ": activation memory " << activation_peak_bytes(p) << " bytes at max shapes\n";
    for (const auto& [name, s] : d.profiles[static_cast<size_t>(p)].all()) {
      os << "  " << name << ": min " << s.min.to_string() << ", opt " << s.opt.to_string() << ", max "
         << s.max.to_string() << "\n";
    }
  }
  uint64_t weights = 0;
  int constants = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i)->type() == kLayerConstant) {
      weights += net.layer(i)->attrs().get_tensor("value").nbytes();
      ++constants;
    }
  }
  os << "weights: " << constants << " constant tensors, " << weights << " bytes\n";
  os << "layers (" << impl_->steps.size() << ", in execution order):\n";
  for (size_t s = 0; s < impl_->steps.size(); ++s) {
    const Layer* l = impl_->steps[s];
    os << "  [" << s << "] " << l->name() << " : " << l->type();
    const std::string kind =
        l->attrs().get_string("kind", l->attrs().get_string("op", l->attrs().get_string("mode", "")));
    if (!kind.empty() && l->attrs().has("kind")) os << "(" << kind << ")";
    if (l->attrs().has("activation") && !l->attrs().get_string("activation").empty()) {
      os << "+" << l->attrs().get_string("activation");
    }
    os << " kernel=" << impl_->kernels[s]->tactic << "\n      in: ";
    for (int i = 0; i < l->num_inputs(); ++i) {
      const Tensor* t = l->input(i);
      os << (i ? ", " : "") << (t ? t->name() + " " + t->dims().to_string() : "-");
    }
    os << "\n      out: ";
    for (int i = 0; i < l->num_outputs(); ++i) {
      const Tensor* t = l->output(i);
      os << (i ? ", " : "") << t->name() << " " << to_string(t->type()) << " " << t->dims().to_string() << " "
         << to_string(t->format());
    }
    os << "\n";
  }
  if (!d.plugins.empty()) {
    os << "plugins:\n";
    for (const auto& p : d.plugins) {
      os << "  " << p.name << " v" << p.version << " ns='" << p.plugin_namespace
         << "' library=" << (p.library.empty() ? "(built in)" : p.library) << "\n";
    }
  }
  return os.str();
}

std::unique_ptr<ExecutionContext> Engine::create_execution_context(ContextMemory memory) try {
  auto ctx = std::make_unique<ContextImpl>(*impl_, memory);
  const std::string& adaptation_off = ctx->adaptation.default_off_reason();
  if (impl_->data.device == DeviceType::kCPU && adaptation_off.rfind("OMP_WAIT_POLICY", 0) == 0) {
    // Said once per process: a server creates many contexts.
    static std::once_flag said;
    std::call_once(said, [&] { log(Severity::kInfo, "CPU thread adaptation off: " + adaptation_off); });
  }
  auto result = detail::RuntimeAccess::make_context(shared_from_this(), std::move(ctx));
  result->set_optimization_profile(0);
  return result;
} catch (const std::bad_alloc&) {
  throw_out_of_host_memory("creating an execution context");
}

uint64_t Engine::device_memory_size(int profile_index) const {
  (void)profile(profile_index);
  return impl_->device_memory_size(profile_index);
}

// ---- EngineImpl ---------------------------------------------------------------------------

int EngineImpl::binding(const std::string& name) const {
  auto it = io_by_name.find(name);
  if (it != io_by_name.end()) return it->second;
  std::string names;
  for (const auto& t : io) names += (names.empty() ? "" : ", ") + t.name;
  throw Error("the engine has no input or output named " + quote(name) + " (it has: " + names + ")");
}

uint64_t EngineImpl::error_flag_bytes() const {
  return data.device == DeviceType::kCPU ? 0 : steps.size() * sizeof(int32_t);
}

std::shared_ptr<const ProfileInfo> EngineImpl::profile_info(int profile) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (profile_infos_.size() > static_cast<size_t>(profile) && profile_infos_[static_cast<size_t>(profile)]) {
      return profile_infos_[static_cast<size_t>(profile)];
    }
  }
  // Computed outside the lock (shape inference of three points); two threads may both compute
  // it the first time, and both results are the same.
  auto info = std::make_shared<ProfileInfo>();
  const Network& net = *data.network;
  info->states = profile_states(net, data.profiles[static_cast<size_t>(profile)]);
  info->plan = plan_profile_activations(net, steps, info->states.opt, info->states.min, info->states.max);
  info->arena_bytes = info->plan.peak;
  // The arena covers the plans the contexts make at these points (with the kernels' in-place
  // outputs, as build_shape_plan plans), so that they do not fall back to the profile plan.
  ActivationPlanOptions options;
  options.kernel_in_place = &in_place_inputs;
  for (const TensorStates* st : {&info->states.opt, &info->states.min, &info->states.max}) {
    info->arena_bytes = std::max(info->arena_bytes, plan_activations(net, steps, *st, options).peak);
  }
  for (const TensorStates* st : {&info->states.opt, &info->states.min, &info->states.max}) {
    for (const auto& [t, state] : *st) {
      (void)t;
      if (state.dd_size || state.data_dependent || state.dd_axes) info->has_data_dependent = true;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (profile_infos_.size() <= static_cast<size_t>(profile)) profile_infos_.resize(static_cast<size_t>(profile) + 1);
  auto& slot = profile_infos_[static_cast<size_t>(profile)];
  if (!slot) slot = info;
  return slot;
}

uint64_t EngineImpl::device_memory_size(int profile) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device_memory_.size() > static_cast<size_t>(profile) && device_memory_[static_cast<size_t>(profile)]) {
      return device_memory_[static_cast<size_t>(profile)];
    }
  }
  const auto info = profile_info(profile);
  // The kernels' workspace at the profile's points: fresh kernels prepared there (under the
  // device lifecycle lock, as contexts build their plans: backend.h).
  std::lock_guard<std::recursive_mutex> lifecycle(device_lifecycle_mutex());
  const OptimizationProfile& p = data.profiles[static_cast<size_t>(profile)];
  uint64_t workspace = 0;
  for (int point = 0; point < 3; ++point) {
    std::map<std::string, Dims> dims;
    for (const auto& [name, s] : p.all()) dims[name] = point == 0 ? s.opt : point == 1 ? s.min : s.max;
    ShapePlanOptions options;
    options.num_threads = data.num_threads ? data.num_threads : 1;
    options.make_kernel = [&](size_t s) {
      std::unique_ptr<Kernel> k = kernels[s]->create(*steps[s]);
      configure_kernel_for_profile(*k, *steps[s], info->states);
      return k;
    };
    const auto plan = build_shape_plan(env, dims, options);
    workspace = std::max<uint64_t>(workspace, plan->workspace_bytes);
  }
  const uint64_t total =
      memory_granule(info->arena_bytes) + memory_granule(workspace) + memory_granule(error_flag_bytes());
  std::lock_guard<std::mutex> lock(mutex_);
  if (device_memory_.size() <= static_cast<size_t>(profile)) device_memory_.resize(static_cast<size_t>(profile) + 1, 0);
  device_memory_[static_cast<size_t>(profile)] = std::max<uint64_t>(total, 256);
  return device_memory_[static_cast<size_t>(profile)];
}

}  // namespace kiln
