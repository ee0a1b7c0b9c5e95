// The runtime: engine deserialization, I/O description, execution contexts. A context re-runs
// shape inference and re-plans its activation arena whenever input shapes change, prepares
// its kernels for the new shapes, then executes the steps in order.
#include "kiln/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/builder/tactic_selection.h"
#include "src/engine/engine_format.h"
#include "src/engine/execution_plan.h"
#include "src/ir/shape_inference.h"
#include "src/plugins/plugin_layer.h"

namespace kiln {

struct EngineImpl {
  EngineData data;
  std::string source;
  Backend* backend = nullptr;
  std::vector<TensorInfo> io;
  std::vector<Layer*> steps;
  std::vector<const KernelEntry*> kernels;  // per step
  // Constant tensors in device memory (CPU: the host tensors themselves).
  std::unordered_map<const Tensor*, void*> weights;
  std::vector<DeviceBuffer> weight_buffers;
};

struct ContextImpl {
  EngineImpl* engine = nullptr;
  int profile = 0;
  int num_threads = 0;
  std::map<std::string, Dims> input_dims;
  std::map<std::string, void*> addresses;
  std::vector<std::unique_ptr<Kernel>> kernels;
  bool dirty = true;
  TensorStates states;
  std::vector<bool> host_known;  // per step
  ActivationPlan plan;
  bool concat_elision = true;  // set_concat_elision
  DeviceBuffer arena;
  DeviceBuffer workspace;
  std::unordered_map<const Tensor*, DeviceBuffer> host_value_buffers;  // device copies of host-known values (CUDA)
  bool profiling = false;
  std::vector<double> profile_ms;  // per step
  std::vector<int64_t> profile_runs;
  std::vector<int64_t> profile_elided;  // per step: runs in which it was an elided concatenation
  // Device engines: host-known tensors live in device buffers uploaded once per shape change.
  std::unordered_map<const Tensor*, void*> host_known_addresses;
  void* own_stream = nullptr;  // the context's stream (device engines), for null-stream calls
  // CUDA graph replay.
  bool use_graph = false;      // set_graph_capture(true)
  bool graph_auto = true;      // no set_graph_capture call yet: graphs where they work
  bool graph_auto_failed = false;  // an automatic capture failed: no more attempts
  void* graph = nullptr;
  void* graph_stream = nullptr;
  std::map<std::string, void*> graph_addresses;  // the addresses the graph was captured with
  // Data-dependent sizes (NonZero, NonMaxSuppression, plugins' size tensors): after a step that
  // writes one, the runtime reads it, re-infers the shapes and re-prepares the later steps.
  std::vector<bool> dd_step;  // per step: writes a size the runtime must read
  bool has_dd = false;
  TensorStates base_states;   // with upper bounds, for the current input shapes
  std::unordered_map<const Tensor*, int64_t> sizes;  // read during the current inference
  std::unordered_map<const Tensor*, uint64_t> planned_bytes;
  std::unordered_map<const Tensor*, DeviceBuffer> overflow_buffers;  // grown past their planned bytes
  std::unordered_map<const Tensor*, void*> overflow;                 // in use by this inference
  // String tensors (CPU): the characters of the strings kernels write, and the host-known string
  // values whose StringRefs were copied into buffers; both are reset when an inference starts,
  // so output strings stay valid until the next inference on this context.
  StringArena strings;
  // Device engines: one int32 per step that a kernel sets when it finds invalid data only the
  // device sees (KernelContext::device_error); zeroed at the start of each inference and read by
  // check_device_errors when some step's kernel reports such errors.
  DeviceBuffer device_errors;
  std::vector<bool> reports_errors;  // per step
  std::vector<std::shared_ptr<HostTensor>> string_values;

  ~ContextImpl() {
    if (engine && engine->backend) {
      if (graph) engine->backend->destroy_graph(graph);
      if (own_stream) {
        try {
          engine->backend->synchronize(own_stream);
        } catch (const std::exception&) {
        }
        engine->backend->destroy_stream(own_stream);
      }
    }
  }
};

namespace {

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error("cannot open engine file '" + path + "' (" + std::strerror(errno) + ")");
  const std::streamoff size = f.tellg();
  if (size < 0) throw Error("cannot read engine file '" + path + "'");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw Error("cannot read engine file '" + path + "'");
  }
  return bytes;
}

}  // namespace

// ---- Runtime ------------------------------------------------------------------------------

std::shared_ptr<Engine> Runtime::deserialize(const void* data, size_t size, const std::string& source) {
  auto impl = std::make_unique<EngineImpl>();
  impl->source = source;
  impl->data = engine_deserialize(static_cast<const uint8_t*>(data), size, source);
  EngineData& d = impl->data;
  impl->backend = &get_backend(d.device);
  load_embedded_plugins(d, source, allow_embedded_plugins_);  // only with the opt-in
  check_engine_plugins(d, source);
  const Network& net = *d.network;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Tensor* t = net.input(i);
    impl->io.push_back(TensorInfo{t->name(), TensorIOMode::kInput, t->type(), t->dims(), t->format()});
  }
  for (int i = 0; i < net.num_outputs(); ++i) {
    const Tensor* t = net.output(i);
    impl->io.push_back(TensorInfo{t->name(), TensorIOMode::kOutput, t->type(), t->dims(), t->format()});
  }
  if (d.profiles.empty()) throw EngineFormatError(source + ": the engine has no optimization profile");
  impl->steps = execution_steps(net);
  for (const Layer* l : impl->steps) {
    auto it = d.tactics.find(l->name());
    if (it == d.tactics.end()) throw EngineFormatError(source + ": no kernel recorded for layer '" + l->name() + "'");
    const KernelEntry* e = KernelRegistry::instance().find(d.device, l->type(), it->second);
    if (!e) {
      throw Error(source + ": layer '" + l->name() + "' (" + l->type() + ") uses kernel '" + it->second + "' on " +
                  to_string(d.device) + ", which this kiln library does not have (rebuild the engine with this version)");
    }
    impl->kernels.push_back(e);
  }
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    if (l->type() != kLayerConstant) continue;
    const HostTensor& v = l->attrs().get_tensor("value");
    if (d.device == DeviceType::kCPU) {
      impl->weights[l->output(0)] = const_cast<void*>(v.data());
    } else {
      DeviceBuffer buf(*impl->backend, v.nbytes());
      impl->backend->copy_host_to_device(buf.data(), v.data(), v.nbytes(), nullptr);
      impl->weights[l->output(0)] = buf.data();
      impl->weight_buffers.push_back(std::move(buf));
    }
  }
  return std::make_shared<Engine>(std::move(impl));
}

std::shared_ptr<Engine> Runtime::deserialize_file(const std::string& path) {
  const auto bytes = read_file(path);
  return deserialize(bytes.data(), bytes.size(), path);
}

// ---- Engine -------------------------------------------------------------------------------

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
DeviceType Engine::device() const { return impl_->data.device; }
const std::vector<TensorInfo>& Engine::io_tensors() const { return impl_->io; }

const TensorInfo& Engine::io_tensor(const std::string& name) const {
  for (const auto& t : impl_->io) {
    if (t.name == name) return t;
  }
  std::string names;
  for (const auto& t : impl_->io) names += (names.empty() ? "" : ", ") + t.name;
  throw Error("the engine has no input or output named '" + name + "' (it has: " + names + ")");
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
    const std::string kind = l->attrs().get_string("kind", l->attrs().get_string("op", l->attrs().get_string("mode", "")));
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
      os << "  " << p.name << " v" << p.version << " ns='" << p.plugin_namespace << "' library="
         << (p.library.empty() ? "(built in)" : p.library) << "\n";
    }
  }
  return os.str();
}

std::unique_ptr<ExecutionContext> Engine::create_execution_context() {
  auto ctx = std::make_unique<ContextImpl>();
  ctx->engine = impl_.get();
  if (impl_->data.device != DeviceType::kCPU) ctx->own_stream = impl_->backend->create_stream();
  for (size_t s = 0; s < impl_->steps.size(); ++s) ctx->kernels.push_back(impl_->kernels[s]->create(*impl_->steps[s]));
  auto result = std::make_unique<ExecutionContext>(shared_from_this(), std::move(ctx));
  result->set_optimization_profile(0);
  return result;
}

// ---- ExecutionContext ---------------------------------------------------------------------

ExecutionContext::ExecutionContext(std::shared_ptr<Engine> engine, std::unique_ptr<ContextImpl> impl)
    : engine_(std::move(engine)), impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

void ExecutionContext::set_optimization_profile(int index) {
  const OptimizationProfile& p = engine_->profile(index);
  configure_kernels_for_profile(*impl_->engine->data.network, impl_->engine->steps, impl_->kernels, p);
  impl_->profile = index;
  impl_->input_dims.clear();
  for (const auto& [name, s] : p.all()) impl_->input_dims[name] = s.opt;
  impl_->dirty = true;
}

int ExecutionContext::optimization_profile() const { return impl_->profile; }

void ExecutionContext::set_input_shape(const std::string& name, const Dims& dims) {
  const TensorInfo& info = engine_->io_tensor(name);
  if (info.mode != TensorIOMode::kInput) throw Error("'" + name + "' is an output; only input shapes can be set");
  const OptimizationProfile& p = engine_->profile(impl_->profile);
  const Dims& mn = p.min(name);
  const Dims& mx = p.max(name);
  bool ok = dims.rank() == mn.rank();
  for (int i = 0; ok && i < dims.rank(); ++i) ok = dims[i] >= mn[i] && dims[i] <= mx[i];
  if (!ok) {
    throw Error("input '" + name + "': dims " + dims.to_string() + " are outside optimization profile " +
                std::to_string(impl_->profile) + " (min " + mn.to_string() + ", max " + mx.to_string() +
                "); rebuild the engine with a wider profile (kiln build --min-shapes/--max-shapes)");
  }
  if (impl_->input_dims[name] != dims) {
    impl_->input_dims[name] = dims;
    impl_->dirty = true;
  }
}

namespace {

// Threads for this context's kernels: its own setting, else the engine's, else all hardware threads.
int context_threads(const ContextImpl& c) {
  if (c.num_threads) return c.num_threads;
  return c.engine->data.num_threads ? c.engine->data.num_threads : hardware_threads();
}

void* tensor_address(ContextImpl& c, const Tensor* t);

uint64_t tensor_bytes(const TensorState& st) { return static_cast<uint64_t>(st.dims.volume()) * data_type_size(st.type); }

// Prepares steps [first, end) for c.states: host-known values (uploaded on devices), kernels,
// and the workspace they need.
void prepare_steps(ContextImpl& c, size_t first) {
  EngineImpl& e = *c.engine;
  const int threads = context_threads(c);
  size_t workspace = 0;
  const bool device = e.data.device != DeviceType::kCPU;
  c.reports_errors.resize(e.steps.size(), false);
  for (size_t s = first; s < e.steps.size(); ++s) {
    const Layer& l = *e.steps[s];
    c.host_known[s] = is_host_known(l, c.states);
    c.reports_errors[s] = false;
    if (device) {
      for (int i = 0; i < l.num_outputs(); ++i) {
        c.host_known_addresses.erase(l.output(i));
        c.host_value_buffers.erase(l.output(i));
      }
    }
    if (c.host_known[s] && device) {
      // Uploaded once here, so that an inference (and a captured graph) never copies from
      // pageable host memory.
      for (int i = 0; i < l.num_outputs(); ++i) {
        const HostTensor& v = *c.states.at(l.output(i)).value;
        if (!v.nbytes()) continue;
        DeviceBuffer buf(*e.backend, v.nbytes());
        e.backend->copy_host_to_device(buf.data(), v.data(), v.nbytes(), nullptr);
        c.host_known_addresses[l.output(i)] = buf.data();
        c.host_value_buffers[l.output(i)] = std::move(buf);
      }
    }
    if (c.host_known[s] || c.plan.elided[s]) continue;  // elided concatenations run no kernel
    std::vector<TensorDesc> outs;
    for (int i = 0; i < l.num_outputs(); ++i) {
      const TensorState& st = c.states.at(l.output(i));
      outs.push_back(TensorDesc{st.type, st.dims, l.output(i)->format(), true, nullptr});
    }
    try {
      c.kernels[s]->prepare(l, input_descs(l, c.states), outs, threads);
    } catch (const std::exception& ex) {
      throw Error("layer '" + l.name() + "' (" + l.type() + "): preparing kernel '" + e.kernels[s]->tactic +
                  "' failed: " + ex.what());
    }
    workspace = std::max(workspace, c.kernels[s]->workspace_size());
    c.reports_errors[s] = device && c.kernels[s]->reports_device_errors();
  }
  if (c.workspace.size() < workspace) c.workspace = DeviceBuffer(*e.backend, workspace);
  const size_t error_bytes = e.steps.size() * sizeof(int32_t);
  if (device && c.device_errors.size() < error_bytes) c.device_errors = DeviceBuffer(*e.backend, error_bytes);
}

// Says once per plan (verbose) which concatenations were elided and why the others were not.
void log_concat_elision(const ContextImpl& c) {
  if (c.plan.concats.empty()) return;
  std::ostringstream os;
  os << "activation plan for input shapes";
  for (const auto& [name, dims] : c.input_dims) os << " " << name << ":" << dims.to_string();
  os << " (" << c.plan.peak << " bytes): ";
  std::string elided, kept;
  for (const ConcatDecision& d : c.plan.concats) {
    const std::string name = "'" + c.engine->steps[static_cast<size_t>(d.step)]->name() + "'";
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

void prepare_context(ContextImpl& c) {
  EngineImpl& e = *c.engine;
  const Network& net = *e.data.network;
  c.states = infer_shapes(net, c.input_dims);
  ActivationPlanOptions plan_options;
  plan_options.concat_elision = c.concat_elision;
  c.plan = plan_activations(net, e.steps, c.states, plan_options);
  log_concat_elision(c);
  if (c.arena.size() < c.plan.peak) c.arena = DeviceBuffer(*e.backend, c.plan.peak);
  c.host_known.assign(e.steps.size(), false);
  c.host_value_buffers.clear();
  c.host_known_addresses.clear();
  c.dd_step.assign(e.steps.size(), false);
  c.has_dd = false;
  c.sizes.clear();
  c.overflow.clear();
  c.planned_bytes.clear();
  for (size_t s = 0; s < e.steps.size(); ++s) {
    const Layer& l = *e.steps[s];
    for (int i = 0; i < l.num_outputs(); ++i) {
      const TensorState& st = c.states.at(l.output(i));
      if (st.dd_size && !st.value) c.dd_step[s] = c.has_dd = true;
    }
  }
  if (c.has_dd) {
    c.base_states = c.states;
    for (const auto& [t, st] : c.states) c.planned_bytes[t] = tensor_bytes(st);
  }
  prepare_steps(c, 0);
  c.dirty = false;
}

// After step `s` wrote its data-dependent sizes: reads them (synchronizing the stream on a
// device), re-infers every shape with them and re-prepares the steps after `s`. A tensor
// that now needs more bytes than the upper-bound plan gave it gets its own buffer.
void resolve_data_dependent_sizes(ContextImpl& c, size_t s, void* stream) {
  EngineImpl& e = *c.engine;
  const Layer& l = *e.steps[s];
  const bool device = e.data.device != DeviceType::kCPU;
  if (device) e.backend->synchronize(stream);
  for (int i = 0; i < l.num_outputs(); ++i) {
    const Tensor* t = l.output(i);
    const TensorState& st = c.states.at(t);
    if (!st.dd_size || st.value) continue;
    int64_t v = 0;
    const void* src = tensor_address(c, t);
    if (device) {
      e.backend->copy_device_to_host(&v, src, sizeof v, stream);
      e.backend->synchronize(stream);
    } else {
      std::memcpy(&v, src, sizeof v);
    }
    c.sizes[t] = v;
  }
  ShapeInferenceOptions options;
  options.known_sizes = &c.sizes;
  c.states = infer_shapes(*e.data.network, c.input_dims, options);
  for (size_t k = s + 1; k < e.steps.size(); ++k) {
    const Layer& later = *e.steps[k];
    for (int i = 0; i < later.num_outputs(); ++i) {
      const Tensor* t = later.output(i);
      const uint64_t need = tensor_bytes(c.states.at(t));
      const uint64_t planned = c.planned_bytes.at(t);
      if (need <= planned) {
        c.overflow.erase(t);
        continue;
      }
      if (t->is_network_output()) {
        throw Error("output '" + t->name() + "' needs " + std::to_string(need) + " bytes for dims " +
                    c.states.at(t).dims.to_string() + " after layer '" + l.name() + "' wrote its data-dependent size, "
                    "more than the " + std::to_string(planned) + " bytes of its upper bound " +
                    c.base_states.at(t).dims.to_string() + " (the model's shape arithmetic grows as that size shrinks; "
                    "the output buffer cannot be sized in advance)");
      }
      DeviceBuffer& buf = c.overflow_buffers[t];
      if (buf.size() < need) buf = DeviceBuffer(*e.backend, need);
      c.overflow[t] = buf.data();
    }
  }
  prepare_steps(c, s + 1);
}

void* tensor_address(ContextImpl& c, const Tensor* t) {
  EngineImpl& e = *c.engine;
  // Constants first: one that is also a network output is read from the weights (its output
  // buffer is filled only at the end of the inference).
  auto w = e.weights.find(t);
  if (w != e.weights.end()) return w->second;
  if (t->is_network_input() || t->is_network_output()) {
    auto it = c.addresses.find(t->name());
    if (it == c.addresses.end() || !it->second) {
      throw Error("no address set for " + std::string(t->is_network_input() ? "input" : "output") + " '" + t->name() +
                  "' (call set_tensor_address before execute)");
    }
    return it->second;
  }
  auto h = c.host_known_addresses.find(t);
  if (h != c.host_known_addresses.end()) return h->second;
  if (!c.overflow.empty()) {
    auto big = c.overflow.find(t);
    if (big != c.overflow.end()) return big->second;
  }
  auto o = c.plan.offsets.find(t);
  if (o == c.plan.offsets.end()) throw Error("internal: tensor '" + t->name() + "' has no memory assigned");
  return static_cast<uint8_t*>(c.arena.data()) + o->second;
}

TensorView view_of(ContextImpl& c, const Tensor* t) {
  const TensorState& st = c.states.at(t);
  TensorView v;
  v.type = st.type;
  v.dims = st.dims;
  v.format = t->format();
  v.data = st.dims.volume() ? tensor_address(c, t) : nullptr;
  return v;
}

}  // namespace

Dims ExecutionContext::tensor_shape(const std::string& name) {
  const TensorInfo& info = engine_->io_tensor(name);
  if (info.mode == TensorIOMode::kInput) return impl_->input_dims.at(name);
  if (impl_->dirty) prepare_context(*impl_);
  const Tensor* t = impl_->engine->data.network->find_tensor(name);
  return impl_->states.at(t).dims;
}

Dims ExecutionContext::max_tensor_shape(const std::string& name) {
  const TensorInfo& info = engine_->io_tensor(name);
  if (info.mode == TensorIOMode::kInput) return impl_->input_dims.at(name);
  if (impl_->dirty) prepare_context(*impl_);
  const Tensor* t = impl_->engine->data.network->find_tensor(name);
  return (impl_->has_dd ? impl_->base_states : impl_->states).at(t).dims;
}

void ExecutionContext::set_tensor_address(const std::string& name, void* data) {
  (void)engine_->io_tensor(name);
  impl_->addresses[name] = data;
}

void ExecutionContext::set_num_threads(int threads) {
  if (threads < 0) throw Error("set_num_threads: thread count must be >= 0");
  impl_->num_threads = threads;
  impl_->dirty = true;
}

void ExecutionContext::set_profiling(bool enabled) {
  impl_->profiling = enabled;
  impl_->profile_ms.assign(impl_->engine->steps.size(), 0.0);
  impl_->profile_runs.assign(impl_->engine->steps.size(), 0);
  impl_->profile_elided.assign(impl_->engine->steps.size(), 0);
}

void ExecutionContext::set_concat_elision(bool enabled) {
  if (impl_->concat_elision == enabled) return;
  impl_->concat_elision = enabled;
  impl_->dirty = true;  // re-plan (and re-capture any CUDA graph)
}

bool ExecutionContext::concat_elision() const { return impl_->concat_elision; }

std::string ExecutionContext::profile_report() const {
  const ContextImpl& c = *impl_;
  std::vector<size_t> order(c.profile_ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.profile_ms[a] > c.profile_ms[b]; });
  double total = 0;
  for (double v : c.profile_ms) total += v;
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  os << "layer profile (total " << total << " ms over all runs):\n";
  for (size_t i : order) {
    if (c.profile_runs[i] == 0) continue;
    const Layer& l = *c.engine->steps[i];
    // Elided concatenations launch nothing: their inputs' producers wrote into the output.
    const int64_t elided = c.profile_elided[i];
    std::string kernel = c.engine->kernels[i]->tactic;
    if (elided == c.profile_runs[i]) {
      kernel = "elided";
    } else if (elided > 0) {
      kernel += ", elided in " + std::to_string(elided) + " of " + std::to_string(c.profile_runs[i]) + " runs";
    }
    os << "  " << std::setw(9) << c.profile_ms[i] << " ms  " << std::setw(5) << std::setprecision(1)
       << (total > 0 ? 100.0 * c.profile_ms[i] / total : 0.0) << "%  " << std::setprecision(3) << l.name() << " ["
       << l.type() << ", " << kernel << "] mean " << c.profile_ms[i] / static_cast<double>(c.profile_runs[i])
       << " ms\n";
  }
  return os.str();
}

void ExecutionContext::set_graph_capture(bool enabled) {
  ContextImpl& c = *impl_;
  if (enabled && !c.engine->backend->supports_graphs()) {
    throw Error(std::string("graph capture needs a CUDA engine; this engine runs on ") + to_string(c.engine->data.device));
  }
  c.use_graph = enabled;
  c.graph_auto = false;
  if (!enabled && c.graph) {
    c.engine->backend->destroy_graph(c.graph);
    c.graph = nullptr;
  }
}

bool ExecutionContext::graph_capture() const {
  const ContextImpl& c = *impl_;
  return c.use_graph || (c.graph_auto && c.engine->backend->supports_graphs() && !c.has_dd && !c.graph_auto_failed);
}

void ExecutionContext::execute() {
  ContextImpl& c = *impl_;
  EngineImpl& e = *c.engine;
  enqueue(c.own_stream);
  e.backend->synchronize(c.own_stream);
  check_device_errors();
}

void ExecutionContext::check_device_errors() {
  ContextImpl& c = *impl_;
  EngineImpl& e = *c.engine;
  if (!c.device_errors.size() || std::none_of(c.reports_errors.begin(), c.reports_errors.end(), [](bool b) { return b; })) {
    return;
  }
  std::vector<int32_t> flags(e.steps.size(), 0);
  e.backend->copy_device_to_host(flags.data(), c.device_errors.data(), flags.size() * sizeof(int32_t), nullptr);
  for (size_t s = 0; s < flags.size(); ++s) {
    if (!flags[s]) continue;
    const Layer& l = *e.steps[s];
    throw Error("layer '" + l.name() + "' (" + l.type() + ", kernel '" + e.kernels[s]->tactic +
                "'): an index was out of range. The indices were computed on the device during the "
                "inference, so they could not be checked before it; the elements they address were "
                "written as 0 (or the updates skipped). Check the values that reach this layer's indices "
                "input (run the engine on the CPU to get the exact index and position)");
  }
}

namespace {

void enqueue_steps(ExecutionContext& self, ContextImpl& c, void* stream);

}  // namespace

void ExecutionContext::enqueue(void* stream) {
  ContextImpl& c = *impl_;
  EngineImpl& e = *c.engine;
  if (!stream) stream = c.own_stream;
  const bool was_dirty = c.dirty;
  if (c.dirty) prepare_context(c);
  c.strings.clear();
  c.string_values.clear();
  if (c.has_dd) {
    if (c.use_graph) {
      std::string layer;
      for (size_t s = 0; s < e.steps.size() && layer.empty(); ++s) {
        if (c.dd_step[s]) layer = "'" + e.steps[s]->name() + "' (" + e.steps[s]->type() + ")";
      }
      throw Error("CUDA graph capture is not possible for this engine: layer " + layer +
                  " has a data-dependent output size, which the host reads in the middle of the inference; "
                  "run it without graph capture (no --cuda-graph)");
    }
    if (!c.sizes.empty()) {  // the previous inference resolved sizes: start from the upper bounds
      c.sizes.clear();
      c.overflow.clear();
      c.states = c.base_states;
    }
  }
  const bool auto_graph = !c.use_graph && c.graph_auto && e.backend->supports_graphs() && !c.has_dd &&
                          !c.graph_auto_failed && !e.backend->is_capturing(stream);
  if ((!c.use_graph && !auto_graph) || c.profiling) {
    enqueue_steps(*this, c, stream);
    return;
  }
  if (c.graph && (was_dirty || c.graph_addresses != c.addresses || c.graph_stream != stream)) {
    e.backend->destroy_graph(c.graph);
    c.graph = nullptr;
  }
  if (!c.graph) {
    // Kernels run lazy one-time work (library handles, cuDNN plans) on their first execution;
    // run once outside the capture so none of it lands in the graph.
    enqueue_steps(*this, c, stream);
    e.backend->synchronize(stream);
    try {
      e.backend->begin_capture(stream);
      try {
        enqueue_steps(*this, c, stream);
      } catch (...) {
        try {
          e.backend->destroy_graph(e.backend->end_capture(stream));
        } catch (const std::exception&) {
        }
        throw;
      }
      c.graph = e.backend->end_capture(stream);
    } catch (const std::exception& ex) {
      if (!auto_graph) throw;
      // Automatic graphs are an optimization: the inference above already ran correctly.
      c.graph_auto_failed = true;
      log(Severity::kWarning, std::string("CUDA graph capture failed, running without graphs from now on (") +
                                  ex.what() + ")");
      return;
    }
    c.graph_addresses = c.addresses;
    c.graph_stream = stream;
  }
  e.backend->launch_graph(c.graph, stream);
}

namespace {

void enqueue_steps(ExecutionContext& self, ContextImpl& c, void* stream) {
  (void)self;
  EngineImpl& e = *c.engine;
  const int threads = context_threads(c);
  auto* const errors = static_cast<int32_t*>(c.device_errors.data());
  if (errors) e.backend->memset_device(errors, 0, c.device_errors.size(), stream);
  for (size_t s = 0; s < e.steps.size(); ++s) {
    const Layer& l = *e.steps[s];
    try {
      if (c.host_known[s]) {
        for (int i = 0; i < l.num_outputs(); ++i) {
          const Tensor* t = l.output(i);
          const HostTensor& v = *c.states.at(t).value;
          if (!v.nbytes()) continue;
          // The StringRefs copied below point into v's characters: keep v alive for this inference.
          if (v.type() == DataType::kString) c.string_values.push_back(c.states.at(t).value);
          auto h = c.host_known_addresses.find(t);
          if (h == c.host_known_addresses.end()) {
            e.backend->copy_host_to_device(tensor_address(c, t), v.data(), v.nbytes(), stream);
          } else if (t->is_network_output()) {
            e.backend->copy_device_to_device(tensor_address(c, t), h->second, v.nbytes(), stream);
          }
        }
        continue;
      }
      if (c.plan.elided[s]) {  // its inputs' producers already wrote into its output
        if (c.profiling) {
          ++c.profile_runs[s];
          ++c.profile_elided[s];
        }
        continue;
      }
      KernelContext kc;
      kc.layer = &l;
      for (int i = 0; i < l.num_inputs(); ++i) {
        kc.inputs.push_back(l.input(i) ? view_of(c, l.input(i)) : TensorView{});
      }
      for (int i = 0; i < l.num_outputs(); ++i) kc.outputs.push_back(view_of(c, l.output(i)));
      kc.workspace = c.workspace.data();
      kc.workspace_size = c.workspace.size();
      kc.stream = stream;
      kc.num_threads = threads;
      if (e.data.device == DeviceType::kCPU) kc.strings = &c.strings;
      if (errors && c.reports_errors[s]) kc.device_error = errors + s;
      if (c.profiling) {
        const auto t0 = std::chrono::steady_clock::now();
        c.kernels[s]->execute(kc);
        e.backend->synchronize(stream);
        c.profile_ms[s] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        ++c.profile_runs[s];
      } else {
        c.kernels[s]->execute(kc);
      }
      if (c.dd_step[s]) resolve_data_dependent_sizes(c, s, stream);
    } catch (const std::exception& ex) {
      const std::string msg = ex.what();
      if (msg.rfind("layer '", 0) == 0 || msg.rfind("no address set", 0) == 0) throw Error(msg);
      throw Error("layer '" + l.name() + "' (" + l.type() + ", kernel '" + e.kernels[s]->tactic + "') failed: " + msg);
    }
  }
  // Network outputs that no step writes (constants or inputs passed through) are copied.
  const Network& net = *e.data.network;
  for (int i = 0; i < net.num_outputs(); ++i) {
    const Tensor* t = net.output(i);
    const Layer* producer = t->producer();
    const TensorState& st = c.states.at(t);
    const size_t bytes = static_cast<size_t>(st.dims.volume()) * data_type_size(st.type);
    if (t->is_network_input()) continue;  // same buffer
    if (producer && producer->type() == kLayerConstant && bytes) {
      auto dst = c.addresses.find(t->name());
      if (dst == c.addresses.end() || !dst->second)
        throw Error("no address set for output '" + t->name() + "' (call set_tensor_address before execute)");
      e.backend->copy_device_to_device(dst->second, e.weights.at(t), bytes, stream);
    }
  }
}

}  // namespace

}  // namespace kiln
