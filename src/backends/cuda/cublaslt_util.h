// Small pieces shared by kiln's cuBLASLt tactics (matmul_cublaslt.cpp for MatrixMultiply / Gemm,
// conv_cublaslt.cpp for 1x1 convolutions): owners of cuBLASLt's descriptor objects, layout and
// preference construction, and the alignment arithmetic both use to plan per pointer alignment.
// Everything here runs in prepare(); execute() only reads the objects.
#pragma once

#include <cublasLt.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "src/backends/cuda/cuda_common.h"

namespace kiln::cuda {

struct LtDescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct LtLayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct LtPrefDeleter {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtDescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDescDeleter>;
using LtLayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtLayoutDeleter>;
using LtPrefPtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtPrefDeleter>;

// Largest power of two <= 256 dividing v (256 for 0): the alignment an offset or stride of v
// bytes keeps.
inline size_t lt_alignment_of(uint64_t v) {
  size_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

inline bool lt_fits_int32(int64_t v) { return v >= 0 && v <= INT32_MAX; }

// A column-major rows x cols layout with leading dimension ld; batch_count > 1 adds a strided
// batch (stride in elements; 0 broadcasts one matrix to every batch entry).
inline LtLayoutPtr lt_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int32_t batch_count = 1,
                             int64_t stride = 0) {
  cublasLtMatrixLayout_t l = nullptr;
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  LtLayoutPtr owned(l);
  if (batch_count > 1) {
    KILN_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count, sizeof(batch_count)));
    KILN_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return owned;
}

// A heuristic preference: at most max_workspace bytes of workspace, and the minimum pointer
// alignment (bytes) the algorithm may assume for cuBLASLt's A, B, C and D.
inline LtPrefPtr lt_preference(uint64_t max_workspace, uint32_t align_a, uint32_t align_b, uint32_t align_c,
                               uint32_t align_d) {
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LtPrefPtr owned(pref);
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                         sizeof(max_workspace)));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                         sizeof(align_a)));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                         sizeof(align_b)));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                         sizeof(align_c)));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                         sizeof(align_d)));
  return owned;
}

}  // namespace kiln::cuda
