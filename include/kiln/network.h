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
inline constexpr const char* kLayerDet = "Det";
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
class Plugin;

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
  // Tensors are made by their Network (add_input, add_layer), never on their own.
  Tensor() = default;
  Tensor(const Tensor&) = default;
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
  // Layers are made by their Network (add_layer and the typed helpers), never on their own.
  Layer() = default;
  Layer(const Layer&) = default;
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
  std::vector<int64_t> kernel;      // spatial kernel size, e.g. {3, 3}
  std::vector<int64_t> strides;     // default 1 per spatial dim
  std::vector<int64_t> pads_begin;  // default 0
  std::vector<int64_t> pads_end;    // default 0
  std::vector<int64_t> dilations;   // default 1
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
  kRelu,
  kSigmoid,
  kTanh,
  kLeakyRelu,
  kElu,
  kSelu,
  kSoftplus,
  kClip,
  kHardSigmoid,
  kHardSwish,
  kSilu,
  kGeluErf,
  kGeluTanh,
  kMish,
  kSoftsign,
  kCelu,
  kThresholdedRelu,
  kSwish,
};
const char* to_string(ActivationType type);
ActivationType parse_activation_type(std::string_view name);

// Binary element-wise operations with numpy-style broadcasting.
enum class ElementWiseOp : int32_t {
  kSum,
  kSub,
  kProd,
  kDiv,
  kPow,
  kMax,
  kMin,
  kMod,
  kFloorDiv,
  kEqual,
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kAnd,
  kOr,
  kXor,
};
const char* to_string(ElementWiseOp op);
ElementWiseOp parse_elementwise_op(std::string_view name);

enum class UnaryOp : int32_t {
  kExp,
  kLog,
  kSqrt,
  kRecip,
  kAbs,
  kNeg,
  kFloor,
  kCeil,
  kRound,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kTanh,
  kAsinh,
  kAcosh,
  kAtanh,
  kErf,
  kNot,
  kSign,
  kIsNaN,
  kIsInf,
};
const char* to_string(UnaryOp op);
UnaryOp parse_unary_op(std::string_view name);

enum class ReduceOp : int32_t { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };
const char* to_string(ReduceOp op);
ReduceOp parse_reduce_op(std::string_view name);

// Scale layer: y = (x * scale + shift) ^ power, with scale/shift/power uniform (one value),
// per channel (one value per index of the channel axis) or per element.
enum class ScaleMode : int32_t { kUniform, kChannel, kElementWise };

// The attribute values of the other layer types' typed helpers (Network::add_*). Each enum's
// values are the strings docs/layers.md lists for the attribute, in that order.

// Resize's and GridSample's `mode`: "nearest", "linear", "cubic".
enum class InterpolationMode : int32_t { kNearest, kLinear, kCubic };
struct ResizeDesc {
  InterpolationMode mode = InterpolationMode::kNearest;
  // ONNX's names: "half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", ...
  std::string coordinate_transformation_mode = "half_pixel";
  // "round_prefer_floor", "round_prefer_ceil", "floor", "ceil".
  std::string nearest_mode = "round_prefer_floor";
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false;
  double extrapolation_value = 0.0;
};

// Padding `mode`: "constant", "reflect", "edge", "wrap".
enum class PaddingMode : int32_t { kConstant, kReflect, kEdge, kWrap };

// Fill `mode`: "constant" (ONNX ConstantOfShape), "range" (ONNX Range).
enum class FillMode : int32_t { kConstant, kRange };

// Normalization `mode`: "layer", "instance", "group", "mvn", "lp".
enum class NormalizationMode : int32_t { kLayer, kInstance, kGroup, kMvn, kLp };
struct NormalizationDesc {
  NormalizationMode mode = NormalizationMode::kLayer;
  int64_t axis = -1;                      // layer: first normalized axis; lp: the normalized axis
  std::vector<int64_t> axes = {0, 2, 3};  // mvn
  int64_t num_groups = 1;                 // group
  double epsilon = 1e-5;
  bool normalize_variance = true;  // mvn
  int64_t p = 2;                   // lp: 1 or 2
};

// ArgReduce `op`: "max", "min".
enum class ArgReduceOp : int32_t { kMax, kMin };

// BitShift `direction`: "left", "right".
enum class BitShiftDirection : int32_t { kLeft, kRight };

// Scatter `mode`: "elements" (ONNX ScatterElements), "nd" (ONNX ScatterND); `reduction`:
// "none", "add", "mul", "max", "min".
enum class ScatterMode : int32_t { kElements, kNd };
enum class ScatterReductionKind : int32_t { kNone, kAdd, kMul, kMax, kMin };

// GridSample `padding_mode` ("zeros", "border", "reflection"); its `mode` is an
// InterpolationMode.
enum class GridSamplePadding : int32_t { kZeros, kBorder, kReflection };

// RoiAlign `mode`: "avg", "max".
enum class RoiAlignMode : int32_t { kAvg, kMax };
struct RoiAlignDesc {
  RoiAlignMode mode = RoiAlignMode::kAvg;
  int64_t output_height = 1;
  int64_t output_width = 1;
  int64_t sampling_ratio = 0;  // 0: adaptive, ceil(roi / bins)
  double spatial_scale = 1.0;
  std::string coordinate_transformation_mode = "half_pixel";  // or "output_half_pixel" (opset 10)
};

// RNN `cell`: "rnn", "gru", "lstm"; `direction`: "forward", "reverse", "bidirectional".
enum class RNNCell : int32_t { kRnn, kGru, kLstm };
enum class RNNDirection : int32_t { kForward, kReverse, kBidirectional };
struct RNNDesc {
  RNNCell cell = RNNCell::kLstm;
  int64_t hidden_size = 0;  // required (> 0)
  RNNDirection direction = RNNDirection::kForward;
  // Required: per direction f (rnn); f, g (gru); f, g, h (lstm), e.g. {"sigmoid", "tanh", "tanh"}.
  std::vector<std::string> activations;
  std::vector<double> activation_alpha, activation_beta;  // one per activation, or empty
  double clip = 0.0;                                      // 0: none
  bool linear_before_reset = false;                       // gru
  bool input_forget = false;                              // lstm
  int64_t layout = 0;                                     // 0: [S, B, ..]; 1: [B, S, ..]
};

// StringNormalizer `case_change_action`: "NONE", "LOWER", "UPPER".
enum class CaseChangeAction : int32_t { kNone, kLower, kUpper };

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
  Layer* add_layer(const std::string& type, const std::vector<Tensor*>& inputs, int num_outputs, Attributes attrs = {},
                   const std::string& name = "");

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
  Layer* add_shuffle(Tensor* input, const std::vector<int64_t>& first_transpose, const std::vector<int64_t>& reshape,
                     const std::vector<int64_t>& second_transpose);
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

  // Typed helpers of the other layer types of docs/layers.md (semantics, input roles and the
  // attributes' defaults there). Each writes every attribute its arguments name, so
  // add_X(...) builds the same layer as add_layer(kLayerX, inputs, n, those attributes). Null
  // tensors are omitted optional inputs. Output 0 is the main result; helpers of layers with
  // several outputs say which.
  // ParametricReLU: y = x >= 0 ? x : slope * x (slope broadcast to x).
  Layer* add_parametric_relu(Tensor* input, Tensor* slope);
  // FusedElementWise: one register program over `inputs` (what the element-wise fusion pass
  // makes; grammar in docs/layers.md).
  Layer* add_fused_elementwise(const std::vector<Tensor*>& inputs, const std::vector<std::string>& program);
  // Gemm: y = alpha * A' B' + beta * C (c may be null; A' = A^T with trans_a, B' likewise).
  Layer* add_gemm(Tensor* a, Tensor* b, Tensor* c, double alpha = 1.0, double beta = 1.0, bool trans_a = false,
                  bool trans_b = false);
  // Split along `axis` into num_outputs parts: of the given sizes (sizes.size() == num_outputs)
  // or, with sizes empty, equal parts (the last may be smaller).
  Layer* add_split(Tensor* input, int64_t axis, int num_outputs, const std::vector<int64_t>& sizes = {});
  // Resize to `sizes` (1-D int) or by `scales` (1-D float), one of them non-null; both are
  // shape inputs.
  Layer* add_resize(Tensor* input, Tensor* scales, Tensor* sizes, const ResizeDesc& desc = {});
  // Padding (ONNX Pad): pads is a 1-D int shape input [begins..., ends...]; value an optional
  // scalar (default 0).
  Layer* add_padding(Tensor* input, Tensor* pads, Tensor* value = nullptr, PaddingMode mode = PaddingMode::kConstant);
  // Fill: kConstant takes {shape} (1-D int shape input) and `value` (1 element; empty: float32
  // 0); kRange takes {start, limit, delta} (scalars) and ignores `value`.
  Layer* add_fill(FillMode mode, const std::vector<Tensor*>& inputs, const HostTensor& value = {});
  // Expand (ONNX Expand): broadcast to `shape` (1-D int shape input).
  Layer* add_expand(Tensor* input, Tensor* shape);
  // Tile (ONNX Tile): `repeats` (1-D int shape input) per axis.
  Layer* add_tile(Tensor* input, Tensor* repeats);
  // Normalization (layer, instance, group, mvn, lp); scale and bias may be null. Layer mode may
  // ask for 3 outputs (y, mean, 1/sqrt(var + epsilon)).
  Layer* add_normalization(Tensor* input, Tensor* scale, Tensor* bias, const NormalizationDesc& desc,
                           int num_outputs = 1);
  // LRN across channels.
  Layer* add_lrn(Tensor* input, int64_t size, double alpha = 1e-4, double beta = 0.75, double bias = 1.0);
  // ArgReduce: int64 index of the max (min) along axis (with one_hot: ONNX Hardmax).
  Layer* add_arg_reduce(Tensor* input, ArgReduceOp op, int64_t axis = 0, bool keep_dims = true,
                        bool select_last_index = false, bool one_hot = false);
  // TopK: outputs values and int64 indices; num_outputs 3 adds k as an int64 scalar (needed when
  // k is known only at run time).
  Layer* add_topk(Tensor* input, Tensor* k, int64_t axis = -1, bool largest = true, bool sorted = true,
                  int num_outputs = 2);
  // CumSum along the axis given by the scalar tensor `axis`.
  Layer* add_cumsum(Tensor* input, Tensor* axis, bool exclusive = false, bool reverse = false);
  // Trilu: upper (lower) triangle of the last two dims, diagonal offset k (null: 0).
  Layer* add_trilu(Tensor* input, Tensor* k = nullptr, bool upper = true);
  // OneHot: depth is a 1-value shape input, values [off, on].
  Layer* add_one_hot(Tensor* indices, Tensor* depth, Tensor* values, int64_t axis = -1);
  // ReverseSequence: reverses the first sequence_lens[b] elements along time_axis per batch entry.
  Layer* add_reverse_sequence(Tensor* input, Tensor* sequence_lens, int64_t batch_axis = 1, int64_t time_axis = 0);
  // MaxUnpool: x and the indices MaxPool gave; output_shape may be null.
  Layer* add_max_unpool(Tensor* input, Tensor* indices, Tensor* output_shape, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& strides = {}, const std::vector<int64_t>& pads = {});
  // NonMaxSuppression: outputs the [count, 3] selection and count (int64 scalar); the three
  // scalar inputs may be null.
  Layer* add_non_max_suppression(Tensor* boxes, Tensor* scores, Tensor* max_output_boxes_per_class = nullptr,
                                 Tensor* iou_threshold = nullptr, Tensor* score_threshold = nullptr,
                                 bool center_point_box = false);
  // Unique: outputs Y, indices, inverse_indices, counts and U (int64 scalar).
  Layer* add_unique(Tensor* input, bool sorted = true, bool flatten = true, int64_t axis = 0);
  // Einsum (numpy's equation syntax).
  Layer* add_einsum(const std::vector<Tensor*>& inputs, const std::string& equation);
  // Det: the determinant of each square matrix of the last two axes.
  Layer* add_det(Tensor* input);
  // BitShift: logical shift of x by y.
  Layer* add_bit_shift(Tensor* x, Tensor* y, BitShiftDirection direction);
  // Scatter (ONNX ScatterElements / ScatterND).
  Layer* add_scatter(Tensor* data, Tensor* indices, Tensor* updates, ScatterMode mode = ScatterMode::kElements,
                     int64_t axis = 0, ScatterReductionKind reduction = ScatterReductionKind::kNone);
  // Quantize (ONNX QuantizeLinear); zero_point may be null, then output_type (kInt8 or kUInt8)
  // is the output's type.
  Layer* add_quantize(Tensor* input, Tensor* scale, Tensor* zero_point = nullptr, int64_t axis = 1,
                      int64_t block_size = 0, DataType output_type = DataType::kUInt8);
  // Dequantize (ONNX DequantizeLinear); zero_point may be null.
  Layer* add_dequantize(Tensor* input, Tensor* scale, Tensor* zero_point = nullptr, int64_t axis = 1,
                        int64_t block_size = 0);
  // GridSample (ONNX GridSample, opset 20 names).
  Layer* add_grid_sample(Tensor* input, Tensor* grid, InterpolationMode mode = InterpolationMode::kLinear,
                         GridSamplePadding padding = GridSamplePadding::kZeros, bool align_corners = false);
  // RoiAlign: rois [R, 4], batch_indices [R].
  Layer* add_roi_align(Tensor* input, Tensor* rois, Tensor* batch_indices, const RoiAlignDesc& desc = {});
  // MaxRoiPool: rois [R, 5] (batch, x1, y1, x2, y2), pooled_shape [ph, pw].
  Layer* add_max_roi_pool(Tensor* input, Tensor* rois, const std::vector<int64_t>& pooled_shape,
                          double spatial_scale = 1.0);
  // RNN / GRU / LSTM: inputs X, W, R, then B, sequence_lens, initial_h, initial_c, P (null or
  // absent: omitted). Outputs Y, Y_h and, for lstm, Y_c (num_outputs 0: that default).
  Layer* add_rnn(const std::vector<Tensor*>& inputs, const RNNDesc& desc, int num_outputs = 0);
  // StringNormalizer (CPU only): outputs the kept words and their count (int64 scalar).
  Layer* add_string_normalizer(Tensor* input, CaseChangeAction case_change = CaseChangeAction::kNone,
                               bool is_case_sensitive = false, const std::vector<std::string>& stopwords = {},
                               const std::string& locale = "");
  // NonZero: outputs int64 coordinates [rank, count] and count (int64 scalar).
  Layer* add_non_zero(Tensor* input);
  // A Plugin layer (the same as kiln::add_plugin in plugin.h, which this calls).
  Layer* add_plugin(const std::vector<Tensor*>& inputs, const Plugin& plugin, const std::string& name = "");

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
