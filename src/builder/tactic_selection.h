// Kernel (tactic) choice per layer: on the CPU the highest-priority kernel whose supports()
// accepts the layer at every profile point; on CUDA by timing (the CUDA backend's issue).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/builder.h"
#include "src/backends/kernel.h"
#include "src/engine/engine_format.h"
#include "src/ir/shape_inference.h"
#include "src/plan/kernel_config.h"

namespace kiln {

class Backend;

// How BuilderConfig::optimization_level times kernels (builder.h documents the levels).
struct TimingPolicy {
  bool time = true;           // false (level 0): nothing is timed, the highest priority wins
  size_t max_candidates = 0;  // kernels timed per layer, highest priority first
  int measurements = 3;       // the median of this many
  double target_ms = 1.0;     // device work per measurement
  double stop_ratio = 0.0;    // early stop above best-so-far x ratio after a measurement; 0: never
  int streams = 1;            // copies timed at once on their own streams (BuilderConfig::tune_for_streams)
  int threads = 1;            // CPU kernels are prepared and run with this many threads (BuilderConfig::num_threads)
  // Where timing spends its time (BuildReport::timing_setup_seconds / timing_measure_seconds);
  // null: not counted.
  struct Clock {
    double buffers = 0, prepare = 0, warmup = 0;  // setting kernels up: test buffers, prepare(), warm-up runs
    double measure = 0;
    double setup() const { return buffers + prepare + warmup; }
  };
  Clock* clock = nullptr;
};
// Throws naming the valid range when `level` is not 0..5.
// A backend stream made on first use and destroyed with this object (also when timing throws):
// the stream kernels are timed on, and the one level 5's whole-engine check runs on.
class TimingStream {
 public:
  explicit TimingStream(Backend* backend) : backend_(backend) {}
  TimingStream(const TimingStream&) = delete;
  TimingStream& operator=(const TimingStream&) = delete;
  ~TimingStream();
  void* get();

 private:
  Backend* backend_;
  void* stream_ = nullptr;
};

TimingPolicy timing_policy(int level);
// The device's name in timing keys: Backend::describe(), plus the number of streams when the
// build is tuned for several (BuilderConfig::tune_for_streams).
std::string timing_device_name(const Backend& backend, const BuilderConfig& config);
// Whether a build with `config` times anything (time_tactics and a level above 0).
bool builder_times_kernels(const BuilderConfig& config);

// KILN_DISABLE_TACTICS=prefix[,prefix...]: true when `tactic` starts with one of the prefixes (the
// builder leaves such kernels out; a "reference" tactic never is).
bool tactic_disabled(const std::string& tactic);

// Returns layer name -> tactic. Throws naming the layer when no kernel supports it, or when
// every kernel needs more than config.workspace_limit (naming the smallest). On CUDA, and on the
// CPU for convolutions, deconvolutions and MatrixMultiply (with config.num_threads threads, the
// reference left out where another kernel takes the layer; other CPU layers take the highest
// priority) (builder_times_kernels), the supporting kernels the level allows are timed at the first state (the opt
// point of the first profile): its device time, and the host's time to launch it. The fastest on the device is kept;
// where another kernel is faster launched layer by layer without a CUDA graph (max(device, launch) lower: cuDNN's
// legacy API costs ~200 us of host time per call), `launch_tactics` (optional) receives it. Choices are read from and
// added to config.timing_cache_path. `report` (may be null) receives the timing counts. `states` holds three points per
// profile, opt, min and max, in profile order (the builder's shape_points). The chosen kernel of every Plugin layer is
// then configured once per profile (Kernel::configure_profile -> Plugin::configure), so a plugin that rejects a
// profile's ranges fails the build, naming the layer and the profile.
std::map<std::string, std::string> select_tactics(const Network& network, const std::vector<Layer*>& steps,
                                                  const BuilderConfig& config, const std::vector<TensorStates>& states,
                                                  BuildReport* report = nullptr,
                                                  std::map<std::string, std::string>* launch_tactics = nullptr,
                                                  const std::string& progress_prefix = "");

// The prepared states (Kernel::prepared_states: compiled cuDNN plans) of the kernels `tactics`
// and `launch_tactics` choose, for the kernel entries that export them
// (KernelEntry::exports_prepared_state), each prepared at every profile's opt, min and max
// points (`states`, as for select_tactics); sorted by key, one per key. A kernel that fails to
// prepare here carries nothing (loading builds it as without states). `extra` (optional): per
// profile, more points to prepare at besides its three (BuilderConfig::compiled_plans_every_batch).
std::vector<PreparedState> collect_prepared_states(const std::vector<Layer*>& steps, DeviceType device,
                                                   const std::map<std::string, std::string>& tactics,
                                                   const std::map<std::string, std::string>& launch_tactics,
                                                   const std::vector<TensorStates>& states,
                                                   const std::vector<std::vector<TensorStates>>& extra = {});

// One way to run a layer that a pass chooses by timing (the fp16 pass: a plugin's type
// combination): the layer with the tensor states it would have (every input and output), plus
// the layers this way needs besides (the casts in front of it) with their states.
struct TimedVariant {
  std::string name;  // stable: stored in the timing cache ("float16", "float32")
  const Layer* layer = nullptr;
  TensorStates states;
  std::vector<std::pair<const Layer*, TensorStates>> extra;
};

// The index of the fastest variant on config.device: each costs the sum of the fastest
// supporting kernel of each of its layers, timed like select_tactics times kernels. The choice
// is read from and added to config.timing_cache_path (keyed by `purpose`, the device and the
// first variant's layer and states), so rebuilds choose the same. Ties and variants whose
// kernels all fail lose to the earlier variant; throws when every variant fails. Needs a device
// with timing (CUDA); the caller decides on the CPU. `from_cache` (optional) tells whether the
// choice came from the timing cache (nothing was timed).
size_t choose_fastest_variant(const std::vector<TimedVariant>& variants, const BuilderConfig& config,
                              const std::string& purpose, bool* from_cache = nullptr);

// Times single layers for a pass that compares ways to run a part of the network (the layout
// pass's region alternatives at level 5), with the timing policy of config's level, on one
// stream (CUDA) or config.num_threads threads (CPU). Kernels read the formats of the layer's
// tensors as they are when asked, so a pass can time a layer in another format by setting its
// tensors' formats first.
class LayerTimer {
 public:
  explicit LayerTimer(const BuilderConfig& config);
  ~LayerTimer();
  LayerTimer(const LayerTimer&) = delete;
  LayerTimer& operator=(const LayerTimer&) = delete;

  // The device time in ms of the kernel select_tactics would take for `layer` at `states`: the
  // fastest of the kernels it would time, or, for a layer it does not time (CPU layers other than
  // convolutions, deconvolutions and products), its highest-priority kernel. Infinity when no
  // kernel takes or runs it; the reasons are appended to `failures`.
  double chosen_kernel_ms(const Layer& layer, const TensorStates& states, std::string* failures);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
