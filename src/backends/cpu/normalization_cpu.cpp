// CPU reference kernels of the normalization layers: Normalization (modes layer, instance,
// group, mvn, lp) and LRN. Every mode of Normalization is "statistics over a set of axes of a
// view of x": the mode only picks the view and the axes (group mode views [N, C, ...] as
// [N, G, C/G * spatial]). Statistics are computed in double with two passes (mean, then the
// mean squared deviation), so the reference does not lose precision on large means.
//
// The "rows" tactic runs layer mode over contiguous float32 rows (transformers' LayerNorm).
//
// Layout: dense row-major (TensorFormat::kLinear); no alignment is assumed.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "kiln/error.h"
#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/normalization_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"

namespace kiln {
namespace {

int64_t product(const Dims& dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// Where scale/bias values of an element come from: per channel (axis 1) or broadcast to x.
struct Affine {
  const TensorView* scale = nullptr;
  const TensorView* bias = nullptr;
  bool per_channel = false;
  int64_t channels = 1, inner = 1;  // per channel: c = (flat / inner) % channels
  std::vector<int64_t> scale_strides, bias_strides;

  template <typename T>
  double apply(double v, int64_t flat, const Dims& x) const {
    if (scale) v *= static_cast<double>(scale->as<const T>()[index(flat, x, scale_strides)]);
    if (bias) v += static_cast<double>(bias->as<const T>()[index(flat, x, bias_strides)]);
    return v;
  }
  int64_t index(int64_t flat, const Dims& x, const std::vector<int64_t>& strides) const {
    return per_channel ? (flat / inner) % channels : cpu::broadcast_offset(flat, x, strides);
  }
};

const TensorView* optional_input(const KernelContext& ctx, size_t i) {
  return i < ctx.inputs.size() && ctx.inputs[i].data != nullptr ? &ctx.inputs[i] : nullptr;
}

template <typename T>
void moments_normalize(const KernelContext& ctx, const NormalizationParams& params) {
  const Dims& x_dims = ctx.inputs[0].dims;
  // The view of x whose reduced axes one statistics group spans (shared with shape inference).
  const NormStatsView stats = normalization_stats_view(params, x_dims);
  const Dims view_dims = Dims::from(stats.dims);
  const std::vector<bool>& reduced = stats.reduced;
  const double epsilon = params.epsilon;
  const bool mvn = params.mode == NormalizationMode::kMvn;
  const bool normalize_variance = !mvn || params.normalize_variance;

  Affine affine;
  affine.scale = optional_input(ctx, 1);
  affine.bias = optional_input(ctx, 2);
  affine.per_channel = params.per_channel_affine();
  if (affine.per_channel) {
    affine.channels = x_dims[1];
    affine.inner = product(x_dims, 2, x_dims.rank());
  } else {
    if (affine.scale) affine.scale_strides = cpu::broadcast_strides(affine.scale->dims, x_dims);
    if (affine.bias) affine.bias_strides = cpu::broadcast_strides(affine.bias->dims, x_dims);
  }

  const auto strides = row_major_strides(view_dims);
  Dims keep, red_dims;
  std::vector<int64_t> red_strides;
  for (int i = 0; i < view_dims.rank(); ++i) {
    const bool r = reduced[static_cast<size_t>(i)];
    keep.push_back(r ? 1 : view_dims[i]);
    if (r) {
      red_dims.push_back(view_dims[i]);
      red_strides.push_back(strides[static_cast<size_t>(i)]);
    }
  }
  std::vector<int64_t> offsets(static_cast<size_t>(red_dims.volume()));
  for (size_t j = 0; j < offsets.size(); ++j)
    offsets[j] = cpu::broadcast_offset(static_cast<int64_t>(j), red_dims, red_strides);
  const auto count = static_cast<int64_t>(offsets.size());

  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  float* mean_out = ctx.outputs.size() > 1 ? ctx.outputs[1].as<float>() : nullptr;
  float* inv_std_out = ctx.outputs.size() > 2 ? ctx.outputs[2].as<float>() : nullptr;
  cpu::parallel_for(
      keep.volume(), ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t g = begin; g < end; ++g) {
          const int64_t base = cpu::broadcast_offset(g, keep, strides);
          double sum = 0.0;
          for (int64_t j = 0; j < count; ++j) sum += static_cast<double>(x[base + offsets[static_cast<size_t>(j)]]);
          const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
          double sq = 0.0;
          for (int64_t j = 0; j < count; ++j) {
            const double d = static_cast<double>(x[base + offsets[static_cast<size_t>(j)]]) - mean;
            sq += d * d;
          }
          const double var = count > 0 ? sq / static_cast<double>(count) : 0.0;
          const double inv = !normalize_variance ? 1.0
                             : mvn               ? 1.0 / (std::sqrt(var) + epsilon)
                                                 : 1.0 / std::sqrt(var + epsilon);
          for (int64_t j = 0; j < count; ++j) {
            const int64_t flat = base + offsets[static_cast<size_t>(j)];
            const double v = (static_cast<double>(x[flat]) - mean) * inv;
            y[flat] = static_cast<T>(affine.apply<T>(v, flat, x_dims));
          }
          if (mean_out) mean_out[g] = static_cast<float>(mean);
          if (inv_std_out) inv_std_out[g] = static_cast<float>(inv);
        }
      },
      1);
}

// Lp normalization along one axis: y = x / ||x||_p; a zero norm gives zeros (as ONNX Runtime).
template <typename T>
void lp_normalize(const KernelContext& ctx, const NormalizationParams& params) {
  const Dims& d = ctx.inputs[0].dims;
  const int axis = normalized_axis_or_throw(params.axis, d.rank());
  const int64_t p = params.p;
  const int64_t outer = product(d, 0, axis), n = d[axis], inner = product(d, axis + 1, d.rank());
  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      double norm = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = static_cast<double>(x[base + j * inner]);
        norm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2) norm = std::sqrt(norm);
      for (int64_t j = 0; j < n; ++j) {
        y[base + j * inner] = static_cast<T>(norm == 0.0 ? 0.0 : static_cast<double>(x[base + j * inner]) / norm);
      }
    }
  }
}

class NormalizationReference : public Kernel {
 public:
  explicit NormalizationReference(const NormalizationParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "Normalization", {
      if (params_.mode == NormalizationMode::kLp)
        lp_normalize<T>(ctx, params_);
      else
        moments_normalize<T>(ctx, params_);
    });
  }

 private:
  NormalizationParams params_;
};

// ---- LRN ------------------------------------------------------------------------------------

// y = x / (bias + alpha / size * sum of x^2 over the channels [c - floor((size-1)/2),
// c + ceil((size-1)/2)] clipped to [0, C)) ^ beta.
template <typename T>
void lrn(const LrnParams& params, const KernelContext& ctx) {
  const int64_t size = params.size;
  const double alpha = params.alpha, beta = params.beta, bias = params.bias;
  const Dims& d = ctx.inputs[0].dims;
  const int64_t n_batch = d[0], channels = d[1], inner = product(d, 2, d.rank());
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  cpu::parallel_for(
      n_batch * channels, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t nc = begin; nc < end; ++nc) {
          const int64_t n = nc / channels, c = nc % channels;
          const int64_t lo = std::max<int64_t>(0, c - before), hi = std::min<int64_t>(channels - 1, c + after);
          for (int64_t i = 0; i < inner; ++i) {
            double sum = 0.0;
            for (int64_t k = lo; k <= hi; ++k) {
              const double v = static_cast<double>(x[(n * channels + k) * inner + i]);
              sum += v * v;
            }
            const int64_t at = nc * inner + i;
            y[at] = static_cast<T>(static_cast<double>(x[at]) /
                                   std::pow(bias + alpha / static_cast<double>(size) * sum, beta));
          }
        }
      },
      1);
}

class LrnRef : public Kernel {
 public:
  explicit LrnRef(const LrnParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "LRN", lrn<T>(params_, ctx));
  }

 private:
  LrnParams params_;
};

// ---- "rows": layer normalization of float32 rows ---------------------------------------------
// Layer mode normalizes the trailing axes axis..rank-1, which in linear memory are rows of D
// contiguous elements: one pass of float loops per row (sum and sum of squared deviations in
// double, as the reference, then a vectorizable float loop; with AVX2 + FMA the same in AVX2
// registers, layer_norm_row_avx2), scale and bias read as one [D] row
// (any shape of volume D that broadcasts to the trailing axes). Rows run in parallel only when
// there is enough work for the threads' start-up to pay (transformer layers of 16 x 128 run on
// one thread).
bool layer_rows_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  const NormalizationParams& p = params_of<NormalizationParams>(layer);
  if (p.mode != NormalizationMode::kLayer || inputs.empty() || inputs[0].type != DataType::kFloat32) return false;
  if (layer.num_outputs() > 0 && layer.output(0)->format() != TensorFormat::kLinear) return false;
  for (const TensorDesc& d : inputs) {
    if (d.present && (d.type != DataType::kFloat32 || d.format != TensorFormat::kLinear)) return false;
  }
  // Scale and bias must be one row: every dim before the normalized ones is 1 (checked again
  // at run time against the actual dims, since x may be dynamic here).
  return true;
}

// Whether `d` (scale or bias) is one row of the trailing `count` elements of x.
bool is_trailing_row(const Dims& d, const Dims& x, int axis) {
  // It must span every normalized axis (a [D_last] bias against [.., D1, D_last] broadcasts
  // along D1 and is not one row), with extents of 1 before them.
  if (d.rank() > x.rank() || x.rank() - d.rank() > axis) return false;
  const int offset = x.rank() - d.rank();
  for (int i = 0; i < d.rank(); ++i) {
    const int xi = i + offset;
    if (xi < axis ? d[i] != 1 : d[i] != x[xi]) return false;
  }
  return true;
}

// Sum over a row in double, of x (shift = 0 and squares = false) or of (x - shift)^2: eight
// independent partial sums (a fixed order, so results do not depend on the machine) that the
// compiler vectorizes, where one running sum is a chain of dependent additions.
double row_sum(const float* x, int64_t d, double shift, bool squares) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    for (int k = 0; k < 8; ++k) {
      const double v = static_cast<double>(x[j + k]) - shift;
      acc[k] += squares ? v * v : v;
    }
  }
  double total = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; j < d; ++j) {
    const double v = static_cast<double>(x[j]) - shift;
    total += squares ? v * v : v;
  }
  return total;
}

#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN

// row_sum with AVX2: the floats widened to double, 16 per step in four accumulators of 4 lanes.
// row_sum's loop compiled for AVX2 gained 10%; this is 3x faster than row_sum (a 128 x 128 layer
// normalization 18 -> 6 us, one thread; bert_tiny has five).
template <bool kSquares>
double row_sum_avx2(const float* x, int64_t d, double shift) {
  const __m256d sh = _mm256_set1_pd(shift);
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    const __m256 u = _mm256_loadu_ps(x + j), w = _mm256_loadu_ps(x + j + 8);
    const __m256d v0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(u)), sh);
    const __m256d v1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(u, 1)), sh);
    const __m256d v2 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(w)), sh);
    const __m256d v3 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)), sh);
    if constexpr (kSquares) {
      a0 = _mm256_fmadd_pd(v0, v0, a0);
      a1 = _mm256_fmadd_pd(v1, v1, a1);
      a2 = _mm256_fmadd_pd(v2, v2, a2);
      a3 = _mm256_fmadd_pd(v3, v3, a3);
    } else {
      a0 = _mm256_add_pd(a0, v0);
      a1 = _mm256_add_pd(a1, v1);
      a2 = _mm256_add_pd(a2, v2);
      a3 = _mm256_add_pd(a3, v3);
    }
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
  double total = (t[0] + t[1]) + (t[2] + t[3]);
  for (; j < d; ++j) {
    const double v = static_cast<double>(x[j]) - shift;
    total += kSquares ? v * v : v;
  }
  return total;
}

// One row, y = (x - mean) / sqrt(var + epsilon) * g + b (g, b optional); returns mean and 1 / std.
void layer_norm_row_avx2(const float* x, float* y, int64_t d, const float* g, const float* b, double epsilon,
                         float* mean_out, float* inv_out) {
  const double mean = d > 0 ? row_sum_avx2<false>(x, d, 0.0) / static_cast<double>(d) : 0.0;
  const double var = d > 0 ? row_sum_avx2<true>(x, d, mean) / static_cast<double>(d) : 0.0;
  const auto m = static_cast<float>(mean), s = static_cast<float>(1.0 / std::sqrt(var + epsilon));
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s), one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256 n = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv), sv);
    const __m256 gv = g ? _mm256_loadu_ps(g + j) : one, bv = b ? _mm256_loadu_ps(b + j) : zero;
    _mm256_storeu_ps(y + j, _mm256_fmadd_ps(n, gv, bv));
  }
  for (; j < d; ++j) y[j] = (x[j] - m) * s * (g ? g[j] : 1.0f) + (b ? b[j] : 0.0f);
  *mean_out = m;
  *inv_out = s;
}

KILN_ISA_END
#endif

class LayerNormRows : public Kernel {
 public:
  explicit LayerNormRows(const NormalizationParams& p) : params_(p) {}
  void execute(const KernelContext& ctx) override {
    const TensorView& xv = ctx.inputs[0];
    const Dims& x_dims = xv.dims;
    const int rank = x_dims.rank();
    const int axis = static_cast<int>(params_.axis < 0 ? params_.axis + rank : params_.axis);
    const TensorView* scale = optional_input(ctx, 1);
    const TensorView* bias = optional_input(ctx, 2);
    if (axis < 0 || axis > rank || (scale && !is_trailing_row(scale->dims, x_dims, axis)) ||
        (bias && !is_trailing_row(bias->dims, x_dims, axis))) {
      moments_normalize<float>(ctx, params_);  // the general case
      return;
    }
    const int64_t rows = product(x_dims, 0, axis), d = product(x_dims, axis, rank);
    const float* x = xv.as<const float>();
    float* y = ctx.outputs[0].as<float>();
    const float* g = scale ? scale->as<const float>() : nullptr;
    const float* b = bias ? bias->as<const float>() : nullptr;
    float* mean_out = ctx.outputs.size() > 1 ? ctx.outputs[1].as<float>() : nullptr;
    float* inv_std_out = ctx.outputs.size() > 2 ? ctx.outputs[2].as<float>() : nullptr;
    const double epsilon = params_.epsilon;
    const bool avx2 = cpu::has_avx2_fma();
    cpu::parallel_for(
        rows, ctx.num_threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const float* xr = x + r * d;
            float* yr = y + r * d;
#if defined(__x86_64__) && defined(__GNUC__)
            if (avx2) {
              float m = 0, s = 0;
              layer_norm_row_avx2(xr, yr, d, g, b, epsilon, &m, &s);
              if (mean_out) mean_out[r] = m;
              if (inv_std_out) inv_std_out[r] = s;
              continue;
            }
#endif
            const double mean = d > 0 ? row_sum(xr, d, 0.0, false) / static_cast<double>(d) : 0.0;
            const double var = d > 0 ? row_sum(xr, d, mean, true) / static_cast<double>(d) : 0.0;
            const double inv = 1.0 / std::sqrt(var + epsilon);
            const auto m = static_cast<float>(mean), s = static_cast<float>(inv);
            if (g && b) {
              for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * s * g[j] + b[j];
            } else if (g) {
              for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * s * g[j];
            } else if (b) {
              for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * s + b[j];
            } else {
              for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * s;
            }
            if (mean_out) mean_out[r] = m;
            if (inv_std_out) inv_std_out[r] = s;
          }
        },
        std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)));
  }

 private:
  NormalizationParams params_;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerNormalization, "rows", 10, layer_rows_supports,
    [](const Layer& layer) { return std::make_unique<LayerNormRows>(params_of<NormalizationParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerNormalization, "reference", 0, nullptr, [](const Layer& layer) {
      return std::make_unique<NormalizationReference>(params_of<NormalizationParams>(layer));
    }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerLRN, "reference", 0, nullptr, [](const Layer& layer) {
                                   return std::make_unique<LrnRef>(params_of<LrnParams>(layer));
                                 }});

}  // namespace kiln
