// Tactic selection (see tactic_selection.h). On the CPU: the highest-priority kernel that
// supports the layer at every profile point, except for convolutions, deconvolutions and
// MatrixMultiply (cpu_layer_timed), whose kernels are timed as on CUDA, with the build's threads. On
// CUDA: every such kernel is run on the device at the opt shapes (inputs holding their real values where known, zeros
// elsewhere so that index inputs stay in range) and the fastest is kept; a kernel that throws while preparing or
// running is skipped with its reason logged. Timings are keyed by the device, layer type, attributes and input/output
// types, dims and formats, and kept in the timing cache file between builds. How many kernels are timed and how long
// follows BuilderConfig::optimization_level (timing_policy); a kernel clearly slower than the best so far stops after
// one measurement; a layer identical to one timed earlier in the build (weights aside) reuses its choice; kernels over
// BuilderConfig::workspace_limit are left out. Also the timing of alternative ways to run a layer for the passes
// (choose_fastest_variant).
#include "src/builder/tactic_selection.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/plugin.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/builder/timing_cache.h"
#include "src/core/file_io.h"
#include "src/plan/execution_plan.h"
#include "src/plan/kernel_config.h"
#include "src/plugins/plugin_calls.h"
#include "src/plugins/plugin_layer.h"
#include "src/core/text.h"

namespace kiln {

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

namespace {

// ---- the timing cache ----------------------------------------------------------------------

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ULL) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// Whether a constant's values go into a key: always for the timing cache file (exact); for the
// in-build reuse of identical configurations (not exact), not for large floating-point tensors
// (weights: their values do not change which kernel is fastest, and identical layers of a
// network differ only there). Small and integer constants (shape inputs, axes) stay in.
bool values_in_key(const HostTensor& t, bool exact) {
  return exact || !is_floating_point(t.type()) || t.dims().volume() <= 64;
}

std::string attr_text(const AttrValue& v, bool exact = true) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::string>) {
          os << x;
        } else if constexpr (std::is_same_v<T, double>) {
          os << std::setprecision(17) << x;
        } else if constexpr (std::is_same_v<T, HostTensor>) {
          os << to_string(x.type()) << x.dims().to_string();
          if (values_in_key(x, exact)) os << "#" << std::hex << fnv1a(x.data(), x.nbytes());
        } else {
          os << "[";
          for (const auto& e : x) os << std::setprecision(17) << e << ",";
          os << "]";
        }
      },
      v);
  return os.str();
}

// exact: the timing cache file's key (every constant's values); otherwise the key of identical
// configurations within one build (values_in_key).
std::string timing_key(const std::string& device, const Layer& layer, const std::vector<TensorDesc>& in,
                       const TensorStates& states, bool exact = true) {
  std::ostringstream os;
  os << device << "|" << layer.type() << "|";
  for (const auto& [name, v] : layer.attrs().all()) os << name << "=" << attr_text(v, exact) << ";";
  os << "|";
  for (const auto& d : in) {
    if (!d.present) {
      os << "-,";
      continue;
    }
    os << to_string(d.type) << d.dims.to_string() << to_string(d.format);
    // Constant inputs' values matter to some kernels (weights layout, shape inputs).
    if (d.value && values_in_key(*d.value, exact))
      os << "#" << std::hex << fnv1a(d.value->data(), d.value->nbytes()) << std::dec;
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

// Creates and prepares the kernel `entry` makes for `layer` at `states` (the first profile's
// ranges configured first when given): what a kernel costs on the host before it can run (cuDNN
// plan building, runtime compilation, weight uploads on the thread's own stream).
std::unique_ptr<Kernel> make_prepared_kernel(const KernelEntry& entry, const Layer& layer, const TensorStates& states,
                                             const std::vector<TensorRange>& in_ranges,
                                             const std::vector<TensorRange>& out_ranges, int threads) {
  auto kernel = entry.create(layer);
  if (!in_ranges.empty() || !out_ranges.empty()) kernel->configure_profile(layer, in_ranges, out_ranges);
  kernel->prepare(layer, input_descs(layer, states), output_descs(layer, states), threads);
  return kernel;
}

// The host's set-up of a layer's candidate kernels, done on a helper thread ahead of their
// measurement (CUDA): while the device measures candidate i, the helper prepares i + 1 and i + 2.
// ResNet-50 fp16 batch 128, level 3, on the H200 (session 28): the host's set-up was 7.5 of the
// 11.4 s of kernel timing (prepare() 6.0 s, the device idle meanwhile); with the helper the
// builder waited 0.8 s for it and the build took 7.8 s instead of 12.4, the same kernels' engine
// running as fast. Kernels are prepared on the helper
// and run on the builder's thread, as an execution context made by a server's loading thread
// runs on its serving threads; prepare-time device work goes to the helper's own non-blocking
// stream, so it never lands between a measurement's events. One helper for the whole selection
// (its library handles are made once). KILN_PREPARE_AHEAD=0 prepares on the builder's thread.
class PrepareAhead {
 public:
  PrepareAhead() : worker_([this] { run(); }) {}
  ~PrepareAhead() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }
  PrepareAhead(const PrepareAhead&) = delete;
  PrepareAhead& operator=(const PrepareAhead&) = delete;

  // On CUDA unless KILN_PREPARE_AHEAD=0; on the CPU only with KILN_PREPARE_AHEAD=1 (for tests:
  // set-up and measuring share the cores there).
  static bool enabled(const BuilderConfig& config) {
    const char* v = std::getenv("KILN_PREPARE_AHEAD");
    if (v && std::string(v) == "0") return false;
    return config.device == DeviceType::kCUDA || (v && std::string(v) == "1");
  }

  // Starts on a layer's candidates (what an earlier layer left unused is dropped). The arguments
  // must stay alive and unchanged until the next begin() or the destructor.
  void begin(const std::vector<const KernelEntry*>& entries, const Layer& layer, const TensorStates& states,
             const std::vector<TensorRange>& in_ranges, const std::vector<TensorRange>& out_ranges, int threads) {
    std::vector<Slot> dropped;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      busy_done_.wait(lock, [&] { return !busy_; });  // the helper is not inside the previous batch
      dropped.swap(slots_);
      slots_.resize(entries.size());
      batch_ = Batch{&entries, &layer, &states, &in_ranges, &out_ranges, threads};
      next_ = taken_ = 0;
    }
    changed_.notify_all();
  }

  // Done with the batch begin() started: waits until the helper no longer reads its arguments
  // and drops the kernels not taken.
  void end() {
    std::vector<Slot> dropped;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      busy_done_.wait(lock, [&] { return !busy_; });
      dropped.swap(slots_);
      batch_ = Batch{};
      next_ = taken_ = 0;
    }
  }

  // Candidate i's prepared kernel (waits for it); rethrows what its preparation threw.
  std::unique_ptr<Kernel> take(size_t i) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (i > taken_) {  // earlier candidates failed before they were taken: let the helper reach i
      taken_ = i;
      changed_.notify_all();
    }
    ready_.wait(lock, [&] { return slots_[i].done; });
    taken_ = std::max(taken_, i + 1);
    Slot slot = std::move(slots_[i]);
    lock.unlock();
    changed_.notify_all();  // room to prepare one more
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.kernel);
  }

  double helper_seconds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return helper_seconds_;
  }

 private:
  static constexpr size_t kAhead = 2;  // kernels prepared and not yet taken, at most
  struct Slot {
    std::unique_ptr<Kernel> kernel;
    std::exception_ptr error;
    bool done = false;
  };
  struct Batch {
    const std::vector<const KernelEntry*>* entries = nullptr;
    const Layer* layer = nullptr;
    const TensorStates* states = nullptr;
    const std::vector<TensorRange>* in_ranges = nullptr;
    const std::vector<TensorRange>* out_ranges = nullptr;
    int threads = 1;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock,
                    [&] { return stop_ || (batch_.entries && next_ < slots_.size() && next_ < taken_ + kAhead); });
      if (stop_) return;
      const size_t i = next_++;
      const Batch b = batch_;
      busy_ = true;
      lock.unlock();
      Slot slot;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        slot.kernel =
            make_prepared_kernel(*(*b.entries)[i], *b.layer, *b.states, *b.in_ranges, *b.out_ranges, b.threads);
      } catch (...) {
        slot.error = std::current_exception();
      }
      slot.done = true;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      busy_ = false;
      helper_seconds_ += seconds;
      slots_[i] = std::move(slot);  // still this batch: begin() and end() wait while busy_
      busy_done_.notify_all();
      ready_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_, ready_, busy_done_;
  std::vector<Slot> slots_;
  Batch batch_;
  size_t next_ = 0, taken_ = 0;
  bool busy_ = false, stop_ = false;
  double helper_seconds_ = 0;
  std::thread worker_;  // last: started after the members it uses
};

// A layer's batch of PrepareAhead (none when `ahead` is null): begin() on construction, end() on
// destruction, so the helper stops reading the arguments before they go.
class PrepareAheadBatch {
 public:
  PrepareAheadBatch(PrepareAhead* ahead, const std::vector<const KernelEntry*>& entries, const Layer& layer,
                    const TensorStates& states, const std::vector<TensorRange>& in_ranges,
                    const std::vector<TensorRange>& out_ranges, int threads)
      : ahead_(ahead) {
    if (ahead_) ahead_->begin(entries, layer, states, in_ranges, out_ranges, threads);
  }
  ~PrepareAheadBatch() {
    if (ahead_) ahead_->end();
  }
  PrepareAheadBatch(const PrepareAheadBatch&) = delete;
  PrepareAheadBatch& operator=(const PrepareAheadBatch&) = delete;

 private:
  PrepareAhead* ahead_;
};

// Adds the seconds from construction to destruction to *seconds (when not null): a clock field
// that also counts a step that throws or returns early.
struct AddElapsedOnExit {
  double* seconds;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~AddElapsedOnExit() {
    if (seconds) *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Runs `entry` for `layer` at `states` on the device; returns the times per run, or throws.
// The median of policy.measurements measurements of about policy.target_ms each; after a
// measurement, a kernel whose fastest measurement so far is above `stop_above_ms` is clearly
// slower than the best kernel so far and is not measured further (`stopped` set; its time is
// the fastest measurement taken).
KernelTime time_kernel(const KernelEntry& entry, const Layer& layer, const TensorStates& states, Backend& backend,
                       void* stream, const std::vector<TensorRange>& in_ranges,
                       const std::vector<TensorRange>& out_ranges, const TimingPolicy& policy,
                       double stop_above_ms = std::numeric_limits<double>::infinity(), bool* stopped = nullptr,
                       uint64_t* workspace_bytes = nullptr, PrepareAhead* ahead = nullptr, size_t ahead_index = 0) {
  if (stopped) *stopped = false;
  const auto seconds_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // A kernel prepared ahead is taken first, so that every candidate is taken in order (the helper
  // prepares at most two past the last one taken) whatever fails below.
  std::unique_ptr<Kernel> kernel;
  if (ahead) {
    const AddElapsedOnExit wait{policy.clock ? &policy.clock->prepare : nullptr};  // also when it threw
    kernel = ahead->take(ahead_index);
  }
  const auto setup_start = std::chrono::steady_clock::now();
  std::vector<DeviceBuffer> buffers;
  KernelContext kc;
  kc.layer = &layer;
  kc.stream = stream;
  kc.num_threads = std::max(1, policy.threads);
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
  for (int i = 0; i < layer.num_outputs(); ++i) {
    const TensorState& s = states.at(layer.output(i));
    const size_t bytes = static_cast<size_t>(tensor_byte_size(s.type, s.dims));
    buffers.emplace_back(backend, bytes);
    kc.outputs.push_back(
        TensorView{s.type, s.dims, layer.output(i)->format(), bytes ? buffers.back().data() : nullptr});
  }
  if (policy.clock) policy.clock->buffers += seconds_since(setup_start);
  if (!kernel) {
    const auto prepare_start = std::chrono::steady_clock::now();
    kernel = make_prepared_kernel(entry, layer, states, in_ranges, out_ranges, kc.num_threads);
    if (policy.clock) policy.clock->prepare += seconds_since(prepare_start);
  }
  const auto warmup_start = std::chrono::steady_clock::now();
  const size_t ws = kernel->workspace_size();
  if (workspace_bytes) *workspace_bytes = ws;
  DeviceBuffer workspace(backend, ws);
  kc.workspace = workspace.data();
  kc.workspace_size = ws;
  kernel->execute(kc);  // warm-up (lazy library initialization, caches)
  backend.synchronize(stream);
  // Tuned for N streams: N copies of the layer, each with its own outputs and workspace on its
  // own stream (the inputs are only read, so they are shared), run at once; the time is per run
  // per copy, the inverse of the throughput N contexts would get.
  std::vector<KernelContext> copies;
  std::vector<void*> streams;
  std::deque<TimingStream> extra_streams;  // destroyed after the copies' last (synchronized) runs
  if (policy.streams > 1) {
    copies.push_back(kc);
    streams.push_back(stream);
    for (int c = 1; c < policy.streams; ++c) {
      KernelContext copy = kc;
      copy.stream = extra_streams.emplace_back(&backend).get();
      for (TensorView& o : copy.outputs) {
        const size_t bytes = static_cast<size_t>(tensor_byte_size(o.type, o.dims));
        buffers.emplace_back(backend, bytes);
        o.data = bytes ? buffers.back().data() : nullptr;
      }
      buffers.emplace_back(backend, ws);
      copy.workspace = buffers.back().data();
      kernel->execute(copy);  // warm-up on this stream
      backend.synchronize(copy.stream);
      copies.push_back(copy);
      streams.push_back(copy.stream);
    }
  }
  // Runs enough for about policy.target_ms of device work (at least 3, at most 50) per
  // measurement, and the median of the measurements (3 from level 2 up): one preempted or
  // throttled measurement must not decide the choice (single measurements made choices differ
  // by 2x between builds of the same network).
  const auto enqueue = [&] { kernel->execute(kc); };
  const auto measure = [&](int runs, double* host) {
    if (copies.empty()) return backend.time_runs(stream, runs, enqueue, host);
    return backend.time_concurrent_runs(
        streams, runs, [&](size_t c) { kernel->execute(copies[c]); }, host);
  };
  if (policy.clock) policy.clock->warmup += seconds_since(warmup_start);
  // The measurement time, also when a measurement throws or stops early.
  const AddElapsedOnExit add_on_exit{policy.clock ? &policy.clock->measure : nullptr};
  double once_host = 0;
  const double once = measure(1, &once_host);
  // A kernel that one run shows to be far slower than the best so far (2x the early-stop bound)
  // is not measured further: the slow candidates of large layers took most of the measuring.
  if (once > 2 * stop_above_ms) {
    if (stopped) *stopped = true;
    return KernelTime{once, once_host};
  }
  // Kernels of policy.target_ms or longer run once per measurement (CUDA events time a
  // millisecond run to microseconds); shorter ones repeat up to about target_ms.
  const int runs = std::max(1, std::min(50, static_cast<int>(policy.target_ms / std::max(once, 1e-3))));
  std::vector<double> t, h;
  for (int i = 0; i < policy.measurements; ++i) {
    double host = 0;
    t.push_back(measure(runs, &host));
    h.push_back(host);
    if (i + 1 < policy.measurements && *std::min_element(t.begin(), t.end()) > stop_above_ms) {
      if (stopped) *stopped = true;
      return KernelTime{*std::min_element(t.begin(), t.end()), *std::min_element(h.begin(), h.end())};
    }
  }
  std::sort(t.begin(), t.end());
  std::sort(h.begin(), h.end());
  return KernelTime{t[t.size() / 2], h[h.size() / 2]};
}

// Makes `entry`'s kernel for `layer` once per profile of `states` (three points per profile: opt,
// min, max), configures it with the profile's ranges (plugins) and prepares it at each distinct
// point of the profile, then at `extra[profile]` (if given); calls visit(kernel) after each
// prepare. Throws what prepare() throws.
template <typename Visit>
void prepare_at_points(const KernelEntry& entry, const Layer& layer, const std::vector<TensorStates>& states,
                       const std::vector<std::vector<TensorStates>>& extra, Visit visit) {
  for (size_t p = 0; p < states.size(); p += 3) {
    const std::unique_ptr<Kernel> kernel = entry.create(layer);
    std::vector<TensorRange> in_ranges, out_ranges;
    const TensorStates& opt = states[p];
    const TensorStates& mn = p + 1 < states.size() ? states[p + 1] : opt;
    const TensorStates& mx = p + 2 < states.size() ? states[p + 2] : opt;
    layer_ranges(layer, opt, mn, mx, in_ranges, out_ranges);
    kernel->configure_profile(layer, in_ranges, out_ranges);
    std::vector<const TensorStates*> points{&opt, &mn, &mx};
    if (p / 3 < extra.size()) {
      for (const TensorStates& st : extra[p / 3]) points.push_back(&st);
    }
    std::vector<std::string> seen;  // the points' input dims, so that equal points prepare once
    for (const TensorStates* st : points) {
      const auto in = input_descs(layer, *st);
      std::string dims;
      for (const auto& d : in) dims += d.dims.to_string() + to_string(d.type) + to_string(d.format) + ";";
      if (std::find(seen.begin(), seen.end(), dims) != seen.end()) continue;
      seen.push_back(dims);
      kernel->prepare(layer, in, output_descs(layer, *st), 1);
      visit(*kernel);
    }
  }
}

// The largest workspace `entry` needs for `layer` at the given states (three per profile: opt,
// min, max), each profile's ranges configured first (plugins). Throws what prepare() throws.
uint64_t kernel_workspace(const KernelEntry& entry, const Layer& layer, const std::vector<TensorStates>& states) {
  uint64_t most = 0;
  prepare_at_points(entry, layer, states, {},
                    [&](const Kernel& kernel) { most = std::max<uint64_t>(most, kernel.workspace_size()); });
  return most;
}

// Progress of a long build on the terminal (the logger at kInfo), at most every 1.5 s: layers
// done, timed and reused, and the time left at the pace so far.
class TimingProgress {
 public:
  TimingProgress(std::string what, size_t total) : what_(std::move(what)), total_(total) {}
  void update(size_t done, const BuildReport& r) {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_).count() < 1.5 || done >= total_) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double left = done ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0.0;
    std::ostringstream os;
    os << std::fixed << std::setprecision(0) << what_ << ": layer " << done << " of " << total_ << " ("
       << r.layers_timed << " timed, " << r.layers_reused << " reused an identical layer's timing, "
       << r.timing_cache_hits << " from the timing cache), about " << std::max(1.0, left) << " s left";
    log(Severity::kInfo, os.str());
  }

 private:
  std::string what_;
  size_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

std::string workspace_error(const Layer& layer, const std::string& what, uint64_t limit, uint64_t smallest,
                            const std::string& smallest_name) {
  return "layer " + quote(layer.name()) + " (" + layer.type() + "): " + what +
         " needs more workspace than the limit of " + std::to_string(limit) +
         " bytes (BuilderConfig::workspace_limit, kiln build --workspace-limit); the smallest, " + smallest_name +
         ", needs " + std::to_string(smallest) + " bytes: raise the limit to at least that";
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
// Plugin layer; other kernels have nothing to learn from a profile at build time); the configured
// plugin's workspace at the profile's points goes into report.workspace_bytes.
void configure_plugins_per_profile(const std::vector<Layer*>& steps, const BuilderConfig& config,
                                   const std::vector<TensorStates>& states,
                                   const std::map<std::string, std::string>& tactics, BuildReport& report) {
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
        throw Error("layer " + quote(layer->name()) + " (" + layer->type() +
                    "): configure() for optimization profile " + std::to_string(p / 3) + " failed: " + e.what());
      }
      for (size_t point = p; point < p + 3 && point < states.size(); ++point) {
        try {
          kernel->prepare(*layer, input_descs(*layer, states[point]), output_descs(*layer, states[point]), 1);
          report.workspace_bytes = std::max<uint64_t>(report.workspace_bytes, kernel->workspace_size());
        } catch (const std::exception& e) {
          if (config.verbose) {
            log(Severity::kVerbose, "  " + layer->name() + ": workspace known at run time only (" + e.what() + ")");
          }
        }
      }
    }
  }
}

}  // namespace

std::string timing_device_name(const Backend& backend, const BuilderConfig& config) {
  // Choices for N streams at once are other choices: their own timing-cache and reuse keys; on the
  // CPU, those for another thread count.
  const std::string name = backend.describe();
  if (config.device == DeviceType::kCPU)
    return name + " x" + std::to_string(std::max(1, config.num_threads)) + " threads";
  return config.tune_for_streams > 1 && config.device == DeviceType::kCUDA
             ? name + " x" + std::to_string(config.tune_for_streams) + " streams"
             : name;
}

namespace {

// The CPU layer types whose kernels are timed (kiln's own convolutions and products against
// oneDNN's; which is faster depends on the processor: kiln's AVX2 kernels won on an AVX2 machine
// and lose some layers to oneDNN's AVX-512 ones on an AVX-512 machine). Other CPU layers take the
// highest priority, as do all layers at level 0 or without timing. Not Gemm: its "gemv" tactic
// (1-4 rows) reads weights that are cold inside a network, and timed alone, with the weights in
// cache from the previous run, oneDNN won (MobileNetV3's 1024 -> 1000 classifier, batch 1: 0.030
// against 0.040 ms) where inside the network it took 0.078 ms.
bool cpu_layer_timed(const std::string& type) {
  return type == kLayerConvolution || type == kLayerDeconvolution || type == kLayerMatrixMultiply;
}

// The early-stop bound for a kernel timed after `best` (infinity: no early stop).
double stop_above(const TimingPolicy& policy, double best) {
  return policy.stop_ratio > 0 ? best * policy.stop_ratio : std::numeric_limits<double>::infinity();
}

// The device time of the fastest of `entries` for `layer` at `states` (infinity when none runs);
// a kernel that throws is skipped, its reason appended to `failures` (may be null), the stream
// synchronized again. With `ahead`, the helper prepares the candidates.
double fastest_of(const std::vector<const KernelEntry*>& entries, const Layer& layer, const TensorStates& states,
                  Backend& backend, void* stream, const TimingPolicy& policy, std::string* failures,
                  PrepareAhead* ahead = nullptr) {
  double best = std::numeric_limits<double>::infinity();
  const std::vector<TensorRange> no_ranges;
  if (entries.size() < 2) ahead = nullptr;  // nothing to overlap
  const PrepareAheadBatch batch(ahead, entries, layer, states, no_ranges, no_ranges, std::max(1, policy.threads));
  for (size_t k = 0; k < entries.size(); ++k) {
    const KernelEntry* e = entries[k];
    try {
      // (Early stop, where the policy has it, only cuts short kernels slower than the best so far.)
      best = std::min(best, time_kernel(*e, layer, states, backend, stream, {}, {}, policy, stop_above(policy, best),
                                        nullptr, nullptr, ahead, k)
                                .device_ms);
    } catch (const std::exception& ex) {
      if (failures) *failures += "\n  " + layer.name() + " (" + e->tactic + "): " + ex.what();
      try {
        backend.synchronize(stream);
      } catch (const std::exception&) {}
    }
  }
  return best;
}

}  // namespace

TimingStream::~TimingStream() {
  if (stream_) backend_->destroy_stream(stream_);
}

void* TimingStream::get() {
  if (!stream_) stream_ = backend_->create_stream();
  return stream_;
}

TimingPolicy timing_policy(int level) {
  constexpr size_t kAll = std::numeric_limits<size_t>::max();
  switch (level) {
    case 0:
      return TimingPolicy{false, 1, 0, 0.0, 0.0};
    case 1:
      return TimingPolicy{true, 2, 1, 0.25, 0.0};
    case 2:
      return TimingPolicy{true, 4, 3, 0.5, 1.25};
    case 3:
      return TimingPolicy{true, kAll, 3, 1.0, 1.25};
    case 4:
      return TimingPolicy{true, kAll, 5, 1.0, 1.5};
    case 5:
      return TimingPolicy{true, kAll, 5, 2.0, 0.0};
    default:
      throw Error("BuilderConfig::optimization_level is " + std::to_string(level) +
                  ", expected 0..5 (kiln build --builder-optimization-level; 0: no timing, 3: the default, 5: the "
                  "slowest build)");
  }
}

bool builder_times_kernels(const BuilderConfig& config) {
  return config.time_tactics && timing_policy(config.optimization_level).time;
}

size_t choose_fastest_variant(const std::vector<TimedVariant>& variants, const BuilderConfig& config,
                              const std::string& purpose, bool* from_cache) {
  if (variants.empty()) throw Error("internal: choose_fastest_variant without variants");
  if (from_cache) *from_cache = false;
  Backend& backend = get_backend(config.device);
  TimingCache cache(config.timing_cache_path);
  const TimedVariant& first = variants.front();
  const std::string key = "variant:" + purpose + "|" +
                          timing_key(timing_device_name(backend, config), *first.layer,
                                     input_descs(*first.layer, first.states), first.states);
  if (const std::string* hit = cache.find(key)) {
    for (size_t v = 0; v < variants.size(); ++v) {
      if (variants[v].name != *hit) continue;
      if (from_cache) *from_cache = true;
      return v;
    }
  }
  TimingStream timing_stream(&backend);
  void* stream = timing_stream.get();
  TimingPolicy policy = timing_policy(config.optimization_level);
  policy.measurements = std::max(policy.measurements, 1);
  policy.streams = config.device == DeviceType::kCUDA ? config.tune_for_streams : 1;
  policy.threads = config.device == DeviceType::kCPU ? std::max(1, config.num_threads) : 1;
  // The fastest kernel of one layer, or infinity when none runs.
  auto best_time = [&](const Layer& layer, const TensorStates& states, std::string& failures) {
    const auto in = input_descs(layer, states);
    std::vector<const KernelEntry*> entries;
    for (const KernelEntry* e : KernelRegistry::instance().find(config.device, layer.type())) {
      if ((!e->supports || e->supports(layer, in)) && e->offered_at(config.optimization_level)) {
        entries.push_back(e);
      }
    }
    return fastest_of(entries, layer, states, backend, stream, policy, &failures);
  };
  size_t chosen = variants.size();
  double best = std::numeric_limits<double>::infinity();
  std::string failures;
  for (size_t v = 0; v < variants.size(); ++v) {
    double total = best_time(*variants[v].layer, variants[v].states, failures);
    for (const auto& [layer, states] : variants[v].extra) total += best_time(*layer, states, failures);
    if (config.verbose) {
      log(Severity::kVerbose,
          "  " + first.layer->name() + " as " + variants[v].name + ": " + std::to_string(total) + " ms");
    }
    if (total < best) {
      best = total;
      chosen = v;
    }
  }
  if (chosen == variants.size()) {
    throw Error("layer " + quote(first.layer->name()) + " (" + first.layer->type() +
                "): no way to run it worked on the " + to_string(config.device) + " device:" + failures);
  }
  cache.put(key, variants[chosen].name);
  cache.save();
  return chosen;
}

struct LayerTimer::Impl {
  const BuilderConfig& config;
  Backend& backend;
  TimingStream stream;
  TimingPolicy policy;
  // Identical configurations (the in-build timing key: weights' values aside) are timed once:
  // ResNet's repeated blocks ask the same questions in every region and both ways.
  std::map<std::string, double> memo;
  std::unique_ptr<PrepareAhead> ahead;  // as in select_tactics, made on first use
  explicit Impl(const BuilderConfig& c) : config(c), backend(get_backend(c.device)), stream(&backend) {
    // The level's candidates, measured as at level 3 (3 measurements of about 1 ms, early stop at
    // 1.25x the best so far): a region's decision needs each layer's best time, not the slower
    // kernels' exact ones, and level 5's longer measuring without early stop made ResNet-50's
    // region timing on the H200 take 33 s at batch 1 and 45 s at batch 128 (session 28).
    policy = timing_policy(c.optimization_level);
    if (c.optimization_level > 3) {
      const TimingPolicy three = timing_policy(3);
      policy.measurements = three.measurements;
      policy.target_ms = three.target_ms;
      policy.stop_ratio = three.stop_ratio;
    }
    policy.measurements = std::max(policy.measurements, 1);
    policy.streams = c.device == DeviceType::kCUDA ? c.tune_for_streams : 1;
    policy.threads = c.device == DeviceType::kCPU ? std::max(1, c.num_threads) : 1;
  }
};

LayerTimer::LayerTimer(const BuilderConfig& config) : impl_(std::make_unique<Impl>(config)) {}
LayerTimer::~LayerTimer() = default;

double LayerTimer::chosen_kernel_ms(const Layer& layer, const TensorStates& states, std::string* failures) {
  const BuilderConfig& config = impl_->config;
  const bool cpu = config.device == DeviceType::kCPU;
  const auto in = input_descs(layer, states);
  std::vector<const KernelEntry*> ok;
  for (const KernelEntry* e : KernelRegistry::instance().find(config.device, layer.type())) {
    if (tactic_disabled(e->tactic) || !e->offered_at(config.optimization_level)) continue;
    if (e->supports && !e->supports(layer, in)) continue;
    ok.push_back(e);
  }
  // As select_tactics: the CPU reference only where nothing else takes the layer, untimed CPU
  // layer types their first kernel, at most the level's number of candidates.
  if (cpu && ok.size() > 1 && ok.back()->priority == 0) ok.pop_back();
  const size_t most = cpu && !cpu_layer_timed(layer.type()) ? 1 : std::max<size_t>(1, impl_->policy.max_candidates);
  while (ok.size() > most) ok.pop_back();
  if (ok.empty() && failures) *failures += "\n  " + layer.name() + ": no kernel takes it in these formats";
  const std::string key = timing_key(to_string(config.device), layer, in, states, /*exact=*/false);
  if (const auto it = impl_->memo.find(key); it != impl_->memo.end()) return it->second;
  std::string why;
  if (!impl_->ahead && ok.size() > 1 && PrepareAhead::enabled(config)) impl_->ahead = std::make_unique<PrepareAhead>();
  const double ms =
      fastest_of(ok, layer, states, impl_->backend, impl_->stream.get(), impl_->policy, &why, impl_->ahead.get());
  if (failures) *failures += why;
  if (ms < std::numeric_limits<double>::infinity()) impl_->memo[key] = ms;  // failures are asked again (and reported)
  return ms;
}

namespace {

// What the builder learned earlier in the same build: the choices of configurations it timed
// (by the in-build key, timing_key(..., exact = false)) and the workspace of kernels it prepared.
struct ChoiceMemo {
  std::map<std::string, std::string> plugin_tactic;
  std::map<std::string, std::pair<std::string, std::string>> kernel;  // tactic, launch tactic
  std::map<std::string, uint64_t> workspace;
  std::map<std::string, std::string> workspace_failure;
};

// The input dims, types and formats at every state: with the in-build key, what identifies a
// layer's configuration over all profile points (the workspace depends on all of them).
std::string points_text(const Layer& layer, const std::vector<TensorStates>& states) {
  std::string text;
  for (const TensorStates& st : states) {
    for (const auto& d : input_descs(layer, st)) text += d.present ? d.dims.to_string() : std::string("-");
    text += ";";
  }
  return text;
}

// kernel_workspace, once per configuration and kernel in a build; throws what prepare throws
// (again, from the memo, for a repeated configuration).
std::string workspace_memo_key(const std::string& key, const std::string& tactic, const Layer& layer) {
  return key + "|" + tactic + "|" + layer.attrs().get_string("plugin_tactic", "");
}

// Whether every state gives the layer the same inputs (a static shape): then the workspace a
// kernel needs when timed at the first state is its workspace at every point.
bool one_point(const Layer& layer, const std::vector<TensorStates>& states) {
  std::string first;
  for (const auto& d : input_descs(layer, states.front())) first += d.present ? d.dims.to_string() : std::string("-");
  for (const TensorStates& st : states) {
    std::string text;
    for (const auto& d : input_descs(layer, st)) text += d.present ? d.dims.to_string() : std::string("-");
    if (text != first) return false;
  }
  return true;
}

uint64_t memo_workspace(ChoiceMemo& memo, const std::string& key, const KernelEntry& entry, const Layer& layer,
                        const std::vector<TensorStates>& states) {
  const std::string k = workspace_memo_key(key, entry.tactic, layer);
  if (const auto it = memo.workspace.find(k); it != memo.workspace.end()) return it->second;
  if (const auto it = memo.workspace_failure.find(k); it != memo.workspace_failure.end()) throw Error(it->second);
  try {
    const uint64_t ws = kernel_workspace(entry, layer, states);
    memo.workspace[k] = ws;
    return ws;
  } catch (const std::exception& e) {
    memo.workspace_failure[k] = e.what();
    throw;
  }
}

// Plugin layers whose plugin offers several implementations (Plugin::tactics): the ones within
// the workspace limit are run at the layer's first state (device time on CUDA, host time on the
// CPU; at most policy.max_candidates, in the order the plugin lists them) and the fastest is
// recorded on the layer (attribute plugin_tactic, stored in the engine) and in the timing cache.
// Without timing (level 0, time_tactics false) the first implementation within the limit.
void choose_plugin_tactics(const std::vector<Layer*>& steps, const BuilderConfig& config,
                           const std::vector<TensorStates>& states, BuildReport& report, ChoiceMemo& memo,
                           TimingPolicy::Clock& clock, const std::string& progress_prefix) {
  TimingProgress progress(progress_prefix + "timing plugin implementations", steps.size());
  TimingPolicy policy = timing_policy(config.optimization_level);
  policy.streams = config.device == DeviceType::kCUDA ? config.tune_for_streams : 1;
  policy.threads = config.device == DeviceType::kCPU ? std::max(1, config.num_threads) : 1;
  policy.clock = &clock;
  const bool timing = builder_times_kernels(config);
  Backend& backend = get_backend(config.device);
  const std::string device_name = timing_device_name(backend, config);
  TimingCache cache(timing && config.device == DeviceType::kCUDA ? config.timing_cache_path : std::string());
  TimingStream stream(&backend);  // made for the first layer timed, shared by the others
  const KernelEntry* entry = KernelRegistry::instance().find(config.device, kLayerPlugin, "plugin");
  size_t index = 0;
  for (Layer* layer : steps) {
    ++index;
    if (layer->type() != kLayerPlugin || is_host_known(*layer, states.front())) continue;
    std::vector<std::string> names;
    {
      const std::unique_ptr<GuardedPlugin> plugin = plugin_from_layer(*layer, config.device);
      std::vector<PluginTensorDesc> in, out;
      for (const TensorDesc& d : input_descs(*layer, states.front()))
        in.push_back(PluginTensorDesc{d.type, d.format, d.dims});
      for (const TensorDesc& d : output_descs(*layer, states.front()))
        out.push_back(PluginTensorDesc{d.type, d.format, d.dims});
      names = plugin->tactics(in, out);
    }
    if (names.empty()) continue;
    const auto in_descs = input_descs(*layer, states.front());
    const std::string key =
        "plugin_tactic|" + backend.describe() + "|" + timing_key(device_name, *layer, in_descs, states.front());
    const std::string reuse_key = timing_key(device_name, *layer, in_descs, states.front(), false);
    const std::string ws_key = reuse_key + "|" + points_text(*layer, states);
    if (config.workspace_limit && entry) {
      std::vector<std::string> fit;
      uint64_t smallest = std::numeric_limits<uint64_t>::max();
      std::string smallest_name, failures;
      for (const std::string& name : names) {
        layer->attrs().set("plugin_tactic", name);
        uint64_t ws = 0;
        try {
          ws = memo_workspace(memo, ws_key, *entry, *layer, states);
        } catch (const std::exception& e) {
          failures += "\n  " + name + ": " + e.what();
          continue;
        }
        if (ws <= config.workspace_limit) {
          fit.push_back(name);
          continue;
        }
        ++report.tactics_over_workspace;
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": plugin tactic " + name + " needs " + std::to_string(ws) +
                                      " bytes of workspace, over the limit");
        }
        if (ws < smallest) {
          smallest = ws;
          smallest_name = "implementation " + quote(name);
        }
      }
      if (fit.empty() && smallest_name.empty()) {
        throw Error("layer " + quote(layer->name()) +
                    " (plugin): every implementation the plugin offers failed:" + failures);
      }
      if (fit.empty()) {
        throw Error(workspace_error(*layer, "every implementation the plugin offers", config.workspace_limit, smallest,
                                    smallest_name));
      }
      names = fit;
    }
    if (names.size() < 2 || !timing || !entry) {
      layer->attrs().set("plugin_tactic", names[0]);
      continue;
    }
    // An identical layer earlier in this build first (its choice is in the cache too, and counts as
    // reused, not as a hit), then the timing cache file.
    if (const auto it = memo.plugin_tactic.find(reuse_key);
        it != memo.plugin_tactic.end() && std::find(names.begin(), names.end(), it->second) != names.end()) {
      layer->attrs().set("plugin_tactic", it->second);
      cache.put(key, it->second);
      ++report.layers_reused;
      if (config.verbose) {
        log(Severity::kVerbose, "  " + layer->name() + ": plugin tactic " + it->second +
                                    " (the choice of an identical layer in this build)");
      }
      continue;
    }
    if (const std::string* hit = cache.find(key); hit && std::find(names.begin(), names.end(), *hit) != names.end()) {
      layer->attrs().set("plugin_tactic", *hit);
      memo.plugin_tactic[reuse_key] = *hit;
      ++report.timing_cache_hits;
      continue;
    }
    if (names.size() > policy.max_candidates) names.resize(policy.max_candidates);
    std::vector<TensorRange> in_ranges, out_ranges;
    layer_ranges(*layer, states[0], states.size() > 1 ? states[1] : states[0],
                 states.size() > 2 ? states[2] : states[0], in_ranges, out_ranges);
    double best = std::numeric_limits<double>::infinity();
    std::string chosen, failures;
    const bool single = one_point(*layer, states);
    for (const std::string& name : names) {
      layer->attrs().set("plugin_tactic", name);
      try {
        bool stopped = false;
        uint64_t ws = 0;
        const KernelTime t = time_kernel(*entry, *layer, states.front(), backend, stream.get(), in_ranges, out_ranges,
                                         policy, stop_above(policy, best), &stopped, &ws);
        if (single) memo.workspace.emplace(workspace_memo_key(ws_key, entry->tactic, *layer), ws);
        ++report.tactics_timed;
        if (stopped) ++report.tactics_stopped_early;
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": plugin tactic " + name + " " + std::to_string(t.device_ms) +
                                      " ms" + (stopped ? " (stopped early: slower than the best so far)" : ""));
        }
        if (t.device_ms < best) {
          best = t.device_ms;
          chosen = name;
        }
      } catch (const std::exception& ex) {
        failures += "\n  " + name + ": " + ex.what();
        try {  // drain the failed run, so the next timing on this stream starts clean
          backend.synchronize(stream.get());
        } catch (const std::exception&) {}
      }
    }
    if (chosen.empty()) {
      throw Error("layer " + quote(layer->name()) +
                  " (plugin): every implementation the plugin offers failed:" + failures);
    }
    layer->attrs().set("plugin_tactic", chosen);
    cache.put(key, chosen);
    memo.plugin_tactic[reuse_key] = chosen;
    ++report.layers_timed;
    log(Severity::kVerbose,
        "  " + layer->name() + ": plugin tactic " + chosen + " (fastest of " + std::to_string(names.size()) + ")");
    progress.update(index, report);
  }
  cache.save();
}

}  // namespace

std::map<std::string, std::string> select_tactics(const Network& network, const std::vector<Layer*>& steps,
                                                  const BuilderConfig& config, const std::vector<TensorStates>& states,
                                                  BuildReport* report,
                                                  std::map<std::string, std::string>* launch_tactics,
                                                  const std::string& progress_prefix) {
  TimingPolicy policy = timing_policy(config.optimization_level);
  policy.streams = config.device == DeviceType::kCUDA ? config.tune_for_streams : 1;
  policy.threads = config.device == DeviceType::kCPU ? std::max(1, config.num_threads) : 1;
  BuildReport local;
  BuildReport& r = report ? *report : local;
  TimingPolicy::Clock clock;
  policy.clock = &clock;
  r.optimization_level = config.optimization_level;
  const auto start = std::chrono::steady_clock::now();
  ChoiceMemo memo;
  std::map<std::string, std::string> tactics;
  choose_plugin_tactics(steps, config, states, r, memo, clock, progress_prefix);
  TimingProgress progress(progress_prefix + "timing kernels", steps.size());
  const bool cpu = config.device == DeviceType::kCPU;
  const bool timing = (config.device == DeviceType::kCUDA || cpu) && builder_times_kernels(config);
  Backend* backend = timing ? &get_backend(config.device) : nullptr;
  TimingStream timing_stream(backend);
  void* stream = backend ? timing_stream.get() : nullptr;
  const std::string device_name =
      backend ? timing_device_name(*backend, config) : std::string(to_string(config.device));
  TimingCache cache(timing ? config.timing_cache_path : std::string());
  std::unique_ptr<PrepareAhead> ahead;  // made for the first layer with several candidates to time
  // The kernels offered: the level's, and level 0's where nothing is timed (time_tactics = false
  // makes level 0's choice whatever the level says).
  const int offer_level = builder_times_kernels(config) ? config.optimization_level : 0;
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
      if (tactic_disabled(e->tactic) || !e->offered_at(offer_level)) continue;
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
      throw Error("layer " + quote(layer->name()) + " (" + layer->type() + "): none of the " +
                  to_string(config.device) + " kernels supports it with inputs (" +
                  describe_types(*layer, states.front()) + ") and outputs (" +
                  describe_output_types(*layer, states.front()) + ")");
    }
    const bool host_known = is_host_known(*layer, states.front());
    const auto in_descs = input_descs(*layer, states.front());
    const std::string reuse_key = timing_key(device_name, *layer, in_descs, states.front(), false);
    const std::string ws_key = reuse_key + "|" + points_text(*layer, states);
    if (config.workspace_limit && !host_known) {
      std::vector<const KernelEntry*> fit;
      uint64_t smallest = std::numeric_limits<uint64_t>::max();
      std::string smallest_name, failures;
      for (const KernelEntry* e : ok) {
        uint64_t ws = 0;
        try {
          ws = memo_workspace(memo, ws_key, *e, *layer, states);
        } catch (const std::exception& ex) {
          failures += "\n  " + e->tactic + ": " + ex.what();
          continue;
        }
        if (ws <= config.workspace_limit) {
          fit.push_back(e);
          continue;
        }
        ++r.tactics_over_workspace;
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": " + e->tactic + " needs " + std::to_string(ws) +
                                      " bytes of workspace, over the limit");
        }
        if (ws < smallest) {
          smallest = ws;
          smallest_name = "kernel " + e->tactic;
        }
      }
      if (fit.empty() && smallest_name.empty()) {
        throw Error("layer " + quote(layer->name()) + " (" + layer->type() + "): every " + to_string(config.device) +
                    " kernel that accepts it failed to prepare:" + failures);
      }
      if (fit.empty()) {
        throw Error(workspace_error(*layer,
                                    "every " + std::string(to_string(config.device)) + " kernel that supports it",
                                    config.workspace_limit, smallest, smallest_name));
      }
      ok = fit;
    }
    // The workspace of the kernel chosen for the layer, for BuildReport::workspace_bytes.
    const auto note_workspace = [&](const std::string& tactic) {
      // Plugins: configure_plugins_per_profile notes theirs (configuring each once per profile).
      if (host_known || layer->type() == kLayerPlugin) return;
      const KernelEntry* e = KernelRegistry::instance().find(config.device, layer->type(), tactic);
      if (!e) return;
      try {
        r.workspace_bytes = std::max(r.workspace_bytes, memo_workspace(memo, ws_key, *e, *layer, states));
      } catch (const std::exception& ex) {
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": workspace known at run time only (" + ex.what() + ")");
        }
      }
    };
    // On the CPU the reference kernel is not timed where another takes the layer (it is never
    // faster, and one run of it on a large convolution takes seconds).
    if (cpu && ok.size() > 1 && ok.back()->priority == 0) ok.pop_back();
    if (!timing || ok.size() == 1 || host_known || policy.max_candidates < 2 ||
        (cpu && !cpu_layer_timed(layer->type()))) {
      tactics[layer->name()] = ok.front()->tactic;
      note_workspace(ok.front()->tactic);
      continue;
    }
    const std::string key = timing_key(device_name, *layer, in_descs, states.front());
    const std::string launch_key = key + "|launch";
    const auto in_ok = [&](const std::string& tactic) {
      return std::any_of(ok.begin(), ok.end(), [&](const KernelEntry* e) { return e->tactic == tactic; });
    };
    // An identical layer earlier in this build first, then the timing cache file.
    if (const auto it = memo.kernel.find(reuse_key);
        it != memo.kernel.end() && in_ok(it->second.first) && in_ok(it->second.second)) {
      const auto& [tactic, launch] = it->second;
      tactics[layer->name()] = tactic;
      if (launch_tactics && launch != tactic) (*launch_tactics)[layer->name()] = launch;
      cache.put(key, tactic);
      cache.put(launch_key, launch);
      ++r.layers_reused;
      if (config.verbose) {
        log(Severity::kVerbose,
            "  " + layer->name() + ": " + tactic + " (the choice of an identical layer in this build)");
      }
      note_workspace(tactic);
      progress.update(index, r);
      continue;
    }
    if (const std::string* hit = cache.find(key); hit && in_ok(*hit)) {
      tactics[layer->name()] = *hit;
      const std::string* launch_hit = cache.find(launch_key);
      if (launch_tactics && launch_hit && in_ok(*launch_hit) && *launch_hit != *hit) {
        (*launch_tactics)[layer->name()] = *launch_hit;
      }
      memo.kernel[reuse_key] = {*hit, launch_hit && in_ok(*launch_hit) ? *launch_hit : *hit};
      ++r.timing_cache_hits;
      note_workspace(*hit);
      progress.update(index, r);
      continue;
    }
    if (ok.size() > policy.max_candidates) ok.resize(policy.max_candidates);
    if (!ahead && ok.size() > 1 && PrepareAhead::enabled(config)) ahead = std::make_unique<PrepareAhead>();
    // The first profile's ranges, for kernels that configure themselves by profile (plugins).
    std::vector<TensorRange> in_ranges, out_ranges;
    layer_ranges(*layer, states[0], states.size() > 1 ? states[1] : states[0],
                 states.size() > 2 ? states[2] : states[0], in_ranges, out_ranges);
    double best_plain = std::numeric_limits<double>::infinity();
    double best_device = std::numeric_limits<double>::infinity();
    const KernelEntry* chosen = nullptr;
    const KernelEntry* chosen_plain = nullptr;
    std::vector<std::pair<const KernelEntry*, KernelTime>> timed;
    std::string failures;
    const bool single = one_point(*layer, states);
    const PrepareAheadBatch batch(ahead.get(), ok, *layer, states.front(), in_ranges, out_ranges,
                                  std::max(1, policy.threads));
    for (size_t k = 0; k < ok.size(); ++k) {
      const KernelEntry* e = ok[k];
      try {
        bool stopped = false;
        uint64_t ws = 0;
        const KernelTime t = time_kernel(*e, *layer, states.front(), *backend, stream, in_ranges, out_ranges, policy,
                                         stop_above(policy, best_device), &stopped, &ws, ahead.get(), k);
        if (single) memo.workspace.emplace(workspace_memo_key(ws_key, e->tactic, *layer), ws);
        ++r.tactics_timed;
        if (stopped) ++r.tactics_stopped_early;
        if (config.verbose) {
          log(Severity::kVerbose, "  " + layer->name() + ": " + e->tactic + " " + std::to_string(t.device_ms) +
                                      " ms on the device, " + std::to_string(t.host_ms) + " ms to launch" +
                                      (stopped ? " (stopped early: slower than the best so far)" : ""));
        }
        timed.emplace_back(e, t);
        best_device = std::min(best_device, t.device_ms);
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
        } catch (const std::exception&) {}
      }
    }
    // The fastest on the device; among kernels within kDeviceTimeTie of it (the same cuDNN engine
    // behind two APIs differs by noise), the cheapest to launch: graphs do not care, and the
    // warm-up run, a failed capture's plain run and first calls at new shapes do.
    double cheapest_launch = std::numeric_limits<double>::infinity();
    for (const auto& [e, t] : timed) {
      if (t.device_ms <= best_device * (1.0 + kDeviceTimeTie) && t.host_ms < cheapest_launch) {
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
    memo.kernel[reuse_key] = {chosen->tactic, chosen_plain->tactic};
    if (launch_tactics && chosen_plain != chosen) {
      (*launch_tactics)[layer->name()] = chosen_plain->tactic;
      if (config.verbose) {
        log(Severity::kVerbose, "  " + layer->name() + ": launched layer by layer (no CUDA graph) it runs " +
                                    chosen_plain->tactic + " (" + chosen->tactic +
                                    " costs more to launch than to run)");
      }
    }
    ++r.layers_timed;
    note_workspace(chosen->tactic);
    progress.update(index, r);
  }
  r.timing_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.timing_setup_seconds = clock.setup();
  r.timing_measure_seconds = clock.measure;
  if (r.tactics_timed) {
    log(Severity::kVerbose,
        "kernel timing: set-up " + std::to_string(r.timing_setup_seconds) + " s (layers' test buffers " +
            std::to_string(clock.buffers) + " s, prepare " + std::to_string(clock.prepare) +
            (ahead ? " s waited for the helper thread, which prepared for " + std::to_string(ahead->helper_seconds())
                   : std::string()) +
            " s, warm-up runs " + std::to_string(clock.warmup) + " s), measuring " +
            std::to_string(r.timing_measure_seconds) + " s");
  }
  cache.save();
  configure_plugins_per_profile(steps, config, states, tactics, r);
  (void)network;
  return tactics;
}

std::vector<PreparedState> collect_prepared_states(const std::vector<Layer*>& steps, DeviceType device,
                                                   const std::map<std::string, std::string>& tactics,
                                                   const std::map<std::string, std::string>& launch_tactics,
                                                   const std::vector<TensorStates>& states,
                                                   const std::vector<std::vector<TensorStates>>& extra) {
  std::map<std::string, PreparedState> found;
  for (const Layer* layer : steps) {
    std::vector<std::string> chosen;
    if (const auto it = tactics.find(layer->name()); it != tactics.end()) chosen.push_back(it->second);
    if (const auto it = launch_tactics.find(layer->name());
        it != launch_tactics.end() && (chosen.empty() || it->second != chosen[0])) {
      chosen.push_back(it->second);
    }
    for (const std::string& tactic : chosen) {
      const KernelEntry* entry = KernelRegistry::instance().find(device, layer->type(), tactic);
      if (!entry || !entry->exports_prepared_state) continue;
      try {
        prepare_at_points(*entry, *layer, states, extra, [&](const Kernel& kernel) {
          for (PreparedState& s : kernel.prepared_states()) {
            if (s.bytes) found.emplace(s.key, std::move(s));
          }
        });
      } catch (const std::exception& e) {
        log(Severity::kVerbose, "  " + layer->name() + ": no compiled plan stored for kernel " + tactic + " (" +
                                    e.what() + "); loading builds it");
      }
    }
  }
  std::vector<PreparedState> out;
  for (auto& [key, s] : found) out.push_back(std::move(s));
  return out;
}

}  // namespace kiln
