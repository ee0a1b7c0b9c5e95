// ONNX importers of element-wise math: binary ops (arithmetic, comparisons, logic), variadic
// Sum/Max/Min/Mean (chains of binary layers), unary ops, Where, MatMul and Gemm. The ONNX op
// -> kiln op name mappings are tables; every op is registered by name below its table.
#include "src/core/half.h"
#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

// Element types for the OnnxImporterInfo of the registrations below (docs/onnx-support.md).
constexpr const char* kFloatTypes = "float32, float16, float64";
constexpr const char* kNumericTypes = "float32, float16, float64, int8, uint8, int32, int64";
constexpr const char* kAllTypes = "every kiln type (float32/16/64, int8, uint8, int32, int64, bool)";
// Ops whose CPU kernel (ElementWise) also takes int16 and uint16/32/64.
constexpr const char* kWideIntTypes = "float32, float16, float64, int8/16/32/64, uint8/16/32/64";

Attributes op_attrs(const std::string& op) {
  Attributes a;
  a.set("op", op);
  return a;
}

// ---- binary ----------------------------------------------------------------------------------

struct OpName {
  const char* op_type;
  const char* kiln_op;
};

constexpr OpName kBinaryOps[] = {
    {"Add", "sum"},
    {"Sub", "sub"},
    {"Mul", "prod"},
    {"Div", "div"},
    {"Pow", "pow"},
    {"Mod", "mod"},
    {"Equal", "equal"},
    {"Less", "less"},
    {"Greater", "greater"},
    {"LessOrEqual", "less_or_equal"},
    {"GreaterOrEqual", "greater_or_equal"},
    {"And", "and"},
    {"Or", "or"},
    {"Xor", "xor"},
};

const char* lookup(const OpName* table, size_t n, const std::string& op_type) {
  for (size_t i = 0; i < n; ++i) {
    if (op_type == table[i].op_type) return table[i].kiln_op;
  }
  return nullptr;
}

// Before opset 7, B broadcast to A with broadcast=1 aligned at A's dim `axis` rather than at the
// trailing dims: B gets size-1 dims appended so that numpy's trailing alignment means the same.
Tensor* legacy_broadcast(NodeContext& ctx, Tensor* rhs) {
  const auto ad = ctx.input_dims(0);
  const auto bd = ctx.input_dims(1);
  if (!ad || !bd) ctx.unsupported("legacy broadcast with 'axis' (opset < 7) on inputs of unrecorded rank");
  int64_t axis = ctx.attr_int("axis", 0);
  if (axis < 0) axis += ad->rank();
  const int64_t trailing = ad->rank() - axis - bd->rank();
  if (axis < 0 || trailing < 0) {
    ctx.fail("axis " + std::to_string(ctx.attr_int("axis", 0)) + " does not place B " + bd->to_string() + " inside A " +
             ad->to_string());
  }
  if (trailing == 0) return rhs;
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < trailing; ++i) axes.push_back(bd->rank() + i);
  Attributes a;
  a.set("reshape_mode", std::string("unsqueeze"));
  a.set("axes", axes);
  return ctx.add_layer(kLayerShuffle, {rhs}, 1, std::move(a), "broadcast")->output(0);
}

void import_binary(NodeContext& ctx) {
  const char* op = lookup(kBinaryOps, std::size(kBinaryOps), ctx.op_type());
  if (!op) ctx.fail("no binary table entry (kiln bug)");
  Attributes a = op_attrs(op);
  if (ctx.op_type() == "Mod") a.set("fmod", ctx.attr_int("fmod", 0));
  Tensor* lhs = ctx.required_input(0, "A");
  Tensor* rhs = ctx.required_input(1, "B");
  if (ctx.opset() < 7 && ctx.attr_int("broadcast", 0) != 0 && ctx.has_attr("axis")) rhs = legacy_broadcast(ctx, rhs);
  ctx.set_output(0, ctx.add_layer(kLayerElementWise, {lhs, rhs}, 1, std::move(a))->output(0));
}
// Before opset 7 these broadcast with broadcast=1 and `axis` (legacy_broadcast above).
constexpr OnnxImporterInfo kArithmeticInfo{
    .min_opset = 1, .types = kNumericTypes, .notes = "opset < 7: broadcast with 'axis' needs both ranks recorded"};
KILN_REGISTER_ONNX_IMPORTER("Add", import_binary, kArithmeticInfo);
KILN_REGISTER_ONNX_IMPORTER("Sub", import_binary, kArithmeticInfo);
KILN_REGISTER_ONNX_IMPORTER("Mul", import_binary, kArithmeticInfo);
KILN_REGISTER_ONNX_IMPORTER("Div", import_binary,
                            {.min_opset = 1,
                             .types = kNumericTypes,
                             .notes = "opset < 7: broadcast with 'axis' needs both ranks recorded; integers truncate"});
KILN_REGISTER_ONNX_IMPORTER(
    "Pow", import_binary,
    {.min_opset = 1, .types = "base float32, float16, float64, int32, int64; exponent of any numeric kiln type"});
KILN_REGISTER_ONNX_IMPORTER("Mod", import_binary, {.min_opset = 10, .types = kWideIntTypes});
KILN_REGISTER_ONNX_IMPORTER("Equal", import_binary, {.min_opset = 1, .types = kAllTypes});
KILN_REGISTER_ONNX_IMPORTER("Less", import_binary, {.min_opset = 1, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("Greater", import_binary, {.min_opset = 1, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("LessOrEqual", import_binary, {.min_opset = 12, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("GreaterOrEqual", import_binary, {.min_opset = 12, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("And", import_binary, {.min_opset = 1, .types = "bool"});
KILN_REGISTER_ONNX_IMPORTER("Or", import_binary, {.min_opset = 1, .types = "bool"});
KILN_REGISTER_ONNX_IMPORTER("Xor", import_binary, {.min_opset = 1, .types = "bool"});

// ---- variadic ----------------------------------------------------------------------------------

constexpr OpName kVariadicOps[] = {{"Sum", "sum"}, {"Max", "max"}, {"Min", "min"}, {"Mean", "sum"}};

// Folds the inputs left to right: ((x0 op x1) op x2) ...; Mean then scales by 1/N.
void import_variadic(NodeContext& ctx) {
  const char* op = lookup(kVariadicOps, std::size(kVariadicOps), ctx.op_type());
  if (!op) ctx.fail("no variadic table entry (kiln bug)");
  const int n = ctx.num_inputs();
  if (n < 1) ctx.fail("needs at least one input");
  const bool mean = ctx.op_type() == "Mean";
  Tensor* acc = ctx.required_input(0, "data_0");
  if (n == 1) {
    ctx.set_output(0, ctx.add_layer(kLayerIdentity, {acc}, 1)->output(0));
    return;
  }
  for (int i = 1; i < n; ++i) {
    const bool last = i == n - 1 && !mean;
    Tensor* next = ctx.required_input(i, "data_" + std::to_string(i));
    acc = ctx.add_layer(kLayerElementWise, {acc, next}, 1, op_attrs(op), last ? "" : "acc" + std::to_string(i))
              ->output(0);
  }
  if (mean) {
    Attributes a;
    a.set("mode", std::string("uniform"));
    // 1/N in the inputs' type when the importer knows it (graph inputs, constants, Cast
    // outputs): Scale takes its parameters in the input's type. Otherwise float32, the usual case.
    std::optional<DataType> type;
    for (int i = 0; i < n && !type; ++i) type = ctx.static_type(i);
    Tensor* scale = nullptr;
    if (type == DataType::kFloat64 || type == DataType::kFloat16) {
      HostTensor inv(*type, Dims{1});
      if (*type == DataType::kFloat64) {
        inv.as<double>()[0] = 1.0 / n;
      } else {
        inv.as<uint16_t>()[0] = float_to_half_bits(1.0f / static_cast<float>(n));
      }
      scale = ctx.add_constant(inv, "inv_count");
    } else {
      scale = ctx.add_float_constant({1.0f / static_cast<float>(n)}, "inv_count");
    }
    acc = ctx.add_layer(kLayerScale, {acc, scale}, 1, std::move(a))->output(0);
  }
  ctx.set_output(0, acc);
}
KILN_REGISTER_ONNX_IMPORTER("Sum", import_variadic, {.min_opset = 1, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("Max", import_variadic, {.min_opset = 1, .types = kWideIntTypes});
KILN_REGISTER_ONNX_IMPORTER("Min", import_variadic, {.min_opset = 1, .types = kWideIntTypes});
KILN_REGISTER_ONNX_IMPORTER("Mean", import_variadic, {.min_opset = 1, .types = kFloatTypes});

// ---- unary -------------------------------------------------------------------------------------

constexpr OpName kUnaryOps[] = {
    {"Sqrt", "sqrt"},        {"Exp", "exp"},     {"Log", "log"},     {"Abs", "abs"},     {"Neg", "neg"},
    {"Reciprocal", "recip"}, {"Floor", "floor"}, {"Ceil", "ceil"},   {"Round", "round"}, {"Sin", "sin"},
    {"Cos", "cos"},          {"Tan", "tan"},     {"Asin", "asin"},   {"Acos", "acos"},   {"Atan", "atan"},
    {"Sinh", "sinh"},        {"Cosh", "cosh"},   {"Asinh", "asinh"}, {"Acosh", "acosh"}, {"Atanh", "atanh"},
    {"Erf", "erf"},          {"Not", "not"},     {"Sign", "sign"},   {"IsNaN", "isnan"}, {"IsInf", "isinf"},
};

// IsInf detecting one sign only: isinf(x) and (x > -x) keeps +inf, (x < -x) keeps -inf; this
// needs no constant of x's (unknown) floating-point type.
void import_is_inf_one_sign(NodeContext& ctx, Tensor* x, Tensor* any_inf, bool positive, bool negative) {
  Tensor* neg = ctx.add_layer(kLayerUnary, {x}, 1, op_attrs("neg"), "neg")->output(0);
  Tensor* sign = nullptr;
  if (positive)
    sign = ctx.add_layer(kLayerElementWise, {x, neg}, 1, op_attrs("greater"), "positive")->output(0);
  else if (negative)
    sign = ctx.add_layer(kLayerElementWise, {x, neg}, 1, op_attrs("less"), "negative")->output(0);
  else
    sign = ctx.add_layer(kLayerUnary, {any_inf}, 1, op_attrs("not"), "none")->output(0);  // detects nothing
  ctx.set_output(0, ctx.add_layer(kLayerElementWise, {any_inf, sign}, 1, op_attrs("and"))->output(0));
}

void import_unary(NodeContext& ctx) {
  const char* op = lookup(kUnaryOps, std::size(kUnaryOps), ctx.op_type());
  if (!op) ctx.fail("no unary table entry (kiln bug)");
  Tensor* x = ctx.required_input(0, "X");
  if (ctx.op_type() == "IsInf") {
    const bool negative = ctx.attr_int("detect_negative", 1) != 0, positive = ctx.attr_int("detect_positive", 1) != 0;
    if (!negative || !positive) {
      Tensor* any_inf = ctx.add_layer(kLayerUnary, {x}, 1, op_attrs(op), "isinf")->output(0);
      import_is_inf_one_sign(ctx, x, any_inf, positive, negative);
      return;
    }
  }
  ctx.set_output(0, ctx.add_layer(kLayerUnary, {x}, 1, op_attrs(op))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Sqrt", import_unary, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Exp", import_unary, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Log", import_unary, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Abs", import_unary, {.min_opset = 1, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("Neg", import_unary, {.min_opset = 1, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("Reciprocal", import_unary, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Floor", import_unary, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Ceil", import_unary, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Round", import_unary, {.min_opset = 11, .types = kFloatTypes, .notes = "half to even"});
KILN_REGISTER_ONNX_IMPORTER("Sin", import_unary, {.min_opset = 7, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Cos", import_unary, {.min_opset = 7, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Tan", import_unary, {.min_opset = 7, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Asin", import_unary, {.min_opset = 7, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Acos", import_unary, {.min_opset = 7, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Atan", import_unary, {.min_opset = 7, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Sinh", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Cosh", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Asinh", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Acosh", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Atanh", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Erf", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Not", import_unary, {.min_opset = 1, .types = "bool"});
KILN_REGISTER_ONNX_IMPORTER("Sign", import_unary, {.min_opset = 9, .types = kNumericTypes});
KILN_REGISTER_ONNX_IMPORTER("IsNaN", import_unary, {.min_opset = 9, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("IsInf", import_unary, {.min_opset = 10, .types = kFloatTypes});

// ---- Where, MatMul, Gemm -------------------------------------------------------------------------

void import_where(NodeContext& ctx) {
  Tensor* cond = ctx.required_input(0, "condition");
  Tensor* a = ctx.required_input(1, "X");
  Tensor* b = ctx.required_input(2, "Y");
  ctx.set_output(0, ctx.add_layer(kLayerSelect, {cond, a, b}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Where", import_where, {.min_opset = 9, .types = kAllTypes});

void import_matmul(NodeContext& ctx) {
  Tensor* a = ctx.required_input(0, "A");
  Tensor* b = ctx.required_input(1, "B");
  Attributes at;
  at.set("transpose_a", int64_t{0});
  at.set("transpose_b", int64_t{0});
  ctx.set_output(0, ctx.add_layer(kLayerMatrixMultiply, {a, b}, 1, std::move(at))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("MatMul", import_matmul, {.min_opset = 1, .types = kNumericTypes});

void import_gemm(NodeContext& ctx) {
  Tensor* a = ctx.required_input(0, "A");
  Tensor* b = ctx.required_input(1, "B");
  Tensor* c = ctx.input(2);
  Attributes at;
  at.set("alpha", ctx.attr_float("alpha", 1.0));
  at.set("beta", ctx.attr_float("beta", 1.0));
  at.set("trans_a", ctx.attr_int("transA", 0));
  at.set("trans_b", ctx.attr_int("transB", 0));
  std::vector<Tensor*> inputs{a, b};
  if (c) inputs.push_back(c);
  ctx.set_output(0, ctx.add_layer(kLayerGemm, inputs, 1, std::move(at))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Gemm", import_gemm, {.min_opset = 1, .types = kFloatTypes});

}  // namespace
}  // namespace kiln
