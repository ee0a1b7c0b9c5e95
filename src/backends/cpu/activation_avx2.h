// Fused activations in AVX2 registers for kiln's own float32 CPU kernels (today
// conv_winograd_cpu.cpp's output transform): the kinds activation_vectorized() accepts, computed on 8 lanes with the
// formulas of src/core/activation_math.h (sigmoid from a polynomial exp and a reciprocal estimate
// refined once: within a few ulp of the reference's std::exp and division).
#pragma once

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
      return true;
    default:
      return false;
  }
}

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

// exp(x) for x <= 0 (the polynomial and range reduction of src/backends/cpu/vector_exp.h).
[[gnu::always_inline]] inline __m256 exp_nonpositive(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.33654f);
  const __m256 c = _mm256_max_ps(x, lowest);
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 nf = _mm256_sub_ps(_mm256_fmadd_ps(c, _mm256_set1_ps(1.4426950408889634f), magic), magic);
  __m256 f = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693145751953125f), c);
  f = _mm256_fnmadd_ps(nf, _mm256_set1_ps(1.428606765330187e-06f), f);
  __m256 e = _mm256_set1_ps(0.0013949027423451985f);
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.008374978300279546f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.04166621655013112f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.16666421065214246f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.5000000106139884f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(1.0000000353934702f));
  e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(0.9999999999617671f));
  const __m256i n = _mm256_cvtps_epi32(nf);
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  e = _mm256_mul_ps(e, scale);
  return _mm256_and_ps(e, _mm256_cmp_ps(x, lowest, _CMP_GT_OQ));  // 0 below float32's normal range
}

// 1 / (1 + exp(-x)), from exp(-|x|) so that the exponent is never positive.
[[gnu::always_inline]] inline __m256 sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 abs_x = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_setzero_ps(), abs_x));
  // 1 / d by the reciprocal estimate and one Newton step (about 1 ulp more than a division; a
  // division made SiLU cost more than the rest of a 16-channel layer's output transform).
  const __m256 d = _mm256_add_ps(one, e);
  __m256 r = _mm256_rcp_ps(d);
  r = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0f)));  // sigmoid(|x|)
  return _mm256_blendv_ps(r, _mm256_mul_ps(e, r), x);                  // x < 0: e / (1 + e)
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
      return _mm256_mul_ps(v, sigmoid(v));
    case ActivationType::kSigmoid:
      return sigmoid(v);
    case ActivationType::kHardSigmoid:
      return _mm256_max_ps(
          zero, _mm256_min_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(post.alpha), v, _mm256_set1_ps(post.beta))));
    case ActivationType::kHardSwish: {
      const __m256 g = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
      return _mm256_mul_ps(v, _mm256_max_ps(zero, _mm256_min_ps(one, g)));
    }
    default:
      return v;  // not reached: kernels decline what activation_vectorized() refuses
  }
}

}  // namespace kiln::cpu::avx2

#pragma GCC pop_options
#endif
