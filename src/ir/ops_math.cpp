// Schemas and shape/type inference of the math layers: Activation, ParametricReLU, Scale,
// ElementWise, Unary, Select, Cast, Identity, SoftMax, Reduce, MatrixMultiply and Gemm. The
// attribute tables and semantics follow docs/layers.md exactly; every inference failure names
// the layer (through ShapeContext::fail) and says what is wrong with which input.
#include <algorithm>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"
#include "src/core/text.h"

namespace kiln {
namespace {

std::string describe(const ShapeContext& ctx, int i) {
  return "input " + std::to_string(i) + " (" + std::string(to_string(ctx.input_type(i))) + " " +
         ctx.input_dims(i).to_string() + ")";
}

void require_floating(const ShapeContext& ctx, int i) {
  ctx.check(is_floating_point(ctx.input_type(i)),
            describe(ctx, i) + " must be floating-point; insert a Cast to float32 first");
}

void require_same_type(const ShapeContext& ctx, int i, int j) {
  ctx.check(ctx.input_type(i) == ctx.input_type(j),
            describe(ctx, i) + " and " + describe(ctx, j) + " must have the same data type; insert a Cast");
}

// Runs a parse_* function on an attribute, turning its error into a layer-named failure.
template <typename Fn>
auto parse_attr(const ShapeContext& ctx, const std::string& attr, Fn parse) {
  const std::string value = attr_string(ctx.layer(), attr);
  try {
    return parse(value);
  } catch (const Error& e) {
    ctx.fail("attribute " + quote(attr) + ": " + e.what());
  }
}

// True when `small` broadcasts to exactly `target` (unidirectional broadcasting).
bool broadcasts_to(const Dims& small, const Dims& target) {
  if (small.rank() > target.rank()) return false;
  for (int i = 0; i < small.rank(); ++i) {
    const int64_t s = small[i], t = target[target.rank() - small.rank() + i];
    if (s != 1 && s != t) return false;
  }
  return true;
}

void infer_same_as_input(ShapeContext& ctx) { ctx.set_output(0, ctx.input_type(0), ctx.input_dims(0)); }

// ---- Activation, ParametricReLU, Scale ------------------------------------------------------

void infer_activation(ShapeContext& ctx) {
  (void)params_of<ActivationParams>(ctx.layer());  // kind checked there
  require_floating(ctx, 0);
  infer_same_as_input(ctx);
}

void infer_parametric_relu(ShapeContext& ctx) {
  require_floating(ctx, 0);
  require_same_type(ctx, 0, 1);
  ctx.check(broadcasts_to(ctx.input_dims(1), ctx.input_dims(0)),
            "slope " + describe(ctx, 1) + " must broadcast to x " + ctx.input_dims(0).to_string());
  infer_same_as_input(ctx);
}

void infer_scale(ShapeContext& ctx) {
  require_floating(ctx, 0);
  const ScaleParams& p = params_of<ScaleParams>(ctx.layer());  // mode checked there
  const ScaleMode mode = p.mode;
  const Dims& x = ctx.input_dims(0);
  int64_t channels = 0;
  if (mode == ScaleMode::kChannel) {
    const int64_t axis = normalize_axis(ctx, p.channel_axis, x.rank());
    channels = x[static_cast<int>(axis)];
  }
  static const char* const kTerms[] = {"", "scale", "shift", "power"};
  for (int i = 1; i < 4; ++i) {
    if (!ctx.has_input(i)) continue;
    require_same_type(ctx, 0, i);
    const Dims& t = ctx.input_dims(i);
    const std::string what = std::string(kTerms[i]) + " " + describe(ctx, i);
    if (mode == ScaleMode::kUniform) {
      ctx.check(t.volume() == 1, what + " must hold one value in mode 'uniform'");
    } else if (mode == ScaleMode::kChannel) {
      ctx.check(t.volume() == channels,
                what + " must hold " + std::to_string(channels) + " values (one per channel) in mode 'channel'");
    } else {
      ctx.check(
          broadcasts_to(t, x) || t.volume() == x.volume(),
          what + " must broadcast to (or have as many elements as) x " + x.to_string() + " in mode 'elementwise'");
    }
  }
  infer_same_as_input(ctx);
}

// ---- ElementWise, Unary, Select, Cast, Identity ---------------------------------------------

bool elementwise_outputs_bool(ElementWiseOp op) {
  switch (op) {
    case ElementWiseOp::kEqual:
    case ElementWiseOp::kLess:
    case ElementWiseOp::kGreater:
    case ElementWiseOp::kLessOrEqual:
    case ElementWiseOp::kGreaterOrEqual:
    case ElementWiseOp::kAnd:
    case ElementWiseOp::kOr:
    case ElementWiseOp::kXor:
      return true;
    default:
      return false;
  }
}

void infer_elementwise(ShapeContext& ctx) {
  const ElementWiseOp op = params_of<ElementWiseParams>(ctx.layer()).op;
  // pow's exponent may have another numeric type (ONNX Pow-12+); the output has the base's type.
  if (op == ElementWiseOp::kPow && ctx.input_type(0) != ctx.input_type(1)) {
    ctx.check(ctx.input_type(0) != DataType::kBool && ctx.input_type(1) != DataType::kBool,
              "pow of " + describe(ctx, 0) + " and " + describe(ctx, 1) + ": bool operands need a Cast first");
  } else {
    require_same_type(ctx, 0, 1);
  }
  const Dims out = broadcast_dims(ctx, ctx.input_dims(0), ctx.input_dims(1));
  ctx.set_output(0, elementwise_outputs_bool(op) ? DataType::kBool : ctx.input_type(0), out);
}

void infer_unary(ShapeContext& ctx) {
  const UnaryOp op = params_of<UnaryParams>(ctx.layer()).op;
  switch (op) {
    case UnaryOp::kNot:
    case UnaryOp::kIsNaN:
    case UnaryOp::kIsInf:
      ctx.set_output(0, DataType::kBool, ctx.input_dims(0));
      return;
    // Exact on integers too (floor/ceil/round are the identity there).
    case UnaryOp::kAbs:
    case UnaryOp::kNeg:
    case UnaryOp::kSign:
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
    case UnaryOp::kRound:
      break;
    default:
      ctx.check(is_floating_point(ctx.input_type(0)), std::string("op '") + to_string(op) + "' needs a " +
                                                          "floating-point input, got " + describe(ctx, 0) +
                                                          "; insert a Cast to float32 first");
  }
  infer_same_as_input(ctx);
}

void infer_select(ShapeContext& ctx) {
  ctx.check(ctx.input_type(0) == DataType::kBool, "condition " + describe(ctx, 0) + " must be bool");
  require_same_type(ctx, 1, 2);
  const Dims ab = broadcast_dims(ctx, ctx.input_dims(1), ctx.input_dims(2));
  ctx.set_output(0, ctx.input_type(1), broadcast_dims(ctx, ctx.input_dims(0), ab));
}

void infer_cast(ShapeContext& ctx) { ctx.set_output(0, params_of<CastParams>(ctx.layer()).to, ctx.input_dims(0)); }

// ---- SoftMax, Reduce --------------------------------------------------------------------------

void infer_softmax(ShapeContext& ctx) {
  require_floating(ctx, 0);
  normalize_axis(ctx, params_of<SoftMaxParams>(ctx.layer()).axis, ctx.input_dims(0).rank());
  infer_same_as_input(ctx);
}

void infer_reduce(ShapeContext& ctx) {
  const ReduceParams& p = params_of<ReduceParams>(ctx.layer());
  const Dims& x = ctx.input_dims(0);
  ctx.check(ctx.input_type(0) != DataType::kBool, "cannot reduce a bool tensor; Cast it first");
  Dims out;
  try {
    out = reduce_output_dims(p, x);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

// ---- MatrixMultiply, Gemm ---------------------------------------------------------------------

void infer_matrix_multiply(ShapeContext& ctx) {
  require_same_type(ctx, 0, 1);
  const Dims& a = ctx.input_dims(0);
  const Dims& b = ctx.input_dims(1);
  ctx.check(a.rank() >= 1 && b.rank() >= 1,
            "operands must have rank >= 1, got " + describe(ctx, 0) + " and " + describe(ctx, 1));
  const MatMulParams& mp = params_of<MatMulParams>(ctx.layer());
  const bool ta = mp.transpose_a && a.rank() >= 2;
  const bool tb = mp.transpose_b && b.rank() >= 2;
  // A 1-D a is a row vector [1,K] and a 1-D b a column vector [K,1]; the 1 is squeezed after.
  const int64_t m = a.rank() == 1 ? 1 : (ta ? a[a.rank() - 1] : a[a.rank() - 2]);
  const int64_t ka = a.rank() == 1 ? a[0] : (ta ? a[a.rank() - 2] : a[a.rank() - 1]);
  const int64_t kb = b.rank() == 1 ? b[0] : (tb ? b[b.rank() - 1] : b[b.rank() - 2]);
  const int64_t n = b.rank() == 1 ? 1 : (tb ? b[b.rank() - 2] : b[b.rank() - 1]);
  ctx.check(ka == kb, "inner dimensions differ: a " + a.to_string() + (ta ? " (transposed)" : "") +
                          " has K=" + std::to_string(ka) + ", b " + b.to_string() + (tb ? " (transposed)" : "") +
                          " has K=" + std::to_string(kb));
  Dims batch_a, batch_b;
  for (int i = 0; i + 2 < a.rank(); ++i) batch_a.push_back(a[i]);
  for (int i = 0; i + 2 < b.rank(); ++i) batch_b.push_back(b[i]);
  Dims out = broadcast_dims(ctx, batch_a, batch_b);
  if (a.rank() >= 2) out.push_back(m);
  if (b.rank() >= 2) out.push_back(n);
  // The bias the CPU builder fuses in (activation_fusion): [N], added to every row.
  if (ctx.has_input(2)) {
    require_same_type(ctx, 0, 2);
    const Dims& bias = ctx.input_dims(2);
    ctx.check(bias.rank() == 1 && b.rank() >= 2 && (bias[0] == n || bias[0] < 0 || n < 0),
              "bias " + describe(ctx, 2) + " must be 1-D with the product's " + std::to_string(n) + " columns");
  }
  // The residual the CPU builder fuses in (activation_fusion): the output's dims, added before
  // the activation.
  if (ctx.has_input(3)) {
    require_same_type(ctx, 0, 3);
    const Dims& r = ctx.input_dims(3);
    bool same = r.rank() == out.rank();
    for (int i = 0; same && i < r.rank(); ++i) same = r[i] == out[i] || r[i] < 0 || out[i] < 0;
    ctx.check(same, "residual " + describe(ctx, 3) + " must have the product's dims " + out.to_string());
  }
  if (!attr_string(ctx.layer(), "activation").empty()) parse_attr(ctx, "activation", parse_activation_type);
  ctx.set_output(0, ctx.input_type(0), out);
}

void infer_gemm(ShapeContext& ctx) {
  require_floating(ctx, 0);
  require_same_type(ctx, 0, 1);
  const Dims& a = ctx.input_dims(0);
  const Dims& b = ctx.input_dims(1);
  ctx.check(a.rank() == 2 && b.rank() == 2, "a and b must be 2-D, got " + describe(ctx, 0) + " and " +
                                                describe(ctx, 1) + "; use MatrixMultiply for other ranks");
  const bool ta = params_of<GemmParams>(ctx.layer()).trans_a;
  const bool tb = params_of<GemmParams>(ctx.layer()).trans_b;
  const int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  ctx.check(ka == kb, "inner dimensions differ: A' is " + std::to_string(m) + "x" + std::to_string(ka) + " and B' is " +
                          std::to_string(kb) + "x" + std::to_string(n) + " (check trans_a/trans_b)");
  const Dims out{m, n};
  if (ctx.has_input(2)) {
    require_same_type(ctx, 0, 2);
    ctx.check(broadcasts_to(ctx.input_dims(2), out),
              "c " + describe(ctx, 2) + " must broadcast to the output " + out.to_string());
  }
  if (!attr_string(ctx.layer(), "activation").empty()) parse_attr(ctx, "activation", parse_activation_type);
  ctx.set_output(0, ctx.input_type(0), out);
}

AttrSpec attr(std::string name, AttrType type, AttrValue def, std::string doc, bool required = false) {
  return AttrSpec{std::move(name), type, std::move(def), required, std::move(doc)};
}

std::vector<AttrSpec> post_op_attrs() {
  return {attr("activation", AttrType::kString, std::string(), "fused activation kind applied last (\"\": none)"),
          attr("activation_alpha", AttrType::kFloat, 0.0, "alpha of the fused activation"),
          attr("activation_beta", AttrType::kFloat, 0.0, "beta of the fused activation")};
}

std::vector<AttrSpec> concat(std::vector<AttrSpec> a, const std::vector<AttrSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Residual additions join the float32 stream the fp16 pass keeps for accuracy (OpTraits).
AccuracyRole elementwise_accuracy_role(const Layer& layer) {
  return params_of<ElementWiseParams>(layer).op == ElementWiseOp::kSum ? AccuracyRole::kStream : AccuracyRole::kNone;
}

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerActivation,
                          1,
                          1,
                          1,
                          {attr("kind", AttrType::kString, std::string(), "activation kind (docs/layers.md)", true),
                           attr("alpha", AttrType::kFloat, 0.0, "first parameter of the kind"),
                           attr("beta", AttrType::kFloat, 0.0, "second parameter of the kind")},
                          {},
                          infer_activation,
                          "Element-wise activation function of the given kind."}
                     .with_params<ActivationParams>()
                     .with_traits({.channels_last = true, .elementwise_fusible = true}));

KILN_REGISTER_OP(OpSchema{kLayerParametricReLU,
                          2,
                          2,
                          1,
                          {},
                          {},
                          infer_parametric_relu,
                          "y = x >= 0 ? x : slope * x, with slope broadcast to x."}
                     .with_traits({.channels_last = true}));

KILN_REGISTER_OP(OpSchema{kLayerScale,
                          1,
                          4,
                          1,
                          {attr("mode", AttrType::kString, std::string("uniform"),
                                "how scale/shift/power map to x: uniform, channel or elementwise"),
                           attr("channel_axis", AttrType::kInt, int64_t{1}, "the channel axis of mode 'channel'")},
                          {},
                          infer_scale,
                          "y = (x * scale + shift) ^ power; omitted terms are the identity (1, 0, 1)."}
                     .with_params<ScaleParams>()
                     .with_traits({.channels_last = true, .elementwise_fusible = true}));

KILN_REGISTER_OP(OpSchema{
    kLayerElementWise,
    2,
    2,
    1,
    {attr("op", AttrType::kString, std::string(), "binary op (docs/layers.md)", true),
     attr("fmod", AttrType::kInt, int64_t{0}, "mod only: 1 = sign of the dividend (C fmod), 0 = sign of the divisor")},
    {},
    infer_elementwise,
    "Binary op with numpy broadcasting; comparisons and logic ops output bool."}
                     .with_params<ElementWiseParams>()
                     .with_traits({.channels_last = true,
                                   .elementwise_fusible = true,
                                   .accuracy_role = elementwise_accuracy_role}));

KILN_REGISTER_OP(OpSchema{kLayerUnary,
                          1,
                          1,
                          1,
                          {attr("op", AttrType::kString, std::string(), "unary op (docs/layers.md)", true)},
                          {},
                          infer_unary,
                          "Element-wise unary op; not, isnan and isinf output bool."}
                     .with_params<UnaryParams>()
                     .with_traits({.elementwise_fusible = true}));

KILN_REGISTER_OP(OpSchema{kLayerSelect,
                          3,
                          3,
                          1,
                          {},
                          {},
                          infer_select,
                          "where(condition, a, b) with numpy broadcasting of all three inputs."});

KILN_REGISTER_OP(OpSchema{kLayerCast,
                          1,
                          1,
                          1,
                          {attr("to", AttrType::kString, std::string(), "target data type name", true)},
                          {},
                          infer_cast,
                          "Element-wise conversion; float->int truncates toward zero, ->bool is != 0; to and from "
                          "string: shortest round-trip decimal text, and parsing (docs/layers.md).",
                          /*takes_strings=*/true}
                     .with_params<CastParams>()
                     .with_traits({.channels_last = true}));

KILN_REGISTER_OP(OpSchema{kLayerIdentity,
                          1,
                          1,
                          1,
                          {},
                          {},
                          infer_same_as_input,
                          "Copies its input.",
                          /*takes_strings=*/true}
                     .with_traits({.channels_last = true}));

KILN_REGISTER_OP(OpSchema{kLayerSoftMax,
                          1,
                          1,
                          1,
                          {attr("axis", AttrType::kInt, int64_t{-1}, "the axis normalized over"),
                           attr("log", AttrType::kInt, int64_t{0}, "1: log-softmax")},
                          {},
                          infer_softmax,
                          "Softmax (or log-softmax) along one axis."}
                     .with_params<SoftMaxParams>());

KILN_REGISTER_OP(OpSchema{kLayerReduce,
                          1,
                          1,
                          1,
                          {attr("op", AttrType::kString, std::string(), "reduce op (docs/layers.md)", true),
                           attr("axes", AttrType::kInts, std::vector<int64_t>{}, "axes reduced (empty: all)"),
                           attr("keep_dims", AttrType::kInt, int64_t{1}, "1: reduced axes stay as extent 1")},
                          {},
                          infer_reduce,
                          "Reduction over the given axes."}
                     .with_params<ReduceParams>());

KILN_REGISTER_OP(OpSchema{
    kLayerMatrixMultiply,
    2,
    4,
    1,
    concat({attr("transpose_a", AttrType::kInt, int64_t{0}, "swap the last two dims of a first"),
            attr("transpose_b", AttrType::kInt, int64_t{0}, "swap the last two dims of b first"),
            attr("concurrent_streams", AttrType::kInt, int64_t{1},
                 "build hint (BuilderConfig::tune_for_streams): cuBLASLt kernels for SMs / this many")},
           post_op_attrs()),
    {},
    infer_matrix_multiply,
    "numpy matmul: 1-D operands promoted then squeezed, batch dims broadcast; optional bias [N] (input 2) "
    "added to every row, residual of the output's dims (input 3) added, and fused activation applied last "
    "(CPU builds fuse them in)."}
                     .with_params<MatMulParams>());

KILN_REGISTER_OP(OpSchema{
    kLayerGemm,
    2,
    3,
    1,
    concat({attr("alpha", AttrType::kFloat, 1.0, "scales A'B'"), attr("beta", AttrType::kFloat, 1.0, "scales C"),
            attr("trans_a", AttrType::kInt, int64_t{0}, "use A transposed"),
            attr("trans_b", AttrType::kInt, int64_t{0}, "use B transposed"),
            attr("concurrent_streams", AttrType::kInt, int64_t{1},
                 "build hint (BuilderConfig::tune_for_streams): cuBLASLt kernels for SMs / this many")},
           post_op_attrs()),
    {},
    infer_gemm,
    "y = act(alpha * A'B' + beta * C) on 2-D A and B."}
                     .with_params<GemmParams>());

}  // namespace kiln
