// Helpers shared by the CUDA kernels of the position-driven layers (indexing_cuda.cu: ArgReduce,
// CumSum, Trilu, OneHot, ReverseSequence, MaxUnpool; top_k_cuda.cu: TopK): the comparison type
// of an element type (float for float16), numeric-type dispatch, the [outer, n, inner] view
// around an axis and (value, index) candidates for warp reductions. In kiln::cuda::indexing so that
// these common names cannot collide with other kernel families' helpers. Included by .cu only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/element_types_cuda.cuh"
#include "src/backends/cuda/op_helpers_cuda.cuh"

namespace kiln::cuda::indexing {

constexpr int kRowThreads = 128;       // threads per block of the warp-per-row kernels
constexpr int kBlockThreads = 256;     // threads per block of the block-per-row kernels
constexpr int64_t kWarpRowMax = 1024;  // longer rows take a block

// The comparison type: float for float16, int for 8-bit integers (shufflable), else T.
template <typename T>
using CmpT = std::conditional_t<std::is_same_v<T, __half>, float, std::conditional_t<(sizeof(T) < 4), int, T>>;

template <typename T>
__host__ __device__ __forceinline__ CmpT<T> to_cmp(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return static_cast<CmpT<T>>(v);
  }
}

template <typename C>
__host__ __device__ __forceinline__ bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename T>
__host__ __device__ __forceinline__ T value_of(int v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Calls fn(std::type_identity<T>{}) for the numeric types these kernels take (cuda::NumericTypes:
// no bool, and none of int16, uint16, uint32, uint64, which the CPU reference of ArgReduce, TopK,
// CumSum and OneHot's indices does not take either).
template <typename Fn>
void dispatch_numeric(DataType t, const char* what, Fn&& fn) {
  if (!dispatch_type(NumericTypes{}, t, fn)) throw Error(std::string(what) + ": unsupported data type " + to_string(t));
}

inline bool is_numeric(DataType t) { return in_list(NumericTypes{}, t); }

inline bool linear_io(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  for (int i = 0; i < layer.num_outputs(); ++i) {
    if (layer.output(i) && layer.output(i)->format() != TensorFormat::kLinear) return false;
  }
  return true;
}

// [outer, n, inner] around `axis` of dims.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
  AxisView() = default;
  AxisView(const Dims& d, int axis) : n(d[axis]) {
    for (int i = 0; i < axis; ++i) outer *= d[i];
    for (int i = axis + 1; i < d.rank(); ++i) inner *= d[i];
  }
};

// Splits a flat index over [outer, inner] (a column of the axis view).
struct ColumnIndex {
  IndexDiv inner_div;
  int64_t inner = 1;
  bool k32 = true;
  __device__ __forceinline__ void split(int64_t idx, int64_t& o, int64_t& i) const {
    o = k32 ? inner_div.div<true>(idx) : inner_div.div<false>(idx);
    i = idx - o * inner;
  }
};

inline ColumnIndex column_index(const AxisView& v, int64_t total) {
  ColumnIndex c;
  c.inner = v.inner;
  c.inner_div = IndexDiv(v.inner);
  c.k32 = total < kFast32Limit;
  return c;
}

// A (value, index) candidate; j < 0: none.
template <typename C>
struct Cand {
  C v;
  int64_t j;
};

template <typename C>
__device__ __forceinline__ Cand<C> shfl_cand(Cand<C> c, int off) {
  return Cand<C>{oph::shfl_xor(c.v, off), oph::shfl_xor(c.j, off)};
}

}  // namespace kiln::cuda::indexing
