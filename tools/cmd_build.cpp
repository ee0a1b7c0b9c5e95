// `kiln build`: ONNX model -> engine file. Parses the model, makes one optimization profile from
// the trtexec-style shape flags, builds with kiln::Builder, prints the BuildReport (and the plugin
// libraries --embed-plugins stored) and writes the engine through a temporary file (a failed
// build never leaves a partial engine behind).
#include <CLI/CLI.hpp>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "engine/engine_format.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/network.h"
#include "core/text.h"

namespace kiln::cli {
namespace {

struct BuildOptions {
  std::string onnx;
  std::string engine;
  std::string device = "cpu";
  ShapeFlags shapes;
  int threads = 0;
  bool fp16 = false;
  std::string memory_limit;
  bool verbose = false;
  bool no_optimizations = false;
  std::vector<std::string> disabled_passes;
  std::vector<std::string> plugins;
  std::string timing_cache;
  bool no_timing = false;
  int optimization_level = 3;
  int tune_for_streams = 1;
  std::string workspace_limit;
  bool embed_plugins = false;
  bool no_compiled_plans = false;
  bool compiled_plans_every_batch = false;
  std::vector<std::string> layer_precisions;
};

void print_profile(const OptimizationProfile& profile, std::ostream& out) {
  if (profile.all().empty()) {
    out << "profile: every input has a fixed shape\n";
    return;
  }
  out << "profile:\n";
  for (const auto& [name, s] : profile.all()) {
    if (s.min == s.max)
      out << "  " << name << ": " << s.min.to_string() << "\n";
    else
      out << "  " << name << ": min " << s.min.to_string() << ", opt " << s.opt.to_string() << ", max "
          << s.max.to_string() << "\n";
  }
}

int run_build(const BuildOptions& o) {
  std::ostream& out = std::cout;
  // kInfo: the builder's progress on long builds (layers timed, time left) every 1.5 s or so.
  default_logger().set_min_severity(o.verbose ? Severity::kVerbose : Severity::kInfo);

  BuilderConfig config;
  config.device = parse_device_type(o.device);
  config.num_threads = o.threads;
  config.fp16 = o.fp16;
  config.verbose = o.verbose;
  config.disable_optimizations = o.no_optimizations;
  config.disabled_passes = o.disabled_passes;
  config.timing_cache_path = o.timing_cache;
  config.time_tactics = !o.no_timing;
  config.optimization_level = o.optimization_level;
  config.tune_for_streams = o.tune_for_streams;
  if (!o.workspace_limit.empty()) config.workspace_limit = parse_byte_size(o.workspace_limit, "--workspace-limit");
  config.embed_plugin_libraries = o.embed_plugins;
  config.embed_compiled_plans = !o.no_compiled_plans;
  config.compiled_plans_every_batch = o.compiled_plans_every_batch;
  if (!o.memory_limit.empty()) config.memory_limit = parse_byte_size(o.memory_limit, "--memory-limit");

  // Parse the shape flags before the (slow) model import so that typos fail fast.
  check_shape_flags(o.shapes);

  const auto t0 = std::chrono::steady_clock::now();
  load_plugins(o.plugins);
  std::unique_ptr<Network> network = load_onnx_network(o.onnx);
  const int pinned = apply_layer_precisions(*network, o.layer_precisions);
  const double parse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << std::fixed << std::setprecision(3);
  out << "parsed '" << o.onnx << "': " << network->num_layers() << " layers in " << parse_s << " s\n";
  print_network_io(*network, out);
  if (pinned) out << "layer precisions: " << pinned << " layer(s) set by --layer-precisions\n";

  config.profiles.push_back(make_profile(*network, o.shapes, out));
  print_profile(config.profiles.back(), out);

  out << "building for " << to_string(config.device)
      << " (threads: " << (o.threads > 0 ? std::to_string(o.threads) : std::string("all"))
      << ", fp16: " << (o.fp16 ? "on" : "off") << (o.no_optimizations ? ", optimizations: off" : "")
      << ", optimization level: " << o.optimization_level << (o.no_timing ? " with --no-timing" : "")
      << (config.workspace_limit ? ", workspace limit: " + format_bytes(config.workspace_limit) : std::string())
      << (o.tune_for_streams > 1 ? ", tuned for " + std::to_string(o.tune_for_streams) + " streams" : std::string())
      << ")\n"
      << std::flush;
  Builder builder;
  BuildReport report;
  std::vector<uint8_t> bytes = builder.build_serialized(*network, config, &report);

  out << "build: " << report.layers_before << " layers -> " << report.layers_after << " layers in "
      << report.build_seconds << " s\n";
  if (o.verbose) {
    if (report.pass_log.empty()) out << "  (no pass changed the network)\n";
    for (const auto& line : report.pass_log) out << "  pass: " << line << "\n";
  } else if (!report.pass_log.empty()) {
    out << "  " << report.pass_log.size() << " pass(es) changed the network (--verbose lists them)\n";
  }
  if ((config.device != DeviceType::kCPU && config.time_tactics && config.optimization_level > 0) ||
      report.tactics_timed || report.layers_reused || report.timing_cache_hits) {
    out << "kernel timing: " << report.layers_timed << " layer(s) timed (" << report.tactics_timed << " kernel(s), "
        << report.tactics_stopped_early << " stopped early) in " << report.timing_seconds << " s (setting kernels up "
        << report.timing_setup_seconds << " s, measuring " << report.timing_measure_seconds << " s), "
        << report.layers_reused << " reused an identical layer's timing, " << report.timing_cache_hits
        << " from the timing cache" << (o.timing_cache.empty() ? std::string() : " " + quote(o.timing_cache)) << "\n";
  } else {
    out << "kernel timing: none ("
        << (config.device == DeviceType::kCPU ? "CPU kernels are chosen by priority" : "highest-priority kernels")
        << (config.optimization_level == 0 || o.no_timing ? "; nothing is timed at level 0 or with --no-timing" : "")
        << ")\n";
  }
  if (report.level5_layers_differing == 0) {
    out << "level 5 check: level 3 would choose the same kernels (checked in " << report.level5_check_seconds
        << " s)\n";
  } else if (report.level5_layers_differing > 0) {
    out << "level 5 check: " << report.level5_layers_differing
        << " layer(s) with other kernels than level 3 would choose; whole engine " << report.level5_engine_ms
        << " ms with level 5's, " << report.level3_engine_ms
        << " ms with level 3's: " << (report.level3_kernels_kept ? "level 3's kept" : "level 5's kept")
        << " (checked in " << report.level5_check_seconds << " s)\n";
  }
  if (report.tactics_over_workspace) {
    out << "workspace limit: " << report.tactics_over_workspace << " kernel(s) left out for needing more than "
        << format_bytes(config.workspace_limit) << "\n";
  }
  out << "memory: activations peak " << format_bytes(report.activation_peak_bytes);
  if (report.activation_naive_bytes) out << " (" << format_bytes(report.activation_naive_bytes) << " without reuse)";
  out << ", weights " << format_bytes(report.weights_bytes) << ", kernel workspace "
      << format_bytes(report.workspace_bytes) << "\n";
  if (report.compiled_plans > 0) {
    out << "compiled plans: " << report.compiled_plans << " cuDNN execution plan(s), "
        << format_bytes(report.compiled_plan_bytes)
        << " (loaded instead of built on a GPU of the same model, driver and cuDNN; --no-compiled-plans leaves them "
           "out)\n";
  }

  if (o.embed_plugins) {
    const EngineData data = engine_deserialize(bytes.data(), bytes.size(), o.engine);
    if (data.plugin_libraries.empty()) out << "plugin libraries: none to embed (the engine uses no plugin library)\n";
    for (const auto& lib : data.plugin_libraries) {
      out << "embedded plugin library '" << lib.path << "' (" << format_bytes(lib.bytes.size())
          << "; kiln run needs --allow-embedded-plugins to load it)\n";
    }
  }
  write_file_bytes(o.engine, bytes, "engine file");
  out << "saved engine '" << o.engine << "' (" << format_bytes(bytes.size()) << ")\n";
  return kExitOk;
}

void add_shape_flags(CLI::App& sub, ShapeFlags& flags) {
  sub.add_option("--shapes", flags.shapes,
                 "Shapes of dynamic inputs, min = opt = max: NAME:DIMS[,NAME:DIMS...], e.g. images:1x3x320x320")
      ->type_name("SPEC");
  sub.add_option("--min-shapes", flags.min_shapes, "Smallest shapes the engine accepts (with --opt/--max-shapes)")
      ->type_name("SPEC");
  sub.add_option("--opt-shapes", flags.opt_shapes, "Shapes the engine is tuned for")->type_name("SPEC");
  sub.add_option("--max-shapes", flags.max_shapes, "Largest shapes the engine accepts")->type_name("SPEC");
}

}  // namespace

void setup_build_command(CLI::App& parent, std::function<int()>& run) {
  auto o = std::make_shared<BuildOptions>();
  CLI::App* sub = parent.add_subcommand(
      "build",
      "Build an engine file from an ONNX model. The model is imported, optimized (constant folding, "
      "Conv+BatchNorm folding, activation and element-wise fusion), a kernel is chosen for every layer, "
      "activation memory is planned for one optimization profile, and the engine is saved. Dynamic input "
      "dims take their range from --shapes or --min/--opt/--max-shapes; a dynamic dim nobody sets is 1.");
  sub->footer(
      "Examples:\n"
      "  kiln build --onnx squeezenet.onnx --save-engine squeezenet.kiln --shapes input:1x3x224x224\n"
      "  kiln build --onnx yolo.onnx --save-engine yolo.kiln --min-shapes images:1x3x320x320 \\\n"
      "      --opt-shapes images:4x3x320x320 --max-shapes images:8x3x320x320 --threads 4 --verbose");
  sub->add_option("--onnx", o->onnx, "ONNX model to build")->required()->type_name("FILE");
  sub->add_option("--save-engine", o->engine, "Engine file to write")->required()->type_name("FILE");
  sub->add_option("--device", o->device, "Device the engine runs on: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))
      ->capture_default_str();
  add_shape_flags(*sub, o->shapes);
  add_threads_option(*sub, o->threads, "CPU threads of the engine's kernels (0: all hardware threads)");
  sub->add_flag("--fp16", o->fp16,
                "Run layers in fp16 where the device has an fp16 kernel (CUDA; on the CPU the layers whose CPU "
                "kernels take float16, which is slower there: for checking fp16 numerics); inputs/outputs keep "
                "their types");
  sub->add_option("--layer-precisions", o->layer_precisions,
                  "Per-layer precision (trtexec --layerPrecisions): NAME:fp32|fp16[,...] or @FILE, '*' matches any "
                  "characters; e.g. '/encoder/*/output/dense/*:fp32'. `kiln debug precision` finds such a list")
      ->type_name("SPEC");
  sub->add_option("--timing-cache", o->timing_cache,
                  "CUDA: kernel timing cache file, read and updated (rebuilds skip timing layers seen before)")
      ->type_name("FILE");
  sub->add_flag("--no-timing", o->no_timing,
                "Take each layer's highest-priority kernel (a plugin's first implementation) instead of timing "
                "them: the kernels --builder-optimization-level 0 takes, whatever the level");
  sub->add_option("--builder-optimization-level", o->optimization_level,
                  "How hard to search for the fastest kernels, 0..5 (trtexec's name; docs/cli.md lists each level): "
                  "0 times nothing (highest-priority kernels), 1-2 time fewer kernels and runs, 3 is the default, "
                  "4-5 time more runs and 5 also the kernels that are slow to try")
      ->check(CLI::Range(0, 5))
      ->type_name("N")
      ->capture_default_str();
  sub->add_option("--tune-for-streams", o->tune_for_streams,
                  "CUDA: how many contexts will run the engine at once, each on its own stream (kiln bench --streams "
                  "N, a server's instances): kernels are timed as N copies at once and the highest throughput wins "
                  "(1, the default: the lowest latency of one stream)")
      ->check(CLI::Range(1, kiln::kMaxTuneStreams))
      ->type_name("N")
      ->capture_default_str();
  add_byte_size_option(
      *sub, "--workspace-limit", o->workspace_limit,
      "Most scratch memory one kernel may use (suffixes K, M, G; trtexec --memPoolSize=workspace:...): "
      "kernels needing more are not considered; the build fails naming the layer when none fits");
  add_byte_size_option(*sub, "--memory-limit", o->memory_limit,
                       "Fail when activation memory would exceed this many bytes (suffixes K, M, G)");
  sub->add_flag("--no-optimizations", o->no_optimizations, "Skip every optimization pass (for debugging)");
  std::string pass_list;
  for (const auto& name : builder_pass_names()) pass_list += (pass_list.empty() ? "" : ", ") + name;
  sub->add_option("--disable-pass", o->disabled_passes, "Turn off one pass by name (repeatable): " + pass_list)
      ->type_name("NAME")
      ->check(CLI::IsMember(builder_pass_names()));
  sub->add_option("--plugins", o->plugins, "Plugin library to load before importing (repeatable)")->type_name("LIB.so");
  sub->add_flag("--embed-plugins", o->embed_plugins,
                "Store the plugin libraries the engine uses in the engine file (kiln run then needs "
                "--allow-embedded-plugins instead of --plugins)");
  sub->add_flag("--no-compiled-plans", o->no_compiled_plans,
                "Leave the cuDNN execution plans the convolutions compiled for this GPU out of the engine (a smaller "
                "file; loading then builds and compiles them again on each host)");
  sub->add_flag("--compiled-plans-every-batch", o->compiled_plans_every_batch,
                "Store the compiled plans at every batch size of the profile, not only at its min, opt and max "
                "shapes, so that no batch size a dynamic batcher forms compiles a plan when first seen (a longer "
                "build, a larger file)")
      ->excludes("--no-compiled-plans");
  sub->add_flag("-v,--verbose", o->verbose, "List what every pass did and print the builder's progress");
  sub->callback([&run, o] { run = [o] { return run_build(*o); }; });
}

}  // namespace kiln::cli
