// CUDA kernels (tactic "cuda") of the layers with data-dependent output sizes
// (src/ir/ops_data_dependent.cpp): NonZero and NonMaxSuppression, exactly as the CPU reference
// (data_dependent_cpu.cpp). Unique's is in data_dependent_unique_cuda.cu.
// NonZero: the input is cut into tiles of kTile elements; three launches on the given stream:
//   1. count the non-zeros of each tile;
//   2. one block scans the tile counts into tile offsets and writes the total into the size
//      output (the runtime reads it after the layer, then re-infers the later shapes);
//   3. each tile recounts, scans its threads' counts and writes the coordinates of its non-zeros
//      at [axis, offset] of the [rank, total] output, reading `total` from device memory.
// NonMaxSuppression: one block per (batch, class) sorts its candidates and runs the greedy
// suppression, then the NonZero scan turns the per-class counts into offsets (and the total into
// the size output) and one block per (batch, class) copies its selection to those offsets.
// Nothing is synchronized here and no host value is needed, so the launches are graph-safe.
// Layout: kLinear (row-major); any rank up to 8; 64-bit element counts.
#include <cuda_fp16.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/scan_cuda.cuh"
#include "src/ir/data_dependent_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;  // consecutive elements per thread, so thread order is element order
constexpr int64_t kTile = kThreads * kItems;

struct NonZeroShape {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t n = 0;
};

template <typename T>
__device__ __forceinline__ bool non_zero(T v) {
  return v != T(0);
}
template <>
__device__ __forceinline__ bool non_zero<__half>(__half v) {
  return __half2float(v) != 0.0f;  // -0 is zero, NaN is not
}

template <typename T>
__device__ __forceinline__ int thread_count(const T* x, int64_t first, int64_t n) {
  int c = 0;
#pragma unroll
  for (int k = 0; k < kItems; ++k) c += (first + k < n && non_zero(x[first + k])) ? 1 : 0;
  return c;
}

// Exclusive prefix of `value` over the block's threads; `total` gets the block's sum.
__device__ int block_exclusive_scan(int value, int* total) {
  __shared__ int warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inclusive = value;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kThreads / 32 ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += other;
    }
    if (lane < kThreads / 32) warp_sums[lane] = w;  // inclusive warp prefixes
  }
  __syncthreads();
  const int before_warp = warp ? warp_sums[warp - 1] : 0;
  *total = warp_sums[kThreads / 32 - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return before_warp + inclusive - value;
}

template <typename T>
__global__ void non_zero_count_kernel(const T* __restrict__ x, int64_t n, int64_t* __restrict__ tile_counts) {
  const int64_t first = blockIdx.x * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
  int total = 0;
  (void)block_exclusive_scan(thread_count(x, first, n), &total);
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = total;
}

template <typename T>
__global__ void non_zero_write_kernel(const T* __restrict__ x, NonZeroShape s, const int64_t* __restrict__ tile_offsets,
                                      const int64_t* __restrict__ size, int64_t* __restrict__ coords) {
  const int64_t first = blockIdx.x * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
  int total = 0;
  int64_t k = tile_offsets[blockIdx.x] + block_exclusive_scan(thread_count(x, first, s.n), &total);
  const int64_t count = *size;  // the row stride of the compact [rank, count] output
  for (int item = 0; item < kItems; ++item) {
    const int64_t i = first + item;
    if (i >= s.n || !non_zero(x[i])) continue;
    int64_t rest = i;
    for (int a = s.rank - 1; a >= 0; --a) {
      coords[a * count + k] = rest % s.dims[a];
      rest /= s.dims[a];
    }
    ++k;
  }
}

class NonZeroCuda : public Kernel {
 public:
  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    const Dims& d = inputs[0].dims;
    shape_.rank = d.rank();
    for (int a = 0; a < d.rank(); ++a) shape_.dims[a] = d[a];
    shape_.n = d.volume();
    tiles_ = (shape_.n + kTile - 1) / kTile;
  }
  size_t workspace_size() const override { return static_cast<size_t>(tiles_) * sizeof(int64_t); }
  void execute(const KernelContext& ctx) override {
    auto* size = ctx.outputs[1].as<int64_t>();
    cudaStream_t stream = stream_of(ctx);
    if (shape_.n == 0) {
      KILN_CUDA_CHECK(cudaMemsetAsync(size, 0, sizeof(int64_t), stream));
      return;
    }
    auto* tile_counts = static_cast<int64_t*>(ctx.workspace);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* x = ctx.inputs[0].as<T>();
      const auto grid = static_cast<unsigned>(tiles_);
      non_zero_count_kernel<T><<<grid, kThreads, 0, stream>>>(x, shape_.n, tile_counts);
      KILN_CUDA_CHECK_LAUNCH();
      exclusive_scan_one_block_kernel<<<1, kScanBlock, 0, stream>>>(tile_counts, tiles_, size);
      KILN_CUDA_CHECK_LAUNCH();
      non_zero_write_kernel<T>
          <<<grid, kThreads, 0, stream>>>(x, shape_, tile_counts, size, ctx.outputs[0].as<int64_t>());
      KILN_CUDA_CHECK_LAUNCH();
    };
    dispatch_data_dependent_type(ctx.inputs[0].type, "NonZero", run);
  }

 private:
  NonZeroShape shape_;
  int64_t tiles_ = 0;
};

bool non_zero_supports(const Layer&, const std::vector<TensorDesc>& inputs) {
  static const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kFloat64, DataType::kInt32,
                                    DataType::kInt64,   DataType::kInt8,    DataType::kUInt8,   DataType::kBool};
  const DataType t = inputs[0].type;
  bool typed = false;
  for (DataType k : kTypes) typed = typed || k == t;
  return typed && inputs[0].format == TensorFormat::kLinear && inputs[0].dims.volume() / kTile < (int64_t{1} << 31);
}

// ---- NonMaxSuppression ---------------------------------------------------------------------------
// Per (batch, class) block: the candidates (score > score_threshold when given; others become
// padding) are bitonic-sorted by descending score, ties and NaN (below every number) by lower box
// index, in shared memory up to kNmsSharedPairs and in the workspace beyond. Then candidate by
// candidate (in order, all threads together) each kept box is tested by one thread; a candidate
// none of them suppresses is kept, its box index written over the consumed slot `kept` of the
// sorted array. The IoU arithmetic is ONNX Runtime's, with explicitly rounded operations so that
// --use_fast_math contracts or approximates none of it (the CPU reference computes the same).

constexpr int kNmsThreads = 256;
constexpr int64_t kNmsSharedPairs = 2048;

struct NmsPair {
  float score;
  int32_t box;  // < 0: padding (no box, or one below the score threshold)
};

struct NmsArgs {
  int64_t classes = 0, n = 0, padded = 1;  // padded: power of two >= n
  bool center = false;
  bool max_is_64 = true;  // max_output_boxes_per_class is int64 (else int32)
};

struct NmsEdges {
  float x_min, x_max, y_min, y_max;
};

__device__ __forceinline__ NmsEdges nms_edges(const float* __restrict__ box, bool center) {
  const float b0 = box[0], b1 = box[1], b2 = box[2], b3 = box[3];
  if (center) {
    const float w = __fdiv_rn(b2, 2.0f), h = __fdiv_rn(b3, 2.0f);
    return NmsEdges{__fsub_rn(b0, w), __fadd_rn(b0, w), __fsub_rn(b1, h), __fadd_rn(b1, h)};
  }
  return NmsEdges{fminf(b1, b3), fmaxf(b1, b3), fminf(b0, b2), fmaxf(b0, b2)};
}

// True when the IoU of candidate a and kept box b exceeds the threshold (ONNX Runtime's SuppressByIOU).
__device__ __forceinline__ bool nms_suppresses(const NmsEdges& a, const NmsEdges& b, float iou_threshold) {
  const float ix_min = fmaxf(a.x_min, b.x_min), ix_max = fminf(a.x_max, b.x_max);
  if (ix_max <= ix_min) return false;
  const float iy_min = fmaxf(a.y_min, b.y_min), iy_max = fminf(a.y_max, b.y_max);
  if (iy_max <= iy_min) return false;
  const float inter = __fmul_rn(__fsub_rn(ix_max, ix_min), __fsub_rn(iy_max, iy_min));
  if (inter <= 0.0f) return false;
  const float area_a = __fmul_rn(__fsub_rn(a.x_max, a.x_min), __fsub_rn(a.y_max, a.y_min));
  const float area_b = __fmul_rn(__fsub_rn(b.x_max, b.x_min), __fsub_rn(b.y_max, b.y_min));
  const float uni = __fsub_rn(__fadd_rn(area_a, area_b), inter);
  if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
  return __fdiv_rn(inter, uni) > iou_threshold;
}

// a before b: real boxes first, higher score first (NaN after every number), then lower index.
__device__ __forceinline__ bool nms_before(const NmsPair& a, const NmsPair& b) {
  if (a.box < 0 || b.box < 0) return a.box >= 0 && b.box < 0;
  const bool an = a.score != a.score, bn = b.score != b.score;
  if (an != bn) return bn;
  if (!an && a.score != b.score) return a.score > b.score;
  return a.box < b.box;
}

__global__ void __launch_bounds__(kNmsThreads)
    nms_select_kernel(const float* __restrict__ boxes, const float* __restrict__ scores, const void* max_per_class,
                      const float* iou_threshold, const float* score_threshold, NmsArgs a, NmsPair* __restrict__ work,
                      int32_t* __restrict__ selected, int64_t* __restrict__ counts) {
  __shared__ NmsPair shared_pairs[kNmsSharedPairs];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t seg = blockIdx.x;  // batch * classes + class
  const int64_t batch = seg / a.classes;
  NmsPair* pairs = a.padded <= kNmsSharedPairs ? shared_pairs : work + seg * a.padded;
  int64_t max_kept = 0;
  if (max_per_class) {
    max_kept = a.max_is_64 ? *static_cast<const int64_t*>(max_per_class) : *static_cast<const int32_t*>(max_per_class);
  }
  max_kept = max_kept < 0 ? 0 : (max_kept > a.n ? a.n : max_kept);
  const float iou = iou_threshold ? *iou_threshold : 0.0f;
  const float* s = scores + seg * a.n;
  for (int64_t e = tid; e < a.padded; e += blockDim.x) {
    NmsPair p{0.0f, -1};
    if (e < a.n) {
      const float v = s[e];
      if (!score_threshold || v > *score_threshold) p = NmsPair{v, static_cast<int32_t>(e)};
    }
    pairs[e] = p;
  }
  __syncthreads();
  for (int64_t block = 2; block <= a.padded; block *= 2) {
    for (int64_t stride = block / 2; stride > 0; stride /= 2) {
      for (int64_t e = tid; e < a.padded; e += blockDim.x) {
        const int64_t p = e ^ stride;
        if (p <= e) continue;
        const NmsPair x = pairs[e], y = pairs[p];
        if ((e & block) == 0 ? nms_before(y, x) : nms_before(x, y)) {
          pairs[e] = y;
          pairs[p] = x;
        }
      }
      __syncthreads();
    }
  }
  const float* batch_boxes = boxes + batch * a.n * 4;
  int64_t kept = 0;
  for (int64_t i = 0; i < a.n && kept < max_kept; ++i) {
    const int32_t candidate = pairs[i].box;
    if (candidate < 0) break;  // padding sorts last: no candidates left
    const NmsEdges c = nms_edges(batch_boxes + static_cast<int64_t>(candidate) * 4, a.center);
    bool suppressed = false;
    for (int64_t k = tid; k < kept && !suppressed; k += blockDim.x) {
      suppressed = nms_suppresses(c, nms_edges(batch_boxes + static_cast<int64_t>(pairs[k].box) * 4, a.center), iou);
    }
    if (!__syncthreads_or(suppressed)) {
      if (tid == 0) pairs[kept].box = candidate;  // slot kept <= i was consumed already
      ++kept;
    }
    __syncthreads();
  }
  for (int64_t k = tid; k < kept; k += blockDim.x) selected[seg * a.n + k] = pairs[k].box;
  if (tid == 0) counts[seg] = kept;
}

// After the scan, counts holds each (batch, class)'s offset and *size the total.
__global__ void __launch_bounds__(kNmsThreads)
    nms_write_kernel(const int32_t* __restrict__ selected, const int64_t* __restrict__ offsets,
                     const int64_t* __restrict__ size, NmsArgs a, int64_t segments, int64_t* __restrict__ out) {
  const int64_t seg = blockIdx.x;
  const int64_t first = offsets[seg];
  const int64_t end = seg + 1 < segments ? offsets[seg + 1] : *size;
  const int64_t batch = seg / a.classes, cls = seg - batch * a.classes;
  for (int64_t k = threadIdx.x; k < end - first; k += blockDim.x) {
    int64_t* row = out + (first + k) * 3;
    row[0] = batch;
    row[1] = cls;
    row[2] = selected[seg * a.n + k];
  }
}

class NonMaxSuppressionCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    a_ = NmsArgs{};
    a_.classes = inputs[1].dims[1];
    a_.n = inputs[0].dims[1];
    a_.center = params_of<NonMaxSuppressionParams>(layer).center_point_box;
    a_.max_is_64 = inputs.size() < 3 || !inputs[2].present || inputs[2].type == DataType::kInt64;
    while (a_.padded < a_.n) a_.padded *= 2;
    segments_ = inputs[0].dims[0] * a_.classes;
  }
  size_t workspace_size() const override {
    size_t bytes = static_cast<size_t>(segments_) * sizeof(int64_t);                 // counts
    bytes += (static_cast<size_t>(segments_ * a_.n) * sizeof(int32_t) + 7) / 8 * 8;  // selected
    if (a_.padded > kNmsSharedPairs) bytes += static_cast<size_t>(segments_ * a_.padded) * sizeof(NmsPair);
    return bytes;
  }
  void execute(const KernelContext& ctx) override {
    auto* size = ctx.outputs[1].as<int64_t>();
    cudaStream_t stream = stream_of(ctx);
    if (segments_ == 0 || a_.n == 0) {
      KILN_CUDA_CHECK(cudaMemsetAsync(size, 0, sizeof(int64_t), stream));
      return;
    }
    auto input = [&](size_t i) -> const void* { return i < ctx.inputs.size() ? ctx.inputs[i].data : nullptr; };
    auto* ws = static_cast<uint8_t*>(ctx.workspace);
    auto* counts = reinterpret_cast<int64_t*>(ws);
    ws += static_cast<size_t>(segments_) * sizeof(int64_t);
    auto* selected = reinterpret_cast<int32_t*>(ws);
    ws += (static_cast<size_t>(segments_ * a_.n) * sizeof(int32_t) + 7) / 8 * 8;
    auto* work = a_.padded > kNmsSharedPairs ? reinterpret_cast<NmsPair*>(ws) : nullptr;
    const auto grid = static_cast<unsigned>(segments_);
    nms_select_kernel<<<grid, kNmsThreads, 0, stream>>>(
        ctx.inputs[0].as<const float>(), ctx.inputs[1].as<const float>(), input(2), static_cast<const float*>(input(3)),
        static_cast<const float*>(input(4)), a_, work, selected, counts);
    KILN_CUDA_CHECK_LAUNCH();
    exclusive_scan_one_block_kernel<<<1, kScanBlock, 0, stream>>>(counts, segments_, size);
    KILN_CUDA_CHECK_LAUNCH();
    nms_write_kernel<<<grid, kNmsThreads, 0, stream>>>(selected, counts, size, a_, segments_,
                                                       ctx.outputs[0].as<int64_t>());
    KILN_CUDA_CHECK_LAUNCH();
  }

 private:
  NmsArgs a_;
  int64_t segments_ = 0;
};

// float32 only (so that fp16 builds keep the selection exact), int32/int64 max count, kLinear.
bool non_max_suppression_supports(const Layer&, const std::vector<TensorDesc>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& d = inputs[i];
    if (!d.present) continue;
    if (d.format != TensorFormat::kLinear) return false;
    const bool ok = i == 2 ? (d.type == DataType::kInt64 || d.type == DataType::kInt32) : d.type == DataType::kFloat32;
    if (!ok) return false;
  }
  const int64_t segments = inputs[0].dims[0] * inputs[1].dims[1];
  return inputs[0].dims[1] < (int64_t{1} << 31) && segments < (int64_t{1} << 31);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerNonZero, "cuda", 100, non_zero_supports,
                                 [](const Layer&) { return std::make_unique<NonZeroCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerNonMaxSuppression, "cuda", 100, non_max_suppression_supports,
                                 [](const Layer&) { return std::make_unique<NonMaxSuppressionCuda>(); }});

}  // namespace kiln::cuda
