// The network definition: a graph of named layers connected by named tensors, in the spirit
// of TensorRT's INetworkDefinition. The Network owns its layers and tensors; Tensor* and
// Layer* stay valid until the layer/tensor is removed or the Network is destroyed.
//
// Every layer has a type name (kLayer* below) and typed attributes. The attribute schema of
// each layer type (names, types, defaults, meaning) is documented in docs/layers.md and
// checked by Network::validate(). Weights and other constant data enter the graph through
// Constant layers, so every layer input is a Tensor.
//
// A Network is not thread-safe; build it from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/types.h"

namespace kiln {

// Layer type names (stable; they are what engine files store).
inline constexpr const char* kLayerActivation = "Activation";
inline constexpr const char* kLayerArgReduce = "ArgReduce";
inline constexpr const char* kLayerBitShift = "BitShift";
inline constexpr const char* kLayerCast = "Cast";
inline constexpr const char* kLayerConcatenation = "Concatenation";
inline constexpr const char* kLayerConstant = "Constant";
inline constexpr const char* kLayerConvolution = "Convolution";
inline constexpr const char* kLayerCumSum = "CumSum";
inline constexpr const char* kLayerDeconvolution = "Deconvolution";
inline constexpr const char* kLayerDequantize = "Dequantize";
inline constexpr const char* kLayerEinsum = "Einsum";
inline constexpr const char* kLayerElementWise = "ElementWise";
inline constexpr const char* kLayerExpand = "Expand";
inline constexpr const char* kLayerFill = "Fill";
inline constexpr const char* kLayerFusedElementWise = "FusedElementWise";
inline constexpr const char* kLayerGather = "Gather";
inline constexpr const char* kLayerGemm = "Gemm";
inline constexpr const char* kLayerGridSample = "GridSample";
inline constexpr const char* kLayerIdentity = "Identity";
inline constexpr const char* kLayerLRN = "LRN";
inline constexpr const char* kLayerMatrixMultiply = "MatrixMultiply";
inline constexpr const char* kLayerMaxRoiPool = "MaxRoiPool";
inline constexpr const char* kLayerMaxUnpool = "MaxUnpool";
inline constexpr const char* kLayerNonMaxSuppression = "NonMaxSuppression";
inline constexpr const char* kLayerNonZero = "NonZero";
inline constexpr const char* kLayerNormalization = "Normalization";
inline constexpr const char* kLayerOneHot = "OneHot";
inline constexpr const char* kLayerPadding = "Padding";
inline constexpr const char* kLayerParametricReLU = "ParametricReLU";
inline constexpr const char* kLayerPlugin = "Plugin";
inline constexpr const char* kLayerPooling = "Pooling";
inline constexpr const char* kLayerQuantize = "Quantize";
inline constexpr const char* kLayerReduce = "Reduce";
inline constexpr const char* kLayerReformat = "Reformat";
inline constexpr const char* kLayerResize = "Resize";
inline constexpr const char* kLayerReverseSequence = "ReverseSequence";
inline constexpr const char* kLayerRNN = "RNN";
inline constexpr const char* kLayerRoiAlign = "RoiAlign";
inline constexpr const char* kLayerScale = "Scale";
inline constexpr const char* kLayerScatter = "Scatter";
inline constexpr const char* kLayerSelect = "Select";
inline constexpr const char* kLayerShape = "Shape";
inline constexpr const char* kLayerShuffle = "Shuffle";
inline constexpr const char* kLayerSlice = "Slice";
inline constexpr const char* kLayerSoftMax = "SoftMax";
inline constexpr const char* kLayerSplit = "Split";
inline constexpr const char* kLayerStringNormalizer = "StringNormalizer";
inline constexpr const char* kLayerTile = "Tile";
inline constexpr const char* kLayerTopK = "TopK";
inline constexpr const char* kLayerTrilu = "Trilu";
inline constexpr const char* kLayerUnary = "Unary";
inline constexpr const char* kLayerUnique = "Unique";

class Layer;
class Network;

class Tensor {
 public:
  const std::string& name() const { return name_; }
  // Renames the tensor; names must be unique within a network (checked by validate()). The
  // network's name index (find_tensor) follows the change.
  void set_name(std::string name);
  DataType type() const { return type_; }
  // Declared dims for network inputs; for other tensors the dims last inferred by
  // Network::infer_shapes (kDynamic where they depend on dynamic inputs).
  const Dims& dims() const { return dims_; }
  void set_type(DataType type) { type_ = type; }
  void set_dims(const Dims& dims) { dims_ = dims; }
  TensorFormat format() const { return format_; }
  void set_format(TensorFormat format) { format_ = format; }

  // The layer that writes this tensor; null for network inputs.
  Layer* producer() const { return producer_; }
  bool is_network_input() const { return is_input_; }
  bool is_network_output() const { return is_output_; }
  // Layers that read this tensor (in network order, each once). Costs O(readers), not O(layers).
  std::vector<Layer*> consumers() const;
  Network* network() const { return network_; }

 private:
  friend class Network;
  friend class Layer;
  std::string name_;
  DataType type_ = DataType::kFloat32;
  Dims dims_;
  TensorFormat format_ = TensorFormat::kLinear;
  Layer* producer_ = nullptr;
  bool is_input_ = false;
  bool is_output_ = false;
  Network* network_ = nullptr;
  std::vector<Layer*> readers_;  // one entry per input slot of a layer that reads this tensor
  size_t index_ = 0;             // position in the network's tensor list
};

class Layer {
 public:
  const std::string& name() const { return name_; }
  // Renames the layer; names must be unique within a network (checked by validate()). The
  // network's name index (find_layer) follows the change.
  void set_name(std::string name);
  // The layer type, one of the kLayer* names.
  const std::string& type() const { return type_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  // Input i; may be null for an omitted optional input.
  Tensor* input(int i) const { return inputs_.at(static_cast<size_t>(i)); }
  // Replaces (or, at i == num_inputs(), appends) input i.
  void set_input(int i, Tensor* tensor);
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  Tensor* output(int i) const { return outputs_.at(static_cast<size_t>(i)); }

  Attributes& attrs() { return attrs_; }
  const Attributes& attrs() const { return attrs_; }

  // Requested compute precision (a hint the builder honours when a kernel exists).
  bool has_precision() const { return has_precision_; }
  DataType precision() const { return precision_; }
  void set_precision(DataType type) {
    precision_ = type;
    has_precision_ = true;
  }

 private:
  friend class Network;
  friend class Tensor;
  std::string name_;
  std::string type_;
  std::vector<Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  Attributes attrs_;
  DataType precision_ = DataType::kFloat32;
  bool has_precision_ = false;
  Network* network_ = nullptr;
  size_t index_ = 0;  // position in the network's layer list
};

namespace detail {
// Name -> the first element of that name in list order, and how many elements have each name.
template <typename T>
struct NameIndex {
  std::unordered_map<std::string, T*> first;
  std::unordered_map<std::string, int> count;
  bool stale = false;  // rebuilt at the next lookup
};
}  // namespace detail

// Typed descriptions used by the add_* helpers. Each helper writes the corresponding
// attributes; they can be edited afterwards through Layer::attrs().
struct ConvolutionDesc {
  int64_t num_output_maps = 0;
  std::vector<int64_t> kernel;       // spatial kernel size, e.g. {3, 3}
  std::vector<int64_t> strides;      // default 1 per spatial dim
  std::vector<int64_t> pads_begin;   // default 0
  std::vector<int64_t> pads_end;     // default 0
  std::vector<int64_t> dilations;    // default 1
  int64_t groups = 1;
  std::vector<int64_t> output_padding;  // deconvolution only
};

enum class PoolingType : int32_t { kMax, kAverage };
struct PoolingDesc {
  PoolingType type = PoolingType::kMax;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;
  std::vector<int64_t> dilations;
  bool ceil_mode = false;
  bool count_include_pad = false;
  bool global = false;  // pool over all spatial dims (kernel ignored)
};

// Activation kinds (attribute "kind" of Activation layers; names are what files store).
// alpha/beta meaning: leaky_relu(alpha), elu(alpha), selu(alpha, gamma=beta), clip(min=alpha,
// max=beta), hard_sigmoid(alpha, beta), softplus, relu, sigmoid, tanh, hard_swish, silu,
// gelu_erf, gelu_tanh, mish, softsign, celu(alpha), thresholded_relu(alpha), swish(alpha: y=x*sigmoid(alpha*x)).
enum class ActivationType : int32_t {
  kRelu, kSigmoid, kTanh, kLeakyRelu, kElu, kSelu, kSoftplus, kClip, kHardSigmoid, kHardSwish,
  kSilu, kGeluErf, kGeluTanh, kMish, kSoftsign, kCelu, kThresholdedRelu, kSwish,
};
const char* to_string(ActivationType type);
ActivationType parse_activation_type(std::string_view name);

// Binary element-wise operations with numpy-style broadcasting.
enum class ElementWiseOp : int32_t {
  kSum, kSub, kProd, kDiv, kPow, kMax, kMin, kMod, kFloorDiv,
  kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual, kAnd, kOr, kXor,
};
const char* to_string(ElementWiseOp op);
ElementWiseOp parse_elementwise_op(std::string_view name);

enum class UnaryOp : int32_t {
  kExp, kLog, kSqrt, kRecip, kAbs, kNeg, kFloor, kCeil, kRound, kSin, kCos, kTan, kAsin, kAcos,
  kAtan, kSinh, kCosh, kTanh, kAsinh, kAcosh, kAtanh, kErf, kNot, kSign, kIsNaN, kIsInf,
};
const char* to_string(UnaryOp op);
UnaryOp parse_unary_op(std::string_view name);

enum class ReduceOp : int32_t { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };
const char* to_string(ReduceOp op);
ReduceOp parse_reduce_op(std::string_view name);

// Scale layer: y = (x * scale + shift) ^ power, with scale/shift/power uniform (one value),
// per channel (one value per index of the channel axis) or per element.
enum class ScaleMode : int32_t { kUniform, kChannel, kElementWise };

class Network {
 public:
  Network();
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;
  // Deep copy (same names, attributes share constant storage).
  std::unique_ptr<Network> clone() const;

  // ---- graph construction --------------------------------------------------------------
  // A network input; kDynamic dims need an optimization profile at build time.
  Tensor* add_input(const std::string& name, DataType type, const Dims& dims);
  // Marks an existing tensor as a network output (its name is the output's name).
  void mark_output(Tensor* tensor);
  void unmark_output(Tensor* tensor);

  // Generic: a layer of any registered type with num_outputs outputs. Null entries in
  // inputs are omitted optional inputs. Output tensors get names "<layer name>_out<i>"
  // (or "<layer name>" for a single output) unless renamed.
  Layer* add_layer(const std::string& type, const std::vector<Tensor*>& inputs, int num_outputs,
                   Attributes attrs = {}, const std::string& name = "");

  // Typed helpers (TensorRT-like). All return the new layer; its output is layer->output(0).
  Layer* add_constant(const HostTensor& value, const std::string& name = "");
  Layer* add_convolution(Tensor* input, const ConvolutionDesc& desc, const HostTensor& weights,
                         const HostTensor& bias = {});
  Layer* add_deconvolution(Tensor* input, const ConvolutionDesc& desc, const HostTensor& weights,
                           const HostTensor& bias = {});
  Layer* add_pooling(Tensor* input, const PoolingDesc& desc);
  Layer* add_activation(Tensor* input, ActivationType type, double alpha = 0.0, double beta = 0.0);
  // scale/shift/power may be empty (identity); channel_axis used for ScaleMode::kChannel.
  Layer* add_scale(Tensor* input, ScaleMode mode, const HostTensor& shift, const HostTensor& scale,
                   const HostTensor& power, int64_t channel_axis = 1);
  Layer* add_elementwise(Tensor* a, Tensor* b, ElementWiseOp op);
  Layer* add_unary(Tensor* input, UnaryOp op);
  Layer* add_matrix_multiply(Tensor* a, bool transpose_a, Tensor* b, bool transpose_b);
  // y = flatten(x, 1) * W^T + b with W of shape [num_outputs, K].
  Layer* add_fully_connected(Tensor* input, int64_t num_outputs, const HostTensor& weights,
                             const HostTensor& bias = {});
  // Shuffle: first_transpose, then reshape (0 copies the input extent unless zero_is_placeholder
  // is false, -1 infers), then second_transpose. Empty vectors skip a step.
  Layer* add_shuffle(Tensor* input, const std::vector<int64_t>& first_transpose,
                     const std::vector<int64_t>& reshape, const std::vector<int64_t>& second_transpose);
  // Shuffle whose reshape dims come from a 1-D int64 shape tensor.
  Layer* add_shuffle_dynamic(Tensor* input, Tensor* shape);
  Layer* add_concatenation(const std::vector<Tensor*>& inputs, int64_t axis);
  // starts/ends/axes/steps as in ONNX Slice (negative values count from the end).
  Layer* add_slice(Tensor* input, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                   const std::vector<int64_t>& axes = {}, const std::vector<int64_t>& steps = {});
  Layer* add_gather(Tensor* data, Tensor* indices, int64_t axis);
  Layer* add_softmax(Tensor* input, int64_t axis);
  Layer* add_reduce(Tensor* input, ReduceOp op, const std::vector<int64_t>& axes, bool keep_dims);
  Layer* add_identity(Tensor* input);
  Layer* add_cast(Tensor* input, DataType to);
  Layer* add_select(Tensor* condition, Tensor* then_value, Tensor* else_value);
  Layer* add_shape(Tensor* input);

  // ---- inspection and editing ----------------------------------------------------------
  int num_layers() const {
    compact();
    return static_cast<int>(layers_.size());
  }
  Layer* layer(int i) const {
    compact();
    return layers_.at(static_cast<size_t>(i)).get();
  }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  Tensor* input(int i) const { return inputs_.at(static_cast<size_t>(i)); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  Tensor* output(int i) const { return outputs_.at(static_cast<size_t>(i)); }
  // Null when absent; the first of that name when names repeat (an invalid network). O(1).
  Tensor* find_tensor(const std::string& name) const;
  Layer* find_layer(const std::string& name) const;
  std::vector<Tensor*> tensors() const;

  // Removes a layer; its output tensors are removed too unless still used as network outputs
  // or by other layers (then they become dangling and validate() reports it), and so are its
  // input tensors that nothing produces or reads any more. O(1) amortized (plus the layer's
  // inputs' readers), so passes may remove any number of layers.
  void remove_layer(Layer* layer);
  // Makes every consumer (and the network-output mark) of `from` read `to` instead. O(readers
  // of `from`).
  void replace_all_uses(Tensor* from, Tensor* to);
  // Removes tensors no layer produces or reads and that are not network inputs/outputs.
  void remove_unused_tensors();
  // Layers in a topological order (stable: ties keep insertion order). Throws on a cycle.
  std::vector<Layer*> topological_order() const;
  // Reorders the internal layer list to topological order.
  void sort_topologically();

  // Checks names, connectivity, layer types and attribute schemas. Throws kiln::Error with
  // every problem found.
  void validate() const;

  // A unique name with the given prefix (for layers/tensors created by passes).
  std::string unique_name(const std::string& prefix);

 private:
  friend class Tensor;
  friend class Layer;
  Tensor* new_tensor(const std::string& name);
  // Removed layers and tensors leave null entries (holes) so that removal costs O(1); the lists
  // are compacted before anything reads them by position.
  void compact() const {
    if (holes_) compact_now();
  }
  void compact_now() const;
  void erase_tensor(Tensor* tensor);
  void renamed(Tensor* tensor, const std::string& old_name);
  void renamed(Layer* layer, const std::string& old_name);

  mutable std::vector<std::unique_ptr<Layer>> layers_;
  mutable std::vector<std::unique_ptr<Tensor>> tensors_;
  mutable size_t holes_ = 0;
  std::vector<Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  int64_t name_counter_ = 0;
  mutable detail::NameIndex<Tensor> tensor_names_;
  mutable detail::NameIndex<Layer> layer_names_;
};

// Human-readable dump of a network: one line per layer with inputs, outputs and attributes.
std::string to_text(const Network& network);

}  // namespace kiln
