// CPU reference kernels of GridSample, RoiAlign and MaxRoiPool (docs/layers.md). Each follows
// the ONNX reference implementation (onnx/reference/ops/op_grid_sample.py, op_roi_align.py),
// which matches ONNX Runtime's CPU kernels, step by step:
//  - GridSample: denormalize each coordinate (align_corners or not), round it for "nearest"
//    (half to even), move an out-of-range coordinate inside for "border" (clamp; not for
//    cubic, as ONNX Runtime) and "reflection" (fold at the borders), then interpolate from 1 ("nearest"), 2 ("linear")
//    or 4 ("cubic", Keys a = -0.75) taps per spatial axis, every tap fetched with the padding rule (zeros outside,
//    clamped, or reflected). Any number of spatial axes.
//  - RoiAlign: bins of roi_bin_grid samples, each a bilinear interpolation with the clamping of
//    Detectron; "max" takes the max of the four weighted corners of each sample (ONNX Runtime's
//    definition), "avg" their average.
//  - MaxRoiPool: integer roi corners (round half away from zero), bins floor/ceil-split, max
//    over each bin, 0 for an empty bin.
// Computation in float (double for float64). Layout: kLinear only.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/data_copy.h"
#include "src/backends/kernel.h"
#include "src/backends/params_kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/sampling_params.h"

namespace kiln {
namespace {

template <typename T>
struct ComputeOf {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};

// ---- GridSample --------------------------------------------------------------------------------

enum class Padding { kZeros, kBorder, kReflection };
enum class Interp { kNearest, kLinear, kCubic };

template <typename C>
C reflect(C x, C lo, C hi) {
  const C range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const C dx = lo - x;
    const auto n = static_cast<int64_t>(dx / range);
    const C r = dx - static_cast<C>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const C dx = x - hi;
    const auto n = static_cast<int64_t>(dx / range);
    const C r = dx - static_cast<C>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

template <typename C>
void cubic_coeffs(C t, C* w) {
  constexpr C a = static_cast<C>(-0.75);
  const C x = std::abs(t);
  w[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  w[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  w[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  w[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

struct GridSampleAttrs {
  Interp interp = Interp::kLinear;
  Padding padding = Padding::kZeros;
  bool align_corners = false;
};

GridSampleAttrs grid_sample_attrs(const GridSampleParams& p) {
  GridSampleAttrs a;
  a.interp = p.mode == InterpolationMode::kNearest ? Interp::kNearest
             : p.mode == InterpolationMode::kCubic ? Interp::kCubic
                                                   : Interp::kLinear;
  a.padding = p.padding == GridSamplePadding::kBorder       ? Padding::kBorder
              : p.padding == GridSamplePadding::kReflection ? Padding::kReflection
                                                            : Padding::kZeros;
  a.align_corners = p.align_corners;
  return a;
}

// The taps of one spatial axis: input indices (-1 marks a zero tap) and weights.
template <typename C>
struct AxisTaps {
  int n = 0;
  std::array<int64_t, 4> index{};
  std::array<C, 4> weight{};
};

template <typename T>
void grid_sample(const GridSampleParams& params, const KernelContext& ctx) {
  using C = typename ComputeOf<T>::type;
  const GridSampleAttrs at = grid_sample_attrs(params);
  const TensorView& x = ctx.inputs[0];
  const TensorView& grid = ctx.inputs[1];
  const TensorView& y = ctx.outputs[0];
  const int k = x.dims.rank() - 2;
  const int64_t batch = x.dims[0], channels = x.dims[1];
  std::vector<int64_t> size(static_cast<size_t>(k));
  int64_t in_plane = 1, out_plane = 1;
  for (int i = 0; i < k; ++i) {
    size[static_cast<size_t>(i)] = x.dims[i + 2];
    in_plane *= x.dims[i + 2];
    out_plane *= y.dims[i + 2];
  }
  const auto in_stride = row_major_strides(Dims::from(size));
  const T* xin = x.as<const T>();
  const T* g = grid.as<const T>();
  T* out = y.as<T>();

  // Index of tap i along axis d after the padding rule; -1 when it reads zero.
  auto tap_index = [&](int64_t i, int d) -> int64_t {
    const int64_t n = size[static_cast<size_t>(d)];
    if (i >= 0 && i < n) return i;
    switch (at.padding) {
      case Padding::kZeros:
        return -1;
      case Padding::kBorder:
        return std::clamp<int64_t>(i, 0, n - 1);
      case Padding::kReflection: {
        const C lo = at.align_corners ? C(0) : C(-0.5), hi = at.align_corners ? C(n - 1) : C(n) - C(0.5);
        return std::clamp<int64_t>(static_cast<int64_t>(reflect<C>(static_cast<C>(i), lo, hi)), 0, n - 1);
      }
    }
    return -1;
  };

  cpu::parallel_for(
      batch * out_plane, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        std::vector<AxisTaps<C>> taps(static_cast<size_t>(k));
        for (int64_t w = begin; w < end; ++w) {
          const int64_t n = w / out_plane, o = w % out_plane;
          const T* gp = g + w * k;
          for (int d = 0; d < k; ++d) {
            const auto n_d = static_cast<C>(size[static_cast<size_t>(d)]);
            const C v = static_cast<C>(gp[k - 1 - d]);  // the grid lists x (the last axis) first
            C c = at.align_corners ? (v + 1) / 2 * (n_d - 1) : ((v + 1) * n_d - 1) / 2;
            if (at.interp == Interp::kNearest) c = std::nearbyint(c);
            const C lo = at.align_corners ? C(0) : C(-0.5), hi = at.align_corners ? n_d - 1 : n_d - C(0.5);
            if (c < lo || c > hi) {
              // Cubic with border padding clamps each tap, not the coordinate (ONNX Runtime and
              // PyTorch; the ONNX reference implementation clamps both).
              if (at.padding == Padding::kBorder && at.interp != Interp::kCubic) c = std::clamp<C>(c, 0, n_d - 1);
              if (at.padding == Padding::kReflection) c = reflect<C>(c, lo, hi);
            }
            AxisTaps<C>& t = taps[static_cast<size_t>(d)];
            if (at.interp == Interp::kNearest) {
              t.n = 1;
              t.index[0] = tap_index(static_cast<int64_t>(c), d);
              t.weight[0] = 1;
              continue;
            }
            const C f = std::floor(c);
            const auto i0 = static_cast<int64_t>(f);
            if (at.interp == Interp::kLinear) {
              t.n = 2;
              t.index = {tap_index(i0, d), tap_index(i0 + 1, d), 0, 0};
              t.weight = {1 - (c - f), c - f, 0, 0};
            } else {
              t.n = 4;
              t.index = {tap_index(i0 - 1, d), tap_index(i0, d), tap_index(i0 + 1, d), tap_index(i0 + 2, d)};
              cubic_coeffs<C>(c - f, t.weight.data());
            }
          }
          // Sum over every combination of taps (2^k, 4^k or 1).
          int64_t combos = 1;
          for (const auto& t : taps) combos *= t.n;
          for (int64_t ch = 0; ch < channels; ++ch) {
            const T* plane = xin + (n * channels + ch) * in_plane;
            C acc = 0;
            for (int64_t m = 0; m < combos; ++m) {
              int64_t rest = m, off = 0;
              C weight = 1;
              bool zero = false;
              for (int d = k - 1; d >= 0; --d) {
                const AxisTaps<C>& t = taps[static_cast<size_t>(d)];
                const int j = static_cast<int>(rest % t.n);
                rest /= t.n;
                const int64_t idx = t.index[static_cast<size_t>(j)];
                if (idx < 0) zero = true;
                off += idx * in_stride[static_cast<size_t>(d)];
                weight *= t.weight[static_cast<size_t>(j)];
              }
              if (!zero) acc += weight * static_cast<C>(plane[off]);
            }
            out[(n * channels + ch) * out_plane + o] = static_cast<T>(acc);
          }
        }
      },
      64);
}

void grid_sample_execute(const GridSampleParams& params, const KernelContext& ctx) {
  if (ctx.inputs[1].type != ctx.inputs[0].type) {
    throw Error(std::string("GridSample: grid has type ") + to_string(ctx.inputs[1].type) + " but X has " +
                to_string(ctx.inputs[0].type));
  }
  KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "GridSample", grid_sample<T>(params, ctx));
}

// ---- RoiAlign ----------------------------------------------------------------------------------

template <typename C>
struct Sample {
  std::array<int64_t, 4> pos{};
  std::array<C, 4> w{};
};

template <typename T>
void roi_align(const RoiAlignParams& params, const KernelContext& ctx) {
  using C = typename ComputeOf<T>::type;
  const TensorView& x = ctx.inputs[0];
  const TensorView& rois_v = ctx.inputs[1];
  const TensorView& y = ctx.outputs[0];
  const auto batch_idx = cpu::read_ints(ctx.inputs[2], "RoiAlign batch_indices");
  const bool max_mode = params.max_mode;
  const bool half_pixel = params.half_pixel;
  const auto scale = static_cast<C>(params.spatial_scale);
  const int64_t ratio = params.sampling_ratio;
  const int64_t channels = x.dims[1], height = x.dims[2], width = x.dims[3];
  const int64_t ph_n = y.dims[2], pw_n = y.dims[3], num_rois = y.dims[0];
  const T* rois = rois_v.as<const T>();
  const T* xin = x.as<const T>();
  T* out = y.as<T>();

  for (int64_t r = 0; r < num_rois; ++r) {  // checked here: nothing may throw inside the parallel loop
    const int64_t b = batch_idx[static_cast<size_t>(r)];
    if (b < 0 || b >= x.dims[0]) {
      throw Error("RoiAlign: batch index " + std::to_string(b) + " of roi " + std::to_string(r) +
                  " is out of range for a batch of " + std::to_string(x.dims[0]));
    }
  }
  cpu::parallel_for(
      num_rois, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        std::vector<Sample<C>> samples;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t b = batch_idx[static_cast<size_t>(r)];
          const C offset = half_pixel ? C(0.5) : C(0);
          const C x1 = static_cast<C>(rois[r * 4 + 0]) * scale - offset;
          const C y1 = static_cast<C>(rois[r * 4 + 1]) * scale - offset;
          const C x2 = static_cast<C>(rois[r * 4 + 2]) * scale - offset;
          const C y2 = static_cast<C>(rois[r * 4 + 3]) * scale - offset;
          C roi_w = x2 - x1, roi_h = y2 - y1;
          if (!half_pixel) {
            roi_w = std::max<C>(roi_w, 1);
            roi_h = std::max<C>(roi_h, 1);
          }
          const C bin_h = roi_h / static_cast<C>(ph_n), bin_w = roi_w / static_cast<C>(pw_n);
          const int64_t grid_h = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(roi_h / static_cast<C>(ph_n)));
          const int64_t grid_w = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(roi_w / static_cast<C>(pw_n)));
          const C count = static_cast<C>(std::max<int64_t>(grid_h * grid_w, 1));
          // The samples of every bin, shared by all channels.
          samples.assign(static_cast<size_t>(ph_n * pw_n * std::max<int64_t>(grid_h, 0) * std::max<int64_t>(grid_w, 0)),
                         {});
          size_t s = 0;
          for (int64_t ph = 0; ph < ph_n; ++ph) {
            for (int64_t pw = 0; pw < pw_n; ++pw) {
              for (int64_t iy = 0; iy < grid_h; ++iy) {
                const C yy =
                    y1 + static_cast<C>(ph) * bin_h + (static_cast<C>(iy) + C(0.5)) * bin_h / static_cast<C>(grid_h);
                for (int64_t ix = 0; ix < grid_w; ++ix, ++s) {
                  C xx =
                      x1 + static_cast<C>(pw) * bin_w + (static_cast<C>(ix) + C(0.5)) * bin_w / static_cast<C>(grid_w);
                  C yv = yy;
                  Sample<C>& sm = samples[s];
                  if (yv < -1 || yv > static_cast<C>(height) || xx < -1 || xx > static_cast<C>(width))
                    continue;  // zeros
                  yv = std::max<C>(yv, 0);
                  xx = std::max<C>(xx, 0);
                  int64_t y_lo = static_cast<int64_t>(yv), x_lo = static_cast<int64_t>(xx), y_hi, x_hi;
                  if (y_lo >= height - 1) {
                    y_hi = y_lo = height - 1;
                    yv = static_cast<C>(y_lo);
                  } else {
                    y_hi = y_lo + 1;
                  }
                  if (x_lo >= width - 1) {
                    x_hi = x_lo = width - 1;
                    xx = static_cast<C>(x_lo);
                  } else {
                    x_hi = x_lo + 1;
                  }
                  const C ly = yv - static_cast<C>(y_lo), lx = xx - static_cast<C>(x_lo);
                  const C hy = 1 - ly, hx = 1 - lx;
                  sm.pos = {y_lo * width + x_lo, y_lo * width + x_hi, y_hi * width + x_lo, y_hi * width + x_hi};
                  sm.w = {hy * hx, hy * lx, ly * hx, ly * lx};
                }
              }
            }
          }
          const int64_t per_bin = grid_h * grid_w;
          for (int64_t c = 0; c < channels; ++c) {
            const T* plane = xin + (b * channels + c) * height * width;
            T* dst = out + (r * channels + c) * ph_n * pw_n;
            for (int64_t bin = 0; bin < ph_n * pw_n; ++bin) {
              C acc = 0;
              for (int64_t j = 0; j < per_bin; ++j) {
                const Sample<C>& sm = samples[static_cast<size_t>(bin * per_bin + j)];
                if (max_mode) {
                  C v = sm.w[0] * static_cast<C>(plane[sm.pos[0]]);
                  for (int q = 1; q < 4; ++q)
                    v = std::max(v,
                                 sm.w[static_cast<size_t>(q)] * static_cast<C>(plane[sm.pos[static_cast<size_t>(q)]]));
                  acc = j == 0 ? v : std::max(acc, v);
                } else {
                  acc += sm.w[0] * static_cast<C>(plane[sm.pos[0]]) + sm.w[1] * static_cast<C>(plane[sm.pos[1]]) +
                         sm.w[2] * static_cast<C>(plane[sm.pos[2]]) + sm.w[3] * static_cast<C>(plane[sm.pos[3]]);
                }
              }
              dst[bin] = static_cast<T>(max_mode ? acc : acc / count);
            }
          }
        }
      },
      1);
}

void roi_align_execute(const RoiAlignParams& params, const KernelContext& ctx) {
  if (ctx.inputs[1].type != ctx.inputs[0].type) {
    throw Error(std::string("RoiAlign: rois have type ") + to_string(ctx.inputs[1].type) + " but X has " +
                to_string(ctx.inputs[0].type));
  }
  KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "RoiAlign", roi_align<T>(params, ctx));
}

// ---- MaxRoiPool --------------------------------------------------------------------------------

template <typename T>
void max_roi_pool(const MaxRoiPoolParams& params, const KernelContext& ctx) {
  using C = typename ComputeOf<T>::type;
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const T* rois = ctx.inputs[1].as<const T>();
  const auto scale = static_cast<C>(params.spatial_scale);
  const int64_t channels = x.dims[1], height = x.dims[2], width = x.dims[3];
  const int64_t ph_n = y.dims[2], pw_n = y.dims[3];
  const T* xin = x.as<const T>();
  T* out = y.as<T>();
  for (int64_t r = 0; r < y.dims[0]; ++r) {  // checked here: nothing may throw inside the parallel loop
    const C b = static_cast<C>(rois[r * 5]);
    if (!(b >= 0 && b < static_cast<C>(x.dims[0]))) {
      throw Error("MaxRoiPool: batch index " + std::to_string(static_cast<double>(b)) + " of roi " + std::to_string(r) +
                  " is out of range for a batch of " + std::to_string(x.dims[0]));
    }
  }
  cpu::parallel_for(
      y.dims[0] * channels, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          const int64_t r = w / channels, c = w % channels;
          const T* roi = rois + r * 5;
          const auto b = static_cast<int64_t>(static_cast<C>(roi[0]));
          auto corner = [&](int i) { return static_cast<int64_t>(std::round(static_cast<C>(roi[i]) * scale)); };
          const int64_t x1 = corner(1), y1 = corner(2), x2 = corner(3), y2 = corner(4);
          const int64_t roi_h = std::max<int64_t>(y2 - y1 + 1, 1), roi_w = std::max<int64_t>(x2 - x1 + 1, 1);
          const C bin_h = static_cast<C>(roi_h) / static_cast<C>(ph_n),
                  bin_w = static_cast<C>(roi_w) / static_cast<C>(pw_n);
          const T* plane = xin + (b * channels + c) * height * width;
          T* dst = out + w * ph_n * pw_n;
          for (int64_t ph = 0; ph < ph_n; ++ph) {
            const int64_t hs =
                std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<C>(ph) * bin_h)) + y1, 0, height);
            const int64_t he =
                std::clamp<int64_t>(static_cast<int64_t>(std::ceil(static_cast<C>(ph + 1) * bin_h)) + y1, 0, height);
            for (int64_t pw = 0; pw < pw_n; ++pw) {
              const int64_t ws =
                  std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<C>(pw) * bin_w)) + x1, 0, width);
              const int64_t we =
                  std::clamp<int64_t>(static_cast<int64_t>(std::ceil(static_cast<C>(pw + 1) * bin_w)) + x1, 0, width);
              C m = (he <= hs || we <= ws) ? C(0) : -std::numeric_limits<C>::max();
              for (int64_t h = hs; h < he; ++h) {
                for (int64_t ww = ws; ww < we; ++ww) m = std::max(m, static_cast<C>(plane[h * width + ww]));
              }
              dst[ph * pw_n + pw] = static_cast<T>(m);
            }
          }
        }
      },
      1);
}

void max_roi_pool_execute(const MaxRoiPoolParams& params, const KernelContext& ctx) {
  if (ctx.inputs[1].type != ctx.inputs[0].type) {
    throw Error(std::string("MaxRoiPool: rois have type ") + to_string(ctx.inputs[1].type) + " but X has " +
                to_string(ctx.inputs[0].type));
  }
  KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "MaxRoiPool", max_roi_pool<T>(params, ctx));
}

bool linear_only(const Layer&, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerGridSample, "reference", 0, linear_only,
                                 params_kernel<GridSampleParams, grid_sample_execute>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerRoiAlign, "reference", 0, linear_only,
                                 params_kernel<RoiAlignParams, roi_align_execute>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerMaxRoiPool, "reference", 0, linear_only,
                                 params_kernel<MaxRoiPoolParams, max_roi_pool_execute>()});

}  // namespace kiln
