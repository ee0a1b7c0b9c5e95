// ONNX importers of the position-driven ops: ArgMax, ArgMin and Hardmax (ArgReduce), TopK,
// CumSum, Trilu, OneHot, ReverseSequence and MaxUnpool. Tensor-valued parameters stay layer
// inputs: those that decide a shape (OneHot's depth, MaxUnpool's output_shape) must be computable
// when shapes are inferred, the others (CumSum's axis, Trilu's k, TopK's k when not known then)
// are read at run time.
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

void import_arg_reduce(NodeContext& ctx) {
  Attributes a;
  a.set("op", std::string(ctx.op_type() == "ArgMax" ? "max" : "min"));
  a.set("axis", ctx.attr_int("axis", 0));
  a.set("keep_dims", ctx.attr_int("keepdims", 1));
  a.set("select_last_index", ctx.attr_int("select_last_index", 0));
  ctx.set_output(0, ctx.add_layer(kLayerArgReduce, {ctx.required_input(0, "data")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("ArgMax", import_arg_reduce,
                            {.min_opset = 1, .types = "float32, float16, float64, int32, int64, int8, uint8"});
KILN_REGISTER_ONNX_IMPORTER("ArgMin", import_arg_reduce,
                            {.min_opset = 1, .types = "float32, float16, float64, int32, int64, int8, uint8"});

// Hardmax: one-hot of the first maximum. Before opset 13 x is seen as 2-D
// [prod(dims[:axis]), prod(dims[axis:])] (default axis 1): flatten, take the row maxima, restore.
void import_hardmax(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  auto hardmax_attrs = [](int64_t axis) {
    Attributes a;
    a.set("op", std::string("max"));
    a.set("axis", axis);
    a.set("one_hot", int64_t{1});
    return a;
  };
  const int64_t axis = ctx.attr_int("axis", ctx.opset() < 13 ? 1 : -1);
  bool last_axis = ctx.opset() >= 13 || axis == -1;
  if (!last_axis) {
    if (const auto dims = ctx.input_dims(0)) last_axis = axis == dims->rank() - 1;
  }
  if (last_axis) {
    ctx.set_output(0, ctx.add_layer(kLayerArgReduce, {x}, 1, hardmax_attrs(ctx.opset() >= 13 ? axis : -1))->output(0));
    return;
  }
  Tensor* shape = ctx.add_layer(kLayerShape, {x}, 1, {}, "shape")->output(0);
  Attributes flatten;
  flatten.set("reshape_mode", std::string("flatten"));
  flatten.set("axis", axis);
  Tensor* flat = ctx.add_layer(kLayerShuffle, {x}, 1, std::move(flatten), "flatten")->output(0);
  Tensor* hard = ctx.add_layer(kLayerArgReduce, {flat}, 1, hardmax_attrs(1), "hardmax")->output(0);
  Attributes back;
  back.set("reshape_mode", std::string("dims"));
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {hard, shape}, 1, std::move(back))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Hardmax", import_hardmax, {.min_opset = 1, .types = "float32, float16, float64"});

// TopK: k is an attribute in opset 1 and an input from 10 on; largest/sorted from 11 on. kiln
// always returns sorted results, which sorted=0 (order unspecified) allows. The layer's output 2
// (k as an int64 scalar, not an ONNX output) lets k be a run-time value: the kernel writes it
// there and the runtime sizes the later tensors from it (a data-dependent extent).
void import_top_k(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* k = ctx.opset() < 10 ? ctx.add_int64_constant({ctx.attr_int("k", 0)}, "k") : ctx.required_input(1, "K");
  if (ctx.opset() < 10 && !ctx.has_attr("k")) ctx.fail("attribute 'k' is required");
  Attributes a;
  a.set("axis", ctx.attr_int("axis", -1));
  a.set("largest", ctx.attr_int("largest", 1));
  a.set("sorted", ctx.attr_int("sorted", 1));
  Layer* layer = ctx.add_layer(kLayerTopK, {x, k}, 3, std::move(a));
  ctx.set_output(0, layer->output(0));
  ctx.set_output(1, layer->output(1));
}
KILN_REGISTER_ONNX_IMPORTER("TopK", import_top_k,
                            {.min_opset = 1,
                             .types = "float32, float16, float64, int32, int64, int8, uint8",
                             .notes = "a k not known when shapes are inferred is read at run time (a data-dependent "
                                      "output size: no CUDA graph capture for such engines)"});

void import_cum_sum(NodeContext& ctx) {
  Attributes a;
  a.set("exclusive", ctx.attr_int("exclusive", 0));
  a.set("reverse", ctx.attr_int("reverse", 0));
  ctx.set_output(
      0, ctx.add_layer(kLayerCumSum, {ctx.required_input(0, "x"), ctx.required_input(1, "axis")}, 1, std::move(a))
             ->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("CumSum", import_cum_sum,
                            {.min_opset = 11, .types = "float32, float16, float64, int32, int64, int8, uint8"});

void import_trilu(NodeContext& ctx) {
  Attributes a;
  a.set("upper", ctx.attr_int("upper", 1));
  std::vector<Tensor*> inputs{ctx.required_input(0, "input")};
  if (ctx.has_input(1)) inputs.push_back(ctx.input(1));
  ctx.set_output(0, ctx.add_layer(kLayerTrilu, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Trilu", import_trilu, {.min_opset = 14, .types = "all kiln types"});

void import_one_hot(NodeContext& ctx) {
  Attributes a;
  a.set("axis", ctx.attr_int("axis", -1));
  ctx.set_output(0, ctx.add_layer(kLayerOneHot,
                                  {ctx.required_input(0, "indices"), ctx.required_input(1, "depth"),
                                   ctx.required_input(2, "values")},
                                  1, std::move(a))
                        ->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("OneHot", import_one_hot,
                            {.min_opset = 9,
                             .types = "indices: numeric; values: all kiln types",
                             .notes = "depth must be computable when shapes are inferred"});

void import_reverse_sequence(NodeContext& ctx) {
  Attributes a;
  a.set("batch_axis", ctx.attr_int("batch_axis", 1));
  a.set("time_axis", ctx.attr_int("time_axis", 0));
  ctx.set_output(
      0, ctx.add_layer(kLayerReverseSequence, {ctx.required_input(0, "input"), ctx.required_input(1, "sequence_lens")},
                       1, std::move(a))
             ->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("ReverseSequence", import_reverse_sequence, {.min_opset = 10, .types = "all kiln types"});

void import_max_unpool(NodeContext& ctx) {
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.empty()) ctx.fail("attribute 'kernel_shape' is required");
  Attributes a;
  a.set("kernel", kernel);
  a.set("strides", ctx.attr_ints("strides"));
  a.set("pads", ctx.attr_ints("pads"));
  std::vector<Tensor*> inputs{ctx.required_input(0, "X"), ctx.required_input(1, "I")};
  if (ctx.has_input(2)) inputs.push_back(ctx.input(2));
  ctx.set_output(0, ctx.add_layer(kLayerMaxUnpool, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("MaxUnpool", import_max_unpool,
                            {.min_opset = 9,
                             .types = "all kiln types",
                             .notes = "output_shape must be computable when shapes are inferred"});

}  // namespace
}  // namespace kiln
