// The parameters of the sampling layers: GridSample (ONNX GridSample 16/20), RoiAlign (ONNX
// RoiAlign 10/16) and MaxRoiPool (ONNX MaxRoiPool): decoded once from a layer's attributes
// (through the schema's with_params) and read by shape inference and every kernel (CPU
// reference, CUDA), with the output-size rules they share.
#pragma once

#include <cstdint>

#include "kiln/network.h"

namespace kiln {

// GridSample's `mode` is the public InterpolationMode and `padding` the public GridSamplePadding
// (include/kiln/network.h).
struct GridSampleParams {
  InterpolationMode mode = InterpolationMode::kLinear;
  GridSamplePadding padding = GridSamplePadding::kZeros;  // padding_mode
  bool align_corners = false;                             // -1 and 1 are the corner pixels' centers
  static GridSampleParams decode(const Layer& layer);
};
// [N, C, O1..Ok] for X [N, C, D1..Dk] and grid [N, O1..Ok, k]. Throws kiln::Error with the reason.
Dims grid_sample_output_dims(const Dims& x, const Dims& grid);

struct RoiAlignParams {
  bool max_mode = false;                        // mode "max" (ONNX Runtime's), else "avg"
  int64_t output_height = 1, output_width = 1;  // >= 1
  int64_t sampling_ratio = 0;                   // >= 0 (0: adaptive)
  double spatial_scale = 1.0;
  bool half_pixel = true;  // coordinate_transformation_mode "half_pixel", else "output_half_pixel"
  static RoiAlignParams decode(const Layer& layer);
};
// [R, C, output_height, output_width] for X [N, C, H, W], rois [R, 4] and batch_indices [R].
Dims roi_align_output_dims(const RoiAlignParams& params, const Dims& x, const Dims& rois, const Dims& batch_indices);

struct MaxRoiPoolParams {
  int64_t pooled_height = 1, pooled_width = 1;  // pooled_shape, each >= 1
  double spatial_scale = 1.0;
  static MaxRoiPoolParams decode(const Layer& layer);
};
// [R, C, pooled_height, pooled_width] for X [N, C, H, W] and rois [R, 5].
Dims max_roi_pool_output_dims(const MaxRoiPoolParams& params, const Dims& x, const Dims& rois);

}  // namespace kiln
