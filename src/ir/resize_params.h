// The parameters of Resize (ONNX Resize, opset 11+ semantics without the roi input): decoded once
// from a layer's attributes (ResizeParams::decode, through the schema's with_params) and the size
// rules that shape inference and every Resize kernel (CPU reference and fast, CUDA) share: the
// output dims from `scales` or `sizes` (resize_output_dims) and, per axis, the scale and the
// resized length the coordinate transformation uses (resize_axes). The coordinate math itself
// stays with the kernels (resize_cpu.cpp, resize_cuda.cu: the CUDA one rounds as the CPU's).
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/network.h"

namespace kiln {

// `mode` is the public InterpolationMode (include/kiln/network.h). The coordinate transformation
// and nearest modes are strings in the public ResizeDesc; their enums are internal.
const char* to_string(InterpolationMode mode);  // "nearest", "linear", "cubic" (GridSample's names too)
enum class ResizeCoordMode : int32_t {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn
};
enum class ResizeNearestMode : int32_t { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

struct ResizeParams {
  InterpolationMode mode = InterpolationMode::kNearest;
  ResizeCoordMode coord = ResizeCoordMode::kHalfPixel;
  ResizeNearestMode nearest = ResizeNearestMode::kRoundPreferFloor;
  double cubic_a = -0.75;        // cubic_coeff_a
  bool exclude_outside = false;  // cubic: drop taps outside the input and renormalize

  bool is_nearest() const { return mode == InterpolationMode::kNearest; }
  // Throws kiln::Error naming the layer and the attribute (tf_crop_and_resize: it needs an roi
  // input, which kiln's Resize does not take).
  static ResizeParams decode(const Layer& layer);
};

// The output dims of resizing x by `scales` (one per axis, floor(in * scale) in float as ONNX
// Runtime) or to `sizes` (one per axis); exactly one of them is non-empty. Throws kiln::Error
// with the reason (without a layer name; callers add theirs).
Dims resize_output_dims(const Dims& x, const std::vector<double>& scales, const std::vector<int64_t>& sizes);

// One axis of a resize from x to y: `scale` is the given `scales` value (as a float), else
// float(out) / float(in); `resized_len` is in * scale (possibly fractional) when scales were
// given, else the output extent (align_corners and pytorch_half_pixel use it, as ONNX's reference).
struct ResizeAxis {
  int64_t in = 0, out = 0;
  float scale = 1.0f;
  double resized_len = 0.0;
  // An axis whose coordinates map j to j (kernels may copy it through).
  bool identity() const { return scale == 1.0f && in == out; }
};
// Per axis of x (y has x's rank; `scales` is empty or has one value per axis). Throws kiln::Error
// when the ranks or the scale count disagree.
std::vector<ResizeAxis> resize_axes(const Dims& x, const Dims& y, const std::vector<double>& scales);

}  // namespace kiln
