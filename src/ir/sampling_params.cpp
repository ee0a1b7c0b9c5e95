// GridSample / RoiAlign / MaxRoiPool params decoding and output sizes (see sampling_params.h).
#include "src/ir/sampling_params.h"

#include <limits>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/ir/op_params.h"

namespace kiln {

GridSampleParams GridSampleParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  GridSampleParams p;
  p.mode = r.get_enum<InterpolationMode>("mode", {{"linear", InterpolationMode::kLinear},
                                                  {"nearest", InterpolationMode::kNearest},
                                                  {"cubic", InterpolationMode::kCubic}});
  p.padding = r.get_enum<GridSamplePadding>("padding_mode", {{"zeros", GridSamplePadding::kZeros},
                                                             {"border", GridSamplePadding::kBorder},
                                                             {"reflection", GridSamplePadding::kReflection}});
  p.align_corners = r.get_bool("align_corners");
  return p;
}

Dims grid_sample_output_dims(const Dims& x, const Dims& grid) {
  if (x.rank() < 3) throw Error("X " + x.to_string() + " must be [N, C, D1, ...] with at least one spatial dim");
  const int k = x.rank() - 2;
  if (grid.rank() != k + 2 || grid[0] != x[0] || grid[k + 1] != k) {
    throw Error("grid " + grid.to_string() + " must be [N, O1.." + std::to_string(k) + ", " + std::to_string(k) +
                "] for X " + x.to_string());
  }
  Dims out{x[0], x[1]};
  for (int i = 1; i <= k; ++i) out.push_back(grid[i]);
  return out;
}

RoiAlignParams RoiAlignParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  RoiAlignParams p;
  p.max_mode = r.get_enum<bool>("mode", {{"avg", false}, {"max", true}});
  p.output_height = r.int_in("output_height", 1, kMax);
  p.output_width = r.int_in("output_width", 1, kMax);
  p.sampling_ratio = r.int_in("sampling_ratio", 0, kMax);
  p.spatial_scale = r.get_float("spatial_scale");
  p.half_pixel =
      r.get_enum<bool>("coordinate_transformation_mode", {{"half_pixel", true}, {"output_half_pixel", false}});
  return p;
}

Dims roi_align_output_dims(const RoiAlignParams& p, const Dims& x, const Dims& rois, const Dims& bi) {
  if (x.rank() != 4) throw Error("X " + x.to_string() + " must be [N, C, H, W]");
  if (rois.rank() != 2 || rois[1] != 4) throw Error("rois " + rois.to_string() + " must be [num_rois, 4]");
  if (bi.rank() != 1 || bi[0] != rois[0]) {
    throw Error("batch_indices " + bi.to_string() + " must be [" + std::to_string(rois[0]) + "] (one per roi)");
  }
  return Dims{rois[0], x[1], p.output_height, p.output_width};
}

MaxRoiPoolParams MaxRoiPoolParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  MaxRoiPoolParams p;
  const std::vector<int64_t> pooled = r.get_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1) {
    std::string list;
    for (int64_t v : pooled) list += (list.empty() ? "" : ", ") + std::to_string(v);
    r.fail("pooled_shape", "is [" + list + "]; it must be two positive values [height, width]");
  }
  p.pooled_height = pooled[0];
  p.pooled_width = pooled[1];
  p.spatial_scale = r.get_float("spatial_scale");
  return p;
}

Dims max_roi_pool_output_dims(const MaxRoiPoolParams& p, const Dims& x, const Dims& rois) {
  if (x.rank() != 4) throw Error("X " + x.to_string() + " must be [N, C, H, W]");
  if (rois.rank() != 2 || rois[1] != 5) {
    throw Error("rois " + rois.to_string() + " must be [num_rois, 5] (batch, x1, y1, x2, y2)");
  }
  return Dims{rois[0], x[1], p.pooled_height, p.pooled_width};
}

}  // namespace kiln
