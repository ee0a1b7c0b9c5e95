// "depthwise_avx512" (priority 97) and "depthwise_avx2" (96) of Convolution: a depthwise 2-D
// convolution (one group per channel, one output channel per group: MobileNet's) on channels-last
// float32 tensors, AVX-512F / AVX2 + FMA (chosen at run time; supports() declines elsewhere), for
// builds without oneDNN, where such layers had only the reference kernel (MobileNetV3-small's
// eleven took about 24 of its 27 ms per inference at batch 1 on one Zen 4 thread). With oneDNN
// built in both decline: oneDNN's depthwise kernels run those layers (they were faster than
// depthwise_avx512 in every MobileNetV3 layer: 254 against 314 us in all, Zen 4, 1 thread).
//
// Channels-last memory keeps each pixel's channels contiguous, and a depthwise convolution
// multiplies channel c only by channel c's weights, packed once as [KH][KW][C] (channel fastest,
// like the pixels). depthwise_avx2: per output pixel and block of channels, the products of the
// taps inside the image are summed in registers (32 channels in four accumulators, then 8, then a
// masked tail). depthwise_avx512 (below): per block of 16 channels, four output pixels at a time
// share each weight load. Any kernel size, stride, dilation and padding; bias and the fused
// activation are applied before the one store. Output rows are shared among the context's
// threads.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/activation_avx512.h"
#include "src/backends/cpu/conv_channels_last.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/kernel.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_DEPTHWISE_X86 1
#else
#define KILN_DEPTHWISE_X86 0
#endif

namespace kiln {
namespace {

constexpr const char* kTactic = "depthwise_avx2";
constexpr const char* kTactic512 = "depthwise_avx512";

// A depthwise convolution's sizes for one input shape (k == c).
using DwShape = cpu::Conv2dSizes;

// x [N, C, H, W] with w [C, 1, KH, KW] and group C (one output channel per group).
bool shape_of(const ConvParams& params, const Dims& x, const Dims& w, DwShape* s, std::string* why) {
  ConvGeometry g;
  if (!cpu::conv2d_geometry(params, x, w, &g, why, true)) return false;
  *s = cpu::Conv2dSizes(g);
  return true;
}

// Output row (n, oy)'s kernel rows inside the image [a0, a1), its first input row iy0 (that of
// kernel row 0; may lie above the image), image n's input and the row's output.
struct DwRow {
  int64_t iy0 = 0, a0 = 0, a1 = 0;
  const float* xn = nullptr;
  float* yrow = nullptr;
  DwRow(const DwShape& s, const float* x, float* y, int64_t n, int64_t oy)
      : iy0(oy * s.sh - s.pad_t), a1(s.kh), xn(x + n * s.h * s.w * s.c), yrow(y + (n * s.oh + oy) * s.ow * s.c) {
    while (a0 < a1 && iy0 + a0 * s.dh < 0) ++a0;
    while (a1 > a0 && iy0 + (a1 - 1) * s.dh >= s.h) --a1;
  }
};

#if KILN_DEPTHWISE_X86
KILN_ISA_AVX2_BEGIN

// Output row (n, oy): every pixel, every channel.
void run_row(const DwShape& s, const float* x, const float* wp, const float* bias, float* y, const PostOp& post,
             int64_t n, int64_t oy) {
  const int64_t c = s.c;
  const DwRow row(s, x, y, n, oy);
  const int64_t iy0 = row.iy0, a0 = row.a0, a1 = row.a1;
  const float* xn = row.xn;
  float* yrow = row.yrow;
  const int64_t tail = c % 8;
  const __m256i tail_mask = cpu::avx2::lane_mask(tail);
  for (int64_t ox = 0; ox < s.ow; ++ox) {
    const int64_t ix0 = ox * s.sw - s.pad_l;
    int64_t b0 = 0, b1 = s.kw;
    while (b0 < b1 && ix0 + b0 * s.dw < 0) ++b0;
    while (b1 > b0 && ix0 + (b1 - 1) * s.dw >= s.w) --b1;
    float* out = yrow + ox * c;
    int64_t ch = 0;
    // 32 channels: four independent sums.
    for (; ch + 32 <= c; ch += 32) {
      __m256 s0 = bias ? _mm256_loadu_ps(bias + ch) : _mm256_setzero_ps();
      __m256 s1 = bias ? _mm256_loadu_ps(bias + ch + 8) : _mm256_setzero_ps();
      __m256 s2 = bias ? _mm256_loadu_ps(bias + ch + 16) : _mm256_setzero_ps();
      __m256 s3 = bias ? _mm256_loadu_ps(bias + ch + 24) : _mm256_setzero_ps();
      for (int64_t a = a0; a < a1; ++a) {
        const float* xr = xn + ((iy0 + a * s.dh) * s.w) * c + ch;
        const float* wr = wp + a * s.kw * c + ch;
        for (int64_t b = b0; b < b1; ++b) {
          const float* xp = xr + (ix0 + b * s.dw) * c;
          const float* wb = wr + b * c;
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wb), s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), _mm256_loadu_ps(wb + 8), s1);
          s2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), _mm256_loadu_ps(wb + 16), s2);
          s3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), _mm256_loadu_ps(wb + 24), s3);
        }
      }
      _mm256_storeu_ps(out + ch, cpu::avx2::activate(s0, post));
      _mm256_storeu_ps(out + ch + 8, cpu::avx2::activate(s1, post));
      _mm256_storeu_ps(out + ch + 16, cpu::avx2::activate(s2, post));
      _mm256_storeu_ps(out + ch + 24, cpu::avx2::activate(s3, post));
    }
    // 8 channels at a time, then the last 1-7 masked.
    for (; ch < c; ch += 8) {
      const bool full = ch + 8 <= c;
      const __m256i m = full ? _mm256_set1_epi32(-1) : tail_mask;
      __m256 sum = bias ? _mm256_maskload_ps(bias + ch, m) : _mm256_setzero_ps();
      for (int64_t a = a0; a < a1; ++a) {
        const float* xr = xn + ((iy0 + a * s.dh) * s.w) * c + ch;
        const float* wr = wp + a * s.kw * c + ch;
        for (int64_t b = b0; b < b1; ++b) {
          sum =
              _mm256_fmadd_ps(_mm256_maskload_ps(xr + (ix0 + b * s.dw) * c, m), _mm256_maskload_ps(wr + b * c, m), sum);
        }
      }
      _mm256_maskstore_ps(out + ch, m, cpu::avx2::activate(sum, post));
    }
  }
}

KILN_ISA_END
// ---- depthwise_avx512 ---------------------------------------------------------------------------
//
// Blocks of 16 channels (the last one masked), two per pass, in the outer loop of a row, and four
// output pixels at a time: in the columns where every tap of the kernel's width lies inside the
// image, each weight load serves four FMAs (five loads for four FMAs, where run_row loads a
// weight for every FMA); in the edge columns each tap's input column comes from a table
// (tap_columns), the taps outside the image skipped. KW 3 and 5 (MobileNet's) unroll the taps of
// a kernel row.
KILN_ISA_AVX512_BEGIN

// The geometry run_row512's blocks share: the row's, the interior columns [lo, hi) (every tap of
// a kernel row inside the image), and the step from one output pixel's input to the next one's.
struct DwRow512 {
  DwRow row;
  int64_t kw, lo, hi, step;
  DwRow512(const DwShape& s, const float* x, float* y, int64_t n, int64_t oy, int64_t kw_)
      : row(s, x, y, n, oy), kw(kw_), lo(std::min(s.ow, (s.pad_l + s.sw - 1) / s.sw)), step(s.sw * s.c) {
    const int64_t last = s.w - 1 + s.pad_l - (kw - 1) * s.dw;  // the last interior column's input start
    hi = last < 0 ? lo : std::clamp(last / s.sw + 1, lo, s.ow);
  }
};

// Output channels [ch, ch + 16 NB) of one row (NB = 1 or 2 blocks of 16; m0, m1 their masks), four
// pixels at a time: with two blocks, eight independent sums, so that the FMAs' latency does not
// bound the loop (four sums did on Zen 4).
template <int KW, int NB>
void row_blocks512(const DwShape& s, const DwRow512& g, const int32_t* cols, const float* wp, const float* bias,
                   const PostOp& post, int64_t ch, __mmask16 m0, __mmask16 m1) {
  const int64_t c = s.c, kw = KW > 0 ? KW : g.kw;
  const int64_t iy0 = g.row.iy0, a0 = g.row.a0, a1 = g.row.a1, step = g.step;
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias + ch) : _mm512_setzero_ps();
  const __m512 b1 = NB > 1 && bias ? _mm512_maskz_loadu_ps(m1, bias + ch + 16) : _mm512_setzero_ps();
  const float* xc = g.row.xn + ch;
  const float* wc = wp + ch;
  float* yc = g.row.yrow + ch;
  for (int64_t ox = 0; ox < s.ow; ox += 4) {
    __m512 s0 = b0, s1 = b0, s2 = b0, s3 = b0, t0 = b1, t1 = b1, t2 = b1, t3 = b1;
    if (ox >= g.lo && ox + 4 <= g.hi) {
      // Four interior pixels: each weight load serves four FMAs.
      for (int64_t a = a0; a < a1; ++a) {
        const float* xr = xc + ((iy0 + a * s.dh) * s.w + ox * s.sw - s.pad_l) * c;
        const float* wr = wc + a * kw * c;
        auto tap = [&](int64_t b) __attribute__((always_inline)) {
          const float* xp = xr + b * s.dw * c;
          const __m512 w0 = _mm512_maskz_loadu_ps(m0, wr + b * c);
          s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xp), w0, s0);
          s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xp + step), w0, s1);
          s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xp + 2 * step), w0, s2);
          s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xp + 3 * step), w0, s3);
          if constexpr (NB > 1) {
            const __m512 w1 = _mm512_maskz_loadu_ps(m1, wr + b * c + 16);
            t0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xp + 16), w1, t0);
            t1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xp + step + 16), w1, t1);
            t2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xp + 2 * step + 16), w1, t2);
            t3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xp + 3 * step + 16), w1, t3);
          }
        };
        if constexpr (KW > 0) {
          [&]<int... B>(std::integer_sequence<int, B...>) { (tap(B), ...); }
          (std::make_integer_sequence<int, KW>{});
        } else {
          for (int64_t b = 0; b < kw; ++b) tap(b);
        }
      }
    } else {
      // Four pixels at the image's left or right edge (or past the row's end): each tap's input
      // column from `cols` (-1: outside the image, the tap is skipped).
      const int32_t* cb = cols + ox * kw;
      for (int64_t a = a0; a < a1; ++a) {
        const float* xr = xc + (iy0 + a * s.dh) * s.w * c;
        const float* wr = wc + a * kw * c;
        for (int64_t b = 0; b < kw; ++b) {
          const __m512 w0 = _mm512_maskz_loadu_ps(m0, wr + b * c);
          const __m512 w1 = NB > 1 ? _mm512_maskz_loadu_ps(m1, wr + b * c + 16) : w0;
          auto add = [&](__m512 & acc0, __m512 & acc1, int32_t ix) __attribute__((always_inline)) {
            if (ix < 0) return;
            acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xr + ix * c), w0, acc0);
            if constexpr (NB > 1) acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xr + ix * c + 16), w1, acc1);
          };
          add(s0, t0, cb[b]);
          add(s1, t1, cb[kw + b]);
          add(s2, t2, cb[2 * kw + b]);
          add(s3, t3, cb[3 * kw + b]);
        }
      }
    }
    float* out = yc + ox * c;
    const int64_t valid = std::min<int64_t>(4, s.ow - ox);
    auto put = [&](int64_t p, __m512 v0, __m512 v1) __attribute__((always_inline)) {
      if (p >= valid) return;
      _mm512_mask_storeu_ps(out + p * c, m0, cpu::avx512::activate(v0, post));
      if constexpr (NB > 1) _mm512_mask_storeu_ps(out + p * c + 16, m1, cpu::avx512::activate(v1, post));
    };
    put(0, s0, t0);
    put(1, s1, t1);
    put(2, s2, t2);
    put(3, s3, t3);
  }
}

// One output row: channels in pairs of 16-channel blocks, a last single block where 16 or fewer
// channels remain.
template <int KW>  // 0: the kernel width at run time
void run_row512(const DwShape& s, const int32_t* cols, const float* x, const float* wp, const float* bias, float* y,
                const PostOp& post, int64_t n, int64_t oy) {
  const DwRow512 g(s, x, y, n, oy, KW > 0 ? KW : s.kw);
  const auto mask = [&](int64_t from) {
    return static_cast<__mmask16>(from + 16 <= s.c ? 0xffffu : (1u << (s.c - from)) - 1u);
  };
  int64_t ch = 0;
  for (; ch + 16 < s.c; ch += 32) row_blocks512<KW, 2>(s, g, cols, wp, bias, post, ch, mask(ch), mask(ch + 16));
  if (ch < s.c) row_blocks512<KW, 1>(s, g, cols, wp, bias, post, ch, mask(ch), 0);
}

void run_rows512(const DwShape& s, const int32_t* cols, const float* x, const float* wp, const float* bias, float* y,
                 const PostOp& post, int64_t r) {
  const int64_t n = r / s.oh, oy = r % s.oh;
  switch (s.kw) {
    case 3:
      return run_row512<3>(s, cols, x, wp, bias, y, post, n, oy);
    case 5:
      return run_row512<5>(s, cols, x, wp, bias, y, post, n, oy);
    default:
      return run_row512<0>(s, cols, x, wp, bias, y, post, n, oy);
  }
}

KILN_ISA_END
#endif  // KILN_DEPTHWISE_X86

// Each output column's taps' input columns, -1 outside the image, for the output columns rounded
// up to a multiple of 4 (the columns past the row's end: all -1): [ow4][kw].
std::vector<int32_t> tap_columns(const DwShape& s) {
  const int64_t ow4 = (s.ow + 3) / 4 * 4;
  std::vector<int32_t> cols(static_cast<size_t>(ow4 * s.kw), -1);
  for (int64_t ox = 0; ox < s.ow; ++ox) {
    for (int64_t b = 0; b < s.kw; ++b) {
      const int64_t ix = ox * s.sw - s.pad_l + b * s.dw;
      if (ix >= 0 && ix < s.w) cols[static_cast<size_t>(ox * s.kw + b)] = static_cast<int32_t>(ix);
    }
  }
  return cols;
}

template <bool kAvx512>
class ConvDepthwise : public cpu::ChannelsLastConv<ConvDepthwise<kAvx512>, DwShape> {
  using Base = cpu::ChannelsLastConv<ConvDepthwise<kAvx512>, DwShape>;
  static constexpr const char* tactic() { return kAvx512 ? kTactic512 : kTactic; }

 public:
  using Base::Base;

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (Convolution) " + tactic() + ": ";
    if (inputs.size() < 2 || outputs.empty()) throw Error(where + "expects inputs x, w and output y");
    DwShape& s = this->shape_;
    std::string why;
    if (!shape_of(this->params_, inputs[0].dims, inputs[1].dims, &s, &why)) throw Error(where + why);
    if (cpu::check_conv_output(where, inputs, outputs, Dims{s.n, s.c, s.oh, s.ow})) {
      throw Error(where + "takes no residual input (the builder chooses this kernel only then)");
    }
    this->threads_ = std::max(1, num_threads);
    if (kAvx512) cols_ = tap_columns(s);
    if (!this->weights_) {
      const HostTensor* wv = inputs[1].value;
      if (!wv || wv->type() != DataType::kFloat32 || wv->count() != s.c * s.kh * s.kw) {
        throw Error(where + "the weights must be constant float32 (the builder chooses this kernel only then)");
      }
      // [C][1][KH][KW] -> [KH][KW][C].
      const auto* w = static_cast<const float*>(wv->data());
      const int64_t taps = s.kh * s.kw;
      auto packed = std::make_shared<std::vector<float>>(static_cast<size_t>(s.c * taps));
      for (int64_t ch = 0; ch < s.c; ++ch) {
        for (int64_t t = 0; t < taps; ++t) (*packed)[static_cast<size_t>(t * s.c + ch)] = w[ch * taps + t];
      }
      this->weights_ = std::move(packed);
    }
  }

  void execute(const KernelContext& ctx) override {
    if (!this->weights_) throw Error(std::string("Convolution ") + tactic() + ": execute() before prepare()");
#if KILN_DEPTHWISE_X86
    const DwShape& s = this->shape_;
    const int64_t rows = s.n * s.oh;
    if (rows == 0 || s.c == 0 || s.ow == 0) return;
    const float* x = ctx.inputs.at(0).as<const float>();
    const float* wp = this->weights_->data();
    const float* bias = this->bias_of(ctx);
    float* y = ctx.outputs.at(0).as<float>();
    const PostOp& post = this->params_.post;
    const int nt = static_cast<int>(std::clamp<int64_t>(rows, 1, this->threads_));
    if constexpr (kAvx512) {
      const int32_t* cols = cols_.data();
#pragma omp parallel for num_threads(nt) schedule(static)
      for (int64_t r = 0; r < rows; ++r) run_rows512(s, cols, x, wp, bias, y, post, r);
    } else {
#pragma omp parallel for num_threads(nt) schedule(static)
      for (int64_t r = 0; r < rows; ++r) run_row(s, x, wp, bias, y, post, r / s.oh, r % s.oh);
    }
#else
    (void)ctx;
    throw Error(std::string("Convolution ") + tactic() + ": not built for this processor");
#endif
  }

 private:
  std::vector<int32_t> cols_;  // depthwise_avx512: tap_columns() of the shape prepared for
};

// A float32 2-D depthwise convolution (group = C = K) with constant weights, a rank-1 bias or
// none, no residual, an activation activate() computes, x and y channels-last, on a processor
// with AVX2 + FMA, in a build without oneDNN.
bool supports_depthwise(const Layer& layer, const std::vector<TensorDesc>& inputs) {
#if KILN_HAVE_ONEDNN
  (void)layer, (void)inputs;
  return false;  // oneDNN's depthwise kernels (see above)
#else
  if (!KILN_DEPTHWISE_X86 || !cpu::channels_last_conv_inputs(layer, inputs, true)) return false;
  if (inputs.size() > 3 && inputs[3].present) return false;  // no residual
  const ConvParams& p = params_of<ConvParams>(layer);
  const Dims& x = inputs[0].dims;
  const Dims& w = inputs[1].dims;
  if (x.rank() != 4 || w.rank() != 4) return false;
  DwShape s;
  std::string why;
  Dims probe = x;
  if (probe[0] < 0) probe[0] = 1;  // a dynamic batch: prepare() sees each
  if (!shape_of(p, probe, w, &s, &why)) return false;
  if (inputs.size() > 2 && inputs[2].present && inputs[2].dims[0] != s.c) return false;  // rank 1: checked above
  const HostTensor* wv = inputs[1].value;
  return wv && wv->type() == DataType::kFloat32 && wv->count() == w.volume();
#endif
}

// depthwise_avx512: the same layers, with AVX-512F.
bool supports_depthwise512(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return cpu::has_avx512f() && supports_depthwise(layer, inputs);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic512, 97, supports_depthwise512,
    [](const Layer& layer) { return std::make_unique<ConvDepthwise<true>>(params_of<ConvParams>(layer)); }});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic, 96, supports_depthwise,
    [](const Layer& layer) { return std::make_unique<ConvDepthwise<false>>(params_of<ConvParams>(layer)); }});

}  // namespace kiln
