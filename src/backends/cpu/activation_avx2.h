// Fused activations in AVX2 registers for kiln's own float32 CPU kernels (the epilogues of
// winograd_avx2 and igemm_avx2, the "avx2" Activation tactic, and the pass after oneDNN's
// convolutions, activate_avx2()): the kinds activation_vectorized() accepts, computed on 8 lanes with the
// formulas of src/core/activation_math.h (sigmoid from a polynomial exp and a division: within
// 3e-7 of the reference's std::exp and division, relative, where the result is a normal float;
// GELU in one range of erfc, within 3e-8 absolute + 3e-7 relative).
#pragma once

#include <cstdint>

#include "kiln/network.h"
#include "src/core/activation_math.h"

namespace kiln::cpu {

// The fused activations activate() computes.
inline bool activation_vectorized(const PostOp& post) {
  if (!post.enabled) return true;
  switch (post.kind) {
    case ActivationType::kRelu:
    case ActivationType::kLeakyRelu:
    case ActivationType::kClip:
    case ActivationType::kSilu:
    case ActivationType::kSigmoid:
    case ActivationType::kHardSigmoid:
    case ActivationType::kHardSwish:
    case ActivationType::kGeluErf:
      return true;
    default:
      return false;
  }
}

// y = act(x) over n float32 elements on `threads` threads, with activate()'s formulas (y may be x).
// Returns false, computing nothing, where the processor or the build has no AVX2 + FMA or the kind
// is not one activate() computes. Defined in activation_avx2.cpp.
bool activate_avx2(const PostOp& post, const float* x, float* y, int64_t n, int threads);

// Where oneDNN's convolutions leave the fused activation to activate_avx2() after the primitive:
// SiLU and sigmoid on processors with AVX2 + FMA. oneDNN 2.6's jit swish post-op took about 7.3 ns
// per 8 outputs on this machine (a 32 -> 32 1x1 layer at 80x80: 0.215 ms with it, 0.122 with
// ReLU), activate_avx2() 2.9 (session 21, docs/status.md); the extra pass reads the output from
// cache.
bool activation_after_onednn(const PostOp& post);

}  // namespace kiln::cpu

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace kiln::cpu::avx2 {

// Lane mask of the first `n` (0..8) lanes, for masked loads and stores.
inline __m256i lane_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// 1 + exp(-x) for x clamped to [-87, 87] (sigmoid(x) is 1 / that: above 87 it rounds to 1, below
// -87 it stays at sigmoid(-87) = 1.6e-38 where the exact value is smaller still). exp(-x) = 2^n exp(-g) with n =
// round(-x log2 e) and g = x + n ln 2 (ln 2 in two parts), |g| <= ln 2 / 2, where a degree-5 polynomial fitted for kiln
// (least squares weighted towards the largest relative error) is within 7.6e-8 of exp(-g), 2.2e-7 in float32
// arithmetic. 2^n is added to the polynomial's exponent bits: the rounding's magic number 1.5 x 2^23 leaves n in the
// low mantissa bits, and shifted left by 23 those are n << 23 (n >= -126 keeps the result a float32, at worst a
// subnormal). 18 operations, against 26 for exp from exp(-|x|) with a select: on this machine 2.9 ns per 8 SiLUs
// against 4.9 (session 21, docs/status.md).
[[gnu::always_inline]] inline __m256 one_plus_exp_neg(__m256 x) {
  // x second: max and min return their second operand where one is NaN, so NaN stays NaN.
  const __m256 c = _mm256_min_ps(_mm256_set1_ps(87.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 t = _mm256_fnmadd_ps(c, _mm256_set1_ps(1.4426950408889634f), magic);  // magic + n
  const __m256 n = _mm256_sub_ps(t, magic);
  __m256 g = _mm256_fmadd_ps(n, _mm256_set1_ps(0.693145751953125f), c);
  g = _mm256_fmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), g);
  __m256 e = _mm256_set1_ps(-0.008297719061374664f);
  e = _mm256_fmadd_ps(e, g, _mm256_set1_ps(0.04191556200385094f));
  e = _mm256_fmadd_ps(e, g, _mm256_set1_ps(-0.16667574644088745f));
  e = _mm256_fmadd_ps(e, g, _mm256_set1_ps(0.49998894333839417f));
  e = _mm256_fmadd_ps(e, g, _mm256_set1_ps(-0.9999997019767761f));
  e = _mm256_fmadd_ps(e, g, _mm256_set1_ps(1.0000001192092896f));
  e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e), _mm256_slli_epi32(_mm256_castps_si256(t), 23)));
  return _mm256_add_ps(_mm256_set1_ps(1.0f), e);
}

// GELU (erf form), x Phi(x) with Phi the normal distribution function, in one range (vector_erf.h's
// erf evaluates both of erf's ranges for every element): with v = min(|x|, 12.73),
//   q = Phi(-v) = erfc(v / sqrt 2) / 2 = exp(-v^2 / 2) R(t) / 2, t = 1 / (1 + 0.415 v / sqrt 2),
// R of degree 8 fitting erfc(a) exp(a^2) on a in [0, 9] (relative 3.3e-8; fitted for kiln), and
//   gelu(x) = (x + |x|) / 2 - v q   (x - x q for x >= 0, x q below).
// -v^2 / 2 is kept as hi + lo (a rounded v^2 would put 6e-8 v^2 of error into the exponent, 3e-7
// of q at x = -3); exp as in one_plus_exp_neg, with a degree-6 polynomial. Against the definition
// in double precision on [-20, 20] (tests/activation_avx2_test.cpp): within 3e-8 absolute + 3e-7
// relative. Below x = -12.73 the result is -1e-36 or so where the exact value is smaller still;
// NaN stays NaN, gelu(inf) = inf, gelu(-inf) = NaN (the definition's -inf * 0), gelu(-0) = +0.
// 0.62 ns per element against 0.95 for 0.5 x (1 + erf(x / sqrt 2)) with vector_erf.h's erf
// (session 22, docs/status.md).
[[gnu::always_inline]] inline __m256 gelu_erf(__m256 x) {
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 v = _mm256_min_ps(ax, _mm256_set1_ps(12.727922061357855f));  // NaN: 12.73 (x carries it)
  const __m256 t = _mm256_div_ps(
      _mm256_set1_ps(1.0f), _mm256_fmadd_ps(v, _mm256_set1_ps(0.415f * 0.70710678118654752f), _mm256_set1_ps(1.0f)));
  // R / 2.
  __m256 r = _mm256_set1_ps(0.039677159496665595f);
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-0.18771389431066899f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.2846406450837533f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-0.1308054357347043f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.17465666397546825f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.08117160581802763f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.12176374933772942f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.11658828642374369f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(2.1209004816761135e-05f));
  // exp(hi + lo), hi + lo = -v^2 / 2 in [-81, 0]: 2^n exp(f), n = round(hi / ln 2).
  const __m256 p = _mm256_mul_ps(_mm256_set1_ps(-0.5f), v);
  const __m256 hi = _mm256_mul_ps(p, v);
  const __m256 lo = _mm256_fmsub_ps(p, v, hi);
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 m = _mm256_fmadd_ps(hi, _mm256_set1_ps(1.4426950408889634f), magic);  // magic + n
  const __m256 n = _mm256_sub_ps(m, magic);
  __m256 f = _mm256_add_ps(_mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), hi), lo);
  f = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), f);
  __m256 e = _mm256_set1_ps(0.0013949027423451985f);
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.008374978300279546f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.04166621655013112f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.16666421065214246f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.5000000106139884f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(1.0000000353934702f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.9999999999617671f));
  // q = e r 2^n (n in [-117, 0] keeps it a float32).
  const __m256 er = _mm256_mul_ps(e, r);
  const __m256 q =
      _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(er), _mm256_slli_epi32(_mm256_castps_si256(m), 23)));
  const __m256 half = _mm256_set1_ps(0.5f);
  return _mm256_fnmadd_ps(v, q, _mm256_fmadd_ps(half, x, _mm256_mul_ps(half, ax)));
}

// 1 / (1 + exp(-x)). A division, not the reciprocal estimate and a Newton step: the divider runs
// beside the other units, and measured in a loop of SiLUs it was 12% faster.
[[gnu::always_inline]] inline __m256 sigmoid(__m256 x) {
  return _mm256_div_ps(_mm256_set1_ps(1.0f), one_plus_exp_neg(x));
}

[[gnu::always_inline]] inline __m256 activate(__m256 v, const PostOp& post) {
  if (!post.enabled) return v;
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  switch (post.kind) {
    case ActivationType::kRelu:
      return _mm256_max_ps(v, zero);
    case ActivationType::kLeakyRelu:
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(post.alpha)), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case ActivationType::kClip:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(post.alpha)), _mm256_set1_ps(post.beta));
    case ActivationType::kSilu:
      return _mm256_div_ps(v, one_plus_exp_neg(v));
    case ActivationType::kSigmoid:
      return sigmoid(v);
    case ActivationType::kHardSigmoid:
      return _mm256_max_ps(
          zero, _mm256_min_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(post.alpha), v, _mm256_set1_ps(post.beta))));
    case ActivationType::kHardSwish: {
      const __m256 g = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
      return _mm256_mul_ps(v, _mm256_max_ps(zero, _mm256_min_ps(one, g)));
    }
    case ActivationType::kGeluErf:
      return gelu_erf(v);
    default:
      return v;  // not reached: kernels decline what activation_vectorized() refuses
  }
}

}  // namespace kiln::cpu::avx2

#pragma GCC pop_options
#endif
