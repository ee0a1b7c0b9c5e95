// CUDA kernel (tactic "cuda") of Unique (src/ir/ops_data_dependent.cpp), exactly as the CPU
// reference (data_dependent_cpu.cpp): x viewed as [outer, n, inner] around the axis (flatten:
// [1, volume, 1]), "element" j the slice x[:, j, :], compared lexicographically (float for
// float16; NaN after every number and equal to NaN). A simple, correct pipeline of launches:
//   1. bitonic sort of the slice numbers 0..n-1 by (slice, number): shared-memory tiles of
//      kTile, then global steps and shared-memory tails for longer rows (as top_k_cuda.cu);
//      ties by number, so each group of equal slices starts with its first occurrence;
//   2. flags (a sorted position starts a group) and a one-block scan of them: the group of
//      each sorted position, the number of groups U into the size output (read by the runtime);
//   3. per sorted position: the group's first occurrence and start, and for sorted = 0 a flag
//      per original position "is a first occurrence", whose scan orders the groups by it;
//   4. per group (U read on the device): its output position, indices, counts and Y's slice;
//   5. per input slice: inverse_indices.
// No host synchronization and no allocation; all scratch lives in the workspace.
// Layout: kLinear; n < 2^31.
#include <cuda_fp16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/scan_cuda.cuh"
#include "src/ir/data_dependent_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

constexpr int kTile = 2048;  // slice numbers one shared-memory sort pass holds

struct UniqueShape {
  int64_t outer = 1, n = 0, inner = 1;
  int64_t padded = 1;  // power of two >= n
  int64_t tile = 1;    // min(padded, kTile)
  bool sorted = true;
};

template <typename T>
struct Cmp {
  using type = T;
};
template <>
struct Cmp<__half> {
  using type = float;
};

template <typename T>
__device__ __forceinline__ typename Cmp<T>::type cmp_value(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return v;
  }
}

// -1, 0, 1: slice p before, equal to, after slice q.
template <typename T>
__device__ int slice_order(const T* __restrict__ x, const UniqueShape& s, int64_t p, int64_t q) {
  for (int64_t o = 0; o < s.outer; ++o) {
    const T* a = x + (o * s.n + p) * s.inner;
    const T* b = x + (o * s.n + q) * s.inner;
    for (int64_t i = 0; i < s.inner; ++i) {
      const auto u = cmp_value(a[i]), v = cmp_value(b[i]);
      const bool un = u != u, vn = v != v;  // NaN (never true for integers)
      if (un || vn) {
        if (un != vn) return un ? 1 : -1;
        continue;
      }
      if (u < v) return -1;
      if (v < u) return 1;
    }
  }
  return 0;
}

// a before b in the sort; numbers < 0 are padding, after every slice.
template <typename T>
__device__ __forceinline__ bool slice_before(const T* x, const UniqueShape& s, int32_t a, int32_t b) {
  if (a < 0 || b < 0) return a >= 0 && b < 0;
  const int c = slice_order(x, s, a, b);
  return c < 0 || (c == 0 && a < b);
}

// The compare-exchange of element i (row index) with i ^ stride at stage `block`.
template <typename T>
__device__ __forceinline__ void exchange(const T* x, const UniqueShape& s, int32_t* v, int64_t e, int64_t pe, int64_t i,
                                         int64_t block) {
  const bool asc = (i & block) == 0;
  const int32_t a = v[e], b = v[pe];
  if (asc ? slice_before(x, s, b, a) : slice_before(x, s, a, b)) {
    v[e] = b;
    v[pe] = a;
  }
}

// Each tile of s.tile numbers: loaded (0..n-1, padding after) and sorted completely in shared memory.
template <typename T>
__global__ void __launch_bounds__(kTile / 2)
    unique_sort_tile_kernel(const T* __restrict__ x, UniqueShape s, int32_t* __restrict__ order) {
  __shared__ int32_t tile[kTile];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * s.tile;
  for (int64_t e = threadIdx.x; e < s.tile; e += blockDim.x) {
    tile[e] = first + e < s.n ? static_cast<int32_t>(first + e) : -1;
  }
  __syncthreads();
  for (int64_t block = 2; block <= s.tile; block *= 2) {
    for (int64_t stride = block / 2; stride > 0; stride /= 2) {
      for (int64_t e = threadIdx.x; e < s.tile; e += blockDim.x) {
        const int64_t i = first + e, p = i ^ stride;
        if (p > i) exchange(x, s, tile, e, p - first, i, block);
      }
      __syncthreads();
    }
  }
  for (int64_t e = threadIdx.x; e < s.tile; e += blockDim.x) order[first + e] = tile[e];
}

// One global step (stride >= tile) of stage `block`.
template <typename T>
__global__ void unique_sort_global_kernel(const T* __restrict__ x, UniqueShape s, int32_t* __restrict__ order,
                                          int64_t block, int64_t stride) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.padded; i += step) {
    const int64_t p = i ^ stride;
    if (p > i) exchange(x, s, order, i, p, i, block);
  }
}

// The strides < tile of stage `block`, a tile at a time in shared memory.
template <typename T>
__global__ void __launch_bounds__(kTile / 2)
    unique_sort_tail_kernel(const T* __restrict__ x, UniqueShape s, int32_t* __restrict__ order, int64_t block) {
  __shared__ int32_t tile[kTile];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * s.tile;
  for (int64_t e = threadIdx.x; e < s.tile; e += blockDim.x) tile[e] = order[first + e];
  __syncthreads();
  for (int64_t stride = s.tile / 2; stride > 0; stride /= 2) {
    for (int64_t e = threadIdx.x; e < s.tile; e += blockDim.x) {
      const int64_t i = first + e, p = i ^ stride;
      if (p > i) exchange(x, s, tile, e, p - first, i, block);
    }
    __syncthreads();
  }
  for (int64_t e = threadIdx.x; e < s.tile; e += blockDim.x) order[first + e] = tile[e];
}

template <typename T>
__device__ __forceinline__ bool starts_group(const T* x, const UniqueShape& s, const int32_t* order, int64_t r) {
  return r == 0 || slice_order(x, s, order[r - 1], order[r]) != 0;
}

template <typename T>
__global__ void unique_flag_kernel(const T* __restrict__ x, UniqueShape s, const int32_t* __restrict__ order,
                                   int64_t* __restrict__ flags) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < s.n; r += step) {
    flags[r] = starts_group(x, s, order, r) ? 1 : 0;
  }
}

struct UniqueWork {
  const int32_t* order;
  const int64_t* before;  // exclusive scan of the group-start flags, by sorted position
  int32_t* group;         // group of each sorted position
  int32_t* first;         // first occurrence of each group
  int32_t* start;         // sorted position where each group starts
  int64_t* is_first;      // by original position: 1 for a first occurrence (then its exclusive scan)
  int32_t* position;      // output position of each group
};

template <typename T>
__global__ void unique_group_kernel(const T* __restrict__ x, UniqueShape s, UniqueWork w) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < s.n; r += step) {
    const bool head = starts_group(x, s, w.order, r);
    const int64_t g = w.before[r] + (head ? 1 : 0) - 1;
    w.group[r] = static_cast<int32_t>(g);
    if (head) {
      w.first[g] = w.order[r];
      w.start[g] = static_cast<int32_t>(r);
    }
    if (!s.sorted) w.is_first[w.order[r]] = head ? 1 : 0;
  }
}

// Per group g < U (U = *size): output position, indices, counts and Y's slice [outer, U, inner].
template <typename T>
__global__ void unique_write_kernel(const T* __restrict__ x, UniqueShape s, UniqueWork w,
                                    const int64_t* __restrict__ size, T* __restrict__ y, int64_t* __restrict__ indices,
                                    int64_t* __restrict__ counts) {
  const int64_t u = *size;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < u; g += step) {
    const int64_t j = w.first[g];
    const int64_t pos = s.sorted ? g : w.is_first[j];  // is_first holds its exclusive scan now
    w.position[g] = static_cast<int32_t>(pos);
    indices[pos] = j;
    counts[pos] = (g + 1 < u ? w.start[g + 1] : s.n) - w.start[g];
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* from = x + (o * s.n + j) * s.inner;
      T* to = y + (o * u + pos) * s.inner;
      for (int64_t i = 0; i < s.inner; ++i) to[i] = from[i];
    }
  }
}

__global__ void unique_inverse_kernel(UniqueShape s, UniqueWork w, int64_t* __restrict__ inverse) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < s.n; r += step) {
    inverse[w.order[r]] = w.position[w.group[r]];
  }
}

size_t align8(size_t b) { return (b + 7) / 8 * 8; }

class UniqueCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const UniqueParams& p = params_of<UniqueParams>(layer);
    const UniqueSlices slices = unique_slices(p, inputs[0].dims);
    s_ = UniqueShape{};
    s_.outer = slices.outer;
    s_.n = slices.n;
    s_.inner = slices.inner;
    if (s_.n >= INT32_MAX) {
      throw Error("Unique layer '" + layer.name() + "': " + std::to_string(s_.n) +
                  " elements (slices); the CUDA kernel takes fewer than 2^31");
    }
    while (s_.padded < s_.n) s_.padded *= 2;
    s_.tile = s_.padded < kTile ? s_.padded : kTile;
    s_.sorted = p.sorted;
  }

  size_t workspace_size() const override {
    const auto n = static_cast<size_t>(s_.n);
    return align8(static_cast<size_t>(s_.padded) * 4) + 2 * align8(n * 8) + 4 * align8(n * 4) + 8;
  }

  void execute(const KernelContext& ctx) override {
    cudaStream_t stream = stream_of(ctx);
    auto* size = ctx.outputs[4].as<int64_t>();
    if (s_.n == 0) {
      KILN_CUDA_CHECK(cudaMemsetAsync(size, 0, sizeof(int64_t), stream));
      return;
    }
    const auto n = static_cast<size_t>(s_.n);
    auto* ws = static_cast<uint8_t*>(ctx.workspace);
    auto take = [&](size_t bytes) {
      void* p = ws;
      ws += align8(bytes);
      return p;
    };
    auto* order = static_cast<int32_t*>(take(static_cast<size_t>(s_.padded) * 4));
    auto* before = static_cast<int64_t*>(take(n * 8));
    UniqueWork w{order,
                 before,
                 static_cast<int32_t*>(take(n * 4)),
                 static_cast<int32_t*>(take(n * 4)),
                 static_cast<int32_t*>(take(n * 4)),
                 static_cast<int64_t*>(take(n * 8)),
                 static_cast<int32_t*>(take(n * 4))};
    auto* scratch = static_cast<int64_t*>(take(8));
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* x = ctx.inputs[0].as<const T>();
      const auto tiles = static_cast<unsigned>(s_.padded / s_.tile);
      const int threads = static_cast<int>(s_.tile / 2 < 32 ? 32 : s_.tile / 2);
      unique_sort_tile_kernel<T><<<tiles, threads, 0, stream>>>(x, s_, order);
      KILN_CUDA_CHECK_LAUNCH();
      for (int64_t block = 2 * s_.tile; block <= s_.padded; block *= 2) {
        for (int64_t stride = block / 2; stride >= s_.tile; stride /= 2) {
          unique_sort_global_kernel<T><<<grid_for(s_.padded), kBlock, 0, stream>>>(x, s_, order, block, stride);
          KILN_CUDA_CHECK_LAUNCH();
        }
        unique_sort_tail_kernel<T><<<tiles, threads, 0, stream>>>(x, s_, order, block);
        KILN_CUDA_CHECK_LAUNCH();
      }
      unique_flag_kernel<T><<<grid_for(s_.n), kBlock, 0, stream>>>(x, s_, order, before);
      KILN_CUDA_CHECK_LAUNCH();
      exclusive_scan_one_block_kernel<<<1, kScanBlock, 0, stream>>>(before, s_.n, size);
      KILN_CUDA_CHECK_LAUNCH();
      unique_group_kernel<T><<<grid_for(s_.n), kBlock, 0, stream>>>(x, s_, w);
      KILN_CUDA_CHECK_LAUNCH();
      if (!s_.sorted) {
        exclusive_scan_one_block_kernel<<<1, kScanBlock, 0, stream>>>(w.is_first, s_.n, scratch);
        KILN_CUDA_CHECK_LAUNCH();
      }
      unique_write_kernel<T><<<grid_for(s_.n), kBlock, 0, stream>>>(
          x, s_, w, size, ctx.outputs[0].as<T>(), ctx.outputs[1].as<int64_t>(), ctx.outputs[3].as<int64_t>());
      KILN_CUDA_CHECK_LAUNCH();
      unique_inverse_kernel<<<grid_for(s_.n), kBlock, 0, stream>>>(s_, w, ctx.outputs[2].as<int64_t>());
      KILN_CUDA_CHECK_LAUNCH();
    };
    dispatch_data_dependent_type(ctx.inputs[0].type, "Unique", run);
  }

 private:
  UniqueShape s_;
};

bool unique_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  static const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kFloat64, DataType::kInt32,
                                    DataType::kInt64,   DataType::kInt8,    DataType::kUInt8,   DataType::kBool};
  bool typed = false;
  for (DataType k : kTypes) typed = typed || k == inputs[0].type;
  for (int i = 0; i < layer.num_outputs(); ++i) {
    if (layer.output(i) && layer.output(i)->format() != TensorFormat::kLinear) return false;
  }
  return typed && inputs[0].format == TensorFormat::kLinear && inputs[0].dims.volume() < INT32_MAX;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerUnique, "cuda", 100, unique_supports,
                                 [](const Layer&) { return std::make_unique<UniqueCuda>(); }});

}  // namespace kiln::cuda
