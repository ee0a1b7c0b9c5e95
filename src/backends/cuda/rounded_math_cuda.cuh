// Element types and IEEE-rounded arithmetic for CUDA kernels that must match the CPU reference
// bit for bit under --use_fast_math (Quantize/Dequantize, GridSample, RoiAlign, Resize): Elem<T> loads an
// element into its compute type (float for float and __half, double for double) and stores it
// back; the *_rn helpers are correctly rounded and never contracted into an fma, as the
// reference's separate operations are (on the host, where kernels' helpers also run, plain
// operators: the host compiler does not contract them). Resize uses the *_rn helpers too.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace kiln::cuda {

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  using C = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <>
struct Elem<__half> {
  using C = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Elem<double> {
  using C = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};

__host__ __device__ __forceinline__ float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ double add_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ double sub_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
__host__ __device__ __forceinline__ double div_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
__device__ __forceinline__ float floor_of(float a) { return floorf(a); }
__device__ __forceinline__ double floor_of(double a) { return floor(a); }
__device__ __forceinline__ float ceil_of(float a) { return ceilf(a); }
__device__ __forceinline__ double ceil_of(double a) { return ceil(a); }
__device__ __forceinline__ float round_even(float a) { return rintf(a); }
__device__ __forceinline__ double round_even(double a) { return rint(a); }
__device__ __forceinline__ float from_int64(int64_t v, float) { return __ll2float_rn(v); }
__device__ __forceinline__ double from_int64(int64_t v, double) { return __ll2double_rn(v); }

}  // namespace kiln::cuda
