// CUDA kernels (tactic "cuda") of GridSample and RoiAlign (docs/layers.md), matching the CPU
// reference (sampling_cpu.cpp) step by step:
//  - GridSample: each normalized coordinate is denormalized (align_corners or not), rounded half
//    to even for "nearest", moved inside for "border" (clamped; not for cubic, as ONNX Runtime)
//    or "reflection" (folded at the borders), then 1 / 2 / 4 taps per spatial axis ("nearest",
//    "linear", "cubic" with Keys a = -0.75) are fetched with the padding rule (zero outside,
//    clamped, or reflected) and blended. 1 to 3 spatial axes (rank 3..5). One thread per output
//    element, output-ordered (the spatial position innermost, so stores coalesce; the grid is
//    re-read per channel through the cache).
//  - RoiAlign: bins of roi_bin_grid bilinear samples with Detectron's clamping; "avg" averages
//    the samples, "max" takes the max over samples of the max of each sample's four weighted
//    corners (ONNX Runtime's definition). One thread per output element; each recomputes its
//    bin's sample positions (cheap next to the loads). A batch index outside [0, N) (checked by
//    the reference, which throws) writes 0 here; it is checked in prepare() when host-known.
// Coordinate math uses the IEEE-rounded intrinsics (__fmul_rn, ...) so that --use_fast_math
// (the library's flags) cannot contract or approximate it: floor/rounding decisions then match
// the reference exactly. float32 / float16 compute in float, float64 in double.
//
// Layout: kLinear only.
#include <cuda_fp16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/rounded_math_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/sampling_params.h"

namespace kiln::cuda {
namespace {

// Element types and IEEE-rounded arithmetic: rounded_math_cuda.cuh.

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

// ---- GridSample ----------------------------------------------------------------------------------

constexpr int kMaxGridAxes = 3;
enum : int { kPadZeros, kPadBorder, kPadReflection };
enum : int { kInterpNearest, kInterpLinear, kInterpCubic };

struct GridArgs {
  int k = 0;  // spatial axes
  int interp = kInterpLinear, padding = kPadZeros;
  bool align = false;
  int64_t count = 0, channels = 1, in_plane = 1, out_plane = 1;
  int64_t size[kMaxGridAxes] = {};
  int64_t in_stride[kMaxGridAxes] = {};
};

template <typename C>
__device__ C reflect(C x, C lo, C hi) {
  const C range = sub_rn(hi, lo);
  if (range <= 0) return lo;
  if (x < lo) {
    const C dx = sub_rn(lo, x);
    const auto n = static_cast<int64_t>(div_rn(dx, range));
    const C r = sub_rn(dx, mul_rn(static_cast<C>(n), range));
    return n % 2 == 0 ? add_rn(lo, r) : sub_rn(hi, r);
  }
  if (x > hi) {
    const C dx = sub_rn(x, hi);
    const auto n = static_cast<int64_t>(div_rn(dx, range));
    const C r = sub_rn(dx, mul_rn(static_cast<C>(n), range));
    return n % 2 == 0 ? sub_rn(hi, r) : add_rn(lo, r);
  }
  return x;
}

template <typename C>
__device__ void grid_cubic_coeffs(C t, C* w) {
  const C a = static_cast<C>(-0.75);
  const C x = t < 0 ? -t : t;
  w[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  w[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  w[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  w[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

// Tap i along an axis of extent n after the padding rule; -1 reads zero.
template <typename C>
__device__ int64_t grid_tap(const GridArgs& p, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (p.padding == kPadZeros) return -1;
  if (p.padding == kPadBorder) return clamp64(i, 0, n - 1);
  const C lo = p.align ? C(0) : C(-0.5);
  const C hi = p.align ? static_cast<C>(n - 1) : sub_rn(static_cast<C>(n), C(0.5));
  return clamp64(static_cast<int64_t>(reflect<C>(static_cast<C>(i), lo, hi)), 0, n - 1);
}

template <typename T>
__global__ void grid_sample_kernel(const T* __restrict__ x, const T* __restrict__ grid, T* __restrict__ y, GridArgs p) {
  using C = typename Elem<T>::C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < p.count; e += step) {
    const int64_t o = e % p.out_plane, nc = e / p.out_plane;
    const int64_t n = nc / p.channels;
    const T* gp = grid + (n * p.out_plane + o) * p.k;
    int ntaps[kMaxGridAxes];
    int64_t idx[kMaxGridAxes][4];
    C wt[kMaxGridAxes][4];
    for (int d = 0; d < p.k; ++d) {
      const int64_t extent = p.size[d];
      const C n_d = static_cast<C>(extent);
      const C v = Elem<T>::load(gp[p.k - 1 - d]);  // the grid lists x (the last axis) first
      C c = p.align ? mul_rn(div_rn(add_rn(v, C(1)), C(2)), sub_rn(n_d, C(1)))
                    : div_rn(sub_rn(mul_rn(add_rn(v, C(1)), n_d), C(1)), C(2));
      if (p.interp == kInterpNearest) c = round_even(c);
      const C lo = p.align ? C(0) : C(-0.5);
      const C hi = p.align ? sub_rn(n_d, C(1)) : sub_rn(n_d, C(0.5));
      if (c < lo || c > hi) {
        if (p.padding == kPadBorder && p.interp != kInterpCubic) {
          const C top = sub_rn(n_d, C(1));
          c = c < C(0) ? C(0) : (top < c ? top : c);
        }
        if (p.padding == kPadReflection) c = reflect<C>(c, lo, hi);
      }
      if (p.interp == kInterpNearest) {
        ntaps[d] = 1;
        idx[d][0] = grid_tap<C>(p, static_cast<int64_t>(c), extent);
        wt[d][0] = C(1);
        continue;
      }
      const C f = floor_of(c);
      const auto i0 = static_cast<int64_t>(f);
      const C frac = sub_rn(c, f);
      if (p.interp == kInterpLinear) {
        ntaps[d] = 2;
        idx[d][0] = grid_tap<C>(p, i0, extent);
        idx[d][1] = grid_tap<C>(p, i0 + 1, extent);
        wt[d][0] = sub_rn(C(1), frac);
        wt[d][1] = frac;
      } else {
        ntaps[d] = 4;
        for (int m = 0; m < 4; ++m) idx[d][m] = grid_tap<C>(p, i0 - 1 + m, extent);
        grid_cubic_coeffs<C>(frac, wt[d]);
      }
    }
    int combos = 1;
    for (int d = 0; d < p.k; ++d) combos *= ntaps[d];
    const T* plane = x + nc * p.in_plane;
    C acc = 0;
    for (int m = 0; m < combos; ++m) {
      int rest = m;
      int64_t off = 0;
      C weight = 1;
      bool zero = false;
      for (int d = p.k - 1; d >= 0; --d) {
        const int j = rest % ntaps[d];
        rest /= ntaps[d];
        const int64_t i = idx[d][j];
        if (i < 0) zero = true;
        off += i * p.in_stride[d];
        weight *= wt[d][j];
      }
      if (!zero) acc += weight * Elem<T>::load(plane[off]);
    }
    y[e] = Elem<T>::store(acc);
  }
}

class GridSampleCuda : public Kernel {
 public:
  explicit GridSampleCuda(const GridSampleParams& params) : params_(params) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    p_ = GridArgs{};
    p_.k = x.rank() - 2;
    if (p_.k < 1 || p_.k > kMaxGridAxes) throw Error("GridSample (CUDA): input rank " + std::to_string(x.rank()));
    p_.interp = params_.mode == InterpolationMode::kNearest ? kInterpNearest
                : params_.mode == InterpolationMode::kCubic ? kInterpCubic
                                                            : kInterpLinear;
    p_.padding = params_.padding == GridSamplePadding::kBorder       ? kPadBorder
                 : params_.padding == GridSamplePadding::kReflection ? kPadReflection
                                                                     : kPadZeros;
    p_.align = params_.align_corners;
    p_.channels = x[1];
    int64_t stride = 1;
    for (int d = p_.k - 1; d >= 0; --d) {
      p_.size[d] = x[d + 2];
      p_.in_stride[d] = stride;
      stride *= x[d + 2];
    }
    p_.in_plane = stride;
    p_.out_plane = 1;
    for (int d = 0; d < p_.k; ++d) p_.out_plane *= y[d + 2];
    p_.count = y.volume();
    type_ = inputs[0].type;
  }

  void execute(const KernelContext& ctx) override {
    if (p_.count == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    if (type_ == DataType::kFloat32) return launch<float>(ctx, stream);
    if (type_ == DataType::kFloat16) return launch<__half>(ctx, stream);
    if (type_ == DataType::kFloat64) return launch<double>(ctx, stream);
    throw Error(std::string("GridSample (CUDA): unsupported type ") + to_string(type_));
  }

 private:
  template <typename T>
  void launch(const KernelContext& ctx, cudaStream_t stream) const {
    grid_sample_kernel<T><<<grid_for(p_.count), kBlock, 0, stream>>>(
        ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.outputs[0].as<T>(), p_);
    KILN_CUDA_CHECK_LAUNCH();
  }

  GridSampleParams params_;
  GridArgs p_;
  DataType type_ = DataType::kFloat32;
};

bool sampling_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kFloat64;
}

bool linear_io(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (layer.num_outputs() < 1 || !layer.output(0) || layer.output(0)->format() != TensorFormat::kLinear) return false;
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

bool grid_sample_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !linear_io(layer, inputs)) return false;
  if (!sampling_float(inputs[0].type) || inputs[1].type != inputs[0].type) return false;
  const int k = inputs[0].dims.rank() - 2;
  if (k < 1 || k > kMaxGridAxes || inputs[1].dims.rank() != k + 2) return false;
  return true;
}

// ---- RoiAlign ------------------------------------------------------------------------------------

struct RoiArgs {
  int64_t count = 0, batch = 0, channels = 0, height = 0, width = 0, ph_n = 1, pw_n = 1;
  int64_t ratio = 0;
  double scale = 1;
  bool max_mode = false, half_pixel = true, idx64 = true;
};

template <typename T>
__global__ void roi_align_kernel(const T* __restrict__ x, const T* __restrict__ rois,
                                 const void* __restrict__ batch_idx, T* __restrict__ y, RoiArgs p) {
  using C = typename Elem<T>::C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < p.count; e += step) {
    const int64_t pw = e % p.pw_n;
    const int64_t ph = (e / p.pw_n) % p.ph_n;
    const int64_t rc = e / (p.pw_n * p.ph_n);
    const int64_t c = rc % p.channels, r = rc / p.channels;
    const int64_t b = p.idx64 ? static_cast<const int64_t*>(batch_idx)[r]
                              : static_cast<int64_t>(static_cast<const int32_t*>(batch_idx)[r]);
    if (b < 0 || b >= p.batch) {
      y[e] = Elem<T>::store(C(0));
      continue;
    }
    const C scale = static_cast<C>(p.scale);
    const C offset = p.half_pixel ? C(0.5) : C(0);
    const C x1 = sub_rn(mul_rn(Elem<T>::load(rois[r * 4 + 0]), scale), offset);
    const C y1 = sub_rn(mul_rn(Elem<T>::load(rois[r * 4 + 1]), scale), offset);
    const C x2 = sub_rn(mul_rn(Elem<T>::load(rois[r * 4 + 2]), scale), offset);
    const C y2 = sub_rn(mul_rn(Elem<T>::load(rois[r * 4 + 3]), scale), offset);
    C roi_w = sub_rn(x2, x1), roi_h = sub_rn(y2, y1);
    if (!p.half_pixel) {
      roi_w = roi_w < C(1) ? C(1) : roi_w;
      roi_h = roi_h < C(1) ? C(1) : roi_h;
    }
    const C phn = static_cast<C>(p.ph_n), pwn = static_cast<C>(p.pw_n);
    const C bin_h = div_rn(roi_h, phn), bin_w = div_rn(roi_w, pwn);
    const int64_t grid_h = p.ratio > 0 ? p.ratio : static_cast<int64_t>(ceil_of(div_rn(roi_h, phn)));
    const int64_t grid_w = p.ratio > 0 ? p.ratio : static_cast<int64_t>(ceil_of(div_rn(roi_w, pwn)));
    const int64_t prod = grid_h * grid_w;
    const C count = static_cast<C>(prod > 1 ? prod : 1);
    const C gh = static_cast<C>(grid_h), gw = static_cast<C>(grid_w);
    const C fh = static_cast<C>(p.height), fw = static_cast<C>(p.width);
    const T* plane = x + (b * p.channels + c) * p.height * p.width;
    C acc = 0;
    bool first = true;
    for (int64_t iy = 0; iy < grid_h; ++iy) {
      // y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h, in the reference's order.
      const C yy = add_rn(add_rn(y1, mul_rn(static_cast<C>(ph), bin_h)),
                          div_rn(mul_rn(add_rn(static_cast<C>(iy), C(0.5)), bin_h), gh));
      for (int64_t ix = 0; ix < grid_w; ++ix) {
        C xx = add_rn(add_rn(x1, mul_rn(static_cast<C>(pw), bin_w)),
                      div_rn(mul_rn(add_rn(static_cast<C>(ix), C(0.5)), bin_w), gw));
        C yv = yy;
        int64_t pos[4] = {0, 0, 0, 0};
        C w[4] = {0, 0, 0, 0};
        if (!(yv < -1 || yv > fh || xx < -1 || xx > fw)) {
          yv = yv < C(0) ? C(0) : yv;
          xx = xx < C(0) ? C(0) : xx;
          int64_t y_lo = static_cast<int64_t>(yv), x_lo = static_cast<int64_t>(xx), y_hi, x_hi;
          if (y_lo >= p.height - 1) {
            y_hi = y_lo = p.height - 1;
            yv = static_cast<C>(y_lo);
          } else {
            y_hi = y_lo + 1;
          }
          if (x_lo >= p.width - 1) {
            x_hi = x_lo = p.width - 1;
            xx = static_cast<C>(x_lo);
          } else {
            x_hi = x_lo + 1;
          }
          const C ly = sub_rn(yv, static_cast<C>(y_lo)), lx = sub_rn(xx, static_cast<C>(x_lo));
          const C hy = sub_rn(C(1), ly), hx = sub_rn(C(1), lx);
          pos[0] = y_lo * p.width + x_lo;
          pos[1] = y_lo * p.width + x_hi;
          pos[2] = y_hi * p.width + x_lo;
          pos[3] = y_hi * p.width + x_hi;
          w[0] = mul_rn(hy, hx);
          w[1] = mul_rn(hy, lx);
          w[2] = mul_rn(ly, hx);
          w[3] = mul_rn(ly, lx);
        }
        // A sample outside the map keeps weights 0 at position 0, as the reference's.
        const C v0 = mul_rn(w[0], Elem<T>::load(plane[pos[0]])), v1 = mul_rn(w[1], Elem<T>::load(plane[pos[1]]));
        const C v2 = mul_rn(w[2], Elem<T>::load(plane[pos[2]])), v3 = mul_rn(w[3], Elem<T>::load(plane[pos[3]]));
        if (p.max_mode) {
          C v = v0;
          v = v < v1 ? v1 : v;  // std::max(v, next)
          v = v < v2 ? v2 : v;
          v = v < v3 ? v3 : v;
          acc = first ? v : (acc < v ? v : acc);
        } else {
          acc = add_rn(acc, add_rn(add_rn(add_rn(v0, v1), v2), v3));
        }
        first = false;
      }
    }
    y[e] = Elem<T>::store(p.max_mode ? acc : div_rn(acc, count));
  }
}

class RoiAlignCuda : public Kernel {
 public:
  explicit RoiAlignCuda(const RoiAlignParams& params) : params_(params) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    p_ = RoiArgs{};
    p_.count = y.volume();
    p_.batch = x[0];
    p_.channels = x[1];
    p_.height = x[2];
    p_.width = x[3];
    p_.ph_n = y[2];
    p_.pw_n = y[3];
    p_.ratio = params_.sampling_ratio;
    p_.scale = params_.spatial_scale;
    p_.max_mode = params_.max_mode;
    p_.half_pixel = params_.half_pixel;
    p_.idx64 = inputs.at(2).type == DataType::kInt64;
    type_ = inputs[0].type;
    if (const HostTensor* bi = inputs[2].value) {
      const std::vector<int64_t> v = bi->to_int64();
      for (size_t r = 0; r < v.size(); ++r) {
        if (v[r] < 0 || v[r] >= x[0]) {
          throw Error("RoiAlign layer '" + layer.name() + "': batch index " + std::to_string(v[r]) + " of roi " +
                      std::to_string(r) + " is out of range for a batch of " + std::to_string(x[0]));
        }
      }
    }
  }

  void execute(const KernelContext& ctx) override {
    if (p_.count == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    if (type_ == DataType::kFloat32) return launch<float>(ctx, stream);
    if (type_ == DataType::kFloat16) return launch<__half>(ctx, stream);
    if (type_ == DataType::kFloat64) return launch<double>(ctx, stream);
    throw Error(std::string("RoiAlign (CUDA): unsupported type ") + to_string(type_));
  }

 private:
  template <typename T>
  void launch(const KernelContext& ctx, cudaStream_t stream) const {
    roi_align_kernel<T><<<grid_for(p_.count), kBlock, 0, stream>>>(
        ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.inputs[2].data, ctx.outputs[0].as<T>(), p_);
    KILN_CUDA_CHECK_LAUNCH();
  }

  RoiAlignParams params_;
  RoiArgs p_;
  DataType type_ = DataType::kFloat32;
};

bool roi_align_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 3 || !linear_io(layer, inputs)) return false;
  if (!sampling_float(inputs[0].type) || inputs[1].type != inputs[0].type) return false;
  if (inputs[2].type != DataType::kInt32 && inputs[2].type != DataType::kInt64) return false;
  return inputs[0].dims.rank() == 4 && inputs[1].dims.rank() == 2;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerGridSample, "cuda", 100, grid_sample_supports,
    [](const Layer& layer) { return std::make_unique<GridSampleCuda>(params_of<GridSampleParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerRoiAlign, "cuda", 100, roi_align_supports,
    [](const Layer& layer) { return std::make_unique<RoiAlignCuda>(params_of<RoiAlignParams>(layer)); }});

}  // namespace kiln::cuda
