// Fused activations in AVX-512 registers (16 lanes) for kiln's own float32 CPU kernels with an
// AVX-512 register block (packed_avx512 and the products built on it, depthwise_avx512,
// nchw_direct_avx512) and the "avx512" Activation tactic: activation_formulas.h's formulas, the
// same per lane as activation_avx2.h's 8-lane ones. Include only from code compiled for
// AVX-512F (KILN_ISA_AVX512_BEGIN, isa_region.h) and run it where cpu::has_avx512f().
#pragma once

#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/activation_avx2.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

KILN_ISA_AVX512_BEGIN

namespace kiln::cpu::avx512 {

// The operations activation_formulas.h is written in, on 16 lanes.
using V = __m512;
[[gnu::always_inline]] inline V set1(float f) { return _mm512_set1_ps(f); }
[[gnu::always_inline]] inline V add(V a, V b) { return _mm512_add_ps(a, b); }
[[gnu::always_inline]] inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
[[gnu::always_inline]] inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
[[gnu::always_inline]] inline V div(V a, V b) { return _mm512_div_ps(a, b); }
[[gnu::always_inline]] inline V min(V a, V b) { return _mm512_min_ps(a, b); }
[[gnu::always_inline]] inline V max(V a, V b) { return _mm512_max_ps(a, b); }
[[gnu::always_inline]] inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
[[gnu::always_inline]] inline V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
[[gnu::always_inline]] inline V fmsub(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }
[[gnu::always_inline]] inline V abs(V a) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
}
[[gnu::always_inline]] inline V with_exponent_added(V e, V t) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(e), _mm512_slli_epi32(_mm512_castps_si512(t), 23)));
}
[[gnu::always_inline]] inline V where_negative(V v, V a) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, a);
}

// Lane mask of the first `n` (0..16) lanes, for masked loads and stores.
[[gnu::always_inline]] inline __mmask16 lane_mask(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
}
constexpr int64_t kLanes = 16;
[[gnu::always_inline]] inline V load(const float* p) { return _mm512_loadu_ps(p); }
[[gnu::always_inline]] inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
[[gnu::always_inline]] inline V load_first(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(lane_mask(n), p); }
[[gnu::always_inline]] inline void store_first(float* p, int64_t n, V v) { _mm512_mask_storeu_ps(p, lane_mask(n), v); }

#include "src/backends/cpu/activation_formulas.h"

}  // namespace kiln::cpu::avx512

KILN_ISA_END
#endif
