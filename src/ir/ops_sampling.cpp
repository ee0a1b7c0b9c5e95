// Schemas and shape inference of the layers that sample a feature map at computed positions:
// GridSample (ONNX GridSample 16/20: a grid of normalized coordinates per output position),
// RoiAlign (ONNX RoiAlign 10/16: bilinear samples averaged or maxed over region bins) and
// MaxRoiPool (ONNX MaxRoiPool: max over integer region bins, Fast R-CNN). Their arithmetic,
// which follows ONNX Runtime and the ONNX reference implementation exactly, is in
// src/backends/cpu/sampling_cpu.cpp.
#include <string>
#include <vector>

#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

void check_one_of(const ShapeContext& ctx, const char* attr, const std::vector<std::string>& valid) {
  const std::string v = attr_string(ctx.layer(), attr);
  std::string list;
  for (const auto& n : valid) {
    if (n == v) return;
    list += (list.empty() ? "" : ", ") + n;
  }
  ctx.fail(std::string("attribute '") + attr + "' is " + quote(v) + " (valid: " + list + ")");
}

void check_float(const ShapeContext& ctx, int i, const char* what) {
  ctx.check(is_floating_point(ctx.input_type(i)),
            std::string(what) + " must be floating-point, got " + to_string(ctx.input_type(i)));
}

void infer_grid_sample(ShapeContext& ctx) {
  check_one_of(ctx, "mode", {"linear", "nearest", "cubic"});
  check_one_of(ctx, "padding_mode", {"zeros", "border", "reflection"});
  check_float(ctx, 0, "X");
  check_float(ctx, 1, "grid");
  const Dims& x = ctx.input_dims(0);
  const Dims& grid = ctx.input_dims(1);
  ctx.check(x.rank() >= 3, "X " + x.to_string() + " must be [N, C, D1, ...] with at least one spatial dim");
  const int k = x.rank() - 2;
  ctx.check(grid.rank() == k + 2 && grid[0] == x[0] && grid[k + 1] == k,
            "grid " + grid.to_string() + " must be [N, O1.." + std::to_string(k) + ", " + std::to_string(k) +
                "] for X " + x.to_string());
  Dims out{x[0], x[1]};
  for (int i = 1; i <= k; ++i) out.push_back(grid[i]);
  ctx.set_output(0, ctx.input_type(0), out);
}

void infer_roi_align(ShapeContext& ctx) {
  check_one_of(ctx, "mode", {"avg", "max"});
  check_one_of(ctx, "coordinate_transformation_mode", {"half_pixel", "output_half_pixel"});
  check_float(ctx, 0, "X");
  check_float(ctx, 1, "rois");
  const Dims& x = ctx.input_dims(0);
  const Dims& rois = ctx.input_dims(1);
  const Dims& bi = ctx.input_dims(2);
  ctx.check(x.rank() == 4, "X " + x.to_string() + " must be [N, C, H, W]");
  ctx.check(rois.rank() == 2 && rois[1] == 4, "rois " + rois.to_string() + " must be [num_rois, 4]");
  ctx.check(bi.rank() == 1 && bi[0] == rois[0], "batch_indices " + bi.to_string() + " must be [" +
                                                    std::to_string(rois[0]) + "] (one per roi)");
  const DataType it = ctx.input_type(2);
  ctx.check(it == DataType::kInt64 || it == DataType::kInt32,
            std::string("batch_indices must be int64 or int32, got ") + to_string(it));
  const int64_t oh = attr_int(ctx.layer(), "output_height"), ow = attr_int(ctx.layer(), "output_width");
  ctx.check(oh >= 1 && ow >= 1, "output_height and output_width must be >= 1");
  ctx.check(attr_int(ctx.layer(), "sampling_ratio") >= 0, "sampling_ratio must be >= 0");
  ctx.set_output(0, ctx.input_type(0), Dims{rois[0], x[1], oh, ow});
}

void infer_max_roi_pool(ShapeContext& ctx) {
  check_float(ctx, 0, "X");
  check_float(ctx, 1, "rois");
  const Dims& x = ctx.input_dims(0);
  const Dims& rois = ctx.input_dims(1);
  ctx.check(x.rank() == 4, "X " + x.to_string() + " must be [N, C, H, W]");
  ctx.check(rois.rank() == 2 && rois[1] == 5, "rois " + rois.to_string() + " must be [num_rois, 5] (batch, x1, y1, x2, y2)");
  const auto pooled = attr_ints(ctx.layer(), "pooled_shape");
  ctx.check(pooled.size() == 2 && pooled[0] >= 1 && pooled[1] >= 1,
            "pooled_shape must be two positive values [height, width]");
  ctx.set_output(0, ctx.input_type(0), Dims{rois[0], x[1], pooled[0], pooled[1]});
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerGridSample, 2, 2, 1,
                          {{"mode", A::kString, std::string("linear"), false, "linear, nearest or cubic"},
                           {"padding_mode", A::kString, std::string("zeros"), false, "zeros, border or reflection"},
                           {"align_corners", A::kInt, int64_t{0}, false, "-1 and 1 are the corner pixels' centers"}},
                          {},
                          infer_grid_sample,
                          "ONNX GridSample (opset 20 names): samples X [N,C,D1..Dk] at the normalized coordinates "
                          "of grid [N,O1..Ok,k] (x first), giving [N,C,O1..Ok]."});

KILN_REGISTER_OP(OpSchema{kLayerRoiAlign, 3, 3, 1,
                          {{"mode", A::kString, std::string("avg"), false, "avg or max"},
                           {"output_height", A::kInt, int64_t{1}, false, "pooled height"},
                           {"output_width", A::kInt, int64_t{1}, false, "pooled width"},
                           {"sampling_ratio", A::kInt, int64_t{0}, false, "samples per bin and axis (0: adaptive)"},
                           {"spatial_scale", A::kFloat, 1.0, false, "roi coordinate scale"},
                           {"coordinate_transformation_mode", A::kString, std::string("half_pixel"), false,
                            "half_pixel or output_half_pixel"}},
                          {},
                          infer_roi_align,
                          "ONNX RoiAlign: X [N,C,H,W], rois [R,4] (x1,y1,x2,y2), batch_indices [R] -> [R,C,oh,ow]."});

KILN_REGISTER_OP(OpSchema{kLayerMaxRoiPool, 2, 2, 1,
                          {{"pooled_shape", A::kInts, std::vector<int64_t>{}, true, "[height, width] of each output"},
                           {"spatial_scale", A::kFloat, 1.0, false, "roi coordinate scale"}},
                          {},
                          infer_max_roi_pool,
                          "ONNX MaxRoiPool: X [N,C,H,W], rois [R,5] (batch,x1,y1,x2,y2) -> [R,C,ph,pw]."});

}  // namespace kiln
