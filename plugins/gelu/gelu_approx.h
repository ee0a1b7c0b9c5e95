// The per-element math of GELU's CUDA kernels (gelu.cu), written once for the device and the host
// so that gelu_approx_test.cpp can check the very code the GPU runs against double precision over
// millions of points (and every float16 value). `Ops` supplies the operations whose device form
// is not IEEE: the approximate reciprocal and 2^x (MUFU.RCP / MUFU.EX2, about 1-2 ulp) and
// products and sums that must stay unfused; the test substitutes perturbed versions to bound them.
//
// erf, float32: y = x * Phi(x), Phi(-a) = 0.5 erfc(z), z = fl(a * fl(1/sqrt2)) rounded exactly as
// the CPU kernel rounds it (erfc's condition number 2z^2 would otherwise show at 1e-5 in the tail),
// erfc(z) = t * e^(-z^2 + P(u)), t = 1/(1 + z/2), u = 2.421 t - 1.421 in [-1, 1], P of degree 8,
// a Chebyshev fit of log(erfc(z)/t) + z^2 - ln 2 over z in [0, 9.5] (the - ln 2 is the 0.5; error
// 2.3e-7; past z = 9.5 the result is below 1e-39 and flushes). z^2 is split exactly (hi + lo) and
// the rounding of -z^2 + P recovered (Fast2Sum), so the exponent is exact to ~1e-7 absolute even
// at -80 and the tail keeps its relative accuracy. Phi(x) = 1 - Phi(-x) for x >= 0. One reciprocal,
// one 2^x, no division, no branch: about 30 instructions instead of erfcf's ~55 (the reciprocal
// used to be __frcp_rn, whose slow-path branch also kept the four elements of a float4 from
// interleaving). Max relative error against double precision at the same z: 6.1e-7 with exact
// reciprocal and 2^x, 1.2e-6 with both off by 2 ulp (gelu_approx_test.cpp).
//
// erf, float16 (results round to 11 bits, 4.9e-4): the same form in log2 units without the exact
// splits: t = 1/(1 + z/2), 2^(P(t) - z^2 log2(e)) with P of degree 4 fitted over z in [0, 4] (past
// that the result is below float16's smallest subnormal): error 6e-5. About 13 instructions.
//
// tanh, float16: x * sigmoid(2u) = x / (1 + 2^(x (c1 + c3 x^2))) with the constants of
// -2 sqrt(2/pi) log2(e) (1, 0.044715) folded: one 2^x, one reciprocal, 6 other operations. For
// x -> -inf the denominator becomes inf and the result -0 (NaN at -inf itself, like the CPU).
#pragma once

#include <math.h>

#include <cmath>

#ifdef __CUDACC__
#define KILN_GELU_HD __host__ __device__ __forceinline__
#else
#define KILN_GELU_HD inline
#endif

namespace kiln::plugins::gelu_math {

// The device's operations (on the host: the correctly rounded ones, which the device's approximate
// reciprocal and 2^x are within ~2 ulp of).
struct DeviceOps {
  KILN_GELU_HD static float rcp(float d) {
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
#else
    return 1.0f / d;
#endif
  }
  KILN_GELU_HD static float exp2(float x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return exp2f(x);
#endif
  }
  // Rounded product and sums that the compiler must not contract into an fma.
  KILN_GELU_HD static float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return fmaf(a, b, 0.0f);  // one rounding, and no a*b left for the compiler to fuse
#endif
  }
  KILN_GELU_HD static float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
  }
  KILN_GELU_HD static float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
  }
};

constexpr float kSqrtHalf = 0.70710677f;  // the CPU kernel's constant: z must round the same way
constexpr float kLog2e = 1.44269502e+00f;
constexpr float kLog2eLo = 1.92596299e-08f;  // log2(e) - kLog2e
constexpr float kLn2 = 6.93147182e-01f;

// 0.5 erfc(z) for 0 <= z (float32 path).
template <typename Ops = DeviceOps>
KILN_GELU_HD float half_erfc_f32(float z) {
  // Past z = 11 the exponent is below -170: 2^x gives exactly 0 (not a subnormal left to FTZ), so
  // x * 0 = -0 for every finite x < 0. The clamp also keeps inf out of the exact split.
  z = fminf(z, 11.0f);
  const float t = Ops::rcp(fmaf(0.5f, z, 1.0f));
  const float u = fmaf(t, 2.42105269f, -1.42105258f);
  float p = fmaf(7.25410573e-05f, u, -0.00038396279f);
  p = fmaf(p, u, -0.000246418669f);
  p = fmaf(p, u, 0.003451898f);
  p = fmaf(p, u, -0.000870802498f);
  p = fmaf(p, u, -0.0287179593f);
  p = fmaf(p, u, 0.0147185829f);
  p = fmaf(p, u, 0.565611005f);
  p = fmaf(p, u, -1.24678218f);
  // e^(p - z^2): z^2 = hi + lo exactly; s = p - hi rounded, its error s_err recovered exactly
  // (Fast2Sum, valid once hi >= |p|, i.e. where the exponent is large enough for it to matter).
  const float hi = Ops::mul_rn(z, z);
  const float lo = fmaf(z, z, -hi);
  const float s = Ops::sub_rn(p, hi);
  const float s_err = Ops::sub_rn(p, Ops::add_rn(s, hi));
  // 2^(s*log2e + tail): the product's rounding error and the low parts folded in as 1 + tail*ln2.
  const float e_hi = Ops::mul_rn(s, kLog2e);
  float e_lo = fmaf(s, kLog2e, -e_hi);
  e_lo = fmaf(s, kLog2eLo, e_lo);
  e_lo = fmaf(Ops::sub_rn(s_err, lo), kLog2e, e_lo);
  return t * (Ops::exp2(e_hi) * fmaf(e_lo, kLn2, 1.0f));
}

template <typename Ops = DeviceOps>
KILN_GELU_HD float gelu_erf_f32(float x) {
  const float q = half_erfc_f32<Ops>(Ops::mul_rn(fabsf(x), kSqrtHalf));  // Phi(-|x|)
  return x * (x >= 0.0f ? 1.0f - q : q);
}

// Phi(-|x|) to ~6e-5 relative (float16 path): t * 2^(P(t) - z^2 log2(e)), P including the
// log2(0.5) = -1, written in x directly (x^2 rounds by 2^-24 relative, far below float16's 2^-11).
template <typename Ops = DeviceOps>
KILN_GELU_HD float lower_tail_f16(float x) {
  const float t = Ops::rcp(fmaf(fabsf(x), 0.353553391f, 1.0f));  // z/2 = |x| / (2 sqrt2)
  float p = fmaf(0.0799792483f, t, -0.744602859f);
  p = fmaf(p, t, 1.26142967f);
  p = fmaf(p, t, 1.19910085f);
  p = fmaf(p, t, -2.79597807f);
  return t * Ops::exp2(fmaf(x * x, -0.721347520f, p));  // z^2 log2(e) = x^2 log2(e) / 2
}

template <typename Ops = DeviceOps>
KILN_GELU_HD float gelu_erf_f16(float x) {
  const float q = lower_tail_f16<Ops>(x);
  return x * (x >= 0.0f ? 1.0f - q : q);
}

template <typename Ops = DeviceOps>
KILN_GELU_HD float gelu_tanh_f16(float x) {
  // 2^(-2u log2 e), u = sqrt(2/pi)(x + 0.044715 x^3).
  const float e = Ops::exp2(x * fmaf(-0.10294324f, x * x, -2.30220819f));
  return x * Ops::rcp(1.0f + e);
}

}  // namespace kiln::plugins::gelu_math
