// Shared by the data-dependent size kernels (data_dependent_cuda.cu, data_dependent_unique_cuda.cu):
// the element types they read, and a one-block exclusive prefix sum over int64 values: launch
// with <<<1, kScanBlock>>>. It
// loops over the input in block-sized chunks with a running carry, so any count works; meant for
// short arrays (per-tile counts, flags of a few thousand elements).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "kiln/error.h"
#include "kiln/types.h"

namespace kiln::cuda {

// Calls fn(T{}) for the element type of `t` (bool read as uint8: only zero or not matters);
// `what` names the layer type in the error for any other type.
template <typename Fn>
void dispatch_data_dependent_type(DataType t, const char* what, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32:
      fn(float{});
      break;
    case DataType::kFloat16:
      fn(__half{});
      break;
    case DataType::kFloat64:
      fn(double{});
      break;
    case DataType::kInt32:
      fn(int32_t{});
      break;
    case DataType::kInt64:
      fn(int64_t{});
      break;
    case DataType::kInt8:
      fn(int8_t{});
      break;
    case DataType::kUInt8:
    case DataType::kBool:
      fn(uint8_t{});
      break;
    default:
      throw Error(std::string(what) + ": unsupported data type " + to_string(t));
  }
}

constexpr int kScanBlock = 256;

// v[0..count) -> exclusive prefix sums in place; the sum into *total. A template so that every
// translation unit that launches it has its own instance (no relocatable device code needed).
template <int Block = kScanBlock>
__global__ void __launch_bounds__(Block)
    exclusive_scan_one_block_kernel(int64_t* __restrict__ v, int64_t count, int64_t* __restrict__ total) {
  __shared__ int64_t carry;
  __shared__ int64_t sums[Block];
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < count; base += Block) {
    const int64_t i = base + threadIdx.x;
    const int64_t own = i < count ? v[i] : 0;
    sums[threadIdx.x] = own;
    __syncthreads();
    for (int d = 1; d < Block; d *= 2) {  // Hillis-Steele inclusive scan
      const int64_t other = threadIdx.x >= d ? sums[threadIdx.x - d] : 0;
      __syncthreads();
      sums[threadIdx.x] += other;
      __syncthreads();
    }
    if (i < count) v[i] = carry + sums[threadIdx.x] - own;
    __syncthreads();
    if (threadIdx.x == 0) carry += sums[Block - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = carry;
}

}  // namespace kiln::cuda
