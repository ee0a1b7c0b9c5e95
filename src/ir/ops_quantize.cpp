// Schemas and shape inference of the linear quantization layers, Quantize and Dequantize (ONNX
// QuantizeLinear / DequantizeLinear, opsets 10-21). Both take a scale and an optional zero
// point that are per tensor (one element), per axis (1-D, one value per index of `axis`) or
// blocked (opset 21: the rank of x, with ceil(extent / block_size) along `axis`). The quantized
// side is int8 or uint8 (Dequantize also reads int32 without zero point); the other types of
// ONNX (int16, int4, float8) are not kiln data types and fail here with a clear message.
// The ONNX importer composes the integer ops (MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv, DynamicQuantizeLinear) from these and the math layers (src/onnx/ops_quantize.cpp).
#include <string>
#include <vector>

#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/quantize_params.h"
#include "src/core/text.h"

namespace kiln {
namespace {

bool is_quantized_type(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }

// Checks that input `i` (scale or zero point) fits x per tensor, per axis or in blocks.
void check_quant_param(const ShapeContext& ctx, int i, const char* what, const Dims& x) {
  const Dims& p = ctx.input_dims(i);
  const QuantizeParams& params = params_of<QuantizeParams>(ctx.layer());
  const int64_t block = params.block_size;  // >= 0: checked there
  const bool one = p.rank() <= 1 && p.volume() == 1;
  if (block == 0) {
    if (one) return;
    ctx.check(x.rank() >= 1, std::string(what) + " " + p.to_string() + " must have one element for a scalar input");
    const int64_t axis = normalize_axis(ctx, params.axis, x.rank());
    ctx.check(p.rank() == 1 && p[0] == x[static_cast<int>(axis)],
              std::string(what) + " has dims " + p.to_string() + "; it must have one element (per tensor) or " +
                  std::to_string(x[static_cast<int>(axis)]) + " (per axis " + std::to_string(axis) + " of input " +
                  x.to_string() + ")");
    return;
  }
  const int64_t axis = normalize_axis(ctx, params.axis, x.rank());
  Dims expected = x;
  expected[static_cast<int>(axis)] = static_cast<int64_t>((__int128{x[static_cast<int>(axis)]} + block - 1) / block);
  ctx.check(p == expected, std::string(what) + " has dims " + p.to_string() +
                               "; blocked quantization with block_size " + std::to_string(block) + " along axis " +
                               std::to_string(axis) + " of " + x.to_string() + " needs " + expected.to_string());
}

void check_params(const ShapeContext& ctx, const Dims& x) {
  check_quant_param(ctx, 1, "scale", x);
  ctx.check(is_floating_point(ctx.input_type(1)),
            std::string("scale must be a floating-point tensor, got ") + to_string(ctx.input_type(1)));
  if (ctx.has_input(2)) {
    check_quant_param(ctx, 2, "zero point", x);
    ctx.check(ctx.input_dims(2) == ctx.input_dims(1), "zero point " + ctx.input_dims(2).to_string() +
                                                          " must have the dims of scale " +
                                                          ctx.input_dims(1).to_string());
  }
}

void infer_quantize(ShapeContext& ctx) {
  const DataType xt = ctx.input_type(0);
  ctx.check(is_floating_point(xt), std::string("input must be floating-point, got ") + to_string(xt));
  check_params(ctx, ctx.input_dims(0));
  DataType out = params_of<QuantizeParams>(ctx.layer()).output_type;
  if (ctx.has_input(2)) out = ctx.input_type(2);
  ctx.check(is_quantized_type(out), std::string("the quantized type must be int8 or uint8, got ") + to_string(out) +
                                        " (kiln has no int16/int4/float8 types)");
  ctx.set_output(0, out, ctx.input_dims(0));
}

void infer_dequantize(ShapeContext& ctx) {
  const DataType xt = ctx.input_type(0);
  ctx.check(is_quantized_type(xt) || xt == DataType::kInt32, std::string("input must be int8, uint8 or int32, got ") +
                                                                 to_string(xt) +
                                                                 " (kiln has no int16/int4/float8 types)");
  check_params(ctx, ctx.input_dims(0));
  if (ctx.has_input(2)) {
    ctx.check(ctx.input_type(2) == xt, std::string("zero point has type ") + to_string(ctx.input_type(2)) +
                                           " but the input has " + to_string(xt));
  }
  ctx.set_output(0, ctx.input_type(1), ctx.input_dims(0));
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerQuantize,
    2,
    3,
    1,
    {{"axis", A::kInt, int64_t{1}, false, "axis of per-axis / blocked parameters"},
     {"block_size", A::kInt, int64_t{0}, false, "block size along axis (0: not blocked)"},
     {"output_type", A::kString, std::string("uint8"), false, "int8 or uint8, used when the zero point is absent"}},
    {},
    infer_quantize,
    "ONNX QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point) in int8 or "
    "uint8 (the zero point's type, else `output_type`); scale and zero point per tensor, per "
    "axis or blocked."}
                     .with_params<QuantizeParams>());

KILN_REGISTER_OP(OpSchema{kLayerDequantize,
                          2,
                          3,
                          1,
                          {{"axis", A::kInt, int64_t{1}, false, "axis of per-axis / blocked parameters"},
                           {"block_size", A::kInt, int64_t{0}, false, "block size along axis (0: not blocked)"}},
                          {},
                          infer_dequantize,
                          "ONNX DequantizeLinear: y = (x - zero_point) * scale in the scale's type; x int8, uint8 "
                          "or int32; scale and zero point per tensor, per axis or blocked."}
                     .with_params<QuantizeParams>());

}  // namespace kiln
