// CUDA kernels of Reduce (tactic "cuda"): sum, mean, max, min, prod, l1, l2, sum_square,
// log_sum, log_sum_exp over any set of axes, keep_dims either way (the output is dense in the
// kept dims' order both ways). float32 / float16 accumulate in float (the CPU reference uses
// double; l2, log_sum and log_sum_exp take the final sqrt / log in double); int32 / int64
// accumulate in int64 exactly like the reference for sum, mean, max, min, prod, l1 and
// sum_square (l2, log_sum and log_sum_exp of integers are left to the CPU). max/min propagate
// NaN as the reference does; log_sum_exp folds a running (max, sum e^(x-max)) pair in one pass.
//
// prepare() drops extent-1 dims, merges adjacent dims that are both reduced or both kept, and
// picks one of two paths:
// - rows: the reduced dims are one innermost run of >= 32 elements (e.g. the last axis, or H,W of
//   NCHW): a warp per row (<= 1024 elements) or a block per row, 16-byte loads when rows are
//   16-byte aligned; when there are few long rows, each row is split into chunks whose partial
//   states go to the workspace and a second kernel merges them.
// - strided: everything else (a reduced run followed by kept dims, several reduced runs, short
//   rows): a 2-D block whose x threads take adjacent outputs (coalesced when the innermost dim is
//   kept) and whose y threads split the reduction, merging in shared memory.
//
// Layout: kLinear only (dense row-major).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/reduce_cuda.cuh"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"

namespace kiln::cuda {
namespace {

using namespace reduction;  // NOLINT: this file's own helper header

constexpr int kThreads = 256;    // threads of the strided kernel and the warp-per-row kernel
constexpr int kRowBlock = 512;   // threads of the block-per-row kernel
constexpr int64_t kMinRow = 32;  // shorter innermost runs take the strided path
constexpr int64_t kMaxWarpRow = 1024;
constexpr int64_t kMinChunk = 8192;  // elements per block when long rows are split
constexpr size_t kStateBytes = 8;    // the largest State (int64 or MaxSum): workspace per partial

template <typename T>
using AccOf = std::conditional_t<std::is_integral_v<T>, int64_t, float>;

template <typename T>
__device__ __forceinline__ AccOf<T> load_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return static_cast<AccOf<T>>(v);
  }
}

template <typename T>
__device__ __forceinline__ T store_from(double v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else {
    return from_float<T>(static_cast<float>(v));
  }
}

// One reduce op on element type T: a State folded from raw values (push), merged with another
// (merge) and turned into the output value (finish).
template <ReduceOp kOp, typename T>
struct Reducer {
  using Acc = AccOf<T>;
  static constexpr bool kLse = kOp == ReduceOp::kLogSumExp;
  using State = std::conditional_t<kLse, MaxSum, Acc>;

  __device__ __forceinline__ static State init() {
    if constexpr (kLse) {
      return max_sum_init();
    } else if constexpr (kOp == ReduceOp::kMax) {
      if constexpr (std::is_integral_v<Acc>)
        return std::numeric_limits<Acc>::lowest();
      else
        return -INFINITY;
    } else if constexpr (kOp == ReduceOp::kMin) {
      if constexpr (std::is_integral_v<Acc>)
        return std::numeric_limits<Acc>::max();
      else
        return INFINITY;
    } else if constexpr (kOp == ReduceOp::kProd) {
      return Acc(1);
    } else {
      return Acc(0);
    }
  }

  __device__ __forceinline__ static State push(State s, T raw) {
    if constexpr (kLse) {
      return max_sum_push<T>(s, to_float(raw));
    } else {
      const Acc v = load_acc(raw);
      if constexpr (kOp == ReduceOp::kL1)
        return s + (v < Acc(0) ? -v : v);
      else if constexpr (kOp == ReduceOp::kL2 || kOp == ReduceOp::kSumSquare)
        return s + v * v;
      else
        return merge(s, v);
    }
  }

  __device__ __forceinline__ static State merge(State a, State b) {
    if constexpr (kLse) {
      return max_sum_merge<T>(a, b);
    } else if constexpr (kOp == ReduceOp::kMax) {
      return (b > a || b != b) ? b : a;  // NaN wins, as in the reference
    } else if constexpr (kOp == ReduceOp::kMin) {
      return (b < a || b != b) ? b : a;
    } else if constexpr (kOp == ReduceOp::kProd) {
      return a * b;
    } else {
      return a + b;
    }
  }

  __device__ __forceinline__ static T finish(State s, int64_t count) {
    if constexpr (kLse) {
      if (isinf(s.m)) return from_float<T>(s.m);
      return from_float<T>(static_cast<float>(static_cast<double>(s.m) + log(static_cast<double>(s.s))));
    } else if constexpr (kOp == ReduceOp::kMean) {
      if constexpr (std::is_integral_v<Acc>) {
        return static_cast<T>(count > 0 ? s / count : Acc(0));
      } else {
        return from_float<T>(count > 0 ? __fdiv_rn(s, static_cast<float>(count)) : 0.0f);
      }
    } else if constexpr (kOp == ReduceOp::kL2) {
      return store_from<T>(sqrt(static_cast<double>(s)));
    } else if constexpr (kOp == ReduceOp::kLogSum) {
      return store_from<T>(log(static_cast<double>(s)));
    } else if constexpr (std::is_integral_v<Acc>) {
      return static_cast<T>(s);
    } else {
      return from_float<T>(s);
    }
  }

  __device__ __forceinline__ static State warp_merge(State s) {
    for (int off = 16; off > 0; off /= 2) s = merge(s, shfl_xor(s, off));
    return s;
  }
};

// ---- rows path --------------------------------------------------------------------------------

struct RowsArgs {
  const void* x;
  void* y;
  void* partial;  // chunks > 1: rows * chunks states
  int64_t rows, length;
  int64_t chunks, chunk_len;  // chunk_len: a multiple of the vector width
  bool warp_per_row;
  bool vec;  // 16-byte loads (length % vector width == 0, x 16-byte aligned)
};

template <ReduceOp kOp, typename T>
__device__ __forceinline__ typename Reducer<kOp, T>::State fold_range(const T* x, int64_t begin, int64_t end, int first,
                                                                      int step, bool vec) {
  using R = Reducer<kOp, T>;
  typename R::State s = R::init();
  if (vec) {
    constexpr int kVec = kVecOf<T>;
    using P = Pack<T, kVec>;
    const P* xp = reinterpret_cast<const P*>(x);
    for (int64_t i = begin / kVec + first; i < end / kVec; i += step) {
      const P p = xp[i];
#pragma unroll
      for (int j = 0; j < kVec; ++j) s = R::push(s, p.v[j]);
    }
  } else {
    for (int64_t i = begin + first; i < end; i += step) s = R::push(s, x[i]);
  }
  return s;
}

template <ReduceOp kOp, typename T>
__global__ void __launch_bounds__(kRowBlock) reduce_rows_kernel(RowsArgs a) {
  using R = Reducer<kOp, T>;
  using State = typename R::State;
  __shared__ State shared[32];
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  State* partial = static_cast<State*>(a.partial);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32, warps = static_cast<int>(blockDim.x) / 32;
  const int64_t items = a.rows * a.chunks;
  const int64_t first = a.warp_per_row ? blockIdx.x * static_cast<int64_t>(warps) + warp : blockIdx.x;
  const int64_t stride = a.warp_per_row ? gridDim.x * static_cast<int64_t>(warps) : gridDim.x;
  for (int64_t item = first; item < items; item += stride) {
    const int64_t row = item / a.chunks, chunk = item - row * a.chunks;
    const int64_t begin = chunk * a.chunk_len;
    const int64_t end = std::min(a.length, begin + a.chunk_len);
    const T* xr = x + row * a.length;
    State s;
    if (a.warp_per_row) {
      s = R::warp_merge(fold_range<kOp, T>(xr, begin, end, lane, 32, a.vec));
    } else {
      s = R::warp_merge(fold_range<kOp, T>(xr, begin, end, tid, static_cast<int>(blockDim.x), a.vec));
      if (lane == 0) shared[warp] = s;
      __syncthreads();
      if (warp == 0) {
        s = R::warp_merge(lane < warps ? shared[lane] : R::init());
      }
      __syncthreads();  // shared is reused by the next item
    }
    if (tid % (a.warp_per_row ? 32 : static_cast<int>(blockDim.x)) == 0) {
      if (a.chunks == 1) {
        y[row] = R::finish(s, a.length);
      } else {
        partial[item] = s;
      }
    }
  }
}

// Merges the chunks of each row (few rows: one thread each).
template <ReduceOp kOp, typename T>
__global__ void reduce_partials_kernel(const void* partial, void* y, int64_t rows, int64_t chunks, int64_t length) {
  using R = Reducer<kOp, T>;
  using State = typename R::State;
  const State* p = static_cast<const State*>(partial);
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    State s = R::init();
    for (int64_t c = 0; c < chunks; ++c) s = R::merge(s, p[row * chunks + c]);
    static_cast<T*>(y)[row] = R::finish(s, length);
  }
}

template <ReduceOp kOp, typename T>
void launch_rows(const RowsArgs& a, cudaStream_t stream) {
  const int64_t items = a.rows * a.chunks;
  if (a.warp_per_row) {
    reduce_rows_kernel<kOp, T><<<grid_for(items, kThreads / 32), kThreads, 0, stream>>>(a);
  } else {
    reduce_rows_kernel<kOp, T><<<grid_for(items, 1), kRowBlock, 0, stream>>>(a);
  }
  KILN_CUDA_CHECK_LAUNCH();
  if (a.chunks > 1) {
    reduce_partials_kernel<kOp, T><<<grid_for(a.rows), kBlock, 0, stream>>>(a.partial, a.y, a.rows, a.chunks, a.length);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

// ---- strided path -----------------------------------------------------------------------------

struct StridedArgs {
  const void* x;
  void* y;
  int64_t outputs, length;  // length: elements folded into each output
  int kept_rank, red_rank;
  int64_t kept_dims[kMaxDims], kept_strides[kMaxDims];  // outermost first; strides in x
  int64_t red_dims[kMaxDims], red_strides[kMaxDims];
};

// Offset in x of mixed-radix index i over (dims, strides).
__device__ __forceinline__ int64_t radix_offset(int64_t i, int rank, const int64_t* dims, const int64_t* strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = i / dims[d];
    off += (i - q * dims[d]) * strides[d];
    i = q;
  }
  return off;
}

// blockDim = (bx, by), bx * by = kThreads, by a power of two.
template <ReduceOp kOp, typename T>
__global__ void __launch_bounds__(kThreads) reduce_strided_kernel(StridedArgs a) {
  using R = Reducer<kOp, T>;
  using State = typename R::State;
  __shared__ State shared[kThreads];
  const T* x = static_cast<const T*>(a.x);
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int bx = static_cast<int>(blockDim.x), by = static_cast<int>(blockDim.y);
  const int64_t tiles = (a.outputs + bx - 1) / bx;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile * bx + tx;
    const bool valid = o < a.outputs;
    State s = R::init();
    if (valid) {
      const T* base = x + radix_offset(o, a.kept_rank, a.kept_dims, a.kept_strides);
      if (a.red_rank <= 1) {
        const int64_t step = a.red_rank == 1 ? a.red_strides[0] : 0;
        for (int64_t j = ty; j < a.length; j += by) s = R::push(s, base[j * step]);
      } else {
        for (int64_t j = ty; j < a.length; j += by) {
          s = R::push(s, base[radix_offset(j, a.red_rank, a.red_dims, a.red_strides)]);
        }
      }
    }
    if (by > 1) {
      shared[ty * bx + tx] = s;
      __syncthreads();
      for (int h = by / 2; h > 0; h /= 2) {
        if (ty < h) shared[ty * bx + tx] = R::merge(shared[ty * bx + tx], shared[(ty + h) * bx + tx]);
        __syncthreads();
      }
      s = shared[tx];
      __syncthreads();  // shared is reused by the next tile
    }
    if (valid && ty == 0) static_cast<T*>(a.y)[o] = R::finish(s, a.length);
  }
}

template <ReduceOp kOp, typename T>
void launch_strided(const StridedArgs& a, int bx, int by, cudaStream_t stream) {
  const int64_t tiles = (a.outputs + bx - 1) / bx;
  reduce_strided_kernel<kOp, T><<<grid_for(tiles, 1), dim3(bx, by), 0, stream>>>(a);
  KILN_CUDA_CHECK_LAUNCH();
}

// ---- dispatch ---------------------------------------------------------------------------------

struct Launchers {
  void (*rows)(const RowsArgs&, cudaStream_t);
  void (*strided)(const StridedArgs&, int, int, cudaStream_t);
};

using LauncherKey = std::pair<DataType, ReduceOp>;

template <typename T, ReduceOp... kOps>
void add_type(std::map<LauncherKey, Launchers>* table, DataType type) {
  (table->emplace(LauncherKey{type, kOps}, Launchers{&launch_rows<kOps, T>, &launch_strided<kOps, T>}), ...);
}

const std::map<LauncherKey, Launchers>& launchers() {
  static const std::map<LauncherKey, Launchers> kTable = [] {
    using O = ReduceOp;
    std::map<LauncherKey, Launchers> t;
    add_type<float, O::kSum, O::kMean, O::kMax, O::kMin, O::kProd, O::kL1, O::kL2, O::kSumSquare, O::kLogSum,
             O::kLogSumExp>(&t, DataType::kFloat32);
    add_type<__half, O::kSum, O::kMean, O::kMax, O::kMin, O::kProd, O::kL1, O::kL2, O::kSumSquare, O::kLogSum,
             O::kLogSumExp>(&t, DataType::kFloat16);
    add_type<int32_t, O::kSum, O::kMean, O::kMax, O::kMin, O::kProd, O::kL1, O::kSumSquare>(&t, DataType::kInt32);
    add_type<int64_t, O::kSum, O::kMean, O::kMax, O::kMin, O::kProd, O::kL1, O::kSumSquare>(&t, DataType::kInt64);
    return t;
  }();
  return kTable;
}

int sm_count() {
  static const int count = [] {
    int device = 0, n = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return std::max(n, 1);
  }();
  return count;
}

class ReduceCuda : public Kernel {
 public:
  ReduceCuda(const Layer& layer, const ReduceParams& params) : name_(layer.name()), params_(params) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    const auto it = launchers().find(LauncherKey{inputs[0].type, params_.op});
    if (it == launchers().end()) {
      throw Error("Reduce layer '" + name_ + "' (CUDA): op " + to_string(params_.op) + " on " +
                  to_string(inputs[0].type) + " is not supported");
    }
    launch_ = it->second;
    const Dims& d = inputs[0].dims;
    const int rank = d.rank();
    std::vector<bool> reduced;
    try {
      reduced = reduced_axes(params_, rank);
    } catch (const Error& e) {
      throw Error("Reduce layer '" + name_ + "': " + e.what());
    }
    // Merged runs, outermost first: extent, reduced?, stride of the run's innermost dim.
    struct Run {
      int64_t extent;
      bool reduced;
      int64_t stride;
    };
    std::vector<Run> runs;
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      const int64_t e = d[i];
      const bool r = reduced[static_cast<size_t>(i)];
      if (e != 1) {
        if (!runs.empty() && runs.back().reduced == r && runs.back().stride * runs.back().extent == stride) {
          runs.back().extent *= e;  // the run's stride stays its innermost dim's
        } else {
          runs.push_back(Run{e, r, stride});
        }
      }
      stride *= e;
    }
    std::reverse(runs.begin(), runs.end());
    StridedArgs s{};
    int64_t outputs = 1, length = 1;
    for (const Run& r : runs) {
      if (r.reduced) {
        s.red_dims[s.red_rank] = r.extent;
        s.red_strides[s.red_rank++] = r.stride;
        length *= r.extent;
      } else {
        s.kept_dims[s.kept_rank] = r.extent;
        s.kept_strides[s.kept_rank++] = r.stride;
        outputs *= r.extent;
      }
    }
    s.outputs = outputs;
    s.length = length;
    strided_ = s;
    workspace_ = 0;
    rows_path_ = s.red_rank == 1 && !runs.empty() && runs.back().reduced && length >= kMinRow && outputs > 0;
    if (rows_path_) {
      RowsArgs& a = rows_;
      a = RowsArgs{};
      a.rows = outputs;
      a.length = length;
      a.warp_per_row = length <= kMaxWarpRow;
      a.chunks = 1;
      a.chunk_len = length;
      const int64_t want_items = int64_t{4} * sm_count();
      if (!a.warp_per_row && a.rows < want_items && length >= 2 * kMinChunk) {
        // Few long rows: split them so that every SM gets work.
        const int64_t chunks = std::min((want_items + a.rows - 1) / a.rows, length / kMinChunk);
        a.chunk_len = ((length + chunks - 1) / chunks + 15) / 16 * 16;  // a multiple of any vector width
        a.chunks = (length + a.chunk_len - 1) / a.chunk_len;
        if (a.chunks > 1) workspace_ = static_cast<size_t>(a.rows * a.chunks) * kStateBytes;
      }
    } else {
      // bx adjacent outputs x by threads along the reduction (powers of two, bx * by = kThreads).
      const int64_t inner = !runs.empty() && !runs.back().reduced ? runs.back().extent : 1;
      const int bx0 = std::min(pow2_ceil(inner), kThreads);
      by_ = std::min(pow2_ceil(length), kThreads / bx0);
      bx_ = kThreads / by_;
    }
  }

  size_t workspace_size() const override { return workspace_; }

  void execute(const KernelContext& ctx) override {
    const cudaStream_t stream = stream_of(ctx);
    if (strided_.outputs == 0) return;
    if (rows_path_) {
      RowsArgs a = rows_;
      a.x = ctx.inputs[0].data;
      a.y = ctx.outputs[0].data;
      a.partial = ctx.workspace;
      const auto width = static_cast<int64_t>(16 / data_type_size(ctx.inputs[0].type));  // kVecOf<T>
      a.vec = a.length % width == 0 && aligned16(a.x);
      launch_.rows(a, stream);
    } else {
      StridedArgs s = strided_;
      s.x = ctx.inputs[0].data;
      s.y = ctx.outputs[0].data;
      launch_.strided(s, bx_, by_, stream);
    }
  }

 private:
  std::string name_;
  ReduceParams params_;
  Launchers launch_{};
  bool rows_path_ = false;
  RowsArgs rows_{};
  StridedArgs strided_{};
  int bx_ = kThreads, by_ = 1;
  size_t workspace_ = 0;
};

bool reduce_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].format != TensorFormat::kLinear) return false;
  return launchers().count(LauncherKey{inputs[0].type, params_of<ReduceParams>(layer).op}) != 0;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerReduce, "cuda", 10, reduce_supports, [](const Layer& layer) {
                                   return std::make_unique<ReduceCuda>(layer, params_of<ReduceParams>(layer));
                                 }});

}  // namespace kiln::cuda
