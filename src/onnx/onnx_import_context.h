// What an ONNX op importer sees and uses: the node, its opset, its inputs as kiln tensors (and,
// where known, their constant values and static dims), typed attribute access, layer creation
// with consistent naming, and the registry that maps (domain, op_type) to importers.
//
// Importers register themselves next to their definition (src/onnx/ops_*.cpp):
//   void import_relu(NodeContext& ctx) { ... }
//   KILN_REGISTER_ONNX_IMPORTER("Relu", import_relu);
// An importer either registers every used output with set_output(), or calls
// ctx.unsupported(reason) (valid ONNX that kiln cannot import) or ctx.fail(message) (the model
// is wrong). Both are collected; after the whole graph is walked the driver throws one
// kiln::ParseError listing every such node (errors of nodes that only fail because they read
// the output of an earlier failed node are not listed). Values that ONNX passes as tensors (Reshape's shape,
// Slice's starts, ...) become layer inputs, so dynamic values work; kiln evaluates such shape
// inputs on the host later. Only where a kiln attribute needs the value now (Squeeze axes,
// Clip bounds, BatchNorm statistics) must the input be constant.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/types.h"
#include "src/onnx/onnx_importer_info.h"
#include "src/onnx/onnx_proto.h"

namespace kiln {

// Thrown by NodeContext::unsupported: the node is valid ONNX that kiln cannot import.
struct OnnxUnsupported {
  std::string reason;
};

// Per-model state shared by all importers of one parse (owned by the driver).
struct OnnxImportState {
  Network* network = nullptr;
  std::string source;                     // file name or "<memory>" for messages
  std::string base_dir;                   // for external data
  std::map<std::string, int64_t> opsets;  // domain ("" for the default) -> version
  // Every tensor imported so far, by ONNX name.
  std::unordered_map<std::string, Tensor*> tensors;
  // Known constant values by ONNX name (initializers, Constant nodes, Identity of constants).
  // `layer_name` is used when the value is first needed as a tensor (a Constant layer).
  struct ConstantEntry {
    HostTensor value;
    std::string layer_name;
  };
  std::unordered_map<std::string, ConstantEntry> constants;
  // ONNX sequence values by name. kiln has no sequence type: the sequence importers
  // (ops_sequence.cpp) resolve every sequence while importing into an ordered list of elements.
  // An element is a kiln tensor, or the ONNX name of a known constant (an entry of `constants`,
  // so that SequenceAt gives back a constant). `node`/`op_type` made the value (for messages).
  struct SequenceElement {
    Tensor* tensor = nullptr;
    std::string constant;
  };
  struct SequenceEntry {
    std::vector<SequenceElement> elements;
    std::string node;
    std::string op_type;
  };
  std::unordered_map<std::string, SequenceEntry> sequences;
  // Dims recorded in the model (graph inputs/outputs, value_info); kDynamic for unknown extents.
  std::unordered_map<std::string, Dims> known_dims;
  // Names read by some node or listed as graph outputs (to tell whether an output is used).
  std::unordered_set<std::string> consumed;
  // Outputs of nodes that could not be imported: placeholders, so the walk can go on.
  std::unordered_set<std::string> poisoned;
  std::unordered_set<std::string> layer_names;

  // The tensor of an ONNX name, materializing a constant as a Constant layer on first use.
  // Null when unknown.
  Tensor* tensor(const std::string& name);
  // Gives `tensor` the ONNX name `name`, renaming an internal tensor that holds it already.
  void claim_tensor_name(Tensor* tensor, const std::string& name);
  // `base` when no layer has it yet, else base + "_<n>".
  std::string unique_layer_name(const std::string& base);
  int64_t opset_of(const std::string& domain) const;
};

class NodeContext {
 public:
  NodeContext(OnnxImportState& state, const onnx::NodeProto& node, std::string layer_name, int64_t opset)
      : state_(state), node_(node), name_(std::move(layer_name)), opset_(opset) {}

  const onnx::NodeProto& node() const { return node_; }
  const std::string& op_type() const { return node_.op_type(); }
  // The layer name: the node's name, or "<op_type>_<index>" when the node has none.
  const std::string& name() const { return name_; }
  // The opset version of the node's domain in this model.
  int64_t opset() const { return opset_; }
  Network& network() { return *state_.network; }
  OnnxImportState& state() { return state_; }

  // ---- inputs ----------------------------------------------------------------------------
  int num_inputs() const { return node_.input_size(); }
  // False for an omitted optional input (absent or named "").
  bool has_input(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  std::string input_name(int i) const { return i < node_.input_size() ? node_.input(i) : std::string(); }
  // The input as a tensor; null when omitted. Constants become Constant layers on first use.
  Tensor* input(int i);
  // Like input() but fails naming the input when it is omitted.
  Tensor* required_input(int i, const std::string& what);
  // The constant value of input i, or null when it is omitted or not a known constant.
  const HostTensor* constant(int i) const;
  // The constant value of input i; fails ("input 'x' (what) must be an initializer or
  // constant") when it is not one.
  const HostTensor& constant_input(int i, const std::string& what) const;
  // True when input i is present but is a zero-element constant (ONNX's "absent" spelling for
  // some optional inputs, e.g. Resize scales).
  bool is_empty_constant(int i) const;
  // Dims of input i when the model records them (graph inputs, value_info, constants); entries
  // may be kDynamic. nullopt when even the rank is unknown.
  std::optional<Dims> input_dims(int i) const;

  // ---- outputs ---------------------------------------------------------------------------
  int num_outputs() const { return node_.output_size(); }
  bool has_output(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }
  const std::string& output_name(int i) const { return node_.output(i); }
  // True when output i is named and read by another node or is a graph output.
  bool output_used(int i) const;
  // Registers the kiln tensor of output i (renamed to the ONNX name). No-op for unnamed outputs.
  void set_output(int i, Tensor* tensor);
  // Registers output i as a known constant (materialized lazily as a Constant layer).
  void set_output_constant(int i, const HostTensor& value);

  // ---- attributes ------------------------------------------------------------------------
  const onnx::AttributeProto* find_attr(const std::string& name) const;
  bool has_attr(const std::string& name) const { return find_attr(name) != nullptr; }
  // Typed getters with defaults; fail naming the attribute on a type mismatch.
  int64_t attr_int(const std::string& name, int64_t def) const;
  double attr_float(const std::string& name, double def) const;
  std::string attr_string(const std::string& name, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<double> attr_floats(const std::string& name, const std::vector<double>& def = {}) const;
  HostTensor attr_tensor(const std::string& name) const;

  // ---- building --------------------------------------------------------------------------
  // Adds a layer named name() (suffix empty) or name() + "/" + suffix, made unique.
  Layer* add_layer(const std::string& type, const std::vector<Tensor*>& inputs, int num_outputs, Attributes attrs = {},
                   const std::string& suffix = "");
  // A Constant layer named name() + "/" + suffix; returns its output.
  Tensor* add_constant(const HostTensor& value, const std::string& suffix);
  Tensor* add_int64_constant(const std::vector<int64_t>& values, const std::string& suffix);
  Tensor* add_float_constant(const std::vector<float>& values, const std::string& suffix);
  // The element type of input i when it is fixed before kiln infers types (graph inputs,
  // constants, Cast outputs); nullopt otherwise.
  std::optional<DataType> static_type(int i);

  // ---- outcomes --------------------------------------------------------------------------
  // The model is wrong: throws kiln::Error "node '<name>' (<op_type>): <message>".
  [[noreturn]] void fail(const std::string& message) const;
  // kiln cannot import this (valid) node: collected and reported with all the others.
  [[noreturn]] void unsupported(const std::string& reason) const;

 private:
  OnnxImportState& state_;
  const onnx::NodeProto& node_;
  std::string name_;
  int64_t opset_;
};

// ---- the importer registry ---------------------------------------------------------------
using OnnxImporterFn = void (*)(NodeContext&);

class OnnxImporterRegistry {
 public:
  static OnnxImporterRegistry& instance();
  // Domains "" and "ai.onnx" are the same. Throws on a duplicate.
  void add(const std::string& domain, const std::string& op_type, OnnxImporterFn fn, const OnnxImporterInfo& info = {});
  // Null when no importer handles (domain, op_type).
  OnnxImporterFn find(const std::string& domain, const std::string& op_type) const;
  bool has_domain(const std::string& domain) const;
  // Every registered importer with its info, sorted by domain then op type (list_onnx_importers).
  std::vector<OnnxImporterListing> list() const;

 private:
  std::map<std::pair<std::string, std::string>, OnnxImporterFn> importers_;
  std::map<std::pair<std::string, std::string>, OnnxImporterInfo> infos_;
};

struct OnnxImporterRegistrar {
  OnnxImporterRegistrar(const char* domain, const char* op_type, OnnxImporterFn fn, const OnnxImporterInfo& info = {}) {
    OnnxImporterRegistry::instance().add(domain, op_type, fn, info);
  }
};

#define KILN_ONNX_CONCAT_INNER(a, b) a##b
#define KILN_ONNX_CONCAT(a, b) KILN_ONNX_CONCAT_INNER(a, b)
// Registers fn as the importer of op_type in the default ONNX domain, optionally with an
// OnnxImporterInfo:
//   KILN_REGISTER_ONNX_IMPORTER("Relu", import_relu);
//   KILN_REGISTER_ONNX_IMPORTER("Clip", import_clip, {.min_opset = 6, .types = "float32", .notes = "..."});
#define KILN_REGISTER_ONNX_IMPORTER(op_type, ...) KILN_REGISTER_ONNX_IMPORTER_DOMAIN("", op_type, __VA_ARGS__)
#define KILN_REGISTER_ONNX_IMPORTER_DOMAIN(domain, op_type, ...) \
  static ::kiln::OnnxImporterRegistrar KILN_ONNX_CONCAT(kiln_onnx_importer_, __LINE__)(domain, op_type, __VA_ARGS__)

// ---- the plugin fallback (extension point) -----------------------------------------------
// Called for a node no registered importer handles (unknown op or non-default domain). Returns
// true when it imported the node (registering its outputs), false when not handled; may throw
// OnnxUnsupported with a more precise reason. Defined in onnx_plugin_fallback.cpp.
bool try_import_plugin_node(NodeContext& ctx);

// ---- helpers shared by the op files --------------------------------------------------------
// Attributes of `kind` Activation layers.
Attributes activation_attrs(const std::string& kind, double alpha = 0.0, double beta = 0.0);
// Spatial pads [b1..bk, e1..ek] for ONNX auto_pad SAME_UPPER/SAME_LOWER/VALID (or the `pads`
// attribute for NOTSET). kernel are effective kernel extents ((k-1)*d+1). Needs the input's
// static spatial dims only when some stride is > 1; fails naming the node otherwise.
std::vector<int64_t> resolve_auto_pad(NodeContext& ctx, const std::vector<int64_t>& kernel,
                                      const std::vector<int64_t>& strides);

}  // namespace kiln
