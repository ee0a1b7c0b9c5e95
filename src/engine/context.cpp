// Execution contexts: which shape plan an inference uses (the cached plan of the current input
// shapes, built once per shape), how it is launched (a cached CUDA graph, a new capture, or
// layer by layer), data-dependent sizes, profiling and device-side errors. The parts each have
// their file: bindings.h, context_memory.h, shape_plan_cache.h, graph_cache.h, and the plans
// themselves src/plan/shape_plan.h.
//
// The hot path of an inference at seen shapes and addresses: no shape inference, no planning,
// no allocation, no kernel preparation, no host-device synchronization; on CUDA one graph
// launch, or without graphs one execute() per kernel on prepared contexts.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/runtime.h"
#include "src/engine/context_impl.h"
#include "src/plan/kernel_config.h"
#include "src/core/out_of_memory.h"
#include "src/core/text.h"

namespace kiln {

namespace {

// The device lifecycle lock (backend.h) is held while a context builds or drops plans, runs a
// plan for the first time and captures a graph. A first run is where libraries do their one-time
// work for new shapes (module loading, runtime compilation, lazy plan building); that work, and
// freeing device memory, in one thread made captures in others fail on the H200 (cuDNN's and
// cuBLASLt's calls returned EXECUTION_FAILED inside a capture, despite thread-local capture
// mode). All of these happen once per shape (and set of addresses) per context: steady-state
// inferences, replays and plain runs alike, never take it.
using LifecycleLock = std::unique_lock<std::recursive_mutex>;

int hardware_threads() {  // read once: hardware_concurrency reads /sys on every call
  static const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return n;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Threads for this context's kernels (CPU engines): its own setting, else the engine's, else the
// machine's cores shared among the engine's live contexts. Device engines' kernels take no host
// threads: always 1 (as runtime.h says), so that creating another context does not change this
// one's plan key (it did, and every shape was prepared again after a server's warm-up).
int configured_threads(const ContextImpl& c) {
  if (c.engine->data.device != DeviceType::kCPU) return 1;
  if (c.num_threads) return c.num_threads;
  if (c.engine->data.num_threads) return c.engine->data.num_threads;
  const int live = std::max(1, c.engine->live_contexts.load(std::memory_order_relaxed));
  return std::max(1, hardware_threads() / live);
}

// The count the next inference uses: the configured one, fewer while the cores are shared
// (thread_adaptation.h).
int context_threads(const ContextImpl& c) { return c.adaptation.threads(configured_threads(c)); }

std::string shapes_text(const std::map<std::string, Dims>& dims) {
  std::string s;
  for (const auto& [name, d] : dims) s += (s.empty() ? "" : ", ") + name + ":" + d.to_string();
  return s;
}

// Plans for plain launches (no CUDA graph) use the kernels the builder chose for them where
// they differ (cheaper to launch); others the fastest on the device.
ShapePlanOptions plan_options(ContextImpl& c, bool launch_tactics) {
  ShapePlanOptions o;
  o.num_threads = c.key.num_threads;
  o.concat_elision = c.concat_elision;
  o.launch_tactics = launch_tactics;
  o.arena_bytes = c.memory.arena_bytes();
  o.profile_plan = &c.profile_info->plan;
  o.make_kernel = [&c, launch_tactics](size_t s) {
    EngineImpl& e = *c.engine;
    const KernelEntry* entry = launch_tactics ? e.launch_kernels[s] : e.kernels[s];
    std::unique_ptr<Kernel> k;
    if (entry == e.kernels[s] && c.prototypes[s]) k = c.prototypes[s]->another_instance();
    if (!k) {
      k = entry->create(*e.steps[s]);
      configure_kernel_for_profile(*k, *e.steps[s], c.profile_info->states);
    }
    return k;
  };
  return o;
}

ShapePlanOptions plan_options(ContextImpl& c) { return plan_options(c, c.key.launch_tactics); }

// Whether this context's inferences launch layer by layer: graphs turned off, or impossible
// for the profile (data-dependent sizes), or no graphs on this device.
bool plain_launches(const ContextImpl& c) {
  if (!c.engine->backend->supports_graphs()) return false;  // the CPU: one set of kernels
  if (c.graph_explicit) return false;
  return !c.graph_auto || c.profile_info->has_data_dependent;
}

// Drops plans evicted from the cache: their graphs first (an executable graph still in flight is
// freed when it completes), then the plans. Their device buffers are freed with cudaFree, which
// waits for the device, so work still reading them finishes first; the caller's stream is not
// touched (it may be gone by now).
void retire_plans(ContextImpl& c, std::vector<std::unique_ptr<ShapePlan>> evicted) {
  if (evicted.empty()) return;
  LifecycleLock lock(device_lifecycle_mutex());
  for (const auto& p : evicted) {
    c.graphs.drop_plan(p->id);
    if (c.current == p.get()) c.current = nullptr;
  }
  c.stats.shape_plans_evicted += evicted.size();
  evicted.clear();
}

// The plan of the current input shapes: at hand, cached, or built now. `next_inference`: for
// the inference about to run, at the thread count the adaptation asks for now; otherwise (shape
// queries) the plan that ran last where there is one: after an inference whose timing changed
// the count, the output shapes it read are in its own plan, and a plan of the new count holds
// only the upper bounds of data-dependent sizes.
// found_plan: the plan at hand or cached, null where it would have to be built.
ShapePlan* found_plan(ContextImpl& c, bool next_inference = false) {
  const int threads = context_threads(c);
  if (threads != c.key.num_threads && (next_inference || !c.current)) {
    c.key.num_threads = threads;
    c.current = nullptr;
  }
  const bool plain = plain_launches(c);
  if (plain != c.key.launch_tactics) {
    c.key.launch_tactics = plain;
    c.current = nullptr;
  }
  if (c.current) return c.current;
  if (ShapePlan* p = c.plans.find(c.key)) {
    c.current = p;
    return p;
  }
  return nullptr;
}

ShapePlan& current_plan(ContextImpl& c, bool next_inference = false) {
  if (ShapePlan* p = found_plan(c, next_inference)) return *p;
  const auto t0 = std::chrono::steady_clock::now();
  LifecycleLock lock(device_lifecycle_mutex());
  std::unique_ptr<ShapePlan> plan = build_shape_plan(c.engine->env, c.input_dims, plan_options(c));
  plan->id = c.next_plan_id++;
  ShapePlan* raw = plan.get();
  retire_plans(c, c.plans.insert(c.key, std::move(plan)));
  c.current = raw;
  ++c.stats.shape_plans_built;
  if (raw->host_values.data()) ++c.stats.device_allocations;
  c.stats.shape_plan_ms += ms_since(t0);
  log(Severity::kVerbose, "prepared input shapes " + shapes_text(c.input_dims) + " in " + std::to_string(ms_since(t0)) +
                              " ms (" + std::to_string(c.plans.size()) + " cached); activations " +
                              std::to_string(raw->memory.peak) + " bytes" +
                              (raw->uses_profile_plan ? " (the profile plan: no copy elision)" : "") + ", workspace " +
                              std::to_string(raw->workspace_bytes));
  return *raw;
}

// Binds the plan to the context's memory and the caller's addresses, checking that every
// binding it uses is set.
void bind(ContextImpl& c, ShapePlan& plan) {
  const PlanMemory& m = c.memory.view();
  if (plan.bound_memory == m.generation && plan.bound_io == c.bindings.generation()) return;
  c.bindings.check(plan.required_io);
  PlanMemory view = m;
  view.strings = c.engine->data.device == DeviceType::kCPU ? &c.strings : nullptr;
  bind_plan(plan, view, c.bindings.addresses(), c.bindings.generation());
}

// After step `s` wrote its data-dependent sizes: reads them (synchronizing the stream on a
// device) and re-targets the later steps.
void resolve_data_dependent_sizes(ContextImpl& c, ShapePlan& plan, size_t s, void* stream) {
  EngineImpl& e = *c.engine;
  const Layer& l = *e.steps[s];
  const bool device = e.data.device != DeviceType::kCPU;
  if (device) e.backend->synchronize(stream);
  const StepLaunch& launch = plan.launches[s];
  for (int i = 0; i < l.num_outputs(); ++i) {
    const Tensor* t = l.output(i);
    const TensorState& st = plan.states.at(t);
    if (!st.dd_size || st.value) continue;
    int64_t v = 0;
    const void* src = launch.ctx.outputs[static_cast<size_t>(i)].data;
    if (!src)
      throw Error("internal: layer " + quote(l.name()) + " has no memory for its size output " + quote(t->name()));
    if (device) {
      e.backend->copy_device_to_host(&v, src, sizeof v, stream);
      e.backend->synchronize(stream);
    } else {
      std::memcpy(&v, src, sizeof v);
    }
    c.sizes[t] = v;
  }
  const auto buffer_for = [&c](std::unordered_map<const Tensor*, DeviceBuffer>& buffers, const Tensor* t,
                               uint64_t bytes) {
    DeviceBuffer& buf = buffers[t];
    if (buf.size() < bytes) {
      buf = DeviceBuffer(*c.engine->backend, bytes);
      ++c.stats.device_allocations;
    }
    return buf.data();
  };
  retarget_plan(
      e.env, plan, s, c.sizes, plan_options(c, plan.launch_tactics),
      [&](const Tensor* t, uint64_t bytes) { return buffer_for(c.overflow_buffers, t, bytes); },
      [&](const Tensor* t, const void* data, size_t bytes) -> void* {
        if (!device) return const_cast<void*>(data);
        void* dst = buffer_for(c.dd_value_buffers, t, bytes);
        e.backend->copy_host_to_device(dst, data, bytes, stream);
        return dst;
      });
  if (!c.memory.fits(c.memory.arena_bytes(), plan.workspace_bytes)) {
    c.memory.ensure(c.memory.arena_bytes(), plan.workspace_bytes,
                    "layer " + quote(l.name()) + "'s data-dependent sizes");
  }
  bind(c, plan);
}

// Launches every step of the plan (no graph).
void run_steps(ContextImpl& c, ShapePlan& plan, void* stream) {
  EngineImpl& e = *c.engine;
  const PlanMemory& m = c.memory.view();
  if (plan.any_reports_errors && m.error_flags) {
    e.backend->memset_device(m.error_flags, 0, e.steps.size() * sizeof(int32_t), stream);
  }
  LayerProfile& prof = c.profiling;
  for (size_t s = 0; s < plan.launches.size(); ++s) {
    if (!plan.runs[s]) {
      if (prof.enabled && plan.memory.elided[s]) {
        ++prof.runs[s];
        ++prof.elided[s];
      }
      continue;
    }
    StepLaunch& launch = plan.launches[s];
    launch.ctx.stream = stream;
    try {
      if (prof.enabled) {
        const auto t0 = std::chrono::steady_clock::now();
        plan.kernels[s]->execute(launch.ctx);
        e.backend->synchronize(stream);
        prof.ms[s] += ms_since(t0);
        ++prof.runs[s];
      } else {
        plan.kernels[s]->execute(launch.ctx);
      }
      if (plan.dd_step[s]) resolve_data_dependent_sizes(c, plan, s, stream);
    } catch (const std::exception& ex) {
      const Layer& l = *e.steps[s];
      const std::string msg = exception_text(ex);
      if (msg.rfind("layer '", 0) == 0 || msg.rfind("output '", 0) == 0) throw Error(msg);
      throw Error("layer " + quote(l.name()) + " (" + l.type() + ", kernel " + quote(e.kernels[s]->tactic) +
                  ") failed: " + msg);
    }
  }
  // Network outputs no kernel writes (constants, host-computed values) are copied in.
  const auto& addresses = c.bindings.addresses();
  for (const OutputCopy& copy : plan.output_copies) {
    e.backend->copy_device_to_device(addresses[static_cast<size_t>(copy.io)], copy.source, copy.bytes, stream);
  }
}

// A CPU inference whose thread count may adapt: runs the plan, then tells the adaptation how
// much of the inference the calling thread spent on a core.
void run_cpu_steps(ContextImpl& c, ShapePlan& plan) {
  const int configured = configured_threads(c);
  if (!c.adaptation.enabled() || configured <= 1 || c.profiling.enabled) {
    run_steps(c, plan, nullptr);
    return;
  }
  const int64_t cpu0 = ThreadAdaptation::thread_cpu_ns();
  const auto t0 = std::chrono::steady_clock::now();
  run_steps(c, plan, nullptr);
  const auto t1 = std::chrono::steady_clock::now();
  const int64_t cpu1 = ThreadAdaptation::thread_cpu_ns();
  if (cpu0 < 0 || cpu1 < 0) return;
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count();
  const int before = plan.num_threads;
  switch (c.adaptation.record(configured, wall, cpu1 - cpu0, now)) {
    case ThreadAdaptation::Change::kReduced:
      ++c.stats.thread_reductions;
      log(Severity::kVerbose,
          "the cores are shared (this context's thread was off its core for over 30% of its "
          "inferences): " +
              std::to_string(before) + " -> " + std::to_string(context_threads(c)) + " threads");
      break;
    case ThreadAdaptation::Change::kRestored:
      ++c.stats.thread_restorations;
      log(Severity::kVerbose, "the cores are free again: " + std::to_string(before) + " -> " +
                                  std::to_string(context_threads(c)) + " threads");
      break;
    case ThreadAdaptation::Change::kNone:
      break;
  }
}

bool graph_possible(const ContextImpl& c, const ShapePlan& plan, void* stream) {
  const EngineImpl& e = *c.engine;
  return e.backend->supports_graphs() && !plan.has_dd && !c.profiling.enabled && !e.backend->is_capturing(stream);
}

// After a failed capture: this plan's kernels may keep state from the failed capture, so they
// are made anew, the ones for plain launches, and the new plan takes the failed one's place in
// the cache, marked so that no capture of these shapes is tried again.
ShapePlan& rebuild_after_failed_capture(ContextImpl& c, ShapePlan& failed, void* stream) {
  LifecycleLock lock(device_lifecycle_mutex());
  c.engine->backend->recover_after_failed_capture(stream);
  std::unique_ptr<ShapePlan> old = c.plans.remove(&failed);
  c.graphs.drop_plan(failed.id);
  c.current = nullptr;
  old.reset();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ShapePlan> plan = build_shape_plan(c.engine->env, c.input_dims, plan_options(c, true));
  plan->id = c.next_plan_id++;
  plan->capture_failed = true;
  plan->warmed = true;
  ShapePlan* raw = plan.get();
  retire_plans(c, c.plans.insert(c.key, std::move(plan)));
  c.current = raw;
  ++c.stats.shape_plans_built;
  c.stats.shape_plan_ms += ms_since(t0);
  return *raw;
}

// Captures the plan into a CUDA graph, caches and launches it. On failure, returns false (the
// capture is ended, its error state cleared) with *why set.
bool capture_and_launch(ContextImpl& c, ShapePlan& plan, void* stream, std::string* why) {
  Backend& b = *c.engine->backend;
  const auto t0 = std::chrono::steady_clock::now();
  void* captured = nullptr;
  LifecycleLock lock(device_lifecycle_mutex());
  try {
    b.prepare_thread();
    b.begin_capture(stream);
    try {
      run_steps(c, plan, stream);
    } catch (...) {
      b.abort_capture(stream);
      throw;
    }
    captured = b.end_capture(stream);
  } catch (const std::exception& ex) {
    *why = ex.what();
    return false;
  }
  lock.unlock();
  c.stats.capture_ms += ms_since(t0);
  ++c.stats.graph_captures;
  void* exec = nullptr;
  try {
    exec = c.graphs.store(plan.id, c.bindings.addresses(), captured, c.stats);
  } catch (const std::exception& ex) {
    b.destroy_captured(captured);
    *why = ex.what();
    return false;
  }
  b.destroy_captured(captured);
  b.launch_graph(exec, stream);
  ++c.stats.graph_replays;
  return true;
}

}  // namespace

// ---- ContextImpl ------------------------------------------------------------------------------

ContextImpl::ContextImpl(EngineImpl& e, ContextMemory memory_mode)
    : engine(&e), bindings(e.io), memory(*e.backend, memory_mode, e.error_flag_bytes()), graphs(*e.backend) {
  e.live_contexts.fetch_add(1, std::memory_order_relaxed);
  if (e.data.device != DeviceType::kCPU) own_stream = e.backend->create_stream();
  {
    LifecycleLock lock(device_lifecycle_mutex());
    for (size_t s = 0; s < e.steps.size(); ++s) prototypes.push_back(e.kernels[s]->create(*e.steps[s]));
  }
  key.dims.resize(static_cast<size_t>(e.num_inputs));
}

ContextImpl::~ContextImpl() {
  // The caller's streams are not touched (they may be destroyed already): freeing the plans'
  // device memory waits for the device, and graphs still in flight are freed when they complete.
  LifecycleLock lock(device_lifecycle_mutex());
  graphs.clear();
  Backend& b = *engine->backend;
  if (own_stream) {
    try {
      b.synchronize(own_stream);
    } catch (const std::exception&) {}
  }
  plans.clear();
  prototypes.clear();
  if (own_stream) b.destroy_stream(own_stream);
  engine->live_contexts.fetch_sub(1, std::memory_order_relaxed);
}

// ---- ExecutionContext ---------------------------------------------------------------------

ExecutionContext::ExecutionContext(std::shared_ptr<Engine> engine, std::unique_ptr<ContextImpl> impl)
    : engine_(std::move(engine)), impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

void ExecutionContext::set_optimization_profile(int index) {
  ContextImpl& c = *impl_;
  EngineImpl& e = *c.engine;
  const OptimizationProfile& p = engine_->profile(index);
  auto info = e.profile_info(index);
  LifecycleLock lock(device_lifecycle_mutex());
  for (size_t s = 0; s < e.steps.size(); ++s) {
    if (!c.prototypes[s] || is_host_known(*e.steps[s], info->states.opt)) continue;
    configure_kernel_for_profile(*c.prototypes[s], *e.steps[s], info->states);
  }
  retire_plans(c, c.plans.clear());
  c.graphs.clear();
  c.profile = index;
  c.profile_info = std::move(info);
  c.memory.reserve_for_profile(
      c.profile_info->arena_bytes,
      describe_plan_memory(c.profile_info->plan, "optimization profile " + std::to_string(index)));
  c.input_dims.clear();
  for (const auto& [name, s] : p.all()) c.input_dims[name] = s.opt;
  for (int i = 0; i < e.num_inputs; ++i) {
    auto it = c.input_dims.find(e.input_names[static_cast<size_t>(i)]);
    c.key.dims[static_cast<size_t>(i)] = it != c.input_dims.end() ? it->second : e.io[static_cast<size_t>(i)].dims;
    if (it == c.input_dims.end())
      c.input_dims[e.input_names[static_cast<size_t>(i)]] = e.io[static_cast<size_t>(i)].dims;
  }
  c.key.concat_elision = c.concat_elision;
  c.current = nullptr;
}

int ExecutionContext::optimization_profile() const { return impl_->profile; }

void ExecutionContext::set_input_shape(const std::string& name, const Dims& dims) try {
  ContextImpl& c = *impl_;
  const int index = c.engine->binding(name);
  const TensorInfo& info = c.engine->io[static_cast<size_t>(index)];
  if (info.mode != TensorIOMode::kInput) throw Error("" + quote(name) + " is an output; only input shapes can be set");
  Dims& current = c.key.dims[static_cast<size_t>(index)];
  if (current == dims) return;
  const OptimizationProfile& p = engine_->profile(c.profile);
  const Dims& mn = p.min(name);
  const Dims& mx = p.max(name);
  bool ok = dims.rank() == mn.rank();
  for (int i = 0; ok && i < dims.rank(); ++i) ok = dims[i] >= mn[i] && dims[i] <= mx[i];
  if (!ok) {
    throw Error("input " + quote(name) + ": dims " + dims.to_string() + " are outside optimization profile " +
                std::to_string(c.profile) + " (min " + mn.to_string() + ", max " + mx.to_string() +
                "); rebuild the engine with a wider profile (kiln build --min-shapes/--max-shapes)");
  }
  current = dims;
  c.input_dims[name] = dims;
  c.current = nullptr;
} catch (const std::bad_alloc&) {
  throw_out_of_host_memory("setting the shape of input " + quote(name));
}

namespace {

// The tensor states a shape query reads where no plan of the current input dims is at hand or
// cached: shape inference alone, kept until the input dims change. A query prepares no kernel
// (on a GPU, preparing compiles cuDNN's runtime-compiled engines: seconds on a fresh host); the
// next inference builds the plan. Before any inference these are the plan's own states (it
// starts from the same inference; data-dependent sizes at their upper bounds).
const TensorStates& queried_states(ContextImpl& c) {
  if (!c.query_valid || c.query_dims != c.input_dims) {
    c.query_valid = false;
    c.query_states = infer_shapes(*c.engine->data.network, c.input_dims);
    c.query_dims = c.input_dims;
    c.query_valid = true;
  }
  return c.query_states;
}

}  // namespace

Dims ExecutionContext::tensor_shape(const std::string& name) {
  ContextImpl& c = *impl_;
  const int index = c.engine->binding(name);
  if (c.engine->io[static_cast<size_t>(index)].mode == TensorIOMode::kInput) return c.input_dims.at(name);
  const Tensor* t = c.engine->data.network->find_tensor(name);
  if (const ShapePlan* plan = found_plan(c)) return plan->states.at(t).dims;
  return queried_states(c).at(t).dims;
}

Dims ExecutionContext::max_tensor_shape(const std::string& name) {
  ContextImpl& c = *impl_;
  const int index = c.engine->binding(name);
  if (c.engine->io[static_cast<size_t>(index)].mode == TensorIOMode::kInput) return c.input_dims.at(name);
  const Tensor* t = c.engine->data.network->find_tensor(name);
  if (const ShapePlan* plan = found_plan(c)) return (plan->has_dd ? plan->base_states : plan->states).at(t).dims;
  return queried_states(c).at(t).dims;
}

void ExecutionContext::set_tensor_address(const std::string& name, void* data) {
  ContextImpl& c = *impl_;
  const int index = c.engine->binding(name);
  c.bindings.set(index, data);
  // A tensor that is both a network input and output has two bindings.
  for (size_t i = static_cast<size_t>(index) + 1; i < c.engine->io.size(); ++i) {
    if (c.engine->io[i].name == name) c.bindings.set(static_cast<int>(i), data);
  }
}

void* ExecutionContext::tensor_address(const std::string& name) const {
  return impl_->bindings.get(impl_->engine->binding(name));
}

void ExecutionContext::set_device_memory(void* memory, uint64_t size) {
  ContextImpl& c = *impl_;
  if (c.memory.mode() != ContextMemory::kUserManaged) {
    c.memory.set_user_memory(memory, size, 0, c.profile);  // throws: the context owns its memory
  }
  c.memory.set_user_memory(memory, size, engine_->device_memory_size(c.profile), c.profile);
  c.graphs.clear();
}

void ExecutionContext::set_shape_cache_size(int plans) {
  if (plans < 1)
    throw Error("set_shape_cache_size: the cache holds at least 1 plan (got " + std::to_string(plans) + ")");
  retire_plans(*impl_, impl_->plans.set_capacity(static_cast<size_t>(plans)));
}

int ExecutionContext::shape_cache_size() const { return static_cast<int>(impl_->plans.capacity()); }

void ExecutionContext::set_graph_cache_size(int graphs) {
  if (graphs < 1)
    throw Error("set_graph_cache_size: the cache holds at least 1 graph (got " + std::to_string(graphs) + ")");
  impl_->graphs.set_capacity(static_cast<size_t>(graphs));
}

int ExecutionContext::graph_cache_size() const { return static_cast<int>(impl_->graphs.capacity()); }

ContextStats ExecutionContext::stats() const {
  ContextStats s = impl_->stats;
  s.device_allocations += impl_->memory.allocations() - impl_->memory_allocations_at_reset;
  return s;
}

void ExecutionContext::reset_stats() {
  impl_->stats = ContextStats{};
  impl_->memory_allocations_at_reset = impl_->memory.allocations();
}

void ExecutionContext::set_num_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads) {
    throw Error("set_num_threads: thread count " + std::to_string(threads) + " is outside 0.." +
                std::to_string(kMaxThreads) + " (0: the engine's setting)");
  }
  impl_->num_threads = threads;
}

int ExecutionContext::num_threads() const { return context_threads(*impl_); }

void ExecutionContext::set_thread_adaptation(bool enabled) {
  impl_->adaptation.set_enabled(enabled);  // back to the configured count
}

bool ExecutionContext::thread_adaptation() const { return impl_->adaptation.enabled(); }

void ExecutionContext::set_profiling(bool enabled) {
  LayerProfile& p = impl_->profiling;
  const size_t n = impl_->engine->steps.size();
  p.enabled = enabled;
  p.ms.assign(n, 0.0);
  p.runs.assign(n, 0);
  p.elided.assign(n, 0);
}

void ExecutionContext::set_concat_elision(bool enabled) {
  ContextImpl& c = *impl_;
  if (c.concat_elision == enabled) return;
  c.concat_elision = enabled;
  c.key.concat_elision = enabled;
  c.current = nullptr;  // plans of the other setting stay cached
}

bool ExecutionContext::concat_elision() const { return impl_->concat_elision; }

std::string ExecutionContext::profile_report() const {
  const ContextImpl& c = *impl_;
  const LayerProfile& p = c.profiling;
  std::vector<size_t> order(p.ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.ms[a] > p.ms[b]; });
  double total = 0;
  for (double v : p.ms) total += v;
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  os << "layer profile (total " << total << " ms over all runs):\n";
  for (size_t i : order) {
    if (p.runs[i] == 0) continue;
    const Layer& l = *c.engine->steps[i];
    // Elided concatenations launch nothing: their inputs' producers wrote into the output.
    const int64_t elided = p.elided[i];
    std::string kernel = c.engine->kernels[i]->tactic;
    if (elided == p.runs[i]) {
      kernel = "elided";
    } else if (elided > 0) {
      kernel += ", elided in " + std::to_string(elided) + " of " + std::to_string(p.runs[i]) + " runs";
    }
    os << "  " << std::setw(9) << p.ms[i] << " ms  " << std::setw(5) << std::setprecision(1)
       << (total > 0 ? 100.0 * p.ms[i] / total : 0.0) << "%  " << std::setprecision(3) << l.name() << " [" << l.type()
       << ", " << kernel << "] mean " << p.ms[i] / static_cast<double>(p.runs[i]) << " ms\n";
  }
  return os.str();
}

std::vector<LayerTiming> ExecutionContext::layer_profile() const {
  const ContextImpl& c = *impl_;
  const LayerProfile& p = c.profiling;
  std::vector<LayerTiming> rows;
  for (size_t i = 0; i < p.runs.size(); ++i) {
    if (p.runs[i] == 0) continue;
    const Layer& l = *c.engine->steps[i];
    LayerTiming t;
    t.name = l.name();
    t.type = l.type();
    t.kernel = p.elided[i] == p.runs[i] ? std::string("elided") : c.engine->kernels[i]->tactic;
    t.runs = p.runs[i];
    t.elided_runs = p.elided[i];
    t.total_ms = p.ms[i];
    rows.push_back(std::move(t));
  }
  return rows;
}

void ExecutionContext::set_graph_capture(bool enabled) {
  ContextImpl& c = *impl_;
  if (enabled && !c.engine->backend->supports_graphs()) {
    throw Error(std::string("graph capture needs a CUDA engine; this engine runs on ") +
                to_string(c.engine->data.device));
  }
  c.graph_explicit = enabled;
  c.graph_auto = false;
  if (!enabled) c.graphs.clear();
}

bool ExecutionContext::graph_capture() const {
  const ContextImpl& c = *impl_;
  if (c.graph_explicit) return true;
  if (!c.graph_auto || !c.engine->backend->supports_graphs() || c.profile_info->has_data_dependent) return false;
  return !(c.current && c.current->capture_failed);
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
  const ShapePlan* plan = c.current;
  const int32_t* flags_dev = c.memory.view().error_flags;
  if (!plan || !plan->any_reports_errors || !flags_dev) return;
  std::vector<int32_t> flags(e.steps.size(), 0);
  e.backend->copy_device_to_host(flags.data(), flags_dev, flags.size() * sizeof(int32_t), nullptr);
  for (size_t s = 0; s < flags.size(); ++s) {
    if (!flags[s] || !plan->reports_errors[s]) continue;
    const Layer& l = *e.steps[s];
    throw Error("layer " + quote(l.name()) + " (" + l.type() + ", kernel '" + e.kernels[s]->tactic +
                "'): an index was out of range. The indices were computed on the device during the "
                "inference, so they could not be checked before it; the elements they address were "
                "written as 0 (or the updates skipped). Check the values that reach this layer's indices "
                "input (run the engine on the CPU to get the exact index and position)");
  }
}

void ExecutionContext::enqueue(void* stream) try {
  ContextImpl& c = *impl_;
  EngineImpl& e = *c.engine;
  if (!stream) stream = c.own_stream;
  const uint64_t built = c.stats.shape_plans_built;
  ShapePlan* plan = &current_plan(c, true);
  if (c.stats.shape_plans_built == built) ++c.stats.shape_plan_hits;
  if (plan->has_dd) {
    if (c.graph_explicit) {
      std::string layer;
      for (size_t s = 0; s < e.steps.size() && layer.empty(); ++s) {
        if (plan->dd_step[s]) layer = quote(e.steps[s]->name()) + " (" + e.steps[s]->type() + ")";
      }
      throw Error("CUDA graph capture is not possible for this engine: layer " + layer +
                  " has a data-dependent output size, which the host reads in the middle of the inference; "
                  "run it without graph capture (no --cuda-graph)");
    }
    if (plan->retargeted) {  // the previous inference read sizes: start from the upper bounds
      reset_plan_states(*plan);
      c.sizes.clear();
    }
  }
  if (e.data.device == DeviceType::kCPU) c.strings.clear();
  // Nothing to do once the memory fits this plan (a few comparisons); otherwise it grows, or,
  // user-managed, says what is missing.
  if (!c.memory.fits(plan->memory.peak, plan->workspace_bytes)) {
    c.memory.ensure(plan->memory.peak, plan->workspace_bytes,
                    describe_plan_memory(plan->memory, "input shapes " + shapes_text(c.input_dims)));
  }
  if (c.memory.view().generation != c.graph_memory_generation) {  // the memory moved: graphs point at the old
    c.graphs.clear();
    c.graph_memory_generation = c.memory.view().generation;
  }
  bind(c, *plan);
  ++c.stats.inferences;

  const bool possible = graph_possible(c, *plan, stream);
  const bool want = c.graph_explicit || (c.graph_auto && possible);
  if (!plan->warmed) {
    // The first inference at these shapes runs without a graph: libraries' lazy one-time work
    // and module loading happen here, outside any capture (and, where graphs exist, never while
    // another thread captures).
    ++c.stats.plain_inferences;
    LifecycleLock lock(device_lifecycle_mutex(), std::defer_lock);
    if (e.backend->supports_graphs()) lock.lock();
    run_steps(c, *plan, stream);
    plan->warmed = true;
    return;
  }
  if (!want || !possible || (plan->capture_failed && !c.graph_explicit)) {
    ++c.stats.plain_inferences;
    if (e.data.device == DeviceType::kCPU) {
      run_cpu_steps(c, *plan);
    } else {
      run_steps(c, *plan, stream);
    }
    return;
  }
  if (void* exec = c.graphs.find(plan->id, c.bindings.addresses())) {
    e.backend->launch_graph(exec, stream);
    ++c.stats.graph_replays;
    return;
  }
  std::string why;
  if (capture_and_launch(c, *plan, stream, &why)) return;
  ++c.stats.graph_capture_failures;
  plan->capture_failed = true;
  if (c.graph_explicit) {
    throw Error("CUDA graph capture of the inference at input shapes " + shapes_text(c.input_dims) + " failed: " + why +
                ". The context is still usable; call set_graph_capture(false) (or leave graphs "
                "automatic) to run without graphs");
  }
  if (!c.warned_capture) {
    log(Severity::kWarning, "CUDA graph capture failed at input shapes " + shapes_text(c.input_dims) + " (" + why +
                                "); these shapes run without graphs from now on");
    c.warned_capture = true;
  }
  plan = &rebuild_after_failed_capture(c, *plan, stream);
  bind(c, *plan);
  ++c.stats.plain_inferences;
  LifecycleLock lock(device_lifecycle_mutex());  // fresh kernels: their first run
  run_steps(c, *plan, stream);
} catch (const std::bad_alloc&) {
  throw_out_of_host_memory("running an inference");
}

}  // namespace kiln
