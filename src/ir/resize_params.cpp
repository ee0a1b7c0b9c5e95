// ResizeParams decoding and Resize's size rules (see resize_params.h).
#include "src/ir/resize_params.h"

#include <cmath>
#include <string>

#include "kiln/error.h"
#include "src/ir/enum_names.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

// The names of `mode`, for decoding and for messages.
const EnumNames<InterpolationMode> kModes = {{"nearest", InterpolationMode::kNearest},
                                             {"linear", InterpolationMode::kLinear},
                                             {"cubic", InterpolationMode::kCubic}};

}  // namespace

const char* to_string(InterpolationMode mode) { return name_in(kModes, mode); }

ResizeParams ResizeParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ResizeParams p;
  p.mode = r.get_enum<InterpolationMode>("mode", kModes);
  const char* ctm = "coordinate_transformation_mode";
  if (r.get_string(ctm) == "tf_crop_and_resize") {
    r.fail(ctm, "is \"tf_crop_and_resize\", which needs an roi input that kiln's Resize does not take");
  }
  p.coord = r.get_enum<ResizeCoordMode>(ctm, {{"half_pixel", ResizeCoordMode::kHalfPixel},
                                              {"half_pixel_symmetric", ResizeCoordMode::kHalfPixelSymmetric},
                                              {"pytorch_half_pixel", ResizeCoordMode::kPytorchHalfPixel},
                                              {"align_corners", ResizeCoordMode::kAlignCorners},
                                              {"asymmetric", ResizeCoordMode::kAsymmetric},
                                              {"tf_half_pixel_for_nn", ResizeCoordMode::kTfHalfPixelForNn}});
  p.nearest =
      r.get_enum<ResizeNearestMode>("nearest_mode", {{"round_prefer_floor", ResizeNearestMode::kRoundPreferFloor},
                                                     {"round_prefer_ceil", ResizeNearestMode::kRoundPreferCeil},
                                                     {"floor", ResizeNearestMode::kFloor},
                                                     {"ceil", ResizeNearestMode::kCeil}});
  p.cubic_a = r.get_float("cubic_coeff_a");
  p.exclude_outside = r.get_bool("exclude_outside");
  return p;
}

Dims resize_output_dims(const Dims& x, const std::vector<double>& scales, const std::vector<int64_t>& sizes) {
  if (scales.empty() == sizes.empty()) {
    throw Error(scales.empty() ? "needs scales (input 1) or sizes (input 2)"
                               : "give either scales (input 1) or sizes (input 2), not both");
  }
  Dims out = x;
  if (!scales.empty()) {
    if (static_cast<int>(scales.size()) != x.rank()) {
      throw Error("scales has " + std::to_string(scales.size()) + " values but the input " + x.to_string() +
                  " has rank " + std::to_string(x.rank()));
    }
    for (int i = 0; i < x.rank(); ++i) {
      const double s = scales[static_cast<size_t>(i)];
      if (!(s > 0 && std::isfinite(s))) {
        throw Error("scales must be positive and finite, got " + std::to_string(s) + " for axis " + std::to_string(i));
      }
      // The scale is a float32 in ONNX; ONNX Runtime multiplies in float.
      const float scaled = std::floor(static_cast<float>(x[i]) * static_cast<float>(s));
      // 2^63 is the first float beyond int64 (converting it would be undefined).
      if (!(scaled < 9223372036854775808.0f)) {
        throw Error("scale " + std::to_string(s) + " of axis " + std::to_string(i) +
                    " gives an extent that does not fit in 64 bits");
      }
      out[i] = static_cast<int64_t>(scaled);
    }
  } else {
    if (static_cast<int>(sizes.size()) != x.rank()) {
      throw Error("sizes has " + std::to_string(sizes.size()) + " values but the input " + x.to_string() +
                  " has rank " + std::to_string(x.rank()));
    }
    for (int i = 0; i < x.rank(); ++i) {
      if (sizes[static_cast<size_t>(i)] < 0) throw Error("sizes must be >= 0");
      out[i] = sizes[static_cast<size_t>(i)];
    }
  }
  for (int i = 0; i < x.rank(); ++i) {
    if (out[i] != 0 && x[i] == 0) {
      throw Error("cannot resize axis " + std::to_string(i) + " of extent 0 to " + std::to_string(out[i]));
    }
  }
  return out;
}

std::vector<ResizeAxis> resize_axes(const Dims& x, const Dims& y, const std::vector<double>& scales) {
  if (x.rank() != y.rank()) throw Error("Resize: input and output ranks differ");
  const bool given = !scales.empty();
  if (given && static_cast<int>(scales.size()) != x.rank()) throw Error("Resize: scales must have one value per axis");
  std::vector<ResizeAxis> axes(static_cast<size_t>(x.rank()));
  for (int i = 0; i < x.rank(); ++i) {
    ResizeAxis& a = axes[static_cast<size_t>(i)];
    a.in = x[i];
    a.out = y[i];
    a.scale = given ? static_cast<float>(scales[static_cast<size_t>(i)])
                    : static_cast<float>(y[i]) / static_cast<float>(x[i]);
    a.resized_len = given ? static_cast<double>(a.scale) * static_cast<double>(a.in) : static_cast<double>(a.out);
  }
  return axes;
}

}  // namespace kiln
