// Device helpers shared by the CUDA SoftMax and Reduce kernels (softmax_cuda.cu,
// reduce_cuda.cu): an accurate e^x (the library is built with --use_fast_math, where expf is
// __expf, whose error grows with |x|), the running (max, sum of e^(x-max)) pair that both
// softmax and log_sum_exp fold in one pass, warp shuffles for the accumulator types, and 16-byte
// packs for vectorized loads. In namespace kiln::cuda::reduction so that these common names
// cannot collide with other kernel families' helpers.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace kiln::cuda::reduction {

constexpr unsigned kFullMask = 0xffffffffu;

// e^z accurate to a few ulp over the float range: __expf rounds z*log2(e) before ex2, costing up
// to |z|*2^-24 relative; the product's rounding error, recovered with an fma, is folded back as
// 2^lo ~ 1 + lo*ln2. z is clamped so that +-inf give inf and 0, not NaN (NaN stays NaN).
__device__ __forceinline__ float exp_accurate(float z) {
  constexpr float kLog2e = 1.44269502e+00f;
  constexpr float kLog2eLo = 1.92596299e-08f;  // log2(e) - kLog2e
  constexpr float kLn2 = 6.93147182e-01f;
  z = z < -104.0f ? -104.0f : (z > 89.0f ? 89.0f : z);  // comparisons keep a NaN (fminf would not)
  const float hi = __fmul_rn(z, kLog2e);
  const float lo = fmaf(z, kLog2eLo, fmaf(z, kLog2e, -hi));
  return exp2f(hi) * fmaf(lo, kLn2, 1.0f);
}

// e^z for values that end up stored as T: float16 needs only ex2's accuracy.
template <typename T>
__device__ __forceinline__ float exp_for(float z) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_accurate(z);
  } else {
    return exp2f(z * 1.44269504f);
  }
}

// Running max m and s = sum e^(x - m) over the values folded so far (m = -inf, s = 0: none).
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum max_sum_init() { return MaxSum{-INFINITY, 0.0f}; }

// Folds one value. -inf values add e^-inf = 0 (also while m is still -inf, where x - m is NaN);
// a NaN makes s NaN, as in the CPU reference.
template <typename T>
__device__ __forceinline__ MaxSum max_sum_push(MaxSum a, float x) {
  if (x > a.m) {
    a.s = a.s * exp_for<T>(a.m - x) + 1.0f;
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += exp_for<T>(x - a.m);
  }
  return a;
}

template <typename T>
__device__ __forceinline__ MaxSum max_sum_merge(MaxSum a, MaxSum b) {
  const float m = a.m > b.m ? a.m : b.m;
  if (m == -INFINITY) return MaxSum{m, a.s + b.s};
  const float sa = a.m == -INFINITY ? 0.0f : a.s * exp_for<T>(a.m - m);
  const float sb = b.m == -INFINITY ? 0.0f : b.s * exp_for<T>(b.m - m);
  return MaxSum{m, sa + sb};
}

__device__ __forceinline__ float shfl_xor(float v, int lane_mask, int width = 32) {
  return __shfl_xor_sync(kFullMask, v, lane_mask, width);
}
__device__ __forceinline__ int64_t shfl_xor(int64_t v, int lane_mask, int width = 32) {
  return static_cast<int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(v), lane_mask, width));
}
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int lane_mask, int width = 32) {
  return MaxSum{__shfl_xor_sync(kFullMask, v.m, lane_mask, width), __shfl_xor_sync(kFullMask, v.s, lane_mask, width)};
}

// kN elements of T in one aligned 16-byte (or smaller) access.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

// Elements per 16-byte access.
template <typename T>
constexpr int kVecOf = static_cast<int>(16 / sizeof(T));

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p <<= 1;
  return p;
}

}  // namespace kiln::cuda::reduction
