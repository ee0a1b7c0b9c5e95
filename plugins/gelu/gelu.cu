// CUDA kernels of GELU (float32, float16 computed in float): the shared element-wise kernel
// (plugins/common/unary_cuda.cuh) with two ops.
//
// erf: y = x * Phi(x) with Phi(-a) = 0.5 erfc(a/sqrt2) for a = |x| and Phi(a) = 1 - Phi(-a).
// erfcf costs ~55 instructions, too many for a memory-bound kernel on an H200 in float16, so the
// tail uses the form of Numerical Recipes' erfcc: erfc(z) = t * e^(-z^2 + P(t)), t = 1/(1 + z/2),
// relative error < 1.2e-7 for all z >= 0 with P of degree 9 (float32, with z^2 split exactly and
// the rounding of -z^2 + P recovered, so e^ keeps its few ulp up to z ~ 9.2 where results leave
// the normal range), or of degree 5 fitted for float16 (relative error < 1e-5, error of e^ ignored).
// The factor 0.5 is folded into P's constant as -ln2. Compared with the CPU kernel's erfc (a
// float emulation of this code): within 5e-7 relative for float32, 2e-5 for float16.
//
// tanh: the CPU kernel's x * sigmoid(2u), symmetric form (gelu_cpu.cpp), with u evaluated by __fmul_rn /
// __fadd_rn in the CPU's order so that no fma contraction changes u (an ulp of u moves e^-2u by
// 2|u| ulp); only e^ differs by a few ulp.
#include "plugins/common/unary_cuda.cuh"
#include "plugins/gelu/gelu.h"

namespace kiln::plugins {
namespace {

constexpr float kSqrtHalf = 0.70710677f;
constexpr float kSqrt2OverPi = 0.7978846f;
constexpr float kCubic = 0.044715f;
constexpr float kLn2 = 0.69314718f;

// P(t) = c0 + t(c1 + t(c2 + ...)). float32: Numerical Recipes' erfcc, degree 9. float16: degree
// 5, a least-squares-minimax fit of log(erfc(z)/t) + z^2 over z in [0, 12] (max error 8.4e-6).
__device__ __forceinline__ float erfc_p32(float t) {
  float p = fmaf(0.17087277f, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  return fmaf(p, t, -1.26551223f - kLn2);
}

__device__ __forceinline__ float erfc_p16(float t) {
  float p = fmaf(0.22720118f, t, -0.70465056f);
  p = fmaf(p, t, 0.46959356f);
  p = fmaf(p, t, 0.25691310f);
  p = fmaf(p, t, 1.01743913f);
  return fmaf(p, t, -1.26649310f - kLn2);
}

// Phi(-a) = 0.5 erfc(a / sqrt2) for a >= 0 (a = inf gives 0, a = NaN gives a finite value:
// the caller's x carries the NaN).
template <typename T>
__device__ __forceinline__ float gelu_lower_tail(float a) {
  if constexpr (std::is_same_v<T, float>) {
    // Past z = 10 the result is 0 in float; the clamp keeps inf out of the exact z^2 split.
    const float z = fminf(__fmul_rn(a, kSqrtHalf), 10.0f);
    const float t = __frcp_rn(fmaf(0.5f, z, 1.0f));
    const float c = erfc_p32(t);
    // e^(c - z^2): z^2 = hi + lo exactly; s = c - hi rounded, its error recovered by Fast2Sum
    // (exact once hi >= |c|, i.e. where the exponent is large enough for it to matter).
    const float hi = __fmul_rn(z, z);
    const float lo = fmaf(z, z, -hi);
    const float s = __fsub_rn(c, hi);
    const float s_err = __fsub_rn(c, __fadd_rn(s, hi));
    return __fmul_rn(t, cuda::exp_accurate(s, s_err - lo));
  } else {
    const float z = a * kSqrtHalf;
    const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
    const float c = erfc_p16(t);
    return t * cuda::exp_for<__half>(fmaf(-z, z, c));
  }
}

struct GeluErfOp {
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    const float q = gelu_lower_tail<T>(fabsf(x));
    return x * (x >= 0.0f ? 1.0f - q : q);
  }
};

struct GeluTanhOp {
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(kCubic, x), x), x);
    const float u = __fmul_rn(kSqrt2OverPi, __fadd_rn(x, cube));
    const float e = cuda::exp_for<T>(-2.0f * fabsf(u));
    return x * cuda::divide_for<T>(u >= 0.0f ? 1.0f : e, 1.0f + e);
  }
};

}  // namespace

int gelu_cuda(const void* x, void* y, int64_t n, DataType type, GeluApproximation approximation, void* stream) {
  if (approximation == GeluApproximation::kTanh) return cuda::launch_unary(x, y, n, type, stream, GeluTanhOp{});
  return cuda::launch_unary(x, y, n, type, stream, GeluErfOp{});
}

}  // namespace kiln::plugins
