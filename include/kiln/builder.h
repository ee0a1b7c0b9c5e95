// The builder turns a Network into a serialized engine: it validates the network against the
// optimization profiles, runs the optimization passes (constant folding, dead-layer removal,
// Conv+BatchNorm folding, activation and element-wise fusion), picks a kernel (tactic) per
// layer, plans activation memory and writes the engine bytes (docs/engine-format.md).
// Builds are deterministic: the same network and config give identical bytes.
// A Builder may be used from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"

namespace kiln {

// min/opt/max dims for every dynamic network input. At run time each input's dims must lie
// within [min, max] element-wise; opt is the shape the builder tunes for.
class OptimizationProfile {
 public:
  void set_dimensions(const std::string& input, const Dims& min, const Dims& opt, const Dims& max);
  bool has(const std::string& input) const { return shapes_.count(input) != 0; }
  const Dims& min(const std::string& input) const;
  const Dims& opt(const std::string& input) const;
  const Dims& max(const std::string& input) const;
  struct Shapes {
    Dims min, opt, max;
  };
  const std::map<std::string, Shapes>& all() const { return shapes_; }

 private:
  std::map<std::string, Shapes> shapes_;
};

class BuilderConfig {
 public:
  DeviceType device = DeviceType::kCPU;
  // Upper bound for activation memory (bytes); 0 means no limit. The build fails with a
  // message naming the peak when the plan exceeds it.
  uint64_t memory_limit = 0;
  // CPU threads used by the engine's kernels (0: all hardware threads; at most kMaxThreads, the
  // build fails otherwise). Stored in the engine; can be overridden per execution context.
  int num_threads = 0;
  // Allow fp16 kernels where they exist (CUDA).
  bool fp16 = false;
  // Skip the optimization passes (for debugging and for checking the passes themselves).
  bool disable_optimizations = false;
  // Individual passes may be turned off by name (builder_pass_names(); an unknown name fails the
  // build, listing them).
  std::vector<std::string> disabled_passes;
  // Optimization profiles; a network with dynamic inputs needs at least one.
  std::vector<OptimizationProfile> profiles;
  // Print progress and per-pass details through the logger at kInfo/kVerbose.
  bool verbose = false;
  // CUDA: a file of measured kernel timings (created when absent, updated after the build).
  // Layers already timed on this GPU with the same shapes and attributes are not timed again.
  std::string timing_cache_path;
  // CUDA: time every kernel that supports a layer and keep the fastest (false: highest priority).
  bool time_tactics = true;
  // Store the file of every plugin library the engine's plugins came from in the engine (LIBS
  // section, docs/engine-format.md), for deployment without the library: a runtime loads the
  // embedded copy of a plugin that is not registered only after Runtime::
  // set_allow_embedded_plugins(true). Plugins built into kiln have no library to embed.
  bool embed_plugin_libraries = false;
};

// What the build did, for `kiln build` and `kiln inspect`.
struct BuildReport {
  int layers_before = 0;
  int layers_after = 0;
  std::vector<std::string> pass_log;  // one line per pass that changed something
  uint64_t activation_peak_bytes = 0;     // at the max shapes of the largest profile
  uint64_t activation_naive_bytes = 0;    // sum of all activation sizes without reuse
  uint64_t weights_bytes = 0;
  double build_seconds = 0.0;
  int layers_timed = 0;          // CUDA: layers whose kernels were timed on the device
  int timing_cache_hits = 0;     // CUDA: layers whose choice came from the timing cache
  double timing_seconds = 0.0;   // time spent timing kernels
};

// The names of the builder's passes, in pipeline order (BuilderConfig::disabled_passes).
const std::vector<std::string>& builder_pass_names();

class Builder {
 public:
  // Builds and serializes; throws kiln::Error naming the layer/tensor/profile at fault.
  // Does not modify `network`.
  std::vector<uint8_t> build_serialized(const Network& network, const BuilderConfig& config,
                                        BuildReport* report = nullptr);
};

}  // namespace kiln
