// The ONNX import driver (kiln::OnnxParser): reads the model with protobuf, turns initializers
// into known constants and graph inputs into network inputs, walks the nodes in topological
// order handing each to its registered importer (src/onnx/ops_*.cpp), marks the graph outputs,
// and reports every node it could not import in one kiln::ParseError.
//
// A node that cannot be imported does not stop the walk: its outputs become placeholder
// tensors so that the rest of the graph is still checked, and errors of nodes that read a
// placeholder are not reported (they are consequences, not causes).
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/onnx_parser.h"
#include "src/core/file_io.h"
#include "src/core/text.h"
#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"

namespace kiln {
namespace {

// Decodes a model from any protobuf stream with the total-bytes limit raised to protobuf's
// maximum (2 GB; larger models keep their weights in external data files).
onnx::ModelProto read_model(google::protobuf::io::ZeroCopyInputStream& stream, const std::string& source) {
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream coded(&stream);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    throw Error(source +
                ": not a valid ONNX model (protobuf decoding failed: the file is truncated, corrupt, larger "
                "than 2 GB or not an ONNX model)");
  }
  // Protobuf accepts many byte strings as a message with only unknown fields.
  if (!model.has_graph() || model.ir_version() <= 0) {
    throw Error(source + ": not a valid ONNX model (no graph or no ir_version)");
  }
  return model;
}

onnx::ModelProto read_model_bytes(const void* data, size_t size, const std::string& source) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error(source +
                ": the model is larger than protobuf's 2 GB limit; save its weights as external data "
                "(onnx.save_model(..., save_as_external_data=True))");
  }
  google::protobuf::io::ArrayInputStream stream(data, static_cast<int>(size));
  return read_model(stream, source);
}

// Streams the file through protobuf without a second in-memory copy of the bytes.
onnx::ModelProto read_model_file(const std::string& path) {
  // A regular file of a size protobuf can parse, read whole (file_io.h): a device, FIFO or
  // folder gives an error naming the file.
  const uint64_t size = check_regular_file(path, "ONNX model");
  if (size > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    throw Error(quote(path) +
                ": the model is larger than protobuf's 2 GB limit; save its weights as external data "
                "(onnx.save_model(..., save_as_external_data=True))");
  }
  const std::vector<uint8_t> bytes =
      read_whole_file(path, "ONNX model", static_cast<uint64_t>(std::numeric_limits<int>::max()));
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  return read_model(stream, path);
}

std::string base_dir_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// The name of node `i` as messages show it (its name, else op type and index).
std::string node_label(const onnx::GraphProto& graph, int i) {
  const auto& node = graph.node(i);
  return quote(node.name().empty() ? node.op_type() + "_" + std::to_string(i) : node.name());
}

// Node indices in a topological order; ties keep the file order (exporters already sort, and
// then this is the identity). A cycle is a ParseError naming the nodes on it.
std::vector<int> topological_node_order(const onnx::GraphProto& graph, const std::string& source) {
  const int n = graph.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i) {
    for (const auto& out : graph.node(i).output()) {
      if (!out.empty()) producer.emplace(out, i);
    }
  }
  std::vector<int> pending(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::set<int> deps;
    for (const auto& in : graph.node(i).input()) {
      auto it = producer.find(in);
      if (it != producer.end() && it->second != i) deps.insert(it->second);
    }
    pending[static_cast<size_t>(i)] = static_cast<int>(deps.size());
    for (int d : deps) users[static_cast<size_t>(d)].push_back(i);
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[static_cast<size_t>(i)] == 0) ready.push(i);
  }
  std::vector<int> order;
  std::vector<bool> done(static_cast<size_t>(n), false);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    done[static_cast<size_t>(i)] = true;
    for (int u : users[static_cast<size_t>(i)]) {
      if (--pending[static_cast<size_t>(u)] == 0) ready.push(u);
    }
  }
  if (static_cast<int>(order.size()) == n) return order;
  // Every node left waits for another node left, so walking from one to a node it waits for
  // must come back to a node already seen: the nodes from there on form a cycle.
  std::vector<std::vector<int>> deps(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    for (int u : users[static_cast<size_t>(d)]) deps[static_cast<size_t>(u)].push_back(d);
  }
  int at = 0;
  while (done[static_cast<size_t>(at)]) ++at;
  std::vector<int> path;
  std::vector<int> seen_at(static_cast<size_t>(n), -1);
  while (seen_at[static_cast<size_t>(at)] < 0) {
    seen_at[static_cast<size_t>(at)] = static_cast<int>(path.size());
    path.push_back(at);
    for (int d : deps[static_cast<size_t>(at)]) {
      if (!done[static_cast<size_t>(d)]) {
        at = d;
        break;
      }
    }
  }
  std::vector<int> cycle(path.begin() + seen_at[static_cast<size_t>(at)], path.end());
  std::reverse(cycle.begin(), cycle.end());  // in data-flow order
  std::string names;
  constexpr size_t kShown = 8;
  for (size_t k = 0; k < cycle.size() && k < kShown; ++k) names += (k ? " -> " : "") + node_label(graph, cycle[k]);
  if (cycle.size() > kShown) names += " -> ... (" + std::to_string(cycle.size()) + " nodes)";
  names += " -> " + node_label(graph, cycle[0]);
  throw ParseError(source + ": the graph has a cycle: " + names +
                   " (each node reads an output of the one before it); ONNX graphs must be acyclic");
}

Dims dims_from_type(const onnx::TypeProto& type) {
  Dims dims;
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return dims;
  for (const auto& d : type.tensor_type().shape().dim()) {
    dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : kDynamic);
  }
  return dims;
}

bool has_shape(const onnx::TypeProto& type) {
  return type.has_tensor_type() && type.tensor_type().has_shape() && type.tensor_type().shape().dim_size() <= kMaxDims;
}

constexpr int64_t kMinTestedOpset = 7;
constexpr int64_t kMaxTestedOpset = 18;
// The newest default-domain opset the ONNX standard defines (ONNX 1.23); a larger version is
// not a real opset, and a model claiming one is refused rather than imported by guesswork.
constexpr int64_t kNewestOnnxOpset = 28;

class ModelImporter {
 public:
  ModelImporter(const onnx::ModelProto& model, Network& network, std::string source, std::string base_dir)
      : model_(model), graph_(model.graph()) {
    state_.network = &network;
    state_.source = std::move(source);
    state_.base_dir = std::move(base_dir);
  }

  std::vector<UnsupportedNode> run() {
    read_opsets();
    for (int i = 0; i < state_.network->num_layers(); ++i) state_.layer_names.insert(state_.network->layer(i)->name());
    read_known_dims();
    read_initializers();
    add_graph_inputs();
    for (const auto& node : graph_.node()) {
      for (const auto& in : node.input()) state_.consumed.insert(in);
    }
    for (const auto& out : graph_.output()) state_.consumed.insert(out.name());
    for (int index : topological_node_order(graph_, state_.source)) import_node(graph_.node(index), index);
    mark_graph_outputs();
    return std::move(problems_);
  }

  int64_t default_opset() const { return state_.opset_of(""); }
  const std::string& source() const { return state_.source; }

 private:
  void read_opsets() {
    for (const auto& op : model_.opset_import()) {
      const bool standard = op.domain().empty() || op.domain() == "ai.onnx";
      if (op.version() < 1 || (standard && op.version() > kNewestOnnxOpset)) {
        throw ParseError(state_.source + ": opset_import of domain " +
                         (standard ? std::string("'' (ai.onnx)") : quote(op.domain())) + " has version " +
                         std::to_string(op.version()) + ", which is not an opset " +
                         (standard ? "of ONNX (1 to " + std::to_string(kNewestOnnxOpset) + ")" : "version (>= 1)"));
      }
      state_.opsets[standard ? "" : op.domain()] = op.version();
    }
    const int64_t opset = state_.opset_of("");
    if (opset < kMinTestedOpset || opset > kMaxTestedOpset) {
      log(Severity::kWarning, state_.source + ": default-domain opset " + std::to_string(opset) +
                                  " is outside the range kiln's "
                                  "ONNX importer is tested with (" +
                                  std::to_string(kMinTestedOpset) + "-" + std::to_string(kMaxTestedOpset) +
                                  "); nodes are imported with the rules of the nearest opset");
    }
  }

  void read_known_dims() {
    auto note = [&](const onnx::ValueInfoProto& v) {
      if (has_shape(v.type())) state_.known_dims[v.name()] = dims_from_type(v.type());
    };
    for (const auto& v : graph_.input()) note(v);
    for (const auto& v : graph_.output()) note(v);
    for (const auto& v : graph_.value_info()) note(v);
  }

  void read_initializers() {
    if (graph_.sparse_initializer_size() > 0) {
      throw ParseError(state_.source + ": sparse initializers ('" + graph_.sparse_initializer(0).values().name() +
                       "') are not supported; densify them with onnx tools before importing");
    }
    for (const auto& init : graph_.initializer()) {
      if (init.name().empty()) throw ParseError(state_.source + ": an initializer has no name");
      HostTensor value =
          tensor_from_proto(init, state_.base_dir, state_.source + ": initializer " + quote(init.name()));
      state_.constants[init.name()] = {std::move(value), init.name()};
    }
  }

  void add_graph_inputs() {
    for (const auto& input : graph_.input()) {
      if (state_.constants.count(input.name())) continue;  // IR < 4 lists initializers as inputs
      const std::string what = state_.source + ": graph input " + quote(input.name());
      if (!input.type().has_tensor_type())
        throw ParseError(what + " is not a tensor (sequences and maps are not supported)");
      const int32_t elem = input.type().tensor_type().elem_type();
      const auto type = data_type_from_onnx(elem);
      if (!type)
        throw ParseError(what + " has element type " + onnx_data_type_name(elem) + ", which kiln does not support");
      if (!input.type().tensor_type().has_shape()) {
        throw ParseError(what +
                         " has no shape (not even a rank); kiln needs the rank of every input. Set it in the model "
                         "(e.g. onnx.tools.update_model_dims)");
      }
      if (input.type().tensor_type().shape().dim_size() > kMaxDims)
        throw ParseError(what + " has a rank above " + std::to_string(kMaxDims));
      if (state_.network->find_tensor(input.name()))
        throw ParseError(what + ": the network already has a tensor of that name");
      state_.tensors[input.name()] = state_.network->add_input(input.name(), *type, dims_from_type(input.type()));
    }
  }

  void import_node(const onnx::NodeProto& node, int index) {
    const std::string layer_name = node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
    const int64_t opset = state_.opset_of(node.domain());
    NodeContext ctx(state_, node, layer_name, opset);
    bool reads_placeholder = false;
    for (const auto& in : node.input()) reads_placeholder |= state_.poisoned.count(in) > 0;

    std::string problem;
    try {
      const OnnxImporterFn fn = OnnxImporterRegistry::instance().find(node.domain(), node.op_type());
      if (fn) {
        fn(ctx);
      } else if (!try_import_plugin_node(ctx)) {
        throw OnnxUnsupported{no_importer_reason(node)};
      }
      for (int i = 0; i < node.output_size(); ++i) {
        const std::string& out = node.output(i);
        if (!out.empty() && state_.consumed.count(out) && !state_.tensors.count(out) && !state_.constants.count(out) &&
            !state_.sequences.count(out)) {
          throw Error("node " + quote(layer_name) + " (" + node.op_type() + "): the importer did not produce output '" +
                      out + "' (kiln bug)");
        }
      }
      // Downstream of a failed node everything is suspect: later errors are consequences.
      if (reads_placeholder) {
        for (const auto& out : node.output()) state_.poisoned.insert(out);
      }
      return;
    } catch (const OnnxUnsupported& u) {
      problem = u.reason;
    } catch (const Error& e) {
      if (!reads_placeholder) {
        problem = e.what();
        const std::string prefix = "node " + quote(layer_name) + " (" + node.op_type() + "): ";
        if (problem.rfind(prefix, 0) == 0) problem = problem.substr(prefix.size());
      }
    } catch (const std::exception& e) {
      if (!reads_placeholder) problem = std::string("internal error: ") + e.what();
    }
    if (!problem.empty()) problems_.push_back({node.op_type(), node.domain(), layer_name, opset, problem});
    add_placeholders(node);
  }

  std::string no_importer_reason(const onnx::NodeProto& node) const {
    for (const auto& f : model_.functions()) {
      if (f.name() == node.op_type() && f.domain() == node.domain()) {
        return "a model-local function (kiln does not inline ONNX functions; inline it with onnx.inliner)";
      }
    }
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    const std::string plugin = "no registered plugin " + quote(node.op_type());
    return default_domain ? "no importer for this op and " + plugin
                          : "no importer for domain " + quote(node.domain()) + " and " + plugin;
  }

  // Stand-ins for the outputs of a node that was not imported; the network is discarded anyway.
  void add_placeholders(const onnx::NodeProto& node) {
    for (const auto& out : node.output()) {
      if (out.empty()) continue;
      state_.poisoned.insert(out);
      if (state_.tensors.count(out) || state_.constants.count(out)) continue;
      const std::string name = state_.network->find_tensor(out) ? state_.network->unique_name(out) : out;
      state_.tensors[out] = state_.network->add_input(name, DataType::kFloat32, Dims{});
    }
  }

  void mark_graph_outputs() {
    for (const auto& output : graph_.output()) {
      const std::string& name = output.name();
      if (state_.poisoned.count(name)) continue;
      if (auto seq = state_.sequences.find(name); seq != state_.sequences.end()) {
        // A node-level problem (listed with the others), charged to the node that made the value.
        problems_.push_back({seq->second.op_type, "", seq->second.node, state_.opset_of(""),
                             "its output " + quote(name) +
                                 " is a graph output, but it is a sequence: kiln resolves ONNX "
                                 "sequences while importing and its networks output tensors only; output the tensors "
                                 "(SequenceAt) or one tensor (ConcatFromSequence) instead"});
        continue;
      }
      const bool is_constant = state_.constants.count(name) > 0;
      Tensor* t = state_.tensor(name);
      if (!t) {
        throw ParseError(state_.source + ": graph output " + quote(name) +
                         " is not produced by any node, initializer or input");
      }
      if (t->is_network_input() || is_constant) {
        // An output must be computed by a layer: copy the input/constant through an Identity.
        const std::string layer = state_.unique_layer_name(name + "/output_identity");
        Tensor* copy = state_.network->add_layer(kLayerIdentity, {t}, 1, {}, layer)->output(0);
        if (t->is_network_input()) {
          copy->set_name(state_.network->unique_name(name + "_output"));
          log(Severity::kWarning, state_.source + ": graph output " + quote(name) +
                                      " is also a graph input; the output is named '" + copy->name() + "'");
        } else {
          state_.claim_tensor_name(copy, name);
        }
        t = copy;
      }
      state_.network->mark_output(t);
    }
  }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& graph_;
  OnnxImportState state_;
  std::vector<UnsupportedNode> problems_;
};

std::string format_problems(const std::string& source, int64_t opset, int num_nodes,
                            const std::vector<UnsupportedNode>& problems) {
  std::string msg = source + ": cannot import " + std::to_string(problems.size()) + " of " + std::to_string(num_nodes) +
                    " nodes (default-domain opset " + std::to_string(opset) + "):";
  bool plugin_missing = false;
  for (const auto& p : problems) {
    const std::string domain = p.domain.empty() ? "ai.onnx" : p.domain;
    // Only nodes for which no plugin is registered: a found plugin whose fields were wrong says so itself.
    plugin_missing |= p.reason.find("no registered plugin") != std::string::npos;
    msg += "\n  - node " + quote(p.node_name) + ": op " + p.op_type + ", domain " + domain + ", opset " +
           std::to_string(p.opset) + ": " + p.reason;
  }
  msg += "\nhint: ";
  if (plugin_missing) {
    msg +=
        "ops kiln does not know need a kiln plugin of the same name, registered before the import (load its "
        "library with --plugins LIB.so or kiln::load_plugin_library; docs/writing-a-plugin.md); ";
  }
  msg +=
      "for standard ops, check the opset and attributes kiln supports (docs/layers.md), or replace the op when "
      "exporting. OnnxParser::check_file lists these nodes without building a network.";
  return msg;
}

}  // namespace

namespace {

std::vector<UnsupportedNode> import_into(const onnx::ModelProto& model, Network& network, const std::string& source,
                                         const std::string& base_dir, int64_t* opset) {
  ModelImporter importer(model, network, source, base_dir);
  auto problems = importer.run();
  if (opset) *opset = importer.default_opset();
  return problems;
}

}  // namespace

void OnnxParser::parse_bytes(const void* data, size_t size, const std::string& base_dir, const std::string& source) {
  const onnx::ModelProto model = read_model_bytes(data, size, source);
  const auto problems = import_into(model, network_, source, base_dir, &opset_);
  if (!problems.empty()) throw ParseError(format_problems(source, opset_, model.graph().node_size(), problems));
}

void OnnxParser::parse_file(const std::string& path) {
  const onnx::ModelProto model = read_model_file(path);
  const auto problems = import_into(model, network_, path, base_dir_of(path), &opset_);
  if (!problems.empty()) throw ParseError(format_problems(path, opset_, model.graph().node_size(), problems));
}

std::vector<UnsupportedNode> OnnxParser::check_file(const std::string& path) {
  const onnx::ModelProto model = read_model_file(path);
  Network scratch;
  return import_into(model, scratch, path, base_dir_of(path), nullptr);
}

}  // namespace kiln
