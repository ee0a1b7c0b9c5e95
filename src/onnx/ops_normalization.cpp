// ONNX importers of the normalization ops: LayerNormalization, InstanceNormalization,
// GroupNormalization, MeanVarianceNormalization and LpNormalization (all one Normalization
// layer with a mode) and LRN. Statistics are computed in double by the reference, which covers
// every stash_type ONNX allows.
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

Attributes mode_attrs(const std::string& mode, double epsilon) {
  Attributes a;
  a.set("mode", mode);
  a.set("epsilon", epsilon);
  return a;
}

// LayerNormalization (17): Mean and InvStdDev are optional outputs; the layer gets as many
// outputs as the last used one needs.
void import_layer_normalization(NodeContext& ctx) {
  Attributes a = mode_attrs("layer", ctx.attr_float("epsilon", 1e-5));
  a.set("axis", ctx.attr_int("axis", -1));
  const int64_t stash = ctx.attr_int("stash_type", 1);
  if (stash != 1)
    ctx.unsupported("stash_type " + std::to_string(stash) + " (kiln computes statistics in float32 or wider)");
  int outputs = 1;
  for (int i = 1; i < 3; ++i) {
    if (ctx.output_used(i)) outputs = i + 1;
  }
  Layer* layer =
      ctx.add_layer(kLayerNormalization, {ctx.required_input(0, "X"), ctx.required_input(1, "Scale"), ctx.input(2)},
                    outputs, std::move(a));
  for (int i = 0; i < outputs; ++i) ctx.set_output(i, layer->output(i));
}
KILN_REGISTER_ONNX_IMPORTER("LayerNormalization", import_layer_normalization,
                            {.min_opset = 17,
                             .types = "float32, float16, float64",
                             .notes = "Mean and InvStdDev outputs are float32"});

void import_instance_normalization(NodeContext& ctx) {
  Layer* layer = ctx.add_layer(
      kLayerNormalization, {ctx.required_input(0, "input"), ctx.required_input(1, "scale"), ctx.required_input(2, "B")},
      1, mode_attrs("instance", ctx.attr_float("epsilon", 1e-5)));
  ctx.set_output(0, layer->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("InstanceNormalization", import_instance_normalization,
                            {.min_opset = 1, .types = "float32, float16, float64"});

// GroupNormalization: opset 18 gives scale and bias per group, opset 21 per channel. The
// per-group form is expanded to channels with a Gather, which needs the channel count.
void import_group_normalization(NodeContext& ctx) {
  if (!ctx.has_attr("num_groups")) ctx.fail("attribute 'num_groups' is required");
  const int64_t groups = ctx.attr_int("num_groups", 1);
  Attributes a = mode_attrs("group", ctx.attr_float("epsilon", 1e-5));
  a.set("num_groups", groups);
  Tensor* scale = ctx.required_input(1, "scale");
  Tensor* bias = ctx.required_input(2, "bias");
  if (ctx.opset() < 21) {
    const auto dims = ctx.input_dims(0);
    if (!dims || dims->rank() < 2 || (*dims)[1] == kDynamic) {
      ctx.unsupported("GroupNormalization-18 (scale and bias per group) needs the channel count of input '" +
                      ctx.input_name(0) + "', which the model does not record; run onnx.shape_inference.infer_shapes");
    }
    const int64_t channels = (*dims)[1];
    if (groups < 1 || channels % groups != 0) {
      ctx.fail("num_groups " + std::to_string(groups) + " does not divide the channel count " +
               std::to_string(channels));
    }
    std::vector<int64_t> group_of(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) group_of[static_cast<size_t>(c)] = c / (channels / groups);
    Tensor* indices = ctx.add_int64_constant(group_of, "group_of_channel");
    Attributes g;
    g.set("axis", int64_t{0});
    scale = ctx.add_layer(kLayerGather, {scale, indices}, 1, g, "scale_per_channel")->output(0);
    bias = ctx.add_layer(kLayerGather, {bias, indices}, 1, g, "bias_per_channel")->output(0);
  }
  if (ctx.attr_int("stash_type", 1) != 1) ctx.unsupported("stash_type other than 1 (float32)");
  Layer* layer = ctx.add_layer(kLayerNormalization, {ctx.required_input(0, "X"), scale, bias}, 1, std::move(a));
  ctx.set_output(0, layer->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("GroupNormalization", import_group_normalization,
                            {.min_opset = 18,
                             .types = "float32, float16, float64",
                             .notes = "opset 18 (per-group scale) needs the channel count recorded in the model"});

// MeanVarianceNormalization: `axes` from opset 9 on; opset 1 spells them across_channels
// ([0,1,2,3] or [0,2,3]) and may skip the variance. ONNX adds epsilon 1e-9 to the standard
// deviation.
void import_mean_variance_normalization(NodeContext& ctx) {
  Attributes a = mode_attrs("mvn", 1e-9);
  if (ctx.opset() < 9) {
    a.set("axes",
          ctx.attr_int("across_channels", 0) != 0 ? std::vector<int64_t>{0, 1, 2, 3} : std::vector<int64_t>{0, 2, 3});
    a.set("normalize_variance", ctx.attr_int("normalize_variance", 1));
  } else {
    a.set("axes", ctx.attr_ints("axes", {0, 2, 3}));
  }
  ctx.set_output(0, ctx.add_layer(kLayerNormalization, {ctx.required_input(0, "X")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("MeanVarianceNormalization", import_mean_variance_normalization,
                            {.min_opset = 1, .types = "float32, float16, float64"});

void import_lp_normalization(NodeContext& ctx) {
  Attributes a = mode_attrs("lp", 0.0);
  a.set("axis", ctx.attr_int("axis", -1));
  const int64_t p = ctx.attr_int("p", 2);
  if (p != 1 && p != 2) ctx.fail("attribute 'p' must be 1 or 2, got " + std::to_string(p));
  a.set("p", p);
  ctx.set_output(0, ctx.add_layer(kLayerNormalization, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("LpNormalization", import_lp_normalization,
                            {.min_opset = 1, .types = "float32, float16, float64"});

void import_lrn(NodeContext& ctx) {
  if (!ctx.has_attr("size")) ctx.fail("attribute 'size' is required");
  Attributes a;
  a.set("size", ctx.attr_int("size", 1));
  a.set("alpha", ctx.attr_float("alpha", 1e-4));
  a.set("beta", ctx.attr_float("beta", 0.75));
  a.set("bias", ctx.attr_float("bias", 1.0));
  ctx.set_output(0, ctx.add_layer(kLayerLRN, {ctx.required_input(0, "X")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("LRN", import_lrn, {.min_opset = 1, .types = "float32, float16, float64"});

}  // namespace
}  // namespace kiln
