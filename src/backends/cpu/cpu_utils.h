// Small helpers for CPU kernels: type dispatch, strides, broadcasting index maps and a
// parallel loop on OpenMP with a caller-given thread count.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/error.h"
#include "kiln/types.h"
#include "src/core/half.h"
#include "src/core/int_math.h"  // row_major_strides, int_pow (shared with the CUDA backend)

namespace kiln::cpu {

// Strides of `in` broadcast to `out` (rank(out) >= rank(in), trailing alignment): 0 where the
// input extent is 1 and the output's is not.
inline std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out) {
  std::vector<int64_t> s(static_cast<size_t>(out.rank()), 0);
  const auto in_strides = row_major_strides(in);
  const int offset = out.rank() - in.rank();
  for (int i = 0; i < in.rank(); ++i) {
    s[static_cast<size_t>(i + offset)] = in[i] == 1 ? 0 : in_strides[static_cast<size_t>(i)];
  }
  return s;
}

// Offset into a broadcast input for a flat output index.
inline int64_t broadcast_offset(int64_t flat, const Dims& out, const std::vector<int64_t>& in_strides) {
  int64_t off = 0;
  for (int i = out.rank() - 1; i >= 0; --i) {
    const int64_t idx = flat % out[i];
    flat /= out[i];
    off += idx * in_strides[static_cast<size_t>(i)];
  }
  return off;
}

// Walks flat output indices upward from `begin` and keeps the matching offsets into K broadcast
// inputs (strides from broadcast_strides): advancing costs an add and a compare per element,
// where broadcast_offset divides once per dimension per element (which made the reference loops
// of small broadcast masks, e.g. BERT's [N, 1, S, S] attention mask, cost ~15 ns an element).
template <size_t K>
class BroadcastCursor {
 public:
  BroadcastCursor(const Dims& out, const std::array<const std::vector<int64_t>*, K>& strides, int64_t begin)
      : rank_(out.rank()) {
    for (int d = 0; d < rank_; ++d) ext_[d] = out[d];
    for (size_t k = 0; k < K; ++k) {
      off_[k] = 0;
      for (int d = 0; d < rank_; ++d) st_[k][d] = (*strides[k])[static_cast<size_t>(d)];
    }
    for (int d = rank_ - 1; d >= 0; --d) {
      idx_[d] = ext_[d] > 0 ? begin % ext_[d] : 0;
      begin = ext_[d] > 0 ? begin / ext_[d] : 0;
      for (size_t k = 0; k < K; ++k) off_[k] += idx_[d] * st_[k][d];
    }
  }
  int64_t operator[](size_t k) const { return off_[k]; }
  void next() {
    for (int d = rank_ - 1; d >= 0; --d) {
      for (size_t k = 0; k < K; ++k) off_[k] += st_[k][d];
      if (++idx_[d] < ext_[d]) return;
      for (size_t k = 0; k < K; ++k) off_[k] -= st_[k][d] * ext_[d];
      idx_[d] = 0;
    }
  }

 private:
  int rank_;
  int64_t ext_[kMaxDims] = {}, idx_[kMaxDims] = {};
  int64_t st_[K][kMaxDims] = {};
  int64_t off_[K] = {};
};

// Runs fn(begin, end) over [0, n) split into chunks on up to num_threads OpenMP threads.
template <typename Fn>
void parallel_for(int64_t n, int num_threads, Fn fn, int64_t min_chunk = 4096) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(num_threads > 0 ? num_threads : 1, (n + min_chunk - 1) / min_chunk);
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    fn(b, e);
  }
}

}  // namespace kiln::cpu

// Calls BODY with `using T = <C++ type>` for the data type; throws for types not listed.
#define KILN_DISPATCH_NUMERIC(dtype, what, ...)                                                       \
  switch (dtype) {                                                                                    \
    case ::kiln::DataType::kFloat32: {                                                                \
      using T = float;                                                                                \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kFloat64: {                                                                \
      using T = double;                                                                               \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kFloat16: {                                                                \
      using T = ::kiln::half;                                                                         \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kInt32: {                                                                  \
      using T = int32_t;                                                                              \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kInt64: {                                                                  \
      using T = int64_t;                                                                              \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kInt8: {                                                                   \
      using T = int8_t;                                                                               \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kUInt8: {                                                                  \
      using T = uint8_t;                                                                              \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    case ::kiln::DataType::kBool: {                                                                   \
      using T = bool;                                                                                 \
      __VA_ARGS__;                                                                                    \
      break;                                                                                          \
    }                                                                                                 \
    default:                                                                                          \
      throw ::kiln::Error(std::string(what) + ": unsupported data type " + ::kiln::to_string(dtype)); \
  }

// KILN_DISPATCH_NUMERIC plus the types only some kernels take (int16, uint16, uint32, uint64):
// ElementWise, BitShift and Cast.
#define KILN_DISPATCH_NUMERIC_WIDE(dtype, what, ...)   \
  switch (dtype) {                                     \
    case ::kiln::DataType::kInt16: {                   \
      using T = int16_t;                               \
      __VA_ARGS__;                                     \
      break;                                           \
    }                                                  \
    case ::kiln::DataType::kUInt16: {                  \
      using T = uint16_t;                              \
      __VA_ARGS__;                                     \
      break;                                           \
    }                                                  \
    case ::kiln::DataType::kUInt32: {                  \
      using T = uint32_t;                              \
      __VA_ARGS__;                                     \
      break;                                           \
    }                                                  \
    case ::kiln::DataType::kUInt64: {                  \
      using T = uint64_t;                              \
      __VA_ARGS__;                                     \
      break;                                           \
    }                                                  \
    default:                                           \
      KILN_DISPATCH_NUMERIC(dtype, what, __VA_ARGS__); \
  }

// Same, limited to floating-point types.
#define KILN_DISPATCH_FLOAT(dtype, what, ...)                                                                        \
  switch (dtype) {                                                                                                   \
    case ::kiln::DataType::kFloat32: {                                                                               \
      using T = float;                                                                                               \
      __VA_ARGS__;                                                                                                   \
      break;                                                                                                         \
    }                                                                                                                \
    case ::kiln::DataType::kFloat64: {                                                                               \
      using T = double;                                                                                              \
      __VA_ARGS__;                                                                                                   \
      break;                                                                                                         \
    }                                                                                                                \
    case ::kiln::DataType::kFloat16: {                                                                               \
      using T = ::kiln::half;                                                                                        \
      __VA_ARGS__;                                                                                                   \
      break;                                                                                                         \
    }                                                                                                                \
    default:                                                                                                         \
      throw ::kiln::Error(std::string(what) + ": expects a floating-point tensor, got " + ::kiln::to_string(dtype)); \
  }
