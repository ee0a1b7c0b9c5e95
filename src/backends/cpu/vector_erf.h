// erf over float32 blocks in a form the compiler vectorizes: no libm call and no branch per
// element, so the loops run it 8 lanes at a time with AVX2 + FMA (chosen at run time) or 4 with
// the x86-64 baseline. libm's erff is a scalar call (about 2 ns an element here, against 0.9 ns),
// and GELU's erf was the largest single cost of bert_tiny on the CPU (18% of an inference).
//
// Method (coefficients fitted for kiln in double precision, evaluated in float32):
//   |x| <  0.921875:  erf(x) = x * P(x^2), P of degree 6 (relative error of the fit 1e-9);
//   |x| >= 0.921875:  erf(x) = 1 - exp(-x^2) * R(1/|x| - 0.66), R of degree 11 fitting
//                     erfc(x) * exp(x^2) (relative 2e-9), with |x| clamped to 4 (erf(4) rounds
//                     to 1 in float32) and exp by Cody-Waite reduction and a degree-6 polynomial;
//   the sign of x restored; NaN stays NaN, +-inf give +-1.
// Measured against double-precision erf at 2,000,001 points on [-6, 6] and 20,000 on [1e-38, 1]
// (tests/vector_erf_test.cpp): at most 1.3e-7 absolute and 1.8e-7 relative error, within the 1e-7
// absolute + 1e-6 relative that kiln's element-wise op tests allow (libm's erff: under 1 ulp).
#pragma once

#include <cmath>
#include <cstdint>

#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/cpu_features.h"

// The loop that follows has no dependences between iterations (the compiler vectorizes it at -O3,
// as Release builds are).
#define KILN_SIMD_LOOP _Pragma("GCC ivdep")

namespace kiln::cpu {

// a where m, else b: integer masks rather than a conditional, which the compiler may turn into a
// branch around the arithmetic (and then not vectorize the loop).
[[gnu::always_inline]] inline float select(bool m, float a, float b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(m);
  return __builtin_bit_cast(float,
                            (__builtin_bit_cast(uint32_t, a) & mask) | (__builtin_bit_cast(uint32_t, b) & ~mask));
}

// exp(x - nf ln2) for nf = round(x / ln2) (Cody-Waite: ln2 split in two so that nf ln2 is exact),
// |x - nf ln2| <= ln2 / 2 (+ rounding): a degree-6 polynomial fitted for kiln in double
// precision. exp(x) = exp_reduced(x, nf) * 2^nf; vector_exp.h builds on it too.
[[gnu::always_inline]] inline float exp_reduced(float x, float nf) {
  const float f = (x - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
  float e = 0.0013949027423451985f;
  e = e * f + 0.008374978300279546f;
  e = e * f + 0.04166621655013112f;
  e = e * f + 0.16666421065214246f;
  e = e * f + 0.5000000106139884f;
  e = e * f + 1.0000000353934702f;
  return e * f + 0.9999999999617671f;
}

[[gnu::always_inline]] inline float erf_lanewise(float x) {
  constexpr float kSplit = 0.921875f;
  const float a = std::fabs(x);
  const float t = a * a;
  // Small |x|: x * P(x^2).
  float p = 8.389977174592338e-05f;
  p = p * t + -0.000814530829538523f;
  p = p * t + 0.005200992427205928f;
  p = p * t + -0.026859211695406348f;
  p = p * t + 0.11283686665842237f;
  p = p * t + -0.3761263235796039f;
  p = p * t + 1.1283791661100437f;
  const float small = a * p;
  // Large |x|: 1 - exp(-x^2) R(1/|x| - 0.66).
  const float c = select(a > kSplit, select(a < 4.0f, a, 4.0f), kSplit);  // NaN: kSplit
  const float u = 1.0f / c - 0.66f;
  float r = 0.02342287638338184f;
  r = r * u + -0.024664507045017017f;
  r = r * u + 0.006762124155253917f;
  r = r * u + 0.008412903680919747f;
  r = r * u + -0.023730690464242588f;
  r = r * u + 0.037132416642420736f;
  r = r * u + -0.03859458063114398f;
  r = r * u + 0.015858811204136854f;
  r = r * u + 0.04649505093760059f;
  r = r * u + -0.16764677990818763f;
  r = r * u + 0.37038063501891333f;
  r = r * u + 0.31912364949907723f;
  // exp(w), w = -c^2 in [-16, -0.85]: w = n ln2 + f, |f| <= ln2 / 2 (+ rounding).
  const float w = -(c * c);
  const int32_t n = static_cast<int32_t>(w * 1.4426950408889634f - 0.5f);  // round(w / ln2), w < 0
  const float nf = static_cast<float>(n);
  const float e = exp_reduced(w, nf) * __builtin_bit_cast(float, (n + 127) << 23);  // 2^n, n in [-24, -1]
  const float large = 1.0f - e * r;
  const float signed_value = std::copysign(select(a < kSplit, small, large), x);
  return select(x != x, x, signed_value);
}

// The loops, compiled for AVX2 with FMA (8 lanes) where the CPU has them and for the build's
// baseline (x86-64: SSE2, 4 lanes) otherwise, chosen once per process.
#define KILN_ERF_LOOPS(suffix)                                          \
  inline void erf_block_##suffix(const float* x, float* y, int64_t n) { \
    KILN_SIMD_LOOP                                                      \
    for (int64_t i = 0; i < n; ++i) y[i] = erf_lanewise(x[i]);          \
  }
KILN_ERF_LOOPS(baseline)
#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN
KILN_ERF_LOOPS(avx2)
KILN_ISA_END
#else
inline void erf_block_avx2(const float* x, float* y, int64_t n) { erf_block_baseline(x, y, n); }
#endif
#undef KILN_ERF_LOOPS

inline void erf_block(const float* x, float* y, int64_t n) {
  has_avx2_fma() ? erf_block_avx2(x, y, n) : erf_block_baseline(x, y, n);
}

// GELU (erf form): 0.5 x (1 + erf(x / sqrt(2))). With AVX2 + FMA, activation_formulas.h's
// one-range form on this thread (activate_simd: 16 lanes with AVX-512F; on 8 lanes 0.62 ns per
// element against 0.95 for this loop); this loop (baseline x86-64) otherwise.
inline void gelu_erf_block_baseline(const float* x, float* y, int64_t n) {
  KILN_SIMD_LOOP
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + erf_lanewise(x[i] * 0.70710678118654752f));
}

inline void gelu_erf_block(const float* x, float* y, int64_t n) {
  if (!activate_simd(PostOp{true, ActivationType::kGeluErf, 0.0f, 0.0f}, x, y, n, 1)) {
    gelu_erf_block_baseline(x, y, n);
  }
}

}  // namespace kiln::cpu

#undef KILN_SIMD_LOOP
