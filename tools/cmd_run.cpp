// `kiln run`: executes an engine file (or an ONNX model built in memory for the shapes of the
// given inputs) on input files, times warmup + measured iterations, writes the outputs as .npy
// and optionally compares them with reference files. With --json the results go to stdout as
// one JSON object (for scripts such as bench/cpu_vs_onnxruntime.py) and the human-readable
// report goes to stderr.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "core/tensor_io.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/runtime.h"
#include "backends/backend.h"
#include "core/text.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

struct RunOptions {
  std::string engine;
  std::string onnx;
  std::string device = "cpu";
  std::string inputs_dir;
  std::vector<std::string> inputs;
  std::string output_dir;
  std::string compare_dir;
  int iterations = 1;
  int warmup = 1;
  int threads = 0;
  bool json = false;
  bool verbose = false;
  bool dump_profile = false;
  bool cuda_graph = false;
  bool no_cuda_graph = false;
  bool fp16 = false;
  double rtol = 1e-3;
  double atol = 1e-5;
  std::vector<std::string> plugins;
  bool allow_embedded_plugins = false;
  bool allow_compiled_plans = false;
  std::vector<std::string> layer_precisions;
};

std::string fmt(double v, int precision = 3) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

nlohmann::json dims_json(const Dims& dims) { return dims.to_vector(); }

// The engine plus where it came from, for messages.
struct LoadedEngine {
  std::shared_ptr<Engine> engine;
  std::string source;
  std::vector<InputTensor> inputs;
};

LoadedEngine load_engine_file(const RunOptions& o) {
  LoadedEngine loaded;
  loaded.source = "engine " + quote(o.engine);
  loaded.engine = kiln::cli::load_engine_file(o.engine, o.allow_embedded_plugins, o.allow_compiled_plans);
  loaded.inputs = load_inputs(engine_input_names(*loaded.engine), o.inputs_dir, o.inputs);
  return loaded;
}

// --onnx: the engine is built in memory with min = opt = max = the shapes of the given inputs.
LoadedEngine build_from_onnx(const RunOptions& o, std::ostream& out) {
  std::unique_ptr<Network> network = load_onnx_network(o.onnx);
  apply_layer_precisions(*network, o.layer_precisions);
  std::vector<std::string> names;
  for (int i = 0; i < network->num_inputs(); ++i) names.push_back(network->input(i)->name());
  LoadedEngine loaded;
  loaded.source = "model " + quote(o.onnx);
  loaded.inputs = load_inputs(names, o.inputs_dir, o.inputs);
  std::map<std::string, Dims> dims;
  for (const auto& in : loaded.inputs) dims[in.name] = in.value.dims();
  BuilderConfig config;
  config.device = parse_device_type(o.device);
  config.fp16 = o.fp16;
  config.num_threads = o.threads;
  config.verbose = o.verbose;
  config.profiles.push_back(profile_from_input_dims(*network, dims, "the input files"));
  BuildReport report;
  std::vector<uint8_t> bytes = Builder().build_serialized(*network, config, &report);
  out << "built '" << o.onnx << "' in memory: " << report.layers_before << " -> " << report.layers_after
      << " layers in " << fmt(report.build_seconds, 2) << " s\n";
  Runtime runtime;
  runtime.set_allow_compiled_plans(true);  // built by this process
  loaded.engine = runtime.deserialize(bytes.data(), bytes.size(), o.onnx + " (built in memory)");
  return loaded;
}

int run_run(const RunOptions& o) {
  std::ostream& out = o.json ? std::cerr : std::cout;
  if (o.verbose) default_logger().set_min_severity(Severity::kVerbose);
  if (o.engine.empty() == o.onnx.empty())
    throw UsageError("give the engine with --engine FILE or the model with --onnx FILE");
  if (!o.layer_precisions.empty() && o.onnx.empty())
    throw UsageError("--layer-precisions applies when building: use it with --onnx (or with kiln build)");
  if (o.inputs_dir.empty() && o.inputs.empty())
    throw UsageError("give the inputs with --inputs-dir DIR (input_<i>.pb files) or --input NAME=FILE");
  if (!o.compare_dir.empty()) require_directory(o.compare_dir, "--compare-dir folder");
  // Before the (possibly long) run, so that a bad folder is reported at once.
  if (!o.output_dir.empty()) make_output_directory(o.output_dir, "--output-dir");
  load_plugins(o.plugins);

  LoadedEngine loaded = o.engine.empty() ? build_from_onnx(o, out) : load_engine_file(o);
  Engine& engine = *loaded.engine;

  std::unique_ptr<ExecutionContext> context = engine.create_execution_context();
  if (o.threads > 0) context->set_num_threads(o.threads);
  const bool on_device = engine.device() != DeviceType::kCPU;
  Backend* backend = on_device ? &get_backend(engine.device()) : nullptr;
  if (o.cuda_graph) {
    if (!on_device) throw UsageError("--cuda-graph needs a CUDA engine (this one runs on the CPU)");
    context->set_graph_capture(true);
  } else if (o.no_cuda_graph) {
    context->set_graph_capture(false);
  }
  std::vector<std::unique_ptr<DeviceIo>> device_io;  // inputs and outputs in device memory
  // Device engines: copy the host tensor into pinned then device memory; returns the device address.
  auto to_device = [&](const void* data, size_t bytes) {
    device_io.push_back(std::make_unique<DeviceIo>(*backend, bytes));
    if (data && bytes) {
      std::memcpy(device_io.back()->pinned, data, bytes);
      backend->copy_host_to_device(device_io.back()->device, device_io.back()->pinned, bytes, nullptr);
    }
    return device_io.back()->device;
  };

  // Inputs: check type and shape against the engine, then bind.
  for (auto& in : loaded.inputs) {
    const TensorInfo& info = engine.io_tensor(in.name);
    if (in.value.type() != info.type)
      throw Error("input " + quote(in.name) + " of " + loaded.source + " is " + to_string(info.type) + ", but '" +
                  in.file + "' holds " + to_string(in.value.type()));
    if (info.format != TensorFormat::kLinear)
      throw Error("input " + quote(in.name) + " of " + loaded.source + " uses the " + to_string(info.format) +
                  " format; `kiln run` feeds linear (row-major) data only");
    if (info.dims.is_dynamic()) {
      context->set_input_shape(in.name, in.value.dims());
    } else if (info.dims != in.value.dims()) {
      throw Error("input " + quote(in.name) + " of " + loaded.source + " has the fixed shape " + info.dims.to_string() +
                  ", but " + quote(in.file) + " holds " + in.value.dims().to_string());
    }
    context->set_tensor_address(in.name, on_device ? to_device(in.value.data(), in.value.nbytes()) : in.value.data());
  }
  out << "inputs:\n";
  for (const auto& in : loaded.inputs)
    out << "  " << describe_tensor(in.name, in.value.type(), in.value.dims()) << "  <- " << in.file << "\n";

  // Outputs: host buffers of the inferred shapes.
  struct Output {
    std::string name;
    HostTensor value;
    DeviceIo* device = nullptr;  // device engines
  };
  std::vector<Output> outputs;
  for (const auto& info : engine.io_tensors()) {
    if (info.mode != TensorIOMode::kOutput) continue;
    // Data-dependent outputs (NonZero, NMS, ...) get their upper bound; trimmed after the run.
    Dims dims = context->max_tensor_shape(info.name);
    if (dims.is_dynamic())
      throw Error("output " + quote(info.name) + " has the unresolved shape " + dims.to_string() +
                  " after setting every input shape");
    outputs.push_back({info.name, allocate_output(info.name, info.type, dims)});
    if (on_device) {
      to_device(nullptr, outputs.back().value.nbytes());
      outputs.back().device = device_io.back().get();
      context->set_tensor_address(info.name, outputs.back().device->device);
    } else {
      context->set_tensor_address(info.name, outputs.back().value.data());
    }
  }

  for (int i = 0; i < o.warmup; ++i) context->execute();
  if (o.dump_profile) context->set_profiling(true);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(o.iterations));
  for (int i = 0; i < o.iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    context->execute();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const LatencyStats stats = compute_latency_stats(samples);
  if (o.dump_profile) std::cerr << context->profile_report();
  for (auto& output : outputs) {
    if (output.device && output.value.nbytes()) {
      backend->copy_device_to_host(output.device->pinned, output.device->device, output.value.nbytes(), nullptr);
      std::memcpy(output.value.data(), output.device->pinned, output.value.nbytes());
    }
    settle_output(*context, output.name, output.value);
  }
  const Dims first = loaded.inputs.empty() ? Dims{} : loaded.inputs.front().value.dims();
  const int64_t batch = first.rank() > 0 ? first[0] : 1;
  const double per_s = stats.mean_ms > 0 ? 1000.0 / stats.mean_ms : 0.0;

  nlohmann::json result;
  result["source"] = o.engine.empty() ? o.onnx : o.engine;
  result["device"] = to_string(engine.device());
  result["threads"] = o.threads;
  result["cuda_graph"] = context->graph_capture();
  if (backend) {
    // kiln's own device allocations (weights, activations, workspace, I/O), not the CUDA context.
    result["device_memory_mb"] = static_cast<double>(backend->peak_bytes_in_use()) / (1 << 20);
    out << "device memory: peak " << fmt(static_cast<double>(backend->peak_bytes_in_use()) / (1 << 20), 1)
        << " MiB allocated by kiln (weights, activations, workspace, inputs/outputs)\n";
  }
  result["warmup"] = o.warmup;
  result["batch"] = batch;
  result["latency_ms"] = {{"iterations", stats.iterations}, {"min", stats.min_ms}, {"median", stats.median_ms},
                          {"mean", stats.mean_ms},          {"p99", stats.p99_ms}, {"max", stats.max_ms}};
  result["throughput"] = {{"inferences_per_s", per_s}, {"items_per_s", per_s * static_cast<double>(batch)}};
  for (const auto& in : loaded.inputs)
    result["inputs"].push_back({{"name", in.name},
                                {"type", to_string(in.value.type())},
                                {"dims", dims_json(in.value.dims())},
                                {"file", in.file}});

  out << "outputs:\n";
  for (const auto& output : outputs) {
    nlohmann::json entry = {
        {"name", output.name}, {"type", to_string(output.value.type())}, {"dims", dims_json(output.value.dims())}};
    out << "  " << describe_tensor(output.name, output.value.type(), output.value.dims());
    if (!o.output_dir.empty()) {
      const std::string file = (fs::path(o.output_dir) / (sanitize_file_name(output.name) + ".npy")).string();
      save_npy(file, output.value);
      entry["file"] = file;
      out << "  -> " << file;
    }
    out << "\n";
    result["outputs"].push_back(entry);
  }

  out << "latency over " << stats.iterations << " iteration(s) after " << o.warmup << " warmup: min "
      << fmt(stats.min_ms) << " ms, median " << fmt(stats.median_ms) << " ms, mean " << fmt(stats.mean_ms)
      << " ms, p99 " << fmt(stats.p99_ms) << " ms\n";
  out << "throughput: " << fmt(per_s, 2) << " inferences/s, " << fmt(per_s * static_cast<double>(batch), 2)
      << " items/s (batch " << batch << ")\n";

  int exit_code = kExitOk;
  if (!o.compare_dir.empty()) {
    out << "compare with '" << o.compare_dir << "' (pass: |a-b| <= " << o.rtol << "*|b| + " << o.atol
        << "*max(1, max|b|)):\n";
    bool all_pass = true;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string ref_file = find_reference(o.compare_dir, i, outputs[i].name);
      CompareResult r;
      if (ref_file.empty()) {
        r.name = outputs[i].name;
        r.note = "no reference: expected output_" + std::to_string(i) + ".pb, output_" + std::to_string(i) +
                 ".npy or " + sanitize_file_name(outputs[i].name) + ".npy";
      } else {
        r = compare_tensors(outputs[i].name, outputs[i].value, load_tensor_file(ref_file), o.rtol, o.atol);
        r.reference_file = ref_file;
      }
      all_pass = all_pass && r.pass;
      out << "  " << r.name << " vs " << (ref_file.empty() ? std::string("(none)") : ref_file) << ": ";
      if (!ref_file.empty() && !r.shape_mismatch)
        out << "max abs err " << sci(r.max_abs_err) << ", max rel err " << sci(r.max_rel_err) << ", mean rel err "
            << sci(r.mean_rel_err) << ", rel err > 1e-5: " << fmt(100.0 * r.share_rel_above_1e5, 2) << "%";
      if (!r.note.empty()) out << (ref_file.empty() || r.shape_mismatch ? "" : "; ") << r.note;
      if (r.violations) out << "; " << r.violations << " of " << r.count << " element(s) out of tolerance";
      out << "  " << (r.pass ? "PASS" : "FAIL") << "\n";
      result["compare"].push_back({{"name", r.name},
                                   {"reference", r.reference_file},
                                   {"max_abs_err", r.max_abs_err},
                                   {"max_rel_err", r.max_rel_err},
                                   {"mean_rel_err", r.mean_rel_err},
                                   {"share_rel_err_above_1e-5", r.share_rel_above_1e5},
                                   {"violations", r.violations},
                                   {"note", r.note},
                                   {"pass", r.pass}});
    }
    result["pass"] = all_pass;
    if (!all_pass) exit_code = kExitMismatch;
  }
  if (o.json) std::cout << result.dump(2) << std::endl;
  return exit_code;
}

}  // namespace

void setup_run_command(CLI::App& parent, std::function<int()>& run) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = parent.add_subcommand(
      "run",
      "Run an engine on input tensors and report latency and, with --compare-dir, accuracy. Inputs are ONNX "
      "TensorProto files (input_<i>.pb, matched to the engine's inputs in order) or .npy files; with --onnx the "
      "model is built in memory for exactly the shapes of the given inputs. Warmup iterations run first, then "
      "the timed ones; outputs are written as <output-dir>/<name>.npy. Exits 3 when a comparison FAILs.");
  sub->footer(
      "Examples:\n"
      "  kiln run --engine squeezenet.kiln --inputs-dir test_data_set_0 --compare-dir test_data_set_0\n"
      "  kiln run --onnx model.onnx --input images=images.npy --output-dir out --iterations 50 --warmup 5 "
      "--threads 2");
  auto* engine = sub->add_option("--engine", o->engine, "Engine file to run")->type_name("FILE");
  auto* onnx = sub->add_option("--onnx", o->onnx, "ONNX model to build in memory and run")->type_name("FILE");
  engine->excludes(onnx);
  auto* graph_on = sub->add_flag("--cuda-graph", o->cuda_graph,
                                 "CUDA engines: capture the inference once as a CUDA graph and replay it (trtexec "
                                 "--useCudaGraph); an error where that is impossible. Without either flag, CUDA "
                                 "engines use graphs where they can");
  auto* graph_off = sub->add_flag("--no-cuda-graph", o->no_cuda_graph,
                                  "CUDA engines: launch every layer's kernels on each run, no graph replay");
  graph_on->excludes(graph_off);
  sub->add_flag("--fp16", o->fp16, "With --onnx: allow fp16 kernels (CUDA)");
  sub->add_option("--layer-precisions", o->layer_precisions,
                  "With --onnx: per-layer precision, NAME:fp32|fp16[,...] or @FILE (see kiln build --help)")
      ->type_name("SPEC");
  add_tolerance_option(*sub, "--rtol", o->rtol, "--compare-dir: relative tolerance (fp16 engines: try 2e-2)");
  add_tolerance_option(*sub, "--atol", o->atol, "--compare-dir: absolute tolerance, times max(1, max|reference|)");
  sub->add_option("--device", o->device, "Device for --onnx: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))
      ->capture_default_str();
  auto* dir = sub->add_option("--inputs-dir", o->inputs_dir, "Folder with input_<i>.pb (or input_<i>.npy) files")
                  ->type_name("DIR");
  auto* inputs = sub->add_option("--input", o->inputs, "One input as NAME=FILE (.npy or .pb); repeat per input")
                     ->type_name("NAME=FILE");
  dir->excludes(inputs);
  sub->add_option("--output-dir", o->output_dir, "Write each output to DIR/<name>.npy")->type_name("DIR");
  sub->add_option("--compare-dir", o->compare_dir,
                  "Compare each output with DIR/output_<i>.pb (or output_<i>.npy, <name>.npy)")
      ->type_name("DIR");
  sub->add_option("--iterations", o->iterations, "Timed iterations")
      ->check(CLI::Range(1, 1000000000))
      ->capture_default_str();
  sub->add_flag("--dump-profile", o->dump_profile,
                "Print per-layer time over the timed iterations, slowest first (the layer timing disturbs the totals)");
  sub->add_option("--warmup", o->warmup, "Untimed iterations run first")
      ->check(CLI::Range(0, 1000000000))
      ->capture_default_str();
  add_threads_option(*sub, o->threads, "CPU threads (0: the engine's setting)");
  sub->add_flag("--json", o->json, "Print the results as one JSON object on stdout (the report goes to stderr)");
  sub->add_option("--plugins", o->plugins, "Plugin library the engine needs, loaded first (repeatable)")
      ->type_name("LIB.so");
  sub->add_flag("--allow-compiled-plans", o->allow_compiled_plans, kAllowCompiledPlansHelp);
  sub->add_flag("--allow-embedded-plugins", o->allow_embedded_plugins,
                "Load the plugin libraries embedded in the engine (kiln build --embed-plugins) for plugins that are "
                "not registered: runs code from the engine file");
  sub->add_flag("-v,--verbose", o->verbose, "Print the library's progress messages");
  sub->callback([&run, o] { run = [o] { return run_run(*o); }; });
}

}  // namespace kiln::cli
