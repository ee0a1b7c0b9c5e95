// Tactic selection (see tactic_selection.h). On the CPU: the highest-priority kernel that
// supports the layer at every profile point. On CUDA: every such kernel is run on the device at
// the opt shapes (inputs holding their real values where known, zeros elsewhere so that index
// inputs stay in range) and the fastest is kept; a kernel that throws while preparing or running
// is skipped with its reason logged. Timings are keyed by the device, layer type, attributes
// and input/output types, dims and formats, and kept in the timing cache file between builds.
// Also the timing of alternative ways to run a layer for the passes (choose_fastest_variant).
#include "src/builder/tactic_selection.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/plugin.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/core/file_io.h"
#include "src/plan/execution_plan.h"
#include "src/plan/kernel_config.h"
#include "src/plugins/plugin_calls.h"
#include "src/plugins/plugin_layer.h"
#include "src/core/text.h"

namespace kiln {

namespace {

// KILN_DISABLE_TACTICS=prefix[,prefix...]: leave out kernels whose tactic name starts with one of
// the prefixes (e.g. "cudnn_graph" to compare against the legacy cuDNN tactics when hunting an
// accuracy problem; like trtexec --tacticSources). A reference/only tactic is never left out.
bool tactic_disabled(const std::string& tactic) {
  static const std::vector<std::string> prefixes = [] {
    std::vector<std::string> r;
    if (const char* v = std::getenv("KILN_DISABLE_TACTICS")) {
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) r.push_back(item);
      }
    }
    return r;
  }();
  if (tactic == "reference") return false;
  for (const auto& p : prefixes) {
    if (tactic.rfind(p, 0) == 0) return true;
  }
  return false;
}


}  // namespace

namespace {

// ---- the timing cache ----------------------------------------------------------------------

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ULL) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

std::string attr_text(const AttrValue& v) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::string>) {
          os << x;
        } else if constexpr (std::is_same_v<T, double>) {
          os << std::setprecision(17) << x;
        } else if constexpr (std::is_same_v<T, HostTensor>) {
          os << to_string(x.type()) << x.dims().to_string() << "#" << std::hex << fnv1a(x.data(), x.nbytes());
        } else {
          os << "[";
          for (const auto& e : x) os << std::setprecision(17) << e << ",";
          os << "]";
        }
      },
      v);
  return os.str();
}

std::string timing_key(const std::string& device, const Layer& layer, const std::vector<TensorDesc>& in,
                       const TensorStates& states) {
  std::ostringstream os;
  os << device << "|" << layer.type() << "|";
  for (const auto& [name, v] : layer.attrs().all()) os << name << "=" << attr_text(v) << ";";
  os << "|";
  for (const auto& d : in) {
    if (!d.present) {
      os << "-,";
      continue;
    }
    os << to_string(d.type) << d.dims.to_string() << to_string(d.format);
    // Constant inputs' values matter to some kernels (weights layout, shape inputs).
    if (d.value) os << "#" << std::hex << fnv1a(d.value->data(), d.value->nbytes()) << std::dec;
    os << ",";
  }
  os << "|";
  for (int i = 0; i < layer.num_outputs(); ++i) {
    const TensorState& s = states.at(layer.output(i));
    os << to_string(s.type) << s.dims.to_string() << to_string(layer.output(i)->format()) << ",";
  }
  std::string key = os.str();
  for (char& c : key) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  return key;
}

class TimingCache {
 public:
  explicit TimingCache(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(path_, ec))) return;  // a new cache
    std::istringstream f(read_whole_file_text(path_, "timing cache", kMaxTimingCacheBytes));
    std::string line;
    int n = 0;
    while (std::getline(f, line)) {
      ++n;
      if (n == 1) {
        if (line != kHeader) {
          log(Severity::kWarning, "timing cache " + quote(path_) + " is not a kiln timing cache (first line '" + line +
                                      "'); it will be rewritten");
          return;
        }
        continue;
      }
      const auto tab = line.rfind('\t');
      if (tab == std::string::npos) continue;
      entries_[line.substr(0, tab)] = line.substr(tab + 1);
    }
  }
  const std::string* find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }
  void put(const std::string& key, const std::string& tactic) {
    entries_[key] = tactic;
    dirty_ = true;
  }
  void save() const {
    if (path_.empty() || !dirty_) return;
    std::ostringstream f;
    f << kHeader << "\n";
    for (const auto& [k, v] : entries_) f << k << "\t" << v << "\n";
    const std::string text = f.str();
    write_file_atomically(path_, text.data(), text.size(), "timing cache");
  }

 private:
  static constexpr const char* kHeader = "kiln timing cache v1";
  static constexpr uint64_t kMaxTimingCacheBytes = 256u << 20;
  std::string path_;
  std::map<std::string, std::string> entries_;
  bool dirty_ = false;
};

// ---- timing one kernel ---------------------------------------------------------------------

// Device times closer than this (relative) count as equal when choosing a layer's kernel.
constexpr double kDeviceTimeTie = 0.03;

// What one kernel costs per run: on the device, and on the host to launch it.
struct KernelTime {
  double device_ms = 0;
  double host_ms = 0;
  // What it costs launched layer by layer (no CUDA graph): the host launches while the device
  // runs the previous layers, so the slower of the two sets the pace.
  double plain_ms() const { return std::max(device_ms, host_ms); }
};

// The stream kernels are timed on: made on first use, destroyed with this object (also when
// timing throws).
class TimingStream {
 public:
  explicit TimingStream(Backend* backend) : backend_(backend) {}
  TimingStream(const TimingStream&) = delete;
  TimingStream& operator=(const TimingStream&) = delete;
  ~TimingStream() {
    if (stream_) backend_->destroy_stream(stream_);
  }
  void* get() {
    if (!stream_) stream_ = backend_->create_stream();
    return stream_;
  }

 private:
  Backend* backend_;
  void* stream_ = nullptr;
};

// Runs `entry` for `layer` at `states` on the device; returns the times per run, or throws.
KernelTime time_kernel(const KernelEntry& entry, const Layer& layer, const TensorStates& states, Backend& backend,
                   void* stream, const std::vector<TensorRange>& in_ranges, const std::vector<TensorRange>& out_ranges) {
  std::vector<DeviceBuffer> buffers;
  KernelContext kc;
  kc.layer = &layer;
  kc.stream = stream;
  const auto in = input_descs(layer, states);
  for (int i = 0; i < layer.num_inputs(); ++i) {
    TensorView v;
    if (in[static_cast<size_t>(i)].present) {
      const TensorDesc& d = in[static_cast<size_t>(i)];
      v.type = d.type;
      v.dims = d.dims;
      v.format = d.format;
      const size_t bytes = static_cast<size_t>(tensor_byte_size(d.type, d.dims));
      buffers.emplace_back(backend, bytes);
      v.data = bytes ? buffers.back().data() : nullptr;
      if (d.value && d.value->nbytes() == bytes) {
        backend.copy_host_to_device(v.data, d.value->data(), bytes, nullptr);
      } else {
        backend.memset_device(v.data, 0, bytes, nullptr);
      }
    }
    kc.inputs.push_back(v);
  }
  std::vector<TensorDesc> out;
  for (int i = 0; i < layer.num_outputs(); ++i) {
    const TensorState& s = states.at(layer.output(i));
    out.push_back(TensorDesc{s.type, s.dims, layer.output(i)->format(), true, nullptr});
    const size_t bytes = static_cast<size_t>(tensor_byte_size(s.type, s.dims));
    buffers.emplace_back(backend, bytes);
    kc.outputs.push_back(TensorView{s.type, s.dims, layer.output(i)->format(), bytes ? buffers.back().data() : nullptr});
  }
  auto kernel = entry.create(layer);
  if (!in_ranges.empty() || !out_ranges.empty()) kernel->configure_profile(layer, in_ranges, out_ranges);
  kernel->prepare(layer, in, out, 1);
  const size_t ws = kernel->workspace_size();
  DeviceBuffer workspace(backend, ws);
  kc.workspace = workspace.data();
  kc.workspace_size = ws;
  kernel->execute(kc);  // warm-up (lazy library initialization, caches)
  backend.synchronize(stream);
  // Runs enough for about 1 ms of device work (at least 3, at most 50) per measurement, and the
  // median of 3 measurements: one preempted or throttled measurement must not decide the choice
  // (single measurements made choices differ by 2x between builds of the same network).
  const auto enqueue = [&] { kernel->execute(kc); };
  const double once = backend.time_runs(stream, 1, enqueue);
  const int runs = std::max(3, std::min(50, static_cast<int>(1.0 / std::max(once, 1e-3))));
  double t[3], h[3];
  for (int i = 0; i < 3; ++i) t[i] = backend.time_runs(stream, runs, enqueue, &h[i]);
  std::sort(t, t + 3);
  std::sort(h, h + 3);
  return KernelTime{t[1], h[1]};
}

std::string describe_types(const Layer& layer, const TensorStates& states) {
  std::string types;
  for (const auto& d : input_descs(layer, states)) {
    types += std::string(types.empty() ? "" : ", ") +
             (d.present ? std::string(to_string(d.type)) + " " + d.dims.to_string() +
                              (d.format == TensorFormat::kLinear ? "" : " " + std::string(to_string(d.format)))
                        : "-");
  }
  return types;
}

// The output types and dims, so that a type only the output has (a Cast's target) shows too.
std::string describe_output_types(const Layer& layer, const TensorStates& states) {
  std::string types;
  for (int k = 0; k < layer.num_outputs(); ++k) {
    const auto it = layer.output(k) ? states.find(layer.output(k)) : states.end();
    types += std::string(types.empty() ? "" : ", ") +
             (it == states.end() ? "?" : std::string(to_string(it->second.type)) + " " + it->second.dims.to_string());
  }
  return types;
}

// Plugin::configure at build time, once per profile with its ranges (the chosen kernel of every
// Plugin layer; other kernels have nothing to learn from a profile at build time).
void configure_plugins_per_profile(const std::vector<Layer*>& steps, const BuilderConfig& config,
                                   const std::vector<TensorStates>& states, const std::map<std::string, std::string>& tactics) {
  for (const Layer* layer : steps) {
    if (layer->type() != kLayerPlugin || is_host_known(*layer, states.front())) continue;
    const KernelEntry* entry = KernelRegistry::instance().find(config.device, layer->type(), tactics.at(layer->name()));
    if (!entry) continue;
    const auto kernel = entry->create(*layer);
    std::vector<TensorRange> in, out;
    for (size_t p = 0; p + 2 < states.size(); p += 3) {
      layer_ranges(*layer, states[p], states[p + 1], states[p + 2], in, out);
      try {
        kernel->configure_profile(*layer, in, out);
      } catch (const std::exception& e) {
        throw Error("layer " + quote(layer->name()) + " (" + layer->type() + "): configure() for optimization profile " +
                    std::to_string(p / 3) + " failed: " + e.what());
      }
    }
  }
}

}  // namespace

size_t choose_fastest_variant(const std::vector<TimedVariant>& variants, const BuilderConfig& config,
                              const std::string& purpose, bool* from_cache) {
  if (variants.empty()) throw Error("internal: choose_fastest_variant without variants");
  if (from_cache) *from_cache = false;
  Backend& backend = get_backend(config.device);
  TimingCache cache(config.timing_cache_path);
  const TimedVariant& first = variants.front();
  const std::string key = "variant:" + purpose + "|" +
                          timing_key(backend.describe(), *first.layer, input_descs(*first.layer, first.states), first.states);
  if (const std::string* hit = cache.find(key)) {
    for (size_t v = 0; v < variants.size(); ++v) {
      if (variants[v].name != *hit) continue;
      if (from_cache) *from_cache = true;
      return v;
    }
  }
  TimingStream timing_stream(&backend);
  void* stream = timing_stream.get();
  // The fastest kernel of one layer, or infinity when none runs.
  auto best_time = [&](const Layer& layer, const TensorStates& states, std::string& failures) {
    double best = std::numeric_limits<double>::infinity();
    const auto in = input_descs(layer, states);
    for (const KernelEntry* e : KernelRegistry::instance().find(config.device, layer.type())) {
      if (e->supports && !e->supports(layer, in)) continue;
      try {
        best = std::min(best, time_kernel(*e, layer, states, backend, stream, {}, {}).device_ms);
      } catch (const std::exception& ex) {
        failures += "\n  " + layer.name() + " (" + e->tactic + "): " + ex.what();
        try {
          backend.synchronize(stream);
        } catch (const std::exception&) {
        }
      }
    }
    return best;
  };
  size_t chosen = variants.size();
  double best = std::numeric_limits<double>::infinity();
  std::string failures;
  for (size_t v = 0; v < variants.size(); ++v) {
    double total = best_time(*variants[v].layer, variants[v].states, failures);
    for (const auto& [layer, states] : variants[v].extra) total += best_time(*layer, states, failures);
    if (config.verbose) {
      log(Severity::kVerbose, "  " + first.layer->name() + " as " + variants[v].name + ": " + std::to_string(total) + " ms");
    }
    if (total < best) {
      best = total;
      chosen = v;
    }
  }
  if (chosen == variants.size()) {
    throw Error("layer " + quote(first.layer->name()) + " (" + first.layer->type() + "): no way to run it worked on the " +
                to_string(config.device) + " device:" + failures);
  }
  cache.put(key, variants[chosen].name);
  cache.save();
  return chosen;
}

// Plugin layers whose plugin offers several implementations (Plugin::tactics): each is run at
// the layer's first state (device time on CUDA, host time on the CPU) and the fastest is recorded
// on the layer (attribute plugin_tactic, stored in the engine) and in the timing cache.
void choose_plugin_tactics(const std::vector<Layer*>& steps, const BuilderConfig& config,
                           const std::vector<TensorStates>& states, BuildReport* report) {
  Backend& backend = get_backend(config.device);
  TimingCache cache(config.device == DeviceType::kCUDA ? config.timing_cache_path : std::string());
  TimingStream stream(&backend);  // made for the first layer timed, shared by the others
  for (Layer* layer : steps) {
    if (layer->type() != kLayerPlugin || is_host_known(*layer, states.front())) continue;
    std::vector<std::string> names;
    {
      const std::unique_ptr<GuardedPlugin> plugin = plugin_from_layer(*layer, config.device);
      std::vector<PluginTensorDesc> in, out;
      for (const TensorDesc& d : input_descs(*layer, states.front())) in.push_back(PluginTensorDesc{d.type, d.format, d.dims});
      for (const TensorDesc& d : output_descs(*layer, states.front())) out.push_back(PluginTensorDesc{d.type, d.format, d.dims});
      names = plugin->tactics(in, out);
    }
    if (names.size() < 2) {
      if (names.size() == 1) layer->attrs().set("plugin_tactic", names[0]);
      continue;
    }
    const KernelEntry* entry = KernelRegistry::instance().find(config.device, kLayerPlugin, "plugin");
    if (!entry) continue;
    const std::string key = "plugin_tactic|" + backend.describe() + "|" +
                            timing_key(backend.describe(), *layer, input_descs(*layer, states.front()), states.front());
    if (const std::string* hit = cache.find(key); hit && std::find(names.begin(), names.end(), *hit) != names.end()) {
      layer->attrs().set("plugin_tactic", *hit);
      if (report) ++report->timing_cache_hits;
      continue;
    }
    std::vector<TensorRange> in_ranges, out_ranges;
    layer_ranges(*layer, states[0], states.size() > 1 ? states[1] : states[0], states.size() > 2 ? states[2] : states[0],
                 in_ranges, out_ranges);
    double best = std::numeric_limits<double>::infinity();
    std::string chosen, failures;
    for (const std::string& name : names) {
      layer->attrs().set("plugin_tactic", name);
      try {
        const KernelTime t = time_kernel(*entry, *layer, states.front(), backend, stream.get(), in_ranges, out_ranges);
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": plugin tactic " + name + " " + std::to_string(t.device_ms) + " ms");
        }
        if (t.device_ms < best) {
          best = t.device_ms;
          chosen = name;
        }
      } catch (const std::exception& ex) {
        failures += "\n  " + name + ": " + ex.what();
        try {  // drain the failed run, so the next timing on this stream starts clean
          backend.synchronize(stream.get());
        } catch (const std::exception&) {
        }
      }
    }
    if (chosen.empty()) {
      throw Error("layer " + quote(layer->name()) + " (plugin): every implementation the plugin offers failed:" + failures);
    }
    layer->attrs().set("plugin_tactic", chosen);
    cache.put(key, chosen);
    if (report) ++report->layers_timed;
    log(Severity::kVerbose, "  " + layer->name() + ": plugin tactic " + chosen + " (fastest of " +
                                std::to_string(names.size()) + ")");
  }
  cache.save();
}

std::map<std::string, std::string> select_tactics(const Network& network, const std::vector<Layer*>& steps,
                                                  const BuilderConfig& config, const std::vector<TensorStates>& states,
                                                  BuildReport* report,
                                                  std::map<std::string, std::string>* launch_tactics) {
  std::map<std::string, std::string> tactics;
  if (config.time_tactics) choose_plugin_tactics(steps, config, states, report);
  const bool timing = config.device == DeviceType::kCUDA && config.time_tactics;
  Backend* backend = timing ? &get_backend(config.device) : nullptr;
  TimingStream timing_stream(backend);
  void* stream = backend ? timing_stream.get() : nullptr;
  const std::string device_name = backend ? backend->describe() : std::string();
  TimingCache cache(timing ? config.timing_cache_path : std::string());
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  size_t index = 0;
  for (const Layer* layer : steps) {
    ++index;
    const auto candidates = KernelRegistry::instance().find(config.device, layer->type());
    if (candidates.empty()) {
      throw Error("layer " + quote(layer->name()) + " (" + layer->type() + "): no " + to_string(config.device) +
                  " kernel implements this layer type");
    }
    std::vector<const KernelEntry*> ok;
    for (const KernelEntry* e : candidates) {
      if (tactic_disabled(e->tactic)) continue;
      bool all = true;
      for (const auto& st : states) {
        if (e->supports && !e->supports(*layer, input_descs(*layer, st))) {
          all = false;
          break;
        }
      }
      if (all) ok.push_back(e);
    }
    if (ok.empty()) {
      throw Error("layer " + quote(layer->name()) + " (" + layer->type() + "): none of the " + to_string(config.device) +
                  " kernels supports it with inputs (" + describe_types(*layer, states.front()) + ") and outputs (" +
                  describe_output_types(*layer, states.front()) + ")");
    }
    const bool host_known = is_host_known(*layer, states.front());
    if (!timing || ok.size() == 1 || host_known) {
      tactics[layer->name()] = ok.front()->tactic;
      continue;
    }
    const std::string key = timing_key(device_name, *layer, input_descs(*layer, states.front()), states.front());
    const std::string launch_key = key + "|launch";
    if (const std::string* hit = cache.find(key)) {
      bool known = false;
      const std::string* launch_hit = cache.find(launch_key);
      bool launch_known = false;
      for (const KernelEntry* e : ok) {
        known = known || e->tactic == *hit;
        launch_known = launch_known || (launch_hit && e->tactic == *launch_hit);
      }
      if (known) {
        tactics[layer->name()] = *hit;
        if (launch_tactics && launch_known && *launch_hit != *hit) (*launch_tactics)[layer->name()] = *launch_hit;
        if (report) ++report->timing_cache_hits;
        continue;
      }
    }
    // The first profile's ranges, for kernels that configure themselves by profile (plugins).
    std::vector<TensorRange> in_ranges, out_ranges;
    layer_ranges(*layer, states[0], states.size() > 1 ? states[1] : states[0], states.size() > 2 ? states[2] : states[0],
                 in_ranges, out_ranges);
    double best_plain = std::numeric_limits<double>::infinity();
    const KernelEntry* chosen = nullptr;
    const KernelEntry* chosen_plain = nullptr;
    std::vector<std::pair<const KernelEntry*, KernelTime>> timed;
    std::string failures;
    for (const KernelEntry* e : ok) {
      try {
        const KernelTime t = time_kernel(*e, *layer, states.front(), *backend, stream, in_ranges, out_ranges);
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": " + e->tactic + " " + std::to_string(t.device_ms) +
                                      " ms on the device, " + std::to_string(t.host_ms) + " ms to launch");
        }
        timed.emplace_back(e, t);
        if (t.plain_ms() < best_plain) {
          best_plain = t.plain_ms();
          chosen_plain = e;
        }
      } catch (const std::exception& ex) {
        failures += "\n  " + e->tactic + ": " + ex.what();
        if (config.verbose) log(Severity::kVerbose, "  " + layer->name() + ": " + e->tactic + " skipped: " + ex.what());
        // A failed kernel may leave the stream in an error state; make sure it is drained.
        try {
          backend->synchronize(stream);
        } catch (const std::exception&) {
        }
      }
    }
    // The fastest on the device; among kernels within kDeviceTimeTie of it (the same cuDNN engine
    // behind two APIs differs by noise), the cheapest to launch: graphs do not care, and the
    // warm-up run, a failed capture's plain run and first calls at new shapes do.
    double best = std::numeric_limits<double>::infinity();
    for (const auto& [e, t] : timed) best = std::min(best, t.device_ms);
    double cheapest_launch = std::numeric_limits<double>::infinity();
    for (const auto& [e, t] : timed) {
      if (t.device_ms <= best * (1.0 + kDeviceTimeTie) && t.host_ms < cheapest_launch) {
        cheapest_launch = t.host_ms;
        chosen = e;
      }
    }
    if (!chosen) {
      throw Error("layer " + quote(layer->name()) + " (" + layer->type() + "): every " + to_string(config.device) +
                  " kernel that accepts it failed on the device:" + failures);
    }
    tactics[layer->name()] = chosen->tactic;
    cache.put(key, chosen->tactic);
    cache.put(launch_key, chosen_plain->tactic);
    if (launch_tactics && chosen_plain != chosen) {
      (*launch_tactics)[layer->name()] = chosen_plain->tactic;
      if (config.verbose) {
        log(Severity::kVerbose, "  " + layer->name() + ": launched layer by layer (no CUDA graph) it runs " +
                                    chosen_plain->tactic + " (" + chosen->tactic + " costs more to launch than to run)");
      }
    }
    if (report) ++report->layers_timed;
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_progress).count() > 2.0) {
      log(Severity::kInfo, "timing kernels: layer " + std::to_string(index) + " of " + std::to_string(steps.size()) +
                               " (" + layer->name() + ")");
      last_progress = now;
    }
  }
  if (report) report->timing_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cache.save();
  configure_plugins_per_profile(steps, config, states, tactics);
  (void)network;
  return tactics;
}

}  // namespace kiln
