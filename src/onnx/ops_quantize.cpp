// ONNX importers of the quantization operators. QuantizeLinear and DequantizeLinear map to the
// Quantize / Dequantize layers. The integer and quantized operators are composed exactly from
// existing layers:
//   MatMulInteger     int32 (a - a_zp) x int32 (b - b_zp) on MatrixMultiply (int32 accumulation);
//   ConvInteger       Convolution in float64 of (x - x_zp) and (w - w_zp), cast to int32: every
//                     product and partial sum is an integer below 2^53, so float64 is exact and
//                     the result equals int32 accumulation;
//   QLinearMatMul     the MatMulInteger graph, then float32(acc) * (a_scale * b_scale / y_scale)
//                     requantized by a Quantize layer of scale 1 and zero point y_zp: ONNX
//                     Runtime's requantization (float multiplier, round half to even, saturate);
//   QLinearConv       the ConvInteger graph with the int32 bias added in float64, then the same
//                     requantization with the per-output-channel multiplier;
//   DynamicQuantizeLinear  Reduce min/max, the scale (max - min) / 255 with min <= 0 <= max
//                     (1 when max == min, as ONNX Runtime), the zero point round(clamp(-min /
//                     scale, 0, 255)) and a Quantize layer.
// Per-row / per-column / per-channel parameters are reshaped so that numpy broadcasting puts
// them on the right axis.
#include <optional>
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"

namespace kiln {
namespace {

Tensor* cast(NodeContext& ctx, Tensor* x, DataType to, const std::string& suffix) {
  Attributes a;
  a.set("to", std::string(to_string(to)));
  return ctx.add_layer(kLayerCast, {x}, 1, std::move(a), suffix)->output(0);
}

Tensor* binary(NodeContext& ctx, Tensor* a, Tensor* b, const char* op, const std::string& suffix) {
  Attributes at;
  at.set("op", std::string(op));
  return ctx.add_layer(kLayerElementWise, {a, b}, 1, std::move(at), suffix)->output(0);
}

// Reshapes a parameter to `dims` (-1 takes the element count), e.g. [M] -> [M, 1, 1, 1].
Tensor* reshape(NodeContext& ctx, Tensor* x, const std::vector<int64_t>& dims, const std::string& suffix) {
  Attributes a;
  a.set("reshape_mode", std::string("dims"));
  a.set("reshape", dims);
  return ctx.add_layer(kLayerShuffle, {x}, 1, std::move(a), suffix)->output(0);
}

// The output type that attribute output_dtype (opset 21) asks for, if any.
std::optional<DataType> output_dtype_attr(NodeContext& ctx) {
  const int64_t code = ctx.attr_int("output_dtype", 0);
  if (code == 0) return std::nullopt;
  const auto type = data_type_from_onnx(static_cast<int32_t>(code));
  if (!type || (*type != DataType::kInt8 && *type != DataType::kUInt8)) {
    ctx.unsupported("quantizing to " + onnx_data_type_name(static_cast<int32_t>(code)) +
                    " (kiln quantizes to int8 and uint8)");
  }
  return type;
}

// Axis and block attributes common to QuantizeLinear and DequantizeLinear.
Attributes quant_attrs(NodeContext& ctx) {
  Attributes a;
  a.set("axis", ctx.attr_int("axis", 1));
  a.set("block_size", ctx.attr_int("block_size", 0));
  return a;
}

void import_quantize_linear(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "x");
  Tensor* scale = ctx.required_input(1, "y_scale");
  Tensor* zp = ctx.input(2);
  Attributes a = quant_attrs(ctx);
  if (const auto type = output_dtype_attr(ctx)) a.set("output_type", std::string(to_string(*type)));
  std::vector<Tensor*> inputs{x, scale};
  if (zp) inputs.push_back(zp);
  ctx.set_output(0, ctx.add_layer(kLayerQuantize, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("QuantizeLinear", import_quantize_linear,
                            {.min_opset = 10,
                             .types = "float32, float16, float64 to int8, uint8",
                             .notes = "per tensor, per axis, blocked; int16/int4/float8 outputs unsupported"});

void import_dequantize_linear(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "x");
  Tensor* scale = ctx.required_input(1, "x_scale");
  Tensor* zp = ctx.input(2);
  if (ctx.attr_int("output_dtype", 0) != 0) ctx.unsupported("attribute output_dtype of DequantizeLinear");
  std::vector<Tensor*> inputs{x, scale};
  if (zp) inputs.push_back(zp);
  ctx.set_output(0, ctx.add_layer(kLayerDequantize, inputs, 1, quant_attrs(ctx))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("DequantizeLinear", import_dequantize_linear,
                            {.min_opset = 10,
                             .types = "int8, uint8, int32 to float32, float16, float64",
                             .notes = "per tensor, per axis, blocked; int16/int4/float8 inputs unsupported"});

void import_dynamic_quantize_linear(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "x");
  auto reduce = [&](const char* op) {
    Attributes a;
    a.set("op", std::string(op));
    a.set("axes", std::vector<int64_t>{});
    a.set("keep_dims", int64_t{0});
    return ctx.add_layer(kLayerReduce, {x}, 1, std::move(a), std::string(op))->output(0);
  };
  auto scalar = [&](float v, const std::string& suffix) {
    return ctx.add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{v}), suffix);
  };
  Tensor* zero = scalar(0.0f, "zero");
  Tensor* lo = binary(ctx, reduce("min"), zero, "min", "range_min");
  Tensor* hi = binary(ctx, reduce("max"), zero, "max", "range_max");
  Tensor* step = binary(ctx, binary(ctx, hi, lo, "sub", "range"), scalar(255.0f, "qrange"), "div", "step");
  Tensor* flat = binary(ctx, hi, lo, "equal", "flat");
  Tensor* scale = ctx.add_layer(kLayerSelect, {flat, scalar(1.0f, "one"), step}, 1, {}, "scale")->output(0);
  Tensor* zp_f = binary(ctx, zero, binary(ctx, lo, scale, "div", "min_over_scale"), "sub", "zero_point_raw");
  zp_f = ctx.add_layer(kLayerActivation, {zp_f}, 1, activation_attrs("clip", 0.0, 255.0), "zero_point_clip")->output(0);
  Attributes round;
  round.set("op", std::string("round"));
  zp_f = ctx.add_layer(kLayerUnary, {zp_f}, 1, std::move(round), "zero_point_round")->output(0);
  Tensor* zp = cast(ctx, zp_f, DataType::kUInt8, "zero_point");
  Attributes a;
  a.set("axis", int64_t{1});
  a.set("block_size", int64_t{0});
  ctx.set_output(0, ctx.add_layer(kLayerQuantize, {x, scale, zp}, 1, std::move(a))->output(0));
  ctx.set_output(1, scale);
  ctx.set_output(2, zp);
}
KILN_REGISTER_ONNX_IMPORTER("DynamicQuantizeLinear", import_dynamic_quantize_linear,
                            {.min_opset = 11, .types = "float32"});

// ---- integer matmul ----------------------------------------------------------------------------

// True when input i is recorded as 1-D with more than one element (a per-row parameter of A).
bool is_vector(NodeContext& ctx, int i) {
  const auto d = ctx.input_dims(i);
  return d && d->rank() == 1 && (*d)[0] != 1;
}

// int32 (x - zp); the zero point is reshaped to a column when `per_row` (one value per row of A).
Tensor* centered_int32(NodeContext& ctx, int x_index, int zp_index, bool per_row, const std::string& what) {
  Tensor* x = cast(ctx, ctx.required_input(x_index, what), DataType::kInt32, what + "_int32");
  if (!ctx.has_input(zp_index)) return x;
  Tensor* zp = cast(ctx, ctx.input(zp_index), DataType::kInt32, what + "_zero_point_int32");
  if (per_row) zp = reshape(ctx, zp, {-1, 1}, what + "_zero_point_column");
  return binary(ctx, x, zp, "sub", what + "_centered");
}

Tensor* int32_matmul(NodeContext& ctx, int a, int a_zp, int b, int b_zp, const std::string& suffix) {
  Tensor* am = centered_int32(ctx, a, a_zp, ctx.has_input(a_zp) && is_vector(ctx, a_zp), "a");
  Tensor* bm = centered_int32(ctx, b, b_zp, false, "b");
  Attributes at;
  at.set("transpose_a", int64_t{0});
  at.set("transpose_b", int64_t{0});
  return ctx.add_layer(kLayerMatrixMultiply, {am, bm}, 1, std::move(at), suffix)->output(0);
}

void import_matmul_integer(NodeContext& ctx) { ctx.set_output(0, int32_matmul(ctx, 0, 2, 1, 3, "")); }
KILN_REGISTER_ONNX_IMPORTER("MatMulInteger", import_matmul_integer, {.min_opset = 10, .types = "int8, uint8"});

// float32(acc) * multiplier, requantized with scale 1 and zero point y_zp (ONNX Runtime's
// MlasRequantizeOutput: round half to even, saturate).
Tensor* requantize(NodeContext& ctx, Tensor* acc_f32, Tensor* multiplier, int y_zp) {
  Tensor* scaled = binary(ctx, acc_f32, multiplier, "prod", "scaled");
  Tensor* one = ctx.add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{1.0f}), "one");
  std::vector<Tensor*> inputs{scaled, one};
  Attributes a;
  a.set("axis", int64_t{1});
  a.set("block_size", int64_t{0});
  if (ctx.has_input(y_zp)) {
    Tensor* zp = ctx.input(y_zp);
    // A one-element zero point of any rank becomes a scalar, the dims of the scale `one`.
    Attributes sq;
    sq.set("reshape_mode", std::string("squeeze"));
    inputs.push_back(ctx.add_layer(kLayerShuffle, {zp}, 1, std::move(sq), "y_zero_point_scalar")->output(0));
  }
  return ctx.add_layer(kLayerQuantize, inputs, 1, std::move(a))->output(0);
}

Tensor* f32_input(NodeContext& ctx, int i, const std::string& what) {
  return cast(ctx, ctx.required_input(i, what), DataType::kFloat32, what + "_f32");
}

void import_qlinear_matmul(NodeContext& ctx) {
  Tensor* acc = int32_matmul(ctx, 0, 2, 3, 5, "acc");
  Tensor* a_scale = f32_input(ctx, 1, "a_scale");
  if (is_vector(ctx, 1)) a_scale = reshape(ctx, a_scale, {-1, 1}, "a_scale_column");
  Tensor* multiplier = binary(ctx, binary(ctx, a_scale, f32_input(ctx, 4, "b_scale"), "prod", "ab_scale"),
                              f32_input(ctx, 6, "y_scale"), "div", "multiplier");
  ctx.set_output(0, requantize(ctx, cast(ctx, acc, DataType::kFloat32, "acc_f32"), multiplier, 7));
}
KILN_REGISTER_ONNX_IMPORTER("QLinearMatMul", import_qlinear_matmul,
                            {.min_opset = 10, .types = "int8, uint8 (scales float32/float16/float64)"});

// ---- integer convolution ----------------------------------------------------------------------

// Conv attributes as in ops_conv.cpp (kernel_shape from the attribute or the weights' dims).
Attributes conv_attrs(NodeContext& ctx, int w_index, size_t* spatial) {
  std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.empty()) {
    const auto wd = ctx.input_dims(w_index);
    if (!wd || wd->rank() < 3) ctx.fail("kernel_shape is absent and the weights' dims are not recorded");
    for (int i = 2; i < wd->rank(); ++i) {
      if ((*wd)[i] == kDynamic) ctx.fail("kernel_shape is absent and the weights have unknown dims");
      kernel.push_back((*wd)[i]);
    }
  }
  if (kernel.empty() || kernel.size() > 3) {
    ctx.unsupported(std::to_string(kernel.size()) + "-D " + ctx.op_type() + " (kiln supports 1-D to 3-D)");
  }
  const size_t k = kernel.size();
  auto per_dim = [&](const char* name, int64_t def) {
    std::vector<int64_t> v = ctx.attr_ints(name);
    if (v.empty()) return std::vector<int64_t>(k, def);
    if (v.size() != k) ctx.fail(std::string("attribute '") + name + "' must have " + std::to_string(k) + " values");
    return v;
  };
  const auto strides = per_dim("strides", 1);
  const auto dilations = per_dim("dilations", 1);
  std::vector<int64_t> eff(k);
  for (size_t i = 0; i < k; ++i) eff[i] = (kernel[i] - 1) * dilations[i] + 1;
  std::vector<int64_t> pads = resolve_auto_pad(ctx, eff, strides);
  if (pads.empty()) pads.assign(2 * k, 0);
  Attributes a;
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("group", ctx.attr_int("group", 1));
  *spatial = k;
  return a;
}

// float64 (x - zp); a per-channel zero point (weights) becomes [M, 1, ..., 1].
Tensor* centered_f64(NodeContext& ctx, int x_index, int zp_index, size_t per_channel_ones, const std::string& what) {
  Tensor* x = cast(ctx, ctx.required_input(x_index, what), DataType::kFloat64, what + "_f64");
  if (!ctx.has_input(zp_index)) return x;
  Tensor* zp = cast(ctx, ctx.input(zp_index), DataType::kFloat64, what + "_zero_point_f64");
  if (per_channel_ones) {
    std::vector<int64_t> dims(per_channel_ones + 1, 1);
    dims[0] = -1;
    zp = reshape(ctx, zp, dims, what + "_zero_point_channel");
  }
  return binary(ctx, x, zp, "sub", what + "_centered");
}

// The exact integer convolution as float64 values (see the file comment); bias optional.
Tensor* f64_conv(NodeContext& ctx, int x, int x_zp, int w, int w_zp, int bias, size_t* spatial) {
  Attributes a = conv_attrs(ctx, w, spatial);
  std::vector<Tensor*> inputs{centered_f64(ctx, x, x_zp, 0, "x"), centered_f64(ctx, w, w_zp, *spatial + 1, "w")};
  if (bias >= 0 && ctx.has_input(bias)) inputs.push_back(cast(ctx, ctx.input(bias), DataType::kFloat64, "bias_f64"));
  return ctx.add_layer(kLayerConvolution, inputs, 1, std::move(a), "acc")->output(0);
}

void import_conv_integer(NodeContext& ctx) {
  size_t spatial = 0;
  Tensor* acc = f64_conv(ctx, 0, 2, 1, 3, -1, &spatial);
  ctx.set_output(0, cast(ctx, acc, DataType::kInt32, ""));
}
KILN_REGISTER_ONNX_IMPORTER("ConvInteger", import_conv_integer,
                            {.min_opset = 10, .types = "int8, uint8", .notes = "1-D to 3-D"});

void import_qlinear_conv(NodeContext& ctx) {
  size_t spatial = 0;
  Tensor* acc = f64_conv(ctx, 0, 2, 3, 5, 8, &spatial);
  std::vector<int64_t> channel_dims(spatial + 1, 1);
  channel_dims[0] = -1;
  Tensor* w_scale = reshape(ctx, f32_input(ctx, 4, "w_scale"), channel_dims, "w_scale_channel");
  Tensor* multiplier = binary(ctx, binary(ctx, f32_input(ctx, 1, "x_scale"), w_scale, "prod", "xw_scale"),
                              f32_input(ctx, 6, "y_scale"), "div", "multiplier");
  ctx.set_output(0, requantize(ctx, cast(ctx, acc, DataType::kFloat32, "acc_f32"), multiplier, 7));
}
KILN_REGISTER_ONNX_IMPORTER("QLinearConv", import_qlinear_conv,
                            {.min_opset = 10, .types = "int8, uint8; int32 bias", .notes = "1-D to 3-D"});

}  // namespace
}  // namespace kiln
