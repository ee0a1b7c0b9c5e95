// Fused activations in AVX2 registers (8 lanes) for kiln's own float32 CPU kernels (the epilogues
// of winograd_avx2, igemm_avx2 and the AVX2 products, the "avx2" Activation tactic) and the entry
// points that apply an activation to a buffer with the widest registers the processor has
// (activate_simd(): also the pass after oneDNN's convolutions). The kinds activation_vectorized()
// accepts, with activation_formulas.h's formulas (shared with activation_avx512.h's 16 lanes):
// sigmoid from a polynomial exp and a division, within 3e-7 of the reference's std::exp and
// division, relative, where the result is a normal float; GELU in one range of erfc, within 3e-8
// absolute + 3e-7 relative.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/backends/cpu/isa_region.h"
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

// Calls f.template operator()<kOn, K>() with post's activation as compile-time constants (kOn
// false: none), so that a kernel's store loop, built from a PostOp{kOn, K, alpha, beta}, is
// compiled once per kind with activate()'s switch folded away instead of switching on every
// register it stores. Measured on an AVX2 Zen 3 (session 30): GELU over a product's 6 x 16 tiles
// 1.07 ns an element with the switch, 0.73-0.86 without (a loop over a buffer: 0.72). Only for
// the kinds activation_vectorized() accepts (kernels decline the others).
template <class F>
decltype(auto) with_activation_kind(const PostOp& post, F&& f) {
  if (!post.enabled) return f.template operator()<false, ActivationType::kRelu>();
  switch (post.kind) {
    case ActivationType::kRelu:
      return f.template operator()<true, ActivationType::kRelu>();
    case ActivationType::kLeakyRelu:
      return f.template operator()<true, ActivationType::kLeakyRelu>();
    case ActivationType::kClip:
      return f.template operator()<true, ActivationType::kClip>();
    case ActivationType::kSilu:
      return f.template operator()<true, ActivationType::kSilu>();
    case ActivationType::kSigmoid:
      return f.template operator()<true, ActivationType::kSigmoid>();
    case ActivationType::kHardSigmoid:
      return f.template operator()<true, ActivationType::kHardSigmoid>();
    case ActivationType::kHardSwish:
      return f.template operator()<true, ActivationType::kHardSwish>();
    case ActivationType::kGeluErf:
      return f.template operator()<true, ActivationType::kGeluErf>();
    default:
      throw Error(std::string("activation ") + to_string(post.kind) +
                  " has no vectorized form (the kernel should have declined the layer)");
  }
}

// y = act(x) over n float32 elements on `threads` threads, with activate()'s formulas (y may be x),
// in AVX2 registers (activate_avx2) or AVX-512 ones (activate_avx512), or the widest the processor
// has (activate_simd: AVX-512 where cpu::has_avx512f(), else AVX2). Each returns false, computing
// nothing, where the processor or the build lacks its instructions or the kind is not one
// activate() computes. The widths give the same results. Defined in activation_avx2.cpp.
bool activate_avx2(const PostOp& post, const float* x, float* y, int64_t n, int threads);
bool activate_avx512(const PostOp& post, const float* x, float* y, int64_t n, int threads);
bool activate_simd(const PostOp& post, const float* x, float* y, int64_t n, int threads);

// Where oneDNN's convolutions leave the fused activation to activate_simd() after the primitive:
// SiLU and sigmoid on processors with AVX2 + FMA. oneDNN 2.6's jit swish post-op took about 7.3 ns
// per 8 outputs on this machine (a 32 -> 32 1x1 layer at 80x80: 0.215 ms with it, 0.122 with
// ReLU), activate_avx2() 2.9 (session 21, docs/status.md); the extra pass reads the output from
// cache.
bool activation_after_onednn(const PostOp& post);

}  // namespace kiln::cpu

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

KILN_ISA_AVX2_BEGIN

namespace kiln::cpu::avx2 {

// Lane mask of the first `n` (0..8) lanes, for masked loads and stores.
inline __m256i lane_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// The operations activation_formulas.h is written in, on 8 lanes.
using V = __m256;
[[gnu::always_inline]] inline V set1(float f) { return _mm256_set1_ps(f); }
[[gnu::always_inline]] inline V add(V a, V b) { return _mm256_add_ps(a, b); }
[[gnu::always_inline]] inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
[[gnu::always_inline]] inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
[[gnu::always_inline]] inline V div(V a, V b) { return _mm256_div_ps(a, b); }
[[gnu::always_inline]] inline V min(V a, V b) { return _mm256_min_ps(a, b); }
[[gnu::always_inline]] inline V max(V a, V b) { return _mm256_max_ps(a, b); }
[[gnu::always_inline]] inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
[[gnu::always_inline]] inline V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
[[gnu::always_inline]] inline V fmsub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }
[[gnu::always_inline]] inline V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
[[gnu::always_inline]] inline V with_exponent_added(V e, V t) {
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e), _mm256_slli_epi32(_mm256_castps_si256(t), 23)));
}
[[gnu::always_inline]] inline V where_negative(V v, V a) {
  return _mm256_blendv_ps(v, a, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
}
constexpr int64_t kLanes = 8;
[[gnu::always_inline]] inline V load(const float* p) { return _mm256_loadu_ps(p); }
[[gnu::always_inline]] inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
[[gnu::always_inline]] inline V load_first(const float* p, int64_t n) { return _mm256_maskload_ps(p, lane_mask(n)); }
[[gnu::always_inline]] inline void store_first(float* p, int64_t n, V v) { _mm256_maskstore_ps(p, lane_mask(n), v); }

#include "src/backends/cpu/activation_formulas.h"

}  // namespace kiln::cpu::avx2

KILN_ISA_END
#endif
