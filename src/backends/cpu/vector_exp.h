// exp of non-positive float32 values and the softmax row built on it, in a form the compiler
// vectorizes (8 lanes with AVX2 + FMA, chosen at run time; 4 with the x86-64 baseline). Softmax
// only ever takes exp of x - max(row) <= 0; the reference SoftMax computes in double with libm's
// exp, twice per element (about 6 ns an element on 2 threads for BERT's attention).
//
// exp(x), x <= 0: x = n ln2 + f with n = round(x / ln2) (Cody-Waite: ln2 split in two so that
// n ln2 is exact), exp(f) by the degree-6 polynomial of vector_erf.h on |f| <= ln2 / 2, times 2^n
// built in the exponent bits (n in [-126, 0]). x below -87.33 (where exp(x) is under float32's
// smallest normal) gives 0, -inf gives 0, NaN stays NaN. Error: a few ulp (tests/vector_exp_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/vector_erf.h"  // select

// The loop that follows has no dependences between iterations (vectorized at -O3).
#define KILN_EXP_SIMD_LOOP _Pragma("GCC ivdep")

namespace kiln::cpu {

[[gnu::always_inline]] inline float exp_nonpositive_lanewise(float x) {
  constexpr float kLowest = -87.33654f;             // ln(FLT_MIN)
  const float c = select(x > kLowest, x, kLowest);  // NaN and -inf: kLowest (fixed below)
  // n = round(c / ln2) by the 1.5 * 2^23 trick (exact for |c / ln2| < 2^22).
  const float shifted = c * 1.4426950408889634f + 12582912.0f;
  const float nf = shifted - 12582912.0f;
  const int32_t n = static_cast<int32_t>(nf);
  const float e = exp_reduced(c, nf) * __builtin_bit_cast(float, (n + 127) << 23);  // 2^n, n in [-126, 0]
  return select(x != x, x, select(x > kLowest, e, 0.0f));
}

// Softmax (or log-softmax) of one contiguous row of n > 0 values: y = exp(x - max) / sum, or
// x - max - log(sum). Sums in eight float32 partial sums.
#define KILN_SOFTMAX_ROW(suffix)                                                        \
  inline void softmax_row_##suffix(const float* x, float* y, int64_t n, bool log) {     \
    float m8[8];                                                                        \
    for (int k = 0; k < 8; ++k) m8[k] = x[0];                                           \
    int64_t i = 0;                                                                      \
    for (; i + 8 <= n; i += 8) {                                                        \
      for (int k = 0; k < 8; ++k) m8[k] = x[i + k] > m8[k] ? x[i + k] : m8[k];          \
    }                                                                                   \
    float m = m8[0];                                                                    \
    for (int k = 1; k < 8; ++k) m = m8[k] > m ? m8[k] : m;                              \
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;                                         \
    if (m == -std::numeric_limits<float>::infinity()) m = 0.0f; /* all -inf: NaN row */ \
    KILN_EXP_SIMD_LOOP                                                                  \
    for (int64_t j = 0; j < n; ++j) y[j] = exp_nonpositive_lanewise(x[j] - m);          \
    float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                             \
    i = 0;                                                                              \
    for (; i + 8 <= n; i += 8) {                                                        \
      for (int k = 0; k < 8; ++k) s8[k] += y[i + k];                                    \
    }                                                                                   \
    float s = 0.0f;                                                                     \
    for (int k = 0; k < 8; ++k) s += s8[k];                                             \
    for (; i < n; ++i) s += y[i];                                                       \
    if (log) {                                                                          \
      const float shift = m + std::log(s);                                              \
      KILN_EXP_SIMD_LOOP                                                                \
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] - shift;                              \
    } else {                                                                            \
      const float r = 1.0f / s;                                                         \
      KILN_EXP_SIMD_LOOP                                                                \
      for (int64_t j = 0; j < n; ++j) y[j] *= r;                                        \
    }                                                                                   \
  }                                                                                     \
  inline void exp_nonpositive_block_##suffix(const float* x, float* y, int64_t n) {     \
    KILN_EXP_SIMD_LOOP                                                                  \
    for (int64_t j = 0; j < n; ++j) y[j] = exp_nonpositive_lanewise(x[j]);              \
  }
KILN_SOFTMAX_ROW(baseline)
#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN
KILN_SOFTMAX_ROW(avx2)
KILN_ISA_END
#else
inline void softmax_row_avx2(const float* x, float* y, int64_t n, bool log) { softmax_row_baseline(x, y, n, log); }
inline void exp_nonpositive_block_avx2(const float* x, float* y, int64_t n) { exp_nonpositive_block_baseline(x, y, n); }
#endif
#undef KILN_SOFTMAX_ROW

inline void softmax_row(const float* x, float* y, int64_t n, bool log) {
  has_avx2_fma() ? softmax_row_avx2(x, y, n, log) : softmax_row_baseline(x, y, n, log);
}

// exp(x) for x <= 0 (as exp_nonpositive_lanewise), over a block.
inline void exp_nonpositive_block(const float* x, float* y, int64_t n) {
  has_avx2_fma() ? exp_nonpositive_block_avx2(x, y, n) : exp_nonpositive_block_baseline(x, y, n);
}

// exp(x) over [-150, 88.72] as head * scale, both normal floats: head = p 2^n1, scale = 2^n2 with
// n = n1 + n2 = round(x / ln2) split in halves, p = exp(x - n ln2) by the polynomial above. exp(x)
// itself is subnormal below -87.3 (and 0 below -103.9); callers that multiply it into a larger
// value multiply by head first and by scale last, so the result keeps its relative accuracy
// wherever it is a normal float (the built-in plugins' swish and Mish). x outside the range:
// clamp first.
struct ExpSplit {
  float head, scale;
};

[[gnu::always_inline]] inline ExpSplit exp_split_lanewise(float x) {
  const float shifted = x * 1.4426950408889634f + 12582912.0f;  // round(x / ln2), as above
  const float nf = shifted - 12582912.0f;
  const int32_t n = static_cast<int32_t>(nf);
  const int32_t n1 = n / 2, n2 = n - n1;  // each in [-109, 64]
  return ExpSplit{exp_reduced(x, nf) * __builtin_bit_cast(float, (n1 + 127) << 23),
                  __builtin_bit_cast(float, (n2 + 127) << 23)};
}

// y[i] = f(x[i]) over a block, compiled for AVX2 + FMA where the CPU has them (f inlined into the
// loop, which the compiler vectorizes) and for the x86-64 baseline otherwise. x and y may be the
// same buffer.
template <class F>
inline void map_block_baseline(const float* x, float* y, int64_t n, F f) {
  KILN_EXP_SIMD_LOOP
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN
template <class F>
inline void map_block_avx2(const float* x, float* y, int64_t n, F f) {
  KILN_EXP_SIMD_LOOP
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
KILN_ISA_END
#else
template <class F>
inline void map_block_avx2(const float* x, float* y, int64_t n, F f) {
  map_block_baseline(x, y, n, f);
}
#endif

template <class F>
inline void map_block(const float* x, float* y, int64_t n, F f) {
  has_avx2_fma() ? map_block_avx2(x, y, n, f) : map_block_baseline(x, y, n, f);
}

#undef KILN_EXP_SIMD_LOOP

}  // namespace kiln::cpu
