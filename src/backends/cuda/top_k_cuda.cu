// CUDA kernel (tactic "cuda") of TopK: the k largest (smallest) values along an axis and their
// int64 indices, sorted, ties by lower index first, exactly as the CPU reference
// (indexing_cpu.cpp, std::partial_sort by (value, index)). Numbers compare as float for float16,
// natively otherwise. The tensor is viewed as [outer, n, inner]; a "row" is one (outer, inner)
// pair, its n elements `inner` apart.
// - k <= 32: k selection rounds per row (round t picks the best element strictly after round
//   t-1's pick in the (value, index) order, so no element needs marking), a warp per row
//   (n <= 1024) or a 256-thread block.
// - larger k: a bitonic sort of (value, index) pairs by the same order, in shared memory for
//   rows of <= 2048 elements, else in the workspace (a shared-memory pass sorts 2048-element
//   tiles, global passes and shared-memory tails merge them), then the first k of each row are
//   gathered.
// NaN order is unspecified (as std::partial_sort's with NaN): NaNs are never selected while
// other values remain.
// k not known when shapes are inferred (no host value for input 1): the outputs are sized for
// k = n; the sort path runs and the kernels read k from the device (clamped to [0, n]) and write
// the outputs compactly for it; a one-thread kernel writes k into output 2 (the data-dependent
// size the runtime reads, which also rejects a k outside [0, n]). With 3 outputs and a known k,
// output 2 gets k the same way.
//
// Layout: kLinear only (dense row-major); n < 2^31.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/position_ops_cuda.cuh"
#include "src/backends/cuda/op_helpers_cuda.cuh"
#include "src/ir/indexing_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"

namespace kiln::cuda {
namespace {

using namespace indexing;  // NOLINT: this family's own helper header

constexpr int kSelectMaxK = 32;  // TopK's selection path; larger k sort
constexpr int kSortTile = 2048;  // elements a shared-memory bitonic pass sorts

// ---- selection ----------------------------------------------------------------------------------

struct TopArgs {
  int64_t outer = 1, n = 1, inner = 1, k = 0;  // k: the upper bound n when read on the device
  bool largest = true;
  ColumnIndex col;
  const void* k_dev = nullptr;  // input 1 when k is only known at run time
  bool k64 = true;              // its type: int64 (else int32)
};

// The k the outputs are laid out for: a.k, or the run-time value clamped to [0, a.k].
__device__ __forceinline__ int64_t top_k_of(const TopArgs& a) {
  if (!a.k_dev) return a.k;
  const int64_t k = a.k64 ? *static_cast<const int64_t*>(a.k_dev) : *static_cast<const int32_t*>(a.k_dev);
  return k < 0 ? 0 : (k > a.k ? a.k : k);
}

// Output 2 of the layer: k as given (the runtime checks it against [0, n]).
__global__ void top_write_k_kernel(TopArgs a, int64_t* __restrict__ size) {
  if (!a.k_dev) {
    *size = a.k;
  } else {
    *size = a.k64 ? *static_cast<const int64_t*>(a.k_dev) : *static_cast<const int32_t*>(a.k_dev);
  }
}

// a before b in TopK's output order (strict; NaN is before nothing and nothing is before NaN).
template <typename C>
__device__ __forceinline__ bool top_before(C av, int64_t aj, C bv, int64_t bj, bool largest) {
  if (av != bv) return largest ? av > bv : av < bv;
  return aj < bj;
}

template <typename C>
__device__ __forceinline__ Cand<C> top_min(Cand<C> a, Cand<C> b, bool largest) {
  if (a.j < 0) return b;
  if (b.j < 0) return a;
  return top_before(b.v, b.j, a.v, a.j, largest) ? b : a;
}

// This thread's best element strictly after `prev` (none: no bound) among j = t, t + stride...
template <typename T>
__device__ __forceinline__ Cand<CmpT<T>> top_scan(const T* row, int64_t n, int64_t inner, int64_t t, int64_t stride,
                                                  Cand<CmpT<T>> prev, bool largest) {
  Cand<CmpT<T>> c{CmpT<T>{}, -1};
  for (int64_t j = t; j < n; j += stride) {
    const CmpT<T> v = to_cmp(row[j * inner]);
    if (is_nan_value(v)) continue;
    if (prev.j >= 0 && !top_before(prev.v, prev.j, v, j, largest)) continue;
    if (c.j < 0 || top_before(v, j, c.v, c.j, largest)) c = Cand<CmpT<T>>{v, j};
  }
  return c;
}

// Row r of the view: its first element and its first output element (outputs laid out for k).
__device__ __forceinline__ void top_row(const TopArgs& a, int64_t r, int64_t k, int64_t& in_base, int64_t& out_base) {
  int64_t o, i;
  a.col.split(r, o, i);
  in_base = o * a.n * a.inner + i;
  out_base = o * k * a.inner + i;
}

// One selection round's output (a round that finds nothing, only NaNs left, emits element 0).
template <typename T>
__device__ __forceinline__ void top_emit(const TopArgs& a, const T* row, T* values, int64_t* indices, int64_t out,
                                         Cand<CmpT<T>> c) {
  const int64_t j = c.j < 0 ? 0 : c.j;
  values[out] = row[j * a.inner];
  if (indices) indices[out] = j;
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    top_select_warp_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices, TopArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t r = warp; r < a.outer * a.inner; r += warps) {
    int64_t in_base, out_base;
    top_row(a, r, a.k, in_base, out_base);
    const T* row = x + in_base;
    Cand<CmpT<T>> prev{CmpT<T>{}, -1};
    for (int64_t t = 0; t < a.k; ++t) {
      Cand<CmpT<T>> c = top_scan(row, a.n, a.inner, lane, 32, prev, a.largest);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) c = top_min(c, shfl_cand(c, off), a.largest);
      if (lane == 0) top_emit(a, row, values, indices, out_base + t * a.inner, c);
      if (c.j < 0) c = prev;  // nothing left but NaNs: later rounds find nothing either
      prev = c;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    top_select_block_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices, TopArgs a) {
  using C = CmpT<T>;
  __shared__ Cand<C> shared[kBlockThreads / 32];
  __shared__ Cand<C> winner;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int64_t r = blockIdx.x; r < a.outer * a.inner; r += gridDim.x) {
    int64_t in_base, out_base;
    top_row(a, r, a.k, in_base, out_base);
    const T* row = x + in_base;
    Cand<C> prev{C{}, -1};
    for (int64_t t = 0; t < a.k; ++t) {
      Cand<C> c = top_scan(row, a.n, a.inner, tid, kBlockThreads, prev, a.largest);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) c = top_min(c, shfl_cand(c, off), a.largest);
      if (lane == 0) shared[warp] = c;
      __syncthreads();
      if (tid == 0) {
        for (int w = 1; w < kBlockThreads / 32; ++w) c = top_min(c, shared[w], a.largest);
        top_emit(a, row, values, indices, out_base + t * a.inner, c);
        winner = c.j < 0 ? prev : c;
      }
      __syncthreads();
      prev = winner;
      __syncthreads();  // winner and shared are rewritten by the next round
    }
  }
}

// ---- bitonic sort -------------------------------------------------------------------------------

// j < 0 marks padding, after every real element.
template <typename C>
struct SortPair {
  C v;
  int32_t j;
};

template <typename C>
__device__ __forceinline__ bool pair_before(const SortPair<C>& a, const SortPair<C>& b, bool largest) {
  if (b.j < 0) return a.j >= 0;
  if (a.j < 0) return false;
  return top_before(a.v, static_cast<int64_t>(a.j), b.v, static_cast<int64_t>(b.j), largest);
}

// One compare-exchange of the bitonic network over a row of `size` (a power of two): element i
// (i < partner = i ^ stride) and its partner end in order, ascending where (i & block) == 0.
template <typename C>
__device__ __forceinline__ void bitonic_step(SortPair<C>* s, int64_t i, int64_t stride, int64_t block, bool largest) {
  const int64_t p = i ^ stride;
  if (p <= i) return;
  const bool asc = (i & block) == 0;
  SortPair<C> a = s[i], b = s[p];
  const bool swap = asc ? pair_before(b, a, largest) : pair_before(a, b, largest);
  if (swap) {
    s[i] = b;
    s[p] = a;
  }
}

struct SortArgs {
  int64_t rows = 0;    // rows of the view (outer * inner)
  int64_t padded = 0;  // power of two >= n
  int64_t tile = 0;    // elements of one shared-memory tile: min(padded, kSortTile)
  TopArgs top;
};

template <typename T>
__device__ __forceinline__ SortPair<CmpT<T>> load_pair(const T* x, const TopArgs& a, int64_t in_base, int64_t j) {
  if (j >= a.n) return SortPair<CmpT<T>>{CmpT<T>{}, -1};
  return SortPair<CmpT<T>>{to_cmp(x[in_base + j * a.inner]), static_cast<int32_t>(j)};
}

// Sorts each tile of `tile` elements completely (all network stages up to size tile) in shared
// memory. `direct`: the tile is a whole row, so the first k go straight to the outputs;
// otherwise the tile goes to `work` (rows of `padded` pairs).
template <typename T>
__global__ void __launch_bounds__(kSortTile / 2)
    top_sort_tile_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices,
                         SortPair<CmpT<T>>* __restrict__ work, SortArgs s, bool direct) {
  using P = SortPair<CmpT<T>>;
  __shared__ P tile[kSortTile];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t tiles_per_row = s.padded / s.tile;
  const int64_t k = top_k_of(s.top);
  for (int64_t t = blockIdx.x; t < s.rows * tiles_per_row; t += gridDim.x) {
    const int64_t r = t / tiles_per_row;
    const int64_t first = (t - r * tiles_per_row) * s.tile;  // index of the tile's first element in its row
    int64_t in_base, out_base;
    top_row(s.top, r, k, in_base, out_base);
    for (int64_t e = tid; e < s.tile; e += blockDim.x) tile[e] = load_pair(x, s.top, in_base, first + e);
    __syncthreads();
    for (int64_t block = 2; block <= s.tile; block *= 2) {
      for (int64_t stride = block / 2; stride > 0; stride /= 2) {
        for (int64_t e = tid; e < s.tile; e += blockDim.x) {
          // Directions use the row index (first + e) so that tiles fit the row's network.
          const int64_t i = first + e, p = i ^ stride;
          if (p > i) {
            const bool asc = (i & block) == 0;
            P a = tile[e], b = tile[p - first];
            if (asc ? pair_before(b, a, s.top.largest) : pair_before(a, b, s.top.largest)) {
              tile[e] = b;
              tile[p - first] = a;
            }
          }
        }
        __syncthreads();
      }
    }
    if (direct) {
      for (int64_t e = tid; e < k; e += blockDim.x) {
        const int64_t j = tile[e].j < 0 ? 0 : tile[e].j;
        values[out_base + e * s.top.inner] = x[in_base + j * s.top.inner];
        if (indices) indices[out_base + e * s.top.inner] = j;
      }
    } else {
      P* w = work + r * s.padded + first;
      for (int64_t e = tid; e < s.tile; e += blockDim.x) w[e] = tile[e];
    }
    __syncthreads();  // the tile is reloaded by the next iteration
  }
}

// One global step (stride >= tile) of the network's stage `block`, over every row.
template <typename C>
__global__ void top_sort_global_kernel(SortPair<C>* __restrict__ work, SortArgs s, int64_t block, int64_t stride) {
  const int64_t total = s.rows * s.padded;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += step) {
    const int64_t r = g / s.padded;
    bitonic_step(work + r * s.padded, g - r * s.padded, stride, block, s.top.largest);
  }
}

// The remaining strides (< tile) of stage `block`, a tile at a time in shared memory.
template <typename C>
__global__ void __launch_bounds__(kSortTile / 2)
    top_sort_tail_kernel(SortPair<C>* __restrict__ work, SortArgs s, int64_t block) {
  __shared__ SortPair<C> tile[kSortTile];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t tiles_per_row = s.padded / s.tile;
  for (int64_t t = blockIdx.x; t < s.rows * tiles_per_row; t += gridDim.x) {
    const int64_t r = t / tiles_per_row;
    const int64_t first = (t - r * tiles_per_row) * s.tile;
    SortPair<C>* w = work + r * s.padded + first;
    for (int64_t e = tid; e < s.tile; e += blockDim.x) tile[e] = w[e];
    __syncthreads();
    for (int64_t stride = s.tile / 2; stride > 0; stride /= 2) {
      for (int64_t e = tid; e < s.tile; e += blockDim.x) {
        const int64_t i = first + e, p = i ^ stride;
        if (p > i) {
          const bool asc = (i & block) == 0;
          SortPair<C> a = tile[e], b = tile[p - first];
          if (asc ? pair_before(b, a, s.top.largest) : pair_before(a, b, s.top.largest)) {
            tile[e] = b;
            tile[p - first] = a;
          }
        }
      }
      __syncthreads();
    }
    for (int64_t e = tid; e < s.tile; e += blockDim.x) w[e] = tile[e];
    __syncthreads();
  }
}

// The first k pairs of each sorted row to the outputs (the grid covers the bound s.top.k).
template <typename T>
__global__ void top_gather_kernel(const T* __restrict__ x, const SortPair<CmpT<T>>* __restrict__ work,
                                  T* __restrict__ values, int64_t* __restrict__ indices, SortArgs s) {
  const int64_t total = s.rows * s.top.k;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t k = top_k_of(s.top);
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += step) {
    const int64_t r = g / s.top.k, e = g - r * s.top.k;
    if (e >= k) continue;
    int64_t in_base, out_base;
    top_row(s.top, r, k, in_base, out_base);
    const int32_t jj = work[r * s.padded + e].j;
    const int64_t j = jj < 0 ? 0 : jj;
    values[out_base + e * s.top.inner] = x[in_base + j * s.top.inner];
    if (indices) indices[out_base + e * s.top.inner] = j;
  }
}

class TopKCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const TopKParams& p = params_of<TopKParams>(layer);
    const Dims& d = inputs[0].dims;
    const int axis = normalized_axis_or_throw(p.axis, d.rank());
    const AxisView v(d, axis);
    a_ = TopArgs{};
    a_.outer = v.outer;
    a_.n = v.n;
    a_.inner = v.inner;
    a_.k = outputs[0].dims[axis];
    runtime_k_ = inputs[1].value == nullptr;  // then a_.k is the bound n and k is read on the device
    a_.k64 = inputs[1].type == DataType::kInt64;
    a_.largest = p.largest;
    a_.col = column_index(v, d.volume());
    if (a_.n >= INT32_MAX) {
      throw Error("TopK layer '" + layer.name() + "': the axis has " + std::to_string(a_.n) +
                  " elements; the CUDA kernel takes fewer than 2^31");
    }
    s_ = SortArgs{};
    s_.rows = a_.outer * a_.inner;
    s_.top = a_;
    s_.padded = 1;
    while (s_.padded < a_.n) s_.padded *= 2;
    s_.tile = std::min<int64_t>(s_.padded, kSortTile);
    pair_bytes_ = 8;
    dispatch_numeric(inputs[0].type, "TopK", [&](auto tag) {
      using T = typename decltype(tag)::type;
      pair_bytes_ = sizeof(SortPair<CmpT<T>>);
    });
  }

  size_t workspace_size() const override {
    return sorts() && s_.padded > s_.tile ? static_cast<size_t>(s_.rows * s_.padded) * pair_bytes_ : 0;
  }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    TopArgs a = a_;
    SortArgs s = s_;
    if (runtime_k_) a.k_dev = s.top.k_dev = ctx.inputs[1].data;
    if (ctx.outputs.size() > 2) {
      top_write_k_kernel<<<1, 1, 0, stream>>>(a, ctx.outputs[2].as<int64_t>());
      KILN_CUDA_CHECK_LAUNCH();
    }
    if (s_.rows == 0 || a_.k == 0) return;
    int64_t* indices = ctx.outputs.size() > 1 ? ctx.outputs[1].as<int64_t>() : nullptr;
    dispatch_numeric(ctx.inputs[0].type, "TopK", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = CmpT<T>;
      const T* x = ctx.inputs[0].as<const T>();
      T* values = ctx.outputs[0].as<T>();
      if (!sorts()) {
        if (a_.n <= kWarpRowMax) {
          top_select_warp_kernel<T>
              <<<grid_for(s_.rows, kRowThreads / 32), kRowThreads, 0, stream>>>(x, values, indices, a);
        } else {
          top_select_block_kernel<T><<<grid_for(s_.rows, 1), kBlockThreads, 0, stream>>>(x, values, indices, a);
        }
        KILN_CUDA_CHECK_LAUNCH();
        return;
      }
      const int threads = static_cast<int>(std::min<int64_t>(s_.tile / 2 < 32 ? 32 : s_.tile / 2, kSortTile / 2));
      if (s_.padded == s_.tile) {
        top_sort_tile_kernel<T><<<grid_for(s_.rows, 1), threads, 0, stream>>>(x, values, indices, nullptr, s, true);
        KILN_CUDA_CHECK_LAUNCH();
        return;
      }
      auto* work = static_cast<SortPair<C>*>(ctx.workspace);
      const int64_t tiles = s_.rows * (s_.padded / s_.tile);
      top_sort_tile_kernel<T><<<grid_for(tiles, 1), threads, 0, stream>>>(x, values, indices, work, s, false);
      KILN_CUDA_CHECK_LAUNCH();
      for (int64_t block = 2 * s_.tile; block <= s_.padded; block *= 2) {
        for (int64_t stride = block / 2; stride >= s_.tile; stride /= 2) {
          top_sort_global_kernel<C><<<grid_for(s_.rows * s_.padded), kBlock, 0, stream>>>(work, s, block, stride);
          KILN_CUDA_CHECK_LAUNCH();
        }
        top_sort_tail_kernel<C><<<grid_for(tiles, 1), threads, 0, stream>>>(work, s, block);
        KILN_CUDA_CHECK_LAUNCH();
      }
      top_gather_kernel<T><<<grid_for(s_.rows * a_.k), kBlock, 0, stream>>>(x, work, values, indices, s);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  // A run-time k takes the sort path, whose kernels read k on the device.
  bool sorts() const { return runtime_k_ || a_.k > kSelectMaxK; }

  TopArgs a_;
  SortArgs s_;
  size_t pair_bytes_ = 8;
  bool runtime_k_ = false;
};

bool top_k_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return inputs.size() >= 2 && is_numeric(inputs[0].type) && inputs[0].dims.rank() >= 1 && linear_io(layer, inputs);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerTopK, "cuda", 100, top_k_supports,
                                 [](const Layer&) { return std::make_unique<TopKCuda>(); }});

}  // namespace kiln::cuda
