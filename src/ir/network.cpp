// The Network graph: ownership of layers and tensors, construction helpers that write the
// attributes of docs/layers.md, editing primitives used by the builder passes, topological
// ordering and validation.
#include "kiln/network.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "kiln/error.h"
#include "kiln/plugin.h"
#include "src/ir/conv_params.h"
#include "src/ir/normalization_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/pool_params.h"
#include "src/ir/resize_params.h"
#include "src/ir/scatter_params.h"
#include "src/ir/string_params.h"
#include "src/core/text.h"

namespace kiln {

namespace {

// ---- name index (network.h: detail::NameIndex) ----------------------------------------------

// `item` now has `name`; `appended`: it is the last of its list (so an earlier element of the
// same name stays the first).
template <typename T>
void index_add(detail::NameIndex<T>& index, T* item, const std::string& name, bool appended) {
  if (index.stale) return;
  if (++index.count[name] == 1) {
    index.first[name] = item;
  } else if (!appended) {
    index.stale = true;  // which of the two comes first is not known without a scan
  }
}

// `item` no longer has `name`.
template <typename T>
void index_remove(detail::NameIndex<T>& index, T* item, const std::string& name) {
  if (index.stale) return;
  auto count = index.count.find(name);
  if (count == index.count.end()) {
    index.stale = true;
    return;
  }
  if (--count->second == 0) {
    index.count.erase(count);
    index.first.erase(name);
  } else if (index.first[name] == item) {
    index.stale = true;  // the next element of that name is not known without a scan
  }
}

template <typename T>
T* index_find(detail::NameIndex<T>& index, const std::vector<std::unique_ptr<T>>& items, const std::string& name) {
  if (index.stale) {
    index.first.clear();
    index.count.clear();
    for (const auto& item : items) {
      if (!item) continue;  // a hole left by a removal
      if (++index.count[item->name()] == 1) index.first[item->name()] = item.get();
    }
    index.stale = false;
  }
  auto it = index.first.find(name);
  return it == index.first.end() ? nullptr : it->second;
}

// Drops one entry of `reader` from t's readers (one per input slot; their order is irrelevant).
void remove_reader(std::vector<Layer*>& readers, const Layer* reader) {
  auto it = std::find(readers.begin(), readers.end(), reader);
  if (it == readers.end()) return;
  *it = readers.back();
  readers.pop_back();
}

}  // namespace

std::vector<Layer*> Tensor::consumers() const {
  std::vector<Layer*> result(readers_.begin(), readers_.end());
  // Positions in the layer list are increasing in network order (also with removal holes).
  std::sort(result.begin(), result.end(), [](const Layer* a, const Layer* b) { return a->index_ < b->index_; });
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

void Tensor::set_name(std::string name) {
  std::string old = std::move(name_);
  name_ = std::move(name);
  if (network_ && old != name_) network_->renamed(this, old);
}

void Layer::set_name(std::string name) {
  std::string old = std::move(name_);
  name_ = std::move(name);
  if (network_ && old != name_) network_->renamed(this, old);
}

void Layer::set_input(int i, Tensor* tensor) {
  if (i < 0 || i > num_inputs()) {
    throw Error("layer " + quote(name_) + ": input index " + std::to_string(i) + " out of range (has " +
                std::to_string(num_inputs()) + " inputs)");
  }
  if (tensor && network_ && tensor->network_ != network_) {
    throw Error("layer " + quote(name_) + ": input " + std::to_string(i) + " belongs to another network");
  }
  if (i == num_inputs()) {
    inputs_.push_back(tensor);
  } else {
    Tensor* old = inputs_[static_cast<size_t>(i)];
    if (old && network_) remove_reader(old->readers_, this);
    inputs_[static_cast<size_t>(i)] = tensor;
  }
  if (tensor && network_) tensor->readers_.push_back(this);
}

Network::Network() = default;
Network::~Network() {
  for (const auto& l : layers_) {
    if (l) forget_params(*l);
  }
}

std::unique_ptr<Network> Network::clone() const {
  compact();
  auto copy = std::make_unique<Network>();
  std::unordered_map<const Tensor*, Tensor*> map;
  for (const auto& t : tensors_) {
    Tensor* n = copy->new_tensor(t->name_);
    n->type_ = t->type_;
    n->dims_ = t->dims_;
    n->format_ = t->format_;
    n->is_input_ = t->is_input_;
    n->is_output_ = t->is_output_;
    map[t.get()] = n;
  }
  for (const auto& l : layers_) {
    auto nl = std::unique_ptr<Layer>(new Layer(*l));
    nl->network_ = copy.get();
    nl->index_ = copy->layers_.size();
    for (auto& in : nl->inputs_) {
      in = in ? map.at(in) : nullptr;
      if (in) in->readers_.push_back(nl.get());
    }
    for (auto& out : nl->outputs_) {
      out = map.at(out);
      out->producer_ = nl.get();
    }
    index_add(copy->layer_names_, nl.get(), nl->name_, true);
    copy->layers_.push_back(std::move(nl));
  }
  for (Tensor* t : inputs_) copy->inputs_.push_back(map.at(t));
  for (Tensor* t : outputs_) copy->outputs_.push_back(map.at(t));
  copy->name_counter_ = name_counter_;
  return copy;
}

Tensor* Network::new_tensor(const std::string& name) {
  auto t = std::unique_ptr<Tensor>(new Tensor());
  t->name_ = name;
  t->network_ = this;
  t->index_ = tensors_.size();
  index_add(tensor_names_, t.get(), name, true);
  tensors_.push_back(std::move(t));
  return tensors_.back().get();
}

void Network::renamed(Tensor* tensor, const std::string& old_name) {
  index_remove(tensor_names_, tensor, old_name);
  index_add(tensor_names_, tensor, tensor->name_, false);
}

void Network::renamed(Layer* layer, const std::string& old_name) {
  index_remove(layer_names_, layer, old_name);
  index_add(layer_names_, layer, layer->name_, false);
}

void Network::compact_now() const {
  const auto squeeze = [](auto& list) {
    size_t n = 0;
    for (auto& item : list) {
      if (!item) continue;
      item->index_ = n;
      if (&list[n] != &item) list[n] = std::move(item);
      ++n;
    }
    list.resize(n);
  };
  squeeze(layers_);
  squeeze(tensors_);
  holes_ = 0;
}

void Network::erase_tensor(Tensor* tensor) {
  index_remove(tensor_names_, tensor, tensor->name_);
  tensors_[tensor->index_].reset();
  ++holes_;
}

std::string Network::unique_name(const std::string& prefix) {
  for (;;) {
    std::string name = prefix + "_" + std::to_string(name_counter_++);
    if (!find_tensor(name) && !find_layer(name)) return name;
  }
}

Tensor* Network::add_input(const std::string& name, DataType type, const Dims& dims) {
  if (name.empty()) throw Error("add_input: an input needs a name");
  if (find_tensor(name)) throw Error("add_input: a tensor named " + quote(name) + " already exists");
  for (int64_t d : dims) {
    if (d < kDynamic)
      throw Error("add_input " + quote(name) + ": invalid extent " + std::to_string(d) + " in " + dims.to_string());
  }
  Tensor* t = new_tensor(name);
  t->type_ = type;
  t->dims_ = dims;
  t->is_input_ = true;
  inputs_.push_back(t);
  return t;
}

void Network::mark_output(Tensor* tensor) {
  if (!tensor || tensor->network_ != this) throw Error("mark_output: tensor does not belong to this network");
  if (tensor->is_output_) return;
  tensor->is_output_ = true;
  outputs_.push_back(tensor);
}

void Network::unmark_output(Tensor* tensor) {
  tensor->is_output_ = false;
  outputs_.erase(std::remove(outputs_.begin(), outputs_.end(), tensor), outputs_.end());
}

Layer* Network::add_layer(const std::string& type, const std::vector<Tensor*>& inputs, int num_outputs,
                          Attributes attrs, const std::string& name) {
  if (num_outputs < 0) throw Error("add_layer " + quote(type) + ": negative output count");
  for (Tensor* t : inputs) {
    if (t && t->network_ != this) throw Error("add_layer " + quote(type) + ": an input belongs to another network");
  }
  auto layer = std::unique_ptr<Layer>(new Layer());
  layer->type_ = type;
  layer->name_ = name.empty() ? unique_name(type) : name;
  layer->inputs_ = inputs;
  layer->attrs_ = std::move(attrs);
  // Typed parameters are decoded and checked once here, before the layer joins the graph (a bad
  // enum value or range fails now, naming the layer and attribute); validate() checks later edits.
  decode_params(*layer);
  layer->network_ = this;
  layer->index_ = layers_.size();
  for (Tensor* t : inputs) {
    if (t) t->readers_.push_back(layer.get());
  }
  index_add(layer_names_, layer.get(), layer->name_, true);
  for (int i = 0; i < num_outputs; ++i) {
    std::string tname = num_outputs == 1 ? layer->name_ : layer->name_ + "_out" + std::to_string(i);
    if (find_tensor(tname)) tname = unique_name(tname);
    Tensor* out = new_tensor(tname);
    out->producer_ = layer.get();
    if (!inputs.empty() && inputs[0]) out->type_ = inputs[0]->type_;
    layer->outputs_.push_back(out);
  }
  layers_.push_back(std::move(layer));
  return layers_.back().get();
}

Layer* Network::add_constant(const HostTensor& value, const std::string& name) {
  if (value.empty()) throw Error("add_constant: empty tensor");
  Attributes a;
  a.set("value", value);
  Layer* l = add_layer(kLayerConstant, {}, 1, std::move(a), name);
  l->output(0)->type_ = value.type();
  l->output(0)->dims_ = value.dims();
  return l;
}

Layer* Network::add_convolution(Tensor* input, const ConvolutionDesc& desc, const HostTensor& weights,
                                const HostTensor& bias) {
  if (!input) throw Error("add_convolution: null input");
  if (weights.empty()) throw Error("add_convolution: weights are required");
  if (weights.dims().rank() != static_cast<int>(desc.kernel.size()) + 2 || weights.dims()[0] != desc.num_output_maps) {
    throw Error("add_convolution: weights dims " + weights.dims().to_string() + " do not match " +
                std::to_string(desc.num_output_maps) + " output maps and a " + std::to_string(desc.kernel.size()) +
                "-D kernel (expected [M, C/groups, k...])");
  }
  Tensor* w = add_constant(weights)->output(0);
  Tensor* b = bias.empty() ? nullptr : add_constant(bias)->output(0);
  std::vector<Tensor*> ins{input, w};
  if (b) ins.push_back(b);
  return add_layer(kLayerConvolution, ins, 1, conv_attributes(desc, false));
}

Layer* Network::add_deconvolution(Tensor* input, const ConvolutionDesc& desc, const HostTensor& weights,
                                  const HostTensor& bias) {
  if (!input) throw Error("add_deconvolution: null input");
  if (weights.empty()) throw Error("add_deconvolution: weights are required");
  Tensor* w = add_constant(weights)->output(0);
  Tensor* b = bias.empty() ? nullptr : add_constant(bias)->output(0);
  std::vector<Tensor*> ins{input, w};
  if (b) ins.push_back(b);
  return add_layer(kLayerDeconvolution, ins, 1, conv_attributes(desc, true));
}

Layer* Network::add_pooling(Tensor* input, const PoolingDesc& desc) {
  return add_layer(kLayerPooling, {input}, 1, pool_attributes(desc));
}

Layer* Network::add_activation(Tensor* input, ActivationType type, double alpha, double beta) {
  Attributes a;
  a.set("kind", std::string(to_string(type)));
  a.set("alpha", alpha);
  a.set("beta", beta);
  return add_layer(kLayerActivation, {input}, 1, std::move(a));
}

Layer* Network::add_scale(Tensor* input, ScaleMode mode, const HostTensor& shift, const HostTensor& scale,
                          const HostTensor& power, int64_t channel_axis) {
  Attributes a;
  a.set("mode", std::string(mode == ScaleMode::kUniform   ? "uniform"
                            : mode == ScaleMode::kChannel ? "channel"
                                                          : "elementwise"));
  a.set("channel_axis", channel_axis);
  auto c = [&](const HostTensor& t) { return t.empty() ? nullptr : add_constant(t)->output(0); };
  Tensor* sc = c(scale);
  Tensor* sh = c(shift);
  Tensor* pw = c(power);
  return add_layer(kLayerScale, {input, sc, sh, pw}, 1, std::move(a));
}

Layer* Network::add_elementwise(Tensor* a, Tensor* b, ElementWiseOp op) {
  Attributes at;
  at.set("op", std::string(to_string(op)));
  return add_layer(kLayerElementWise, {a, b}, 1, std::move(at));
}

Layer* Network::add_unary(Tensor* input, UnaryOp op) {
  Attributes a;
  a.set("op", std::string(to_string(op)));
  return add_layer(kLayerUnary, {input}, 1, std::move(a));
}

Layer* Network::add_matrix_multiply(Tensor* a, bool transpose_a, Tensor* b, bool transpose_b) {
  Attributes at;
  at.set("transpose_a", int64_t{transpose_a});
  at.set("transpose_b", int64_t{transpose_b});
  return add_layer(kLayerMatrixMultiply, {a, b}, 1, std::move(at));
}

Layer* Network::add_fully_connected(Tensor* input, int64_t num_outputs, const HostTensor& weights,
                                    const HostTensor& bias) {
  if (weights.dims().rank() != 2 || weights.dims()[0] != num_outputs) {
    throw Error("add_fully_connected: weights dims " + weights.dims().to_string() +
                " must be [num_outputs=" + std::to_string(num_outputs) + ", K]");
  }
  Attributes fa;
  fa.set("reshape_mode", std::string("flatten"));
  fa.set("axis", int64_t{1});
  Tensor* flat = add_layer(kLayerShuffle, {input}, 1, std::move(fa))->output(0);
  Tensor* w = add_constant(weights)->output(0);
  Tensor* b = bias.empty() ? nullptr : add_constant(bias)->output(0);
  Attributes a;
  a.set("trans_b", int64_t{1});
  std::vector<Tensor*> ins{flat, w};
  if (b) ins.push_back(b);
  return add_layer(kLayerGemm, ins, 1, std::move(a));
}

Layer* Network::add_shuffle(Tensor* input, const std::vector<int64_t>& first_transpose,
                            const std::vector<int64_t>& reshape, const std::vector<int64_t>& second_transpose) {
  Attributes a;
  if (!first_transpose.empty()) a.set("first_transpose", first_transpose);
  if (!reshape.empty()) {
    a.set("reshape_mode", std::string("dims"));
    a.set("reshape", reshape);
  }
  if (!second_transpose.empty()) a.set("second_transpose", second_transpose);
  return add_layer(kLayerShuffle, {input}, 1, std::move(a));
}

Layer* Network::add_shuffle_dynamic(Tensor* input, Tensor* shape) {
  Attributes a;
  a.set("reshape_mode", std::string("dims"));
  return add_layer(kLayerShuffle, {input, shape}, 1, std::move(a));
}

Layer* Network::add_concatenation(const std::vector<Tensor*>& inputs, int64_t axis) {
  Attributes a;
  a.set("axis", axis);
  return add_layer(kLayerConcatenation, inputs, 1, std::move(a));
}

Layer* Network::add_slice(Tensor* input, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                          const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  auto vec = [&](const std::vector<int64_t>& v) {
    return add_constant(HostTensor::from_vector(DataType::kInt64, Dims{static_cast<int64_t>(v.size())}, v))->output(0);
  };
  std::vector<Tensor*> ins{input, vec(starts), vec(ends)};
  ins.push_back(axes.empty() ? nullptr : vec(axes));
  if (!steps.empty()) ins.push_back(vec(steps));
  return add_layer(kLayerSlice, ins, 1);
}

Layer* Network::add_gather(Tensor* data, Tensor* indices, int64_t axis) {
  Attributes a;
  a.set("axis", axis);
  return add_layer(kLayerGather, {data, indices}, 1, std::move(a));
}

Layer* Network::add_softmax(Tensor* input, int64_t axis) {
  Attributes a;
  a.set("axis", axis);
  return add_layer(kLayerSoftMax, {input}, 1, std::move(a));
}

Layer* Network::add_reduce(Tensor* input, ReduceOp op, const std::vector<int64_t>& axes, bool keep_dims) {
  Attributes a;
  a.set("op", std::string(to_string(op)));
  a.set("axes", axes);
  a.set("keep_dims", int64_t{keep_dims});
  return add_layer(kLayerReduce, {input}, 1, std::move(a));
}

Layer* Network::add_identity(Tensor* input) { return add_layer(kLayerIdentity, {input}, 1); }

Layer* Network::add_cast(Tensor* input, DataType to) {
  Attributes a;
  a.set("to", std::string(kiln::to_string(to)));
  return add_layer(kLayerCast, {input}, 1, std::move(a));
}

Layer* Network::add_select(Tensor* condition, Tensor* then_value, Tensor* else_value) {
  return add_layer(kLayerSelect, {condition, then_value, else_value}, 1);
}

Layer* Network::add_shape(Tensor* input) { return add_layer(kLayerShape, {input}, 1); }

// ---- typed helpers of the other layer types -------------------------------------------------

namespace {

// The attribute string of enum value `v`: names[v], the order of the enum's declaration.
template <typename E, size_t N>
std::string enum_name(E v, const char* const (&names)[N]) {
  const auto i = static_cast<size_t>(v);
  if (i >= N) throw Error("invalid enum value " + std::to_string(i));
  return names[i];
}

// The attribute string of enum value `v` as the to_string next to the layer's params names it
// (src/ir/*_params.h: the table the params' decoding reads); "?" there is not a value of the enum.
template <typename E>
std::string param_name(E v) {
  const char* name = to_string(v);
  if (std::string_view(name) == "?") throw Error("invalid enum value " + std::to_string(static_cast<size_t>(v)));
  return name;
}

// Omitted optional inputs at the end are left out (add_layer keeps null entries as omitted inputs).
std::vector<Tensor*> trimmed(std::vector<Tensor*> inputs) {
  while (!inputs.empty() && !inputs.back()) inputs.pop_back();
  return inputs;
}

int64_t flag(bool b) { return b ? 1 : 0; }

}  // namespace

Layer* Network::add_parametric_relu(Tensor* input, Tensor* slope) {
  return add_layer(kLayerParametricReLU, {input, slope}, 1);
}

Layer* Network::add_fused_elementwise(const std::vector<Tensor*>& inputs, const std::vector<std::string>& program) {
  Attributes a;
  a.set("program", program);
  return add_layer(kLayerFusedElementWise, inputs, 1, std::move(a));
}

Layer* Network::add_gemm(Tensor* a, Tensor* b, Tensor* c, double alpha, double beta, bool trans_a, bool trans_b) {
  Attributes at;
  at.set("alpha", alpha);
  at.set("beta", beta);
  at.set("trans_a", flag(trans_a));
  at.set("trans_b", flag(trans_b));
  return add_layer(kLayerGemm, trimmed({a, b, c}), 1, std::move(at));
}

Layer* Network::add_split(Tensor* input, int64_t axis, int num_outputs, const std::vector<int64_t>& sizes) {
  if (!sizes.empty() && sizes.size() != static_cast<size_t>(num_outputs)) {
    throw Error("add_split: " + std::to_string(sizes.size()) + " sizes for " + std::to_string(num_outputs) +
                " outputs");
  }
  Attributes a;
  a.set("axis", axis);
  if (!sizes.empty()) a.set("split", sizes);
  return add_layer(kLayerSplit, {input}, num_outputs, std::move(a));
}

Layer* Network::add_resize(Tensor* input, Tensor* scales, Tensor* sizes, const ResizeDesc& desc) {
  Attributes a;
  a.set("mode", param_name(desc.mode));
  a.set("coordinate_transformation_mode", desc.coordinate_transformation_mode);
  a.set("nearest_mode", desc.nearest_mode);
  a.set("cubic_coeff_a", desc.cubic_coeff_a);
  a.set("exclude_outside", flag(desc.exclude_outside));
  a.set("extrapolation_value", desc.extrapolation_value);
  return add_layer(kLayerResize, trimmed({input, scales, sizes}), 1, std::move(a));
}

Layer* Network::add_padding(Tensor* input, Tensor* pads, Tensor* value, PaddingMode mode) {
  static const char* const kModes[] = {"constant", "reflect", "edge", "wrap"};
  Attributes a;
  a.set("mode", enum_name(mode, kModes));
  return add_layer(kLayerPadding, trimmed({input, pads, value}), 1, std::move(a));
}

Layer* Network::add_fill(FillMode mode, const std::vector<Tensor*>& inputs, const HostTensor& value) {
  static const char* const kModes[] = {"constant", "range"};
  Attributes a;
  a.set("mode", enum_name(mode, kModes));
  if (mode == FillMode::kConstant && !value.empty()) a.set("value", value);
  return add_layer(kLayerFill, inputs, 1, std::move(a));
}

Layer* Network::add_expand(Tensor* input, Tensor* shape) { return add_layer(kLayerExpand, {input, shape}, 1); }

Layer* Network::add_tile(Tensor* input, Tensor* repeats) { return add_layer(kLayerTile, {input, repeats}, 1); }

Layer* Network::add_normalization(Tensor* input, Tensor* scale, Tensor* bias, const NormalizationDesc& desc,
                                  int num_outputs) {
  Attributes a;
  a.set("mode", param_name(desc.mode));
  a.set("axis", desc.axis);
  a.set("axes", desc.axes);
  a.set("num_groups", desc.num_groups);
  a.set("epsilon", desc.epsilon);
  a.set("normalize_variance", flag(desc.normalize_variance));
  a.set("p", desc.p);
  return add_layer(kLayerNormalization, trimmed({input, scale, bias}), num_outputs, std::move(a));
}

Layer* Network::add_lrn(Tensor* input, int64_t size, double alpha, double beta, double bias) {
  Attributes a;
  a.set("size", size);
  a.set("alpha", alpha);
  a.set("beta", beta);
  a.set("bias", bias);
  return add_layer(kLayerLRN, {input}, 1, std::move(a));
}

Layer* Network::add_arg_reduce(Tensor* input, ArgReduceOp op, int64_t axis, bool keep_dims, bool select_last_index,
                               bool one_hot) {
  static const char* const kOps[] = {"max", "min"};
  Attributes a;
  a.set("op", enum_name(op, kOps));
  a.set("axis", axis);
  a.set("keep_dims", flag(keep_dims));
  a.set("select_last_index", flag(select_last_index));
  a.set("one_hot", flag(one_hot));
  return add_layer(kLayerArgReduce, {input}, 1, std::move(a));
}

Layer* Network::add_topk(Tensor* input, Tensor* k, int64_t axis, bool largest, bool sorted, int num_outputs) {
  Attributes a;
  a.set("axis", axis);
  a.set("largest", flag(largest));
  a.set("sorted", flag(sorted));
  return add_layer(kLayerTopK, {input, k}, num_outputs, std::move(a));
}

Layer* Network::add_cumsum(Tensor* input, Tensor* axis, bool exclusive, bool reverse) {
  Attributes a;
  a.set("exclusive", flag(exclusive));
  a.set("reverse", flag(reverse));
  return add_layer(kLayerCumSum, {input, axis}, 1, std::move(a));
}

Layer* Network::add_trilu(Tensor* input, Tensor* k, bool upper) {
  Attributes a;
  a.set("upper", flag(upper));
  return add_layer(kLayerTrilu, trimmed({input, k}), 1, std::move(a));
}

Layer* Network::add_one_hot(Tensor* indices, Tensor* depth, Tensor* values, int64_t axis) {
  Attributes a;
  a.set("axis", axis);
  return add_layer(kLayerOneHot, {indices, depth, values}, 1, std::move(a));
}

Layer* Network::add_reverse_sequence(Tensor* input, Tensor* sequence_lens, int64_t batch_axis, int64_t time_axis) {
  Attributes a;
  a.set("batch_axis", batch_axis);
  a.set("time_axis", time_axis);
  return add_layer(kLayerReverseSequence, {input, sequence_lens}, 1, std::move(a));
}

Layer* Network::add_max_unpool(Tensor* input, Tensor* indices, Tensor* output_shape, const std::vector<int64_t>& kernel,
                               const std::vector<int64_t>& strides, const std::vector<int64_t>& pads) {
  Attributes a;
  a.set("kernel", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  return add_layer(kLayerMaxUnpool, trimmed({input, indices, output_shape}), 1, std::move(a));
}

Layer* Network::add_non_max_suppression(Tensor* boxes, Tensor* scores, Tensor* max_output_boxes_per_class,
                                        Tensor* iou_threshold, Tensor* score_threshold, bool center_point_box) {
  Attributes a;
  a.set("center_point_box", flag(center_point_box));
  return add_layer(kLayerNonMaxSuppression,
                   trimmed({boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold}), 2,
                   std::move(a));
}

Layer* Network::add_unique(Tensor* input, bool sorted, bool flatten, int64_t axis) {
  Attributes a;
  a.set("sorted", flag(sorted));
  a.set("flatten", flag(flatten));
  a.set("axis", axis);
  return add_layer(kLayerUnique, {input}, 5, std::move(a));
}

Layer* Network::add_einsum(const std::vector<Tensor*>& inputs, const std::string& equation) {
  Attributes a;
  a.set("equation", equation);
  return add_layer(kLayerEinsum, inputs, 1, std::move(a));
}

Layer* Network::add_det(Tensor* input) { return add_layer(kLayerDet, {input}, 1); }

Layer* Network::add_bit_shift(Tensor* x, Tensor* y, BitShiftDirection direction) {
  static const char* const kDirections[] = {"left", "right"};
  Attributes a;
  a.set("direction", enum_name(direction, kDirections));
  return add_layer(kLayerBitShift, {x, y}, 1, std::move(a));
}

Layer* Network::add_scatter(Tensor* data, Tensor* indices, Tensor* updates, ScatterMode mode, int64_t axis,
                            ScatterReductionKind reduction) {
  static const char* const kModes[] = {"elements", "nd"};
  Attributes a;
  a.set("mode", enum_name(mode, kModes));
  a.set("axis", axis);
  a.set("reduction", param_name(reduction));
  return add_layer(kLayerScatter, {data, indices, updates}, 1, std::move(a));
}

Layer* Network::add_quantize(Tensor* input, Tensor* scale, Tensor* zero_point, int64_t axis, int64_t block_size,
                             DataType output_type) {
  Attributes a;
  a.set("axis", axis);
  a.set("block_size", block_size);
  a.set("output_type", std::string(kiln::to_string(output_type)));
  return add_layer(kLayerQuantize, trimmed({input, scale, zero_point}), 1, std::move(a));
}

Layer* Network::add_dequantize(Tensor* input, Tensor* scale, Tensor* zero_point, int64_t axis, int64_t block_size) {
  Attributes a;
  a.set("axis", axis);
  a.set("block_size", block_size);
  return add_layer(kLayerDequantize, trimmed({input, scale, zero_point}), 1, std::move(a));
}

Layer* Network::add_grid_sample(Tensor* input, Tensor* grid, InterpolationMode mode, GridSamplePadding padding,
                                bool align_corners) {
  static const char* const kPadding[] = {"zeros", "border", "reflection"};
  Attributes a;
  a.set("mode", param_name(mode));
  a.set("padding_mode", enum_name(padding, kPadding));
  a.set("align_corners", flag(align_corners));
  return add_layer(kLayerGridSample, {input, grid}, 1, std::move(a));
}

Layer* Network::add_roi_align(Tensor* input, Tensor* rois, Tensor* batch_indices, const RoiAlignDesc& desc) {
  static const char* const kModes[] = {"avg", "max"};
  Attributes a;
  a.set("mode", enum_name(desc.mode, kModes));
  a.set("output_height", desc.output_height);
  a.set("output_width", desc.output_width);
  a.set("sampling_ratio", desc.sampling_ratio);
  a.set("spatial_scale", desc.spatial_scale);
  a.set("coordinate_transformation_mode", desc.coordinate_transformation_mode);
  return add_layer(kLayerRoiAlign, {input, rois, batch_indices}, 1, std::move(a));
}

Layer* Network::add_max_roi_pool(Tensor* input, Tensor* rois, const std::vector<int64_t>& pooled_shape,
                                 double spatial_scale) {
  Attributes a;
  a.set("pooled_shape", pooled_shape);
  a.set("spatial_scale", spatial_scale);
  return add_layer(kLayerMaxRoiPool, {input, rois}, 1, std::move(a));
}

Layer* Network::add_rnn(const std::vector<Tensor*>& inputs, const RNNDesc& desc, int num_outputs) {
  static const char* const kCells[] = {"rnn", "gru", "lstm"};
  static const char* const kDirections[] = {"forward", "reverse", "bidirectional"};
  Attributes a;
  a.set("cell", enum_name(desc.cell, kCells));
  a.set("hidden_size", desc.hidden_size);
  a.set("direction", enum_name(desc.direction, kDirections));
  a.set("activations", desc.activations);
  if (!desc.activation_alpha.empty()) a.set("activation_alpha", desc.activation_alpha);
  if (!desc.activation_beta.empty()) a.set("activation_beta", desc.activation_beta);
  a.set("clip", desc.clip);
  a.set("linear_before_reset", flag(desc.linear_before_reset));
  a.set("input_forget", flag(desc.input_forget));
  a.set("layout", desc.layout);
  if (num_outputs == 0) num_outputs = desc.cell == RNNCell::kLstm ? 3 : 2;
  return add_layer(kLayerRNN, trimmed(inputs), num_outputs, std::move(a));
}

Layer* Network::add_string_normalizer(Tensor* input, CaseChangeAction case_change, bool is_case_sensitive,
                                      const std::vector<std::string>& stopwords, const std::string& locale) {
  Attributes a;
  a.set("case_change_action", param_name(case_change));
  a.set("is_case_sensitive", flag(is_case_sensitive));
  a.set("stopwords", stopwords);
  a.set("locale", locale);
  return add_layer(kLayerStringNormalizer, {input}, 2, std::move(a));
}

Layer* Network::add_non_zero(Tensor* input) { return add_layer(kLayerNonZero, {input}, 2); }

Layer* Network::add_plugin(const std::vector<Tensor*>& inputs, const Plugin& plugin, const std::string& name) {
  return kiln::add_plugin(*this, inputs, plugin, name);
}

// ---- inspection and editing ---------------------------------------------------------------

Tensor* Network::find_tensor(const std::string& name) const { return index_find(tensor_names_, tensors_, name); }

Layer* Network::find_layer(const std::string& name) const { return index_find(layer_names_, layers_, name); }

std::vector<Tensor*> Network::tensors() const {
  compact();
  std::vector<Tensor*> r;
  r.reserve(tensors_.size());
  for (const auto& t : tensors_) r.push_back(t.get());
  return r;
}

void Network::remove_layer(Layer* layer) {
  if (!layer || layer->network_ != this || layer->index_ >= layers_.size() || layers_[layer->index_].get() != layer) {
    throw Error("remove_layer: layer does not belong to this network");
  }
  std::vector<Tensor*> touched;
  for (Tensor* in : layer->inputs_) {
    if (!in) continue;
    remove_reader(in->readers_, layer);
    touched.push_back(in);
  }
  for (Tensor* out : layer->outputs_) {
    out->producer_ = nullptr;
    touched.push_back(out);
  }
  index_remove(layer_names_, layer, layer->name_);
  forget_params(*layer);
  layers_[layer->index_].reset();
  ++holes_;
  // The tensors that nothing produces, reads or exposes any more go with the layer.
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (Tensor* t : touched) {
    if (!t->producer_ && t->readers_.empty() && !t->is_input_ && !t->is_output_) erase_tensor(t);
  }
}

void Network::replace_all_uses(Tensor* from, Tensor* to) {
  if (from != to) {
    std::vector<Layer*> readers = std::move(from->readers_);
    from->readers_.clear();
    for (Layer* l : readers) {
      for (auto& in : l->inputs_) {
        if (in != from) continue;
        in = to;
        if (to) to->readers_.push_back(l);
      }
    }
  }
  if (from->is_output_) {
    for (auto& o : outputs_) {
      if (o == from) o = to;
    }
    from->is_output_ = false;
    to->is_output_ = true;
  }
}

void Network::remove_unused_tensors() {
  for (auto& t : tensors_) {
    if (t && !t->producer_ && t->readers_.empty() && !t->is_input_ && !t->is_output_) erase_tensor(t.get());
  }
}

std::vector<Layer*> Network::topological_order() const {
  compact();  // index_ is each layer's position from here on
  // Kahn's algorithm; among ready layers pick the lowest insertion index (stable). The edges are
  // kept in flat arrays (compressed rows) and the ready set in a heap: this runs once per pass
  // and per shape inference, so on 100,000-layer graphs its constant factor matters.
  const size_t n = layers_.size();
  std::vector<std::pair<size_t, size_t>> edges;  // (producer, user), each pair once
  edges.reserve(n);
  std::vector<int> pending(n, 0);
  std::vector<size_t> deps;
  for (size_t i = 0; i < n; ++i) {
    deps.clear();
    for (const Tensor* in : layers_[i]->inputs_) {
      const Layer* producer = in ? in->producer_ : nullptr;
      if (!producer || producer->index_ >= n || layers_[producer->index_].get() != producer) continue;
      if (producer->index_ == i) {
        throw Error("layer " + quote(layers_[i]->name_) + " reads its own output " + quote(in->name_));
      }
      deps.push_back(producer->index_);
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    pending[i] = static_cast<int>(deps.size());
    for (size_t d : deps) edges.emplace_back(d, i);
  }
  std::vector<size_t> first(n + 1, 0), users(edges.size());
  for (const auto& e : edges) ++first[e.first + 1];
  for (size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  std::vector<size_t> fill(first.begin(), first.end() - 1);
  for (const auto& e : edges) users[fill[e.first]++] = e.second;  // users in increasing order per producer
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<Layer*> order;
  order.reserve(n);
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(layers_[i].get());
    for (size_t k = first[i]; k < first[i + 1]; ++k) {
      if (--pending[users[k]] == 0) ready.push(users[k]);
    }
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i) {
      if (pending[i] > 0) throw Error("the network has a cycle through layer " + quote(layers_[i]->name_));
    }
  }
  return order;
}

void Network::sort_topologically() {
  const auto order = topological_order();  // compacts
  for (size_t i = 0; i < order.size(); ++i) order[i]->index_ = i;
  std::sort(layers_.begin(), layers_.end(), [](const auto& a, const auto& b) { return a->index_ < b->index_; });
}

void Network::validate() const {
  compact();
  std::vector<std::string> problems;
  std::set<std::string> names;
  for (const auto& t : tensors_) {
    if (t->name_.empty()) problems.push_back("a tensor has no name");
    if (!names.insert(t->name_).second) problems.push_back("tensor name " + quote(t->name_) + " is used twice");
    if (!t->is_input_ && !t->producer_) {
      bool used = !t->consumers().empty() || t->is_output_;
      if (used) problems.push_back("tensor " + quote(t->name_) + " is read but nothing produces it");
    }
  }
  std::set<std::string> layer_names;
  for (const auto& l : layers_) {
    if (!layer_names.insert(l->name_).second) problems.push_back("layer name " + quote(l->name_) + " is used twice");
    const OpSchema* schema = OpSchemaRegistry::instance().find(l->type_);
    if (!schema) {
      problems.push_back("layer " + quote(l->name_) + " has unknown type " + quote(l->type_));
      continue;
    }
    const int n = l->num_inputs();
    if (n < schema->min_inputs || (schema->max_inputs >= 0 && n > schema->max_inputs)) {
      problems.push_back("layer " + quote(l->name_) + " (" + l->type_ + ") has " + std::to_string(n) +
                         " inputs, expected " + std::to_string(schema->min_inputs) +
                         (schema->max_inputs < 0 ? " or more" : " to " + std::to_string(schema->max_inputs)));
    }
    for (int i = 0; i < std::min(n, schema->min_inputs); ++i) {
      if (!l->input(i))
        problems.push_back("layer " + quote(l->name_) + " (" + l->type_ + "): required input " + std::to_string(i) +
                           " is missing");
    }
    if (schema->num_outputs >= 0 && l->num_outputs() != schema->num_outputs) {
      problems.push_back("layer " + quote(l->name_) + " (" + l->type_ + ") has " + std::to_string(l->num_outputs()) +
                         " outputs, expected " + std::to_string(schema->num_outputs));
    }
    try {
      check_attributes(*schema, *l);
      decode_params(*l);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  if (outputs_.empty()) problems.push_back("the network has no outputs (call mark_output)");
  try {
    (void)topological_order();
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  if (!problems.empty()) {
    std::string msg =
        "invalid network (" + std::to_string(problems.size()) + " problem" + (problems.size() > 1 ? "s" : "") + "):";
    for (const auto& p : problems) msg += "\n  - " + p;
    throw Error(msg);
  }
}

namespace {
std::string attr_text(const AttrValue& v) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          os << x;
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << '"' << x << '"';
        } else if constexpr (std::is_same_v<T, HostTensor>) {
          os << "tensor<" << to_string(x.type()) << " " << x.dims().to_string() << ">";
        } else {
          os << '[';
          for (size_t i = 0; i < x.size(); ++i) {
            if (i) os << ',';
            if (i >= 16) {
              os << "...(" << x.size() << ")";
              break;
            }
            os << x[i];
          }
          os << ']';
        }
      },
      v);
  return os.str();
}
}  // namespace

std::string to_text(const Network& network) {
  std::ostringstream os;
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* t = network.input(i);
    os << "input  " << t->name() << ": " << to_string(t->type()) << " " << t->dims().to_string() << "\n";
  }
  for (int i = 0; i < network.num_layers(); ++i) {
    const Layer* l = network.layer(i);
    os << "layer  " << l->name() << " [" << l->type() << "] (";
    for (int k = 0; k < l->num_inputs(); ++k) os << (k ? ", " : "") << (l->input(k) ? l->input(k)->name() : "-");
    os << ") -> (";
    for (int k = 0; k < l->num_outputs(); ++k) {
      const Tensor* t = l->output(k);
      os << (k ? ", " : "") << t->name() << ": " << to_string(t->type()) << " " << t->dims().to_string();
    }
    os << ")";
    for (const auto& [name, value] : l->attrs().all()) os << " " << name << "=" << attr_text(value);
    os << "\n";
  }
  for (int i = 0; i < network.num_outputs(); ++i) {
    os << "output " << network.output(i)->name() << "\n";
  }
  return os.str();
}

}  // namespace kiln
