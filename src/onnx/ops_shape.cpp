// ONNX importers that move or re-shape data: Reshape, Flatten, Transpose, Squeeze, Unsqueeze
// (all Shuffle layers), Concat, Split, Slice, Expand, Tile, Pad and Shape. Values ONNX passes
// as tensors (shapes, starts/ends, pads, repeats) stay layer inputs so that exporters' dynamic
// shape arithmetic keeps working; attribute spellings of older opsets become Constant layers.
#include <limits>

#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// Element types for the OnnxImporterInfo of the registrations below (docs/onnx-support.md).
constexpr const char* kAllTypes = "every kiln type (float32/16/64, int8, uint8, int32, int64, bool)";

Attributes shuffle_attrs(const std::string& reshape_mode) {
  Attributes a;
  a.set("reshape_mode", reshape_mode);
  return a;
}

void import_reshape(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "data");
  Tensor* shape =
      ctx.opset() < 5 ? ctx.add_int64_constant(ctx.attr_ints("shape"), "shape") : ctx.required_input(1, "shape");
  Attributes a = shuffle_attrs("dims");
  a.set("zero_is_placeholder", int64_t{ctx.attr_int("allowzero", 0) == 0 ? 1 : 0});
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {x, shape}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Reshape", import_reshape, {.min_opset = 1, .types = kAllTypes});

void import_flatten(NodeContext& ctx) {
  Attributes a = shuffle_attrs("flatten");
  a.set("axis", ctx.attr_int("axis", 1));
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Flatten", import_flatten, {.min_opset = 1, .types = kAllTypes});

void import_transpose(NodeContext& ctx) {
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (perm.empty()) {  // ONNX default: reverse the dims, which needs the rank
    const auto dims = ctx.input_dims(0);
    if (!dims) {
      ctx.fail("has no 'perm' (reverse all dims) and the rank of input '" + ctx.input_name(0) +
               "' is not recorded in the model; run onnx.shape_inference.infer_shapes or give 'perm'");
    }
    for (int i = dims->rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  Attributes a = shuffle_attrs("none");
  a.set("first_transpose", perm);
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {ctx.required_input(0, "data")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Transpose", import_transpose,
                            {.min_opset = 1,
                             .types = kAllTypes,
                             .notes = "without 'perm' the input's rank must be recorded"});

// Squeeze/Unsqueeze axes: an attribute before opset 13, a constant input from 13 on (kiln's
// Shuffle needs them when the network is built).
std::vector<int64_t> squeeze_axes(NodeContext& ctx) {
  if (ctx.opset() < 13) return ctx.attr_ints("axes");
  if (!ctx.has_input(1)) return {};
  return ctx.constant_input(1, "axes").to_int64();
}

void import_squeeze(NodeContext& ctx) {
  Attributes a = shuffle_attrs("squeeze");
  a.set("axes", squeeze_axes(ctx));
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {ctx.required_input(0, "data")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Squeeze", import_squeeze,
                            {.min_opset = 1,
                             .types = kAllTypes,
                             .notes = "the axes input (opset 13+) must be a constant"});

void import_unsqueeze(NodeContext& ctx) {
  const auto axes = squeeze_axes(ctx);
  if (axes.empty()) ctx.fail("'axes' is required and must not be empty");
  Attributes a = shuffle_attrs("unsqueeze");
  a.set("axes", axes);
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {ctx.required_input(0, "data")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Unsqueeze", import_unsqueeze,
                            {.min_opset = 1,
                             .types = kAllTypes,
                             .notes = "the axes input (opset 13+) must be a constant"});

void import_concat(NodeContext& ctx) {
  if (!ctx.has_attr("axis") && ctx.opset() >= 4) ctx.fail("attribute 'axis' is required");
  std::vector<Tensor*> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.required_input(i, "inputs"));
  if (inputs.empty()) ctx.fail("needs at least one input");
  Attributes a;
  a.set("axis", ctx.attr_int("axis", 1));
  ctx.set_output(0, ctx.add_layer(kLayerConcatenation, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Concat", import_concat, {.min_opset = 1, .types = kAllTypes});

// Split sizes: attribute `split` before opset 13, optional input from 13 on (kept as an input
// when it is not constant), else equal parts over the outputs.
void import_split(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  Attributes a;
  a.set("axis", ctx.attr_int("axis", 0));
  std::vector<Tensor*> inputs{x};
  if (ctx.opset() < 13) {
    if (ctx.has_attr("split")) a.set("split", ctx.attr_ints("split"));
  } else if (ctx.has_input(1)) {
    if (const HostTensor* split = ctx.constant(1))
      a.set("split", split->to_int64());
    else
      inputs.push_back(ctx.input(1));
  }
  if (a.has("split") && static_cast<int>(a.get_ints("split").size()) != ctx.num_outputs()) {
    ctx.fail("'split' has " + std::to_string(a.get_ints("split").size()) + " sizes for " +
             std::to_string(ctx.num_outputs()) + " outputs");
  }
  if (ctx.has_attr("num_outputs") && ctx.attr_int("num_outputs", 0) != ctx.num_outputs()) {
    ctx.fail("attribute num_outputs=" + std::to_string(ctx.attr_int("num_outputs", 0)) + " but the node has " +
             std::to_string(ctx.num_outputs()) + " outputs");
  }
  Layer* layer = ctx.add_layer(kLayerSplit, inputs, ctx.num_outputs(), std::move(a));
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, layer->output(i));
}
KILN_REGISTER_ONNX_IMPORTER("Split", import_split, {.min_opset = 1, .types = kAllTypes});

void import_slice(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "data");
  std::vector<Tensor*> inputs{x};
  if (ctx.opset() < 10) {
    if (!ctx.has_attr("starts") || !ctx.has_attr("ends")) ctx.fail("attributes 'starts' and 'ends' are required");
    inputs.push_back(ctx.add_int64_constant(ctx.attr_ints("starts"), "starts"));
    inputs.push_back(ctx.add_int64_constant(ctx.attr_ints("ends"), "ends"));
    if (ctx.has_attr("axes")) inputs.push_back(ctx.add_int64_constant(ctx.attr_ints("axes"), "axes"));
  } else {
    inputs.push_back(ctx.required_input(1, "starts"));
    inputs.push_back(ctx.required_input(2, "ends"));
    Tensor* axes = ctx.input(3);
    Tensor* steps = ctx.input(4);
    if (axes || steps) inputs.push_back(axes);
    if (steps) inputs.push_back(steps);
  }
  ctx.set_output(0, ctx.add_layer(kLayerSlice, inputs, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Slice", import_slice, {.min_opset = 1, .types = kAllTypes});

void import_expand(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  Tensor* shape = ctx.required_input(1, "shape");
  ctx.set_output(0, ctx.add_layer(kLayerExpand, {x, shape}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Expand", import_expand, {.min_opset = 8, .types = kAllTypes});

void import_tile(NodeContext& ctx) {
  if (ctx.opset() < 6) ctx.unsupported("Tile before opset 6 (tiles/axis inputs)");
  Tensor* x = ctx.required_input(0, "input");
  Tensor* repeats = ctx.required_input(1, "repeats");
  ctx.set_output(0, ctx.add_layer(kLayerTile, {x, repeats}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Tile", import_tile, {.min_opset = 6, .types = kAllTypes});

// Pad: attributes pads/value before opset 11, inputs pads/constant_value from 11 on, and an
// optional `axes` input from 18 on, which is expanded here to pads over every dim.
void import_pad(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "data");
  const std::string mode = ctx.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.unsupported("mode " + quote(mode));
  Attributes a;
  a.set("mode", mode);
  Tensor* pads = nullptr;
  Tensor* value = nullptr;
  if (ctx.opset() < 11) {
    if (!ctx.has_attr("pads")) ctx.fail("attribute 'pads' is required");
    pads = ctx.add_int64_constant(ctx.attr_ints("pads"), "pads");
    const double v = ctx.attr_float("value", 0.0);
    if (v != 0.0)
      value = ctx.add_constant(
          HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{static_cast<float>(v)}), "value");
  } else if (ctx.has_input(3)) {
    const auto axes = ctx.constant_input(3, "axes").to_int64();
    const auto partial = ctx.constant_input(1, "pads (with axes)").to_int64();
    const auto dims = ctx.input_dims(0);
    if (!dims)
      ctx.fail("the 'axes' input needs the rank of input " + quote(ctx.input_name(0)) +
               ", which the model does not record");
    const int rank = dims->rank();
    if (partial.size() != 2 * axes.size()) ctx.fail("'pads' must have twice as many values as 'axes'");
    std::vector<int64_t> full(2 * static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (axis < 0 || axis >= rank)
        ctx.fail("axis " + std::to_string(axes[i]) + " is out of range for rank " + std::to_string(rank));
      full[static_cast<size_t>(axis)] = partial[i];
      full[static_cast<size_t>(axis + rank)] = partial[i + axes.size()];
    }
    pads = ctx.add_int64_constant(full, "pads");
    value = ctx.input(2);
  } else {
    pads = ctx.required_input(1, "pads");
    value = ctx.input(2);
  }
  std::vector<Tensor*> inputs{x, pads};
  if (value) inputs.push_back(value);
  ctx.set_output(0, ctx.add_layer(kLayerPadding, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER(
    "Pad", import_pad,
    {.min_opset = 1,
     .types = kAllTypes,
     .notes = "modes constant, reflect, edge, wrap; the axes input (opset 18) must be a constant"});

void import_shape(NodeContext& ctx) {
  Attributes a;
  if (ctx.has_attr("start")) a.set("start", ctx.attr_int("start", 0));
  if (ctx.has_attr("end")) a.set("end", ctx.attr_int("end", std::numeric_limits<int64_t>::max()));
  ctx.set_output(0, ctx.add_layer(kLayerShape, {ctx.required_input(0, "data")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Shape", import_shape, {.min_opset = 1, .types = kAllTypes});

}  // namespace
}  // namespace kiln
