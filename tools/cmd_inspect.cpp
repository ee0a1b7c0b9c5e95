// `kiln inspect`: a readable (or --json) view of an engine file or an ONNX model.
//  * engine: Engine::describe() (layers after fusion, kernels, tensors, formats, memory plan),
//    plus the file's I/O, profiles, plugins and build information;
//  * ONNX: inputs/outputs with their dims, opsets, an op-type histogram and the nodes kiln cannot
//    import (kiln::OnnxParser::check_file). Exit code 2 when some nodes are unsupported, so
//    scripts can ask "will this model build?".
// The ONNX view reads the protobuf directly (not through the importer) so that it works for
// models the importer rejects; external weight files are not read.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common.h"
#include "core/text.h"
#include "engine/engine_format.h"
#include "kiln/error.h"
#include "kiln/onnx_parser.h"
#include "kiln/runtime.h"
#include "onnx/onnx_proto.h"

namespace kiln::cli {
namespace {

struct InspectOptions {
  std::string engine;
  std::string onnx;
  bool json = false;
  std::vector<std::string> plugins;
};

// ---- ONNX ------------------------------------------------------------------------------------

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string elem_type_name(int32_t elem_type) {
  if (!onnx::TensorProto_DataType_IsValid(elem_type)) return "type" + std::to_string(elem_type);
  return lower(onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type)));
}

// Bytes per element of the ONNX element types kiln may meet (0: unknown/variable size).
uint64_t elem_size(int32_t elem_type) {
  static const std::map<int32_t, uint64_t> kSizes = {
      {onnx::TensorProto::FLOAT, 4},     {onnx::TensorProto::UINT8, 1},       {onnx::TensorProto::INT8, 1},
      {onnx::TensorProto::UINT16, 2},    {onnx::TensorProto::INT16, 2},       {onnx::TensorProto::INT32, 4},
      {onnx::TensorProto::INT64, 8},     {onnx::TensorProto::BOOL, 1},        {onnx::TensorProto::FLOAT16, 2},
      {onnx::TensorProto::DOUBLE, 8},    {onnx::TensorProto::UINT32, 4},      {onnx::TensorProto::UINT64, 8},
      {onnx::TensorProto::COMPLEX64, 8}, {onnx::TensorProto::COMPLEX128, 16}, {onnx::TensorProto::BFLOAT16, 2}};
  auto it = kSizes.find(elem_type);
  return it == kSizes.end() ? 0 : it->second;
}

struct ValueDesc {
  std::string name;
  std::string type;
  std::vector<std::string> dims;  // a number, a symbolic name, or "?"
  bool has_shape = false;
};

ValueDesc describe_value(const onnx::ValueInfoProto& v) {
  ValueDesc d;
  d.name = v.name();
  if (v.type().has_tensor_type()) {
    const auto& t = v.type().tensor_type();
    d.type = elem_type_name(t.elem_type());
    d.has_shape = t.has_shape();
    for (const auto& dim : t.shape().dim()) {
      if (dim.has_dim_value())
        d.dims.push_back(std::to_string(dim.dim_value()));
      else if (dim.has_dim_param() && !dim.dim_param().empty())
        d.dims.push_back(dim.dim_param());
      else
        d.dims.push_back("?");
    }
  } else {
    d.type = "non-tensor";
  }
  return d;
}

std::string dims_text(const ValueDesc& d) {
  if (!d.has_shape) return "(shape unknown)";
  std::string out = "[";
  for (size_t i = 0; i < d.dims.size(); ++i) out += (i ? ", " : "") + d.dims[i];
  return out + "]";
}

// Op types of the graph and of every subgraph (If/Loop/Scan bodies), keyed "domain::Op" for
// domains other than the default one.
void count_ops(const onnx::GraphProto& graph, std::map<std::string, int64_t>& histogram, int64_t& nodes) {
  for (const auto& node : graph.node()) {
    const std::string& domain = node.domain();
    const bool standard = domain.empty() || domain == "ai.onnx";
    ++histogram[standard ? node.op_type() : domain + "::" + node.op_type()];
    ++nodes;
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) count_ops(attr.g(), histogram, nodes);
      for (const auto& g : attr.graphs()) count_ops(g, histogram, nodes);
    }
  }
}

int inspect_onnx(const InspectOptions& o) {
  onnx::ModelProto model;
  {
    const std::vector<uint8_t> bytes =
        read_file_bytes(o.onnx, "ONNX model", static_cast<uint64_t>(std::numeric_limits<int>::max()));
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      throw Error("cannot parse ONNX model " + quote(o.onnx) + ": not a valid ONNX protobuf file");
  }
  const onnx::GraphProto& graph = model.graph();

  std::map<std::string, const onnx::TensorProto*> initializers;
  uint64_t weight_bytes = 0;
  for (const auto& init : graph.initializer()) {
    initializers[init.name()] = &init;
    // Saturating: the dims are what the file claims (the import checks them against the data).
    uint64_t count = 1;
    for (auto d : init.dims()) {
      if (__builtin_mul_overflow(count, static_cast<uint64_t>(std::max<int64_t>(d, 0)), &count)) count = UINT64_MAX;
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(elem_size(init.data_type())), &bytes)) bytes = UINT64_MAX;
    if (__builtin_add_overflow(weight_bytes, bytes, &weight_bytes)) weight_bytes = UINT64_MAX;
  }
  std::vector<ValueDesc> inputs, outputs;
  for (const auto& v : graph.input())
    if (!initializers.count(v.name())) inputs.push_back(describe_value(v));  // IR < 4 lists weights too
  for (const auto& v : graph.output()) outputs.push_back(describe_value(v));

  std::map<std::string, int64_t> histogram;
  int64_t node_count = 0;
  count_ops(graph, histogram, node_count);
  std::vector<std::pair<std::string, int64_t>> ops(histogram.begin(), histogram.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });

  const std::vector<UnsupportedNode> unsupported = OnnxParser::check_file(o.onnx);

  if (o.json) {
    nlohmann::json j;
    j["file"] = o.onnx;
    j["ir_version"] = model.ir_version();
    j["producer"] = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
    for (const auto& opset : model.opset_import())
      j["opsets"][opset.domain().empty() ? "ai.onnx" : opset.domain()] = opset.version();
    j["graph_name"] = graph.name();
    j["nodes"] = node_count;
    j["initializers"] = graph.initializer_size();
    j["weights_bytes"] = weight_bytes;
    auto values = [](const std::vector<ValueDesc>& list) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& d : list) {
        nlohmann::json dims = nlohmann::json::array();
        for (const auto& s : d.dims) {
          // Numbers as numbers, symbolic dims as strings.
          if (!s.empty() &&
              std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
            dims.push_back(std::stoll(s));
          else
            dims.push_back(s);
        }
        arr.push_back({{"name", d.name}, {"type", d.type}, {"dims", d.has_shape ? dims : nlohmann::json()}});
      }
      return arr;
    };
    j["inputs"] = values(inputs);
    j["outputs"] = values(outputs);
    j["op_types"] = nlohmann::json::object();
    for (const auto& [op, n] : ops) j["op_types"][op] = n;
    j["unsupported"] = nlohmann::json::array();
    for (const auto& u : unsupported)
      j["unsupported"].push_back({{"op_type", u.op_type},
                                  {"domain", u.domain},
                                  {"node", u.node_name},
                                  {"opset", u.opset},
                                  {"reason", u.reason}});
    j["supported"] = unsupported.empty();
    std::cout << j.dump(2) << std::endl;
  } else {
    std::ostream& out = std::cout;
    out << "model: " << o.onnx << "\n";
    out << "  ir version " << model.ir_version();
    if (!model.producer_name().empty())
      out << ", producer " << model.producer_name() << " " << model.producer_version();
    out << "\n  opsets:";
    for (const auto& opset : model.opset_import())
      out << " " << (opset.domain().empty() ? "ai.onnx" : opset.domain()) << " " << opset.version();
    out << "\n  graph '" << graph.name() << "': " << node_count << " nodes, " << graph.initializer_size()
        << " initializers (" << format_bytes(weight_bytes) << ")\n";
    out << "inputs:\n";
    for (const auto& d : inputs) out << "  " << d.name << ": " << d.type << " " << dims_text(d) << "\n";
    out << "outputs:\n";
    for (const auto& d : outputs) out << "  " << d.name << ": " << d.type << " " << dims_text(d) << "\n";
    out << "op types (" << ops.size() << "):\n";
    for (const auto& [op, n] : ops) out << "  " << op << " " << n << "\n";
    if (unsupported.empty()) {
      out << "unsupported nodes: none (every node has an importer or a registered plugin)\n";
    } else {
      out << "unsupported nodes (" << unsupported.size() << "):\n";
      bool custom = false;
      for (const auto& u : unsupported) {
        out << "  " << u.op_type << " (domain '" << (u.domain.empty() ? "ai.onnx" : u.domain) << "', opset " << u.opset
            << ") node '" << u.node_name << "': " << u.reason << "\n";
        custom = custom || u.reason.find("no registered plugin") != std::string::npos;
      }
      if (custom) {
        out << "hint: nodes no importer knows become plugin layers when a plugin of that name is registered: load its "
               "library with --plugins LIB.so (or put its folder on KILN_PLUGIN_PATH for engines)\n";
      }
    }
  }
  return unsupported.empty() ? kExitOk : kExitUnsupported;
}

// ---- engine ----------------------------------------------------------------------------------

nlohmann::json profile_json(const OptimizationProfile& profile) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, s] : profile.all())
    j[name] = {{"min", s.min.to_vector()}, {"opt", s.opt.to_vector()}, {"max", s.max.to_vector()}};
  return j;
}

int inspect_engine(const InspectOptions& o) {
  const std::vector<uint8_t> bytes = read_file_bytes(o.engine, "engine file");
  // The file's own contents first: they can be shown even when the engine cannot run here
  // (e.g. a CUDA engine on a machine without a GPU).
  EngineData data = engine_deserialize(bytes.data(), bytes.size(), o.engine);
  std::shared_ptr<Engine> engine;
  std::string load_problem;
  try {
    engine = Runtime().deserialize(bytes.data(), bytes.size(), o.engine);
  } catch (const EngineFormatError&) {
    throw;
  } catch (const Error& e) {
    load_problem = e.what();
  }

  if (o.json) {
    nlohmann::json j;
    j["file"] = o.engine;
    j["bytes"] = bytes.size();
    j["device"] = to_string(data.device);
    j["num_threads"] = data.num_threads;
    j["loadable"] = engine != nullptr;
    if (!load_problem.empty()) j["load_problem"] = load_problem;
    j["io_tensors"] = nlohmann::json::array();
    if (engine) {
      for (const auto& t : engine->io_tensors())
        j["io_tensors"].push_back({{"name", t.name},
                                   {"mode", t.mode == TensorIOMode::kInput ? "input" : "output"},
                                   {"type", to_string(t.type)},
                                   {"dims", t.dims.to_vector()},
                                   {"format", to_string(t.format)}});
    }
    j["profiles"] = nlohmann::json::array();
    for (const auto& p : data.profiles) j["profiles"].push_back(profile_json(p));
    j["activation_peak_bytes"] = data.activation_peak_bytes;
    j["layers"] = nlohmann::json::array();
    if (data.network) {
      for (int i = 0; i < data.network->num_layers(); ++i) {
        const Layer* layer = data.network->layer(i);
        nlohmann::json in = nlohmann::json::array(), outs = nlohmann::json::array();
        for (int k = 0; k < layer->num_inputs(); ++k) in.push_back(layer->input(k) ? layer->input(k)->name() : "");
        for (int k = 0; k < layer->num_outputs(); ++k) outs.push_back(layer->output(k)->name());
        auto tactic = data.tactics.find(layer->name());
        j["layers"].push_back({{"name", layer->name()},
                               {"type", layer->type()},
                               {"tactic", tactic == data.tactics.end() ? "" : tactic->second},
                               {"inputs", in},
                               {"outputs", outs}});
      }
    }
    j["plugins"] = nlohmann::json::array();
    for (const auto& p : data.plugins)
      j["plugins"].push_back(
          {{"name", p.name}, {"version", p.version}, {"namespace", p.plugin_namespace}, {"library", p.library}});
    j["build_info"] = data.build_info;
    if (engine) j["description"] = engine->describe();
    std::cout << j.dump(2) << std::endl;
    return kExitOk;
  }

  std::ostream& out = std::cout;
  if (engine) {
    out << engine->describe();  // includes the build information and plugins
    return kExitOk;
  }
  // Cannot run here: show what the file holds.
  out << "engine: " << o.engine << " (" << format_bytes(bytes.size()) << ", device " << to_string(data.device) << ")\n";
  for (const auto& [key, value] : data.build_info) out << "  " << key << ": " << value << "\n";
  for (const auto& p : data.plugins)
    out << "  plugin " << p.name << " v" << p.version
        << (p.plugin_namespace.empty() ? "" : " (" + p.plugin_namespace + ")")
        << (p.library.empty() ? "" : " from " + p.library) << "\n";
  out << "note: this engine cannot be loaded on this machine (" << load_problem << "); showing the file's contents\n";
  for (size_t i = 0; i < data.profiles.size(); ++i) {
    out << "profile " << i << ":\n";
    for (const auto& [name, s] : data.profiles[i].all())
      out << "  " << name << ": min " << s.min.to_string() << ", opt " << s.opt.to_string() << ", max "
          << s.max.to_string() << "\n";
    if (i < data.activation_peak_bytes.size())
      out << "  activation peak " << format_bytes(data.activation_peak_bytes[i]) << "\n";
  }
  if (data.network) {
    out << "layers:\n" << to_text(*data.network);
    if (!data.tactics.empty()) {
      out << "tactics:\n";
      for (const auto& [layer, tactic] : data.tactics) out << "  " << layer << ": " << tactic << "\n";
    }
  }
  return kExitOk;
}

int run_inspect(const InspectOptions& o) {
  if (o.engine.empty() == o.onnx.empty())
    throw UsageError("give an engine with --engine FILE or a model with --onnx FILE");
  load_plugins(o.plugins);
  return o.engine.empty() ? inspect_onnx(o) : inspect_engine(o);
}

}  // namespace

void setup_inspect_command(CLI::App& parent, std::function<int()>& run) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = parent.add_subcommand(
      "inspect",
      "Show what an engine or an ONNX model contains. For an engine: the layers after fusion with their "
      "kernels, tensors, shapes, formats and the memory plan. For an ONNX model: inputs and outputs with "
      "their dims, the opsets, how often each op type occurs, and every node kiln cannot import (op type, "
      "domain, node name, opset, reason); the exit code is 0 when every node is supported and 2 otherwise.");
  sub->footer(
      "Examples:\n"
      "  kiln inspect --onnx model.onnx\n"
      "  kiln inspect --onnx detector.onnx --plugins ./libmy_plugins.so\n"
      "  kiln inspect --engine model.kiln --json > model.json");
  auto* engine = sub->add_option("--engine", o->engine, "Engine file to describe")->type_name("FILE");
  auto* onnx = sub->add_option("--onnx", o->onnx, "ONNX model to describe")->type_name("FILE");
  engine->excludes(onnx);
  sub->add_flag("--json", o->json, "Print one JSON object instead of text");
  sub->add_option("--plugins", o->plugins,
                  "Plugin library to load first (repeatable): nodes of custom ops then count as supported, and "
                  "engines using its plugins load")
      ->type_name("LIB.so");
  sub->callback([&run, o] { run = [o] { return run_inspect(*o); }; });
}

}  // namespace kiln::cli
