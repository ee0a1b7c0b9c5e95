// CUDA kernels of SoftMax (tactic "cuda"): softmax or log-softmax along any axis, float32 and
// float16 (computed in float). x is viewed as [outer, length, inner]; the CPU reference
// (math_cpu.cpp) subtracts the row max before e^ and sums in double; here sums are in float,
// e^ is accurate to a few ulp (reduce_cuda.cuh) and log(sum) is taken in double (once a row).
//
// Three kernels, chosen in prepare():
// - inner == 1, length <= 1024: a warp (or a power-of-two slice of one, for short rows) per row,
//   the row held in registers: one global read and one write per element.
// - inner == 1, length > 1024: a block per row; pass 1 folds a running (max, sum) pair per thread
//   (16-byte loads when the rows are 16-byte aligned), a block reduction merges them, pass 2
//   writes.
// - inner > 1 (axis not innermost): a 2-D block covers up to 256 adjacent `inner` columns (so
//   loads coalesce) with its y threads splitting the axis; (max, sum) pairs merge in shared memory.
//
// Layout: kLinear only (dense row-major); vector loads only where the pointers are 16-byte aligned.
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/reduce_cuda.cuh"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

using namespace reduction;  // NOLINT: this file's own helper header

constexpr int kWarpBlock = 128;     // threads per block of the warp-per-row kernel
constexpr int kRowBlock = 512;      // threads per block of the block-per-row kernel
constexpr int kStridedBlock = 256;  // threads per block of the strided kernel
constexpr int64_t kMaxWarpRow = 1024;

__device__ __forceinline__ float log_of_sum(float s) { return static_cast<float>(log(static_cast<double>(s))); }

// ---- warp per row ---------------------------------------------------------------------------

// kWidth lanes per row (a power of two <= 32), kPerLane values per lane: length <= kWidth*kPerLane.
template <typename T, int kPerLane, int kWidth>
__global__ void __launch_bounds__(kWarpBlock)
    softmax_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int length, bool log) {
  constexpr int kRowsPerWarp = 32 / kWidth;
  const int lane = static_cast<int>(threadIdx.x) % kWidth;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int64_t warps = gridDim.x * static_cast<int64_t>(blockDim.x) / 32;
  const int sub = (static_cast<int>(threadIdx.x) % 32) / kWidth;
  // The loop is uniform across the warp so that every shuffle has all 32 lanes.
  for (int64_t base = warp * kRowsPerWarp; base < rows; base += warps * kRowsPerWarp) {
    const int64_t row = base + sub;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * length;
    float v[kPerLane];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int idx = lane + i * kWidth;
      v[i] = valid && idx < length ? to_float(xr[idx]) : -INFINITY;
      m = v[i] > m ? v[i] : m;  // ignores NaN, as std::max in the reference
    }
#pragma unroll
    for (int off = kWidth / 2; off > 0; off /= 2) {
      const float o = shfl_xor(m, off, kWidth);
      m = o > m ? o : m;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + i * kWidth < length) {
        v[i] -= m;
        const float e = exp_for<T>(v[i]);
        s += e;
        if (!log) v[i] = e;
      }
    }
#pragma unroll
    for (int off = kWidth / 2; off > 0; off /= 2) s += shfl_xor(s, off, kWidth);
    if (!valid) continue;
    T* yr = y + row * length;
    if (log) {
      const float ls = log_of_sum(s);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int idx = lane + i * kWidth;
        if (idx < length) yr[idx] = from_float<T>(v[i] - ls);
      }
    } else {
      const float inv = __frcp_rn(s);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int idx = lane + i * kWidth;
        if (idx < length) yr[idx] = from_float<T>(v[i] * inv);
      }
    }
  }
}

using WarpKernel = void (*)(const void*, void*, int64_t, int, bool, cudaStream_t);

template <typename T, int kPerLane, int kWidth>
void launch_warp(const void* x, void* y, int64_t rows, int length, bool log, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarpBlock / kWidth;
  softmax_warp_kernel<T, kPerLane, kWidth><<<grid_for(rows, kRowsPerBlock), kWarpBlock, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), rows, length, log);
  KILN_CUDA_CHECK_LAUNCH();
}

// Entry i serves lengths up to 2^i.
template <typename T>
const std::array<WarpKernel, 11>& warp_kernels() {
  static const std::array<WarpKernel, 11> kTable = {
      &launch_warp<T, 1, 1>,  &launch_warp<T, 1, 2>,   &launch_warp<T, 1, 4>,   &launch_warp<T, 1, 8>,
      &launch_warp<T, 1, 16>, &launch_warp<T, 1, 32>,  &launch_warp<T, 2, 32>,  &launch_warp<T, 4, 32>,
      &launch_warp<T, 8, 32>, &launch_warp<T, 16, 32>, &launch_warp<T, 32, 32>,
  };
  return kTable;
}

// ---- block per row --------------------------------------------------------------------------

// Merges every thread's pair; all threads get the block's result. `shared` holds 32 pairs.
template <typename T>
__device__ MaxSum block_merge(MaxSum a, MaxSum* shared) {
  for (int off = 16; off > 0; off /= 2) a = max_sum_merge<T>(a, shfl_xor(a, off));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) shared[warp] = a;
  __syncthreads();
  if (warp == 0) {
    MaxSum b = lane < warps ? shared[lane] : max_sum_init();
    for (int off = 16; off > 0; off /= 2) b = max_sum_merge<T>(b, shfl_xor(b, off));
    if (lane == 0) shared[0] = b;
  }
  __syncthreads();
  const MaxSum r = shared[0];
  __syncthreads();  // shared is reused by the next row
  return r;
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t length, bool log, bool vec) {
  constexpr int kVec = kVecOf<T>;
  using P = Pack<T, kVec>;
  __shared__ MaxSum shared[32];
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * length;
    T* yr = y + row * length;
    MaxSum acc = max_sum_init();
    if (vec) {
      const P* xp = reinterpret_cast<const P*>(xr);
      for (int64_t i = tid; i < length / kVec; i += threads) {
        const P p = xp[i];
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc = max_sum_push<T>(acc, to_float(p.v[j]));
      }
    } else {
      for (int64_t i = tid; i < length; i += threads) acc = max_sum_push<T>(acc, to_float(xr[i]));
    }
    const MaxSum r = block_merge<T>(acc, shared);
    const float ls = log ? log_of_sum(r.s) : 0.0f;
    const float inv = __frcp_rn(r.s);
    if (vec) {
      const P* xp = reinterpret_cast<const P*>(xr);
      P* yp = reinterpret_cast<P*>(yr);
      for (int64_t i = tid; i < length / kVec; i += threads) {
        const P p = xp[i];
        P o;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float d = to_float(p.v[j]) - r.m;
          o.v[j] = from_float<T>(log ? d - ls : exp_for<T>(d) * inv);
        }
        yp[i] = o;
      }
    } else {
      for (int64_t i = tid; i < length; i += threads) {
        const float d = to_float(xr[i]) - r.m;
        yr[i] = from_float<T>(log ? d - ls : exp_for<T>(d) * inv);
      }
    }
  }
}

// ---- axis not innermost -----------------------------------------------------------------------

// blockDim = (bx, by), bx * by = kStridedBlock: bx adjacent columns of `inner`, by threads along
// the axis. Tiles: (outer index, group of bx columns).
template <typename T>
__global__ void __launch_bounds__(kStridedBlock)
    softmax_strided_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t length, int64_t inner,
                           int64_t tiles_per_outer, bool log) {
  __shared__ MaxSum shared[kStridedBlock];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int bx = static_cast<int>(blockDim.x), by = static_cast<int>(blockDim.y);
  for (int64_t tile = blockIdx.x; tile < outer * tiles_per_outer; tile += gridDim.x) {
    const int64_t o = tile / tiles_per_outer;
    const int64_t col = (tile - o * tiles_per_outer) * bx + tx;
    const bool valid = col < inner;
    const int64_t base = o * length * inner + col;
    MaxSum acc = max_sum_init();
    if (valid) {
      for (int64_t j = ty; j < length; j += by) acc = max_sum_push<T>(acc, to_float(x[base + j * inner]));
    }
    shared[ty * bx + tx] = acc;
    __syncthreads();
    for (int s = by / 2; s > 0; s /= 2) {
      if (ty < s) shared[ty * bx + tx] = max_sum_merge<T>(shared[ty * bx + tx], shared[(ty + s) * bx + tx]);
      __syncthreads();
    }
    const MaxSum r = shared[tx];
    __syncthreads();  // shared is reused by the next tile
    if (!valid) continue;
    const float ls = log ? log_of_sum(r.s) : 0.0f;
    const float inv = __frcp_rn(r.s);
    for (int64_t j = ty; j < length; j += by) {
      const float d = to_float(x[base + j * inner]) - r.m;
      y[base + j * inner] = from_float<T>(log ? d - ls : exp_for<T>(d) * inv);
    }
  }
}

// ---- the kernel ------------------------------------------------------------------------------

enum class SoftmaxPath { kWarp, kBlock, kStrided };

class SoftmaxCuda : public Kernel {
 public:
  explicit SoftmaxCuda(const Layer& layer)
      : axis_(params_of<SoftMaxParams>(layer).axis), log_(params_of<SoftMaxParams>(layer).log) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const Dims& d = inputs[0].dims;
    const int rank = d.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= std::max(rank, 1)) {
      throw Error("SoftMax layer '" + layer.name() + "': axis " + std::to_string(axis_) + " is out of range for " +
                  d.to_string());
    }
    outer_ = 1;
    inner_ = 1;
    length_ = rank == 0 ? 1 : d[static_cast<int>(axis)];
    for (int i = 0; i < axis; ++i) outer_ *= d[i];
    for (int i = static_cast<int>(axis) + 1; i < rank; ++i) inner_ *= d[i];
    if (inner_ > 1) {
      path_ = SoftmaxPath::kStrided;
      bx_ = std::min(pow2_ceil(inner_), kStridedBlock);
      by_ = kStridedBlock / bx_;
    } else {
      path_ = length_ <= kMaxWarpRow ? SoftmaxPath::kWarp : SoftmaxPath::kBlock;
    }
  }

  void execute(const KernelContext& ctx) override {
    const int64_t count = outer_ * length_ * inner_;
    if (count == 0) return;
    if (ctx.inputs[0].type == DataType::kFloat16) {
      run<__half>(ctx);
    } else {
      run<float>(ctx);
    }
  }

 private:
  template <typename T>
  void run(const KernelContext& ctx) const {
    const cudaStream_t stream = stream_of(ctx);
    const void* x = ctx.inputs[0].data;
    void* y = ctx.outputs[0].data;
    switch (path_) {
      case SoftmaxPath::kWarp: {
        int bucket = 0;
        while ((int64_t{1} << bucket) < length_) ++bucket;
        warp_kernels<T>()[static_cast<size_t>(bucket)](x, y, outer_, static_cast<int>(length_), log_, stream);
        return;
      }
      case SoftmaxPath::kBlock: {
        const bool vec = length_ % kVecOf<T> == 0 && aligned16(x) && aligned16(y);
        softmax_block_kernel<T><<<grid_for(outer_, 1), kRowBlock, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), outer_, length_, log_, vec);
        KILN_CUDA_CHECK_LAUNCH();
        return;
      }
      case SoftmaxPath::kStrided: {
        const int64_t tiles_per_outer = (inner_ + bx_ - 1) / bx_;
        softmax_strided_kernel<T><<<grid_for(outer_ * tiles_per_outer, 1), dim3(bx_, by_), 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), outer_, length_, inner_, tiles_per_outer, log_);
        KILN_CUDA_CHECK_LAUNCH();
        return;
      }
    }
  }

  int64_t axis_;
  bool log_;
  int64_t outer_ = 1, length_ = 1, inner_ = 1;
  SoftmaxPath path_ = SoftmaxPath::kWarp;
  int bx_ = 1, by_ = 1;
};

bool softmax_supports(const Layer&, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && is_cuda_float(inputs[0].type) && inputs[0].format == TensorFormat::kLinear;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerSoftMax, "cuda", 10, softmax_supports,
                                 [](const Layer& layer) { return std::make_unique<SoftmaxCuda>(layer); }});

}  // namespace kiln::cuda
