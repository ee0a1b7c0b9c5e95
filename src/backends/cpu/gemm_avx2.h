// The AVX2 + FMA register block of kiln's own float32 CPU kernels (conv_winograd_cpu.cpp's 36
// products per tile block, conv_igemm_cpu.cpp's indirect GEMM): up to 6 rows x 16 columns of
// C = A . B, with B packed in panels of 16 columns ([kc][16], a row of 16 floats per step).
//
// The accumulators are named variables, not an array: GCC keeps an array of __m256 on the stack
// and stores it at every step (measured: 40% of the FMA rate). Callers compile this header's users
// for AVX2 (x86-64 GCC/Clang only) and pick them at run time (cpu::has_avx2_fma()).
#pragma once

#include "src/backends/cpu/isa_region.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

KILN_ISA_AVX2_BEGIN

namespace kiln::cpu::avx2 {

inline constexpr int64_t kPanel = 16;  // columns of a packed B panel (two registers)

// MR (1..6) rows x 16 columns, summed over `taps` products: acc = sum_t A_t[MR x kc] . B_t[kc x 16],
// then store(row, low 8 columns, high 8 columns) for each row. Row i of A_t starts at rows[t * 6 + i]
// (an indirect GEMM: a convolution points the rows at its input pixels, or at zeros for padding);
// the B_t follow each other in `b` ([taps][kc][16]).
template <int MR, typename Store>
[[gnu::always_inline]] inline void gemm_block_indirect(const float* const* rows, int64_t taps, const float* b,
                                                       int64_t kc, Store&& store) {
  __m256 c0a = _mm256_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
  __m256 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
#define KILN_GEMM_ROW(i, q)                            \
  if constexpr (MR > i) {                              \
    const __m256 ai = _mm256_broadcast_ss(a##i + (q)); \
    c##i##a = _mm256_fmadd_ps(ai, b0, c##i##a);        \
    c##i##b = _mm256_fmadd_ps(ai, b1, c##i##b);        \
  }
#define KILN_GEMM_STEP(q)                                                                            \
  {                                                                                                  \
    const __m256 b0 = _mm256_loadu_ps(b + kPanel * (q)), b1 = _mm256_loadu_ps(b + kPanel * (q) + 8); \
    KILN_GEMM_ROW(0, q)                                                                              \
    KILN_GEMM_ROW(1, q)                                                                              \
    KILN_GEMM_ROW(2, q)                                                                              \
    KILN_GEMM_ROW(3, q)                                                                              \
    KILN_GEMM_ROW(4, q)                                                                              \
    KILN_GEMM_ROW(5, q)                                                                              \
  }
  for (int64_t t = 0; t < taps; ++t, rows += 6) {
    // One pointer per row, advanced with the step: no row address is recomputed in the loop.
    const float* a0 = rows[0];
    const float* a1 = rows[MR > 1 ? 1 : 0];
    const float* a2 = rows[MR > 2 ? 2 : 0];
    const float* a3 = rows[MR > 3 ? 3 : 0];
    const float* a4 = rows[MR > 4 ? 4 : 0];
    const float* a5 = rows[MR > 5 ? 5 : 0];
    int64_t p = 0;
    for (; p + 2 <= kc; p += 2) {
      KILN_GEMM_STEP(0)
      KILN_GEMM_STEP(1)
      b += 2 * kPanel;
      a0 += 2, a1 += 2, a2 += 2, a3 += 2, a4 += 2, a5 += 2;
    }
    if (p < kc) {
      KILN_GEMM_STEP(0)
      b += kPanel;
    }
  }
#undef KILN_GEMM_STEP
#undef KILN_GEMM_ROW
#define KILN_GEMM_STORE(i) \
  if constexpr (MR > i) store(i, c##i##a, c##i##b);
  KILN_GEMM_STORE(0)
  KILN_GEMM_STORE(1)
  KILN_GEMM_STORE(2)
  KILN_GEMM_STORE(3)
  KILN_GEMM_STORE(4)
  KILN_GEMM_STORE(5)
#undef KILN_GEMM_STORE
}

// MR (1..6) rows x 16 columns: acc = A[MR x kc] . B[kc x 16], with A's rows `lda` floats apart and B
// one packed panel, then store(row, low 8 columns, high 8 columns) for each row.
template <int MR, typename Store>
[[gnu::always_inline]] inline void gemm_block(const float* a, int64_t lda, const float* b, int64_t kc, Store&& store) {
  const float* const rows[6] = {a, a + lda, a + lda * 2, a + lda * 3, a + lda * 4, a + lda * 5};
  gemm_block_indirect<MR>(rows, 1, b, kc, store);
}

// gemm_block_indirect for `mr` (1..6) rows known at run time.
template <typename Store>
[[gnu::always_inline]] inline void gemm_block_indirect_n(int64_t mr, const float* const* rows, int64_t taps,
                                                         const float* b, int64_t kc, Store&& store) {
  switch (mr) {
    case 6:
      return gemm_block_indirect<6>(rows, taps, b, kc, store);
    case 5:
      return gemm_block_indirect<5>(rows, taps, b, kc, store);
    case 4:
      return gemm_block_indirect<4>(rows, taps, b, kc, store);
    case 3:
      return gemm_block_indirect<3>(rows, taps, b, kc, store);
    case 2:
      return gemm_block_indirect<2>(rows, taps, b, kc, store);
    case 1:
      return gemm_block_indirect<1>(rows, taps, b, kc, store);
    default:
      return;
  }
}

// `rows` (any count) rows in blocks of 6, then one block of the remainder.
template <typename Store>
inline void gemm_rows(const float* a, int64_t lda, const float* b, int64_t kc, int64_t rows, Store&& store) {
  int64_t r = 0;
  auto at = [&](int64_t first) { return [&store, first](int i, __m256 lo, __m256 hi) { store(first + i, lo, hi); }; };
  for (; r + 6 <= rows; r += 6) gemm_block<6>(a + r * lda, lda, b, kc, at(r));
  if (r == rows) return;
  const float* a_r = a + r * lda;
  const float* const tail[6] = {a_r, a_r + lda, a_r + lda * 2, a_r + lda * 3, a_r + lda * 4, a_r + lda * 5};
  gemm_block_indirect_n(rows - r, tail, 1, b, kc, at(r));
}

}  // namespace kiln::cpu::avx2

KILN_ISA_END
#endif
