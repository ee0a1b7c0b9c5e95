// ONNX importers of Resize (opsets 10, 11-12, 13+) and Upsample (7: scales attribute, 9:
// scales input) onto kiln's Resize layer, which has opset-11 semantics. Resize-10 and Upsample
// index the input as x_in = x_out / scale ("asymmetric") and pick the floor for nearest, which
// is how they are mapped. The roi input only matters for tf_crop_and_resize, which is not
// supported, so it is dropped.
#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

std::string interpolation_mode(NodeContext& ctx) {
  std::string mode = ctx.attr_string("mode", "nearest");
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";  // spellings of old exporters
  if (mode != "nearest" && mode != "linear" && (mode != "cubic" || ctx.opset() < 11))
    ctx.fail("unknown mode " + quote(mode));
  return mode;
}

// The attributes of the opset-10 behaviour (shared with Upsample).
Attributes legacy_resize_attrs(NodeContext& ctx) {
  Attributes a;
  a.set("mode", interpolation_mode(ctx));
  a.set("coordinate_transformation_mode", std::string("asymmetric"));
  a.set("nearest_mode", std::string("floor"));
  return a;
}

Tensor* present(NodeContext& ctx, int i) {
  if (!ctx.has_input(i) || ctx.is_empty_constant(i)) return nullptr;  // "" or a zero-size tensor: absent
  return ctx.input(i);
}

void add_resize(NodeContext& ctx, Tensor* x, Tensor* scales, Tensor* sizes, Attributes a) {
  if (!scales && !sizes) ctx.fail("needs either 'scales' or 'sizes'");
  if (scales && sizes) ctx.fail("has both 'scales' and 'sizes'; ONNX allows only one");
  std::vector<Tensor*> inputs{x, scales};
  if (sizes) inputs.push_back(sizes);
  ctx.set_output(0, ctx.add_layer(kLayerResize, inputs, 1, std::move(a))->output(0));
}

void import_resize(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  if (ctx.opset() < 11) {
    add_resize(ctx, x, present(ctx, 1), nullptr, legacy_resize_attrs(ctx));
    return;
  }
  const std::string ctm = ctx.attr_string("coordinate_transformation_mode", "half_pixel");
  if (ctm == "tf_crop_and_resize") ctx.unsupported("coordinate_transformation_mode 'tf_crop_and_resize' (roi)");
  if (ctm != "half_pixel" && ctm != "pytorch_half_pixel" && ctm != "align_corners" && ctm != "asymmetric" &&
      ctm != "tf_half_pixel_for_nn" && ctm != "half_pixel_symmetric") {
    ctx.fail("unknown coordinate_transformation_mode " + quote(ctm));
  }
  if (ctx.attr_int("antialias", 0) != 0) ctx.unsupported("antialias=1");
  if (ctx.has_attr("axes")) ctx.unsupported("the 'axes' attribute (opset 18)");
  const std::string policy = ctx.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch") ctx.unsupported("keep_aspect_ratio_policy " + quote(policy));
  const std::string nearest_mode = ctx.attr_string("nearest_mode", "round_prefer_floor");
  if (nearest_mode != "round_prefer_floor" && nearest_mode != "round_prefer_ceil" && nearest_mode != "floor" &&
      nearest_mode != "ceil") {
    ctx.fail("unknown nearest_mode " + quote(nearest_mode));
  }
  Attributes a;
  a.set("mode", interpolation_mode(ctx));
  a.set("coordinate_transformation_mode", ctm);
  a.set("nearest_mode", nearest_mode);
  a.set("cubic_coeff_a", ctx.attr_float("cubic_coeff_a", -0.75));
  a.set("exclude_outside", ctx.attr_int("exclude_outside", 0));
  a.set("extrapolation_value", ctx.attr_float("extrapolation_value", 0.0));
  add_resize(ctx, x, present(ctx, 2), present(ctx, 3), std::move(a));
}
KILN_REGISTER_ONNX_IMPORTER(
    "Resize", import_resize,
    {.min_opset = 10,
     .types = "nearest: every kiln type (float32/16/64, int8, uint8, int32, int64, bool); linear, cubic: float32, "
              "float16, float64",
     .notes = "tf_crop_and_resize (roi), antialias, axes and keep_aspect_ratio_policy are not supported"});

void import_upsample(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* scales = nullptr;
  if (ctx.opset() < 9) {
    std::vector<float> values;
    for (double s : ctx.attr_floats("scales")) values.push_back(static_cast<float>(s));
    if (values.empty()) ctx.fail("attribute 'scales' is required");
    scales = ctx.add_float_constant(values, "scales");
  } else {
    scales = ctx.required_input(1, "scales");
  }
  add_resize(ctx, x, scales, nullptr, legacy_resize_attrs(ctx));
}
KILN_REGISTER_ONNX_IMPORTER("Upsample", import_upsample,
                            {.min_opset = 7,
                             .types = "nearest: every kiln type (float32/16/64, int8, uint8, int32, int64, bool); "
                                      "linear: float32, float16, float64"});

}  // namespace
}  // namespace kiln
