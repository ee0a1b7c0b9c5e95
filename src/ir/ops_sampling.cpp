// Schemas and shape inference of the layers that sample a feature map at computed positions:
// GridSample (ONNX GridSample 16/20: a grid of normalized coordinates per output position),
// RoiAlign (ONNX RoiAlign 10/16: bilinear samples averaged or maxed over region bins) and
// MaxRoiPool (ONNX MaxRoiPool: max over integer region bins, Fast R-CNN). Their arithmetic,
// which follows ONNX Runtime and the ONNX reference implementation exactly, is in
// src/backends/cpu/sampling_cpu.cpp; their parameters and output sizes in src/ir/sampling_params.h.
#include <string>
#include <vector>

#include "src/core/text.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/sampling_params.h"

namespace kiln {
namespace {

void check_float(const ShapeContext& ctx, int i, const char* what) {
  ctx.check(is_floating_point(ctx.input_type(i)),
            std::string(what) + " must be floating-point, got " + to_string(ctx.input_type(i)));
}

// Runs a shared output-size rule, failing with its message under the layer's name.
template <typename Fn>
Dims output_dims(const ShapeContext& ctx, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
}

void infer_grid_sample(ShapeContext& ctx) {
  (void)params_of<GridSampleParams>(ctx.layer());  // mode, padding_mode, align_corners checked when decoded
  check_float(ctx, 0, "X");
  check_float(ctx, 1, "grid");
  const Dims out = output_dims(ctx, [&] { return grid_sample_output_dims(ctx.input_dims(0), ctx.input_dims(1)); });
  ctx.set_output(0, ctx.input_type(0), out);
}

void infer_roi_align(ShapeContext& ctx) {
  const RoiAlignParams& p = params_of<RoiAlignParams>(ctx.layer());
  check_float(ctx, 0, "X");
  check_float(ctx, 1, "rois");
  const Dims out = output_dims(
      ctx, [&] { return roi_align_output_dims(p, ctx.input_dims(0), ctx.input_dims(1), ctx.input_dims(2)); });
  const DataType it = ctx.input_type(2);
  ctx.check(it == DataType::kInt64 || it == DataType::kInt32,
            std::string("batch_indices must be int64 or int32, got ") + to_string(it));
  ctx.set_output(0, ctx.input_type(0), out);
}

void infer_max_roi_pool(ShapeContext& ctx) {
  const MaxRoiPoolParams& p = params_of<MaxRoiPoolParams>(ctx.layer());
  check_float(ctx, 0, "X");
  check_float(ctx, 1, "rois");
  const Dims out = output_dims(ctx, [&] { return max_roi_pool_output_dims(p, ctx.input_dims(0), ctx.input_dims(1)); });
  ctx.set_output(0, ctx.input_type(0), out);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerGridSample,
                          2,
                          2,
                          1,
                          {{"mode", A::kString, std::string("linear"), false, "linear, nearest or cubic"},
                           {"padding_mode", A::kString, std::string("zeros"), false, "zeros, border or reflection"},
                           {"align_corners", A::kInt, int64_t{0}, false, "-1 and 1 are the corner pixels' centers"}},
                          {},
                          infer_grid_sample,
                          "ONNX GridSample (opset 20 names): samples X [N,C,D1..Dk] at the normalized coordinates "
                          "of grid [N,O1..Ok,k] (x first), giving [N,C,O1..Ok]."}
                     .with_params<GridSampleParams>());

KILN_REGISTER_OP(OpSchema{kLayerRoiAlign,
                          3,
                          3,
                          1,
                          {{"mode", A::kString, std::string("avg"), false, "avg or max"},
                           {"output_height", A::kInt, int64_t{1}, false, "pooled height"},
                           {"output_width", A::kInt, int64_t{1}, false, "pooled width"},
                           {"sampling_ratio", A::kInt, int64_t{0}, false, "samples per bin and axis (0: adaptive)"},
                           {"spatial_scale", A::kFloat, 1.0, false, "roi coordinate scale"},
                           {"coordinate_transformation_mode", A::kString, std::string("half_pixel"), false,
                            "half_pixel or output_half_pixel"}},
                          {},
                          infer_roi_align,
                          "ONNX RoiAlign: X [N,C,H,W], rois [R,4] (x1,y1,x2,y2), batch_indices [R] -> [R,C,oh,ow]."}
                     .with_params<RoiAlignParams>());

KILN_REGISTER_OP(OpSchema{kLayerMaxRoiPool,
                          2,
                          2,
                          1,
                          {{"pooled_shape", A::kInts, std::vector<int64_t>{}, true, "[height, width] of each output"},
                           {"spatial_scale", A::kFloat, 1.0, false, "roi coordinate scale"}},
                          {},
                          infer_max_roi_pool,
                          "ONNX MaxRoiPool: X [N,C,H,W], rois [R,5] (batch,x1,y1,x2,y2) -> [R,C,ph,pw]."}
                     .with_params<MaxRoiPoolParams>());

}  // namespace kiln
