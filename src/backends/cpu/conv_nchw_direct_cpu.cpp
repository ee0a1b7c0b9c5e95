// "nchw_direct_avx2" (priority 106): a direct convolution for the CPU that reads a linear (NCHW)
// input of a few channels and writes a channels-last (NHWC) output, float32, AVX2 + FMA (chosen at
// run time; supports() declines elsewhere). It is a network's first convolution (the "stem": RGB
// in, 16-64 channels out, 3x3 to 7x7, stride 2) without the NCHW -> NHWC Reformat the layout pass
// otherwise puts before it: the pass leaves a channels-last region's linear input as it is where
// a kernel like this one takes it (src/builder/passes/layout.cpp, reads_linear()).
//
// Per output row (n, oy) and panel of 16 output channels: 6 output pixels x 16 channels sum in
// registers over the taps (c, kh, kw); each tap is one weight row of the packed panel, [C][KH][KW]
// [16], against the 6 pixels' inputs, which lie sw floats apart in one input line (no im2col, no
// copy). Kernel rows above or below the image are skipped per output row; the few output columns
// whose kernel reaches over the left or right edge are summed one pixel at a time with the
// columns inside only. Bias and the fused activation are applied to the registers before the
// store. Rows are shared among the context's threads.
//
// Where it is chosen: at most kMaxChannels input channels (a stem's), no residual input, undilated,
// one group. With more channels the channels-last kernels after a Reformat do better: each input
// pixel's channels are then one contiguous row of the GEMM.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
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
#define KILN_NCHW_X86 1
#else
#define KILN_NCHW_X86 0
#endif

namespace kiln {
namespace {

constexpr const char* kTactic = "nchw_direct_avx2";
constexpr const char* kTactic512 = "nchw_direct_avx512";  // the AVX-512 register block
constexpr int64_t kPanel = 16;                            // output channels per packed weight panel
constexpr int64_t kRows = 6;                              // output pixels per register block
constexpr int64_t kMaxChannels = 4;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct NchwShape : cpu::Conv2dSizes {
  int64_t panels = 0;
  int64_t ox_lo = 0, ox_hi = 0;  // output columns [ox_lo, ox_hi) read no column outside the input
  size_t w_bytes = 0;
};

bool shape_of(const ConvParams& params, const Dims& x, const Dims& w, NchwShape* s, std::string* why) {
  ConvGeometry g;
  if (!cpu::conv2d_geometry(params, x, w, &g, why)) return false;
  if (g.dilation[0] != 1 || g.dilation[1] != 1) {
    *why = "dilated";
    return false;
  }
  static_cast<cpu::Conv2dSizes&>(*s) = cpu::Conv2dSizes(g);
  s->panels = round_up(s->k, kPanel) / kPanel;
  s->ox_lo = std::min(s->ow, (s->pad_l + s->sw - 1) / s->sw);
  s->ox_hi = s->w + s->pad_l - s->kw >= 0 ? (s->w + s->pad_l - s->kw) / s->sw + 1 : 0;
  s->ox_hi = std::clamp(s->ox_hi, s->ox_lo, s->ow);
  s->w_bytes = static_cast<size_t>(s->panels * kPanel * s->c * s->kh * s->kw) * sizeof(float);
  return true;
}

// Entries between two threads' tap tables: C x KH x KW rounded up to whole cache lines (the
// tables are rewritten for every row; tables sharing a line made the stem 20% slower).
int64_t tap_stride(const NchwShape& s) { return (s.c * s.kh * s.kw + 3) / 4 * 4; }

// w [K, C, KH, KW] -> [K/16][C][KH][KW][16], zero beyond K.
void pack_weights(const float* w, const NchwShape& s, float* out) {
  std::memset(out, 0, s.w_bytes);
  const int64_t taps = s.c * s.kh * s.kw;
  for (int64_t k = 0; k < s.k; ++k) {
    for (int64_t t = 0; t < taps; ++t) out[(k / kPanel * taps + t) * kPanel + k % kPanel] = w[k * taps + t];
  }
}

#if KILN_NCHW_X86
KILN_ISA_AVX2_BEGIN

using cpu::avx2::lane_mask;

// What one output row of one panel reads and writes.
struct RowJob {
  const float* x;   // the image's first channel, at input row iy0 = oy * sh - pad_t
  int64_t plane;    // floats per input channel (h * w)
  int64_t w;        // floats per input row
  int64_t a0, a1;   // kernel rows inside the image
  const float* wp;  // the panel, [C][KH][KW][16]
  int64_t c, kh, kw, sw, pad_l;
  // The taps inside the image's rows, in the panel's order: taps[t] = {input offset from the
  // block's first pixel's first tap (ch * plane + a * w + b), weight row (ch * KH + a) * KW + b}.
  const int64_t (*taps)[2];
  int64_t num_taps;
  // Where output pixel ox's 16 channels of the panel go: yrow + ox * k + k0 (`lanes` of them).
  float* yrow;
  int64_t k, k0, lanes;
  __m256i mlo, mhi;      // lane masks of a partial panel
  __m256 blo, bhi;       // the panel's bias
  const float* bias;     // all of it (null: none), for the 4-panel block
  int64_t panel_floats;  // packed weights per panel (C x KH x KW x 16)
};

// Bias and the store of output pixel ox's channels of the panel (the activation follows per row:
// run_row).
[[gnu::always_inline]] inline void store_pixel(const RowJob& j, int64_t ox, __m256 lo, __m256 hi) {
  float* out = j.yrow + ox * j.k + j.k0;
  lo = _mm256_add_ps(lo, j.blo);
  hi = _mm256_add_ps(hi, j.bhi);
  if (j.lanes == kPanel) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
  } else {
    _mm256_maskstore_ps(out, j.mlo, lo);
    _mm256_maskstore_ps(out + 8, j.mhi, hi);
  }
}

// MR (1..6) output pixels from column ox: acc[i] = sum over taps of x[pixel i's tap] * w[tap], one
// loop over every tap of the row (few taps per kernel row: a loop per row cost a third of the
// time). SW: the horizontal stride when known at compile time, else 0.
template <int MR, int SW>
[[gnu::always_inline]] inline void pixel_block(const RowJob& j, int64_t ox) {
  __m256 c0a = _mm256_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
  __m256 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
  const int64_t sw = SW > 0 ? SW : j.sw;
  const float* base = j.x + ox * sw - j.pad_l;
#define KILN_NCHW_ROW(i)                                  \
  if constexpr (MR > i) {                                 \
    const __m256 xi = _mm256_broadcast_ss(line + (i)*sw); \
    c##i##a = _mm256_fmadd_ps(xi, w0, c##i##a);           \
    c##i##b = _mm256_fmadd_ps(xi, w1, c##i##b);           \
  }
  const int64_t(*tap)[2] = j.taps;
  for (int64_t t = 0; t < j.num_taps; ++t, ++tap) {
    const float* line = base + (*tap)[0];
    const float* wb = j.wp + (*tap)[1] * kPanel;
    const __m256 w0 = _mm256_loadu_ps(wb), w1 = _mm256_loadu_ps(wb + 8);
    KILN_NCHW_ROW(0)
    KILN_NCHW_ROW(1)
    KILN_NCHW_ROW(2)
    KILN_NCHW_ROW(3)
    KILN_NCHW_ROW(4)
    KILN_NCHW_ROW(5)
  }
#undef KILN_NCHW_ROW
#define KILN_NCHW_STORE(i) \
  if constexpr (MR > i) store_pixel(j, ox + (i), c##i##a, c##i##b);
  KILN_NCHW_STORE(0)
  KILN_NCHW_STORE(1)
  KILN_NCHW_STORE(2)
  KILN_NCHW_STORE(3)
  KILN_NCHW_STORE(4)
  KILN_NCHW_STORE(5)
#undef KILN_NCHW_STORE
}

// Output columns [ox, hi) in blocks of kRows, then the remainder. (The AVX-512 blocks have loops of
// their own: a shared template is compiled for one target and cannot inline the other's blocks.)
template <int SW>
void interior(const RowJob& j, int64_t ox, int64_t hi) {
  for (; ox + kRows <= hi; ox += kRows) pixel_block<kRows, SW>(j, ox);
  switch (hi - ox) {
    case 5:
      pixel_block<5, SW>(j, ox);
      break;
    case 4:
      pixel_block<4, SW>(j, ox);
      break;
    case 3:
      pixel_block<3, SW>(j, ox);
      break;
    case 2:
      pixel_block<2, SW>(j, ox);
      break;
    case 1:
      pixel_block<1, SW>(j, ox);
      break;
    default:
      break;
  }
}

// One output pixel whose kernel reaches over the left or right edge: the columns inside only.
void edge_pixel(const RowJob& j, int64_t ox) {
  __m256 acc_a = _mm256_setzero_ps(), acc_b = acc_a;
  const int64_t ix0 = ox * j.sw - j.pad_l;
  const int64_t b0 = std::max<int64_t>(0, -ix0), b1 = std::min(j.kw, j.w - ix0);
  for (int64_t ch = 0; ch < j.c; ++ch) {
    for (int64_t a = j.a0; a < j.a1; ++a) {
      const float* line = j.x + ch * j.plane + a * j.w + ix0;
      const float* wb = j.wp + ((ch * j.kh + a) * j.kw) * kPanel;
      for (int64_t b = b0; b < b1; ++b) {
        const __m256 xv = _mm256_broadcast_ss(line + b);
        acc_a = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wb + b * kPanel), acc_a);
        acc_b = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wb + b * kPanel + 8), acc_b);
      }
    }
  }
  store_pixel(j, ox, acc_a, acc_b);
}

KILN_ISA_END
KILN_ISA_AVX512_BEGIN

// The AVX-512 register block: MR (1..12) output pixels x the panel's 16 channels in one register
// each, the input broadcast from memory into the multiply-add (a third of the AVX2 block's
// instructions per product).
template <int MR, int SW>
[[gnu::always_inline]] inline void pixel_block_512(const RowJob& j, int64_t ox) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m512 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  const int64_t sw = SW > 0 ? SW : j.sw;
  const float* base = j.x + ox * sw - j.pad_l;
#define KILN_NCHW_ROW(i) \
  if constexpr (MR > i) c##i = _mm512_fmadd_ps(_mm512_set1_ps(line[(i)*sw]), w, c##i);
  const int64_t(*tap)[2] = j.taps;
  for (int64_t t = 0; t < j.num_taps; ++t, ++tap) {
    const float* line = base + (*tap)[0];
    const __m512 w = _mm512_loadu_ps(j.wp + (*tap)[1] * kPanel);
    KILN_NCHW_ROW(0)
    KILN_NCHW_ROW(1)
    KILN_NCHW_ROW(2)
    KILN_NCHW_ROW(3)
    KILN_NCHW_ROW(4)
    KILN_NCHW_ROW(5)
    KILN_NCHW_ROW(6)
    KILN_NCHW_ROW(7)
    KILN_NCHW_ROW(8)
    KILN_NCHW_ROW(9)
    KILN_NCHW_ROW(10)
    KILN_NCHW_ROW(11)
  }
#undef KILN_NCHW_ROW
#define KILN_NCHW_STORE(i)                                                            \
  if constexpr (MR > i) {                                                             \
    store_pixel(j, ox + (i), _mm512_castps512_ps256(c##i),                            \
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c##i), 1))); \
  }
  KILN_NCHW_STORE(0)
  KILN_NCHW_STORE(1)
  KILN_NCHW_STORE(2)
  KILN_NCHW_STORE(3)
  KILN_NCHW_STORE(4)
  KILN_NCHW_STORE(5)
  KILN_NCHW_STORE(6)
  KILN_NCHW_STORE(7)
  KILN_NCHW_STORE(8)
  KILN_NCHW_STORE(9)
  KILN_NCHW_STORE(10)
  KILN_NCHW_STORE(11)
#undef KILN_NCHW_STORE
}

// Four full panels (64 output channels) x MR (1..6) pixels in 24 registers: each input value,
// broadcast once, feeds four multiply-adds (the 12 x 16 block above broadcasts one per product;
// stems with 64 output channels, ResNet-50's and SqueezeNet's, load-bound there).
template <int MR, int SW>
[[gnu::always_inline]] inline void pixel_block_512x4(const RowJob& j, int64_t ox) {
  const __m512 z = _mm512_setzero_ps();
  __m512 c0_0 = z, c0_1 = z, c0_2 = z, c0_3 = z, c1_0 = z, c1_1 = z, c1_2 = z, c1_3 = z;
  __m512 c2_0 = z, c2_1 = z, c2_2 = z, c2_3 = z, c3_0 = z, c3_1 = z, c3_2 = z, c3_3 = z;
  __m512 c4_0 = z, c4_1 = z, c4_2 = z, c4_3 = z, c5_0 = z, c5_1 = z, c5_2 = z, c5_3 = z;
  const int64_t sw = SW > 0 ? SW : j.sw;
  const int64_t ps = j.panel_floats;
  const float* base = j.x + ox * sw - j.pad_l;
#define KILN_NCHW_ROW(i)                            \
  if constexpr (MR > i) {                           \
    const __m512 xi = _mm512_set1_ps(line[(i)*sw]); \
    c##i##_0 = _mm512_fmadd_ps(xi, w0, c##i##_0);   \
    c##i##_1 = _mm512_fmadd_ps(xi, w1, c##i##_1);   \
    c##i##_2 = _mm512_fmadd_ps(xi, w2, c##i##_2);   \
    c##i##_3 = _mm512_fmadd_ps(xi, w3, c##i##_3);   \
  }
  const int64_t(*tap)[2] = j.taps;
  for (int64_t t = 0; t < j.num_taps; ++t, ++tap) {
    const float* line = base + (*tap)[0];
    const float* wb = j.wp + (*tap)[1] * kPanel;
    const __m512 w0 = _mm512_loadu_ps(wb), w1 = _mm512_loadu_ps(wb + ps);
    const __m512 w2 = _mm512_loadu_ps(wb + 2 * ps), w3 = _mm512_loadu_ps(wb + 3 * ps);
    KILN_NCHW_ROW(0)
    KILN_NCHW_ROW(1)
    KILN_NCHW_ROW(2)
    KILN_NCHW_ROW(3)
    KILN_NCHW_ROW(4)
    KILN_NCHW_ROW(5)
  }
#undef KILN_NCHW_ROW
  float* out = j.yrow + ox * j.k + j.k0;
  const auto put = [&](int64_t i, int64_t p, __m512 v) __attribute__((always_inline)) {
    if (j.bias) v = _mm512_add_ps(v, _mm512_loadu_ps(j.bias + j.k0 + p * kPanel));
    _mm512_storeu_ps(out + i * j.k + p * kPanel, v);
  };
#define KILN_NCHW_STORE(i) \
  if constexpr (MR > i) {  \
    put(i, 0, c##i##_0);   \
    put(i, 1, c##i##_1);   \
    put(i, 2, c##i##_2);   \
    put(i, 3, c##i##_3);   \
  }
  KILN_NCHW_STORE(0)
  KILN_NCHW_STORE(1)
  KILN_NCHW_STORE(2)
  KILN_NCHW_STORE(3)
  KILN_NCHW_STORE(4)
  KILN_NCHW_STORE(5)
#undef KILN_NCHW_STORE
}

template <int SW>
void interior_512x4(const RowJob& j, int64_t ox, int64_t hi) {
  for (; ox + kRows <= hi; ox += kRows) pixel_block_512x4<kRows, SW>(j, ox);
  switch (hi - ox) {
    case 5:
      pixel_block_512x4<5, SW>(j, ox);
      break;
    case 4:
      pixel_block_512x4<4, SW>(j, ox);
      break;
    case 3:
      pixel_block_512x4<3, SW>(j, ox);
      break;
    case 2:
      pixel_block_512x4<2, SW>(j, ox);
      break;
    case 1:
      pixel_block_512x4<1, SW>(j, ox);
      break;
    default:
      break;
  }
}

// Four full panels from j's (j.wp, j.k0) over output columns [ox, hi).
void interior_avx512_x4(const RowJob& j, int64_t ox, int64_t hi) {
  if (j.sw == 2) {
    interior_512x4<2>(j, ox, hi);
  } else {
    interior_512x4<0>(j, ox, hi);
  }
}

template <int SW>
void interior_512(const RowJob& j, int64_t ox, int64_t hi) {
  constexpr int64_t kWide = 12;
  for (; ox + kWide <= hi; ox += kWide) pixel_block_512<kWide, SW>(j, ox);
  switch (hi - ox) {
    case 11:
      pixel_block_512<11, SW>(j, ox);
      break;
    case 10:
      pixel_block_512<10, SW>(j, ox);
      break;
    case 9:
      pixel_block_512<9, SW>(j, ox);
      break;
    case 8:
      pixel_block_512<8, SW>(j, ox);
      break;
    case 7:
      pixel_block_512<7, SW>(j, ox);
      break;
    case 6:
      pixel_block_512<6, SW>(j, ox);
      break;
    case 5:
      pixel_block_512<5, SW>(j, ox);
      break;
    case 4:
      pixel_block_512<4, SW>(j, ox);
      break;
    case 3:
      pixel_block_512<3, SW>(j, ox);
      break;
    case 2:
      pixel_block_512<2, SW>(j, ox);
      break;
    case 1:
      pixel_block_512<1, SW>(j, ox);
      break;
    default:
      break;
  }
}

void interior_avx512(const RowJob& j, int64_t ox, int64_t hi) {
  if (j.sw == 2) {
    interior_512<2>(j, ox, hi);
  } else {
    interior_512<0>(j, ox, hi);
  }
}

KILN_ISA_END
KILN_ISA_AVX2_BEGIN

// Output row oy of image n, every panel; `taps` has room for C x KH x KW entries.
void run_row(const NchwShape& s, const float* x, const float* wp, const float* bias, float* y, const PostOp& post,
             int64_t n, int64_t oy, int64_t (*taps)[2], bool avx512) {
  const int64_t iy0 = oy * s.sh - s.pad_t;
  RowJob j;
  j.plane = s.h * s.w;
  j.w = s.w;
  j.x = x + n * s.c * j.plane + iy0 * s.w;
  j.a0 = std::max<int64_t>(0, -iy0);
  j.a1 = std::min(s.kh, s.h - iy0);
  j.c = s.c;
  j.kh = s.kh;
  j.kw = s.kw;
  j.sw = s.sw;
  j.pad_l = s.pad_l;
  j.num_taps = 0;
  for (int64_t ch = 0; ch < s.c; ++ch) {
    for (int64_t a = j.a0; a < j.a1; ++a) {
      for (int64_t b = 0; b < s.kw; ++b, ++j.num_taps) {
        taps[j.num_taps][0] = ch * j.plane + a * j.w + b;
        taps[j.num_taps][1] = (ch * s.kh + a) * s.kw + b;
      }
    }
  }
  j.taps = taps;
  j.yrow = y + (n * s.oh + oy) * s.ow * s.k;
  j.k = s.k;
  j.bias = bias;
  j.panel_floats = s.c * s.kh * s.kw * kPanel;
  const auto set_panel = [&](int64_t panel) {
    j.k0 = panel * kPanel;
    j.lanes = std::min(kPanel, s.k - j.k0);
    j.mlo = lane_mask(std::min<int64_t>(8, j.lanes));
    j.mhi = lane_mask(std::max<int64_t>(0, j.lanes - 8));
    j.blo = !bias ? _mm256_setzero_ps() : _mm256_maskload_ps(bias + j.k0, j.mlo);
    j.bhi = !bias ? _mm256_setzero_ps() : _mm256_maskload_ps(bias + j.k0 + 8, j.mhi);
    j.wp = wp + panel * j.panel_floats;
  };
  for (int64_t panel = 0; panel < s.panels;) {
    // With AVX-512, four full panels at a time where there are (their interior columns together).
    const bool four = avx512 && (panel + 4) * kPanel <= s.k;
    const int64_t count = four ? 4 : 1;
    for (int64_t q = panel; q < panel + count; ++q) {
      set_panel(q);
      if (j.a0 >= j.a1) {  // every kernel row in the padding: bias and activation only
        for (int64_t ox = 0; ox < s.ow; ++ox) store_pixel(j, ox, _mm256_setzero_ps(), _mm256_setzero_ps());
        continue;
      }
      for (int64_t ox = 0; ox < s.ox_lo; ++ox) edge_pixel(j, ox);
      for (int64_t ox = s.ox_hi; ox < s.ow; ++ox) edge_pixel(j, ox);
      if (four) continue;
      if (avx512) {
        interior_avx512(j, s.ox_lo, s.ox_hi);
      } else if (s.sw == 2) {  // the stems' stride known at compile time
        interior<2>(j, s.ox_lo, s.ox_hi);
      } else {
        interior<0>(j, s.ox_lo, s.ox_hi);
      }
    }
    if (four && j.a0 < j.a1) {
      set_panel(panel);
      interior_avx512_x4(j, s.ox_lo, s.ox_hi);
    }
    panel += count;
  }
  // The register blocks stored with the bias only; the activation runs over the whole output row
  // (ow x K contiguous floats, in L1) once every panel is stored, with its kind a template
  // argument: applied in the blocks' stores it was read per register, beside twelve live
  // accumulators (TinyYolo's 6x6 stem with SiLU, 1.28 ms of 13.4 on one Zen 3 thread).
  if (post.enabled) {
    cpu::with_activation_kind(post, [&]<bool kOn, ActivationType K>() {
      if constexpr (kOn) cpu::avx2::activate_range<K>(j.yrow, j.yrow, 0, s.ow * s.k, post.alpha, post.beta);
    });
  }
}

KILN_ISA_END
#endif  // KILN_NCHW_X86

// `taps`: tap_stride() entries per thread (the workspace's).
void run_nchw_direct(const NchwShape& s, const float* x, const float* wp, const float* bias, float* y,
                     const PostOp& post, int threads, bool avx512, int64_t (*taps)[2]) {
#if KILN_NCHW_X86
  const int64_t rows = s.n * s.oh;
#pragma omp parallel num_threads(std::max(1, threads))
  {
    int64_t(*mine)[2] = taps + omp_get_thread_num() * tap_stride(s);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) run_row(s, x, wp, bias, y, post, r / s.oh, r % s.oh, mine, avx512);
  }
#else
  (void)s, (void)x, (void)wp, (void)bias, (void)y, (void)post, (void)threads, (void)avx512, (void)taps;
  throw Error(std::string("Convolution ") + kTactic + ": not built for this processor");
#endif
}

// weights_: the packed weights [K/16][C][KH][KW][16], zero beyond K, shared by the instances for
// other shapes.
// Wide: nchw_direct_avx512 (the AVX-512 register block), else nchw_direct_avx2.
template <bool Wide>
class ConvNchwDirect : public cpu::ChannelsLastConv<ConvNchwDirect<Wide>, NchwShape> {
  using Base = cpu::ChannelsLastConv<ConvNchwDirect<Wide>, NchwShape>;

 public:
  using Base::Base;
  static constexpr const char* tactic() { return Wide ? kTactic512 : kTactic; }

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (Convolution) " + tactic() + ": ";
    if (inputs.size() < 2 || outputs.empty()) throw Error(where + "expects inputs x, w and output y");
    if (inputs.size() > 3 && inputs[3].present) throw Error(where + "takes no residual input");
    this->threads_ = std::max(1, num_threads);
    std::string why;
    if (!shape_of(this->params_, inputs[0].dims, inputs[1].dims, &this->shape_, &why)) throw Error(where + why);
    cpu::check_conv_output(where, inputs, outputs,
                           Dims{this->shape_.n, this->shape_.k, this->shape_.oh, this->shape_.ow});
    const HostTensor* w = inputs[1].value;
    if (!this->weights_ && w && w->type() == DataType::kFloat32 &&
        w->count() == this->shape_.k * this->shape_.c * this->shape_.kh * this->shape_.kw) {
      auto packed = std::make_shared<std::vector<float>>(this->shape_.w_bytes / sizeof(float));
      pack_weights(static_cast<const float*>(w->data()), this->shape_, packed->data());
      this->weights_ = std::move(packed);
    }
  }

  // Per thread the tap table of a row, then the packed weights where they are not constant.
  size_t workspace_size() const override { return tap_bytes() + (this->weights_ ? 0 : this->shape_.w_bytes); }

  void execute(const KernelContext& ctx) override {
    cpu::check_workspace(tactic(), ctx, workspace_size());
    if (this->shape_.n * this->shape_.oh * this->shape_.ow == 0 || this->shape_.k == 0) return;
    auto* ws = static_cast<char*>(ctx.workspace);
    const float* wp = nullptr;
    if (this->weights_) {
      wp = this->weights_->data();
    } else {
      auto* scratch = reinterpret_cast<float*>(ws + tap_bytes());
      pack_weights(ctx.inputs.at(1).as<float>(), this->shape_, scratch);
      wp = scratch;
    }
    run_nchw_direct(this->shape_, ctx.inputs.at(0).as<float>(), wp, Base::bias_of(ctx), ctx.outputs.at(0).as<float>(),
                    this->params_.post, this->threads_, Wide, reinterpret_cast<int64_t(*)[2]>(ws));
  }

 private:
  // Whole cache lines per thread (tap_stride), so the packed weights after them stay aligned too.
  size_t tap_bytes() const {
    return static_cast<size_t>(this->threads_ * tap_stride(this->shape_)) * 2 * sizeof(int64_t);
  }
};

// Whether the tactic takes the layer: a float32 convolution of a linear input with at most
// kMaxChannels channels to a channels-last output, static dims, plain weights, a rank-1 bias or
// none, no residual, an activation activate() computes, on an AVX2 + FMA processor.
bool supports_nchw_direct(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!cpu::has_avx2_fma()) return false;
  if (inputs.size() < 2 || inputs.size() > 4 || !inputs[0].present || !inputs[1].present) return false;
  if (inputs.size() > 3 && inputs[3].present) return false;
  for (const TensorDesc& t : inputs) {
    if (t.present && (t.type != DataType::kFloat32 || t.format != TensorFormat::kLinear)) return false;
  }
  const ConvParams& params = params_of<ConvParams>(layer);
  if (params.deconv || !cpu::activation_vectorized(params.post)) return false;
  if (layer.num_outputs() < 1 || layer.output(0)->format() != TensorFormat::kChannelsLast) return false;
  if (inputs.size() > 2 && inputs[2].present && inputs[2].dims.rank() != 1) return false;
  if (inputs[0].dims.is_dynamic() || inputs[1].dims.is_dynamic() || inputs[0].dims.rank() != 4) return false;
  NchwShape s;
  std::string why;
  if (!shape_of(params, inputs[0].dims, inputs[1].dims, &s, &why)) return false;
  return s.c >= 1 && s.c <= kMaxChannels && s.k > 0;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic, 106, supports_nchw_direct,
    [](const Layer& layer) { return std::make_unique<ConvNchwDirect<false>>(params_of<ConvParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic512, 107,
    [](const Layer& layer, const std::vector<TensorDesc>& inputs) {
      return cpu::has_avx512f() && supports_nchw_direct(layer, inputs);
    },
    [](const Layer& layer) { return std::make_unique<ConvNchwDirect<true>>(params_of<ConvParams>(layer)); }});

}  // namespace kiln
