// Schema and shape inference of Resize (ONNX Resize, opset 11+ semantics without the roi
// input): the output dims come from the `sizes` shape input, or from `scales` as
// floor(in * scale). Exactly one of the two is given (an empty tensor counts as absent, as
// exporters write an empty `scales` next to `sizes`). The coordinate math lives with the
// kernels in src/backends/cpu/resize_cpu.cpp.
#include <cmath>
#include <string>
#include <vector>

#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

void check_modes(const ShapeContext& ctx) {
  const Layer& layer = ctx.layer();
  const std::string mode = attr_string(layer, "mode");
  const std::string ctm = attr_string(layer, "coordinate_transformation_mode");
  const std::string nearest = attr_string(layer, "nearest_mode");
  ctx.check(one_of(mode, {"nearest", "linear", "cubic"}), "unknown mode " + quote(mode) + " (expected nearest, linear or cubic)");
  ctx.check(ctm != "tf_crop_and_resize",
            "coordinate_transformation_mode 'tf_crop_and_resize' needs an roi input, which kiln's Resize does not take");
  ctx.check(one_of(ctm, {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "tf_half_pixel_for_nn"}),
            "unknown coordinate_transformation_mode '" + ctm +
                "' (expected half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric or "
                "tf_half_pixel_for_nn)");
  ctx.check(one_of(nearest, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}),
            "unknown nearest_mode " + quote(nearest) + " (expected round_prefer_floor, round_prefer_ceil, floor or ceil)");
  ctx.check(mode == "nearest" || is_floating_point(ctx.input_type(0)),
            "mode " + quote(mode) + " interpolates and needs a floating-point input, got " +
                std::string(to_string(ctx.input_type(0))) + "; insert a Cast");
}

// A given, non-empty optional input.
bool given(const ShapeContext& ctx, int i) {
  if (!ctx.has_input(i)) return false;
  return ctx.input_dims(i).volume() > 0;
}

void infer_resize(ShapeContext& ctx) {
  check_modes(ctx);
  const Dims& x = ctx.input_dims(0);
  const bool has_scales = given(ctx, 1), has_sizes = given(ctx, 2);
  ctx.check(has_scales != has_sizes, has_scales ? "give either scales (input 1) or sizes (input 2), not both"
                                                : "needs scales (input 1) or sizes (input 2)");
  Dims out = x;
  if (has_scales) {
    const HostTensor& t = ctx.required_value(1);
    ctx.check(is_floating_point(t.type()), std::string("input 1 (scales) must be floating-point, got ") + to_string(t.type()));
    const std::vector<double> scales = t.to_double();
    ctx.check(static_cast<int>(scales.size()) == x.rank(),
              "scales has " + std::to_string(scales.size()) + " values but the input " + x.to_string() + " has rank " +
                  std::to_string(x.rank()));
    for (int i = 0; i < x.rank(); ++i) {
      const double s = scales[static_cast<size_t>(i)];
      ctx.check(s > 0 && std::isfinite(s), "scales must be positive and finite, got " + std::to_string(s) +
                                               " for axis " + std::to_string(i));
      // The scale is a float32 in ONNX; ONNX Runtime multiplies in float.
      const float scaled = std::floor(static_cast<float>(x[i]) * static_cast<float>(s));
      // 2^63 is the first float beyond int64 (converting it would be undefined).
      ctx.check(scaled < 9223372036854775808.0f, "scale " + std::to_string(s) + " of axis " + std::to_string(i) +
                                                     " gives an extent that does not fit in 64 bits");
      out[i] = static_cast<int64_t>(scaled);
    }
  } else {
    const HostTensor& t = ctx.required_value(2);
    ctx.check(t.type() == DataType::kInt64 || t.type() == DataType::kInt32,
              std::string("input 2 (sizes) must be int64, got ") + to_string(t.type()));
    const std::vector<int64_t> sizes = t.to_int64();
    ctx.check(static_cast<int>(sizes.size()) == x.rank(),
              "sizes has " + std::to_string(sizes.size()) + " values but the input " + x.to_string() + " has rank " +
                  std::to_string(x.rank()));
    for (int i = 0; i < x.rank(); ++i) {
      ctx.check(sizes[static_cast<size_t>(i)] >= 0, "sizes must be >= 0");
      out[i] = sizes[static_cast<size_t>(i)];
    }
  }
  for (int i = 0; i < x.rank(); ++i) {
    ctx.check(out[i] == 0 || x[i] > 0, "cannot resize axis " + std::to_string(i) + " of extent 0 to " +
                                           std::to_string(out[i]));
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerResize, 1, 3, 1,
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
    "sizes or floor(in * scales)."}.with_traits({.channels_last = true}));

}  // namespace kiln
