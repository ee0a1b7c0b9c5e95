// CUDA kernels (tactic "cuda") of the position-driven layers ArgReduce (arg max / min, keep_dims,
// select_last_index, one_hot), CumSum, Trilu, OneHot, ReverseSequence and MaxUnpool (TopK is in
// top_k_cuda.cu). The CPU reference (indexing_cpu.cpp) is the oracle; each kernel matches it
// exactly (up to float summation order in CumSum). Tensors are viewed around one axis as
// [outer, n, inner].
//
// - ArgReduce: numbers compare as float for float16, natively otherwise. Along the innermost
//   axis (inner == 1, n > 16) a warp (n <= 1024) or a 256-thread block per row folds
//   (value, index) candidates and merges them with ties broken by index; otherwise a thread per
//   output scans the axis in order, adjacent threads on adjacent `inner` columns (coalesced).
//   NaN follows the reference's sequential loop: a NaN at index 0 wins, later NaNs never do.
// - CumSum: floats accumulate in double, integers in int64 (wrapping on the cast back, as the
//   reference). With the axis known on the host: along the innermost axis a warp per row scans
//   32 elements per step; otherwise a thread per column walks the axis. With the axis computed
//   on the device, a thread per column derives the view from the axis it reads.
// - Trilu (k read on the device from its int32/int64 tensor), OneHot (indices of
//   cuda::NumericTypes or bool, as the reference, truncated toward zero; [off, on] read on the
//   device), ReverseSequence (lengths read on the device) and MaxUnpool move elements by width,
//   so they serve every element type.
// - MaxUnpool writes like Scatter without reduction (indices are flat over the default unpooled
//   shape and re-expressed in the strides of a larger output_shape): an owner pass (atomicMax of the input
//   position + 1 per output element, in the workspace) lets only the last input aimed at an
//   output write it, as the reference's sequential loop does.
// Run-time errors of the reference (a sequence length outside [0, T], an unpool index outside
// the output) are checked in prepare() and thrown as the reference does when those inputs are
// host-known. Otherwise no host check is possible without a synchronization: ReverseSequence
// copies such a batch entry unreversed, MaxUnpool drops such an element, and an int32 flag at
// the start of the workspace is set to 1 (reset by every execute; as Gather's flag in
// slice_gather_cuda.cu, nothing on the host reads it yet).
//
// Layout: kLinear only (dense row-major).
#include <cuda_fp16.h>

#include <algorithm>
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

constexpr size_t kFlagBytes = 256;  // the error flag's slot at the start of a workspace

// ---- ArgReduce -----------------------------------------------------------------------------------

struct ArgArgs {
  int64_t outer = 1, n = 1, inner = 1;
  bool is_max = true, last = false, one_hot = false;
  ColumnIndex col;
};

// Writes the selected index (or the one-hot mask along the axis) of column (o, i).
template <typename T>
__device__ __forceinline__ void arg_write(const ArgArgs& a, void* y, int64_t o, int64_t i, int64_t best) {
  if (a.one_hot) {
    T* m = static_cast<T*>(y) + o * a.n * a.inner + i;
    const T one = value_of<T>(1), zero = value_of<T>(0);
    for (int64_t j = 0; j < a.n; ++j) m[j * a.inner] = j == best ? one : zero;
  } else {
    static_cast<int64_t*>(y)[o * a.inner + i] = best;
  }
}

// The reference's loop, one thread per output column.
template <typename T>
__global__ void arg_column_kernel(const T* __restrict__ x, void* __restrict__ y, ArgArgs a) {
  const int64_t cols = a.outer * a.inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += step) {
    int64_t o, i;
    a.col.split(c, o, i);
    const T* p = x + o * a.n * a.inner + i;
    int64_t best = 0;
    CmpT<T> bv = to_cmp(p[0]);
    for (int64_t j = 1; j < a.n; ++j) {
      const CmpT<T> v = to_cmp(p[j * a.inner]);
      const bool better = a.is_max ? (v > bv || (a.last && v == bv)) : (v < bv || (a.last && v == bv));
      if (better) {
        best = j;
        bv = v;
      }
    }
    arg_write<T>(a, y, o, i, best);
  }
}

// Better candidate of two (either may be none): the better value, ties to the lower index (or
// the higher with select_last_index).
template <typename C>
__device__ __forceinline__ Cand<C> arg_merge(Cand<C> a, Cand<C> b, bool is_max, bool last) {
  if (a.j < 0) return b;
  if (b.j < 0) return a;
  if (a.v != b.v) return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  return (last ? a.j > b.j : a.j < b.j) ? a : b;
}

// This thread's candidate over elements t, t + stride, ... of a contiguous row; NaNs are skipped
// (the caller handles a NaN at index 0).
template <typename T>
__device__ __forceinline__ Cand<CmpT<T>> arg_scan(const T* row, int64_t n, int64_t t, int64_t stride, bool is_max,
                                                  bool last) {
  Cand<CmpT<T>> c{CmpT<T>{}, -1};
  for (int64_t j = t; j < n; j += stride) {
    const CmpT<T> v = to_cmp(row[j]);
    if (is_nan_value(v)) continue;
    if (c.j < 0 || (is_max ? (v > c.v || (last && v == c.v)) : (v < c.v || (last && v == c.v))))
      c = Cand<CmpT<T>>{v, j};
  }
  return c;
}

template <typename T>
__device__ __forceinline__ int64_t arg_result(const T* row, Cand<CmpT<T>> c) {
  return is_nan_value(to_cmp(row[0])) || c.j < 0 ? 0 : c.j;
}

// inner == 1: a warp per row.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    arg_warp_kernel(const T* __restrict__ x, void* __restrict__ y, ArgArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t row = warp; row < a.outer; row += warps) {
    const T* r = x + row * a.n;
    Cand<CmpT<T>> c = arg_scan(r, a.n, lane, 32, a.is_max, a.last);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) c = arg_merge(c, shfl_cand(c, off), a.is_max, a.last);
    const int64_t best = arg_result(r, c);
    if (a.one_hot) {
      T* m = static_cast<T*>(y) + row * a.n;
      for (int64_t j = lane; j < a.n; j += 32) m[j] = value_of<T>(j == best ? 1 : 0);
    } else if (lane == 0) {
      static_cast<int64_t*>(y)[row] = best;
    }
  }
}

// inner == 1, long rows: a block per row.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    arg_block_kernel(const T* __restrict__ x, void* __restrict__ y, ArgArgs a) {
  using C = CmpT<T>;
  __shared__ Cand<C> shared[kBlockThreads / 32];
  __shared__ int64_t result;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int64_t row = blockIdx.x; row < a.outer; row += gridDim.x) {
    const T* r = x + row * a.n;
    Cand<C> c = arg_scan(r, a.n, tid, kBlockThreads, a.is_max, a.last);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) c = arg_merge(c, shfl_cand(c, off), a.is_max, a.last);
    if (lane == 0) shared[warp] = c;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kBlockThreads / 32; ++w) c = arg_merge(c, shared[w], a.is_max, a.last);
      result = arg_result(r, c);
    }
    __syncthreads();
    const int64_t best = result;
    if (a.one_hot) {
      T* m = static_cast<T*>(y) + row * a.n;
      for (int64_t j = tid; j < a.n; j += kBlockThreads) m[j] = value_of<T>(j == best ? 1 : 0);
    } else if (tid == 0) {
      static_cast<int64_t*>(y)[row] = best;
    }
    __syncthreads();  // `result` and `shared` are reused by the next row
  }
}

class ArgReduceCuda : public Kernel {
 public:
  explicit ArgReduceCuda(const ArgReduceParams& params) : params_(params) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    const Dims& d = inputs[0].dims;
    const AxisView v(d, arg_reduce_axis(params_, d.rank()));
    a_ = ArgArgs{};
    a_.outer = v.outer;
    a_.n = v.n;
    a_.inner = v.inner;
    a_.is_max = params_.is_max;
    a_.last = params_.select_last_index;
    a_.one_hot = params_.one_hot;
    a_.col = column_index(v, d.volume());
  }

  void execute(const KernelContext& ctx) override {
    if (a_.outer * a_.inner == 0 || a_.n == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    void* y = ctx.outputs[0].data;
    dispatch_numeric(ctx.inputs[0].type, "ArgReduce", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      if (a_.inner > 1 || a_.n <= 16) {
        arg_column_kernel<T><<<grid_for(a_.outer * a_.inner), kBlock, 0, stream>>>(x, y, a_);
      } else if (a_.n <= kWarpRowMax) {
        arg_warp_kernel<T><<<grid_for(a_.outer, kRowThreads / 32), kRowThreads, 0, stream>>>(x, y, a_);
      } else {
        arg_block_kernel<T><<<grid_for(a_.outer, 1), kBlockThreads, 0, stream>>>(x, y, a_);
      }
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  ArgReduceParams params_;
  ArgArgs a_;
};

bool arg_reduce_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && is_numeric(inputs[0].type) && inputs[0].dims.rank() >= 1 && linear_io(layer, inputs);
}

// ---- CumSum ----------------------------------------------------------------------------------------

struct CumArgs {
  int64_t outer = 1, n = 1, inner = 1;
  bool exclusive = false, reverse = false;
  ColumnIndex col;
};

template <typename T>
using AccT = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

template <typename T>
__device__ __forceinline__ AccT<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<double>(__half2float(v));
  } else {
    return static_cast<AccT<T>>(v);
  }
}

template <typename T>
__device__ __forceinline__ T from_acc(AccT<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));  // as the reference: double -> float -> half
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(v)));  // wraps
  } else {
    return static_cast<T>(v);
  }
}

// A thread per column, walking the axis in order (as the reference).
template <typename T>
__global__ void cum_column_kernel(const T* __restrict__ x, T* __restrict__ y, CumArgs a) {
  const int64_t cols = a.outer * a.inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += step) {
    int64_t o, i;
    a.col.split(c, o, i);
    const int64_t base = o * a.n * a.inner + i;
    AccT<T> acc = 0;
    for (int64_t s = 0; s < a.n; ++s) {
      const int64_t at = base + (a.reverse ? a.n - 1 - s : s) * a.inner;
      const AccT<T> v = to_acc(x[at]);
      if (!a.exclusive) acc += v;
      y[at] = from_acc<T>(acc);
      if (a.exclusive) acc += v;
    }
  }
}

// inner == 1: a warp per row, 32 elements per step (an inclusive shuffle scan plus the carry).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) cum_warp_kernel(const T* __restrict__ x, T* __restrict__ y, CumArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t row = warp; row < a.outer; row += warps) {
    const T* xr = x + row * a.n;
    T* yr = y + row * a.n;
    AccT<T> carry = 0;
    for (int64_t s0 = 0; s0 < a.n; s0 += 32) {
      const int64_t s = s0 + lane;
      const int64_t j = a.reverse ? a.n - 1 - s : s;
      const AccT<T> v = s < a.n ? to_acc(xr[j]) : AccT<T>(0);
      AccT<T> inc = v;
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const AccT<T> o = oph::shfl_up(inc, off);
        if (lane >= off) inc += o;
      }
      AccT<T> exc = oph::shfl_up(inc, 1);
      if (lane == 0) exc = 0;
      if (s < a.n) yr[j] = from_acc<T>(carry + (a.exclusive ? exc : inc));
      carry += oph::shfl_idx(inc, 31);
    }
  }
}

// The axis known only on the device (a computed tensor): every thread reads it and derives the
// [outer, n, inner] view itself; a thread per column (the grid covers the most columns any axis
// could give). An axis out of range sets the workspace flag and leaves y unwritten.
struct CumDynamicArgs {
  int rank = 1;
  int64_t dims[kMaxDims] = {};
  int64_t total = 0;
  bool exclusive = false, reverse = false;
  const void* axis = nullptr;
  bool axis64 = true;
  int* flag = nullptr;
};

template <typename T>
__global__ void cum_dynamic_kernel(const T* __restrict__ x, T* __restrict__ y, CumDynamicArgs a) {
  int64_t axis = a.axis64 ? *static_cast<const int64_t*>(a.axis) : *static_cast<const int32_t*>(a.axis);
  if (axis < -a.rank || axis >= a.rank) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *a.flag = 1;
    return;
  }
  if (axis < 0) axis += a.rank;
  int64_t n = 1, inner = 1;
  for (int i = 0; i < a.rank; ++i) {
    if (i == axis) n = a.dims[i];
    if (i > axis) inner *= a.dims[i];
  }
  const int64_t cols = n > 0 ? a.total / n : 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += step) {
    const int64_t o = c / inner, i = c - o * inner;
    const int64_t base = o * n * inner + i;
    AccT<T> acc = 0;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t at = base + (a.reverse ? n - 1 - s : s) * inner;
      const AccT<T> v = to_acc(x[at]);
      if (!a.exclusive) acc += v;
      y[at] = from_acc<T>(acc);
      if (a.exclusive) acc += v;
    }
  }
}

class CumSumCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const Dims& d = inputs[0].dims;
    a_ = CumArgs{};
    const CumSumParams& p = params_of<CumSumParams>(layer);
    a_.exclusive = p.exclusive;
    a_.reverse = p.reverse;
    dynamic_ = inputs[1].value == nullptr;
    if (dynamic_) {
      dyn_ = CumDynamicArgs{};
      dyn_.rank = d.rank();
      for (int i = 0; i < d.rank(); ++i) dyn_.dims[i] = d[i];
      dyn_.total = d.volume();
      dyn_.exclusive = a_.exclusive;
      dyn_.reverse = a_.reverse;
      dyn_.axis64 = inputs[1].type == DataType::kInt64;
      return;
    }
    const int64_t axis = inputs[1].value->to_int64().at(0);
    if (axis < -d.rank() || axis >= d.rank()) {
      throw Error("CumSum layer '" + layer.name() + "': axis " + std::to_string(axis) + " is out of range for x " +
                  d.to_string());
    }
    const AxisView v(d, normalized_axis_or_throw(axis, d.rank()));
    a_.outer = v.outer;
    a_.n = v.n;
    a_.inner = v.inner;
    a_.col = column_index(v, d.volume());
  }

  size_t workspace_size() const override { return dynamic_ ? kFlagBytes : 0; }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    if (dynamic_) {
      if (dyn_.total == 0) return;
      CumDynamicArgs a = dyn_;
      a.axis = ctx.inputs[1].data;
      a.flag = static_cast<int*>(ctx.workspace);
      KILN_CUDA_CHECK(cudaMemsetAsync(a.flag, 0, sizeof(int), stream));
      dispatch_numeric(ctx.inputs[0].type, "CumSum", [&](auto tag) {
        using T = typename decltype(tag)::type;
        cum_dynamic_kernel<T>
            <<<grid_for(a.total), kBlock, 0, stream>>>(ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), a);
        KILN_CUDA_CHECK_LAUNCH();
      });
      return;
    }
    if (a_.outer * a_.n * a_.inner == 0) return;
    dispatch_numeric(ctx.inputs[0].type, "CumSum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      T* y = ctx.outputs[0].as<T>();
      if (a_.inner == 1 && a_.n > 32) {
        cum_warp_kernel<T><<<grid_for(a_.outer, kRowThreads / 32), kRowThreads, 0, stream>>>(x, y, a_);
      } else {
        cum_column_kernel<T><<<grid_for(a_.outer * a_.inner), kBlock, 0, stream>>>(x, y, a_);
      }
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  CumArgs a_;
  CumDynamicArgs dyn_;
  bool dynamic_ = false;
};

bool cum_sum_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !is_numeric(inputs[0].type) || inputs[0].dims.rank() < 1 || !linear_io(layer, inputs)) {
    return false;
  }
  if (inputs[0].dims.rank() > kMaxDims) return false;
  return inputs[1].type == DataType::kInt32 || inputs[1].type == DataType::kInt64;
}

// ---- Trilu -----------------------------------------------------------------------------------------

struct TriluArgs {
  int64_t total = 0, rows = 1, cols = 1;
  IndexDiv col_div, row_div;
  bool upper = true, k32 = true;
  const void* k = nullptr;  // device scalar (int32 or int64); null: k = 0
  bool k64 = true;
};

template <typename W>
__global__ void trilu_kernel(const W* __restrict__ x, W* __restrict__ y, TriluArgs a) {
  const int64_t k =
      a.k == nullptr ? 0 : (a.k64 ? *static_cast<const int64_t*>(a.k) : *static_cast<const int32_t*>(a.k));
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total; i += step) {
    const int64_t rc = a.k32 ? a.col_div.div<true>(i) : a.col_div.div<false>(i);
    const int64_t c = i - rc * a.cols;
    const int64_t b = a.k32 ? a.row_div.div<true>(rc) : a.row_div.div<false>(rc);
    const int64_t r = rc - b * a.rows;
    const bool keep = a.upper ? c - r >= k : c - r <= k;
    y[i] = keep ? x[i] : W{};
  }
}

class TriluCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const Dims& d = inputs[0].dims;
    a_ = TriluArgs{};
    a_.total = d.volume();
    a_.rows = d[d.rank() - 2];
    a_.cols = d[d.rank() - 1];
    a_.col_div = IndexDiv(a_.cols);
    a_.row_div = IndexDiv(a_.rows);
    a_.upper = params_of<TriluParams>(layer).upper;
    a_.k32 = a_.total < kFast32Limit;
    a_.k64 = inputs.size() > 1 && inputs[1].present && inputs[1].type == DataType::kInt64;
  }

  void execute(const KernelContext& ctx) override {
    if (a_.total == 0) return;
    TriluArgs a = a_;
    a.k = ctx.inputs.size() > 1 ? ctx.inputs[1].data : nullptr;
    const cudaStream_t stream = stream_of(ctx);
    dispatch_bytes(data_type_size(ctx.inputs[0].type), "Trilu", [&](auto tag) {
      using W = typename decltype(tag)::type;
      trilu_kernel<W><<<grid_for(a.total), kBlock, 0, stream>>>(static_cast<const W*>(ctx.inputs[0].data),
                                                                static_cast<W*>(ctx.outputs[0].data), a);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  TriluArgs a_;
};

bool trilu_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].dims.rank() < 2 || !linear_io(layer, inputs)) return false;
  if (inputs.size() > 1 && inputs[1].present && inputs[1].type != DataType::kInt32 &&
      inputs[1].type != DataType::kInt64) {
    return false;
  }
  const size_t e = data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

// ---- OneHot ----------------------------------------------------------------------------------------

struct OneHotArgs {
  int64_t total = 0, depth = 1, inner = 1;
  IndexDiv inner_div, depth_div;
  bool k32 = true;
};

template <typename I>
__device__ __forceinline__ int64_t truncated_index(I v) {
  if constexpr (std::is_same_v<I, __half>) {
    return static_cast<int64_t>(static_cast<double>(__half2float(v)));
  } else {
    return static_cast<int64_t>(static_cast<double>(v));
  }
}

// off_on: the two output values [off, on].
template <typename I, typename W>
__global__ void one_hot_kernel(const I* __restrict__ index, const W* __restrict__ off_on, W* __restrict__ y,
                               OneHotArgs a) {
  const W off = off_on[0], on = off_on[1];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total; i += step) {
    const int64_t q = a.k32 ? a.inner_div.div<true>(i) : a.inner_div.div<false>(i);
    const int64_t in = i - q * a.inner;
    const int64_t o = a.k32 ? a.depth_div.div<true>(q) : a.depth_div.div<false>(q);
    const int64_t j = q - o * a.depth;
    int64_t hot = truncated_index(index[o * a.inner + in]);
    if (hot < 0) hot += a.depth;
    y[i] = j == hot ? on : off;
  }
}

class OneHotCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>&, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& od = outputs[0].dims;
    const AxisView v(od, normalized_axis_or_throw(params_of<OneHotParams>(layer).axis, od.rank()));
    a_ = OneHotArgs{};
    a_.total = od.volume();
    a_.depth = v.n;
    a_.inner = v.inner;
    a_.inner_div = IndexDiv(v.inner);
    a_.depth_div = IndexDiv(v.n);
    a_.k32 = a_.total < kFast32Limit;
  }

  void execute(const KernelContext& ctx) override {
    if (a_.total == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    const TensorView& out = ctx.outputs[0];
    auto run = [&](auto itag) {
      using I = typename decltype(itag)::type;
      dispatch_bytes(data_type_size(out.type), "OneHot", [&](auto wtag) {
        using W = typename decltype(wtag)::type;
        one_hot_kernel<I, W><<<grid_for(a_.total), kBlock, 0, stream>>>(
            ctx.inputs[0].as<const I>(), static_cast<const W*>(ctx.inputs[2].data), static_cast<W*>(out.data), a_);
        KILN_CUDA_CHECK_LAUNCH();
      });
    };
    if (ctx.inputs[0].type == DataType::kBool) {
      run(std::type_identity<bool>{});
    } else {
      dispatch_numeric(ctx.inputs[0].type, "OneHot indices", run);
    }
  }

 private:
  OneHotArgs a_;
};

bool one_hot_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 3 || !linear_io(layer, inputs)) return false;
  if (inputs[0].type != DataType::kBool && !is_numeric(inputs[0].type)) return false;  // execute()'s index types
  const size_t e = data_type_size(inputs[2].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

// ---- ReverseSequence ----------------------------------------------------------------------------

struct ReverseArgs {
  int64_t total = 0, time = 1, batch = 1, time_stride = 1;
  IndexDiv time_stride_div, batch_stride_div, time_div, batch_div;
  bool k32 = true;
  const void* lens = nullptr;
  bool lens64 = true;
  int* flag = nullptr;
};

template <typename W>
__global__ void reverse_sequence_kernel(const W* __restrict__ x, W* __restrict__ y, ReverseArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total; i += step) {
    const int64_t qt = a.k32 ? a.time_stride_div.div<true>(i) : a.time_stride_div.div<false>(i);
    const int64_t t = qt - (a.k32 ? a.time_div.div<true>(qt) : a.time_div.div<false>(qt)) * a.time;
    const int64_t qb = a.k32 ? a.batch_stride_div.div<true>(i) : a.batch_stride_div.div<false>(i);
    const int64_t b = qb - (a.k32 ? a.batch_div.div<true>(qb) : a.batch_div.div<false>(qb)) * a.batch;
    int64_t len = a.lens64 ? static_cast<const int64_t*>(a.lens)[b] : static_cast<const int32_t*>(a.lens)[b];
    if (len < 0 || len > a.time) {
      *a.flag = 1;
      len = 0;
    }
    y[i] = x[t < len ? i + (len - 1 - 2 * t) * a.time_stride : i];
  }
}

class ReverseSequenceCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const Dims& d = inputs[0].dims;
    const ReverseSequenceParams& p = params_of<ReverseSequenceParams>(layer);
    const int batch_axis = normalized_axis_or_throw(p.batch_axis, d.rank());
    const int time_axis = normalized_axis_or_throw(p.time_axis, d.rank());
    int64_t tstride = 1, bstride = 1;
    for (int i = time_axis + 1; i < d.rank(); ++i) tstride *= d[i];
    for (int i = batch_axis + 1; i < d.rank(); ++i) bstride *= d[i];
    a_ = ReverseArgs{};
    a_.total = d.volume();
    a_.time = d[time_axis];
    a_.batch = d[batch_axis];
    a_.time_stride = tstride;
    a_.time_stride_div = IndexDiv(tstride);
    a_.batch_stride_div = IndexDiv(bstride);
    a_.time_div = IndexDiv(a_.time);
    a_.batch_div = IndexDiv(a_.batch);
    a_.k32 = a_.total < kFast32Limit;
    a_.lens64 = inputs[1].type == DataType::kInt64;
    if (const HostTensor* lens = inputs[1].value) {
      const std::vector<int64_t> v = lens->to_int64();
      for (size_t b = 0; b < v.size(); ++b) {
        if (v[b] < 0 || v[b] > a_.time) {
          throw Error("ReverseSequence layer '" + layer.name() + "': sequence_lens[" + std::to_string(b) + "] = " +
                      std::to_string(v[b]) + " is outside [0, " + std::to_string(a_.time) + "] (the time axis extent)");
        }
      }
    }
  }

  size_t workspace_size() const override { return kFlagBytes; }

  void execute(const KernelContext& ctx) override {
    if (a_.total == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    ReverseArgs a = a_;
    a.lens = ctx.inputs[1].data;
    a.flag = static_cast<int*>(ctx.workspace);
    KILN_CUDA_CHECK(cudaMemsetAsync(a.flag, 0, sizeof(int), stream));
    dispatch_bytes(data_type_size(ctx.inputs[0].type), "ReverseSequence", [&](auto tag) {
      using W = typename decltype(tag)::type;
      reverse_sequence_kernel<W><<<grid_for(a.total), kBlock, 0, stream>>>(static_cast<const W*>(ctx.inputs[0].data),
                                                                           static_cast<W*>(ctx.outputs[0].data), a);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  ReverseArgs a_;
};

bool reverse_sequence_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !linear_io(layer, inputs)) return false;
  if (inputs[1].type != DataType::kInt32 && inputs[1].type != DataType::kInt64) return false;
  const size_t e = data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

// ---- MaxUnpool ----------------------------------------------------------------------------------

// Indices are flat over the default unpooled shape [N, C, (D-1)*s - pb - pe + k ..]; a larger
// output_shape pads that tensor at the end of each axis (the reference), so an index is
// re-expressed in the output's strides unless the two shapes agree (`remap` false).
struct UnpoolArgs {
  int64_t in_count = 0, out_count = 0;
  int64_t unpooled_count = 0;  // valid indices are [0, unpooled_count)
  bool remap = false;
  int rank = 0;
  int64_t unpooled_stride[kMaxDims] = {};
  int64_t out_stride[kMaxDims] = {};
  int* flag = nullptr;
};

// Output position of unpooled flat index p (in range).
__device__ __forceinline__ int64_t unpool_target(const UnpoolArgs& a, int64_t p) {
  if (!a.remap) return p;
  int64_t at = 0, rest = p;
  for (int d = 0; d < a.rank; ++d) {
    const int64_t q = rest / a.unpooled_stride[d];
    at += q * a.out_stride[d];
    rest -= q * a.unpooled_stride[d];
  }
  return at;
}

// owner[t] = 1 + the last input position whose index lands on output position t.
template <typename O>
__global__ void unpool_owner_kernel(const int64_t* __restrict__ indices, O* __restrict__ owner, UnpoolArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.in_count; i += step) {
    const int64_t p = indices[i];
    if (p < 0 || p >= a.unpooled_count) {
      *a.flag = 1;
      continue;
    }
    atomicMax(owner + unpool_target(a, p), static_cast<O>(i + 1));
  }
}

template <typename W, typename O>
__global__ void unpool_write_kernel(const W* __restrict__ x, const int64_t* __restrict__ indices,
                                    const O* __restrict__ owner, W* __restrict__ y, UnpoolArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.in_count; i += step) {
    const int64_t p = indices[i];
    if (p < 0 || p >= a.unpooled_count) continue;
    const int64_t t = unpool_target(a, p);
    if (owner[t] == static_cast<O>(i + 1)) y[t] = x[i];
  }
}

class MaxUnpoolCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    a_ = UnpoolArgs{};
    a_.in_count = inputs[0].dims.volume();
    a_.out_count = outputs[0].dims.volume();
    owner64_ = a_.in_count >= int64_t{0xffffffff};
    // The default unpooled shape (indexing_cpu.cpp's max_unpool).
    const Dims& xd = inputs[0].dims;
    const Dims& yd = outputs[0].dims;
    Dims unpooled;
    try {
      unpooled = max_unpool_dims(params_of<MaxUnpoolParams>(layer), xd);
    } catch (const Error& e) {
      throw Error("MaxUnpool layer '" + layer.name() + "': " + e.what());
    }
    if (yd.rank() != unpooled.rank()) {
      throw Error("MaxUnpool layer '" + layer.name() + "': output " + yd.to_string() + " does not have the rank of x " +
                  xd.to_string());
    }
    a_.unpooled_count = unpooled.volume();
    a_.rank = unpooled.rank();
    a_.remap = false;
    int64_t us = 1, os = 1;
    for (int d = a_.rank - 1; d >= 0; --d) {
      if (unpooled[d] > yd[d]) {
        throw Error("MaxUnpool layer '" + layer.name() + "': output " + yd.to_string() +
                    " is smaller than the unpooled shape " + unpooled.to_string());
      }
      if (unpooled[d] != yd[d]) a_.remap = true;
      a_.unpooled_stride[d] = us;
      a_.out_stride[d] = os;
      us *= unpooled[d];
      os *= yd[d];
    }
    if (const HostTensor* idx = inputs[1].value) {
      const std::vector<int64_t> v = idx->to_int64();
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < 0 || v[i] >= a_.unpooled_count) {
          throw Error("MaxUnpool layer '" + layer.name() + "': indices[" + std::to_string(i) +
                      "] = " + std::to_string(v[i]) + " is outside the unpooled tensor (" + unpooled.to_string() +
                      ", " + std::to_string(a_.unpooled_count) + " elements)");
        }
      }
    }
  }

  size_t workspace_size() const override { return kFlagBytes + static_cast<size_t>(a_.out_count) * (owner64_ ? 8 : 4); }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    const size_t es = data_type_size(ctx.inputs[0].type);
    if (a_.out_count == 0) return;
    KILN_CUDA_CHECK(cudaMemsetAsync(ctx.outputs[0].data, 0, static_cast<size_t>(a_.out_count) * es, stream));
    if (a_.in_count == 0) return;
    UnpoolArgs a = a_;
    a.flag = static_cast<int*>(ctx.workspace);
    void* owner = static_cast<char*>(ctx.workspace) + kFlagBytes;
    KILN_CUDA_CHECK(cudaMemsetAsync(ctx.workspace, 0, workspace_size(), stream));
    if (owner64_) {
      run<unsigned long long>(ctx, a, owner, es, stream);
    } else {
      run<unsigned int>(ctx, a, owner, es, stream);
    }
  }

 private:
  template <typename O>
  void run(const KernelContext& ctx, const UnpoolArgs& a, void* owner_ptr, size_t es, cudaStream_t stream) const {
    auto* owner = static_cast<O*>(owner_ptr);
    const int64_t* indices = ctx.inputs[1].as<const int64_t>();
    unpool_owner_kernel<O><<<grid_for(a.in_count), kBlock, 0, stream>>>(indices, owner, a);
    KILN_CUDA_CHECK_LAUNCH();
    dispatch_bytes(es, "MaxUnpool", [&](auto tag) {
      using W = typename decltype(tag)::type;
      unpool_write_kernel<W, O><<<grid_for(a.in_count), kBlock, 0, stream>>>(
          static_cast<const W*>(ctx.inputs[0].data), indices, owner, static_cast<W*>(ctx.outputs[0].data), a);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

  UnpoolArgs a_;
  bool owner64_ = false;
};

bool max_unpool_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !linear_io(layer, inputs) || inputs[1].type != DataType::kInt64) return false;
  const size_t e = data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerArgReduce, "cuda", 100, arg_reduce_supports,
    [](const Layer& layer) { return std::make_unique<ArgReduceCuda>(params_of<ArgReduceParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerCumSum, "cuda", 100, cum_sum_supports,
                                 [](const Layer&) { return std::make_unique<CumSumCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerTrilu, "cuda", 100, trilu_supports,
                                 [](const Layer&) { return std::make_unique<TriluCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerOneHot, "cuda", 100, one_hot_supports,
                                 [](const Layer&) { return std::make_unique<OneHotCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerReverseSequence, "cuda", 100, reverse_sequence_supports,
                                 [](const Layer&) { return std::make_unique<ReverseSequenceCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerMaxUnpool, "cuda", 100, max_unpool_supports,
                                 [](const Layer&) { return std::make_unique<MaxUnpoolCuda>(); }});

}  // namespace kiln::cuda
