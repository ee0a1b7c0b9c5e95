// Network, Tensor and Layer: the network definition with every typed layer helper of
// docs/layers.md, the generic add_layer with attributes from Python values, and add_plugin.
// Tensors and layers are references into their network: they keep it alive.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common.h"

namespace kiln::python {

namespace {

HostTensor optional_tensor(const nb::object& value, const std::string& what) {
  if (value.is_none()) return {};
  return host_tensor_from(nb::cast<AnyArray>(value), what);
}

HostTensor tensor_arg(nb::handle value, const std::string& what) {
  try {
    return host_tensor_from(nb::cast<AnyArray>(value), what);
  } catch (const nb::cast_error&) {
    // Python numbers and nested lists: through numpy.
    nb::object arr = nb::module_::import_("numpy").attr("asarray")(value);
    return host_tensor_from(nb::cast<AnyArray>(arr), what);
  }
}

std::vector<int64_t> ints_or_empty(const nb::object& value) {
  if (value.is_none()) return {};
  return nb::cast<std::vector<int64_t>>(value);
}

// A list of tensors in which None stands for an omitted optional input.
std::vector<Tensor*> tensors_or_none(const nb::handle& seq) {
  std::vector<Tensor*> r;
  for (nb::handle item : seq) r.push_back(item.is_none() ? nullptr : nb::cast<Tensor*>(item));
  return r;
}

}  // namespace

AttrValue attr_from(nb::handle v, const std::string& what) {
  if (PyBool_Check(v.ptr()) || PyLong_Check(v.ptr())) return nb::cast<int64_t>(v);
  if (PyFloat_Check(v.ptr())) return nb::cast<double>(v);
  if (PyUnicode_Check(v.ptr())) return nb::cast<std::string>(v);
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    nb::sequence seq = nb::borrow<nb::sequence>(v);
    bool all_int = true, all_num = true, all_str = true;
    for (nb::handle e : seq) {
      const bool is_int = PyBool_Check(e.ptr()) || PyLong_Check(e.ptr());
      all_int &= is_int;
      all_num &= is_int || PyFloat_Check(e.ptr());
      all_str &= PyUnicode_Check(e.ptr()) != 0;
    }
    if (all_int) return nb::cast<std::vector<int64_t>>(v);
    if (all_num) return nb::cast<std::vector<double>>(v);
    if (all_str) return nb::cast<std::vector<std::string>>(v);
    throw Error(what + ": a list attribute must hold only ints, only numbers or only strings");
  }
  return tensor_arg(v, what);
}

nb::object attr_to(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> nb::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, HostTensor>) {
          return numpy_from(v);
        } else {
          return nb::cast(v);
        }
      },
      value);
}

void bind_network(nb::module_& m) {
  nb::enum_<ActivationType>(m, "ActivationType", "Activation kinds (alpha/beta meanings in docs/layers.md).")
      .value("relu", ActivationType::kRelu)
      .value("sigmoid", ActivationType::kSigmoid)
      .value("tanh", ActivationType::kTanh)
      .value("leaky_relu", ActivationType::kLeakyRelu)
      .value("elu", ActivationType::kElu)
      .value("selu", ActivationType::kSelu)
      .value("softplus", ActivationType::kSoftplus)
      .value("clip", ActivationType::kClip)
      .value("hard_sigmoid", ActivationType::kHardSigmoid)
      .value("hard_swish", ActivationType::kHardSwish)
      .value("silu", ActivationType::kSilu)
      .value("gelu_erf", ActivationType::kGeluErf)
      .value("gelu_tanh", ActivationType::kGeluTanh)
      .value("mish", ActivationType::kMish)
      .value("softsign", ActivationType::kSoftsign)
      .value("celu", ActivationType::kCelu)
      .value("thresholded_relu", ActivationType::kThresholdedRelu)
      .value("swish", ActivationType::kSwish);
  nb::enum_<ElementWiseOp>(m, "ElementWiseOp", "Binary element-wise operations (numpy broadcasting).")
      .value("sum", ElementWiseOp::kSum)
      .value("sub", ElementWiseOp::kSub)
      .value("prod", ElementWiseOp::kProd)
      .value("div", ElementWiseOp::kDiv)
      .value("pow", ElementWiseOp::kPow)
      .value("max", ElementWiseOp::kMax)
      .value("min", ElementWiseOp::kMin)
      .value("mod", ElementWiseOp::kMod)
      .value("floor_div", ElementWiseOp::kFloorDiv)
      .value("equal", ElementWiseOp::kEqual)
      .value("less", ElementWiseOp::kLess)
      .value("greater", ElementWiseOp::kGreater)
      .value("less_or_equal", ElementWiseOp::kLessOrEqual)
      .value("greater_or_equal", ElementWiseOp::kGreaterOrEqual)
      .value("and_", ElementWiseOp::kAnd)
      .value("or_", ElementWiseOp::kOr)
      .value("xor", ElementWiseOp::kXor);
  {
    nb::enum_<UnaryOp> e(m, "UnaryOp", "Unary operations.");
    for (int i = 0; i <= static_cast<int>(UnaryOp::kIsInf); ++i) {
      const auto op = static_cast<UnaryOp>(i);
      std::string name = to_string(op);
      if (name == "not") name = "not_";
      e.value(name.c_str(), op);
    }
  }
  {
    nb::enum_<ReduceOp> e(m, "ReduceOp", "Reductions.");
    for (int i = 0; i <= static_cast<int>(ReduceOp::kLogSumExp); ++i) {
      const auto op = static_cast<ReduceOp>(i);
      e.value(to_string(op), op);
    }
  }
  nb::enum_<ScaleMode>(m, "ScaleMode", "Scale layer modes: one value, one per channel, or one per element.")
      .value("uniform", ScaleMode::kUniform)
      .value("channel", ScaleMode::kChannel)
      .value("elementwise", ScaleMode::kElementWise);
  nb::enum_<PoolingType>(m, "PoolingType", "Pooling kinds.")
      .value("max", PoolingType::kMax)
      .value("average", PoolingType::kAverage);
  // The enums of the other typed helpers: value names are the attribute strings of docs/layers.md.
  nb::enum_<InterpolationMode>(m, "InterpolationMode", "Resize and GridSample interpolation.")
      .value("nearest", InterpolationMode::kNearest)
      .value("linear", InterpolationMode::kLinear)
      .value("cubic", InterpolationMode::kCubic);
  nb::enum_<PaddingMode>(m, "PaddingMode", "Padding modes (ONNX Pad).")
      .value("constant", PaddingMode::kConstant)
      .value("reflect", PaddingMode::kReflect)
      .value("edge", PaddingMode::kEdge)
      .value("wrap", PaddingMode::kWrap);
  nb::enum_<FillMode>(m, "FillMode", "Fill modes: constant (ConstantOfShape) or range (Range).")
      .value("constant", FillMode::kConstant)
      .value("range", FillMode::kRange);
  nb::enum_<NormalizationMode>(m, "NormalizationMode", "Normalization modes.")
      .value("layer", NormalizationMode::kLayer)
      .value("instance", NormalizationMode::kInstance)
      .value("group", NormalizationMode::kGroup)
      .value("mvn", NormalizationMode::kMvn)
      .value("lp", NormalizationMode::kLp);
  nb::enum_<ArgReduceOp>(m, "ArgReduceOp", "ArgMax or ArgMin.")
      .value("max", ArgReduceOp::kMax)
      .value("min", ArgReduceOp::kMin);
  nb::enum_<BitShiftDirection>(m, "BitShiftDirection", "BitShift directions.")
      .value("left", BitShiftDirection::kLeft)
      .value("right", BitShiftDirection::kRight);
  nb::enum_<ScatterMode>(m, "ScatterMode", "ScatterElements or ScatterND.")
      .value("elements", ScatterMode::kElements)
      .value("nd", ScatterMode::kNd);
  nb::enum_<ScatterReductionKind>(m, "ScatterReductionKind", "How Scatter combines an update with the data.")
      .value("none", ScatterReductionKind::kNone)
      .value("add", ScatterReductionKind::kAdd)
      .value("mul", ScatterReductionKind::kMul)
      .value("max", ScatterReductionKind::kMax)
      .value("min", ScatterReductionKind::kMin);
  nb::enum_<GridSamplePadding>(m, "GridSamplePadding", "GridSample padding modes.")
      .value("zeros", GridSamplePadding::kZeros)
      .value("border", GridSamplePadding::kBorder)
      .value("reflection", GridSamplePadding::kReflection);
  nb::enum_<RoiAlignMode>(m, "RoiAlignMode", "RoiAlign pooling.")
      .value("avg", RoiAlignMode::kAvg)
      .value("max", RoiAlignMode::kMax);
  nb::enum_<RNNCell>(m, "RNNCell", "Recurrent cells.")
      .value("rnn", RNNCell::kRnn)
      .value("gru", RNNCell::kGru)
      .value("lstm", RNNCell::kLstm);
  nb::enum_<RNNDirection>(m, "RNNDirection", "Recurrent directions.")
      .value("forward", RNNDirection::kForward)
      .value("reverse", RNNDirection::kReverse)
      .value("bidirectional", RNNDirection::kBidirectional);
  nb::enum_<CaseChangeAction>(m, "CaseChangeAction", "StringNormalizer case changes.")
      .value("none", CaseChangeAction::kNone)
      .value("lower", CaseChangeAction::kLower)
      .value("upper", CaseChangeAction::kUpper);

  nb::class_<Tensor>(m, "Tensor", "A named tensor of a Network (a reference: it keeps its network alive).")
      .def_prop_rw(
          "name", &Tensor::name, [](Tensor& t, const std::string& n) { t.set_name(n); },
          "The tensor's name (unique in its network).")
      .def_prop_rw("dtype", &Tensor::type, &Tensor::set_type, "Element type.")
      .def_prop_rw(
          "shape", [](const Tensor& t) { return dims_to_tuple(t.dims()); },
          [](Tensor& t, const std::vector<int64_t>& d) { t.set_dims(dims_from(d)); },
          "Dims (-1 where dynamic): declared for inputs, last inferred for others.")
      .def_prop_rw("format", &Tensor::format, &Tensor::set_format, "Memory layout.")
      .def_prop_ro("is_network_input", &Tensor::is_network_input)
      .def_prop_ro("is_network_output", &Tensor::is_network_output)
      .def_prop_ro("producer", &Tensor::producer, nb::rv_policy::reference_internal,
                   "The layer writing it (None for inputs).")
      .def_prop_ro("consumers", &Tensor::consumers, nb::rv_policy::reference_internal, "The layers reading it.")
      .def("__repr__", [](const Tensor& t) {
        return "<kiln.Tensor '" + t.name() + "' " + to_string(t.type()) + " " + t.dims().to_string() + ">";
      });

  nb::class_<Layer>(m, "Layer", "A layer of a Network (a reference: it keeps its network alive).")
      .def_prop_rw("name", &Layer::name, [](Layer& l, const std::string& n) { l.set_name(n); })
      .def_prop_ro("type", &Layer::type, "The layer type (docs/layers.md), e.g. 'Convolution'.")
      .def_prop_ro("num_inputs", &Layer::num_inputs)
      .def_prop_ro("num_outputs", &Layer::num_outputs)
      .def("get_input", &Layer::input, "index"_a, nb::rv_policy::reference_internal, "Input i (None when omitted).")
      .def("set_input", &Layer::set_input, "index"_a, "tensor"_a, "Replaces (or, at num_inputs, appends) input i.")
      .def("get_output", &Layer::output, "index"_a, nb::rv_policy::reference_internal, "Output i.")
      .def_prop_ro(
          "inputs",
          [](const Layer& l) {
            std::vector<Tensor*> v;
            for (int i = 0; i < l.num_inputs(); ++i) v.push_back(l.input(i));
            return v;
          },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "outputs",
          [](const Layer& l) {
            std::vector<Tensor*> v;
            for (int i = 0; i < l.num_outputs(); ++i) v.push_back(l.output(i));
            return v;
          },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "attributes",
          [](const Layer& l) {
            nb::dict d;
            for (const auto& [k, v] : l.attrs().all()) d[k.c_str()] = attr_to(v);
            return d;
          },
          "The layer's attributes as a dict (a copy; change them with set_attribute).")
      .def(
          "set_attribute",
          [](Layer& l, const std::string& name, nb::handle value) {
            l.attrs().set(name, attr_from(value, "attribute '" + name + "' of layer '" + l.name() + "'"));
          },
          "name"_a, "value"_a, "Sets an attribute (int, float, str, a list of them, or an array).")
      .def_prop_rw(
          "precision",
          [](const Layer& l) -> nb::object { return l.has_precision() ? nb::cast(l.precision()) : nb::none(); },
          [](Layer& l, DataType t) { l.set_precision(t); },
          "Requested compute precision (None: the builder's choice); e.g. DataType.float32 to keep a layer out of "
          "fp16.")
      .def("__repr__", [](const Layer& l) { return "<kiln.Layer '" + l.name() + "' (" + l.type() + ")>"; });

  auto ref = nb::rv_policy::reference_internal;
  nb::class_<Network>(m, "Network",
                      "The network definition: layers connected by named tensors (TensorRT's INetworkDefinition). "
                      "Layer helpers return the new Layer; its output is layer.get_output(0).")
      .def(nb::init<>())
      .def(
          "add_input",
          [](Network& n, const std::string& name, DataType type, const std::vector<int64_t>& shape) {
            return n.add_input(name, type, dims_from(shape));
          },
          "name"_a, "dtype"_a, "shape"_a, ref,
          "A network input; -1 marks a dynamic dim (needs an optimization profile).")
      .def("mark_output", &Network::mark_output, "tensor"_a,
           "Marks a tensor as a network output (named as the tensor).")
      .def("unmark_output", &Network::unmark_output, "tensor"_a, "Makes a network output an ordinary tensor again.")
      .def(
          "add_constant",
          [](Network& n, nb::handle value, const std::string& name) {
            return n.add_constant(tensor_arg(value, "constant '" + name + "'"), name);
          },
          "value"_a, "name"_a = "", ref, "A Constant layer holding a copy of an array.")
      .def(
          "add_convolution",
          [](Network& n, Tensor* input, int64_t num_output_maps, const std::vector<int64_t>& kernel_shape,
             nb::handle weights, nb::object bias, nb::object strides, nb::object padding, nb::object pads_begin,
             nb::object pads_end, nb::object dilations, int64_t groups) {
            ConvolutionDesc d;
            d.num_output_maps = num_output_maps;
            d.kernel = kernel_shape;
            d.strides = ints_or_empty(strides);
            d.pads_begin = padding.is_none() ? ints_or_empty(pads_begin) : ints_or_empty(padding);
            d.pads_end = padding.is_none() ? ints_or_empty(pads_end) : ints_or_empty(padding);
            d.dilations = ints_or_empty(dilations);
            d.groups = groups;
            return n.add_convolution(input, d, tensor_arg(weights, "convolution weights"),
                                     optional_tensor(bias, "convolution bias"));
          },
          "input"_a, "num_output_maps"_a, "kernel_shape"_a, "weights"_a, "bias"_a = nb::none(),
          "strides"_a = nb::none(), "padding"_a = nb::none(), "pads_begin"_a = nb::none(), "pads_end"_a = nb::none(),
          "dilations"_a = nb::none(), "groups"_a = 1, ref,
          "Convolution: weights [num_output_maps, C/groups, *kernel_shape], optional bias [num_output_maps]; padding "
          "sets both sides, pads_begin/pads_end each side.")
      .def(
          "add_deconvolution",
          [](Network& n, Tensor* input, int64_t num_output_maps, const std::vector<int64_t>& kernel_shape,
             nb::handle weights, nb::object bias, nb::object strides, nb::object padding, nb::object output_padding,
             nb::object dilations, int64_t groups) {
            ConvolutionDesc d;
            d.num_output_maps = num_output_maps;
            d.kernel = kernel_shape;
            d.strides = ints_or_empty(strides);
            d.pads_begin = d.pads_end = ints_or_empty(padding);
            d.output_padding = ints_or_empty(output_padding);
            d.dilations = ints_or_empty(dilations);
            d.groups = groups;
            return n.add_deconvolution(input, d, tensor_arg(weights, "deconvolution weights"),
                                       optional_tensor(bias, "deconvolution bias"));
          },
          "input"_a, "num_output_maps"_a, "kernel_shape"_a, "weights"_a, "bias"_a = nb::none(),
          "strides"_a = nb::none(), "padding"_a = nb::none(), "output_padding"_a = nb::none(),
          "dilations"_a = nb::none(), "groups"_a = 1, ref,
          "Transposed convolution: weights [C, num_output_maps/groups, *kernel_shape].")
      .def(
          "add_pooling",
          [](Network& n, Tensor* input, PoolingType type, nb::object window, nb::object strides, nb::object padding,
             bool ceil_mode, bool count_include_pad, bool global) {
            PoolingDesc d;
            d.type = type;
            d.kernel = ints_or_empty(window);
            d.strides = ints_or_empty(strides);
            d.pads_begin = d.pads_end = ints_or_empty(padding);
            d.ceil_mode = ceil_mode;
            d.count_include_pad = count_include_pad;
            d.global = global;
            return n.add_pooling(input, d);
          },
          "input"_a, "type"_a, "window_size"_a = nb::none(), "strides"_a = nb::none(), "padding"_a = nb::none(),
          "ceil_mode"_a = false, "count_include_pad"_a = false, "global_pooling"_a = false, ref,
          "Max or average pooling over the spatial dims (global_pooling: over all of them).")
      .def("add_activation", &Network::add_activation, "input"_a, "type"_a, "alpha"_a = 0.0, "beta"_a = 0.0, ref,
           "An activation (alpha/beta per docs/layers.md).")
      .def(
          "add_scale",
          [](Network& n, Tensor* input, ScaleMode mode, nb::object shift, nb::object scale, nb::object power,
             int64_t axis) {
            return n.add_scale(input, mode, optional_tensor(shift, "scale shift"),
                               optional_tensor(scale, "scale scale"), optional_tensor(power, "scale power"), axis);
          },
          "input"_a, "mode"_a, "shift"_a = nb::none(), "scale"_a = nb::none(), "power"_a = nb::none(),
          "channel_axis"_a = 1, ref,
          "y = (x * scale + shift) ** power, each None (identity), one value, one per channel or one per element: a "
          "folded BatchNorm is mode=ScaleMode.channel with scale = gamma/sqrt(var+eps), shift = beta - mean*scale.")
      .def("add_elementwise", &Network::add_elementwise, "a"_a, "b"_a, "op"_a, ref,
           "A binary operation with broadcasting.")
      .def("add_unary", &Network::add_unary, "input"_a, "op"_a, ref, "A unary operation (UnaryOp).")
      .def("add_matrix_multiply", &Network::add_matrix_multiply, "a"_a, "transpose_a"_a, "b"_a, "transpose_b"_a, ref,
           "Batched matrix product (numpy matmul rules).")
      .def(
          "add_fully_connected",
          [](Network& n, Tensor* input, int64_t num_outputs, nb::handle weights, nb::object bias) {
            return n.add_fully_connected(input, num_outputs, tensor_arg(weights, "fully connected weights"),
                                         optional_tensor(bias, "fully connected bias"));
          },
          "input"_a, "num_outputs"_a, "weights"_a, "bias"_a = nb::none(), ref,
          "y = flatten(x, 1) @ W.T + b, W of shape [num_outputs, K].")
      .def(
          "add_shuffle",
          [](Network& n, Tensor* input, nb::object first, nb::object reshape, nb::object second) {
            return n.add_shuffle(input, ints_or_empty(first), ints_or_empty(reshape), ints_or_empty(second));
          },
          "input"_a, "first_transpose"_a = nb::none(), "reshape"_a = nb::none(), "second_transpose"_a = nb::none(), ref,
          "Transpose, reshape (0 copies the input extent, -1 infers), transpose; None skips a step.")
      .def("add_shuffle_dynamic", &Network::add_shuffle_dynamic, "input"_a, "shape"_a, ref,
           "Reshape to the dims held by a 1-D int64 shape tensor.")
      .def("add_concatenation", &Network::add_concatenation, "inputs"_a, "axis"_a, ref,
           "Concatenates the inputs along an axis.")
      .def(
          "add_slice",
          [](Network& n, Tensor* input, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
             nb::object axes,
             nb::object steps) { return n.add_slice(input, starts, ends, ints_or_empty(axes), ints_or_empty(steps)); },
          "input"_a, "starts"_a, "ends"_a, "axes"_a = nb::none(), "steps"_a = nb::none(), ref, "ONNX Slice semantics.")
      .def("add_gather", &Network::add_gather, "data"_a, "indices"_a, "axis"_a, ref,
           "ONNX Gather: data indexed by indices along an axis.")
      .def("add_softmax", &Network::add_softmax, "input"_a, "axis"_a, ref, "Softmax along an axis.")
      .def("add_reduce", &Network::add_reduce, "input"_a, "op"_a, "axes"_a, "keep_dims"_a, ref,
           "A reduction (ReduceOp) over axes.")
      .def("add_identity", &Network::add_identity, "input"_a, ref, "A copy of the input.")
      .def("add_cast", &Network::add_cast, "input"_a, "to"_a, ref, "Converts to another element type.")
      .def("add_select", &Network::add_select, "condition"_a, "then_value"_a, "else_value"_a, ref,
           "where(condition, then_value, else_value) with broadcasting.")
      .def("add_shape", &Network::add_shape, "input"_a, ref, "The input's dims as a 1-D int64 tensor.")
      .def("add_parametric_relu", &Network::add_parametric_relu, "input"_a, "slope"_a, ref,
           "y = x if x >= 0 else slope * x (slope broadcast to x).")
      .def("add_fused_elementwise", &Network::add_fused_elementwise, "inputs"_a, "program"_a, ref,
           "A FusedElementWise register program over the inputs (grammar in docs/layers.md).")
      .def("add_gemm", &Network::add_gemm, "a"_a, "b"_a, "c"_a.none() = nb::none(), "alpha"_a = 1.0, "beta"_a = 1.0,
           "trans_a"_a = false, "trans_b"_a = false, ref, "y = alpha * A' @ B' + beta * C (c may be None).")
      .def(
          "add_split",
          [](Network& n, Tensor* input, int64_t axis, int num_outputs, nb::object sizes) {
            return n.add_split(input, axis, num_outputs, ints_or_empty(sizes));
          },
          "input"_a, "axis"_a, "num_outputs"_a, "sizes"_a = nb::none(), ref,
          "Splits along an axis into num_outputs parts of the given sizes (None: equal parts).")
      .def(
          "add_resize",
          [](Network& n, Tensor* input, Tensor* scales, Tensor* sizes, InterpolationMode mode, const std::string& ctm,
             const std::string& nearest_mode, double cubic_coeff_a, bool exclude_outside, double extrapolation_value) {
            ResizeDesc d;
            d.mode = mode;
            d.coordinate_transformation_mode = ctm;
            d.nearest_mode = nearest_mode;
            d.cubic_coeff_a = cubic_coeff_a;
            d.exclude_outside = exclude_outside;
            d.extrapolation_value = extrapolation_value;
            return n.add_resize(input, scales, sizes, d);
          },
          "input"_a, "scales"_a.none() = nb::none(), "sizes"_a.none() = nb::none(),
          "mode"_a = InterpolationMode::kNearest, "coordinate_transformation_mode"_a = "half_pixel",
          "nearest_mode"_a = "round_prefer_floor", "cubic_coeff_a"_a = -0.75, "exclude_outside"_a = false,
          "extrapolation_value"_a = 0.0, ref, "ONNX Resize to sizes or by scales (one of them; both are shape inputs).")
      .def("add_padding", &Network::add_padding, "input"_a, "pads"_a, "value"_a.none() = nb::none(),
           "mode"_a = PaddingMode::kConstant, ref, "ONNX Pad: pads is a 1-D int shape input [begins..., ends...].")
      .def(
          "add_fill",
          [](Network& n, FillMode mode, const std::vector<Tensor*>& inputs, nb::object value) {
            return n.add_fill(mode, inputs, optional_tensor(value, "fill value"));
          },
          "mode"_a, "inputs"_a, "value"_a = nb::none(), ref,
          "constant: inputs [shape], value a 1-element array (None: float32 0); range: inputs [start, limit, delta].")
      .def("add_expand", &Network::add_expand, "input"_a, "shape"_a, ref,
           "ONNX Expand (bidirectional broadcast to shape).")
      .def("add_tile", &Network::add_tile, "input"_a, "repeats"_a, ref, "ONNX Tile.")
      .def(
          "add_normalization",
          [](Network& n, Tensor* input, Tensor* scale, Tensor* bias, NormalizationMode mode, int64_t axis,
             const std::vector<int64_t>& axes, int64_t num_groups, double epsilon, bool normalize_variance, int64_t p,
             int num_outputs) {
            NormalizationDesc d;
            d.mode = mode;
            d.axis = axis;
            d.axes = axes;
            d.num_groups = num_groups;
            d.epsilon = epsilon;
            d.normalize_variance = normalize_variance;
            d.p = p;
            return n.add_normalization(input, scale, bias, d, num_outputs);
          },
          "input"_a, "scale"_a.none() = nb::none(), "bias"_a.none() = nb::none(), "mode"_a = NormalizationMode::kLayer,
          "axis"_a = -1, "axes"_a = std::vector<int64_t>{0, 2, 3}, "num_groups"_a = 1, "epsilon"_a = 1e-5,
          "normalize_variance"_a = true, "p"_a = 2, "num_outputs"_a = 1, ref,
          "Layer, instance, group, mvn or lp normalization (docs/layers.md).")
      .def("add_lrn", &Network::add_lrn, "input"_a, "size"_a, "alpha"_a = 1e-4, "beta"_a = 0.75, "bias"_a = 1.0, ref,
           "Local response normalization across channels.")
      .def("add_arg_reduce", &Network::add_arg_reduce, "input"_a, "op"_a, "axis"_a = 0, "keep_dims"_a = true,
           "select_last_index"_a = false, "one_hot"_a = false, ref, "ArgMax / ArgMin along an axis (one_hot: Hardmax).")
      .def("add_topk", &Network::add_topk, "input"_a, "k"_a, "axis"_a = -1, "largest"_a = true, "sorted"_a = true,
           "num_outputs"_a = 2, ref, "The k largest (smallest) values and their int64 indices along an axis.")
      .def("add_cumsum", &Network::add_cumsum, "input"_a, "axis"_a, "exclusive"_a = false, "reverse"_a = false, ref,
           "Cumulative sum along the axis held by a scalar tensor.")
      .def("add_trilu", &Network::add_trilu, "input"_a, "k"_a.none() = nb::none(), "upper"_a = true, ref,
           "Upper (lower) triangle of the last two dims.")
      .def("add_one_hot", &Network::add_one_hot, "indices"_a, "depth"_a, "values"_a, "axis"_a = -1, ref,
           "ONNX OneHot (values = [off, on]).")
      .def("add_reverse_sequence", &Network::add_reverse_sequence, "input"_a, "sequence_lens"_a, "batch_axis"_a = 1,
           "time_axis"_a = 0, ref, "ONNX ReverseSequence.")
      .def(
          "add_max_unpool",
          [](Network& n, Tensor* input, Tensor* indices, Tensor* output_shape, const std::vector<int64_t>& kernel,
             nb::object strides, nb::object pads) {
            return n.add_max_unpool(input, indices, output_shape, kernel, ints_or_empty(strides), ints_or_empty(pads));
          },
          "input"_a, "indices"_a, "output_shape"_a.none() = nb::none(), "kernel"_a = std::vector<int64_t>{},
          "strides"_a = nb::none(), "pads"_a = nb::none(), ref, "ONNX MaxUnpool of MaxPool's values and indices.")
      .def("add_non_max_suppression", &Network::add_non_max_suppression, "boxes"_a, "scores"_a,
           "max_output_boxes_per_class"_a.none() = nb::none(), "iou_threshold"_a.none() = nb::none(),
           "score_threshold"_a.none() = nb::none(), "center_point_box"_a = false, ref,
           "ONNX NonMaxSuppression: outputs the [count, 3] selection and the count.")
      .def("add_unique", &Network::add_unique, "input"_a, "sorted"_a = true, "flatten"_a = true, "axis"_a = 0, ref,
           "ONNX Unique: outputs Y, indices, inverse_indices, counts and the count U.")
      .def("add_einsum", &Network::add_einsum, "inputs"_a, "equation"_a, ref, "numpy einsum.")
      .def("add_det", &Network::add_det, "input"_a, ref, "Determinant of each square matrix of the last two axes.")
      .def("add_bit_shift", &Network::add_bit_shift, "x"_a, "y"_a, "direction"_a, ref, "Logical shift of x by y.")
      .def("add_scatter", &Network::add_scatter, "data"_a, "indices"_a, "updates"_a, "mode"_a = ScatterMode::kElements,
           "axis"_a = 0, "reduction"_a = ScatterReductionKind::kNone, ref, "ONNX ScatterElements / ScatterND.")
      .def("add_quantize", &Network::add_quantize, "input"_a, "scale"_a, "zero_point"_a.none() = nb::none(),
           "axis"_a = 1, "block_size"_a = 0, "output_type"_a = DataType::kUInt8, ref, "ONNX QuantizeLinear.")
      .def("add_dequantize", &Network::add_dequantize, "input"_a, "scale"_a, "zero_point"_a.none() = nb::none(),
           "axis"_a = 1, "block_size"_a = 0, ref, "ONNX DequantizeLinear.")
      .def("add_grid_sample", &Network::add_grid_sample, "input"_a, "grid"_a, "mode"_a = InterpolationMode::kLinear,
           "padding_mode"_a = GridSamplePadding::kZeros, "align_corners"_a = false, ref, "ONNX GridSample.")
      .def(
          "add_roi_align",
          [](Network& n, Tensor* input, Tensor* rois, Tensor* batch_indices, RoiAlignMode mode, int64_t output_height,
             int64_t output_width, int64_t sampling_ratio, double spatial_scale, const std::string& ctm) {
            RoiAlignDesc d;
            d.mode = mode;
            d.output_height = output_height;
            d.output_width = output_width;
            d.sampling_ratio = sampling_ratio;
            d.spatial_scale = spatial_scale;
            d.coordinate_transformation_mode = ctm;
            return n.add_roi_align(input, rois, batch_indices, d);
          },
          "input"_a, "rois"_a, "batch_indices"_a, "mode"_a = RoiAlignMode::kAvg, "output_height"_a = 1,
          "output_width"_a = 1, "sampling_ratio"_a = 0, "spatial_scale"_a = 1.0,
          "coordinate_transformation_mode"_a = "half_pixel", ref, "ONNX RoiAlign.")
      .def("add_max_roi_pool", &Network::add_max_roi_pool, "input"_a, "rois"_a, "pooled_shape"_a,
           "spatial_scale"_a = 1.0, ref, "ONNX MaxRoiPool.")
      .def(
          "add_rnn",
          [](Network& n, nb::list inputs, RNNCell cell, int64_t hidden_size,
             const std::vector<std::string>& activations, RNNDirection direction,
             const std::vector<double>& activation_alpha, const std::vector<double>& activation_beta, double clip,
             bool linear_before_reset, bool input_forget, int64_t layout, int num_outputs) {
            RNNDesc d;
            d.cell = cell;
            d.hidden_size = hidden_size;
            d.direction = direction;
            d.activations = activations;
            d.activation_alpha = activation_alpha;
            d.activation_beta = activation_beta;
            d.clip = clip;
            d.linear_before_reset = linear_before_reset;
            d.input_forget = input_forget;
            d.layout = layout;
            return n.add_rnn(tensors_or_none(inputs), d, num_outputs);
          },
          "inputs"_a, "cell"_a, "hidden_size"_a, "activations"_a, "direction"_a = RNNDirection::kForward,
          "activation_alpha"_a = std::vector<double>{}, "activation_beta"_a = std::vector<double>{}, "clip"_a = 0.0,
          "linear_before_reset"_a = false, "input_forget"_a = false, "layout"_a = 0, "num_outputs"_a = 0, ref,
          "ONNX RNN / GRU / LSTM: inputs [X, W, R, B, sequence_lens, initial_h, initial_c, P] (None or absent: "
          "omitted); outputs Y, Y_h and (lstm) Y_c.")
      .def("add_string_normalizer", &Network::add_string_normalizer, "input"_a,
           "case_change"_a = CaseChangeAction::kNone, "is_case_sensitive"_a = false,
           "stopwords"_a = std::vector<std::string>{}, "locale"_a = "", ref,
           "ONNX StringNormalizer (CPU): outputs the kept words and their count.")
      .def("add_non_zero", &Network::add_non_zero, "input"_a, ref,
           "ONNX NonZero: outputs the int64 coordinates [rank, count] and the count.")
      .def(
          "add_layer",
          [](Network& n, const std::string& type, const std::vector<Tensor*>& inputs, int num_outputs, nb::dict attrs,
             const std::string& name) {
            Attributes a;
            for (auto [k, v] : attrs) {
              const std::string key = nb::cast<std::string>(k);
              a.set(key, attr_from(v, "attribute '" + key + "' of layer '" + name + "'"));
            }
            return n.add_layer(type, inputs, num_outputs, std::move(a), name);
          },
          "type"_a, "inputs"_a, "num_outputs"_a = 1, "attributes"_a = nb::dict(), "name"_a = "", ref,
          "A layer of any type of docs/layers.md with its attributes (checked by validate() and the builder).")
      .def(
          "add_plugin",
          [](Network& n, const std::vector<Tensor*>& inputs, const PluginObject& p, const std::string& name) {
            if (!p.plugin) throw Error("add_plugin: the plugin object is empty");
            return add_plugin(n, inputs, *p.plugin, name);
          },
          "inputs"_a, "plugin"_a, "name"_a = "", ref,
          "A plugin layer (the plugin from creator.create(...) or a Python plugin); its fields are stored on the "
          "layer.")
      .def_prop_ro("num_layers", &Network::num_layers)
      .def("get_layer", &Network::layer, "index"_a, ref, "Layer i (in insertion order).")
      .def_prop_ro("num_inputs", &Network::num_inputs)
      .def("get_input", &Network::input, "index"_a, ref, "Network input i.")
      .def_prop_ro("num_outputs", &Network::num_outputs)
      .def("get_output", &Network::output, "index"_a, ref, "Network output i.")
      .def_prop_ro(
          "layers",
          [](const Network& n) {
            std::vector<Layer*> v;
            for (int i = 0; i < n.num_layers(); ++i) v.push_back(n.layer(i));
            return v;
          },
          ref)
      .def_prop_ro(
          "inputs",
          [](const Network& n) {
            std::vector<Tensor*> v;
            for (int i = 0; i < n.num_inputs(); ++i) v.push_back(n.input(i));
            return v;
          },
          ref)
      .def_prop_ro(
          "outputs",
          [](const Network& n) {
            std::vector<Tensor*> v;
            for (int i = 0; i < n.num_outputs(); ++i) v.push_back(n.output(i));
            return v;
          },
          ref)
      .def("find_tensor", &Network::find_tensor, "name"_a, ref, "The tensor of that name, or None.")
      .def("find_layer", &Network::find_layer, "name"_a, ref, "The layer of that name, or None.")
      .def("remove_layer", &Network::remove_layer, "layer"_a,
           "Removes a layer (Python references to it and its outputs must not be used afterwards).")
      .def("replace_all_uses", &Network::replace_all_uses, "old"_a, "new"_a,
           "Makes every reader (and the output mark) of `old` use `new`.")
      .def("validate", &Network::validate,
           "Checks names, connectivity and attributes; raises kiln.Error listing every problem.")
      .def("__str__", [](const Network& n) { return to_text(n); });
}

}  // namespace kiln::python
