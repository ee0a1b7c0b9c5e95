// CPU kernels of Resize (ONNX Resize, opset 11+ semantics, no roi), float math done as ONNX
// Runtime does it so that nearest-neighbour choices agree bit for bit:
//   - the per-axis scale is the `scales` value when given, else float(out) / float(in);
//   - output coordinate x maps to an input coordinate by coordinate_transformation_mode, in float
//     (an axis of scale 1 maps x to x whatever the mode). align_corners and pytorch_half_pixel
//     use the resized length in * scale, which with `scales` may be fractional (ONNX's reference
//     and backend tests; ONNX Runtime uses the floored output extent there instead);
//   - nearest rounds by nearest_mode and clamps into the input;
//   - linear clamps the coordinate into [0, in - 1] and blends the two neighbours;
//   - cubic blends four neighbours floor(x) - 1 .. floor(x) + 2 with Keys' kernel (cubic_coeff_a),
//     clamping indices to the edge, or with exclude_outside dropping outside taps and
//     renormalizing.
// Linear and cubic apply to every axis whose coordinates are not integers (a tensor-product
// kernel: bilinear, trilinear, bicubic, ...).
// "reference": nearest for every data type (it only moves elements), linear/cubic for
// float32/float16/float64 (accumulating in double). "fast": nearest float32 resizing the last two
// axes, parallel over rows, with a special case for exact 2x (the detectors' upsample).
// Layout: kLinear only.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/data_copy.h"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/resize_params.h"

namespace kiln {
namespace {

// x_original of output coordinate x by coordinate_transformation_mode (float math as ONNX
// Runtime); `resized_len` is ResizeAxis::resized_len.
float transform_coord(ResizeCoordMode mode, float x, float s, float out_len, double resized_len, float in_len) {
  switch (mode) {
    case ResizeCoordMode::kHalfPixel:
      return (x + 0.5f) / s - 0.5f;
    case ResizeCoordMode::kHalfPixelSymmetric: {
      const float adjustment = out_len / (s * in_len);
      const float center = in_len / 2;
      const float offset = center * (1 - adjustment);
      return static_cast<float>(offset + (x + 0.5) / s - 0.5);  // in double, as ONNX Runtime
    }
    case ResizeCoordMode::kPytorchHalfPixel:
      return resized_len > 1 ? (x + 0.5f) / s - 0.5f : 0.0f;
    case ResizeCoordMode::kAlignCorners:
      return resized_len == 1 ? 0.0f : static_cast<float>(x * (in_len - 1.0) / (resized_len - 1.0));
    case ResizeCoordMode::kAsymmetric:
      return x / s;
    case ResizeCoordMode::kTfHalfPixelForNn:
      return (x + 0.5f) / s;
  }
  return x;
}

int64_t nearest_index(ResizeNearestMode mode, float x) {
  switch (mode) {
    case ResizeNearestMode::kRoundPreferFloor: {
      const float f = std::floor(x);
      return static_cast<int64_t>(x - f == 0.5f ? f : std::round(x));
    }
    case ResizeNearestMode::kRoundPreferCeil:
      return static_cast<int64_t>(std::round(x));
    case ResizeNearestMode::kFloor:
      return static_cast<int64_t>(std::floor(x));
    case ResizeNearestMode::kCeil:
      return static_cast<int64_t>(std::ceil(x));
  }
  return 0;
}

// ONNX Runtime leaves an axis of scale 1 untouched whatever the mode (it matters for
// tf_half_pixel_for_nn, which would otherwise shift by half a pixel).
float source_coord(const ResizeParams& p, int64_t j, const ResizeAxis& a) {
  if (a.scale == 1.0f) return static_cast<float>(j);
  return transform_coord(p.coord, static_cast<float>(j), a.scale, static_cast<float>(a.out), a.resized_len,
                         static_cast<float>(a.in));
}

// The shared per-axis geometry (resize_axes): the given `scales` (input 1, when non-empty), else
// out / in.
std::vector<ResizeAxis> axes_of(const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  std::vector<double> scales;
  if (ctx.inputs.size() > 1 && ctx.inputs[1].data && ctx.inputs[1].count() > 0) {
    const TensorView& v = ctx.inputs[1];
    for (int64_t i = 0; i < v.count(); ++i) {
      KILN_DISPATCH_FLOAT(v.type, "Resize scales", scales.push_back(static_cast<double>(v.as<const T>()[i])));
    }
  }
  return resize_axes(x, y, scales);
}

// Nearest source index per output index of every axis, scaled to element offsets.
std::vector<std::vector<int64_t>> nearest_maps(const ResizeParams& p, const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  const auto axes = axes_of(ctx);
  const auto stride = row_major_strides(x);
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(x.rank()));
  for (int k = 0; k < x.rank(); ++k) {
    const auto u = static_cast<size_t>(k);
    for (int64_t j = 0; j < y[k]; ++j) {
      const float c = source_coord(p, j, axes[u]);
      const int64_t i = std::clamp<int64_t>(nearest_index(p.nearest, c), 0, x[k] - 1);
      maps[u].push_back(i * stride[u]);
    }
  }
  return maps;
}

struct Tap {
  int64_t offset;  // elements
  double weight;
};
using AxisTaps = std::vector<std::vector<Tap>>;  // [output index] -> taps

std::array<float, 4> cubic_coeffs(float s, float a) {
  return {((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a, ((a + 2) * s - (a + 3)) * s * s + 1,
          ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1,
          ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a};
}

// Interpolation taps of every axis (zero weights dropped, so untouched axes cost nothing).
std::vector<AxisTaps> interpolation_taps(const ResizeParams& a, const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  const auto axes = axes_of(ctx);
  const auto stride = row_major_strides(x);
  const bool cubic = a.mode == InterpolationMode::kCubic;
  std::vector<AxisTaps> taps(static_cast<size_t>(x.rank()));
  for (int k = 0; k < x.rank(); ++k) {
    const auto u = static_cast<size_t>(k);
    const int64_t n = x[k];
    for (int64_t j = 0; j < y[k]; ++j) {
      float c = source_coord(a, j, axes[u]);
      std::vector<Tap> t;
      if (!cubic) {
        c = std::clamp(c, 0.0f, static_cast<float>(n - 1));
        const int64_t i1 = std::min<int64_t>(static_cast<int64_t>(c), n - 1), i2 = std::min<int64_t>(i1 + 1, n - 1);
        const float s = c - static_cast<float>(i1);
        t.push_back({i1 * stride[u], i1 == i2 ? 1.0 : 1.0 - s});
        if (i1 != i2) t.push_back({i2 * stride[u], s});
      } else {
        const float f = std::floor(c);
        const auto w = cubic_coeffs(c - f, static_cast<float>(a.cubic_a));
        double sum = 0;
        for (int m = 0; m < 4; ++m) {
          const int64_t i = static_cast<int64_t>(f) - 1 + m;
          const bool inside = i >= 0 && i < n;
          if (a.exclude_outside && !inside) continue;
          t.push_back({std::clamp<int64_t>(i, 0, n - 1) * stride[u], w[static_cast<size_t>(m)]});
          sum += w[static_cast<size_t>(m)];
        }
        if (a.exclude_outside && sum != 0) {
          for (Tap& tap : t) tap.weight /= sum;
        }
      }
      t.erase(std::remove_if(t.begin(), t.end(), [](const Tap& tap) { return tap.weight == 0; }), t.end());
      taps[u].push_back(std::move(t));
    }
  }
  return taps;
}

double load(float v) { return v; }
double load(double v) { return v; }
double load(half v) { return static_cast<float>(v); }
template <typename T>
T store(double v) {
  return static_cast<T>(static_cast<float>(v));
}
template <>
double store<double>(double v) {
  return v;
}

// For each row of the output (all axes but the last fixed), the outer taps are combined once
// into (offset, weight) pairs; each element then adds the inner axis' taps.
template <typename T>
void interpolate(const T* src, T* dst, const Dims& out, const std::vector<AxisTaps>& taps, int num_threads) {
  const int r = out.rank();
  if (out.volume() == 0) return;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t n = out[r - 1], rows = out.volume() / n;
  const AxisTaps& inner = taps[static_cast<size_t>(r - 1)];
  cpu::parallel_for(
      rows, num_threads,
      [&](int64_t begin, int64_t end) {
        std::vector<Tap> combos, next;
        for (int64_t row = begin; row < end; ++row) {
          combos.assign(1, Tap{0, 1.0});
          int64_t rest = row;
          for (int k = r - 2; k >= 0; --k) {
            const int64_t c = rest % out[k];
            rest /= out[k];
            next.clear();
            for (const Tap& a : combos) {
              for (const Tap& b : taps[static_cast<size_t>(k)][static_cast<size_t>(c)]) {
                next.push_back({a.offset + b.offset, a.weight * b.weight});
              }
            }
            combos.swap(next);
          }
          T* d = dst + row * n;
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (const Tap& a : combos) {
              for (const Tap& b : inner[static_cast<size_t>(j)])
                acc += a.weight * b.weight * load(src[a.offset + b.offset]);
            }
            d[j] = store<T>(acc);
          }
        }
      },
      16);
}

class ResizeRef : public Kernel {
 public:
  explicit ResizeRef(const ResizeParams& params) : attrs_(params) {}

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    if (x.dims.rank() != y.dims.rank()) throw Error("Resize: input and output ranks differ");
    if (attrs_.is_nearest()) {
      cpu::table_copy(x, y, nearest_maps(attrs_, ctx), nullptr, ctx.num_threads, "Resize");
      return;
    }
    const auto taps = interpolation_taps(attrs_, ctx);
    KILN_DISPATCH_FLOAT(x.type, "Resize", interpolate<T>(x.as<const T>(), y.as<T>(), y.dims, taps, ctx.num_threads));
  }

 private:
  ResizeParams attrs_;
};

bool supports_resize_ref(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].format != TensorFormat::kLinear) return false;
  return params_of<ResizeParams>(layer).is_nearest() || is_floating_point(inputs[0].type);
}

// Nearest float32 over the last two axes: each output row copies (or, for exact 2x, doubles)
// one input row; a row whose source equals the previous row's is a memcpy of that row. In
// channels-last (NHWC) memory, rank 4: each output pixel copies its source pixel's C values (an
// upsampling inside a CPU channels-last region, TinyYolo's neck, then needs no Reformat on either
// side).
class ResizeNearestFast : public Kernel {
 public:
  explicit ResizeNearestFast(const ResizeParams& params) : attrs_(params) {}

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    const int r = x.dims.rank();
    auto maps = nearest_maps(attrs_, ctx);
    if (x.format == TensorFormat::kChannelsLast) {
      channels_last(x, y, maps, ctx.num_threads);
      return;
    }
    bool leading_identity = r >= 2;
    const auto stride = row_major_strides(x.dims);
    for (int k = 0; leading_identity && k < r - 2; ++k) {
      leading_identity = x.dims[k] == y.dims[k];
      for (int64_t j = 0; leading_identity && j < y.dims[k]; ++j) {
        leading_identity = maps[static_cast<size_t>(k)][static_cast<size_t>(j)] == j * stride[static_cast<size_t>(k)];
      }
    }
    if (!leading_identity) {
      cpu::table_copy(x, y, maps, nullptr, ctx.num_threads, "Resize");
      return;
    }
    const int64_t h_in = x.dims[r - 2], w_in = x.dims[r - 1], h_out = y.dims[r - 2], w_out = y.dims[r - 1];
    const int64_t rows = y.count() / std::max<int64_t>(w_out, 1);
    if (y.count() == 0) return;
    const std::vector<int64_t>& hmap = maps[static_cast<size_t>(r - 2)];  // offsets (rows * w_in)
    const std::vector<int64_t>& wmap = maps[static_cast<size_t>(r - 1)];
    bool doubles = w_out == 2 * w_in;
    for (int64_t j = 0; doubles && j < w_out; ++j) doubles = wmap[static_cast<size_t>(j)] == j / 2;
    const float* src = x.as<const float>();
    float* dst = y.as<float>();
    cpu::parallel_for(
        rows, ctx.num_threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) {
            const int64_t plane = row / h_out, oy = row % h_out;
            float* d = dst + row * w_out;
            if (row > begin && oy > 0 && hmap[static_cast<size_t>(oy)] == hmap[static_cast<size_t>(oy - 1)]) {
              std::memcpy(d, d - w_out, static_cast<size_t>(w_out) * sizeof(float));
              continue;
            }
            const float* s = src + plane * h_in * w_in + hmap[static_cast<size_t>(oy)];
            if (doubles) {
              for (int64_t i = 0; i < w_in; ++i) d[2 * i] = d[2 * i + 1] = s[i];
            } else {
              for (int64_t j = 0; j < w_out; ++j) d[j] = s[wmap[static_cast<size_t>(j)]];
            }
          }
        },
        std::max<int64_t>(1, 8192 / std::max<int64_t>(w_out, 1)));
  }

 private:
  // x and y [N, C, H, W] stored [N][H][W][C]; `maps` as nearest_maps gives them (offsets in the
  // linear order, turned back into indices here).
  static void channels_last(const TensorView& x, const TensorView& y, const std::vector<std::vector<int64_t>>& maps,
                            int threads) {
    if (y.count() == 0) return;
    const auto stride = row_major_strides(x.dims);
    std::vector<std::vector<int64_t>> index(4);
    for (size_t k = 0; k < 4; ++k) {
      for (int64_t offset : maps[k]) index[k].push_back(offset / std::max<int64_t>(stride[k], 1));
    }
    const int64_t c_in = x.dims[1], h_in = x.dims[2], w_in = x.dims[3];
    const int64_t c_out = y.dims[1], h_out = y.dims[2], w_out = y.dims[3];
    bool same_channels = c_in == c_out;
    for (int64_t c = 0; same_channels && c < c_out; ++c) same_channels = index[1][static_cast<size_t>(c)] == c;
    const float* src = x.as<const float>();
    float* dst = y.as<float>();
    const int64_t row = w_out * c_out;  // one output image row
    cpu::parallel_for(
        y.dims[0] * h_out, threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t n = r / h_out, oy = r % h_out;
            const int64_t iy = index[2][static_cast<size_t>(oy)];
            float* d = dst + r * row;
            if (r > begin && oy > 0 && iy == index[2][static_cast<size_t>(oy - 1)]) {
              std::memcpy(d, d - row, static_cast<size_t>(row) * sizeof(float));
              continue;
            }
            const float* s = src + ((index[0][static_cast<size_t>(n)] * h_in + iy) * w_in) * c_in;
            for (int64_t ox = 0; ox < w_out; ++ox) {
              const float* p = s + index[3][static_cast<size_t>(ox)] * c_in;
              float* q = d + ox * c_out;
              if (same_channels) {
                std::memcpy(q, p, static_cast<size_t>(c_out) * sizeof(float));
              } else {
                for (int64_t c = 0; c < c_out; ++c) q[c] = p[index[1][static_cast<size_t>(c)]];
              }
            }
          }
        },
        std::max<int64_t>(1, 8192 / std::max<int64_t>(row, 1)));
  }

  ResizeParams attrs_;
};

bool supports_resize_fast(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].type != DataType::kFloat32 || !params_of<ResizeParams>(layer).is_nearest()) {
    return false;
  }
  const TensorFormat y_format = layer.num_outputs() > 0 ? layer.output(0)->format() : TensorFormat::kLinear;
  if (inputs[0].format != y_format) return false;
  if (inputs[0].format == TensorFormat::kChannelsLast) return inputs[0].dims.rank() == 4;
  return inputs[0].format == TensorFormat::kLinear && inputs[0].dims.rank() >= 2;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerResize, "reference", 0, supports_resize_ref,
    [](const Layer& layer) { return std::make_unique<ResizeRef>(params_of<ResizeParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerResize, "fast", 10, supports_resize_fast,
    [](const Layer& layer) { return std::make_unique<ResizeNearestFast>(params_of<ResizeParams>(layer)); }});

}  // namespace kiln
