// Tactic selection (see tactic_selection.h). On the CPU: the highest-priority kernel that
// supports the layer at every profile point. On CUDA: every such kernel is run on the device at
// the opt shapes (inputs holding their real values where known, zeros elsewhere so that index
// inputs stay in range) and the fastest is kept; a kernel that throws while preparing or running
// is skipped with its reason logged. Timings are keyed by the device, layer type, attributes
// and input/output types, dims and formats, and kept in the timing cache file between builds.
#include "src/builder/tactic_selection.h"

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/backends/backend.h"
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
    std::ifstream f(path_);
    if (!f) return;  // a new cache
    std::string line;
    int n = 0;
    while (std::getline(f, line)) {
      ++n;
      if (n == 1) {
        if (line != kHeader) {
          log(Severity::kWarning, "timing cache '" + path_ + "' is not a kiln timing cache (first line '" + line +
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
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      if (!f) throw Error("cannot write the timing cache '" + path_ + "' (" + std::strerror(errno) + ")");
      f << kHeader << "\n";
      for (const auto& [k, v] : entries_) f << k << "\t" << v << "\n";
    }
    if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
      throw Error("cannot replace the timing cache '" + path_ + "' (" + std::strerror(errno) + ")");
    }
  }

 private:
  static constexpr const char* kHeader = "kiln timing cache v1";
  std::string path_;
  std::map<std::string, std::string> entries_;
  bool dirty_ = false;
};

// ---- timing one kernel ---------------------------------------------------------------------

// Runs `entry` for `layer` at `states` on the device; returns milliseconds per run, or throws.
double time_kernel(const KernelEntry& entry, const Layer& layer, const TensorStates& states, Backend& backend,
                   void* stream) {
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
      const size_t bytes = static_cast<size_t>(d.dims.volume()) * data_type_size(d.type);
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
    const size_t bytes = static_cast<size_t>(s.dims.volume()) * data_type_size(s.type);
    buffers.emplace_back(backend, bytes);
    kc.outputs.push_back(TensorView{s.type, s.dims, layer.output(i)->format(), bytes ? buffers.back().data() : nullptr});
  }
  auto kernel = entry.create(layer);
  kernel->prepare(layer, in, out, 1);
  const size_t ws = kernel->workspace_size();
  DeviceBuffer workspace(backend, ws);
  kc.workspace = workspace.data();
  kc.workspace_size = ws;
  kernel->execute(kc);  // warm-up (lazy library initialization, caches)
  backend.synchronize(stream);
  // Enough runs for about 5 ms of work, at least 3 and at most 50.
  auto t0 = std::chrono::steady_clock::now();
  kernel->execute(kc);
  backend.synchronize(stream);
  const double once = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int runs = std::max(3, std::min(50, static_cast<int>(5.0 / std::max(once, 1e-3))));
  t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < runs; ++r) kernel->execute(kc);
  backend.synchronize(stream);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / runs;
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

}  // namespace

std::map<std::string, std::string> select_tactics(const Network& network, const std::vector<Layer*>& steps,
                                                  const BuilderConfig& config, const std::vector<TensorStates>& states,
                                                  BuildReport* report) {
  std::map<std::string, std::string> tactics;
  const bool timing = config.device == DeviceType::kCUDA && config.time_tactics;
  Backend* backend = timing ? &get_backend(config.device) : nullptr;
  void* stream = nullptr;
  std::string device_name;
  if (backend) {
    stream = backend->create_stream();
    device_name = backend->describe();
  }
  struct StreamGuard {
    Backend* b;
    void* s;
    ~StreamGuard() {
      if (b && s) b->destroy_stream(s);
    }
  } guard{backend, stream};
  TimingCache cache(timing ? config.timing_cache_path : std::string());
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  size_t index = 0;
  for (const Layer* layer : steps) {
    ++index;
    const auto candidates = KernelRegistry::instance().find(config.device, layer->type());
    if (candidates.empty()) {
      throw Error("layer '" + layer->name() + "' (" + layer->type() + "): no " + to_string(config.device) +
                  " kernel implements this layer type");
    }
    std::vector<const KernelEntry*> ok;
    for (const KernelEntry* e : candidates) {
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
      throw Error("layer '" + layer->name() + "' (" + layer->type() + "): none of the " + to_string(config.device) +
                  " kernels supports it with inputs (" + describe_types(*layer, states.front()) + ")");
    }
    const bool host_known = is_host_known(*layer, states.front());
    if (!timing || ok.size() == 1 || host_known) {
      tactics[layer->name()] = ok.front()->tactic;
      continue;
    }
    const std::string key = timing_key(device_name, *layer, input_descs(*layer, states.front()), states.front());
    if (const std::string* hit = cache.find(key)) {
      bool known = false;
      for (const KernelEntry* e : ok) known = known || e->tactic == *hit;
      if (known) {
        tactics[layer->name()] = *hit;
        if (report) ++report->timing_cache_hits;
        continue;
      }
    }
    double best = std::numeric_limits<double>::infinity();
    const KernelEntry* chosen = nullptr;
    std::string failures;
    for (const KernelEntry* e : ok) {
      try {
        const double ms = time_kernel(*e, *layer, states.front(), *backend, stream);
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": " + e->tactic + " " + std::to_string(ms) + " ms");
        }
        if (ms < best) {
          best = ms;
          chosen = e;
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
    if (!chosen) {
      throw Error("layer '" + layer->name() + "' (" + layer->type() + "): every " + to_string(config.device) +
                  " kernel that accepts it failed on the device:" + failures);
    }
    tactics[layer->name()] = chosen->tactic;
    cache.put(key, chosen->tactic);
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
  (void)network;
  return tactics;
}

}  // namespace kiln
