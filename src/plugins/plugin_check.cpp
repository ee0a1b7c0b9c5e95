// The plugin conformance suite (see plugin_check.h): the checks, in the order they are reported,
// and the report. Every check drives the plugin directly through the Plugin interface, the way
// the builder and an execution context do, with buffers from plugin_check_runner.h. The oracle is
// the plugin itself on the CPU in float32 linear format: the suite cannot know the math, but it
// can hold every other answer and kernel to the plugin's simplest one.
#include "src/plugins/plugin_check.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <ostream>
#include <random>
#include <sstream>

#include "kiln/error.h"
#include "src/plugins/plugin_calls.h"
#include "src/plugins/plugin_check_runner.h"
#include "src/core/text.h"

namespace kiln {

using plugin_check::Combination;
using plugin_check::compare;
using plugin_check::is_float;
using plugin_check::RunResult;
using plugin_check::RunSpec;
using plugin_check::sci;
using plugin_check::Slot;
using plugin_check::Stats;
using plugin_check::stats_text;
using plugin_check::tolerance_of;

namespace {

// ---- small helpers ---------------------------------------------------------------------------

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt32,
                               DataType::kInt64,   DataType::kInt8,    DataType::kBool};
constexpr TensorFormat kFormats[] = {TensorFormat::kLinear, TensorFormat::kChannelsLast};
constexpr size_t kMaxCombinations = 48;
constexpr uint8_t kPoisonA = 0xA5, kPoisonB = 0x5A;

// Input shapes per rank: batch 1 and > 1, odd extents (13, 127), every axis varying, so that a
// dim fixed at one value shows.
const std::vector<Dims>& candidate_shapes() {
  static const std::vector<Dims> shapes = {
      Dims{13},           Dims{127},           Dims{1, 13},         Dims{3, 127},
      Dims{1, 3, 13},     Dims{2, 5, 127},     Dims{1, 3, 13, 13},  Dims{2, 3, 13, 7},
      Dims{3, 2, 5, 127}, Dims{1, 2, 3, 5, 7}, Dims{2, 3, 5, 7, 13}};
  return shapes;
}

std::string dims_list(const std::vector<Dims>& dims) {
  std::string s;
  for (const auto& d : dims) s += (s.empty() ? "" : ", ") + d.to_string();
  return s;
}

// A created plugin, terminated when dropped (if initialize() succeeded).
struct Instance {
  std::unique_ptr<GuardedPlugin> plugin;
  bool initialized = false;
  Instance() = default;
  Instance(Instance&&) = default;
  Instance& operator=(Instance&& other) noexcept {
    reset();
    plugin = std::move(other.plugin);
    initialized = other.initialized;
    other.initialized = false;
    return *this;
  }
  ~Instance() { reset(); }
  void reset() {
    if (plugin && initialized) plugin_check::run_guarded([this] { plugin->terminate(); });
    initialized = false;
    plugin.reset();
  }
  // Takes a made plugin, sets the device and initializes it; "" or what went wrong.
  std::string adopt(std::unique_ptr<GuardedPlugin> p, DeviceType device) {
    reset();
    if (!p) return "returned no plugin";
    plugin = std::move(p);
    plugin->object().set_target_device(device);
    const std::string problem = plugin_check::run_guarded([&] { plugin->initialize(); });
    if (!problem.empty()) return "initialize() " + problem;
    initialized = true;
    return "";
  }
};

// What the suite learned for one input shape.
struct ShapeCase {
  std::vector<Dims> in_dims, out_dims;
  std::string rejected;                    // why this shape is not usable ("" when it is)
  std::vector<Combination> device_combos;  // claimed on the checked device
  Combination reference;                   // first claimed on the CPU (empty: none)
};

// Two runs of one combination compared with each other and with the reference.
struct Observed {
  std::string problem;  // a FAIL message ("" when the run itself was fine)
  RunResult first;      // the first run (outputs empty when it failed outright)
};

struct Comparison {
  bool ok = true;
  std::string text;
};

// "1 element", "546 elements".
std::string count_of(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

class Checker {
 public:
  Checker(const PluginCreator& creator, const PluginCheckOptions& options) : creator_(creator), options_(options) {}

  PluginCheckReport run();

 private:
  void add(const std::string& name, CheckStatus status, const std::string& message) {
    report_.checks.push_back(PluginCheckResult{name, status, message});
  }
  std::string create_into(Instance& instance, const PluginFieldCollection& fields, DeviceType device);
  bool setup();
  int detect_inputs(GuardedPlugin& plugin);
  ShapeCase make_case(const Dims& shape);
  std::vector<Combination> claimed(const GuardedPlugin& plugin, const ShapeCase& c) const;
  std::vector<std::vector<double>> inputs_for(const ShapeCase& c, const Combination& combo, uint64_t seed) const;
  RunSpec spec_for(const ShapeCase& c, const Combination& combo, const std::vector<std::vector<double>>& inputs) const;
  Observed observe(GuardedPlugin& plugin, const ShapeCase& c, const Combination& combo,
                   const std::vector<std::vector<double>>& inputs, const std::string& label);
  Comparison compare_with_reference(const ShapeCase& c, const Combination& combo,
                                    const std::vector<std::vector<double>>& inputs, const RunResult& run);
  std::string bit_exact(const RunResult& a, const RunResult& b) const;
  void check_shapes();
  void check_dynamic_dims();
  void check_combinations();
  void check_fields_round_trip();
  void check_bytes_round_trip();
  void check_clone();
  void check_capture();
  void report_aggregates();

  const PluginCreator& creator_;
  PluginCheckOptions options_;
  PluginFieldCollection fields_;
  PluginCheckReport report_;
  std::unique_ptr<plugin_check::CheckDevice> device_, host_;
  Instance main_, reference_;
  int num_inputs_ = 0, num_outputs_ = 0;
  std::vector<ShapeCase> cases_;
  const ShapeCase* main_case_ = nullptr;  // the shape the type/format and round-trip checks use
  std::vector<std::vector<double>> main_inputs_;
  RunResult main_run_;  // the original plugin's result on main_case_
  // Aggregated over every run.
  std::string nonfinite_, nondeterministic_, scratch_;
  int64_t scratch_extent_ = 0;
  size_t scratch_declared_ = 0;
  int runs_ = 0;
};

// ---- setup -----------------------------------------------------------------------------------

std::string Checker::create_into(Instance& instance, const PluginFieldCollection& fields, DeviceType device) {
  std::unique_ptr<GuardedPlugin> plugin;
  const std::string problem =
      plugin_check::run_guarded([&] { plugin = creator_create(creator_, "plugin_check", fields, ""); });
  if (!problem.empty()) return "create() " + problem;
  return instance.adopt(std::move(plugin), device);
}

int Checker::detect_inputs(GuardedPlugin& plugin) {
  for (int n = 1; n <= 4; ++n) {
    for (const DataType type : kTypes) {
      bool ok = false;
      plugin_check::run_guarded([&] {
        const auto types = plugin.output_types(std::vector<DataType>(static_cast<size_t>(n), type));
        if (static_cast<int>(types.size()) != num_outputs_) return;
        ExprBuilder exprs;
        std::vector<DimsExprs> ins(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i)
          for (int k = 0; k < 4; ++k) ins[static_cast<size_t>(i)].d.push_back(exprs.input_dim(i, k));
        for (int o = 0; o < num_outputs_; ++o) plugin.output_dims(o, ins, exprs);
        ok = true;
      });
      if (ok) return n;
    }
  }
  return 0;
}

bool Checker::setup() {
  // Required fields the user gave no value take the creator's example values (example_fields);
  // --fields overrides them.
  PluginFieldCollection given = options_.fields;
  const PluginFieldCollection examples = creator_example_fields(creator_, "kiln plugin check");
  for (const PluginField& f : examples.all()) {
    if (!given.find(f.name)) given.add(f);
  }
  PluginFieldCollection resolved;
  try {
    resolved = PluginRegistry::instance().resolve_fields(creator_, given, "kiln plugin check --fields");
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find("needs field") == std::string::npos) throw;
    throw Error(msg +
                "; give it a value with --fields NAME=VALUE (a plugin's creator can declare example values "
                "with example_fields())");
  }
  fields_ = resolved;
  report_.fields = plugin_fields_to_string(resolved);
  if (!plugin_check_device_available(options_.device, nullptr)) {
    std::string why;
    plugin_check_device_available(options_.device, &why);
    throw Error("kiln plugin check: cannot run on " + std::string(to_string(options_.device)) + ": " + why);
  }
  host_ = plugin_check::make_host_device();
#ifdef KILN_HAVE_CUDA
  if (options_.device == DeviceType::kCUDA) {
    std::string why;
    device_ = plugin_check::make_cuda_device(&why);
    if (!device_) throw Error("kiln plugin check: cannot run on cuda: " + why);
  }
#endif
  if (!device_) device_ = plugin_check::make_host_device();

  std::string problem = create_into(main_, resolved, options_.device);
  if (problem.empty()) problem = create_into(reference_, resolved, DeviceType::kCPU);
  if (!problem.empty()) {
    add("create", CheckStatus::kFail,
        "the creator could not make the plugin from fields {" + report_.fields + "}: " + problem);
    return false;
  }
  GuardedPlugin& p = *main_.plugin;
  std::string identity;
  GuardedPlugin::Identity id;
  std::string problem_asking = plugin_check::run_guarded([&] {
    id = p.identity();
    num_outputs_ = p.num_outputs();
  });
  if (!problem_asking.empty()) {
    add("create", CheckStatus::kFail, "type()/version()/plugin_namespace()/num_outputs() " + problem_asking);
    return false;
  }
  const CreatorIdentity made_by = creator_identity(creator_);
  if (id.type != made_by.name)
    identity += "type() is " + quote(id.type) + " but the creator is " + quote(made_by.name) + "; ";
  if (id.version != made_by.version)
    identity += "version() is " + quote(id.version) + " but the creator's is " + quote(made_by.version) + "; ";
  if (id.plugin_namespace != made_by.plugin_namespace)
    identity += "plugin_namespace() is " + quote(id.plugin_namespace) + " but the creator's is " +
                quote(made_by.plugin_namespace) + "; ";
  if (num_outputs_ < 1) identity += "num_outputs() is " + std::to_string(num_outputs_) + "; ";
  if (!identity.empty()) {
    add("create", CheckStatus::kFail,
        identity + "engines find a plugin's creator by the plugin's own type/version/namespace, so they must match");
    return false;
  }
  num_inputs_ = options_.num_inputs > 0 ? options_.num_inputs : detect_inputs(p);
  if (num_inputs_ < 1) {
    add("create", CheckStatus::kFail,
        "output_types()/output_dims() throw for 1 to 4 inputs of every type; cannot tell how many inputs the plugin "
        "takes (pass --inputs N)");
    return false;
  }
  report_.num_inputs = num_inputs_;
  report_.num_outputs = num_outputs_;
  add("create", CheckStatus::kPass,
      "made by the creator, initialize() = 0; " + std::to_string(num_inputs_) + " input(s), " +
          std::to_string(num_outputs_) + " output(s)");
  return true;
}

// ---- what the plugin accepts -------------------------------------------------------------------

std::vector<Combination> Checker::claimed(const GuardedPlugin& plugin, const ShapeCase& c) const {
  const int total = num_inputs_ + num_outputs_;
  std::vector<Combination> found;
  std::vector<PluginTensorDesc> io;
  for (const auto& d : c.in_dims) io.push_back(PluginTensorDesc{DataType::kFloat32, TensorFormat::kLinear, d});
  for (const auto& d : c.out_dims) io.push_back(PluginTensorDesc{DataType::kFloat32, TensorFormat::kLinear, d});
  std::vector<DataType> out_types;
  // Depth-first over positions, each asked given the choices before it, as the builder does.
  std::function<void(int)> visit = [&](int pos) {
    if (found.size() >= kMaxCombinations) return;
    if (pos == total) {
      Combination combo;
      for (const auto& d : io) combo.push_back(Slot{d.type, d.format});
      found.push_back(combo);
      return;
    }
    if (pos == num_inputs_) {
      std::vector<DataType> in_types;
      for (int i = 0; i < num_inputs_; ++i) in_types.push_back(io[static_cast<size_t>(i)].type);
      const std::string problem = plugin_check::run_guarded([&] { out_types = plugin.output_types(in_types); });
      if (!problem.empty() || static_cast<int>(out_types.size()) != num_outputs_) return;
    }
    const std::vector<DataType> types = pos < num_inputs_
                                            ? std::vector<DataType>(std::begin(kTypes), std::end(kTypes))
                                            : std::vector<DataType>{out_types[static_cast<size_t>(pos - num_inputs_)]};
    for (const DataType t : types) {
      for (const TensorFormat f : kFormats) {
        io[static_cast<size_t>(pos)].type = t;
        io[static_cast<size_t>(pos)].format = f;
        bool yes = false;
        plugin_check::run_guarded(
            [&] { yes = plugin.supports_format_combination(pos, io, num_inputs_, num_outputs_); });
        if (yes) visit(pos + 1);
      }
    }
    io[static_cast<size_t>(pos)] =
        PluginTensorDesc{DataType::kFloat32, TensorFormat::kLinear, io[static_cast<size_t>(pos)].dims};
  };
  visit(0);
  return found;
}

ShapeCase Checker::make_case(const Dims& shape) {
  ShapeCase c;
  c.in_dims.assign(static_cast<size_t>(num_inputs_), shape);
  const std::string problem = plugin_check::run_guarded([&] {
    ExprBuilder exprs;
    std::vector<DimsExprs> ins(c.in_dims.size());
    for (size_t i = 0; i < ins.size(); ++i)
      for (int k = 0; k < shape.rank(); ++k) ins[i].d.push_back(exprs.input_dim(static_cast<int>(i), k));
    for (int o = 0; o < num_outputs_; ++o) {
      const DimsExprs out = main_.plugin->output_dims(o, ins, exprs);
      Dims dims;
      for (int k = 0; k < out.rank(); ++k) {
        const DimExpr* e = out.d[static_cast<size_t>(k)];
        if (e == nullptr)
          throw Error("output_dims(" + std::to_string(o) + ") has a null expression at axis " + std::to_string(k));
        const int64_t v = e->evaluate(c.in_dims);
        if (v < 0)
          throw Error("output_dims(" + std::to_string(o) + ") axis " + std::to_string(k) + " = " + e->to_string() +
                      " is " + std::to_string(v));
        dims.push_back(v);
      }
      c.out_dims.push_back(dims);
    }
  });
  if (!problem.empty()) {
    c.rejected = "output_dims() for rank-" + std::to_string(shape.rank()) + " inputs " + problem;
    return c;
  }
  c.device_combos = claimed(*main_.plugin, c);
  const std::vector<Combination> cpu = claimed(*reference_.plugin, c);
  if (!cpu.empty()) c.reference = cpu.front();
  if (c.device_combos.empty()) {
    c.rejected = "supports_format_combination() refuses every type and format for rank-" +
                 std::to_string(shape.rank()) + " inputs on " + to_string(options_.device);
  }
  return c;
}

// Uniform in [-8, 8], rounded to what both the tested and the reference slot can hold, so that
// the comparison measures the kernel and not the rounding of its inputs.
std::vector<std::vector<double>> Checker::inputs_for(const ShapeCase& c, const Combination& combo,
                                                     uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> values;
  for (int i = 0; i < num_inputs_; ++i) {
    const auto n = static_cast<size_t>(c.in_dims[static_cast<size_t>(i)].volume());
    std::vector<double> v(n);
    for (auto& x : v) {
      const double u = static_cast<double>(rng() >> 11) * 0x1p-53;
      x = plugin_check::quantize(-8.0 + 16.0 * u, combo[static_cast<size_t>(i)].type);
      if (!c.reference.empty()) x = plugin_check::quantize(x, c.reference[static_cast<size_t>(i)].type);
    }
    values.push_back(std::move(v));
  }
  return values;
}

RunSpec Checker::spec_for(const ShapeCase& c, const Combination& combo,
                          const std::vector<std::vector<double>>& inputs) const {
  RunSpec spec;
  spec.in_dims = c.in_dims;
  spec.out_dims = c.out_dims;
  spec.combo = combo;
  spec.inputs = inputs;
  return spec;
}

// ---- running and judging one combination -------------------------------------------------------

// Runs twice (different poison, 1 then 2 threads): an element still holding the poison in both
// runs was not written. Records NaN/Inf, run-to-run differences and scratch use for the
// aggregate rows; returns the shape/bounds problem for this row.
Observed Checker::observe(GuardedPlugin& plugin, const ShapeCase& c, const Combination& combo,
                          const std::vector<std::vector<double>>& inputs, const std::string& label) {
  Observed ob;
  RunSpec spec = spec_for(c, combo, inputs);
  spec.poison = kPoisonA;
  RunResult a = plugin_check::run_plugin(plugin, *device_, spec);
  if (!a.error.empty()) {
    ob.problem = a.error;
    return ob;
  }
  spec.poison = kPoisonB;
  spec.num_threads = 2;
  RunResult b = plugin_check::run_plugin(plugin, *device_, spec);
  if (!b.error.empty()) {
    ob.problem = "the second run: " + b.error;
    return ob;
  }
  runs_ += 2;
  std::string problem;
  for (int o = 0; o < num_outputs_; ++o) {
    const auto k = static_cast<size_t>(o);
    const Dims& dims = c.out_dims[k];
    const size_t size = data_type_size(combo[static_cast<size_t>(num_inputs_ + o)].type);
    const int64_t n = dims.volume();
    int64_t unwritten = 0, first_unwritten = -1;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* pa = a.raw[k].data() + static_cast<size_t>(i) * size;
      const uint8_t* pb = b.raw[k].data() + static_cast<size_t>(i) * size;
      const bool still = std::all_of(pa, pa + size, [](uint8_t x) { return x == kPoisonA; }) &&
                         std::all_of(pb, pb + size, [](uint8_t x) { return x == kPoisonB; });
      if (still && unwritten++ == 0) first_unwritten = i;
    }
    const std::string says = "output_dims says output " + std::to_string(o) + " is " + dims.to_string() + " (" +
                             count_of(n, "element") + ", " + count_of(n * static_cast<int64_t>(size), "byte") + ")";
    const int64_t after = std::max(a.bytes_changed_after[k], b.bytes_changed_after[k]);
    const int64_t before = std::max(a.bytes_changed_before[k], b.bytes_changed_before[k]);
    if (unwritten > 0) {
      const int64_t written = n - unwritten;
      std::string hint = " (does output_dims describe what enqueue computes?)";
      if (dims.rank() > 0 && dims[0] > 1 && written * dims[0] == n) hint = " (element count ignores the batch?)";
      problem += says + " but the kernel wrote " + std::to_string(written) + " of them (" + std::to_string(unwritten) +
                 (unwritten == 1 ? " still holds" : " still hold") + " the poison, the first at index " +
                 std::to_string(first_unwritten) + ")" + hint + "; ";
    }
    if (after > 0) {
      problem += says + " but the kernel wrote " + std::to_string(after) + " bytes past its end" +
                 (size < 4 ? " (does the kernel treat " +
                                 std::string(to_string(combo[static_cast<size_t>(num_inputs_ + o)].type)) +
                                 " data as a wider type?)"
                           : " (element count too large?)") +
                 "; ";
    }
    if (before > 0) problem += says + " but the kernel wrote " + std::to_string(before) + " bytes before its start; ";
    // Aggregates, over outputs the kernel wrote exactly (poison differs between the runs).
    if (unwritten > 0 || after > 0 || before > 0) continue;
    if (a.raw[k] != b.raw[k] && nondeterministic_.empty()) {
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i)
        differ += std::memcmp(a.raw[k].data() + static_cast<size_t>(i) * size,
                              b.raw[k].data() + static_cast<size_t>(i) * size, size) != 0;
      nondeterministic_ = label + ": two runs with the same inputs (1 and 2 threads) differ in " +
                          std::to_string(differ) + " of " + std::to_string(n) + " elements of output " +
                          std::to_string(o);
    }
    if (is_float(combo[static_cast<size_t>(num_inputs_ + o)].type) && nonfinite_.empty()) {
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(a.outputs[k][static_cast<size_t>(i)]) && bad++ == 0) first = i;
      }
      if (bad > 0) {
        nonfinite_ = label + ": output " + std::to_string(o) + " has " + std::to_string(bad) + " NaN/Inf of " +
                     std::to_string(n) + " (first at element " + std::to_string(first) +
                     ") for finite inputs in [-8, 8]";
      }
    }
  }
  for (int i = 0; i < num_inputs_; ++i) {
    if (a.input_modified[static_cast<size_t>(i)])
      problem +=
          "enqueue modified input " + std::to_string(i) + " (inputs are read-only; use the workspace for scratch); ";
  }
  const int64_t extent = std::max(a.scratch_extent, b.scratch_extent);
  if ((extent > 0 || a.scratch_before || b.scratch_before) && scratch_.empty()) {
    scratch_declared_ = a.workspace_size;
    scratch_extent_ = extent;
    scratch_ = label + (a.scratch_before || b.scratch_before ? " (and it wrote before the workspace pointer)" : "");
  }
  if (!problem.empty()) problem.resize(problem.size() - 2);
  ob.problem = problem;
  ob.first = std::move(a);
  return ob;
}

Comparison Checker::compare_with_reference(const ShapeCase& c, const Combination& combo,
                                           const std::vector<std::vector<double>>& inputs, const RunResult& run) {
  RunSpec spec = spec_for(c, c.reference, inputs);
  const RunResult ref = plugin_check::run_plugin(*reference_.plugin, *host_, spec);
  if (!ref.error.empty())
    return {false,
            "the CPU reference run (" + plugin_check::to_string(c.reference, num_inputs_) + ") failed: " + ref.error};
  Comparison result;
  for (int o = 0; o < num_outputs_; ++o) {
    const auto k = static_cast<size_t>(o);
    const DataType type = combo[static_cast<size_t>(num_inputs_ + o)].type;
    const Stats s = compare(run.outputs[k], ref.outputs[k], type);
    result.text +=
        (o ? "; " : "") + std::string(num_outputs_ > 1 ? "output " + std::to_string(o) + ": " : "") + stats_text(s);
    if (s.violations == 0) continue;
    const size_t first = static_cast<size_t>(s.first_violation);
    std::ostringstream m;
    m << " (tolerance " << tolerance_of(type) << "): " << count_of(s.violations, "element") << " of " << s.count
      << " off, the first at index " << first << ": " << run.outputs[k][first] << " instead of "
      << ref.outputs[k][first];
    if (type == DataType::kFloat16) m << " (does the float16 kernel read or write the buffers as float32?)";
    result.text += m.str();
    result.ok = false;
  }
  return result;
}

std::string Checker::bit_exact(const RunResult& a, const RunResult& b) const {
  if (!b.error.empty()) return b.error;
  for (size_t k = 0; k < a.raw.size(); ++k) {
    if (a.raw[k] == b.raw[k]) continue;
    int64_t differ = 0;
    double max_abs = 0;
    for (size_t i = 0; i < a.outputs[k].size(); ++i) {
      if (a.outputs[k][i] != b.outputs[k][i] && !(std::isnan(a.outputs[k][i]) && std::isnan(b.outputs[k][i]))) {
        ++differ;
        max_abs = std::max(max_abs, std::fabs(a.outputs[k][i] - b.outputs[k][i]));
      }
    }
    return "output " + std::to_string(k) + " differs in " + std::to_string(differ) + " of " +
           std::to_string(a.outputs[k].size()) + " elements (max abs diff " + sci(max_abs) + ")";
  }
  return "";
}

// ---- the checks --------------------------------------------------------------------------------

void Checker::check_shapes() {
  uint64_t seed = options_.seed;
  for (const Dims& shape : candidate_shapes()) {
    cases_.push_back(make_case(shape));
  }
  for (ShapeCase& c : cases_) {
    const std::string name = "shape " + dims_list(c.in_dims);
    if (!c.rejected.empty()) {
      add(name, CheckStatus::kSkip, "not accepted: " + c.rejected);
      continue;
    }
    const Combination& combo = c.device_combos.front();
    const auto inputs = inputs_for(c, combo, ++seed);
    const Observed ob = observe(*main_.plugin, c, combo, inputs, name);
    if (!ob.problem.empty()) {
      add(name, CheckStatus::kFail, plugin_check::to_string(combo, num_inputs_) + ": " + ob.problem);
      continue;
    }
    Comparison values{true, "none: the plugin accepts nothing on the CPU"};
    if (!c.reference.empty()) values = compare_with_reference(c, combo, inputs, ob.first);
    add(name, values.ok ? CheckStatus::kPass : CheckStatus::kFail,
        "-> " + dims_list(c.out_dims) + " (" + plugin_check::to_string(combo, num_inputs_) +
            "): every output element written, nothing outside; vs the CPU result: " + values.text);
  }
  // The shape the remaining checks use: rank 4 with batch > 1 when accepted.
  for (const ShapeCase& c : cases_) {
    if (!c.rejected.empty()) continue;
    const Dims& d = c.in_dims.front();
    const auto score = [](const Dims& x) {
      return (x.rank() == 4 ? 100 : x.rank()) + (x.rank() > 0 && x[0] > 1 ? 10 : 0);
    };
    if (main_case_ == nullptr || score(d) > score(main_case_->in_dims.front())) main_case_ = &c;
  }
  if (main_case_ == nullptr) {
    add("shapes", CheckStatus::kFail,
        "no input shape of rank 1 to 5 is accepted (output_dims throws or supports_format_combination refuses "
        "every type/format); the remaining checks need one");
  }
}

void Checker::check_dynamic_dims() {
  std::string problem, checked;
  for (int rank = 1; rank <= 5 && problem.empty(); ++rank) {
    std::vector<const ShapeCase*> same_rank;
    for (const ShapeCase& c : cases_) {
      if (c.rejected.empty() && c.in_dims.front().rank() == rank) same_rank.push_back(&c);
    }
    if (same_rank.empty()) continue;
    checked += (checked.empty() ? "" : ", ") + std::to_string(rank);
    std::string threw = plugin_check::run_guarded([&] {
      ExprBuilder exprs;
      std::vector<DimsExprs> ins(static_cast<size_t>(num_inputs_));
      for (int i = 0; i < num_inputs_; ++i)
        for (int k = 0; k < rank; ++k) ins[static_cast<size_t>(i)].d.push_back(exprs.input_dim(i, k));
      for (int o = 0; o < num_outputs_ && problem.empty(); ++o) {
        const DimsExprs out = main_.plugin->output_dims(o, ins, exprs);
        const bool identity = std::all_of(same_rank.begin(), same_rank.end(), [&](const ShapeCase* c) {
          return c->out_dims[static_cast<size_t>(o)] == c->in_dims.front();
        });
        for (int k = 0; k < out.rank() && k < rank && problem.empty(); ++k) {
          const DimExpr* e = out.d[static_cast<size_t>(k)];
          std::vector<int64_t> seen;
          for (const ShapeCase* c : same_rank) seen.push_back(c->in_dims.front()[k]);
          const bool varies = std::any_of(seen.begin(), seen.end(), [&](int64_t v) { return v != seen.front(); });
          std::string extents;
          for (const int64_t v : seen) extents += (extents.empty() ? "" : ", ") + std::to_string(v);
          if (e->is_constant() && varies && std::find(seen.begin(), seen.end(), e->constant_value()) != seen.end()) {
            problem = "output " + std::to_string(o) + " (rank-" + std::to_string(rank) + " inputs): output dim " +
                      std::to_string(k) + " is the constant " + std::to_string(e->constant_value()) +
                      ", it should follow the input's dynamic dim in0[" + std::to_string(k) + "] (extents " + extents +
                      " in the tested shapes): return inputs[0].d[" + std::to_string(k) +
                      "] (or an expression of it) instead of a value computed for one shape";
          } else if (identity) {
            // An output shaped like input 0 must follow each of its extents.
            std::vector<Dims> moved = same_rank.front()->in_dims;
            for (auto& d : moved) d[k] += 3;
            if (e->evaluate(moved) == e->evaluate(same_rank.front()->in_dims)) {
              problem = "output " + std::to_string(o) + " (rank-" + std::to_string(rank) + " inputs): output dim " +
                        std::to_string(k) + " = " + e->to_string() + " does not change when the input's dim " +
                        std::to_string(k) +
                        " does, although the output has the input's shape: it should follow the "
                        "input's dynamic dim in0[" +
                        std::to_string(k) + "]";
            }
          }
        }
      }
    });
    if (!threw.empty() && problem.empty())
      problem = "output_dims() with symbolic rank-" + std::to_string(rank) + " inputs " + threw;
  }
  if (checked.empty()) {
    add("dynamic dims", CheckStatus::kSkip, "no accepted input shape");
  } else if (!problem.empty()) {
    add("dynamic dims", CheckStatus::kFail, problem);
  } else {
    add("dynamic dims", CheckStatus::kPass,
        "output dims are expressions of the symbolic input dims (ranks " + checked + ")");
  }
}

void Checker::check_combinations() {
  const ShapeCase& c = *main_case_;
  const std::string at = " at " + dims_list(c.in_dims);
  if (c.reference.empty()) {
    add("types", CheckStatus::kSkip,
        "the plugin accepts no type/format on the CPU, so there is no CPU result to compare " +
            std::string(to_string(options_.device)) + " combinations against");
    return;
  }
  uint64_t seed = options_.seed + 1000;
  for (const Combination& combo : c.device_combos) {
    const std::string name = "types " + plugin_check::to_string(combo, num_inputs_);
    const auto inputs = inputs_for(c, combo, ++seed);
    const Observed ob = observe(*main_.plugin, c, combo, inputs, name + at);
    const Comparison values =
        ob.first.outputs.empty() ? Comparison{false, ""} : compare_with_reference(c, combo, inputs, ob.first);
    const std::string reference = "the plugin's CPU " + plugin_check::to_string(c.reference, num_inputs_) + " result";
    if (!ob.problem.empty()) {
      add(name, CheckStatus::kFail,
          "claimed by supports_format_combination" + at + ", but " + ob.problem +
              (values.text.empty() ? "" : "; vs " + reference + ": " + values.text));
      continue;
    }
    add(name, values.ok ? CheckStatus::kPass : CheckStatus::kFail,
        (values.ok ? "vs " + reference + ": "
                   : "claimed by supports_format_combination" + at + ", but it does not match " + reference + ": ") +
            values.text);
  }
  if (c.device_combos.size() >= kMaxCombinations) {
    add("types (more)", CheckStatus::kSkip,
        "only the first " + std::to_string(kMaxCombinations) + " combinations were run");
  }
  // The original plugin's result in its first combination: what the round trips must reproduce.
  main_inputs_ = inputs_for(c, c.device_combos.front(), options_.seed + 7);
  main_run_ = plugin_check::run_plugin(*main_.plugin, *device_, spec_for(c, c.device_combos.front(), main_inputs_));
}

void Checker::check_fields_round_trip() {
  const char* name = "fields round trip";
  if (!main_run_.error.empty()) {
    add(name, CheckStatus::kSkip, "the plugin does not run: " + main_run_.error);
    return;
  }
  PluginFieldCollection written;
  std::string problem = plugin_check::run_guarded([&] { written = main_.plugin->fields(); });
  if (!problem.empty()) {
    add(name, CheckStatus::kFail, "fields() " + problem);
    return;
  }
  PluginFieldCollection resolved;
  try {
    resolved = PluginRegistry::instance().resolve_fields(creator_, written, "the fields() of the plugin");
  } catch (const std::exception& e) {
    add(name, CheckStatus::kFail, std::string("fields() does not match the creator's field_schema(): ") + e.what());
    return;
  }
  Instance copy;
  problem = create_into(copy, resolved, options_.device);
  if (!problem.empty()) {
    add(name, CheckStatus::kFail,
        "the creator cannot re-create the plugin from its fields() {" + plugin_fields_to_string(written) +
            "}: " + problem);
    return;
  }
  const RunResult again = plugin_check::run_plugin(
      *copy.plugin, *device_, spec_for(*main_case_, main_case_->device_combos.front(), main_inputs_));
  const std::string diff = bit_exact(main_run_, again);
  if (!diff.empty()) {
    add(name, CheckStatus::kFail,
        "a plugin re-created from fields() {" + plugin_fields_to_string(written) + "} computes different results: " +
            diff + "; fields() must return every value create() reads, under the name create() reads it from");
    return;
  }
  PluginFieldCollection rewritten;
  plugin_check::run_guarded([&] { rewritten = copy.plugin->fields(); });
  if (plugin_fields_to_string(rewritten) != plugin_fields_to_string(written)) {
    add(name, CheckStatus::kFail,
        "fields() is not stable: the plugin gives {" + plugin_fields_to_string(written) +
            "}, the one re-created from them gives {" + plugin_fields_to_string(rewritten) + "}");
    return;
  }
  add(name, CheckStatus::kPass,
      "create(fields()) gives bit-identical results {" + plugin_fields_to_string(written) + "}");
}

void Checker::check_bytes_round_trip() {
  const char* name = "bytes round trip";
  std::vector<uint8_t> first, second;
  std::string problem = plugin_check::run_guarded([&] {
    first = main_.plugin->serialize();
    second = main_.plugin->serialize();
  });
  if (!problem.empty()) {
    add(name, CheckStatus::kFail, "serialize() " + problem);
    return;
  }
  if (first.empty()) {
    add(name, CheckStatus::kSkip, "serialize() returns no bytes: the engine stores fields()");
    return;
  }
  const std::string size = std::to_string(first.size()) + " bytes";
  if (first != second) {
    add(name, CheckStatus::kFail,
        "serialize() returned different bytes on two calls (" + size + ", then " + std::to_string(second.size()) +
            "); it must be deterministic");
    return;
  }
  // The bytes end right at an inaccessible page: reading past them faults, and is reported.
  std::unique_ptr<plugin_check::CheckDevice> fence = plugin_check::make_host_device();
  const size_t page = 4096, span = (first.size() + page - 1) / page * page;
  auto* base = static_cast<uint8_t*>(fence->allocate(span));
  uint8_t* bytes = base + (span - first.size());
  std::memcpy(bytes, first.data(), first.size());
  std::unique_ptr<GuardedPlugin> made;
  problem =
      plugin_check::run_guarded([&] { made = creator_deserialize(creator_, "plugin_check", bytes, first.size(), ""); });
  if (problem.rfind("crashed", 0) == 0) {
    add(name, CheckStatus::kFail,
        "deserialize() read past the " + size + " serialize() wrote (" + problem +
            "): the engine stores exactly the bytes serialize() returns (with their size and checksum); make "
            "serialize() write everything deserialize() reads, in the same order and sizes");
    return;
  }
  if (!problem.empty()) {
    add(name, CheckStatus::kFail, "deserialize() rejects the " + size + " serialize() wrote: " + problem);
    return;
  }
  Instance copy;
  problem = copy.adopt(std::move(made), options_.device);
  if (!problem.empty()) {
    add(name, CheckStatus::kFail, "the plugin from deserialize(): " + problem);
    return;
  }
  if (!main_run_.error.empty()) {
    add(name, CheckStatus::kSkip, "the plugin does not run: " + main_run_.error);
    return;
  }
  const RunResult again = plugin_check::run_plugin(
      *copy.plugin, *device_, spec_for(*main_case_, main_case_->device_combos.front(), main_inputs_));
  const std::string diff = bit_exact(main_run_, again);
  std::vector<uint8_t> third;
  plugin_check::run_guarded([&] { third = copy.plugin->serialize(); });
  if (!diff.empty() || third != first) {
    size_t at = 0;
    while (at < first.size() && at < third.size() && first[at] == third[at]) ++at;
    add(name, CheckStatus::kFail,
        "deserialize(serialize()) " + (diff.empty() ? std::string() : "computes different results: " + diff + "; it ") +
            (third != first ? "serializes to different bytes (" + std::to_string(third.size()) + " vs " + size +
                                  ", first difference at byte " + std::to_string(at) + "); "
                            : std::string()) +
            "serialize() and deserialize() disagree on the layout (field order or sizes)");
    return;
  }
  add(name, CheckStatus::kPass, "deserialize(serialize()) gives bit-identical results; " + size + ", stable");
}

void Checker::check_clone() {
  const char* name = "clone";
  if (!main_run_.error.empty()) {
    add(name, CheckStatus::kSkip, "the plugin does not run: " + main_run_.error);
    return;
  }
  const auto spec = spec_for(*main_case_, main_case_->device_combos.front(), main_inputs_);
  {
    std::unique_ptr<GuardedPlugin> cloned;
    std::string problem = plugin_check::run_guarded([&] { cloned = main_.plugin->clone(); });
    Instance copy;
    if (problem.empty()) problem = copy.adopt(std::move(cloned), options_.device);
    if (!problem.empty()) {
      add(name, CheckStatus::kFail, "clone() " + problem);
      return;
    }
    const std::string diff = bit_exact(main_run_, plugin_check::run_plugin(*copy.plugin, *device_, spec));
    if (!diff.empty()) {
      add(name, CheckStatus::kFail,
          "the clone computes different results: " + diff + "; clone() must copy every setting");
      return;
    }
  }  // the clone is terminated and destroyed here
  const std::string diff = bit_exact(main_run_, plugin_check::run_plugin(*main_.plugin, *device_, spec));
  if (!diff.empty()) {
    add(name, CheckStatus::kFail,
        "after a clone was terminated and destroyed, the original " + diff +
            " (does clone() share state that terminate() releases?)");
    return;
  }
  add(name, CheckStatus::kPass,
      "the clone gives bit-identical results; the original still works after the clone is gone");
}

void Checker::check_capture() {
  const char* name = "cuda graph capture";
  if (options_.device != DeviceType::kCUDA) {
    add(name, CheckStatus::kSkip, "CUDA only (checked device: " + std::string(to_string(options_.device)) + ")");
    return;
  }
  if (!main_run_.error.empty()) {
    add(name, CheckStatus::kSkip, "the plugin does not run: " + main_run_.error);
    return;
  }
  RunSpec spec = spec_for(*main_case_, main_case_->device_combos.front(), main_inputs_);
  spec.capture = true;
  const RunResult captured = plugin_check::run_plugin(*main_.plugin, *device_, spec);
  if (!captured.capture_problem.empty()) {
    add(name, CheckStatus::kFail,
        "enqueue launched on the default stream or synchronized the device: launch only on the given stream "
        "(PluginExecContext::stream) and do not call cudaDeviceSynchronize, cudaStreamSynchronize, cudaMalloc or "
        "synchronous cudaMemcpy inside enqueue (CUDA reports: " +
            captured.capture_problem + ")");
    return;
  }
  const std::string diff = bit_exact(main_run_, captured);
  if (!diff.empty()) {
    add(name, CheckStatus::kFail, "replaying the captured graph " + diff + " compared with a direct enqueue");
    return;
  }
  add(name, CheckStatus::kPass,
      "enqueue is capturable (global mode) and the replayed graph gives bit-identical results");
}

void Checker::report_aggregates() {
  if (scratch_.empty()) {
    add("workspace", CheckStatus::kPass,
        "no run wrote outside the declared workspace (" + std::to_string(runs_) + " runs)");
  } else {
    add("workspace", CheckStatus::kFail,
        "wrote " + std::to_string(scratch_extent_) +
            " bytes of scratch but declared workspace_size() = " + std::to_string(scratch_declared_) + " (" + scratch_ +
            "): return the scratch the kernel needs from workspace_size() and use only the workspace pointer");
  }
  add("finite", nonfinite_.empty() ? CheckStatus::kPass : CheckStatus::kFail,
      nonfinite_.empty() ? "no NaN/Inf from finite inputs in [-8, 8]" : nonfinite_);
  add("deterministic", nondeterministic_.empty() ? CheckStatus::kPass : CheckStatus::kFail,
      nondeterministic_.empty() ? "two runs of every case (1 and 2 threads) are bit-identical" : nondeterministic_);
}

PluginCheckReport Checker::run() {
  const CreatorIdentity id = creator_identity(creator_);
  report_.plugin = quote(id.name) + " version " + quote(id.version) + " namespace " + quote(id.plugin_namespace);
  report_.library = PluginRegistry::instance().library_of(id.name, id.version, id.plugin_namespace);
  report_.device = options_.device;
  if (!setup()) return report_;
  check_shapes();
  check_dynamic_dims();
  if (main_case_ != nullptr) {
    check_combinations();
    check_fields_round_trip();
    check_bytes_round_trip();
    check_clone();
    check_capture();
  }
  report_aggregates();
  return report_;
}

}  // namespace

bool plugin_check_device_available(DeviceType device, std::string* why) {
  if (device == DeviceType::kCPU) return true;
#ifdef KILN_HAVE_CUDA
  std::string reason;
  const bool ok = plugin_check::make_cuda_device(&reason) != nullptr;
  if (why) *why = reason;
  return ok;
#else
  if (why) *why = "this kiln was built without CUDA (configure with -DKILN_WITH_CUDA=ON)";
  return false;
#endif
}

PluginCheckReport check_plugin(const PluginCreator& creator, const PluginCheckOptions& options) {
  return Checker(creator, options).run();
}

PluginCheckReport check_plugin(const PluginCheckOptions& options) {
  const PluginCreator* creator =
      PluginRegistry::instance().find(options.name, options.version, options.plugin_namespace);
  if (creator == nullptr) {
    std::string known;
    for (const PluginInfo& p : PluginRegistry::instance().list()) {
      if (p.name == options.name) known += " " + quote(p.version) + "/" + quote(p.plugin_namespace);
    }
    throw Error("plugin " + quote(options.name) + " version " + quote(options.version) + " namespace '" +
                options.plugin_namespace + "' is not registered" +
                (known.empty() ? std::string("; load its library with --plugins LIB.so (see `kiln plugin list`)")
                               : "; registered versions/namespaces:" + known));
  }
  return check_plugin(*creator, options);
}

}  // namespace kiln
