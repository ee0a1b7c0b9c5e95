// ONNX importers of the convolution family: Conv, ConvTranspose, MaxPool, AveragePool,
// GlobalAveragePool, GlobalMaxPool and (inference-mode) BatchNormalization, which becomes a
// per-channel Scale layer with folded coefficients.
#include <cmath>

#include "src/core/half.h"
#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// Element types for the OnnxImporterInfo of the registrations below (docs/onnx-support.md).
constexpr const char* kFloatTypes = "float32, float16, float64";

// ONNX gives some per-spatial-dim lists only optionally; fill defaults and check lengths.
std::vector<int64_t> spatial_attr(NodeContext& ctx, const std::string& name, size_t k, int64_t def) {
  std::vector<int64_t> v = ctx.attr_ints(name);
  if (v.empty()) return std::vector<int64_t>(k, def);
  if (v.size() != k) {
    ctx.fail("attribute " + quote(name) + " has " + std::to_string(v.size()) + " values, expected " +
             std::to_string(k) + " (one per spatial dim)");
  }
  for (int64_t x : v) {
    if (x < 0 || (def == 1 && x == 0))
      ctx.fail("attribute " + quote(name) + " has an invalid value " + std::to_string(x));
  }
  return v;
}

// Kernel extents from `kernel_shape` or, failing that, from the weights' dims [.., .., k1..kk].
std::vector<int64_t> kernel_shape(NodeContext& ctx) {
  std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.empty()) {
    const auto wd = ctx.input_dims(1);
    if (!wd || wd->rank() < 3) {
      (void)ctx.constant_input(1, "W");  // fails naming the weights
      ctx.fail("weights " + quote(ctx.input_name(1)) + " must have rank >= 3");
    }
    for (int i = 2; i < wd->rank(); ++i) {
      if ((*wd)[i] == kDynamic)
        ctx.fail("kernel_shape is absent and weights " + quote(ctx.input_name(1)) + " have unknown dims");
      kernel.push_back((*wd)[i]);
    }
  }
  if (kernel.empty() || kernel.size() > 3) {
    ctx.unsupported(std::to_string(kernel.size()) + "-D " + ctx.op_type() + " (kiln supports 1-D to 3-D)");
  }
  return kernel;
}

std::vector<int64_t> effective_kernel(const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilations) {
  std::vector<int64_t> eff(kernel.size());
  for (size_t i = 0; i < kernel.size(); ++i) eff[i] = (kernel[i] - 1) * dilations[i] + 1;
  return eff;
}

std::vector<int64_t> or_zeros(std::vector<int64_t> pads, size_t k) {
  return pads.empty() ? std::vector<int64_t>(2 * k, 0) : pads;
}

void import_conv(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* w = ctx.required_input(1, "W");
  Tensor* b = ctx.input(2);
  const auto kernel = kernel_shape(ctx);
  const size_t k = kernel.size();
  const auto strides = spatial_attr(ctx, "strides", k, 1);
  const auto dilations = spatial_attr(ctx, "dilations", k, 1);
  Attributes a;
  a.set("strides", strides);
  a.set("pads", or_zeros(resolve_auto_pad(ctx, effective_kernel(kernel, dilations), strides), k));
  a.set("dilations", dilations);
  a.set("group", ctx.attr_int("group", 1));
  std::vector<Tensor*> inputs{x, w};
  if (b) inputs.push_back(b);
  ctx.set_output(0, ctx.add_layer(kLayerConvolution, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Conv", import_conv,
                            {.min_opset = 1,
                             .types = kFloatTypes,
                             .notes = "1-D to 3-D; auto_pad SAME with strides > 1 needs static spatial dims"});

void import_conv_transpose(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* w = ctx.required_input(1, "W");
  Tensor* b = ctx.input(2);
  const auto kernel = kernel_shape(ctx);
  const size_t k = kernel.size();
  const auto strides = spatial_attr(ctx, "strides", k, 1);
  const auto dilations = spatial_attr(ctx, "dilations", k, 1);
  auto output_padding = spatial_attr(ctx, "output_padding", k, 0);
  const auto eff = effective_kernel(kernel, dilations);
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  const bool upper = auto_pad == "SAME_UPPER";
  std::vector<int64_t> pads(2 * k, 0);

  // total padding = s*(in-1) + output_padding + eff_kernel - out, split as the ONNX spec says
  // (SAME_UPPER: the smaller half first; otherwise the larger half first).
  auto split_total = [&](size_t i, int64_t total) {
    if (total < 0) {  // the output is larger than the natural one: the extra rows get bias only
      output_padding[i] += -total;
      total = 0;
    }
    pads[i] = upper ? total / 2 : total - total / 2;
    pads[i + k] = upper ? total - total / 2 : total / 2;
  };

  std::vector<int64_t> output_shape = ctx.attr_ints("output_shape");
  if (!output_shape.empty()) {
    if (output_shape.size() < k) ctx.fail("attribute 'output_shape' has fewer values than spatial dims");
    output_shape.erase(output_shape.begin(), output_shape.end() - static_cast<std::ptrdiff_t>(k));
    const auto dims = ctx.input_dims(0);
    for (size_t i = 0; i < k; ++i) {
      if (!dims || dims->rank() != static_cast<int>(k) + 2 || (*dims)[static_cast<int>(i) + 2] == kDynamic) {
        ctx.fail("attribute 'output_shape' needs static spatial dims of input '" + ctx.input_name(0) +
                 "', which the model does not record; run onnx.shape_inference.infer_shapes or export with pads");
      }
      const int64_t in = (*dims)[static_cast<int>(i) + 2];
      split_total(i, strides[i] * (in - 1) + output_padding[i] + eff[i] - output_shape[i]);
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // output = in * stride, so the total padding does not depend on the input size.
    for (size_t i = 0; i < k; ++i) split_total(i, output_padding[i] + eff[i] - strides[i]);
  } else if (auto_pad == "NOTSET") {
    pads = or_zeros(ctx.attr_ints("pads"), k);
    if (pads.size() != 2 * k) ctx.fail("attribute 'pads' must have " + std::to_string(2 * k) + " values");
  } else if (auto_pad != "VALID") {
    ctx.fail("unknown auto_pad value " + quote(auto_pad));
  }
  Attributes a;
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("output_padding", output_padding);
  a.set("group", ctx.attr_int("group", 1));
  std::vector<Tensor*> inputs{x, w};
  if (b) inputs.push_back(b);
  ctx.set_output(0, ctx.add_layer(kLayerDeconvolution, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("ConvTranspose", import_conv_transpose,
                            {.min_opset = 1,
                             .types = kFloatTypes,
                             .notes = "1-D to 3-D; output_shape needs static spatial dims"});

void import_pool(NodeContext& ctx, const char* mode) {
  Tensor* x = ctx.required_input(0, "X");
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.empty()) ctx.fail("attribute 'kernel_shape' is required");
  if (kernel.size() > 3) ctx.unsupported(std::to_string(kernel.size()) + "-D pooling (kiln supports 1-D to 3-D)");
  const size_t k = kernel.size();
  const auto strides = spatial_attr(ctx, "strides", k, 1);
  const auto dilations = spatial_attr(ctx, "dilations", k, 1);
  if (ctx.attr_int("storage_order", 0) != 0) ctx.unsupported("storage_order=1 (column-major indices)");
  if (ctx.output_used(1)) ctx.unsupported("the Indices output of MaxPool");
  Attributes a;
  a.set("mode", std::string(mode));
  a.set("kernel", kernel);
  a.set("strides", strides);
  a.set("pads", or_zeros(resolve_auto_pad(ctx, effective_kernel(kernel, dilations), strides), k));
  a.set("dilations", dilations);
  a.set("ceil_mode", ctx.attr_int("ceil_mode", 0));
  a.set("count_include_pad", ctx.attr_int("count_include_pad", 0));
  ctx.set_output(0, ctx.add_layer(kLayerPooling, {x}, 1, std::move(a))->output(0));
}

void import_max_pool(NodeContext& ctx) { import_pool(ctx, "max"); }
void import_average_pool(NodeContext& ctx) { import_pool(ctx, "average"); }
KILN_REGISTER_ONNX_IMPORTER("MaxPool", import_max_pool,
                            {.min_opset = 1,
                             .types = "float32, float16, float64, int8, uint8",
                             .notes = "1-D to 3-D; the Indices output and storage_order=1 are not supported"});
KILN_REGISTER_ONNX_IMPORTER("AveragePool", import_average_pool,
                            {.min_opset = 1, .types = kFloatTypes, .notes = "1-D to 3-D"});

void import_global_pool(NodeContext& ctx, const char* mode) {
  Attributes a;
  a.set("mode", std::string(mode));
  a.set("kernel", std::vector<int64_t>{});
  a.set("global", int64_t{1});
  ctx.set_output(0, ctx.add_layer(kLayerPooling, {ctx.required_input(0, "X")}, 1, std::move(a))->output(0));
}

void import_global_average_pool(NodeContext& ctx) { import_global_pool(ctx, "average"); }
void import_global_max_pool(NodeContext& ctx) { import_global_pool(ctx, "max"); }
KILN_REGISTER_ONNX_IMPORTER("GlobalAveragePool", import_global_average_pool, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("GlobalMaxPool", import_global_max_pool,
                            {.min_opset = 1, .types = "float32, float16, float64, int8, uint8"});

// Values of a float parameter tensor as double, with its element count checked.
std::vector<double> channel_values(NodeContext& ctx, int input, const char* what, int64_t channels) {
  const HostTensor& t = ctx.constant_input(input, what);
  if (!is_floating_point(t.type())) ctx.fail(std::string(what) + " must be a floating-point tensor");
  if (t.count() != channels) {
    ctx.fail(std::string(what) + " " + quote(ctx.input_name(input)) + " has " + std::to_string(t.count()) +
             " values, expected " + std::to_string(channels) + " (one per channel)");
  }
  return t.to_double();
}

HostTensor channel_tensor(const std::vector<double>& values, DataType type) {
  const Dims dims{static_cast<int64_t>(values.size())};
  HostTensor t(type, dims);
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == DataType::kFloat64)
      t.as<double>()[i] = values[i];
    else if (type == DataType::kFloat16)
      t.as<half>()[i] = half(static_cast<float>(values[i]));
    else
      t.as<float>()[i] = static_cast<float>(values[i]);
  }
  return t;
}

// Inference-mode batch normalization: y = (x - mean) / sqrt(var + eps) * gamma + beta, i.e. a
// per-channel x * scale + shift with the coefficients folded here in double precision.
void import_batch_normalization(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  if (ctx.attr_int("training_mode", 0) != 0) ctx.unsupported("training_mode=1");
  for (int i = 1; i < ctx.num_outputs(); ++i) {
    if (ctx.output_used(i)) ctx.unsupported("the training outputs (running mean/var) of BatchNormalization");
  }
  if (ctx.attr_int("spatial", 1) != 1) ctx.unsupported("spatial=0 (per-activation statistics)");
  const HostTensor& gamma_t = ctx.constant_input(1, "scale");
  const int64_t channels = gamma_t.count();
  const auto gamma = channel_values(ctx, 1, "scale", channels);
  const auto beta = channel_values(ctx, 2, "B", channels);
  const auto mean = channel_values(ctx, 3, "input_mean", channels);
  const auto var = channel_values(ctx, 4, "input_var", channels);
  const double eps = ctx.attr_float("epsilon", 1e-5);
  std::vector<double> scale(static_cast<size_t>(channels)), shift(static_cast<size_t>(channels));
  for (size_t c = 0; c < scale.size(); ++c) {
    if (var[c] + eps <= 0) ctx.fail("input_var + epsilon is not positive at channel " + std::to_string(c));
    scale[c] = gamma[c] / std::sqrt(var[c] + eps);
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  Tensor* s = ctx.add_constant(channel_tensor(scale, gamma_t.type()), "scale");
  Tensor* b = ctx.add_constant(channel_tensor(shift, gamma_t.type()), "shift");
  Attributes a;
  a.set("mode", std::string("channel"));
  a.set("channel_axis", int64_t{1});
  ctx.set_output(0, ctx.add_layer(kLayerScale, {x, s, b}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER(
    "BatchNormalization", import_batch_normalization,
    {.min_opset = 1,
     .types = kFloatTypes,
     .notes =
         "inference only: scale, B, mean and var must be constants; training_mode=1 and spatial=0 are not supported"});

}  // namespace
}  // namespace kiln
