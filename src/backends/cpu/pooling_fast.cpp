// "fast" CPU tactic for 2-D max pooling on linear (NCHW) float32 tensors, the pooling of most
// CNN classifiers and detectors (SqueezeNet's ceil-mode 3x3/2, YOLO's SPPF 5x5/1). oneDNN 2.6
// pools plain NCHW tensors with a slow generic implementation, so this direct kernel wins by
// an order of magnitude there. Each (n, c) plane is independent; windows are clipped to the
// input (padding never wins a max), which also covers ceil_mode's partial last window.
// Channels-last (NHWC) tensors, which the layout pass gives convolution regions, take a second
// loop: each output pixel is the element-wise max of its window's C-vectors, a loop over
// contiguous channels that the compiler vectorizes. oneDNN 2.6's own NHWC max pooling is 2.5x
// slower than that on SqueezeNet's first pool (64 channels, 111x111 -> 55x55, one AVX2 thread).
// x and y share one format. Global average pooling (either format) has a loop of its own below,
// taken in builds without oneDNN.
#include <algorithm>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/pool_params.h"

namespace kiln {
namespace {

struct Pool2d {
  int64_t kh, kw, sh, sw, ph, pw;
};

// The window of x's shape (pool_geometry: the padding and sizes shape inference uses).
Pool2d window_of(const PoolParams& params, const Dims& x) {
  const PoolGeometry g = pool_geometry(params, x);
  return Pool2d{g.kernel.at(0), g.kernel.at(1), g.stride.at(0), g.stride.at(1), g.pad_begin.at(0), g.pad_begin.at(1)};
}

bool global_average(const PoolParams& p) { return p.global && p.mode == PoolingType::kAverage; }

bool supports(const Layer& l, const std::vector<TensorDesc>& in) {
  if (in.empty() || in[0].type != DataType::kFloat32) return false;
  const TensorFormat y_format = l.num_outputs() > 0 ? l.output(0)->format() : TensorFormat::kLinear;
  if (in[0].format != y_format) return false;
  const PoolParams& p = params_of<PoolParams>(l);
  if (global_average(p)) {
#if KILN_HAVE_ONEDNN
    return false;  // oneDNN's: MobileNetV3's ten at batch 1 took 21 us in all, 25 us with this loop
#else
    return in[0].dims.rank() >= 3 && in[0].dims.rank() <= 5;  // else the reference kernel (1.1 ms)
#endif
  }
  if (in[0].dims.rank() != 4 || !p.is_max() || p.global || p.kernel.size() != 2) return false;
  for (int64_t d : p.window.dilations) {
    if (d != 1) return false;
  }
  return true;
}

// NHWC: one work item is one output row (n, oh); a NaN in a window sticks (v != v picks it, and
// nothing compares greater than a NaN afterwards). The row loop is compiled for the baseline and
// for AVX2 (twice the vector width), chosen at run time.
#define KILN_POOL_ROWS(suffix)                                                                                     \
  void max_pool_rows_##suffix(const float* src, float* dst, int64_t b, int64_t e, int64_t C, int64_t H, int64_t W, \
                              int64_t OH, int64_t OW, const Pool2d& p) {                                           \
    for (int64_t row = b; row < e; ++row) {                                                                        \
      const int64_t n = row / OH, oh = row % OH;                                                                   \
      const int64_t h0 = std::max<int64_t>(oh * p.sh - p.ph, 0);                                                   \
      const int64_t h1 = std::min<int64_t>(oh * p.sh - p.ph + p.kh, H);                                            \
      const float* in = src + n * H * W * C;                                                                       \
      for (int64_t ow = 0; ow < OW; ++ow) {                                                                        \
        float* __restrict out = dst + (row * OW + ow) * C;                                                         \
        const int64_t w0 = std::max<int64_t>(ow * p.sw - p.pw, 0);                                                 \
        const int64_t w1 = std::min<int64_t>(ow * p.sw - p.pw + p.kw, W);                                          \
        std::fill(out, out + C, std::numeric_limits<float>::lowest());                                             \
        for (int64_t h = h0; h < h1; ++h) {                                                                        \
          for (int64_t w = w0; w < w1; ++w) {                                                                      \
            const float* __restrict v = in + (h * W + w) * C;                                                      \
            for (int64_t c = 0; c < C; ++c) out[c] = (v[c] > out[c] || v[c] != v[c]) ? v[c] : out[c];              \
          }                                                                                                        \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }
KILN_POOL_ROWS(baseline)
#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN
KILN_POOL_ROWS(avx2)

// AVX2, C a multiple of 8: each output pixel's channels in blocks of up to NB 8-float vectors
// kept in registers over the whole window (one load per window element and vector, one store per
// output), with a NaN mask beside them. SqueezeNet's first pool (64 channels, 111x111 -> 55x55)
// took 0.22 ms on 2 threads with the loop above, which re-reads and re-writes the output vector
// at every window element.
template <int NB>
inline void max_pool_block_avx2(const float* in, float* out, int64_t c0, int64_t C, int64_t W, int64_t h0, int64_t h1,
                                int64_t w0, int64_t w1) {
  __m256 acc[NB], nan[NB];
  const float* first = in + (h0 * W + w0) * C + c0;
  for (int k = 0; k < NB; ++k) {
    acc[k] = _mm256_loadu_ps(first + 8 * k);
    nan[k] = _mm256_cmp_ps(acc[k], acc[k], _CMP_UNORD_Q);
  }
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t w = (h == h0 ? w0 + 1 : w0); w < w1; ++w) {
      const float* v = in + (h * W + w) * C + c0;
      for (int k = 0; k < NB; ++k) {
        const __m256 x = _mm256_loadu_ps(v + 8 * k);
        acc[k] = _mm256_max_ps(acc[k], x);
        nan[k] = _mm256_or_ps(nan[k], _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      }
    }
  }
  const __m256 qnan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (int k = 0; k < NB; ++k) _mm256_storeu_ps(out + c0 + 8 * k, _mm256_blendv_ps(acc[k], qnan, nan[k]));
}

void max_pool_rows_avx2_c8(const float* src, float* dst, int64_t b, int64_t e, int64_t C, int64_t H, int64_t W,
                           int64_t OH, int64_t OW, const Pool2d& p) {
  for (int64_t row = b; row < e; ++row) {
    const int64_t n = row / OH, oh = row % OH;
    const int64_t h0 = std::max<int64_t>(oh * p.sh - p.ph, 0);
    const int64_t h1 = std::min<int64_t>(oh * p.sh - p.ph + p.kh, H);
    const float* in = src + n * H * W * C;
    for (int64_t ow = 0; ow < OW; ++ow) {
      float* out = dst + (row * OW + ow) * C;
      const int64_t w0 = std::max<int64_t>(ow * p.sw - p.pw, 0);
      const int64_t w1 = std::min<int64_t>(ow * p.sw - p.pw + p.kw, W);
      if (h0 >= h1 || w0 >= w1) {  // a window wholly in the padding
        std::fill(out, out + C, std::numeric_limits<float>::lowest());
        continue;
      }
      int64_t c0 = 0;
      for (; c0 + 32 <= C; c0 += 32) max_pool_block_avx2<4>(in, out, c0, C, W, h0, h1, w0, w1);
      for (; c0 < C; c0 += 8) max_pool_block_avx2<1>(in, out, c0, C, W, h0, h1, w0, w1);
    }
  }
}
KILN_ISA_END
#else
void max_pool_rows_avx2(const float* src, float* dst, int64_t b, int64_t e, int64_t C, int64_t H, int64_t W, int64_t OH,
                        int64_t OW, const Pool2d& p) {
  max_pool_rows_baseline(src, dst, b, e, C, H, W, OH, OW, p);
}
void max_pool_rows_avx2_c8(const float* src, float* dst, int64_t b, int64_t e, int64_t C, int64_t H, int64_t W,
                           int64_t OH, int64_t OW, const Pool2d& p) {
  max_pool_rows_baseline(src, dst, b, e, C, H, W, OH, OW, p);
}
#endif
#undef KILN_POOL_ROWS

void execute_channels_last(const KernelContext& ctx, const Pool2d& p) {
  const Dims& x = ctx.inputs[0].dims;
  const Dims& y = ctx.outputs[0].dims;
  const int64_t C = x[1], H = x[2], W = x[3], OH = y[2], OW = y[3];
  const float* src = ctx.inputs[0].as<float>();
  float* dst = ctx.outputs[0].as<float>();
  const auto rows = !cpu::has_avx2_fma() ? &max_pool_rows_baseline
                    : C % 8 == 0         ? &max_pool_rows_avx2_c8
                                         : &max_pool_rows_avx2;
  cpu::parallel_for(
      x[0] * OH, ctx.num_threads, [&](int64_t b, int64_t e) { rows(src, dst, b, e, C, H, W, OH, OW, p); },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(OW * C, 1)));
}

void run_max_pool(const KernelContext& ctx, const Pool2d& p) {
  if (ctx.inputs[0].format == TensorFormat::kChannelsLast) {
    execute_channels_last(ctx, p);
    return;
  }
  const Dims& x = ctx.inputs[0].dims;
  const Dims& y = ctx.outputs[0].dims;
  const int64_t H = x[2], W = x[3], OH = y[2], OW = y[3];
  const float* src = ctx.inputs[0].as<float>();
  float* dst = ctx.outputs[0].as<float>();
  const int64_t planes = x[0] * x[1];
  cpu::parallel_for(
      planes, ctx.num_threads,
      [&](int64_t b, int64_t e) {
        for (int64_t plane = b; plane < e; ++plane) {
          const float* in = src + plane * H * W;
          float* out = dst + plane * OH * OW;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t h0 = std::max<int64_t>(oh * p.sh - p.ph, 0);
            const int64_t h1 = std::min<int64_t>(oh * p.sh - p.ph + p.kh, H);
            for (int64_t ow = 0; ow < OW; ++ow) {
              const int64_t w0 = std::max<int64_t>(ow * p.sw - p.pw, 0);
              const int64_t w1 = std::min<int64_t>(ow * p.sw - p.pw + p.kw, W);
              float m = std::numeric_limits<float>::lowest();
              bool nan = false;
              for (int64_t h = h0; h < h1; ++h) {
                const float* row = in + h * W;
                for (int64_t w = w0; w < w1; ++w) {
                  const float v = row[w];
                  nan |= v != v;
                  m = v > m ? v : m;
                }
              }
              out[oh * OW + ow] = nan ? std::numeric_limits<float>::quiet_NaN() : m;
            }
          }
        }
      },
      1);
}

// Global average pooling (squeeze-excitation blocks, classifier heads): y[n, c] = the mean of
// x[n, c, ...] over the S spatial elements. Channels-last memory is [N][S][C]: the C-vector rows
// are summed into the output row (a loop over contiguous channels the compiler vectorizes);
// linear memory is [N][C][S]: each plane is one contiguous sum, in 8 partial sums. Work items:
// images x blocks of 64 channels.
void run_global_average(const KernelContext& ctx) {
  const Dims& x = ctx.inputs[0].dims;
  const int64_t N = x[0], C = x[1];
  int64_t S = 1;
  for (int i = 2; i < x.rank(); ++i) S *= x[i];
  const float* src = ctx.inputs[0].as<float>();
  float* dst = ctx.outputs[0].as<float>();  // [N, C, 1, ...] in either format: [N][C]
  if (N == 0 || C == 0) return;
  const float scale = S > 0 ? 1.0f / static_cast<float>(S) : std::numeric_limits<float>::quiet_NaN();
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
  const bool channels_last = ctx.inputs[0].format == TensorFormat::kChannelsLast;
  cpu::parallel_for(
      N * blocks, ctx.num_threads,
      [&](int64_t b, int64_t e) {
        for (int64_t item = b; item < e; ++item) {
          const int64_t n = item / blocks, c0 = (item % blocks) * kBlock, c1 = std::min(C, c0 + kBlock);
          float* __restrict out = dst + n * C;
          if (channels_last) {
            float acc[kBlock] = {};
            const float* in = src + n * S * C;
            for (int64_t s = 0; s < S; ++s) {
              const float* __restrict row = in + s * C + c0;
              for (int64_t c = 0; c < c1 - c0; ++c) acc[c] += row[c];
            }
            for (int64_t c = c0; c < c1; ++c) out[c] = acc[c - c0] * scale;
          } else {
            for (int64_t c = c0; c < c1; ++c) {
              const float* __restrict plane = src + (n * C + c) * S;
              float part[8] = {};
              int64_t s = 0;
              for (; s + 8 <= S; s += 8) {
                for (int k = 0; k < 8; ++k) part[k] += plane[s + k];
              }
              float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
              for (; s < S; ++s) sum += plane[s];
              out[c] = sum * scale;
            }
          }
        }
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(S * kBlock, 1)));
}

class PoolingFast : public Kernel {
 public:
  explicit PoolingFast(const PoolParams& params) : params_(params) {}
  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    if (!global_average(params_)) window_ = window_of(params_, inputs.at(0).dims);
  }
  void execute(const KernelContext& ctx) override {
    if (global_average(params_)) {
      run_global_average(ctx);
    } else {
      run_max_pool(ctx, window_);
    }
  }

 private:
  PoolParams params_;
  Pool2d window_{};
};

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerPooling, "fast", 150, supports, [](const Layer& layer) {
                                   return std::make_unique<PoolingFast>(params_of<PoolParams>(layer));
                                 }});

}  // namespace
}  // namespace kiln
