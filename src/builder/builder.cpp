// The builder driver: validates the network and profiles, runs the optimization passes,
// chooses a kernel per layer, plans memory and serializes the engine.
#include "kiln/builder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/builder/engine_check.h"
#include "src/builder/passes/passes.h"
#include "src/builder/tactic_selection.h"
#include "src/engine/engine_format.h"
#include "src/plan/execution_plan.h"
#include "src/plugins/plugin_layer.h"
#include "src/ir/shape_inference.h"
#include "src/core/out_of_memory.h"
#include "src/core/text.h"

namespace kiln {

// ---- OptimizationProfile ------------------------------------------------------------------

void OptimizationProfile::set_dimensions(const std::string& input, const Dims& min, const Dims& opt, const Dims& max) {
  if (min.rank() != opt.rank() || opt.rank() != max.rank()) {
    throw Error("profile for input " + quote(input) + ": min " + min.to_string() + ", opt " + opt.to_string() +
                " and max " + max.to_string() + " must have the same rank");
  }
  for (int i = 0; i < min.rank(); ++i) {
    if (min[i] < 0 || !(min[i] <= opt[i] && opt[i] <= max[i])) {
      throw Error("profile for input " + quote(input) + ": need 0 <= min <= opt <= max at every axis, got min " +
                  min.to_string() + ", opt " + opt.to_string() + ", max " + max.to_string());
    }
  }
  shapes_[input] = Shapes{min, opt, max};
}

namespace {
const OptimizationProfile::Shapes& shapes_of(const std::map<std::string, OptimizationProfile::Shapes>& m,
                                             const std::string& input) {
  auto it = m.find(input);
  if (it == m.end()) throw Error("the optimization profile has no dims for input " + quote(input));
  return it->second;
}
}  // namespace

const Dims& OptimizationProfile::min(const std::string& input) const { return shapes_of(shapes_, input).min; }
const Dims& OptimizationProfile::opt(const std::string& input) const { return shapes_of(shapes_, input).opt; }
const Dims& OptimizationProfile::max(const std::string& input) const { return shapes_of(shapes_, input).max; }

// ---- Builder ------------------------------------------------------------------------------

namespace {

// Completes and checks the profiles: every input gets min/opt/max (static inputs their dims).
std::vector<OptimizationProfile> resolve_profiles(const Network& net, const BuilderConfig& config) {
  std::vector<OptimizationProfile> profiles = config.profiles;
  if (profiles.empty()) profiles.emplace_back();
  for (size_t p = 0; p < profiles.size(); ++p) {
    auto& prof = profiles[p];
    for (const auto& [name, s] : prof.all()) {
      if (!net.find_tensor(name) || !net.find_tensor(name)->is_network_input()) {
        throw Error("optimization profile " + std::to_string(p) + " names " + quote(name) +
                    ", which is not a network input");
      }
    }
    for (int i = 0; i < net.num_inputs(); ++i) {
      const Tensor* t = net.input(i);
      if (!prof.has(t->name())) {
        if (t->dims().is_dynamic()) {
          throw Error("input " + quote(t->name()) + " has dynamic dims " + t->dims().to_string() +
                      " but optimization profile " + std::to_string(p) +
                      " gives no min/opt/max for it (kiln build: --shapes or --min/--opt/--max-shapes)");
        }
        prof.set_dimensions(t->name(), t->dims(), t->dims(), t->dims());
        continue;
      }
      for (const Dims* d : {&prof.min(t->name()), &prof.opt(t->name()), &prof.max(t->name())}) {
        if (d->rank() != t->dims().rank()) {
          throw Error("optimization profile " + std::to_string(p) + ": dims " + d->to_string() + " for input '" +
                      t->name() + "' have rank " + std::to_string(d->rank()) + ", the input has rank " +
                      std::to_string(t->dims().rank()) + " (" + t->dims().to_string() + ")");
        }
        for (int k = 0; k < d->rank(); ++k) {
          if (t->dims()[k] >= 0 && (*d)[k] != t->dims()[k]) {
            throw Error("optimization profile " + std::to_string(p) + ": dims " + d->to_string() + " for input '" +
                        t->name() + "' differ from its fixed dims " + t->dims().to_string() + " at axis " +
                        std::to_string(k));
          }
        }
      }
    }
  }
  return profiles;
}

std::vector<std::map<std::string, Dims>> shape_points(const std::vector<OptimizationProfile>& profiles) {
  std::vector<std::map<std::string, Dims>> points;
  for (const auto& p : profiles) {
    std::map<std::string, Dims> mn, op, mx;
    for (const auto& [name, s] : p.all()) {
      mn[name] = s.min;
      op[name] = s.opt;
      mx[name] = s.max;
    }
    points.push_back(op);  // opt first: passes that need one point use points[0]
    points.push_back(mn);
    points.push_back(mx);
  }
  return points;
}

struct PassEntry {
  const char* name;
  int (*fn)(Network&, PassContext&);
  bool optimization;  // skipped by disable_optimizations (fp16 and layout are requests, not optimizations)
};

const PassEntry kPipeline[] = {
    {"constant_folding", pass_constant_folding, true},
    {"dead_layer_elimination", pass_dead_layer_elimination, true},
    {"conv_bn_folding", pass_conv_bn_folding, true},
    {"shuffle_merge", pass_shuffle_merge, true},
    {"activation_fusion", pass_activation_fusion, true},
    {"elementwise_fusion", pass_elementwise_fusion, true},
    {"dead_layer_elimination", pass_dead_layer_elimination, true},
    {"fp16_precision", pass_fp16_precision, false},
    {"layout", pass_layout, false},
    {"concat_conv_split", pass_concat_conv_split, true},
};

void run_passes(Network& net, const BuilderConfig& config, const std::vector<std::map<std::string, Dims>>& points,
                BuildReport& report) {
  PassContext ctx{config, points, &report.pass_log};
  auto enabled = [&](const std::string& name) {
    return std::find(config.disabled_passes.begin(), config.disabled_passes.end(), name) ==
           config.disabled_passes.end();
  };
  for (const auto& p : kPipeline) {
    if (!enabled(p.name) || (p.optimization && config.disable_optimizations)) continue;
    const int changes = p.fn(net, ctx);
    if (config.verbose)
      log(Severity::kInfo, std::string("pass ") + p.name + ": " + std::to_string(changes) + " change(s)");
    net.sort_topologically();
  }
}

}  // namespace

const std::vector<std::string>& builder_pass_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> r;
    for (const auto& p : kPipeline) {
      if (std::find(r.begin(), r.end(), p.name) == r.end()) r.push_back(p.name);
    }
    return r;
  }();
  return names;
}

namespace {

// Writes the dims/types seen across all shape points onto the tensors (kDynamic where they vary).
void annotate_tensors(Network& net, const std::vector<TensorStates>& all_states) {
  for (Tensor* t : net.tensors()) {
    bool first = true;
    Dims dims;
    DataType type = t->type();
    for (const auto& states : all_states) {
      auto it = states.find(t);
      if (it == states.end()) continue;
      if (first) {
        dims = it->second.dims;
        type = it->second.type;
        first = false;
      } else if (dims.rank() == it->second.dims.rank()) {
        for (int k = 0; k < dims.rank(); ++k) {
          if (dims[k] != it->second.dims[k]) dims[k] = kDynamic;
        }
      }
      for (int k = 0; k < dims.rank(); ++k) {
        if (it->second.dd_axes & (1u << k)) dims[k] = kDynamic;  // known only at run time
      }
    }
    if (!first) {
      if (!t->is_network_input()) t->set_dims(dims);
      t->set_type(type);
    }
  }
}

// Types only the CPU has: strings (StringRef elements point into host memory). int16, uint16,
// uint32 and uint64 run on CUDA too, in the kernels that take them on the CPU (docs/layers.md);
// a layer whose CUDA kernels all decline such a tensor fails in tactic selection, naming the
// layer and its input and output types.
bool cpu_only_type(DataType t) { return t == DataType::kString; }

void reject_cpu_only_types(const Network& net, const TensorStates& states, DeviceType device) {
  for (int i = 0; i < net.num_inputs(); ++i) {
    const DataType t = net.input(i)->type();
    if (!cpu_only_type(t)) continue;
    throw Error("input " + quote(net.input(i)->name()) + " is a " + to_string(t) + " tensor; " + to_string(t) +
                " tensors are supported on the CPU only, not on " + to_string(device) + " (build for --device cpu)");
  }
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    for (int k = 0; k < l->num_outputs(); ++k) {
      auto it = states.find(l->output(k));
      if (it == states.end() || !cpu_only_type(it->second.type)) continue;
      const char* t = to_string(it->second.type);
      throw Error("layer " + quote(l->name()) + " (" + l->type() + "): output " + quote(l->output(k)->name()) +
                  " is a " + t + " tensor; " + t + " tensors are supported on the CPU only, not on " +
                  to_string(device) + " (build for --device cpu)");
    }
  }
}

// BuilderConfig::compiled_plans_every_batch: per profile, the input dims at every batch size
// strictly between its min and max other than its opt, where the profile's inputs vary in their
// first dimension only (all over the same range) and that range holds at most kMaxPlanBatches
// sizes; no points for other profiles.
constexpr int64_t kMaxPlanBatches = 64;

std::vector<std::vector<std::map<std::string, Dims>>> batch_points(const std::vector<OptimizationProfile>& profiles) {
  std::vector<std::vector<std::map<std::string, Dims>>> out;
  for (const OptimizationProfile& p : profiles) {
    std::vector<std::map<std::string, Dims>> points;
    int64_t lo = -1, hi = -1, opt = -1;
    bool batch_only = true;
    for (const auto& [name, s] : p.all()) {
      if (s.min == s.max) continue;
      bool rest_equal = s.min.rank() > 0 && s.min.rank() == s.max.rank();
      for (int d = 1; rest_equal && d < s.min.rank(); ++d) rest_equal = s.min[d] == s.max[d] && s.opt[d] == s.min[d];
      if (!rest_equal || (lo >= 0 && (s.min[0] != lo || s.max[0] != hi || s.opt[0] != opt))) batch_only = false;
      lo = s.min[0];
      hi = s.max[0];
      opt = s.opt[0];
    }
    if (batch_only && lo >= 0 && hi - lo + 1 <= kMaxPlanBatches) {
      for (int64_t b = lo + 1; b < hi; ++b) {
        if (b == opt) continue;
        std::map<std::string, Dims> point;
        for (const auto& [name, s] : p.all()) {
          Dims d = s.opt;
          if (s.min != s.max) d[0] = b;
          point[name] = d;
        }
        points.push_back(std::move(point));
      }
    } else if (lo >= 0) {
      log(Severity::kInfo, "compiled plans: a profile varies in more than the batch dimension or over more than " +
                               std::to_string(kMaxPlanBatches) +
                               " batch sizes; its plans are stored at its opt, min and max shapes only");
    }
    out.push_back(std::move(points));
  }
  return out;
}

// engine_serialize, with the compiled plans of the kernels `data` chooses first
// (BuilderConfig::embed_compiled_plans; only kernels that export them are asked: the cuDNN
// graph-API convolutions on CUDA); counted in the report.
std::vector<uint8_t> serialize_engine(EngineData& data, const std::vector<Layer*>& steps, const BuilderConfig& config,
                                      const std::vector<TensorStates>& states, BuildReport& report) {
  data.prepared_states.clear();
  if (config.embed_compiled_plans) {
    std::vector<std::vector<TensorStates>> extra;
    if (config.compiled_plans_every_batch) {
      for (const auto& points : batch_points(data.profiles)) {
        extra.emplace_back();
        for (const auto& point : points) extra.back().push_back(infer_shapes(*data.network, point));
      }
    }
    data.prepared_states =
        collect_prepared_states(steps, config.device, data.tactics, data.launch_tactics, states, extra);
  }
  report.compiled_plans = static_cast<int>(data.prepared_states.size());
  report.compiled_plan_bytes = 0;
  for (const PreparedState& s : data.prepared_states) report.compiled_plan_bytes += s.bytes->size();
  if (report.compiled_plans > 0) {
    data.build_info["compiled_plans"] = std::to_string(report.compiled_plans) + " (" +
                                        std::to_string(report.compiled_plan_bytes) +
                                        " bytes; loaded instead of built on a GPU of the same model, driver and cuDNN)";
  } else {
    data.build_info.erase("compiled_plans");
  }
  return engine_serialize(data);
}

// Level 5 (BuildReport::level5_*): chooses the kernels as level 3 would for the same network
// and, where that changes any layer, times the whole engine both ways and keeps the faster.
// `data` holds level 5's choices; returns the engine to write.
std::vector<uint8_t> check_against_level3(EngineData& data, const std::vector<Layer*>& steps,
                                          const BuilderConfig& config, const std::vector<TensorStates>& states,
                                          BuildReport& report) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const auto format_ms = [](double ms) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4f ms", ms);
    return std::string(text);
  };
  BuilderConfig c3 = config;
  c3.optimization_level = 3;
  c3.timing_cache_path.clear();  // the cache keeps level 5's choices only
  c3.verbose = false;
  BuildReport r3;
  std::map<std::string, std::string> launch3;
  std::map<std::string, std::string> tactics3;
  log(Severity::kInfo, "level 5: choosing the kernels as level 3 would, to time the whole engine both ways");
  try {
    tactics3 = select_tactics(*data.network, steps, c3, states, &r3, &launch3, "level 5 check, level 3's choice: ");
  } catch (const std::exception& e) {
    log(Severity::kWarning, std::string("level 5: choosing level 3's kernels for the whole-engine check failed (") +
                                e.what() + "); the engine keeps level 5's");
    report.level5_check_seconds = seconds();
    return serialize_engine(data, steps, config, states, report);
  }
  // A layer's kernel for plain launches (no CUDA graph): its launch tactic where it has one.
  const auto launched = [](const std::map<std::string, std::string>& tactics,
                           const std::map<std::string, std::string>& launch, const std::string& layer) {
    const auto it = launch.find(layer);
    return it == launch.end() ? tactics.at(layer) : it->second;
  };
  int differ = 0;
  for (const auto& [layer, tactic] : data.tactics) {
    if (tactics3.at(layer) != tactic ||
        launched(tactics3, launch3, layer) != launched(data.tactics, data.launch_tactics, layer)) {
      ++differ;
    }
  }
  report.level5_layers_differing = differ;
  if (differ == 0) {
    report.level5_check_seconds = seconds();
    log(Severity::kInfo, "level 5: level 3 would choose the same kernels for every layer");
    data.build_info["level5_check"] = "level 3 would choose the same kernels";
    return serialize_engine(data, steps, config, states, report);
  }
  // Swaps level 3's choices (and their workspace) with those in `data`; twice is a no-op.
  std::string workspace3 = std::to_string(r3.workspace_bytes);
  const auto swap_level3 = [&] {
    std::swap(data.tactics, tactics3);
    std::swap(data.launch_tactics, launch3);
    std::swap(data.build_info["workspace_bytes"], workspace3);
  };
  std::vector<uint8_t> bytes5 = serialize_engine(data, steps, config, states, report);
  swap_level3();
  const std::vector<uint8_t> bytes3 = serialize_engine(data, steps, config, states, report);
  swap_level3();
  EngineComparison cmp;
  try {
    cmp = time_engines_alternating(bytes5, bytes3, config.device);
  } catch (const std::exception& e) {
    report.level5_layers_differing = -1;
    report.level5_check_seconds = seconds();
    log(Severity::kWarning, std::string("level 5: the whole-engine check could not run (") + e.what() +
                                "); the engine keeps level 5's kernels");
    return bytes5;
  }
  report.level5_engine_ms = cmp.a_ms;
  report.level3_engine_ms = cmp.b_ms;
  report.level3_kernels_kept = cmp.b_ms < cmp.a_ms;
  if (report.level3_kernels_kept) {
    swap_level3();
    report.workspace_bytes = r3.workspace_bytes;
  }
  const std::string text = std::to_string(differ) + " layer(s) with other kernels than level 3's; whole engine " +
                           format_ms(cmp.a_ms) + " with level 5's, " + format_ms(cmp.b_ms) +
                           " with level 3's (median of " + std::to_string(cmp.rounds) + " alternating rounds of " +
                           std::to_string(cmp.runs) +
                           "): " + (report.level3_kernels_kept ? "level 3's kept" : "level 5's kept");
  log(Severity::kInfo, "level 5: " + text);
  data.build_info["level5_check"] = text;
  report.level5_check_seconds = seconds();
  return serialize_engine(data, steps, config, states, report);
}

}  // namespace

std::vector<uint8_t> Builder::build_serialized(const Network& network, const BuilderConfig& config,
                                               BuildReport* report_out) try {
  const auto t0 = std::chrono::steady_clock::now();
  // Checked here so that no engine is written that Runtime::deserialize would reject.
  if (config.num_threads < 0 || config.num_threads > kMaxThreads) {
    throw Error("BuilderConfig::num_threads is " + std::to_string(config.num_threads) + ", expected 0.." +
                std::to_string(kMaxThreads) + " (0: all hardware threads)");
  }
  (void)timing_policy(config.optimization_level);  // throws naming the range 0..5
  if (config.tune_for_streams < 1 || config.tune_for_streams > kMaxTuneStreams) {
    throw Error("BuilderConfig::tune_for_streams is " + std::to_string(config.tune_for_streams) + ", expected 1.." +
                std::to_string(kMaxTuneStreams) +
                " (kiln build --tune-for-streams; 1: the lowest latency of one stream)");
  }
  for (const std::string& name : config.disabled_passes) {
    const auto& known = builder_pass_names();
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error("BuilderConfig::disabled_passes: no pass is named " + quote(name) + " (the passes: " + list + ")");
  }
  BuildReport report;
  auto net = network.clone();
  net->validate();
  report.layers_before = net->num_layers();
  const auto profiles = resolve_profiles(*net, config);
  const auto points = shape_points(profiles);
  // Before the device check, so that the reason is the same with or without the device here.
  if (config.device != DeviceType::kCPU) reject_cpu_only_types(*net, infer_shapes(*net, points.front()), config.device);
  (void)get_backend(config.device);  // throws with the reason when the device is absent
  // Validate the network over every profile point before optimizing.
  for (const auto& pt : points) (void)infer_shapes(*net, pt);

  run_passes(*net, config, points, report);
  net->remove_unused_tensors();
  net->sort_topologically();
  net->validate();

  std::vector<TensorStates> all_states;
  for (const auto& pt : points) all_states.push_back(infer_shapes(*net, pt));
  annotate_tensors(*net, all_states);

  // Tuned for several streams at once: the library kernels of convolutions and matrix products
  // aim at a share of the SMs (ConvParams / MatMulParams / GemmParams::concurrent_streams), in
  // the timing below and in the engine's contexts.
  if (config.device == DeviceType::kCUDA && config.tune_for_streams > 1) {
    for (int i = 0; i < net->num_layers(); ++i) {
      Layer* l = net->layer(i);
      if (l->type() == kLayerConvolution || l->type() == kLayerMatrixMultiply || l->type() == kLayerGemm) {
        l->attrs().set("concurrent_streams", int64_t{config.tune_for_streams});
      }
    }
  }
  EngineData data;
  data.device = config.device;
  data.num_threads = config.num_threads;
  const auto steps = execution_steps(*net);
  data.tactics = select_tactics(*net, steps, config, all_states, &report, &data.launch_tactics);
  data.plugins = collect_plugin_records(*net);
  if (config.embed_plugin_libraries) data.plugin_libraries = read_plugin_libraries(data.plugins);

  for (size_t p = 0; p < profiles.size(); ++p) {
    // The max point of each profile (points are opt, min, max per profile).
    const auto plan = plan_activations(*net, steps, all_states[p * 3 + 2]);
    data.activation_peak_bytes.push_back(plan.peak);
    if (plan.peak > report.activation_peak_bytes) {
      report.activation_peak_bytes = plan.peak;
      report.activation_naive_bytes = plan.naive;
    }
  }
  if (config.memory_limit && report.activation_peak_bytes > config.memory_limit) {
    throw Error("the engine needs " + std::to_string(report.activation_peak_bytes) +
                " bytes of activation memory at the profile's max shapes, over the memory limit of " +
                std::to_string(config.memory_limit) + " bytes (raise the limit or lower the max shapes)");
  }
  for (int i = 0; i < net->num_layers(); ++i) {
    const Layer* l = net->layer(i);
    if (l->type() == kLayerConstant) report.weights_bytes += l->attrs().get_tensor("value").nbytes();
  }
  report.layers_after = static_cast<int>(steps.size());
  data.profiles = profiles;
  data.build_info["kiln_version"] = version();
  data.build_info["layers_before_optimization"] = std::to_string(report.layers_before);
  data.build_info["optimizations"] = config.disable_optimizations ? "disabled" : "enabled";
  data.build_info["optimization_level"] = std::to_string(config.optimization_level) +
                                          (config.time_tactics ? "" : " (timing off: highest-priority kernels)");
  // The largest kernel scratch of the chosen kernels at the profiles' points (what a context
  // reserves besides activations), and the limit the kernels were chosen under.
  data.build_info["workspace_bytes"] = std::to_string(report.workspace_bytes);
  if (config.workspace_limit) data.build_info["workspace_limit_bytes"] = std::to_string(config.workspace_limit);
  if (config.tune_for_streams > 1) data.build_info["tuned_for_streams"] = std::to_string(config.tune_for_streams);
  data.network = std::move(net);
  const bool level5_check = config.optimization_level == 5 && builder_times_kernels(config) &&
                            (config.device == DeviceType::kCUDA || config.device == DeviceType::kCPU);
  auto bytes = level5_check ? check_against_level3(data, steps, config, all_states, report)
                            : serialize_engine(data, steps, config, all_states, report);
  report.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report_out) *report_out = report;
  return bytes;
} catch (const std::bad_alloc&) {
  throw_out_of_host_memory("building the engine");
}

}  // namespace kiln
