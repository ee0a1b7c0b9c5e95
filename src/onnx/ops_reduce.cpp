// ONNX importers of normalizing and reducing ops: Softmax / LogSoftmax (with the coerce-to-2D
// semantics of opsets before 13) and the Reduce* family (axes as attribute, or as a constant
// input from opset 13 for ReduceSum and 18 for the others).
#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

// Element types for the OnnxImporterInfo of the registrations below (docs/onnx-support.md).
constexpr const char* kFloatTypes = "float32, float16, float64";
constexpr const char* kNumericTypes = "float32, float16, float64, int8, uint8, int32, int64";

// Before opset 13, softmax(x, axis) treats x as 2-D [prod(dims[:axis]), prod(dims[axis:])] and
// normalizes each row: flatten at axis, softmax over the last dim, reshape back to x's shape.
// When axis is the last dim this is a plain softmax over it.
void import_softmax(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  const int64_t log = ctx.op_type() == "LogSoftmax" ? 1 : 0;
  int64_t axis = ctx.attr_int("axis", ctx.opset() < 13 ? 1 : -1);
  auto softmax_attrs = [&](int64_t ax) {
    Attributes a;
    a.set("axis", ax);
    a.set("log", log);
    return a;
  };
  bool last_axis = ctx.opset() >= 13 || axis == -1;
  if (!last_axis) {
    if (const auto dims = ctx.input_dims(0)) {
      const int rank = dims->rank();
      if (axis < -rank || axis >= std::max(rank, 1))
        ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
      last_axis = (axis < 0 ? axis + rank : axis) == rank - 1;
    }
  }
  if (last_axis) {
    ctx.set_output(0, ctx.add_layer(kLayerSoftMax, {x}, 1, softmax_attrs(ctx.opset() >= 13 ? axis : -1))->output(0));
    return;
  }
  Tensor* shape = ctx.add_layer(kLayerShape, {x}, 1, {}, "shape")->output(0);
  Attributes flatten;
  flatten.set("reshape_mode", std::string("flatten"));
  flatten.set("axis", axis);
  Tensor* flat = ctx.add_layer(kLayerShuffle, {x}, 1, std::move(flatten), "flatten")->output(0);
  Tensor* normalized = ctx.add_layer(kLayerSoftMax, {flat}, 1, softmax_attrs(-1), "softmax")->output(0);
  Attributes back;
  back.set("reshape_mode", std::string("dims"));
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {normalized, shape}, 1, std::move(back))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Softmax", import_softmax, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("LogSoftmax", import_softmax, {.min_opset = 1, .types = kFloatTypes});

struct ReduceSpec {
  const char* op_type;
  const char* kiln_op;
  int64_t axes_input_opset;  // from this opset on, axes are input 1
};

constexpr ReduceSpec kReduceOps[] = {
    {"ReduceMean", "mean", 18},      {"ReduceSum", "sum", 13},
    {"ReduceMax", "max", 18},        {"ReduceMin", "min", 18},
    {"ReduceProd", "prod", 18},      {"ReduceL1", "l1", 18},
    {"ReduceL2", "l2", 18},          {"ReduceSumSquare", "sum_square", 18},
    {"ReduceLogSum", "log_sum", 18}, {"ReduceLogSumExp", "log_sum_exp", 18},
};

// noop_with_empty_axes=1 with no axes reduces nothing, but the op's element-wise part still
// applies (as in ONNX's reference implementation and ONNX Runtime): ReduceSumSquare gives x*x,
// ReduceL1 and ReduceL2 |x|, ReduceLogSum log(x); the others (LogSumExp included) give x.
Tensor* reduce_nothing(NodeContext& ctx, Tensor* x, const std::string& kiln_op) {
  auto with_op = [](const char* op) {
    Attributes a;
    a.set("op", std::string(op));
    return a;
  };
  if (kiln_op == "sum_square") return ctx.add_layer(kLayerElementWise, {x, x}, 1, with_op("prod"))->output(0);
  if (kiln_op == "l1" || kiln_op == "l2") return ctx.add_layer(kLayerUnary, {x}, 1, with_op("abs"))->output(0);
  if (kiln_op == "log_sum") return ctx.add_layer(kLayerUnary, {x}, 1, with_op("log"))->output(0);
  return ctx.add_layer(kLayerIdentity, {x}, 1)->output(0);
}

void import_reduce(NodeContext& ctx) {
  const ReduceSpec* spec = nullptr;
  for (const auto& s : kReduceOps) {
    if (ctx.op_type() == s.op_type) spec = &s;
  }
  if (!spec) ctx.fail("no reduce table entry (kiln bug)");
  Tensor* x = ctx.required_input(0, "data");
  std::vector<int64_t> axes;
  if (ctx.opset() < spec->axes_input_opset) {
    axes = ctx.attr_ints("axes");
  } else if (ctx.has_input(1) && !ctx.is_empty_constant(1)) {
    axes = ctx.constant_input(1, "axes").to_int64();
  }
  if (axes.empty() && ctx.attr_int("noop_with_empty_axes", 0) != 0) {
    ctx.set_output(0, reduce_nothing(ctx, x, spec->kiln_op));
    return;
  }
  Attributes a;
  a.set("op", std::string(spec->kiln_op));
  a.set("axes", axes);
  a.set("keep_dims", ctx.attr_int("keepdims", 1));
  ctx.set_output(0, ctx.add_layer(kLayerReduce, {x}, 1, std::move(a))->output(0));
}
// ReduceSum takes its axes as an input from opset 13, the others from opset 18.
constexpr OnnxImporterInfo kReduceInfo{
    .min_opset = 1, .types = kNumericTypes, .notes = "the axes input (opset 18+) must be a constant"};
constexpr OnnxImporterInfo kReduceSumInfo{
    .min_opset = 1, .types = kNumericTypes, .notes = "the axes input (opset 13+) must be a constant"};
KILN_REGISTER_ONNX_IMPORTER("ReduceMean", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceSum", import_reduce, kReduceSumInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceMax", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceMin", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceProd", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceL1", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceL2", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceSumSquare", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceLogSum", import_reduce, kReduceInfo);
KILN_REGISTER_ONNX_IMPORTER("ReduceLogSumExp", import_reduce, kReduceInfo);

}  // namespace
}  // namespace kiln
