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
  nb::enum_<PoolingType>(m, "PoolingType", "Pooling kinds.").value("max", PoolingType::kMax).value("average", PoolingType::kAverage);

  nb::class_<Tensor>(m, "Tensor", "A named tensor of a Network (a reference: it keeps its network alive).")
      .def_prop_rw("name", &Tensor::name, [](Tensor& t, const std::string& n) { t.set_name(n); }, "The tensor's name (unique in its network).")
      .def_prop_rw("dtype", &Tensor::type, &Tensor::set_type, "Element type.")
      .def_prop_rw(
          "shape", [](const Tensor& t) { return dims_to_tuple(t.dims()); },
          [](Tensor& t, const std::vector<int64_t>& d) { t.set_dims(dims_from(d)); },
          "Dims (-1 where dynamic): declared for inputs, last inferred for others.")
      .def_prop_rw("format", &Tensor::format, &Tensor::set_format, "Memory layout.")
      .def_prop_ro("is_network_input", &Tensor::is_network_input)
      .def_prop_ro("is_network_output", &Tensor::is_network_output)
      .def_prop_ro("producer", &Tensor::producer, nb::rv_policy::reference_internal, "The layer writing it (None for inputs).")
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
          "set_attribute", [](Layer& l, const std::string& name, nb::handle value) {
            l.attrs().set(name, attr_from(value, "attribute '" + name + "' of layer '" + l.name() + "'"));
          },
          "name"_a, "value"_a, "Sets an attribute (int, float, str, a list of them, or an array).")
      .def_prop_rw(
          "precision",
          [](const Layer& l) -> nb::object { return l.has_precision() ? nb::cast(l.precision()) : nb::none(); },
          [](Layer& l, DataType t) { l.set_precision(t); },
          "Requested compute precision (None: the builder's choice); e.g. DataType.float32 to keep a layer out of fp16.")
      .def("__repr__", [](const Layer& l) { return "<kiln.Layer '" + l.name() + "' (" + l.type() + ")>"; });

  auto ref = nb::rv_policy::reference_internal;
  nb::class_<Network>(m, "Network",
                      "The network definition: layers connected by named tensors (TensorRT's INetworkDefinition). "
                      "Layer helpers return the new Layer; its output is layer.get_output(0).")
      .def(nb::init<>())
      .def("add_input", [](Network& n, const std::string& name, DataType type, const std::vector<int64_t>& shape) {
            return n.add_input(name, type, dims_from(shape));
          }, "name"_a, "dtype"_a, "shape"_a, ref, "A network input; -1 marks a dynamic dim (needs an optimization profile).")
      .def("mark_output", &Network::mark_output, "tensor"_a, "Marks a tensor as a network output (named as the tensor).")
      .def("unmark_output", &Network::unmark_output, "tensor"_a, "Makes a network output an ordinary tensor again.")
      .def("add_constant", [](Network& n, nb::handle value, const std::string& name) {
            return n.add_constant(tensor_arg(value, "constant '" + name + "'"), name);
          }, "value"_a, "name"_a = "", ref, "A Constant layer holding a copy of an array.")
      .def("add_convolution",
           [](Network& n, Tensor* input, int64_t num_output_maps, const std::vector<int64_t>& kernel_shape, nb::handle weights,
              nb::object bias, nb::object strides, nb::object padding, nb::object pads_begin, nb::object pads_end,
              nb::object dilations, int64_t groups) {
             ConvolutionDesc d;
             d.num_output_maps = num_output_maps;
             d.kernel = kernel_shape;
             d.strides = ints_or_empty(strides);
             d.pads_begin = padding.is_none() ? ints_or_empty(pads_begin) : ints_or_empty(padding);
             d.pads_end = padding.is_none() ? ints_or_empty(pads_end) : ints_or_empty(padding);
             d.dilations = ints_or_empty(dilations);
             d.groups = groups;
             return n.add_convolution(input, d, tensor_arg(weights, "convolution weights"), optional_tensor(bias, "convolution bias"));
           },
           "input"_a, "num_output_maps"_a, "kernel_shape"_a, "weights"_a, "bias"_a = nb::none(), "strides"_a = nb::none(),
           "padding"_a = nb::none(), "pads_begin"_a = nb::none(), "pads_end"_a = nb::none(), "dilations"_a = nb::none(),
           "groups"_a = 1, ref,
           "Convolution: weights [num_output_maps, C/groups, *kernel_shape], optional bias [num_output_maps]; padding "
           "sets both sides, pads_begin/pads_end each side.")
      .def("add_deconvolution",
           [](Network& n, Tensor* input, int64_t num_output_maps, const std::vector<int64_t>& kernel_shape, nb::handle weights,
              nb::object bias, nb::object strides, nb::object padding, nb::object output_padding, nb::object dilations,
              int64_t groups) {
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
           "input"_a, "num_output_maps"_a, "kernel_shape"_a, "weights"_a, "bias"_a = nb::none(), "strides"_a = nb::none(),
           "padding"_a = nb::none(), "output_padding"_a = nb::none(), "dilations"_a = nb::none(), "groups"_a = 1, ref,
           "Transposed convolution: weights [C, num_output_maps/groups, *kernel_shape].")
      .def("add_pooling",
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
      .def("add_scale",
           [](Network& n, Tensor* input, ScaleMode mode, nb::object shift, nb::object scale, nb::object power, int64_t axis) {
             return n.add_scale(input, mode, optional_tensor(shift, "scale shift"), optional_tensor(scale, "scale scale"),
                                optional_tensor(power, "scale power"), axis);
           },
           "input"_a, "mode"_a, "shift"_a = nb::none(), "scale"_a = nb::none(), "power"_a = nb::none(), "channel_axis"_a = 1, ref,
           "y = (x * scale + shift) ** power, each None (identity), one value, one per channel or one per element: a "
           "folded BatchNorm is mode=ScaleMode.channel with scale = gamma/sqrt(var+eps), shift = beta - mean*scale.")
      .def("add_elementwise", &Network::add_elementwise, "a"_a, "b"_a, "op"_a, ref, "A binary operation with broadcasting.")
      .def("add_unary", &Network::add_unary, "input"_a, "op"_a, ref, "A unary operation (UnaryOp).")
      .def("add_matrix_multiply", &Network::add_matrix_multiply, "a"_a, "transpose_a"_a, "b"_a, "transpose_b"_a, ref,
           "Batched matrix product (numpy matmul rules).")
      .def("add_fully_connected",
           [](Network& n, Tensor* input, int64_t num_outputs, nb::handle weights, nb::object bias) {
             return n.add_fully_connected(input, num_outputs, tensor_arg(weights, "fully connected weights"),
                                          optional_tensor(bias, "fully connected bias"));
           },
           "input"_a, "num_outputs"_a, "weights"_a, "bias"_a = nb::none(), ref,
           "y = flatten(x, 1) @ W.T + b, W of shape [num_outputs, K].")
      .def("add_shuffle",
           [](Network& n, Tensor* input, nb::object first, nb::object reshape, nb::object second) {
             return n.add_shuffle(input, ints_or_empty(first), ints_or_empty(reshape), ints_or_empty(second));
           },
           "input"_a, "first_transpose"_a = nb::none(), "reshape"_a = nb::none(), "second_transpose"_a = nb::none(), ref,
           "Transpose, reshape (0 copies the input extent, -1 infers), transpose; None skips a step.")
      .def("add_shuffle_dynamic", &Network::add_shuffle_dynamic, "input"_a, "shape"_a, ref,
           "Reshape to the dims held by a 1-D int64 shape tensor.")
      .def("add_concatenation", &Network::add_concatenation, "inputs"_a, "axis"_a, ref, "Concatenates the inputs along an axis.")
      .def("add_slice",
           [](Network& n, Tensor* input, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends, nb::object axes,
              nb::object steps) { return n.add_slice(input, starts, ends, ints_or_empty(axes), ints_or_empty(steps)); },
           "input"_a, "starts"_a, "ends"_a, "axes"_a = nb::none(), "steps"_a = nb::none(), ref, "ONNX Slice semantics.")
      .def("add_gather", &Network::add_gather, "data"_a, "indices"_a, "axis"_a, ref, "ONNX Gather: data indexed by indices along an axis.")
      .def("add_softmax", &Network::add_softmax, "input"_a, "axis"_a, ref, "Softmax along an axis.")
      .def("add_reduce", &Network::add_reduce, "input"_a, "op"_a, "axes"_a, "keep_dims"_a, ref, "A reduction (ReduceOp) over axes.")
      .def("add_identity", &Network::add_identity, "input"_a, ref, "A copy of the input.")
      .def("add_cast", &Network::add_cast, "input"_a, "to"_a, ref, "Converts to another element type.")
      .def("add_select", &Network::add_select, "condition"_a, "then_value"_a, "else_value"_a, ref, "where(condition, then_value, else_value) with broadcasting.")
      .def("add_shape", &Network::add_shape, "input"_a, ref, "The input's dims as a 1-D int64 tensor.")
      .def("add_layer",
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
      .def("add_plugin",
           [](Network& n, const std::vector<Tensor*>& inputs, const PluginObject& p, const std::string& name) {
             if (!p.plugin) throw Error("add_plugin: the plugin object is empty");
             return add_plugin(n, inputs, *p.plugin, name);
           },
           "inputs"_a, "plugin"_a, "name"_a = "", ref,
           "A plugin layer (the plugin from creator.create(...) or a Python plugin); its fields are stored on the layer.")
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
      .def("replace_all_uses", &Network::replace_all_uses, "old"_a, "new"_a, "Makes every reader (and the output mark) of `old` use `new`.")
      .def("validate", &Network::validate, "Checks names, connectivity and attributes; raises kiln.Error listing every problem.")
      .def("__str__", [](const Network& n) { return to_text(n); });
}

}  // namespace kiln::python
