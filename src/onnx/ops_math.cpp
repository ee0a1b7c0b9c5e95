// ONNX importers of element-wise math: binary ops (arithmetic, comparisons, logic), variadic
// Sum/Max/Min/Mean (chains of binary layers), unary ops, Where, MatMul and Gemm. The ONNX op
// -> kiln op name mappings are tables; every op is registered by name below its table.
#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

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
    {"Add", "sum"},        {"Sub", "sub"},         {"Mul", "prod"},           {"Div", "div"},
    {"Pow", "pow"},        {"Mod", "mod"},         {"Equal", "equal"},        {"Less", "less"},
    {"Greater", "greater"}, {"LessOrEqual", "less_or_equal"}, {"GreaterOrEqual", "greater_or_equal"},
    {"And", "and"},        {"Or", "or"},           {"Xor", "xor"},
};

const char* lookup(const OpName* table, size_t n, const std::string& op_type) {
  for (size_t i = 0; i < n; ++i) {
    if (op_type == table[i].op_type) return table[i].kiln_op;
  }
  return nullptr;
}

void import_binary(NodeContext& ctx) {
  const char* op = lookup(kBinaryOps, std::size(kBinaryOps), ctx.op_type());
  if (!op) ctx.fail("no binary table entry (kiln bug)");
  // Before opset 7, broadcasting needed broadcast=1 and could align at `axis`; only the
  // numpy-compatible spelling (trailing alignment) is supported.
  if (ctx.opset() < 7 && ctx.has_attr("axis")) ctx.unsupported("legacy broadcast with 'axis' (opset < 7)");
  Attributes a = op_attrs(op);
  if (ctx.op_type() == "Mod") a.set("fmod", ctx.attr_int("fmod", 0));
  Tensor* lhs = ctx.required_input(0, "A");
  Tensor* rhs = ctx.required_input(1, "B");
  ctx.set_output(0, ctx.add_layer(kLayerElementWise, {lhs, rhs}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Add", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Sub", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Mul", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Div", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Pow", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Mod", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Equal", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Less", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Greater", import_binary);
KILN_REGISTER_ONNX_IMPORTER("LessOrEqual", import_binary);
KILN_REGISTER_ONNX_IMPORTER("GreaterOrEqual", import_binary);
KILN_REGISTER_ONNX_IMPORTER("And", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Or", import_binary);
KILN_REGISTER_ONNX_IMPORTER("Xor", import_binary);

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
    acc = ctx.add_layer(kLayerElementWise, {acc, next}, 1, op_attrs(op), last ? "" : "acc" + std::to_string(i))->output(0);
  }
  if (mean) {
    Attributes a;
    a.set("mode", std::string("uniform"));
    Tensor* scale = ctx.add_float_constant({1.0f / static_cast<float>(n)}, "inv_count");
    acc = ctx.add_layer(kLayerScale, {acc, scale}, 1, std::move(a))->output(0);
  }
  ctx.set_output(0, acc);
}
KILN_REGISTER_ONNX_IMPORTER("Sum", import_variadic);
KILN_REGISTER_ONNX_IMPORTER("Max", import_variadic);
KILN_REGISTER_ONNX_IMPORTER("Min", import_variadic);
KILN_REGISTER_ONNX_IMPORTER("Mean", import_variadic);

// ---- unary -------------------------------------------------------------------------------------

constexpr OpName kUnaryOps[] = {
    {"Sqrt", "sqrt"}, {"Exp", "exp"},     {"Log", "log"},     {"Abs", "abs"},     {"Neg", "neg"},
    {"Reciprocal", "recip"}, {"Floor", "floor"}, {"Ceil", "ceil"}, {"Round", "round"}, {"Sin", "sin"},
    {"Cos", "cos"},   {"Tan", "tan"},     {"Asin", "asin"},   {"Acos", "acos"},   {"Atan", "atan"},
    {"Sinh", "sinh"}, {"Cosh", "cosh"},   {"Asinh", "asinh"}, {"Acosh", "acosh"}, {"Atanh", "atanh"},
    {"Erf", "erf"},   {"Not", "not"},     {"Sign", "sign"},   {"IsNaN", "isnan"}, {"IsInf", "isinf"},
};

void import_unary(NodeContext& ctx) {
  const char* op = lookup(kUnaryOps, std::size(kUnaryOps), ctx.op_type());
  if (!op) ctx.fail("no unary table entry (kiln bug)");
  if (ctx.op_type() == "IsInf" && (ctx.attr_int("detect_negative", 1) != 1 || ctx.attr_int("detect_positive", 1) != 1)) {
    ctx.unsupported("IsInf detecting only one sign");
  }
  Tensor* x = ctx.required_input(0, "X");
  ctx.set_output(0, ctx.add_layer(kLayerUnary, {x}, 1, op_attrs(op))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Sqrt", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Exp", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Log", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Abs", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Neg", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Reciprocal", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Floor", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Ceil", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Round", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Sin", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Cos", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Tan", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Asin", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Acos", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Atan", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Sinh", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Cosh", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Asinh", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Acosh", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Atanh", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Erf", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Not", import_unary);
KILN_REGISTER_ONNX_IMPORTER("Sign", import_unary);
KILN_REGISTER_ONNX_IMPORTER("IsNaN", import_unary);
KILN_REGISTER_ONNX_IMPORTER("IsInf", import_unary);

// ---- Where, MatMul, Gemm -------------------------------------------------------------------------

void import_where(NodeContext& ctx) {
  Tensor* cond = ctx.required_input(0, "condition");
  Tensor* a = ctx.required_input(1, "X");
  Tensor* b = ctx.required_input(2, "Y");
  ctx.set_output(0, ctx.add_layer(kLayerSelect, {cond, a, b}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Where", import_where);

void import_matmul(NodeContext& ctx) {
  Tensor* a = ctx.required_input(0, "A");
  Tensor* b = ctx.required_input(1, "B");
  Attributes at;
  at.set("transpose_a", int64_t{0});
  at.set("transpose_b", int64_t{0});
  ctx.set_output(0, ctx.add_layer(kLayerMatrixMultiply, {a, b}, 1, std::move(at))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("MatMul", import_matmul);

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
KILN_REGISTER_ONNX_IMPORTER("Gemm", import_gemm);

}  // namespace
}  // namespace kiln
