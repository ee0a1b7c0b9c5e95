// The element types of the CUDA kernels, in one place: the device C++ type of each DataType
// (`Element<kType>`, float16 as __half), lists of DataTypes as types (`TypeList<...>`) and
// `dispatch_type(list, t, fn)`, which calls fn(std::type_identity<T>{}) for the list's entry equal
// to t and returns false when t is not in the list (so that supports() and the dispatch in
// prepare()/execute() read the same list and cannot disagree). Kernels that compute on values
// (ElementWise, Cast, BitShift, the indexing family) name their list here instead of repeating a
// switch; data-movement kernels dispatch on the element width instead (strided_copy_cuda.cuh's
// dispatch_bytes). Strings have no device type: no list holds kString. Included by .cu only.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kiln/types.h"

namespace kiln::cuda {

template <DataType kType>
struct ElementOf;
template <>
struct ElementOf<DataType::kFloat32> {
  using type = float;
};
template <>
struct ElementOf<DataType::kFloat16> {
  using type = __half;
};
template <>
struct ElementOf<DataType::kFloat64> {
  using type = double;
};
template <>
struct ElementOf<DataType::kInt8> {
  using type = int8_t;
};
template <>
struct ElementOf<DataType::kUInt8> {
  using type = uint8_t;
};
template <>
struct ElementOf<DataType::kInt16> {
  using type = int16_t;
};
template <>
struct ElementOf<DataType::kUInt16> {
  using type = uint16_t;
};
template <>
struct ElementOf<DataType::kInt32> {
  using type = int32_t;
};
template <>
struct ElementOf<DataType::kUInt32> {
  using type = uint32_t;
};
template <>
struct ElementOf<DataType::kInt64> {
  using type = int64_t;
};
template <>
struct ElementOf<DataType::kUInt64> {
  using type = uint64_t;
};
template <>
struct ElementOf<DataType::kBool> {
  using type = bool;
};

template <DataType kType>
using Element = typename ElementOf<kType>::type;

template <DataType... kTypes>
struct TypeList {
  static constexpr size_t size = sizeof...(kTypes);
};

// The lists the kernels share.
// Numbers without the types only some kernels take: what the indexing, TopK, einsum and scatter
// kernels compute on.
using NumericTypes = TypeList<DataType::kFloat32, DataType::kFloat16, DataType::kFloat64, DataType::kInt32,
                              DataType::kInt64, DataType::kInt8, DataType::kUInt8>;
// Every integer type (BitShift).
using IntegerTypes = TypeList<DataType::kInt8, DataType::kUInt8, DataType::kInt16, DataType::kUInt16, DataType::kInt32,
                              DataType::kUInt32, DataType::kInt64, DataType::kUInt64>;
// Every type with a device representation (Cast).
using AllTypes = TypeList<DataType::kFloat32, DataType::kFloat16, DataType::kFloat64, DataType::kInt8, DataType::kUInt8,
                          DataType::kInt16, DataType::kUInt16, DataType::kInt32, DataType::kUInt32, DataType::kInt64,
                          DataType::kUInt64, DataType::kBool>;

// Calls fn(std::type_identity<Element<K>>{}) for the K of the list equal to t; false (fn not
// called) when t is not in the list.
template <DataType... kTypes, typename Fn>
bool dispatch_type(TypeList<kTypes...>, DataType t, Fn&& fn) {
  return ((t == kTypes && (fn(std::type_identity<Element<kTypes>>{}), true)) || ...);
}

template <DataType... kTypes>
constexpr bool in_list(TypeList<kTypes...>, DataType t) {
  return ((t == kTypes) || ...);
}

// Position of t in the list, or -1 (for tables indexed by type).
template <DataType... kTypes>
constexpr int index_in(TypeList<kTypes...>, DataType t) {
  int i = 0, found = -1;
  ((found = found < 0 && t == kTypes ? i : found, ++i), ...);
  return found;
}

// double -> float rounded to nearest, keeping float32 subnormals: kiln compiles with
// --use_fast_math, which makes a plain conversion flush them to zero (cvt.rn.ftz), while the CPU
// reference and ONNX Runtime keep them (pow(0.5f, 127) = 5.9e-39).
__device__ __forceinline__ float double_to_float_rn(double d) {
  float f;
  asm("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(d));
  return f;
}

}  // namespace kiln::cuda
