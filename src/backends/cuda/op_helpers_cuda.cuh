// Small device helpers shared by the CUDA kernels of the normalization, indexing, TopK, scatter
// and einsum families (normalization_cuda.cu, indexing_cuda.cu, top_k_cuda.cu, scatter_cuda.cu,
// einsum_cuda.cu): a compact strided index map passed by value (at most kMaxDims axes, so a
// kernel can take a few of them within the parameter limit), warp shuffles of any value, warp
// and block sums, and 16-byte packs for vector loads.
// Everything lives in kiln::cuda::oph so that these common names cannot collide with other
// kernel families' helpers. Included by .cu files only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/types.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/strided_copy_cuda.cuh"

namespace kiln::cuda::oph {

constexpr unsigned kFullMask = 0xffffffffu;

// offset(i) = base + sum_k coord_k(i) * stride[k], coordinates of i row-major over extent[].
// Axis 0 is not reduced modulo its extent, so leading broadcast axes cost nothing.
struct SmallMap {
  int rank = 0;
  int64_t base = 0;
  IndexDiv div[kMaxDims];
  int64_t stride[kMaxDims] = {};
};

// Builds a SmallMap from (extent, stride) pairs, dropping extent-1 axes and merging neighbours
// that stay contiguous in the target; throws when more than kMaxDims axes remain.
inline SmallMap small_map(const std::vector<int64_t>& extent, const std::vector<int64_t>& stride, int64_t base = 0) {
  StridedMap m;
  m.base = base;
  for (size_t k = 0; k < extent.size(); ++k) m.push(extent[k], stride[k]);
  const StridedMap s = simplify(m);
  if (s.rank > kMaxDims) throw Error("index map has more than " + std::to_string(kMaxDims) + " axes");
  SmallMap out;
  out.rank = s.rank;
  out.base = s.base;
  for (int k = 0; k < s.rank; ++k) {
    out.div[k] = IndexDiv(s.extent[k]);
    out.stride[k] = s.stride[k];
  }
  return out;
}

template <bool k32>
__host__ __device__ __forceinline__ int64_t small_offset(const SmallMap& m, int64_t i) {
  int64_t off = m.base;
  KILN_UNROLL
  for (int k = kMaxDims - 1; k > 0; --k) {
    if (k < m.rank) {
      const int64_t q = m.div[k].template div<k32>(i);
      off += (i - q * m.div[k].d) * m.stride[k];
      i = q;
    }
  }
  if (m.rank > 0) off += i * m.stride[0];
  return off;
}

// The 32-bit division is valid when every index fed to the map is below 2^31.
__host__ __device__ __forceinline__ int64_t map_at(const SmallMap& m, int64_t i, bool k32) {
  return k32 ? small_offset<true>(m, i) : small_offset<false>(m, i);
}

// Warp shuffles of any shufflable value; 64-bit integers go through long long (the overloads
// CUDA declares on every platform).
template <typename V>
using ShflT = std::conditional_t<std::is_integral_v<V> && sizeof(V) == 8, long long, V>;

template <typename V>
__device__ __forceinline__ V shfl_xor(V v, int lane_mask, int width = 32) {
  return static_cast<V>(__shfl_xor_sync(kFullMask, static_cast<ShflT<V>>(v), lane_mask, width));
}
template <typename V>
__device__ __forceinline__ V shfl_up(V v, unsigned delta) {
  return static_cast<V>(__shfl_up_sync(kFullMask, static_cast<ShflT<V>>(v), delta));
}
template <typename V>
__device__ __forceinline__ V shfl_idx(V v, int src) {
  return static_cast<V>(__shfl_sync(kFullMask, static_cast<ShflT<V>>(v), src));
}

// Sum over groups of kWidth lanes (a power of two <= 32); every lane gets its group's sum.
template <int kWidth, typename V>
__device__ __forceinline__ V group_sum(V v) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off /= 2) v += shfl_xor(v, off, kWidth);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 33 values; the trailing barrier lets the caller reuse it at once.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  v = group_sum<32>(v);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? shared[lane] : 0.0f;
    t = group_sum<32>(t);
    if (lane == 0) shared[32] = t;
  }
  __syncthreads();
  const float r = shared[32];
  __syncthreads();
  return r;
}

// kN elements of T in one aligned access (16 bytes for kN * sizeof(T) == 16).
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace kiln::cuda::oph
