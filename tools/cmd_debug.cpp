// `kiln debug`: finding where an engine's results go wrong, in the spirit of Polygraphy's
// `run --mark all` and `debug precision`.
//
//  * `kiln debug layers` builds the model twice with every intermediate float tensor marked as an
//    output: the engine under test (--device, --fp16, --layer-precisions) and kiln's CPU float32
//    reference. It runs both on the same inputs and prints, per layer in execution order, the
//    element-wise error statistics of its outputs (max abs, max and mean relative error, share
//    of elements above 1e-5) and the first layer whose output is out of tolerance while its inputs
//    are not: the layer to look at. Marking outputs keeps fusions from crossing them, as in
//    Polygraphy; the model's own outputs are compared too.
//  * `kiln debug precision` looks for layers to keep in float32 so that an --fp16 engine meets a
//    tolerance: it bisects over the layers in execution order (--direction forward: the first k
//    layers in float32; reverse: the last k) for the smallest k that passes, against
//    --compare-dir references or the CPU float32 engine, and prints the --layer-precisions list
//    that `kiln build` / `kiln run` take (--save writes it to a file for "@FILE"). --refine then
//    tries each matrix product / convolution of the list back in fp16, one build each.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "core/tensor_io.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/runtime.h"
#include "core/text.h"

namespace kiln::cli {
namespace {

struct DebugOptions {
  std::string onnx;
  std::string device = "cpu";
  bool fp16 = false;
  std::vector<std::string> layer_precisions;
  std::string inputs_dir;
  std::vector<std::string> inputs;
  std::string compare_dir;
  double rtol = 1e-3;
  double atol = 1e-5;
  double max_rel_err = -1.0;  // < 0: the rtol/atol rule
  std::string direction = "forward";
  std::string save;
  bool refine = false;
  std::vector<std::string> plugins;
  bool verbose = false;
};

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

bool is_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kFloat64; }

// The pass rule of this command: --max-rel-err when given (every element's |a-b| / max(|b|, 1e-3)
// at most that), else `kiln run`'s rtol/atol rule.
CompareResult compare(const DebugOptions& o, const std::string& name, const HostTensor& a, const HostTensor& b) {
  CompareResult r = compare_tensors(name, a, b, o.rtol, o.atol);
  if (o.max_rel_err >= 0.0 && !r.shape_mismatch && r.note.empty()) r.pass = r.max_rel_err <= o.max_rel_err;
  return r;
}

std::string rule(const DebugOptions& o) {
  std::ostringstream s;
  if (o.max_rel_err >= 0.0) {
    s << "|a-b| <= " << o.max_rel_err << "*max(|b|, 1e-3)";
  } else {
    s << "|a-b| <= " << o.rtol << "*|b| + " << o.atol << "*max(1, max|b|)";
  }
  return s.str();
}

std::vector<std::pair<std::string, HostTensor>> build_and_run(const Network& network, DeviceType device, bool fp16,
                                                              const std::vector<InputTensor>& inputs) {
  BuilderConfig config;
  config.device = device;
  config.fp16 = fp16;
  std::map<std::string, Dims> dims;
  for (const auto& in : inputs) dims[in.name] = in.value.dims();
  config.profiles.push_back(profile_from_input_dims(network, dims, "the input files"));
  const std::vector<uint8_t> bytes = Builder().build_serialized(network, config);
  std::shared_ptr<Engine> engine = Runtime().deserialize(bytes.data(), bytes.size(), "the debug engine");
  return run_engine_once(*engine, inputs);
}

std::vector<InputTensor> network_inputs(const Network& network, const DebugOptions& o) {
  std::vector<std::string> names;
  for (int i = 0; i < network.num_inputs(); ++i) names.push_back(network.input(i)->name());
  return load_inputs(names, o.inputs_dir, o.inputs);
}

void check_common(const DebugOptions& o) {
  if (o.inputs_dir.empty() && o.inputs.empty())
    throw UsageError("give the inputs with --inputs-dir DIR (input_<i>.pb files) or --input NAME=FILE");
  if (o.verbose) default_logger().set_min_severity(Severity::kVerbose);
  load_plugins(o.plugins);
}

// ---- kiln debug layers ------------------------------------------------------------------------

int run_layers(const DebugOptions& o) {
  check_common(o);
  std::ostream& out = std::cout;
  std::unique_ptr<Network> network = load_onnx_network(o.onnx);
  const std::vector<InputTensor> inputs = network_inputs(*network, o);
  // Every tensor a layer writes becomes an output (the model's own outputs already are).
  std::set<const Tensor*> outputs;
  for (int i = 0; i < network->num_outputs(); ++i) outputs.insert(network->output(i));
  struct Row {
    std::string layer, type, tensor;
  };
  std::vector<Row> rows;
  std::map<std::string, size_t> row_of;
  std::map<std::string, std::vector<std::string>> inputs_of;  // tensor -> the marked inputs of its layer
  for (Layer* layer : network->topological_order()) {
    if (layer->type() == kLayerConstant) continue;
    std::vector<std::string> layer_inputs;
    for (int k = 0; k < layer->num_inputs(); ++k) {
      if (layer->input(k)) layer_inputs.push_back(layer->input(k)->name());
    }
    for (int k = 0; k < layer->num_outputs(); ++k) {
      Tensor* t = layer->output(k);
      if (!outputs.count(t)) network->mark_output(t);
      outputs.insert(t);
      row_of[t->name()] = rows.size();
      rows.push_back({layer->name(), layer->type(), t->name()});
      inputs_of[t->name()] = layer_inputs;
    }
  }
  std::unique_ptr<Network> reference_net = network->clone();
  const int pinned = apply_layer_precisions(*network, o.layer_precisions);
  const DeviceType device = parse_device_type(o.device);
  out << "model '" << o.onnx << "': " << rows.size()
      << " layer output(s) marked; engine under test: " << to_string(device) << (o.fp16 ? " fp16" : " fp32")
      << (pinned ? ", " + std::to_string(pinned) + " layer(s) set by --layer-precisions" : std::string())
      << "; reference: cpu fp32\n"
      << std::flush;
  const auto test = build_and_run(*network, device, o.fp16, inputs);
  const auto reference = build_and_run(*reference_net, DeviceType::kCPU, false, inputs);
  std::map<std::string, const HostTensor*> ref_of;
  for (const auto& [name, value] : reference) ref_of[name] = &value;

  std::map<std::string, CompareResult> results;
  for (const auto& [name, value] : test) {
    auto r = ref_of.find(name);
    if (r == ref_of.end() || !is_float(value.type()) || !is_float(r->second->type())) continue;
    results[name] = compare(o, name, value, *r->second);
  }
  out << "pass: " << rule(o) << "\n";
  out << std::left << std::setw(5) << "#" << std::setw(10) << "result" << std::setw(10) << "max abs" << std::setw(10)
      << "max rel" << std::setw(10) << "mean rel" << std::setw(9) << ">1e-5"
      << "layer (type) -> output\n";
  int failing = 0;
  std::vector<std::string> roots;  // failing layers whose compared inputs pass: where errors start
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = results.find(rows[i].tensor);
    if (it == results.end()) continue;  // not a float tensor
    const CompareResult& r = it->second;
    std::ostringstream share;
    share << std::fixed << std::setprecision(1) << 100.0 * r.share_rel_above_1e5 << "%";
    out << std::left << std::setw(5) << i << std::setw(10) << (r.pass ? "ok" : "FAIL") << std::setw(10)
        << sci(r.max_abs_err) << std::setw(10) << sci(r.max_rel_err) << std::setw(10) << sci(r.mean_rel_err)
        << std::setw(9) << share.str() << rows[i].layer << " (" << rows[i].type << ") -> " << rows[i].tensor;
    if (!r.note.empty()) out << "  [" << r.note << "]";
    out << "\n";
    if (r.pass) continue;
    ++failing;
    bool inputs_pass = true;
    for (const std::string& in : inputs_of[rows[i].tensor]) {
      auto ri = results.find(in);
      if (ri != results.end() && !ri->second.pass) inputs_pass = false;
    }
    if (inputs_pass) roots.push_back(rows[i].layer + " (" + rows[i].type + "), output " + quote(rows[i].tensor));
  }
  if (failing == 0) {
    out << "every compared layer output is within tolerance (" << results.size() << " tensors)\n";
    return kExitOk;
  }
  out << failing << " of " << results.size() << " compared layer output(s) out of tolerance\n";
  if (!roots.empty()) {
    out << "first layer out of tolerance whose inputs are within it: " << roots.front() << "\n";
    constexpr size_t kMaxListed = 8;
    for (size_t i = 1; i < roots.size() && i < kMaxListed; ++i)
      out << "  another error starts at: " << roots[i] << "\n";
    if (roots.size() > kMaxListed) out << "  (and " << roots.size() - kMaxListed << " more)\n";
    out << "  (errors downstream of these may only be theirs carried along; for --fp16 engines, "
           "`kiln debug precision` finds layers to keep in fp32)\n";
  }
  return kExitMismatch;
}

// ---- kiln debug precision ---------------------------------------------------------------------

struct Trial {
  bool pass = false;
  double worst_rel = 0.0;
  std::string worst_output;
};

int run_precision(const DebugOptions& o) {
  check_common(o);
  std::ostream& out = std::cout;
  if (!o.layer_precisions.empty())
    throw UsageError("kiln debug precision finds --layer-precisions itself; drop the flag");
  std::unique_ptr<Network> base = load_onnx_network(o.onnx);
  const std::vector<InputTensor> inputs = network_inputs(*base, o);
  const DeviceType device = parse_device_type(o.device);

  // References: the files, else the CPU float32 engine.
  std::vector<std::pair<std::string, HostTensor>> reference;
  if (!o.compare_dir.empty()) {
    require_directory(o.compare_dir, "--compare-dir folder");
    for (int i = 0; i < base->num_outputs(); ++i) {
      const std::string name = base->output(i)->name();
      const std::string file = find_reference(o.compare_dir, static_cast<size_t>(i), name);
      if (file.empty())
        throw Error("--compare-dir " + quote(o.compare_dir) + " has no reference for output " + quote(name) +
                    " (output_" + std::to_string(i) + ".pb, output_" + std::to_string(i) + ".npy or " +
                    sanitize_file_name(name) + ".npy)");
      reference.emplace_back(name, load_tensor_file(file));
    }
  } else {
    reference = build_and_run(*base, DeviceType::kCPU, false, inputs);
  }

  // Candidates: the layers that compute, in execution order.
  std::vector<std::string> candidates;
  for (Layer* layer : base->topological_order()) {
    if (layer->type() != kLayerConstant) candidates.push_back(layer->name());
  }
  if (o.direction == "reverse") std::reverse(candidates.begin(), candidates.end());
  const int n = static_cast<int>(candidates.size());

  // Builds and runs the fp16 engine with `fp32` kept in float32; `what` describes it in the log.
  auto run_trial = [&](const std::vector<std::string>& fp32, const std::string& what) {
    std::unique_ptr<Network> net = base->clone();
    for (const std::string& name : fp32) net->find_layer(name)->set_precision(DataType::kFloat32);
    const auto outputs = build_and_run(*net, device, true, inputs);
    Trial t;
    t.pass = true;
    for (size_t i = 0; i < outputs.size() && i < reference.size(); ++i) {
      const CompareResult r = compare(o, outputs[i].first, outputs[i].second, reference[i].second);
      t.pass = t.pass && r.pass;
      if (r.max_rel_err >= t.worst_rel) {
        t.worst_rel = r.max_rel_err;
        t.worst_output = r.name;
      }
    }
    out << "  " << what << ": max rel err " << sci(t.worst_rel) << " ('" << t.worst_output << "')  "
        << (t.pass ? "PASS" : "FAIL") << "\n"
        << std::flush;
    return t;
  };
  auto trial = [&](int k) {
    std::ostringstream what;
    what << std::setw(4) << k << " of " << n << " layer(s) in fp32";
    if (k)
      what << " (" << (o.direction == "reverse" ? "last: " : "through: ") << candidates[static_cast<size_t>(k - 1)]
           << ")";
    return run_trial(std::vector<std::string>(candidates.begin(), candidates.begin() + k), what.str());
  };

  out << "model '" << o.onnx << "' on " << to_string(device) << " with --fp16; pass: " << rule(o)
      << "; reference: " << (o.compare_dir.empty() ? std::string("cpu fp32 engine") : quote(o.compare_dir)) << "; " << n
      << " layers, bisecting from the " << (o.direction == "reverse" ? "end" : "start") << "\n";
  int found = -1;
  if (trial(0).pass) {
    found = 0;
  } else if (!trial(n).pass) {
    out << "with every layer in fp32 the outputs are still out of tolerance: the mismatch is not a matter of "
           "precision (look for it with `kiln debug layers` without --fp16, or loosen the tolerance)\n";
    return kExitMismatch;
  } else {
    int lo = 0, hi = n;  // lo fails, hi passes
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (trial(mid).pass ? hi : lo) = mid;
    }
    found = hi;
  }
  std::vector<std::string> fp32(candidates.begin(), candidates.begin() + found);
  if (o.refine && found > 0) {
    // The layers where float16 pays (matrix products, convolutions) go back to fp16 one at a
    // time, in execution order, where the outputs still pass without them.
    static const std::set<std::string> kHeavy = {kLayerMatrixMultiply, kLayerGemm, kLayerConvolution,
                                                 kLayerDeconvolution};
    std::vector<std::string> heavy;
    for (Layer* layer : base->topological_order()) {
      if (kHeavy.count(layer->type()) && std::find(fp32.begin(), fp32.end(), layer->name()) != fp32.end())
        heavy.push_back(layer->name());
    }
    out << "refining: " << heavy.size() << " matrix product / convolution layer(s) among them tried back in fp16\n";
    for (const std::string& name : heavy) {
      std::vector<std::string> without;
      for (const std::string& f : fp32) {
        if (f != name) without.push_back(f);
      }
      if (run_trial(without, "" + quote(name) + " in fp16").pass) fp32 = std::move(without);
    }
  }
  std::string spec;
  for (size_t i = 0; i < fp32.size(); ++i) spec += (i ? "," : "") + fp32[i] + ":fp32";
  if (found == 0) {
    out << "the fp16 engine passes as it is: no layer needs fp32\n";
  } else {
    out << fp32.size() << " of " << n << " layer(s) in fp32 make the fp16 engine pass (bisection assumes that keeping "
        << "more layers in fp32 never hurts)\n";
    out << "--layer-precisions " << (o.save.empty() ? spec : "@" + o.save) << "\n";
  }
  if (!o.save.empty()) {
    write_file_bytes(o.save, std::vector<uint8_t>(spec.begin(), spec.end()), "--save file");
    out << "saved the list to '" << o.save << "'\n";
  }
  return kExitOk;
}

void add_common(CLI::App* sub, DebugOptions& o) {
  sub->add_option("--onnx", o.onnx, "ONNX model")->required()->type_name("FILE");
  auto* dir = sub->add_option("--inputs-dir", o.inputs_dir, "Folder with input_<i>.pb (or input_<i>.npy) files")
                  ->type_name("DIR");
  auto* inputs = sub->add_option("--input", o.inputs, "One input as NAME=FILE (.npy or .pb); repeat per input")
                     ->type_name("NAME=FILE");
  dir->excludes(inputs);
  sub->add_option("--device", o.device, "Device of the engine under test: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))
      ->capture_default_str();
  add_tolerance_option(*sub, "--rtol", o.rtol, "Relative tolerance, as kiln run's (fp16: try 2e-2)");
  add_tolerance_option(*sub, "--atol", o.atol, "Absolute tolerance, times max(1, max|reference|)");
  sub->add_option("--max-rel-err", o.max_rel_err,
                  "Instead of --rtol/--atol: pass when every element's |a-b| / max(|b|, 1e-3) is at most this")
      ->type_name("FLOAT");
  sub->add_option("--plugins", o.plugins, "Plugin library the model needs, loaded first (repeatable)")
      ->type_name("LIB.so");
  sub->add_flag("-v,--verbose", o.verbose, "Print the library's progress messages");
}

}  // namespace

void setup_debug_command(CLI::App& parent, std::function<int()>& run) {
  CLI::App* debug = parent.add_subcommand(
      "debug",
      "Find where an engine's results go wrong: `kiln debug layers` compares every layer's output with kiln's "
      "CPU float32 reference; `kiln debug precision` finds the layers an fp16 engine must keep in fp32 to meet a "
      "tolerance.");
  debug->require_subcommand(1);
  debug->footer(
      "Examples:\n"
      "  kiln debug layers --onnx model.onnx --inputs-dir test_data_set_0 --device cuda --fp16 --rtol 2e-2\n"
      "  kiln debug precision --onnx model.onnx --inputs-dir test_data_set_0 --compare-dir test_data_set_0 "
      "--device cuda --max-rel-err 2e-2 --save fp32_layers.txt\n"
      "  kiln build --onnx model.onnx --fp16 --layer-precisions @fp32_layers.txt --save-engine model.kiln");

  auto lo = std::make_shared<DebugOptions>();
  CLI::App* layers = debug->add_subcommand(
      "layers",
      "Compare every layer's output of the engine under test with kiln's CPU float32 reference on the same inputs "
      "(every intermediate tensor is marked as an output in both, as Polygraphy's --mark all: fusions do not cross "
      "them) and name the first layer out of tolerance whose inputs are within it. Exits 3 when some layer is out "
      "of tolerance.");
  add_common(layers, *lo);
  layers->add_flag("--fp16", lo->fp16, "Build the engine under test with fp16 kernels allowed");
  layers
      ->add_option("--layer-precisions", lo->layer_precisions,
                   "Per-layer precision of the engine under test "
                   "(NAME:fp32|fp16[,...] or @FILE)")
      ->type_name("SPEC");
  layers->callback([&run, lo] { run = [lo] { return run_layers(*lo); }; });

  auto po = std::make_shared<DebugOptions>();
  CLI::App* precision = debug->add_subcommand(
      "precision",
      "Find layers to keep in fp32 so that an fp16 engine meets the tolerance: bisects over the layers in execution "
      "order for the fewest (the first k, or the last k with --direction reverse) that make the outputs pass, "
      "against --compare-dir references or kiln's CPU float32 engine, and prints the --layer-precisions list for "
      "kiln build / kiln run. Exits 3 when even an all-fp32 engine fails.");
  add_common(precision, *po);
  precision
      ->add_option("--compare-dir", po->compare_dir,
                   "References output_<i>.pb (or .npy); default: the CPU float32 engine's outputs")
      ->type_name("DIR");
  precision->add_option("--direction", po->direction, "forward: keep the first layers in fp32; reverse: the last")
      ->check(CLI::IsMember({"forward", "reverse"}))
      ->capture_default_str();
  precision->add_flag("--refine", po->refine,
                      "After bisecting, try each MatMul/Gemm/Convolution/Deconvolution of the list back in fp16 and "
                      "keep it there where the outputs still pass (one build per layer)");
  precision->add_option("--save", po->save, "Write the list to FILE (use it as --layer-precisions @FILE)")
      ->type_name("FILE");
  precision->callback([&run, po] { run = [po] { return run_precision(*po); }; });
}

}  // namespace kiln::cli
