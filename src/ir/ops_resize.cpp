// Schema and shape inference of Resize (ONNX Resize, opset 11+ semantics without the roi
// input): the output dims come from the `sizes` shape input, or from `scales` as
// floor(in * scale). Exactly one of the two is given (an empty tensor counts as absent, as
// exporters write an empty `scales` next to `sizes`). The parameters and the size rules are
// src/ir/resize_params.h (shared with the kernels); the coordinate math lives with the kernels
// in src/backends/cpu/resize_cpu.cpp.
#include <string>
#include <vector>

#include "src/core/text.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/resize_params.h"

namespace kiln {
namespace {

// A given, non-empty optional input.
bool given(const ShapeContext& ctx, int i) {
  if (!ctx.has_input(i)) return false;
  return ctx.input_dims(i).volume() > 0;
}

void infer_resize(ShapeContext& ctx) {
  const ResizeParams& p = params_of<ResizeParams>(ctx.layer());
  ctx.check(p.is_nearest() || is_floating_point(ctx.input_type(0)),
            "mode " + quote(to_string(p.mode)) + " interpolates and needs a floating-point input, got " +
                std::string(to_string(ctx.input_type(0))) + "; insert a Cast");
  const Dims& x = ctx.input_dims(0);
  const bool has_scales = given(ctx, 1), has_sizes = given(ctx, 2);
  ctx.check(has_scales != has_sizes, has_scales ? "give either scales (input 1) or sizes (input 2), not both"
                                                : "needs scales (input 1) or sizes (input 2)");
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (has_scales) {
    const HostTensor& t = ctx.required_value(1);
    ctx.check(is_floating_point(t.type()),
              std::string("input 1 (scales) must be floating-point, got ") + to_string(t.type()));
    scales = t.to_double();
  } else {
    const HostTensor& t = ctx.required_value(2);
    ctx.check(t.type() == DataType::kInt64 || t.type() == DataType::kInt32,
              std::string("input 2 (sizes) must be int64, got ") + to_string(t.type()));
    sizes = t.to_int64();
  }
  Dims out;
  try {
    out = resize_output_dims(x, scales, sizes);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerResize,
    1,
    3,
    1,
    {{"mode", A::kString, std::string("nearest"), false, "nearest, linear or cubic"},
     {"coordinate_transformation_mode", A::kString, std::string("half_pixel"), false,
      "half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric or tf_half_pixel_for_nn"},
     {"nearest_mode", A::kString, std::string("round_prefer_floor"), false,
      "round_prefer_floor, round_prefer_ceil, floor or ceil"},
     {"cubic_coeff_a", A::kFloat, -0.75, false, "cubic convolution coefficient"},
     {"exclude_outside", A::kInt, int64_t{0}, false, "cubic: drop taps outside the input and renormalize"},
     {"extrapolation_value", A::kFloat, 0.0, false, "only used by tf_crop_and_resize (not supported)"}},
    {1, 2},
    infer_resize,
    "ONNX Resize (opset 11+, no roi): nearest, (multi)linear or cubic over every resized axis; output dims from "
    "sizes or floor(in * scales)."}
                     .with_params<ResizeParams>()
                     .with_traits({.channels_last = true}));

}  // namespace kiln
