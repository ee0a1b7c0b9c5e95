// The types the CUDA kernels compute in, defined once (the element-wise family and MatMul's
// tiled kernel used to keep a table each), as the CPU reference computes:
//   Calc<T>:  element-wise arithmetic on T. float16 computes in float; bool, 8- and 16-bit
//             integers in int32 (their arithmetic wraps modulo 2^8 / 2^16 on the store);
//             every other type (float, double, int32, uint32, int64, uint64) in itself.
//   Accum<T>: a sum of products of T (MatMul). float32 and float16 accumulate in float, the
//             integer types in int64.
//   to_compute<C>(v): v converted into either (float16 through __half2float).
// Device code only (included by .cu files and the device half of elementwise_cuda.cuh).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kiln::cuda {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, __half>;

template <typename T>
using Calc =
    std::conditional_t<kIsHalf<T>, float, std::conditional_t<std::is_integral_v<T> && (sizeof(T) < 4), int32_t, T>>;

template <typename T>
using Accum = std::conditional_t<std::is_same_v<T, float> || kIsHalf<T>, float, int64_t>;

template <typename C, typename T>
__device__ __forceinline__ C to_compute(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<C>(__half2float(v));
  } else {
    return static_cast<C>(v);
  }
}

}  // namespace kiln::cuda
