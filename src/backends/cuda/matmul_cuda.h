// Shared host-side pieces of the CUDA MatrixMultiply and Gemm kernels: the geometry of a
// (batched, broadcast, possibly transposed) matrix product as kiln's row-major tensors store it,
// and the launchers of kiln's own kernels (matmul_cuda.cu) that the cuBLASLt tactics
// (matmul_cublaslt.cpp) also use: the tiled fallback, C broadcast and the activation epilogue.
// Plain C++ (no device code), so that g++ can compile the cuBLASLt tactics.
//
// Layout: every tensor is kLinear (row-major, dense); a 1-D a is the row [1,K], a 1-D b the
// column [K,1] (numpy matmul promotion); transposes swap the last two dims.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kiln/network.h"
#include "kiln/types.h"
#include "src/core/activation_math.h"

namespace kiln::cuda {

constexpr int kMaxMatmulBatchDims = kMaxDims - 2;

// y[batch.., M, N] = op(a)[batch.., M, K] x op(b)[batch.., K, N]. Batch dims of extent 1 in
// the output are dropped (they change no offset), so batch_rank may be smaller than the
// output's batch rank.
struct MatmulGeometry {
  int64_t m = 0, n = 0, k = 0;
  bool a_trans = false, b_trans = false;  // effective transposes (false for 1-D operands)
  // The stored (row-major) matrix of each operand: rows x cols, and its element count.
  int64_t a_rows = 0, a_cols = 0, b_rows = 0, b_cols = 0;
  // Element (r, c) of op(a) is at a_rs * r + a_cs * c within one matrix; likewise for b.
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0;
  int batch_rank = 0;
  int64_t batch = 1;  // product of batch_dims
  int64_t batch_dims[kMaxMatmulBatchDims] = {};
  // Per output batch dim: element stride of each operand's matrices (0 where it broadcasts)
  // and of y's (always dense).
  int64_t a_bstride[kMaxMatmulBatchDims] = {};
  int64_t b_bstride[kMaxMatmulBatchDims] = {};
  int64_t y_bstride[kMaxMatmulBatchDims] = {};
};

// Geometry of a (shape-inferred) product; throws kiln::Error when K differs or batch dims do
// not broadcast, naming `what` (the layer).
MatmulGeometry matmul_geometry(const Dims& a, const Dims& b, bool transpose_a, bool transpose_b,
                               const std::string& what);

// Gemm's terms around the product: y = act(alpha * AB + beta * C), with C broadcast to [M, N]
// through strides (0 along a broadcast dim). c == nullptr: no C.
struct GemmTerms {
  float alpha = 1.0f, beta = 0.0f;
  const void* c = nullptr;
  int64_t c_rs = 0, c_cs = 0;
  PostOp post;
};

// Element strides of a C of dims `c` broadcast to [m, n] (rank 0, 1 or 2).
void gemm_c_strides(const Dims& c, int64_t m, int64_t n, int64_t* c_rs, int64_t* c_cs);

// Types kiln's tiled kernel multiplies: float32, float16 (float accumulation) and the integer
// types int32, int64, int8, uint8 (int64 accumulation, wrapped to the type on store, as the CPU
// reference). Gemm terms need a float type.
bool tiled_matmul_supports(DataType type);

// Enqueues y = product (with Gemm terms when `terms` is non-null) on `stream`. Handles every
// geometry, including K = 0 (y = act(beta * C)) and empty outputs (no launch).
void launch_tiled_matmul(DataType type, const MatmulGeometry& g, const void* a, const void* b, void* y,
                         const GemmTerms* terms, cudaStream_t stream);

// d[m, n] = c broadcast through (c_rs, c_cs); float32 / float16.
void launch_broadcast_c(DataType type, const void* c, int64_t c_rs, int64_t c_cs, void* d, int64_t m, int64_t n,
                        cudaStream_t stream);

// d[i] = post(d[i]) for count elements, in place; float32 / float16.
void launch_activation_inplace(DataType type, void* d, int64_t count, const PostOp& post, cudaStream_t stream);

}  // namespace kiln::cuda
