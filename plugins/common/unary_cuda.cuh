// The CUDA side of kiln's element-wise built-in plugins: one grid-stride kernel template per op
// functor, and the launcher that picks the vector or scalar path and the grid. Included by
// plugins/<name>/<name>.cu. An op is a struct with
//   template <typename T> __device__ float apply(float x) const;
// computing in float for both element types T = float and T = __half. The float16 path may use
// cheaper forms (exp_for<T>, divide_for<T>): its results round to 11 significant bits (4.9e-4),
// and at two bytes per element it has half the arithmetic time per byte to stay memory-bound.
//
// Layout and alignment: the kernel sees n contiguous elements (element-wise ops ignore the
// format). Pointers must be aligned to the element size. When input and output have the same
// offset within 16 bytes, a scalar head brings them to 16-byte alignment, the body moves
// 16 bytes per load/store (float4, or 8 halves as uint4 = 4 half2), and a scalar tail finishes;
// when their offsets differ no 16-byte access can be aligned on both, so everything is scalar.
// The launch goes on the caller's stream only, and never synchronizes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kiln/types.h"

namespace kiln::plugins::cuda {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 8 x 256 = 2048 threads: a full SM on sm_80/sm_90
constexpr int kUnroll = 2;       // 16-byte loads in flight per thread, for memory-level parallelism

// e^z from the ex2 instruction, accurate to a few ulp over the whole float range. __expf
// rounds z*log2(e) before ex2, which costs up to |z|*2^-24 relative (5e-6 near z = 87); the
// rounding error of that product, recovered exactly with an fma, is folded back as
// 2^lo ~ 1 + lo*ln2. `z_lo` is an optional low part of the argument: e^(z + z_lo) for a z that
// carries more than float precision. z is clamped so that +-inf give inf and 0, not NaN.
__device__ __forceinline__ float exp_accurate(float z, float z_lo = 0.0f) {
  constexpr float kLog2e = 1.44269502e+00f;    // float(log2(e))
  constexpr float kLog2eLo = 1.92596299e-08f;  // log2(e) - kLog2e
  constexpr float kLn2 = 6.93147182e-01f;
  z = fminf(fmaxf(z, -104.0f), 89.0f);  // e^-104 and e^89 are already 0 and inf in float
  const float hi = __fmul_rn(z, kLog2e);
  const float lo = fmaf(z_lo, kLog2e, fmaf(z, kLog2eLo, fmaf(z, kLog2e, -hi)));
  return exp2f(hi) * fmaf(lo, kLn2, 1.0f);
}

// e^z for results stored as T: exp_accurate for float (a few ulp); ex2(z*log2e) (= __expf,
// ~2 + 1.2|z| ulp of float, far below half's rounding) for __half.
template <typename T>
__device__ __forceinline__ float exp_for(float z) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_accurate(z);
  } else {
    return exp2f(z * 1.44269504f);
  }
}

// x / d for results stored as T. float: a correctly rounded reciprocal (d = inf gives 0; results
// down to FLT_MIN stay exact where __fdividef returns 0 for d > 2^126). __half: __fdividef.
template <typename T>
__device__ __forceinline__ float divide_for(float x, float d) {
  if constexpr (std::is_same_v<T, float>) {
    return x * __frcp_rn(d);
  } else {
    return __fdividef(x, d);
  }
}

template <typename T>
struct VecTraits;

template <>
struct VecTraits<float> {
  using Vec = float4;
  static constexpr int kWidth = 4;
  template <typename Op>
  __device__ __forceinline__ static float scalar(float x, const Op& op) {
    return op.template apply<float>(x);
  }
  template <typename Op>
  __device__ __forceinline__ static Vec vector(Vec v, const Op& op) {
    return make_float4(op.template apply<float>(v.x), op.template apply<float>(v.y), op.template apply<float>(v.z),
                       op.template apply<float>(v.w));
  }
};

template <>
struct VecTraits<__half> {
  using Vec = uint4;  // 8 halves
  static constexpr int kWidth = 8;
  template <typename Op>
  __device__ __forceinline__ static __half scalar(__half x, const Op& op) {
    return __float2half_rn(op.template apply<__half>(__half2float(x)));
  }
  template <typename Op>
  __device__ __forceinline__ static Vec vector(Vec v, const Op& op) {
    __half2 h[4];
    memcpy(h, &v, sizeof(v));  // a register reinterpretation; no memory traffic
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      h[i] = __floats2half2_rn(op.template apply<__half>(f.x), op.template apply<__half>(f.y));
    }
    memcpy(&v, h, sizeof(v));
    return v;
  }
};

// Resident blocks per SM for Op on T: kBlocksPerSm (2048 threads, so at most 32 registers per
// thread), unless the op declares `template <typename T> static constexpr int kBlocksPerSmFor`
// because its vector path needs more registers than that. A kernel held to 32 registers that needs
// more spills to local memory inside the loop (GELU-erf on float16 did: 8 bytes per thread, 0.881
// of the copy's bandwidth); 6 blocks (1536 threads, 40 registers) still keep 48 KiB per SM in
// flight, more than the memory system's bandwidth-latency product needs.
template <typename Op, typename T>
constexpr int blocks_per_sm() {
  if constexpr (requires { Op::template kBlocksPerSmFor<T>; }) {
    return Op::template kBlocksPerSmFor<T>;
  } else {
    return kBlocksPerSm;
  }
}

// Elements [0, head) and [head + nvec * kWidth, n) are scalar; the nvec vectors between start
// 16-byte aligned in both x and y.
// __launch_bounds__ asks for blocks_per_sm() resident blocks: the grid is sized for exactly that
// many, and a block that has to wait for a second wave would run the tail of the tensor at a
// fraction of the bandwidth.
template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads, (blocks_per_sm<Op, T>()))
    unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t head, int64_t nvec, Op op) {
  using Traits = VecTraits<T>;
  using Vec = typename Traits::Vec;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  const Vec* __restrict__ xv = reinterpret_cast<const Vec*>(x + head);
  Vec* __restrict__ yv = reinterpret_cast<Vec*>(y + head);
  for (int64_t i = tid; i < nvec; i += stride * kUnroll) {
    Vec v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < nvec) v[u] = xv[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < nvec) yv[i + u * stride] = Traits::vector(v[u], op);
    }
  }

  if (tid < head) y[tid] = Traits::scalar(x[tid], op);
  for (int64_t i = head + nvec * Traits::kWidth + tid; i < n; i += stride) y[i] = Traits::scalar(x[i], op);
}

template <typename T, typename Op>
int launch_unary_typed(const void* x_ptr, void* y_ptr, int64_t n, cudaStream_t stream, const Op& op) {
  const T* x = static_cast<const T*>(x_ptr);
  T* y = static_cast<T*>(y_ptr);
  constexpr int64_t kWidth = VecTraits<T>::kWidth;
  const uintptr_t x_offset = reinterpret_cast<uintptr_t>(x) % 16;
  const uintptr_t y_offset = reinterpret_cast<uintptr_t>(y) % 16;
  int64_t head = 0, nvec = 0;
  if (x_offset == y_offset) {
    head = std::min<int64_t>(n, static_cast<int64_t>((16 - x_offset) % 16 / sizeof(T)));
    nvec = (n - head) / kWidth;
  }

  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t per_block = kThreads * (nvec > 0 ? kWidth : 1);
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>((n + per_block - 1) / per_block, static_cast<int64_t>(sms) * blocks_per_sm<Op, T>()));

  unary_kernel<T, Op><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, n, head, nvec, op);
  return static_cast<int>(cudaGetLastError());
}

// Launches op over n elements of `type` (float32 or float16) on `stream` (a cudaStream_t).
// Returns 0 or a cudaError_t.
template <typename Op>
int launch_unary(const void* x, void* y, int64_t n, DataType type, void* stream, const Op& op) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (n <= 0) return 0;
  switch (type) {
    case DataType::kFloat32:
      return launch_unary_typed<float>(x, y, n, s, op);
    case DataType::kFloat16:
      return launch_unary_typed<__half>(x, y, n, s, op);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace kiln::plugins::cuda
