// kiln's own CUDA kernels of MatrixMultiply and Gemm (tactic "cuda"), plus the helpers the
// cuBLASLt tactics share (matmul_cuda.h): the geometry of a batched, broadcast product, C
// broadcast into the output and an in-place activation epilogue.
//
// The "cuda" tactic is the general fallback: one shared-memory tiled kernel that takes every
// case the CPU reference takes except float64 and bool (any batch broadcasting, 1-D operands,
// transposes as strides, K = 0, integer types accumulated in int64), so cuBLASLt's tactics can
// stay limited to what cuBLASLt does well. Each 256-thread block computes a 64x64 tile of one
// batch entry in 16-deep K steps, every thread a 4x4 sub-tile spread 16 rows/cols apart (so the
// shared-memory reads of a warp are conflict-free broadcasts); tiles are loaded along whichever
// operand dim is contiguous so that global loads coalesce.
//
// Layout: kLinear, dense row-major tensors; only element-size alignment is assumed.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "kiln/error.h"
#include "src/backends/cuda/compute_types_cuda.cuh"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/device_math.cuh"
#include "src/backends/cuda/matmul_cuda.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {

// ---- geometry (host) ----------------------------------------------------------------------

MatmulGeometry matmul_geometry(const Dims& a, const Dims& b, bool transpose_a, bool transpose_b,
                               const std::string& what) {
  if (a.rank() < 1 || b.rank() < 1) {
    throw Error(what + ": operands must have rank >= 1, got " + a.to_string() + " and " + b.to_string());
  }
  MatmulGeometry g;
  g.a_trans = transpose_a && a.rank() >= 2;
  g.b_trans = transpose_b && b.rank() >= 2;
  g.a_rows = a.rank() == 1 ? 1 : a[a.rank() - 2];
  g.a_cols = a[a.rank() - 1];
  g.b_rows = b.rank() == 1 ? b[0] : b[b.rank() - 2];
  g.b_cols = b.rank() == 1 ? 1 : b[b.rank() - 1];
  g.m = g.a_trans ? g.a_cols : g.a_rows;
  g.k = g.a_trans ? g.a_rows : g.a_cols;
  const int64_t kb = g.b_trans ? g.b_cols : g.b_rows;
  g.n = g.b_trans ? g.b_rows : g.b_cols;
  if (kb != g.k) {
    throw Error(what + ": inner dimensions differ (a " + a.to_string() + ", b " + b.to_string() + ")");
  }
  g.a_rs = g.a_trans ? 1 : g.a_cols;
  g.a_cs = g.a_trans ? g.a_cols : 1;
  g.b_rs = g.b_trans ? 1 : g.b_cols;
  g.b_cs = g.b_trans ? g.b_cols : 1;

  // Batch dims, aligned at the end; each operand's natural strides, 0 where it broadcasts.
  const int ra = std::max(a.rank() - 2, 0), rb = std::max(b.rank() - 2, 0);
  const int rank = std::max(ra, rb);
  int64_t sa[kMaxDims] = {}, sb[kMaxDims] = {}, ea[kMaxDims] = {}, eb[kMaxDims] = {};
  int64_t acc_a = g.a_rows * g.a_cols, acc_b = g.b_rows * g.b_cols;
  for (int i = rank - 1; i >= 0; --i) {
    const int ia = i - (rank - ra), ib = i - (rank - rb);
    ea[i] = ia >= 0 ? a[ia] : 1;
    eb[i] = ib >= 0 ? b[ib] : 1;
    sa[i] = ea[i] == 1 ? 0 : acc_a;
    sb[i] = eb[i] == 1 ? 0 : acc_b;
    acc_a *= ea[i];
    acc_b *= eb[i];
  }
  int64_t y_stride = g.m * g.n;
  int64_t dims[kMaxDims] = {}, ya[kMaxDims] = {}, yb[kMaxDims] = {}, yy[kMaxDims] = {};
  int kept = 0;
  for (int i = rank - 1; i >= 0; --i) {
    if (ea[i] != eb[i] && ea[i] != 1 && eb[i] != 1) {
      throw Error(what + ": batch dims of a " + a.to_string() + " and b " + b.to_string() + " do not broadcast");
    }
    const int64_t e = std::max(ea[i], eb[i]);
    if (e == 1) continue;
    dims[kept] = e;
    ya[kept] = sa[i];
    yb[kept] = sb[i];
    yy[kept] = y_stride;
    y_stride *= e;
    ++kept;
  }
  g.batch_rank = kept;
  for (int i = 0; i < kept; ++i) {  // reverse into outermost-first order
    g.batch_dims[i] = dims[kept - 1 - i];
    g.a_bstride[i] = ya[kept - 1 - i];
    g.b_bstride[i] = yb[kept - 1 - i];
    g.y_bstride[i] = yy[kept - 1 - i];
    g.batch *= g.batch_dims[i];
  }
  return g;
}

void gemm_c_strides(const Dims& c, int64_t m, int64_t n, int64_t* c_rs, int64_t* c_cs) {
  const int64_t rows = c.rank() >= 2 ? c[c.rank() - 2] : 1;
  const int64_t cols = c.rank() >= 1 ? c[c.rank() - 1] : 1;
  *c_cs = (cols == 1 && n != 1) ? 0 : 1;
  *c_rs = (rows == 1 && m != 1) ? 0 : cols;
}

namespace {

// ---- tiled kernel -------------------------------------------------------------------------

constexpr int kTile = 64;      // output tile: kTile x kTile
constexpr int kTileK = 16;     // K step
constexpr int kThreads = 256;  // 16 x 16 threads, each a 4x4 sub-tile
constexpr int kSub = kTile / 16;

// Accum<T>: compute_types_cuda.cuh.

template <typename T>
__device__ __forceinline__ Accum<T> load_acc(const T* p) {
  return to_compute<Accum<T>>(*p);
}

struct TiledParams {
  int64_t m, n, k;
  int64_t a_rs, a_cs, b_rs, b_cs;
  int64_t tiles_m, tiles_n, batch;
  int batch_rank;
  int64_t batch_dims[kMaxMatmulBatchDims];
  int64_t a_bstride[kMaxMatmulBatchDims];
  int64_t b_bstride[kMaxMatmulBatchDims];
};

template <typename T>
struct DeviceTerms {
  float alpha = 1.0f, beta = 0.0f;
  const T* c = nullptr;
  int64_t c_rs = 0, c_cs = 0;
  DevicePostOp post;
};

template <typename T, bool kTerms>
__device__ __forceinline__ T finish(Accum<T> acc, int64_t row, int64_t col, const DeviceTerms<T>& t) {
  if constexpr (kTerms) {
    float v = t.alpha * acc;
    if (t.c) v += t.beta * to_float(t.c[row * t.c_rs + col * t.c_cs]);
    return from_float<T>(t.post.apply(v));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half>) {
    return from_float<T>(acc);
  } else {
    return static_cast<T>(acc);
  }
}

template <typename T, bool kTerms>
__global__ void __launch_bounds__(kThreads)
    tiled_matmul_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, TiledParams p,
                        DeviceTerms<T> terms) {
  using A = Accum<T>;
  __shared__ A as[kTileK][kTile + 1];
  __shared__ A bs[kTileK][kTile + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  // Load along the contiguous dim of each operand (coalesced global reads).
  const bool a_k_fast = p.a_cs == 1;
  const bool b_n_fast = p.b_cs == 1;
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    int64_t a_off = 0, b_off = 0, rem = z;
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      const int64_t i = rem % p.batch_dims[d];
      rem /= p.batch_dims[d];
      a_off += i * p.a_bstride[d];
      b_off += i * p.b_bstride[d];
    }
    const T* pa = a + a_off;
    const T* pb = b + b_off;
    T* py = y + z * p.m * p.n;
    for (int64_t tm = blockIdx.y; tm < p.tiles_m; tm += gridDim.y) {
      for (int64_t tn = blockIdx.x; tn < p.tiles_n; tn += gridDim.x) {
        const int64_t row0 = tm * kTile, col0 = tn * kTile;
        A acc[kSub][kSub];
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
#pragma unroll
          for (int j = 0; j < kSub; ++j) acc[i][j] = A(0);
        }
        for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
#pragma unroll
          for (int l = 0; l < kTile * kTileK / kThreads; ++l) {
            const int e = tid + l * kThreads;
            const int r = a_k_fast ? e / kTileK : e % kTile;
            const int kk = a_k_fast ? e % kTileK : e / kTile;
            const int64_t gr = row0 + r, gk = k0 + kk;
            as[kk][r] = (gr < p.m && gk < p.k) ? load_acc(pa + gr * p.a_rs + gk * p.a_cs) : A(0);
          }
#pragma unroll
          for (int l = 0; l < kTile * kTileK / kThreads; ++l) {
            const int e = tid + l * kThreads;
            const int c = b_n_fast ? e % kTile : e / kTileK;
            const int kk = b_n_fast ? e / kTile : e % kTileK;
            const int64_t gk = k0 + kk, gc = col0 + c;
            bs[kk][c] = (gk < p.k && gc < p.n) ? load_acc(pb + gk * p.b_rs + gc * p.b_cs) : A(0);
          }
          __syncthreads();
#pragma unroll
          for (int kk = 0; kk < kTileK; ++kk) {
            A ar[kSub], br[kSub];
#pragma unroll
            for (int i = 0; i < kSub; ++i) ar[i] = as[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < kSub; ++j) br[j] = bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < kSub; ++i) {
#pragma unroll
              for (int j = 0; j < kSub; ++j) acc[i][j] += ar[i] * br[j];
            }
          }
          __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
          const int64_t gr = row0 + ty + 16 * i;
          if (gr >= p.m) continue;
#pragma unroll
          for (int j = 0; j < kSub; ++j) {
            const int64_t gc = col0 + tx + 16 * j;
            if (gc < p.n) py[gr * p.n + gc] = finish<T, kTerms>(acc[i][j], gr, gc, terms);
          }
        }
      }
    }
  }
}

template <typename T>
void launch_tiled(const MatmulGeometry& g, const void* a, const void* b, void* y, const GemmTerms* terms,
                  cudaStream_t stream) {
  TiledParams p{};
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.a_rs = g.a_rs;
  p.a_cs = g.a_cs;
  p.b_rs = g.b_rs;
  p.b_cs = g.b_cs;
  p.tiles_m = (g.m + kTile - 1) / kTile;
  p.tiles_n = (g.n + kTile - 1) / kTile;
  p.batch = g.batch;
  p.batch_rank = g.batch_rank;
  for (int i = 0; i < g.batch_rank; ++i) {
    p.batch_dims[i] = g.batch_dims[i];
    p.a_bstride[i] = g.a_bstride[i];
    p.b_bstride[i] = g.b_bstride[i];
  }
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.tiles_n, 0x7fffffff)),
                  static_cast<unsigned>(std::min<int64_t>(p.tiles_m, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(p.batch, 65535)));
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* py = static_cast<T*>(y);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half>) {
    if (terms) {
      DeviceTerms<T> t;
      t.alpha = terms->alpha;
      t.beta = terms->beta;
      t.c = static_cast<const T*>(terms->c);
      t.c_rs = terms->c_rs;
      t.c_cs = terms->c_cs;
      t.post = device_post_op(terms->post);
      tiled_matmul_kernel<T, true><<<grid, kThreads, 0, stream>>>(pa, pb, py, p, t);
      KILN_CUDA_CHECK_LAUNCH();
      return;
    }
  } else if (terms) {
    throw Error("Gemm (CUDA): alpha/beta/C/activation terms need a float32 or float16 tensor");
  }
  tiled_matmul_kernel<T, false><<<grid, kThreads, 0, stream>>>(pa, pb, py, p, DeviceTerms<T>{});
  KILN_CUDA_CHECK_LAUNCH();
}

using TiledLauncher = void (*)(const MatmulGeometry&, const void*, const void*, void*, const GemmTerms*, cudaStream_t);

const std::map<DataType, TiledLauncher>& tiled_launchers() {
  static const std::map<DataType, TiledLauncher> kTable = {
      {DataType::kFloat32, &launch_tiled<float>}, {DataType::kFloat16, &launch_tiled<__half>},
      {DataType::kInt32, &launch_tiled<int32_t>}, {DataType::kInt64, &launch_tiled<int64_t>},
      {DataType::kInt8, &launch_tiled<int8_t>},   {DataType::kUInt8, &launch_tiled<uint8_t>},
  };
  return kTable;
}

// ---- C broadcast and activation epilogue ----------------------------------------------------

template <typename T>
__global__ void broadcast_c_kernel(const T* __restrict__ c, int64_t c_rs, int64_t c_cs, T* __restrict__ d, int64_t m,
                                   int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, col = i - r * n;
    d[i] = c[r * c_rs + col * c_cs];
  }
}

template <typename T>
__global__ void activation_inplace_kernel(T* __restrict__ d, int64_t count, DevicePostOp post) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    d[i] = from_float<T>(post.apply(to_float(d[i])));
  }
}

// Packed variant for float32 (16-byte aligned d): four elements per access.
__global__ void activation_inplace_float4_kernel(float4* __restrict__ d, int64_t count4, DevicePostOp post) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 v = d[i];
    v.x = post.apply(v.x);
    v.y = post.apply(v.y);
    v.z = post.apply(v.z);
    v.w = post.apply(v.w);
    d[i] = v;
  }
}

}  // namespace

bool tiled_matmul_supports(DataType type) { return tiled_launchers().count(type) != 0; }

void launch_tiled_matmul(DataType type, const MatmulGeometry& g, const void* a, const void* b, void* y,
                         const GemmTerms* terms, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const auto it = tiled_launchers().find(type);
  if (it == tiled_launchers().end()) {
    throw Error(std::string("matrix product (CUDA): unsupported data type ") + to_string(type));
  }
  it->second(g, a, b, y, terms, stream);
}

void launch_broadcast_c(DataType type, const void* c, int64_t c_rs, int64_t c_cs, void* d, int64_t m, int64_t n,
                        cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0) return;
  if (type == DataType::kFloat32) {
    broadcast_c_kernel<float><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const float*>(c), c_rs, c_cs,
                                                                      static_cast<float*>(d), m, n);
  } else if (type == DataType::kFloat16) {
    broadcast_c_kernel<__half><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const __half*>(c), c_rs, c_cs,
                                                                       static_cast<__half*>(d), m, n);
  } else {
    throw Error(std::string("Gemm (CUDA): C of type ") + to_string(type) + " is not supported");
  }
  KILN_CUDA_CHECK_LAUNCH();
}

void launch_activation_inplace(DataType type, void* d, int64_t count, const PostOp& post, cudaStream_t stream) {
  if (count == 0 || !post.enabled) return;
  const DevicePostOp p = device_post_op(post);
  if (type == DataType::kFloat32) {
    if (reinterpret_cast<uintptr_t>(d) % 16 == 0 && count % 4 == 0) {
      activation_inplace_float4_kernel<<<grid_for(count / 4), kBlock, 0, stream>>>(static_cast<float4*>(d), count / 4,
                                                                                   p);
    } else {
      activation_inplace_kernel<float><<<grid_for(count), kBlock, 0, stream>>>(static_cast<float*>(d), count, p);
    }
  } else if (type == DataType::kFloat16) {
    activation_inplace_kernel<__half><<<grid_for(count), kBlock, 0, stream>>>(static_cast<__half*>(d), count, p);
  } else {
    throw Error(std::string("Gemm (CUDA): activation on type ") + to_string(type) + " is not supported");
  }
  KILN_CUDA_CHECK_LAUNCH();
}

namespace {

// ---- the "cuda" tactics -------------------------------------------------------------------

bool all_linear(const std::vector<TensorDesc>& inputs) {
  for (const TensorDesc& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

bool matmul_cuda_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  // A fused bias or activation comes only from CPU builds (activation_fusion).
  return inputs.size() == 2 && layer.attrs().get_string("activation", "").empty() && all_linear(inputs) &&
         inputs[0].type == inputs[1].type && tiled_matmul_supports(inputs[0].type) && inputs[0].dims.rank() >= 1 &&
         inputs[1].dims.rank() >= 1;
}

class MatrixMultiplyCuda : public Kernel {
 public:
  explicit MatrixMultiplyCuda(const Layer& layer)
      : name_("MatrixMultiply layer '" + layer.name() + "'"),
        ta_(params_of<MatMulParams>(layer).transpose_a),
        tb_(params_of<MatMulParams>(layer).transpose_b) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    g_ = matmul_geometry(inputs[0].dims, inputs[1].dims, ta_, tb_, name_);
  }

  void execute(const KernelContext& ctx) override {
    launch_tiled_matmul(ctx.inputs[0].type, g_, ctx.inputs[0].data, ctx.inputs[1].data, ctx.outputs[0].data, nullptr,
                        stream_of(ctx));
  }

 private:
  std::string name_;
  bool ta_, tb_;
  MatmulGeometry g_;
};

bool gemm_cuda_supports(const Layer&, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !all_linear(inputs) || !is_cuda_float(inputs[0].type)) return false;
  if (inputs[1].type != inputs[0].type || inputs[0].dims.rank() != 2 || inputs[1].dims.rank() != 2) return false;
  if (inputs.size() > 2 && inputs[2].present) {
    if (inputs[2].type != inputs[0].type || inputs[2].dims.rank() > 2) return false;
  }
  return true;
}

class GemmCuda : public Kernel {
 public:
  explicit GemmCuda(const Layer& layer)
      : name_("Gemm layer '" + layer.name() + "'"),
        ta_(params_of<GemmParams>(layer).trans_a),
        tb_(params_of<GemmParams>(layer).trans_b) {
    terms_.alpha = static_cast<float>(params_of<GemmParams>(layer).alpha);
    terms_.beta = static_cast<float>(params_of<GemmParams>(layer).beta);
    terms_.post = read_post_op(layer);
  }

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    g_ = matmul_geometry(inputs[0].dims, inputs[1].dims, ta_, tb_, name_);
    has_c_ = inputs.size() > 2 && inputs[2].present;
    if (has_c_) gemm_c_strides(inputs[2].dims, g_.m, g_.n, &terms_.c_rs, &terms_.c_cs);
  }

  void execute(const KernelContext& ctx) override {
    GemmTerms t = terms_;
    t.c = has_c_ && ctx.inputs.size() > 2 ? ctx.inputs[2].data : nullptr;
    launch_tiled_matmul(ctx.inputs[0].type, g_, ctx.inputs[0].data, ctx.inputs[1].data, ctx.outputs[0].data, &t,
                        stream_of(ctx));
  }

 private:
  std::string name_;
  bool ta_, tb_;
  bool has_c_ = false;
  GemmTerms terms_;
  MatmulGeometry g_;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerMatrixMultiply, "cuda", 10, matmul_cuda_supports,
                                 [](const Layer& layer) { return std::make_unique<MatrixMultiplyCuda>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerGemm, "cuda", 10, gemm_cuda_supports,
                                 [](const Layer& layer) { return std::make_unique<GemmCuda>(layer); }});

}  // namespace kiln::cuda
