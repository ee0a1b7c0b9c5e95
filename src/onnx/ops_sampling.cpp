// ONNX importers of GridSample (opsets 16 and 20), RoiAlign (10 and 16) and MaxRoiPool (1),
// one layer each. GridSample-16 spells the modes bilinear / bicubic and takes 4-D input only;
// opset 20 renamed them linear / cubic and allows any number of spatial axes, which the
// layer does. RoiAlign-10 had no coordinate_transformation_mode and behaved as
// "output_half_pixel" (no half-pixel shift); opset 16 added the attribute with default
// "half_pixel".
#include <string>

#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

void import_grid_sample(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* grid = ctx.required_input(1, "grid");
  std::string mode = ctx.attr_string("mode", ctx.opset() < 20 ? "bilinear" : "linear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "linear" && mode != "nearest" && mode != "cubic") ctx.fail("unknown mode " + quote(mode));
  if (ctx.opset() < 20) {
    const auto dims = ctx.input_dims(0);
    if (dims && dims->rank() != 4)
      ctx.fail("GridSample-" + std::to_string(ctx.opset()) + " takes 4-D input, got " + dims->to_string());
  }
  Attributes a;
  a.set("mode", mode);
  a.set("padding_mode", ctx.attr_string("padding_mode", "zeros"));
  a.set("align_corners", ctx.attr_int("align_corners", 0));
  ctx.set_output(0, ctx.add_layer(kLayerGridSample, {x, grid}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("GridSample", import_grid_sample,
                            {.min_opset = 16,
                             .types = "float32, float16, float64",
                             .notes = "any number of spatial axes"});

void import_roi_align(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* rois = ctx.required_input(1, "rois");
  Tensor* batch_indices = ctx.required_input(2, "batch_indices");
  Attributes a;
  a.set("mode", ctx.attr_string("mode", "avg"));
  a.set("output_height", ctx.attr_int("output_height", 1));
  a.set("output_width", ctx.attr_int("output_width", 1));
  a.set("sampling_ratio", ctx.attr_int("sampling_ratio", 0));
  a.set("spatial_scale", ctx.attr_float("spatial_scale", 1.0));
  a.set("coordinate_transformation_mode", ctx.opset() < 16
                                              ? std::string("output_half_pixel")
                                              : ctx.attr_string("coordinate_transformation_mode", "half_pixel"));
  ctx.set_output(0, ctx.add_layer(kLayerRoiAlign, {x, rois, batch_indices}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("RoiAlign", import_roi_align, {.min_opset = 10, .types = "float32, float16, float64"});

void import_max_roi_pool(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* rois = ctx.required_input(1, "rois");
  if (!ctx.has_attr("pooled_shape")) ctx.fail("attribute 'pooled_shape' is required");
  Attributes a;
  a.set("pooled_shape", ctx.attr_ints("pooled_shape"));
  a.set("spatial_scale", ctx.attr_float("spatial_scale", 1.0));
  ctx.set_output(0, ctx.add_layer(kLayerMaxRoiPool, {x, rois}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("MaxRoiPool", import_max_roi_pool, {.min_opset = 1, .types = "float32, float16, float64"});

}  // namespace
}  // namespace kiln
