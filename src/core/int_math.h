// Integer helpers shared by the CPU and CUDA backends (one definition for both): exact integer
// powers and row-major strides. int_pow compiles for host and device code alike.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/types.h"

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KILN_HOST_DEVICE inline
#endif

namespace kiln {

// Exact integer power (wrapping on overflow); a negative exponent gives the truncated 1/a^|b|
// (1 for a = 1, +-1 for a = -1, else 0), as ONNX Runtime's integer Pow.
template <typename C>
KILN_HOST_DEVICE C int_pow(C a, C b) {
  if constexpr (std::is_signed_v<C>) {
    if (b < 0) {
      if (a == 1) return 1;
      if (a == -1) return (b % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  using U = std::make_unsigned_t<C>;
  U result = 1, base = static_cast<U>(a);
  for (auto e = static_cast<U>(b); e != 0; e >>= 1) {
    if (e & 1u) result = static_cast<U>(result * base);
    base = static_cast<U>(base * base);
  }
  return static_cast<C>(result);
}

// Row-major strides (in elements) of a list of extents, and of dims.
inline std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

inline std::vector<int64_t> row_major_strides(const Dims& dims) {
  std::vector<int64_t> s(static_cast<size_t>(dims.rank()));
  int64_t acc = 1;
  for (int i = dims.rank() - 1; i >= 0; --i) {
    s[static_cast<size_t>(i)] = acc;
    acc *= dims[i];
  }
  return s;
}

}  // namespace kiln
