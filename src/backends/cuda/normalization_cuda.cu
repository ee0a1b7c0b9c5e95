// CUDA kernels of Normalization (modes layer, instance, group, mvn, lp) and LRN, tactic "cuda";
// float32 and float16 I/O, float accumulation. The CPU reference (normalization_cpu.cpp) is the
// oracle: every mode is "statistics over a set of axes of a view of x" (group mode views
// [N, C, ...] as [N, G, C/G * spatial]), y = (x - mean) * inv * scale + bias, where inv is
// 1/sqrt(var + eps) (layer, instance, group), 1/(sqrt(var) + eps) (mvn), 1 (mvn without
// normalize_variance) or 1/||x||_p with mean 0 (lp; a zero norm gives 0). The per-group scalar
// (inv) is computed in double from float sums, as the reference's rounding is double's.
//
// prepare() drops extent-1 axes of the view and merges neighbours that are both reduced or both
// kept, then picks a path:
// - warp: the reduced axes are one innermost run of <= 1024 elements (layer norm, instance /
//   group norm of small maps): a warp, or a power-of-two slice of one, per row; the row is held
//   in registers (16-byte loads when rows are 16-byte aligned), so statistics are an exact
//   two-pass (mean, then the squared deviations) at one read and one write per element.
// - block: the same for rows of up to 8192 elements, a 256-thread block per row.
// - split: longer rows, or reduced axes that are not innermost (mvn over [0, 2, 3]) with few
//   groups: a stats kernel folds Welford (count, mean, M2) triples per chunk of a group (many
//   blocks per group, so few long rows still fill the GPU), a finalize kernel merges a group's
//   chunks in order (deterministic) into (mean, inv), and an element-wise kernel normalizes.
// - column: reduced axes not innermost with many groups (lp along axis 1 of NCHW): a thread per
//   group, adjacent threads on adjacent groups so that loads coalesce.
// Scale / bias (their index from the flat x index: broadcast for layer, per channel for
// instance / group) are read directly when they match the row, else through a strided map.
//
// Layout: kLinear only (dense row-major). Vector loads only where pointers are 16-byte aligned.
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/op_helpers_cuda.cuh"
#include "src/ir/normalization_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

using oph::map_at;
using oph::Pack;
using oph::SmallMap;

constexpr int kWarpBlock = 128;  // threads per block of the warp-per-row kernel
constexpr int kNormBlock = 256;  // threads per block of the block-per-row and split kernels
constexpr int64_t kMaxWarpRow = 1024;
constexpr int64_t kMaxBlockRow = 8192;
constexpr int64_t kMinChunk = 4096;      // elements per block of the split stats kernel, at least
constexpr int64_t kTargetBlocks = 1024;  // the split path splits rows until about this many blocks
constexpr int64_t kColumnGroups = 4096;  // generic layouts with this many groups take the column path

// What the per-group scalar `inv` is.
enum class StatKind : int { kVar, kMvn, kMeanOnly, kL1, kL2 };

__host__ __device__ __forceinline__ bool subtracts_mean(StatKind k) { return k != StatKind::kL1 && k != StatKind::kL2; }

// inv from m2 (the sum of squared deviations; for lp: the sum of |x| or x^2) of n elements.
__device__ __forceinline__ float finish_inv(StatKind kind, float m2, float n, double eps) {
  const double var = n > 0.0f ? static_cast<double>(m2) / static_cast<double>(n) : 0.0;
  switch (kind) {
    case StatKind::kVar:
      return static_cast<float>(1.0 / sqrt(var + eps));
    case StatKind::kMvn:
      return static_cast<float>(1.0 / (sqrt(var) + eps));
    case StatKind::kMeanOnly:
      return 1.0f;
    case StatKind::kL1:
      return m2 == 0.0f ? 0.0f : static_cast<float>(1.0 / static_cast<double>(m2));
    case StatKind::kL2: {
      const double norm = sqrt(static_cast<double>(m2));
      return norm == 0.0 ? 0.0f : static_cast<float>(1.0 / norm);
    }
  }
  return 1.0f;
}

// The deviation term one element adds to m2.
__device__ __forceinline__ float deviation(StatKind kind, float d) { return kind == StatKind::kL1 ? fabsf(d) : d * d; }

// Where a scale or bias value comes from, by the flat x index (and j, the position in the row):
// kIdentity: j (the layer-norm case); kChannel: (flat / inner) % extent (per channel, and every
// broadcast with one varying run); kMap: a strided map (any other broadcast; split and column
// paths only, so that the unrolled row kernels stay small).
enum class AffineMode : int { kNone, kIdentity, kChannel, kMap };

struct AffineRef {
  const void* data = nullptr;
  AffineMode mode = AffineMode::kNone;
  IndexDiv inner, extent;
  SmallMap map;

  template <typename T, bool kAllowMap>
  __device__ __forceinline__ float value(int64_t flat, int64_t j, bool k32) const {
    int64_t i = j;
    if (mode == AffineMode::kChannel) {
      const int64_t q = k32 ? inner.div<true>(flat) : inner.div<false>(flat);
      i = q - (k32 ? extent.div<true>(q) : extent.div<false>(q)) * extent.d;
    } else if (kAllowMap && mode == AffineMode::kMap) {
      i = map_at(map, flat, k32);
    }
    return to_float(static_cast<const T*>(data)[i]);
  }
};

struct Affine {
  AffineRef scale, bias;
  bool k32 = true;  // flat x indices are below 2^31

  // Row kernels pass kAllowMap = false (the host routes kMap elsewhere) and run only when k32.
  template <typename T, bool kAllowMap>
  __device__ __forceinline__ float apply(float v, int64_t flat, int64_t j) const {
    const bool k = kAllowMap ? k32 : true;
    if (scale.data) v *= scale.template value<T, kAllowMap>(flat, j, k);
    if (bias.data) v += bias.template value<T, kAllowMap>(flat, j, k);
    return v;
  }
  bool row_friendly() const { return scale.mode != AffineMode::kMap && bias.mode != AffineMode::kMap && k32; }
};

// Arguments of the row kernels (rows of `len` contiguous elements).
struct RowArgs {
  int64_t rows = 0, len = 0;
  float inv_len = 0.0f;
  double eps = 0.0;
  StatKind kind = StatKind::kVar;
  Affine affine;
  float* mean_out = nullptr;  // layer mode's optional outputs, one value per row
  float* inv_out = nullptr;
  bool vec_affine = false;  // scale / bias (those present) are kIdentity and 16-byte aligned
};

// Normalizes one pack of a row (values v, the pack's index idx in the row) and stores it.
template <typename T, int kV>
__device__ __forceinline__ void store_row_pack(const RowArgs& a, const float (&v)[kV], float mean, float inv,
                                               int64_t row, int idx, Pack<T, kV>* yr) {
  using P = Pack<T, kV>;
  P o;
  if (kV > 1 && a.vec_affine) {
    const P* sp = static_cast<const P*>(a.affine.scale.data);
    const P* bp = static_cast<const P*>(a.affine.bias.data);
    P s{}, b{};
    if (sp) s = sp[idx];
    if (bp) b = bp[idx];
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      float r = (v[e] - mean) * inv;
      if (sp) r *= to_float(s.v[e]);
      if (bp) r += to_float(b.v[e]);
      o.v[e] = from_float<T>(r);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const int64_t j = static_cast<int64_t>(idx) * kV + e;
      o.v[e] = from_float<T>(a.affine.template apply<T, false>((v[e] - mean) * inv, row * a.len + j, j));
    }
  }
  yr[idx] = o;
}

// ---- warp per row --------------------------------------------------------------------------

// kWidth lanes per row, kVecs packs of kV elements per lane: len <= kWidth * kVecs * kV.
template <typename T, int kV, int kVecs, int kWidth>
__global__ void __launch_bounds__(kWarpBlock) norm_warp_kernel(const T* __restrict__ x, T* __restrict__ y, RowArgs a) {
  using P = Pack<T, kV>;
  constexpr int kRowsPerWarp = 32 / kWidth;
  const int lane = static_cast<int>(threadIdx.x) % kWidth;
  const int sub = (static_cast<int>(threadIdx.x) % 32) / kWidth;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int nv = static_cast<int>(a.len / kV);
  const bool center = subtracts_mean(a.kind);
  // The loop is uniform across the warp so that every shuffle has all 32 lanes.
  for (int64_t first = warp * kRowsPerWarp; first < a.rows; first += warps * kRowsPerWarp) {
    const int64_t row = first + sub;
    const bool valid = row < a.rows;
    const P* xr = reinterpret_cast<const P*>(x + (valid ? row : 0) * a.len);
    float v[kVecs][kV];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int idx = lane + i * kWidth;
      if (valid && idx < nv) {
        const P p = xr[idx];
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          v[i][e] = to_float(p.v[e]);
          sum += v[i][e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) v[i][e] = 0.0f;
      }
    }
    const float mean = center ? oph::group_sum<kWidth>(sum) * a.inv_len : 0.0f;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (valid && lane + i * kWidth < nv) {
#pragma unroll
        for (int e = 0; e < kV; ++e) m2 += deviation(a.kind, v[i][e] - mean);
      }
    }
    m2 = oph::group_sum<kWidth>(m2);
    if (!valid) continue;
    const float inv = finish_inv(a.kind, m2, static_cast<float>(a.len), a.eps);
    if (lane == 0) {
      if (a.mean_out) a.mean_out[row] = mean;
      if (a.inv_out) a.inv_out[row] = inv;
    }
    P* yr = reinterpret_cast<P*>(y + row * a.len);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int idx = lane + i * kWidth;
      if (idx < nv) store_row_pack<T, kV>(a, v[i], mean, inv, row, idx, yr);
    }
  }
}

using RowLaunch = void (*)(const void*, void*, const RowArgs&, cudaStream_t);

template <typename T, int kV, int kVecs, int kWidth>
void launch_warp(const void* x, void* y, const RowArgs& a, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarpBlock / kWidth;
  norm_warp_kernel<T, kV, kVecs, kWidth>
      <<<grid_for(a.rows, kRowsPerBlock), kWarpBlock, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), a);
  KILN_CUDA_CHECK_LAUNCH();
}

// Entry i serves rows of up to 2^i packs: widths 1..32 with one pack per lane, then 2, 4, ...
// packs per lane of a full warp.
template <typename T, int kV, size_t... kI>
constexpr std::array<RowLaunch, sizeof...(kI)> warp_table(std::index_sequence<kI...>) {
  return {&launch_warp<T, kV, (kI < 5 ? 1 : (1 << (kI - 5))), (kI < 5 ? (1 << kI) : 32)>...};
}

// ---- block per row -------------------------------------------------------------------------

template <typename T, int kV, int kVecs>
__global__ void __launch_bounds__(kNormBlock) norm_block_kernel(const T* __restrict__ x, T* __restrict__ y, RowArgs a) {
  using P = Pack<T, kV>;
  __shared__ float shared[33];
  const int tid = static_cast<int>(threadIdx.x);
  const int nv = static_cast<int>(a.len / kV);
  const bool center = subtracts_mean(a.kind);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const P* xr = reinterpret_cast<const P*>(x + row * a.len);
    float v[kVecs][kV];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int idx = tid + i * kNormBlock;
      if (idx < nv) {
        const P p = xr[idx];
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          v[i][e] = to_float(p.v[e]);
          sum += v[i][e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) v[i][e] = 0.0f;
      }
    }
    const float mean = center ? oph::block_sum(sum, shared) * a.inv_len : 0.0f;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (tid + i * kNormBlock < nv) {
#pragma unroll
        for (int e = 0; e < kV; ++e) m2 += deviation(a.kind, v[i][e] - mean);
      }
    }
    m2 = oph::block_sum(m2, shared);
    const float inv = finish_inv(a.kind, m2, static_cast<float>(a.len), a.eps);
    if (tid == 0) {
      if (a.mean_out) a.mean_out[row] = mean;
      if (a.inv_out) a.inv_out[row] = inv;
    }
    P* yr = reinterpret_cast<P*>(y + row * a.len);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int idx = tid + i * kNormBlock;
      if (idx < nv) store_row_pack<T, kV>(a, v[i], mean, inv, row, idx, yr);
    }
  }
}

template <typename T, int kV, int kVecs>
void launch_block(const void* x, void* y, const RowArgs& a, cudaStream_t stream) {
  norm_block_kernel<T, kV, kVecs>
      <<<grid_for(a.rows, 1), kNormBlock, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), a);
  KILN_CUDA_CHECK_LAUNCH();
}

// ---- split and column paths (any layout) ----------------------------------------------------

struct Welford {
  float n, mean, m2;
};

__device__ __forceinline__ Welford wf_push(Welford w, float x, StatKind kind) {
  w.n += 1.0f;
  if (!subtracts_mean(kind)) {
    w.m2 += deviation(kind, x);
  } else {
    const float d = x - w.mean;
    w.mean += d / w.n;
    w.m2 += d * (x - w.mean);
  }
  return w;
}

// Chan et al.'s merge of two partial results (lp: plain sums).
__device__ __forceinline__ Welford wf_merge(Welford a, Welford b, StatKind kind) {
  const float n = a.n + b.n;
  if (!subtracts_mean(kind)) return Welford{n, 0.0f, a.m2 + b.m2};
  if (b.n == 0.0f) return a;
  if (a.n == 0.0f) return b;
  const float d = b.mean - a.mean;
  const float fb = b.n / n;
  return Welford{n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

// Merges every thread's triple; thread 0 gets the block's result. `shared` holds 32 triples.
__device__ __forceinline__ Welford block_welford(Welford w, StatKind kind, Welford* shared) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const Welford o{__shfl_down_sync(oph::kFullMask, w.n, off), __shfl_down_sync(oph::kFullMask, w.mean, off),
                    __shfl_down_sync(oph::kFullMask, w.m2, off)};
    w = wf_merge(w, o, kind);
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) shared[warp] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    w = shared[0];
    for (int i = 1; i < warps; ++i) w = wf_merge(w, shared[i], kind);
  }
  __syncthreads();  // shared is reused by the block's next work item
  return w;
}

// The groups of a layout: group g's element j is x[base(g) + red(j)]; for flat x index i, its
// group is i / count (contiguous rows) or group_map(i).
struct GroupLayout {
  int64_t groups = 0, count = 0;
  bool contig = false;
  bool k32 = true;
  IndexDiv count_div;
  SmallMap base_map, red_map, group_map;

  __device__ __forceinline__ int64_t base(int64_t g) const { return contig ? g * count : map_at(base_map, g, k32); }
  __device__ __forceinline__ int64_t red(int64_t j) const { return contig ? j : map_at(red_map, j, k32); }
  __device__ __forceinline__ int64_t group_of(int64_t i) const {
    if (contig) return k32 ? count_div.div<true>(i) : count_div.div<false>(i);
    return map_at(group_map, i, k32);
  }
};

struct SplitArgs {
  GroupLayout layout;
  int64_t chunks = 1, chunk_len = 0;  // chunk_len: a multiple of 8, so packs never straddle chunks
  StatKind kind = StatKind::kVar;
};

// One block per (group, chunk) work item; kV > 1 only for contiguous rows of a multiple of kV
// elements at a 16-byte aligned x.
template <typename T, int kV>
__global__ void __launch_bounds__(kNormBlock)
    norm_stats_kernel(const T* __restrict__ x, Welford* __restrict__ partial, SplitArgs a) {
  using P = Pack<T, kV>;
  __shared__ Welford shared[32];
  const GroupLayout& L = a.layout;
  const int64_t work_items = L.groups * a.chunks;
  for (int64_t w = blockIdx.x; w < work_items; w += gridDim.x) {
    const int64_t g = w / a.chunks;
    const int64_t begin = (w - g * a.chunks) * a.chunk_len;
    const int64_t end = begin + a.chunk_len < L.count ? begin + a.chunk_len : L.count;
    Welford acc{0.0f, 0.0f, 0.0f};
    if (kV > 1) {
      const P* xp = reinterpret_cast<const P*>(x + g * L.count);
      for (int64_t i = begin / kV + threadIdx.x; i < end / kV; i += blockDim.x) {
        const P p = xp[i];
#pragma unroll
        for (int e = 0; e < kV; ++e) acc = wf_push(acc, to_float(p.v[e]), a.kind);
      }
    } else {
      const int64_t base = L.base(g);
      for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
        acc = wf_push(acc, to_float(x[base + L.red(j)]), a.kind);
      }
    }
    acc = block_welford(acc, a.kind, shared);
    if (threadIdx.x == 0) partial[w] = acc;
  }
}

struct FinalArgs {
  int64_t groups = 0, chunks = 1;
  StatKind kind = StatKind::kVar;
  double eps = 0.0;
  float* mean_out = nullptr;
  float* inv_out = nullptr;
};

// Merges each group's chunks in chunk order: (mean, inv) per group.
__global__ void norm_finalize_kernel(const Welford* __restrict__ partial, float2* __restrict__ stats, FinalArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < a.groups; g += step) {
    Welford w = partial[g * a.chunks];
    for (int64_t c = 1; c < a.chunks; ++c) w = wf_merge(w, partial[g * a.chunks + c], a.kind);
    const float mean = subtracts_mean(a.kind) ? w.mean : 0.0f;
    const float inv = finish_inv(a.kind, w.m2, w.n, a.eps);
    stats[g] = float2{mean, inv};
    if (a.mean_out) a.mean_out[g] = mean;
    if (a.inv_out) a.inv_out[g] = inv;
  }
}

struct ApplyArgs {
  GroupLayout layout;
  int64_t total = 0;
  Affine affine;
};

// y = (x - mean[g]) * inv[g] (* scale + bias) element-wise; kV as in the stats kernel.
template <typename T, int kV>
__global__ void norm_apply_kernel(const T* __restrict__ x, T* __restrict__ y, const float2* __restrict__ stats,
                                  ApplyArgs a) {
  using P = Pack<T, kV>;
  const int64_t n = a.total / kV;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t flat = i * kV;
    const int64_t g = a.layout.group_of(flat);
    const float2 s = stats[g];
    const int64_t j0 = a.layout.contig ? flat - g * a.layout.count : 0;
    const P p = reinterpret_cast<const P*>(x)[i];
    P o;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      o.v[e] = from_float<T>(a.affine.template apply<T, true>((to_float(p.v[e]) - s.x) * s.y, flat + e, j0 + e));
    }
    reinterpret_cast<P*>(y)[i] = o;
  }
}

struct ColumnArgs {
  GroupLayout layout;
  StatKind kind = StatKind::kVar;
  double eps = 0.0;
  Affine affine;
  float* mean_out = nullptr;
  float* inv_out = nullptr;
};

// A thread per group: Welford over the group, then the normalized writes.
template <typename T>
__global__ void norm_column_kernel(const T* __restrict__ x, T* __restrict__ y, ColumnArgs a) {
  const GroupLayout& L = a.layout;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < L.groups; g += step) {
    const int64_t base = L.base(g);
    Welford w{0.0f, 0.0f, 0.0f};
    for (int64_t j = 0; j < L.count; ++j) w = wf_push(w, to_float(x[base + L.red(j)]), a.kind);
    const float mean = subtracts_mean(a.kind) ? w.mean : 0.0f;
    const float inv = finish_inv(a.kind, w.m2, w.n, a.eps);
    if (a.mean_out) a.mean_out[g] = mean;
    if (a.inv_out) a.inv_out[g] = inv;
    for (int64_t j = 0; j < L.count; ++j) {
      const int64_t off = base + L.red(j);
      y[off] = from_float<T>(a.affine.template apply<T, true>((to_float(x[off]) - mean) * inv, off, j));
    }
  }
}

// ---- the Normalization kernel ----------------------------------------------------------------

enum class NormPath { kNone, kWarp, kBlock, kSplit, kColumn };

int64_t product(const Dims& d, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= d[i];
  return p;
}

int ceil_log2(int64_t v) {
  int b = 0;
  while ((int64_t{1} << b) < v) ++b;
  return b;
}

const TensorView* optional_input(const KernelContext& ctx, size_t i) {
  return i < ctx.inputs.size() && ctx.inputs[i].data != nullptr ? &ctx.inputs[i] : nullptr;
}

float* optional_output(const KernelContext& ctx, size_t i) {
  return i < ctx.outputs.size() ? static_cast<float*>(ctx.outputs[i].data) : nullptr;
}

class NormalizationCuda : public Kernel {
 public:
  explicit NormalizationCuda(const NormalizationParams& params) : params_(params), eps_(params.epsilon) {
    if (params.mode == NormalizationMode::kLp) {
      kind_ = params.p == 1 ? StatKind::kL1 : StatKind::kL2;
    } else if (params.mode == NormalizationMode::kMvn) {
      kind_ = params.normalize_variance ? StatKind::kMvn : StatKind::kMeanOnly;
    } else {
      kind_ = StatKind::kVar;
    }
  }

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    const Dims& x = inputs[0].dims;
    total_ = x.volume();
    k32_ = total_ < kFast32Limit;

    // The view and its reduced axes (normalization_stats_view, as shape inference and the
    // reference; lp: the one axis).
    NormStatsView stats;
    try {
      stats = normalization_stats_view(params_, x);
    } catch (const Error& e) {
      throw Error("Normalization layer '" + layer.name() + "': " + e.what());
    }
    plan_layout(stats.dims, stats.reduced);
    plan_affine(inputs, x);
    choose_path();
  }

  size_t workspace_size() const override {
    if (path_ != NormPath::kSplit) return 0;
    return stats_offset() + static_cast<size_t>(layout_.groups) * sizeof(float2);
  }

  void execute(const KernelContext& ctx) override {
    if (path_ == NormPath::kNone) return;
    if (ctx.inputs[0].type == DataType::kFloat16) {
      run<__half>(ctx);
    } else {
      run<float>(ctx);
    }
  }

 private:
  // Collapses the view into kept / reduced runs and fills layout_ (groups in the order of the
  // kept axes, as the reference's mean / inv_std outputs).
  void plan_layout(const std::vector<int64_t>& view, const std::vector<bool>& reduced) {
    const int r = static_cast<int>(view.size());
    std::vector<int64_t> vstride(static_cast<size_t>(r), 1);
    for (int i = r - 2; i >= 0; --i)
      vstride[static_cast<size_t>(i)] = vstride[static_cast<size_t>(i + 1)] * view[static_cast<size_t>(i + 1)];
    std::vector<int64_t> kept_ext, kept_str, red_ext, red_str;
    for (int i = 0; i < r; ++i) {
      if (reduced[static_cast<size_t>(i)]) {
        red_ext.push_back(view[static_cast<size_t>(i)]);
        red_str.push_back(vstride[static_cast<size_t>(i)]);
      } else {
        kept_ext.push_back(view[static_cast<size_t>(i)]);
        kept_str.push_back(vstride[static_cast<size_t>(i)]);
      }
    }
    GroupLayout& L = layout_;
    L = GroupLayout{};
    L.groups = 1;
    L.count = 1;
    for (int64_t e : kept_ext) L.groups *= e;
    for (int64_t e : red_ext) L.count *= e;
    L.k32 = k32_;
    // Contiguous rows: no kept axis of extent > 1 after the first reduced axis of extent > 1.
    bool seen_reduced = false;
    L.contig = true;
    for (int i = 0; i < r; ++i) {
      if (view[static_cast<size_t>(i)] == 1) continue;
      if (reduced[static_cast<size_t>(i)])
        seen_reduced = true;
      else if (seen_reduced)
        L.contig = false;
    }
    L.count_div = IndexDiv(L.count);
    if (!L.contig) {
      L.base_map = oph::small_map(kept_ext, kept_str);
      L.red_map = oph::small_map(red_ext, red_str);
      // flat x index -> group: kept axes carry their row-major strides in group space.
      std::vector<int64_t> gstride(static_cast<size_t>(r), 0);
      int64_t acc = 1;
      for (int i = r - 1; i >= 0; --i) {
        if (!reduced[static_cast<size_t>(i)]) {
          gstride[static_cast<size_t>(i)] = acc;
          acc *= view[static_cast<size_t>(i)];
        }
      }
      L.group_map = oph::small_map(view, gstride);
    }
  }

  void plan_affine(const std::vector<TensorDesc>& inputs, const Dims& x) {
    const bool per_channel = params_.per_channel_affine();
    const std::vector<int64_t> xe = x.to_vector();
    auto plan = [&](size_t i) {
      AffineRef ref;
      has_affine_[i - 1] = i < inputs.size() && inputs[i].present;
      if (!has_affine_[i - 1]) return ref;
      std::vector<int64_t> stride(xe.size(), 0);
      if (per_channel) {
        stride[1] = 1;
      } else {
        const Dims& s = inputs[i].dims;
        const int off = x.rank() - s.rank();
        int64_t acc = 1;
        for (int k = s.rank() - 1; k >= 0; --k) {
          stride[static_cast<size_t>(k + off)] = s[k] == 1 ? 0 : acc;
          acc *= s[k];
        }
      }
      ref.map = oph::small_map(xe, stride);
      const SmallMap& m = ref.map;
      int varying = -1, count = 0;
      for (int k = 0; k < m.rank; ++k) {
        if (m.stride[k] != 0) {
          varying = k;
          ++count;
        }
      }
      int64_t after = 1;  // product of the extents after the varying run
      for (int k = varying + 1; k < m.rank && varying >= 0; ++k) after *= m.div[k].d;
      if (count == 0) {
        ref.mode = AffineMode::kChannel;  // one value: (flat / 1) % 1 = 0
      } else if (count == 1 && m.stride[varying] == 1) {
        const bool identity = layout_.contig && after == 1 && m.div[varying].d == layout_.count;
        ref.mode = identity ? AffineMode::kIdentity : AffineMode::kChannel;
        ref.inner = IndexDiv(after);
        ref.extent = IndexDiv(m.div[varying].d);
      } else {
        ref.mode = AffineMode::kMap;
      }
      return ref;
    };
    affine_.scale = plan(1);
    affine_.bias = plan(2);
    affine_.k32 = k32_;
  }

  void choose_path() {
    const GroupLayout& L = layout_;
    if (L.groups == 0) {
      path_ = NormPath::kNone;
    } else if (L.contig && L.count >= 1 && L.count <= kMaxWarpRow && affine_.row_friendly()) {
      path_ = NormPath::kWarp;
    } else if (L.contig && L.count >= 1 && L.count <= kMaxBlockRow && affine_.row_friendly()) {
      path_ = NormPath::kBlock;
    } else if (!L.contig && (L.groups >= kColumnGroups || L.count <= 32)) {
      path_ = NormPath::kColumn;
    } else {
      path_ = NormPath::kSplit;
    }
    split_ = SplitArgs{};
    split_.layout = L;
    split_.kind = kind_;
    if (path_ == NormPath::kSplit) {
      const int64_t max_chunks = std::max<int64_t>(1, (L.count + kMinChunk - 1) / kMinChunk);
      const int64_t want = std::max<int64_t>(1, (kTargetBlocks + L.groups - 1) / L.groups);
      const int64_t chunks = std::min(want, max_chunks);
      int64_t chunk_len = (L.count + chunks - 1) / chunks;
      chunk_len = std::max<int64_t>(8, (chunk_len + 7) / 8 * 8);
      split_.chunk_len = chunk_len;
      split_.chunks = std::max<int64_t>(1, (L.count + chunk_len - 1) / chunk_len);
    }
  }

  size_t stats_offset() const {
    const size_t partial = static_cast<size_t>(layout_.groups * split_.chunks) * sizeof(Welford);
    return (partial + 255) / 256 * 256;
  }

  RowArgs row_args(const KernelContext& ctx) const {
    RowArgs a;
    a.rows = layout_.groups;
    a.len = layout_.count;
    a.inv_len = 1.0f / static_cast<float>(layout_.count);
    a.eps = eps_;
    a.kind = kind_;
    a.affine = bound_affine(ctx);
    a.mean_out = optional_output(ctx, 1);
    a.inv_out = optional_output(ctx, 2);
    return a;
  }

  Affine bound_affine(const KernelContext& ctx) const {
    Affine f = affine_;
    const TensorView* s = optional_input(ctx, 1);
    const TensorView* b = optional_input(ctx, 2);
    f.scale.data = has_affine_[0] && s ? s->data : nullptr;
    f.bias.data = has_affine_[1] && b ? b->data : nullptr;
    return f;
  }

  // Scale and bias (those present) can be read as 16-byte packs along the row.
  static bool vector_affine(const Affine& f) {
    for (const AffineRef* r : {&f.scale, &f.bias}) {
      if (r->data && (r->mode != AffineMode::kIdentity || !oph::aligned_to(r->data, 16))) return false;
    }
    return true;
  }

  template <typename T>
  void run(const KernelContext& ctx) const {
    const cudaStream_t stream = stream_of(ctx);
    const void* x = ctx.inputs[0].data;
    void* y = ctx.outputs[0].data;
    constexpr int kV = static_cast<int>(16 / sizeof(T));
    const bool vec = layout_.contig && layout_.count % kV == 0 && oph::aligned_to(x, 16) && oph::aligned_to(y, 16);
    switch (path_) {
      case NormPath::kNone:
        return;
      case NormPath::kWarp: {
        static constexpr auto kScalar = warp_table<T, 1>(std::make_index_sequence<11>{});
        static constexpr auto kVector = warp_table<T, kV>(std::make_index_sequence<9>{});
        RowArgs a = row_args(ctx);
        a.vec_affine = vec && vector_affine(a.affine);
        if (vec) {
          kVector[static_cast<size_t>(ceil_log2(a.len / kV))](x, y, a, stream);
        } else {
          kScalar[static_cast<size_t>(ceil_log2(a.len))](x, y, a, stream);
        }
        return;
      }
      case NormPath::kBlock: {
        RowArgs a = row_args(ctx);
        a.vec_affine = vec && vector_affine(a.affine);
        const int64_t nv = vec ? a.len / kV : a.len;
        const int need = ceil_log2((nv + kNormBlock - 1) / kNormBlock);  // packs per thread: 2^need
        if (vec) {
          static constexpr RowLaunch kTable[] = {&launch_block<T, kV, 1>, &launch_block<T, kV, 2>,
                                                 &launch_block<T, kV, 4>, &launch_block<T, kV, 8>};
          kTable[need](x, y, a, stream);
        } else {
          static constexpr RowLaunch kTable[] = {&launch_block<T, 1, 8>,  &launch_block<T, 1, 8>,
                                                 &launch_block<T, 1, 8>,  &launch_block<T, 1, 8>,
                                                 &launch_block<T, 1, 16>, &launch_block<T, 1, 32>};
          kTable[need](x, y, a, stream);
        }
        return;
      }
      case NormPath::kColumn: {
        ColumnArgs a;
        a.layout = layout_;
        a.kind = kind_;
        a.eps = eps_;
        a.affine = bound_affine(ctx);
        a.mean_out = optional_output(ctx, 1);
        a.inv_out = optional_output(ctx, 2);
        norm_column_kernel<T>
            <<<grid_for(layout_.groups), kBlock, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), a);
        KILN_CUDA_CHECK_LAUNCH();
        return;
      }
      case NormPath::kSplit: {
        auto* partial = static_cast<Welford*>(ctx.workspace);
        auto* stats = reinterpret_cast<float2*>(static_cast<char*>(ctx.workspace) + stats_offset());
        const int64_t items = layout_.groups * split_.chunks;
        const bool vx = layout_.contig && layout_.count % kV == 0 && oph::aligned_to(x, 16);
        if (vx) {
          norm_stats_kernel<T, kV>
              <<<grid_for(items, 1), kNormBlock, 0, stream>>>(static_cast<const T*>(x), partial, split_);
        } else {
          norm_stats_kernel<T, 1>
              <<<grid_for(items, 1), kNormBlock, 0, stream>>>(static_cast<const T*>(x), partial, split_);
        }
        KILN_CUDA_CHECK_LAUNCH();
        FinalArgs f;
        f.groups = layout_.groups;
        f.chunks = split_.chunks;
        f.kind = kind_;
        f.eps = eps_;
        f.mean_out = optional_output(ctx, 1);
        f.inv_out = optional_output(ctx, 2);
        norm_finalize_kernel<<<grid_for(layout_.groups), kBlock, 0, stream>>>(partial, stats, f);
        KILN_CUDA_CHECK_LAUNCH();
        if (total_ == 0) return;
        ApplyArgs a;
        a.layout = layout_;
        a.total = total_;
        a.affine = bound_affine(ctx);
        if (vec) {
          norm_apply_kernel<T, kV>
              <<<grid_for(total_ / kV), kBlock, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), stats, a);
        } else {
          norm_apply_kernel<T, 1>
              <<<grid_for(total_), kBlock, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), stats, a);
        }
        KILN_CUDA_CHECK_LAUNCH();
        return;
      }
    }
  }

  NormalizationParams params_;
  double eps_;
  StatKind kind_ = StatKind::kVar;
  int64_t total_ = 0;
  bool k32_ = true;
  GroupLayout layout_;
  Affine affine_;
  bool has_affine_[2] = {false, false};
  SplitArgs split_;
  NormPath path_ = NormPath::kNone;
};

// ---- LRN -------------------------------------------------------------------------------------

struct LrnArgs {
  int64_t total = 0, channels = 1, inner = 1;
  IndexDiv inner_div, channel_div;
  int64_t before = 0, after = 0;
  double alpha_over_size = 0.0, beta = 0.0, bias = 0.0;
  bool k32 = true;
};

// y = x / (bias + alpha/size * sum of x^2 over the channel window)^beta; the power in double
// (LRN is rare and the window reads dominate).
template <typename T>
__global__ void lrn_kernel(const T* __restrict__ x, T* __restrict__ y, LrnArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total; i += step) {
    const int64_t nc = a.k32 ? a.inner_div.div<true>(i) : a.inner_div.div<false>(i);
    const int64_t in = i - nc * a.inner;
    const int64_t n = a.k32 ? a.channel_div.div<true>(nc) : a.channel_div.div<false>(nc);
    const int64_t c = nc - n * a.channels;
    const int64_t lo = c - a.before < 0 ? 0 : c - a.before;
    const int64_t hi = c + a.after >= a.channels ? a.channels - 1 : c + a.after;
    float sum = 0.0f;
    for (int64_t k = lo; k <= hi; ++k) {
      const float v = to_float(x[(n * a.channels + k) * a.inner + in]);
      sum += v * v;
    }
    const double base = a.bias + a.alpha_over_size * static_cast<double>(sum);
    y[i] = from_float<T>(static_cast<float>(static_cast<double>(to_float(x[i])) / pow(base, a.beta)));
  }
}

class LrnCuda : public Kernel {
 public:
  explicit LrnCuda(const LrnParams& params) : params_(params) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    const Dims& d = inputs[0].dims;
    const int64_t size = params_.size;
    a_ = LrnArgs{};
    a_.total = d.volume();
    a_.channels = d[1];
    a_.inner = product(d, 2, d.rank());
    a_.inner_div = IndexDiv(a_.inner);
    a_.channel_div = IndexDiv(a_.channels);
    a_.before = (size - 1) / 2;
    a_.after = size - 1 - a_.before;
    a_.alpha_over_size = params_.alpha / static_cast<double>(size);
    a_.beta = params_.beta;
    a_.bias = params_.bias;
    a_.k32 = a_.total < kFast32Limit;
  }

  void execute(const KernelContext& ctx) override {
    if (a_.total == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    if (ctx.inputs[0].type == DataType::kFloat16) {
      lrn_kernel<__half><<<grid_for(a_.total), kBlock, 0, stream>>>(ctx.inputs[0].as<const __half>(),
                                                                    ctx.outputs[0].as<__half>(), a_);
    } else {
      lrn_kernel<float>
          <<<grid_for(a_.total), kBlock, 0, stream>>>(ctx.inputs[0].as<const float>(), ctx.outputs[0].as<float>(), a_);
    }
    KILN_CUDA_CHECK_LAUNCH();
  }

 private:
  LrnParams params_;
  LrnArgs a_;
};

// ---- registration ----------------------------------------------------------------------------

bool linear_io(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  for (int i = 0; i < layer.num_outputs(); ++i) {
    if (layer.output(i) && layer.output(i)->format() != TensorFormat::kLinear) return false;
  }
  return true;
}

bool normalization_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || !is_cuda_float(inputs[0].type) || !linear_io(layer, inputs)) return false;
  if (inputs[0].dims.rank() > kMaxDims) return false;
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].present && inputs[i].type != inputs[0].type) return false;
  }
  for (int i = 1; i < layer.num_outputs(); ++i) {
    if (layer.output(i) && layer.output(i)->type() != DataType::kFloat32) return false;
  }
  return true;
}

bool lrn_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && is_cuda_float(inputs[0].type) && inputs[0].dims.rank() >= 3 && linear_io(layer, inputs);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerNormalization, "cuda", 100, normalization_supports,
    [](const Layer& layer) { return std::make_unique<NormalizationCuda>(params_of<NormalizationParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerLRN, "cuda", 100, lrn_supports, [](const Layer& layer) {
                                   return std::make_unique<LrnCuda>(params_of<LrnParams>(layer));
                                 }});

}  // namespace kiln::cuda
