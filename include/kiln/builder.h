// The builder turns a Network into a serialized engine: it validates the network against the
// optimization profiles, runs the optimization passes (constant folding, dead-layer removal,
// Conv+BatchNorm folding, activation and element-wise fusion), picks a kernel (tactic) per
// layer, plans activation memory and writes the engine bytes (docs/engine-format.md).
// Builds are deterministic: the same network and config give identical bytes.
// A Builder may be used from one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "kiln/profile.h"
#include "kiln/types.h"

namespace kiln {

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
  // Time the kernels (and plugin implementations) that support a layer and keep the fastest
  // (false: each layer takes its highest-priority kernel and a plugin its first implementation,
  // nothing is timed: the same choice as optimization_level 0, whatever the level says).
  // CUDA times kernels on the device. On the CPU (on the host, with num_threads threads) plugin
  // implementations and the kernels of convolutions, deconvolutions and MatrixMultiply are
  // timed (kiln's AVX2 kernels against oneDNN's, whose best depends on the processor: AVX2 or
  // AVX-512); other CPU layers take their highest-priority kernel.
  bool time_tactics = true;
  // How hard the builder searches for the fastest kernels (TensorRT's builder optimization
  // level): 0..5, default 3; higher builds take longer and usually run faster. Out of range
  // fails the build, naming the range. Every level runs the same passes (builder_pass_names(),
  // minus disabled_passes) and reuses the timing of an identical layer configuration within the
  // build (BuildReport::layers_reused) and from timing_cache_path. Per level:
  //   0: nothing is timed: each layer takes its highest-priority supporting kernel (a plugin its
  //      first implementation), like time_tactics = false. Fastest build. On CUDA a convolution
  //      takes cuDNN's first engine among those with precompiled kernels (a runtime-compiled
  //      engine compiles its kernels when the plan is made, on every host that has not seen the
  //      shape), then the runtime-compiled ones where no other takes it.
  //   1: the 2 highest-priority supporting kernels per layer are timed, one measurement each
  //      (about 0.25 ms of device work).
  //   2: the 4 highest-priority kernels, median of 3 measurements of about 0.5 ms each; a kernel
  //      is dropped after its first measurement when it is over 1.25x the best so far.
  //   3: every kernel registered for the default search (all cuDNN legacy algorithms and the
  //      enabled cuDNN graph engines, cuBLASLt's first 3 heuristic results, kiln's own kernels),
  //      median of 3 measurements of about 1 ms; early stop at 1.25x the best so far.
  //   4: the same kernels, median of 5 measurements of about 1 ms; early stop at 1.5x.
  //   5: also the kernels that are slow to try (KernelEntry::min_optimization_level 5: cuBLASLt's
  //      heuristic results 4 to 8), median of 5 measurements of about 2 ms, no early stop. The
  //      layout pass also times each channels-last candidate region both ways (linear, and
  //      channels-last with its Reformats; on the CPU and on CUDA) and keeps the faster, where
  //      the other levels follow a rule (convolutions against reformats).
  // No level searches layouts or precisions jointly with kernels: the fp16 and layout passes
  // decide before kernels are chosen (the fp16 pass times a plugin's type combinations at
  // levels 1-5 on CUDA, and takes the first at level 0; level 5's layout timing is per region).
  int optimization_level = 3;
  // The most scratch memory (bytes) one kernel may use; 0: no limit. Kernels (and plugin
  // implementations) that need more at any profile point are not considered; when none of a
  // layer's kernels fits, the build fails naming the layer and the smallest workspace that
  // would do. Checked on the CPU and on CUDA (TensorRT's workspace memory pool limit). The
  // engine's workspace is in BuildReport::workspace_bytes and its build_info.
  uint64_t workspace_limit = 0;
  // How many execution contexts will run the engine at once, each on its own stream (a server's
  // instances, `kiln bench --streams N`): 1..64, default 1. At 1 each layer gets the kernel with
  // the lowest latency on an otherwise idle GPU. Above 1 (CUDA, when kernels are timed), each
  // candidate is timed as N copies running at once on N streams, and the one with the highest
  // throughput wins: at batch 1 a kernel that takes most SMs for a few microseconds is fastest
  // alone but leaves the other streams waiting, and one with fewer, longer-running blocks serves
  // N streams better; and the cuBLASLt kernels of convolutions and matrix products and cuDNN's
  // graph-API convolutions are chosen for the device's SMs / N (the layers' attribute
  // concurrent_streams). One stream's latency may grow. The engine records the value
  // (build_info "tuned_for_streams"); the timing cache keeps choices per value. No effect on the CPU.
  int tune_for_streams = 1;
  // Store the file of every plugin library the engine's plugins came from in the engine (LIBS
  // section, docs/engine-format.md), for deployment without the library: a runtime loads the
  // embedded copy of a plugin that is not registered only after Runtime::
  // set_allow_embedded_plugins(true). Plugins built into kiln have no library to embed.
  bool embed_plugin_libraries = false;
  // Store what the chosen kernels compiled for this GPU in the engine (KSTATE section,
  // docs/engine-format.md): cuDNN's execution plans for the convolutions, with the kernels cuDNN
  // compiles at run time (NVRTC) for fused convolutions, at each profile's opt, min and max
  // shapes. Loading the engine on a GPU of the same model with the same driver and cuDNN then
  // loads those plans instead of building and compiling them again (seconds per engine on a host
  // whose driver JIT cache is empty, on every thread that prepares a context); elsewhere they are
  // not used and the plans are built as without them. Off: a smaller file. No effect on the CPU.
  bool embed_compiled_plans = true;
  // With embed_compiled_plans: also store the plans at every batch size between each profile's min
  // and max, not only at its opt, min and max (profiles whose inputs vary in their first dimension
  // only, at most 64 batch sizes; others keep the three points), so that no batch size a dynamic
  // batcher forms builds or compiles a plan when first seen, on a fresh host or not. The build
  // takes longer (a plan per distinct convolution and batch size: 0.1-0.3 s each for the
  // runtime-compiled ones) and the file grows (about 50-65 KB per plan).
  bool compiled_plans_every_batch = false;
};

// What the build did, for `kiln build` and `kiln inspect`.
struct BuildReport {
  int layers_before = 0;
  int layers_after = 0;
  std::vector<std::string> pass_log;    // one line per pass that changed something
  uint64_t activation_peak_bytes = 0;   // at the max shapes of the largest profile
  uint64_t activation_naive_bytes = 0;  // sum of all activation sizes without reuse
  uint64_t weights_bytes = 0;
  double build_seconds = 0.0;
  int layers_timed = 0;       // layers whose kernels (or plugin implementations) were timed
  int timing_cache_hits = 0;  // layers whose choice came from the timing cache file
  // Layers whose choice reused the timing of an identical configuration earlier in the same
  // build (same layer type, attributes, input and output types, dims and formats; weights
  // values may differ), instead of timing again.
  int layers_reused = 0;
  int tactics_timed = 0;           // kernels and plugin implementations timed, over all layers
  int tactics_stopped_early = 0;   // of those, stopped once clearly slower than the best so far
  int tactics_over_workspace = 0;  // candidates left out for needing more than workspace_limit
  int optimization_level = 3;      // the level the engine was built at
  // The largest workspace (bytes) a chosen kernel needs at the profiles' points: what an
  // execution context reserves for kernel scratch besides activations. Layers whose shapes are
  // known only at run time size theirs then.
  uint64_t workspace_bytes = 0;
  double timing_seconds = 0.0;  // time spent timing kernels
  // Of timing_seconds: setting each timed kernel up (buffers, preparation such as cuDNN plan
  // building, warm-up runs) and measuring it; the rest chooses, sizes workspaces and reads caches.
  double timing_setup_seconds = 0.0;
  double timing_measure_seconds = 0.0;
  // Level 5 only: layers timed alone with their data in cache do not always make the fastest
  // engine, so the builder also chooses the kernels as level 3 would (same network and layouts)
  // and, where the choices differ, times both engines whole (one context each, profile 0's opt
  // shapes, alternating rounds) and keeps the faster. -1: not checked (another level, timing
  // off, or the check could not run: then level 5's kernels are kept and the log says why).
  int level5_layers_differing = -1;   // layers whose kernel differs from level 3's; 0: same engine
  double level5_engine_ms = 0.0;      // median latency of the engine with level 5's kernels
  double level3_engine_ms = 0.0;      // ... with level 3's
  bool level3_kernels_kept = false;   // level 3's were faster whole, and the engine has them
  double level5_check_seconds = 0.0;  // the check's time (level 3's kernel timing and both engines')
  // BuilderConfig::embed_compiled_plans: the plans stored in the engine and their bytes.
  int compiled_plans = 0;
  uint64_t compiled_plan_bytes = 0;
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
