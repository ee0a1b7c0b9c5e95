// NodeContext and OnnxImportState: tensor lookup by ONNX name (with lazy Constant layers, so
// that initializers folded away by an importer, e.g. BatchNorm statistics, never become
// layers), attribute decoding, naming of created layers, the importer registry, and the
// auto_pad arithmetic shared by convolutions and pools.
#include "src/onnx/onnx_import_context.h"

#include <limits>

#include "src/ir/conv_params.h"
#include "src/onnx/onnx_tensor.h"
#include "src/core/text.h"

namespace kiln {

// ---- OnnxImportState ------------------------------------------------------------------------

Tensor* OnnxImportState::tensor(const std::string& name) {
  if (auto it = tensors.find(name); it != tensors.end()) return it->second;
  auto c = constants.find(name);
  if (c == constants.end()) return nullptr;
  Layer* layer = network->add_constant(c->second.value, unique_layer_name(c->second.layer_name));
  claim_tensor_name(layer->output(0), name);
  tensors[name] = layer->output(0);
  return layer->output(0);
}

void OnnxImportState::claim_tensor_name(Tensor* tensor, const std::string& name) {
  if (tensor->name() == name) return;
  if (Tensor* other = network->find_tensor(name); other && other != tensor) {
    // Only internal tensors (default names of helper layers) can hold an ONNX name here: ONNX
    // names are unique and set_output rejects redefinitions.
    other->set_name(network->unique_name(name));
  }
  tensor->set_name(name);
}

std::string OnnxImportState::unique_layer_name(const std::string& base) {
  std::string name = base;
  for (int n = 1; layer_names.count(name); ++n) name = base + "_" + std::to_string(n);
  layer_names.insert(name);
  return name;
}

int64_t OnnxImportState::opset_of(const std::string& domain) const {
  const std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = opsets.find(d);
  return it == opsets.end() ? 1 : it->second;
}

// ---- NodeContext: inputs ----------------------------------------------------------------------

Tensor* NodeContext::input(int i) {
  if (!has_input(i)) return nullptr;
  Tensor* t = state_.tensor(node_.input(i));
  if (!t) {
    if (state_.sequences.count(node_.input(i))) {
      unsupported("input " + quote(node_.input(i)) +
                  " is a sequence; kiln resolves ONNX sequences while importing and only "
                  "SequenceAt, SequenceInsert, SequenceErase, SequenceLength and ConcatFromSequence can read one");
    }
    fail("input '" + node_.input(i) +
         "' is not produced by any earlier node, initializer or graph input (is the graph topologically sorted?)");
  }
  return t;
}

Tensor* NodeContext::required_input(int i, const std::string& what) {
  if (!has_input(i)) fail("required input " + std::to_string(i) + " (" + what + ") is missing");
  return input(i);
}

const HostTensor* NodeContext::constant(int i) const {
  if (!has_input(i)) return nullptr;
  auto it = state_.constants.find(node_.input(i));
  return it == state_.constants.end() ? nullptr : &it->second.value;
}

const HostTensor& NodeContext::constant_input(int i, const std::string& what) const {
  if (!has_input(i)) fail("required input " + std::to_string(i) + " (" + what + ") is missing");
  const HostTensor* value = constant(i);
  if (!value) {
    fail("input " + quote(node_.input(i)) + " (" + what +
         ") must be an initializer or constant; kiln needs its value when importing this node");
  }
  return *value;
}

bool NodeContext::is_empty_constant(int i) const {
  const HostTensor* value = constant(i);
  return value && value->count() == 0;
}

std::optional<Dims> NodeContext::input_dims(int i) const {
  if (!has_input(i)) return std::nullopt;
  const std::string& name = node_.input(i);
  if (auto c = state_.constants.find(name); c != state_.constants.end()) return c->second.value.dims();
  if (auto t = state_.tensors.find(name);
      t != state_.tensors.end() && t->second->is_network_input() && !state_.poisoned.count(name)) {
    return t->second->dims();
  }
  if (auto k = state_.known_dims.find(name); k != state_.known_dims.end()) return k->second;
  return std::nullopt;
}

// ---- NodeContext: outputs -----------------------------------------------------------------------

bool NodeContext::output_used(int i) const { return has_output(i) && state_.consumed.count(node_.output(i)); }

void NodeContext::set_output(int i, Tensor* tensor) {
  if (!has_output(i)) return;
  const std::string& name = node_.output(i);
  if (state_.tensors.count(name) || state_.constants.count(name)) {
    fail("output " + quote(name) + " is already defined by an earlier node, initializer or graph input");
  }
  state_.claim_tensor_name(tensor, name);
  state_.tensors[name] = tensor;
}

void NodeContext::set_output_constant(int i, const HostTensor& value) {
  if (!has_output(i)) return;
  const std::string& name = node_.output(i);
  if (state_.tensors.count(name) || state_.constants.count(name)) {
    fail("output " + quote(name) + " is already defined by an earlier node, initializer or graph input");
  }
  state_.constants[name] = {value, name_};
}

// ---- NodeContext: attributes ----------------------------------------------------------------------

namespace {

// Older exporters leave AttributeProto.type unset; infer it from the field that is filled.
onnx::AttributeProto::AttributeType attr_kind(const onnx::AttributeProto& a) {
  if (a.type() != onnx::AttributeProto::UNDEFINED) return a.type();
  if (a.has_f()) return onnx::AttributeProto::FLOAT;
  if (a.has_i()) return onnx::AttributeProto::INT;
  if (a.has_s()) return onnx::AttributeProto::STRING;
  if (a.has_t()) return onnx::AttributeProto::TENSOR;
  if (a.floats_size()) return onnx::AttributeProto::FLOATS;
  if (a.ints_size()) return onnx::AttributeProto::INTS;
  if (a.strings_size()) return onnx::AttributeProto::STRINGS;
  return onnx::AttributeProto::UNDEFINED;
}

}  // namespace

const onnx::AttributeProto* NodeContext::find_attr(const std::string& name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) {
      if (!a.ref_attr_name().empty()) unsupported("attribute " + quote(name) + " refers to a function attribute");
      return &a;
    }
  }
  return nullptr;
}

int64_t NodeContext::attr_int(const std::string& name, int64_t def) const {
  const auto* a = find_attr(name);
  if (!a) return def;
  if (attr_kind(*a) != onnx::AttributeProto::INT) fail("attribute " + quote(name) + " must be an INT");
  return a->i();
}

double NodeContext::attr_float(const std::string& name, double def) const {
  const auto* a = find_attr(name);
  if (!a) return def;
  const auto kind = attr_kind(*a);
  if (kind == onnx::AttributeProto::INT) return static_cast<double>(a->i());
  if (kind != onnx::AttributeProto::FLOAT) fail("attribute " + quote(name) + " must be a FLOAT");
  return a->f();
}

std::string NodeContext::attr_string(const std::string& name, const std::string& def) const {
  const auto* a = find_attr(name);
  if (!a) return def;
  if (attr_kind(*a) != onnx::AttributeProto::STRING) fail("attribute " + quote(name) + " must be a STRING");
  return a->s();
}

std::vector<int64_t> NodeContext::attr_ints(const std::string& name, const std::vector<int64_t>& def) const {
  const auto* a = find_attr(name);
  if (!a) return def;
  const auto kind = attr_kind(*a);
  if (kind == onnx::AttributeProto::UNDEFINED) return {};  // an empty list has no field set
  if (kind != onnx::AttributeProto::INTS) fail("attribute " + quote(name) + " must be INTS");
  return {a->ints().begin(), a->ints().end()};
}

std::vector<double> NodeContext::attr_floats(const std::string& name, const std::vector<double>& def) const {
  const auto* a = find_attr(name);
  if (!a) return def;
  const auto kind = attr_kind(*a);
  if (kind == onnx::AttributeProto::UNDEFINED) return {};
  if (kind != onnx::AttributeProto::FLOATS) fail("attribute " + quote(name) + " must be FLOATS");
  return {a->floats().begin(), a->floats().end()};
}

HostTensor NodeContext::attr_tensor(const std::string& name) const {
  const auto* a = find_attr(name);
  if (!a) fail("attribute " + quote(name) + " is missing");
  if (attr_kind(*a) != onnx::AttributeProto::TENSOR) fail("attribute " + quote(name) + " must be a TENSOR");
  try {
    return tensor_from_proto(a->t(), state_.base_dir, "attribute " + quote(name));
  } catch (const Error& e) {
    fail(e.what());
  }
}

// ---- NodeContext: building ----------------------------------------------------------------------

Layer* NodeContext::add_layer(const std::string& type, const std::vector<Tensor*>& inputs, int num_outputs,
                              Attributes attrs, const std::string& suffix) {
  const std::string name = state_.unique_layer_name(suffix.empty() ? name_ : name_ + "/" + suffix);
  return state_.network->add_layer(type, inputs, num_outputs, std::move(attrs), name);
}

Tensor* NodeContext::add_constant(const HostTensor& value, const std::string& suffix) {
  return state_.network->add_constant(value, state_.unique_layer_name(name_ + "/" + suffix))->output(0);
}

Tensor* NodeContext::add_int64_constant(const std::vector<int64_t>& values, const std::string& suffix) {
  return add_constant(HostTensor::from_vector(DataType::kInt64, Dims{static_cast<int64_t>(values.size())}, values),
                      suffix);
}

std::optional<DataType> NodeContext::static_type(int i) {
  if (const HostTensor* c = constant(i)) return c->type();
  Tensor* t = input(i);
  if (!t) return std::nullopt;
  if (t->is_network_input()) return t->type();
  if (const Layer* p = t->producer()) {
    if (p->type() == kLayerConstant) return t->type();
    if (p->type() == kLayerCast) return parse_data_type(p->attrs().get_string("to"));
  }
  return std::nullopt;
}

Tensor* NodeContext::add_float_constant(const std::vector<float>& values, const std::string& suffix) {
  return add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{static_cast<int64_t>(values.size())}, values),
                      suffix);
}

void NodeContext::fail(const std::string& message) const {
  throw Error("node " + quote(name_) + " (" + node_.op_type() + "): " + message);
}

void NodeContext::unsupported(const std::string& reason) const { throw OnnxUnsupported{reason}; }

// ---- registry ------------------------------------------------------------------------------------

namespace {
std::string normalize_domain(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }
}  // namespace

OnnxImporterRegistry& OnnxImporterRegistry::instance() {
  static OnnxImporterRegistry registry;
  return registry;
}

void OnnxImporterRegistry::add(const std::string& domain, const std::string& op_type, OnnxImporterFn fn,
                               const OnnxImporterInfo& info) {
  auto key = std::make_pair(normalize_domain(domain), op_type);
  if (importers_.count(key)) {
    throw Error("ONNX importer for " + quote(op_type) + " (domain " + quote(domain) + ") is registered twice");
  }
  importers_[key] = fn;
  infos_[key] = info;
}

std::vector<OnnxImporterListing> OnnxImporterRegistry::list() const {
  std::vector<OnnxImporterListing> out;
  for (const auto& [key, info] : infos_) out.push_back({key.first, key.second, info});
  return out;
}

std::vector<OnnxImporterListing> list_onnx_importers() { return OnnxImporterRegistry::instance().list(); }

bool has_onnx_importer(const std::string& domain, const std::string& op_type) {
  return OnnxImporterRegistry::instance().find(domain, op_type) != nullptr;
}

OnnxImporterFn OnnxImporterRegistry::find(const std::string& domain, const std::string& op_type) const {
  auto it = importers_.find({normalize_domain(domain), op_type});
  return it == importers_.end() ? nullptr : it->second;
}

bool OnnxImporterRegistry::has_domain(const std::string& domain) const {
  const std::string d = normalize_domain(domain);
  for (const auto& [key, fn] : importers_) {
    if (key.first == d) return true;
  }
  return false;
}

// ---- shared helpers ------------------------------------------------------------------------------

Attributes activation_attrs(const std::string& kind, double alpha, double beta) {
  Attributes a;
  a.set("kind", kind);
  a.set("alpha", alpha);
  a.set("beta", beta);
  return a;
}

std::vector<int64_t> resolve_auto_pad(NodeContext& ctx, const std::vector<int64_t>& kernel,
                                      const std::vector<int64_t>& strides) {
  const size_t k = kernel.size();
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> pads = ctx.attr_ints("pads");
    if (!pads.empty() && pads.size() != 2 * k) {
      ctx.fail("attribute 'pads' has " + std::to_string(pads.size()) + " values, expected " + std::to_string(2 * k));
    }
    for (int64_t p : pads) {
      if (p < 0) ctx.unsupported("negative pads");
    }
    return pads;
  }
  if (auto_pad == "VALID") return std::vector<int64_t>(2 * k, 0);
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") ctx.fail("unknown auto_pad value " + quote(auto_pad));

  // SAME: output = ceil(in / stride); total padding = (out - 1) * stride + kernel - in. With
  // stride 1 that is kernel - 1 whatever the input size, so only strided dims need static dims.
  bool need_dims = false;
  for (size_t i = 0; i < k; ++i) need_dims |= strides[i] > 1;
  std::optional<Dims> dims;
  if (need_dims) {
    dims = ctx.input_dims(0);
    bool ok = dims && dims->rank() == static_cast<int>(k) + 2;
    for (size_t i = 0; ok && i < k; ++i) ok = (*dims)[static_cast<int>(i) + 2] != kDynamic || strides[i] == 1;
    if (!ok) {
      ctx.fail("auto_pad " + auto_pad + " with strides > 1 needs static spatial dims of input '" + ctx.input_name(0) +
               "', which the model does not record" + (dims ? " (dims " + dims->to_string() + ")" : std::string()) +
               "; run onnx.shape_inference.infer_shapes on the model, or export with explicit pads");
    }
  }
  std::vector<int64_t> pads(2 * k, 0);
  const AutoPad same = auto_pad == "SAME_UPPER" ? AutoPad::kSameUpper : AutoPad::kSameLower;
  for (size_t i = 0; i < k; ++i) {
    // The rule kiln's IR uses (src/ir/conv_params.h); with stride 1 the total is kernel - 1
    // whatever the input size, so an unknown size reads as 0.
    const int64_t in = strides[i] > 1 ? (*dims)[static_cast<int>(i) + 2] : 0;
    same_padding(same, in, kernel[i], strides[i], &pads[i], &pads[i + k]);
  }
  return pads;
}

}  // namespace kiln
