// "packed_avx2" (priority 104) of MatrixMultiply: y = a . b with b a constant matrix (the weights
// of a fully connected layer), float32, row-major, AVX2 + FMA (chosen at run time; supports()
// declines elsewhere). The bias and activation CPU builds fuse into a MatrixMultiply
// (activation_fusion: bert's bias adds and GELU) are applied to each tile of y right after the
// product wrote it, for the activations activation_avx2.h computes.
//
// Why: oneDNN 2.6's matmul runs on AVX2 through its jit sgemm with b in its plain layout, and the
// sgemm packs b into panels on every call. bert_tiny at batch 8 has 128 x 128 x 512 products
// whose b (256 KB) was repacked on every inference. Here b is packed once, at prepare(), into
// panels of 16 columns ([N/16][K][16], zero beyond N), and each call only runs the register block
// of gemm_avx2.h (6 rows x 16 columns) over a's rows where they lie.
//
// Shapes: a [..., M, K] (any leading dims fold into the rows: b has none), b [K, N] or, with
// transpose_b, [N, K]; y [..., M, N]. K up to kMaxK (a block's 6 rows of a and one panel of b stay
// in a core's L2 cache without splitting K). Work: chunks of rows x groups of panels, shared among
// the context's threads; each chunk runs its panels in turn over rows that stay in cache.
//
// The same product serves Convolution's "pointwise_packed" (below): 1x1 convolutions over few
// pixels; and "batched_avx512" / "batched_avx2" (below) run it on products of two activations,
// packing b per call.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/activation_avx512.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/gemm_avx2.h"
#include "src/backends/kernel.h"
#include "src/ir/conv_params.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/op_params.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_PACKED_X86 1
#else
#define KILN_PACKED_X86 0
#endif

namespace kiln {
namespace {

constexpr const char* kTactic = "packed_avx2";
constexpr const char* kTactic512 = "packed_avx512";  // the same panels, the AVX-512 register block

using cpu::has_avx512f;
constexpr int64_t kPanel = 16;      // columns per packed panel of b
constexpr int64_t kChunkRows = 48;  // rows per work item
constexpr int64_t kMaxK = 4096;     // a block's rows and a panel: 6 x 16 KB + 256 KB at most
constexpr int64_t kMaxPackedBytes = int64_t{256} << 20;

// The product's sizes for one shape of a.
struct Sizes {
  int64_t m = 0, k = 0, n = 0, panels = 0, chunks = 0, groups = 1;
};

// The work split of an m x k by k x n product on `threads` threads: chunks of rows, and where
// there are few, groups of panels too, so that every thread has about four items.
Sizes make_sizes(int64_t m, int64_t k, int64_t n, int threads) {
  Sizes s;
  s.m = m;
  s.k = k;
  s.n = n;
  s.panels = (n + kPanel - 1) / kPanel;
  s.chunks = (m + kChunkRows - 1) / kChunkRows;
  const int64_t want = 4 * std::max(1, threads);
  s.groups = s.chunks >= want ? 1
                              : std::clamp<int64_t>((want + s.chunks - 1) / std::max<int64_t>(1, s.chunks), 1,
                                                    std::max<int64_t>(1, s.panels));
  return s;
}

// b's dims as [K, N] (transposed: stored [N, K]); false when b is not a matrix.
bool b_sizes(const Dims& b, bool transpose_b, int64_t* k, int64_t* n) {
  if (b.rank() != 2 || b.is_dynamic()) return false;
  *k = transpose_b ? b[1] : b[0];
  *n = transpose_b ? b[0] : b[1];
  return true;
}

// b's matrix (row-major [K, N], or [N, K] transposed) -> panels [N/16][K][16], zero beyond N.
void pack_b_into(const float* b, int64_t k, int64_t n, bool transpose_b, float* out) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t panel = 0; panel < panels; ++panel) {
    const int64_t c0 = panel * kPanel, lanes = std::min(kPanel, n - c0);
    float* o = out + panel * k * kPanel;
    if (!transpose_b) {
      for (int64_t r = 0; r < k; ++r) {
        float* row = o + r * kPanel;
        std::copy_n(b + r * n + c0, lanes, row);
        std::fill(row + lanes, row + kPanel, 0.0f);
      }
    } else {
      if (lanes < kPanel) std::fill(o, o + k * kPanel, 0.0f);
      for (int64_t c = 0; c < lanes; ++c) {
        const float* col = b + (c0 + c) * k;
        for (int64_t r = 0; r < k; ++r) o[r * kPanel + c] = col[r];
      }
    }
  }
}

// b -> [N/16][K][16], zero beyond N (packed once: constant weights).
std::vector<float> pack_b(const float* b, int64_t k, int64_t n, bool transpose_b) {
  std::vector<float> out(static_cast<size_t>((n + kPanel - 1) / kPanel * k * kPanel));
  pack_b_into(b, k, n, transpose_b, out.data());
  return out;
}

#if KILN_PACKED_X86
KILN_ISA_AVX2_BEGIN

// y = act(y + bias + residual) over rows x `lanes` (1..16) columns of y (`ld` floats apart; the
// residual, where there is one, laid out as y), right after the product wrote them (they are in
// L1). A function of its own: with the bias and the activation
// inside the register block's store, GCC kept one accumulator on the stack in the product's loop
// (bert_tiny's fused layers 1.6x slower).
// The tile's `lanes` bias values are read masked (none: zero). The activation a template
// argument (cpu::with_activation_kind): with the kind read per register, GELU here took 1.07 ns
// an element against 0.73-0.86 (bert_tiny's intermediate products, session 30).
template <bool kOn, ActivationType K>
[[gnu::noinline]] void epilogue_tile_as(float* y, int64_t ld, int64_t rows, int64_t lanes, const float* bias,
                                        const float* residual, float alpha, float beta) {
  const PostOp post{kOn, K, alpha, beta};
  const __m256i mlo = cpu::avx2::lane_mask(std::min<int64_t>(8, lanes));
  const __m256i mhi = cpu::avx2::lane_mask(std::max<int64_t>(0, lanes - 8));
  const __m256 b_lo = bias ? _mm256_maskload_ps(bias, mlo) : _mm256_setzero_ps();
  const __m256 b_hi = bias ? _mm256_maskload_ps(bias + 8, mhi) : _mm256_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ld;
    const float* res = residual ? residual + r * ld : nullptr;
    if (lanes == kPanel) {
      __m256 lo = _mm256_add_ps(_mm256_loadu_ps(row), b_lo), hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), b_hi);
      if (res) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(res));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(res + 8));
      }
      _mm256_storeu_ps(row, cpu::avx2::activate(lo, post));
      _mm256_storeu_ps(row + 8, cpu::avx2::activate(hi, post));
    } else {
      __m256 lo = _mm256_add_ps(_mm256_maskload_ps(row, mlo), b_lo);
      __m256 hi = _mm256_add_ps(_mm256_maskload_ps(row + 8, mhi), b_hi);
      if (res) {
        lo = _mm256_add_ps(lo, _mm256_maskload_ps(res, mlo));
        hi = _mm256_add_ps(hi, _mm256_maskload_ps(res + 8, mhi));
      }
      _mm256_maskstore_ps(row, mlo, cpu::avx2::activate(lo, post));
      _mm256_maskstore_ps(row + 8, mhi, cpu::avx2::activate(hi, post));
    }
  }
}

void epilogue_tile(float* y, int64_t ld, int64_t rows, int64_t lanes, const float* bias, const float* residual,
                   const PostOp& post) {
  cpu::with_activation_kind(post, [&]<bool kOn, ActivationType K>() {
    epilogue_tile_as<kOn, K>(y, ld, rows, lanes, bias, residual, post.alpha, post.beta);
  });
}

// Rows [r0, r1) x panels [p0, p1) of y = act(a . b + bias + residual), panel by panel (bias [N]
// or null; residual laid out as y, or null).
void run_item(const Sizes& s, const float* a, const float* packed, const float* bias, const float* residual,
              const PostOp& post, float* y, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  for (int64_t panel = p0; panel < p1; ++panel) {
    const int64_t c0 = panel * kPanel;
    const int64_t lanes = std::min(kPanel, s.n - c0);
    const __m256i mlo = cpu::avx2::lane_mask(std::min<int64_t>(8, lanes));
    const __m256i mhi = cpu::avx2::lane_mask(std::max<int64_t>(0, lanes - 8));
    const float* bp = packed + panel * s.k * kPanel;
    float* yc = y + r0 * s.n + c0;
    const int64_t n = s.n;
    auto store = [&](int64_t row, __m256 lo, __m256 hi) __attribute__((always_inline)) {
      float* out = yc + row * n;
      if (lanes == kPanel) {
        _mm256_storeu_ps(out, lo);
        _mm256_storeu_ps(out + 8, hi);
      } else {
        _mm256_maskstore_ps(out, mlo, lo);
        _mm256_maskstore_ps(out + 8, mhi, hi);
      }
    };
    cpu::avx2::gemm_rows(a + r0 * s.k, s.k, bp, s.k, r1 - r0, store);
    if (bias || residual || post.enabled) {
      epilogue_tile(yc, n, r1 - r0, lanes, bias ? bias + c0 : nullptr, residual ? residual + r0 * n + c0 : nullptr,
                    post);
    }
  }
}

KILN_ISA_END

// ---- packed_avx512: the same panels, two at a time in 512-bit registers ----------------------
//
// With AVX-512F's 32 registers the register block is 8 rows x 32 columns (two panels, 16
// accumulators): per step of K, 2 loads of b and 8 broadcasts of a for 16 FMAs, and 2.7x the
// outputs of the 6 x 16 AVX2 block for the same per-block cost (zeroing, row pointers, stores).
// On AMD's Zen 4 (512-bit FMAs at the 256-bit rate) both blocks run bert_tiny's products at the
// FMA peak; on the H200 host's Xeon (two 512-bit FMA units) this one is 1.5-1.9x the AVX2 block
// (session 22, bench/cpu_matmul_layers.py).
KILN_ISA_AVX512_BEGIN

constexpr int64_t kRows512 = 8;

// MR (1..8) rows x NP (1..2) panels of y = a . b over kc steps; `m0` and `m1` mask the columns
// stored of each panel.
template <int MR, int NP>
[[gnu::always_inline]] inline void block512(const float* a, int64_t lda, const float* b0, const float* b1, int64_t kc,
                                            float* y, int64_t ldy, __mmask16 m0, __mmask16 m1) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const float* a0 = a;
  const float* a1 = a + lda * (MR > 1 ? 1 : 0);
  const float* a2 = a + lda * (MR > 2 ? 2 : 0);
  const float* a3 = a + lda * (MR > 3 ? 3 : 0);
  const float* a4 = a + lda * (MR > 4 ? 4 : 0);
  const float* a5 = a + lda * (MR > 5 ? 5 : 0);
  const float* a6 = a + lda * (MR > 6 ? 6 : 0);
  const float* a7 = a + lda * (MR > 7 ? 7 : 0);
#define KILN_ROW512(i)                                                \
  if constexpr (MR > i) {                                             \
    const __m512 ai = _mm512_set1_ps(a##i[p]);                        \
    c##i##0 = _mm512_fmadd_ps(ai, w0, c##i##0);                       \
    if constexpr (NP > 1) c##i##1 = _mm512_fmadd_ps(ai, w1, c##i##1); \
  }
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 w0 = _mm512_loadu_ps(b0 + kPanel * p);
    const __m512 w1 = NP > 1 ? _mm512_loadu_ps(b1 + kPanel * p) : w0;
    KILN_ROW512(0)
    KILN_ROW512(1)
    KILN_ROW512(2)
    KILN_ROW512(3)
    KILN_ROW512(4)
    KILN_ROW512(5)
    KILN_ROW512(6)
    KILN_ROW512(7)
  }
#undef KILN_ROW512
#define KILN_STORE512(i)                                                            \
  if constexpr (MR > i) {                                                           \
    _mm512_mask_storeu_ps(y + (i)*ldy, m0, c##i##0);                                \
    if constexpr (NP > 1) _mm512_mask_storeu_ps(y + (i)*ldy + kPanel, m1, c##i##1); \
  }
  KILN_STORE512(0)
  KILN_STORE512(1)
  KILN_STORE512(2)
  KILN_STORE512(3)
  KILN_STORE512(4)
  KILN_STORE512(5)
  KILN_STORE512(6)
  KILN_STORE512(7)
#undef KILN_STORE512
}

template <int NP>
void rows512(const float* a, int64_t lda, const float* b0, const float* b1, int64_t kc, float* y, int64_t ldy,
             int64_t rows, __mmask16 m0, __mmask16 m1) {
  int64_t r = 0;
  for (; r + kRows512 <= rows; r += kRows512) block512<8, NP>(a + r * lda, lda, b0, b1, kc, y + r * ldy, ldy, m0, m1);
  const float* ar = a + r * lda;
  float* yr = y + r * ldy;
  switch (rows - r) {
    case 7:
      return block512<7, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    case 6:
      return block512<6, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    case 5:
      return block512<5, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    case 4:
      return block512<4, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    case 3:
      return block512<3, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    case 2:
      return block512<2, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    case 1:
      return block512<1, NP>(ar, lda, b0, b1, kc, yr, ldy, m0, m1);
    default:
      return;
  }
}

// epilogue_tile's work on 16 lanes: y = act(y + bias) over rows x the columns `m0` and `m1` mark
// of two panels side by side (m1 empty: one panel), right after the product wrote them.
template <bool kOn, ActivationType K>
[[gnu::noinline]] void epilogue_tile512_as(float* y, int64_t ld, int64_t rows, __mmask16 m0, __mmask16 m1,
                                           const float* bias, const float* residual, float alpha, float beta) {
  const PostOp post{kOn, K, alpha, beta};
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + kPanel) : _mm512_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ld;
    const float* res = residual ? residual + r * ld : nullptr;
    __m512 v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), b0);
    if (res) v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, res));
    _mm512_mask_storeu_ps(row, m0, cpu::avx512::activate(v0, post));
    if (m1) {
      __m512 v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + kPanel), b1);
      if (res) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, res + kPanel));
      _mm512_mask_storeu_ps(row + kPanel, m1, cpu::avx512::activate(v1, post));
    }
  }
}

void epilogue_tile512(float* y, int64_t ld, int64_t rows, __mmask16 m0, __mmask16 m1, const float* bias,
                      const float* residual, const PostOp& post) {
  cpu::with_activation_kind(post, [&]<bool kOn, ActivationType K>() {
    epilogue_tile512_as<kOn, K>(y, ld, rows, m0, m1, bias, residual, post.alpha, post.beta);
  });
}

// run_item's work with the AVX-512 block: panels two at a time (the last one alone when the
// group has an odd count).
void run_item512(const Sizes& s, const float* a, const float* packed, const float* bias, const float* residual,
                 const PostOp& post, float* y, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  for (int64_t panel = p0; panel < p1; panel += 2) {
    const int64_t c0 = panel * kPanel;
    const bool two = panel + 1 < p1;
    const int64_t lanes0 = std::min(kPanel, s.n - c0);
    const int64_t lanes1 = two ? std::min(kPanel, s.n - c0 - kPanel) : 0;
    const float* b0 = packed + panel * s.k * kPanel;
    float* yc = y + r0 * s.n + c0;
    const float* ar = a + r0 * s.k;
    const __mmask16 m0 = cpu::avx512::lane_mask(lanes0), m1 = cpu::avx512::lane_mask(lanes1);  // m1 0: one panel
    if (two) {
      rows512<2>(ar, s.k, b0, b0 + s.k * kPanel, s.k, yc, s.n, r1 - r0, m0, m1);
    } else {
      rows512<1>(ar, s.k, b0, b0, s.k, yc, s.n, r1 - r0, m0, m1);
    }
    if (bias || residual || post.enabled) {
      epilogue_tile512(yc, s.n, r1 - r0, m0, m1, bias ? bias + c0 : nullptr,
                       residual ? residual + r0 * s.n + c0 : nullptr, post);
    }
  }
}

KILN_ISA_END
#endif

void run_packed(const Sizes& s, const float* a, const float* packed, const float* bias, const float* residual,
                const PostOp& post, float* y, int threads, bool avx512) {
#if KILN_PACKED_X86
  const int64_t items = s.chunks * s.groups;
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_num_threads(), id = omp_get_thread_num();
    for (int64_t item = items * id / t; item < items * (id + 1) / t; ++item) {
      const int64_t chunk = item / s.groups, group = item % s.groups;
      const int64_t r0 = chunk * kChunkRows, r1 = std::min(s.m, r0 + kChunkRows);
      const int64_t p0 = s.panels * group / s.groups, p1 = s.panels * (group + 1) / s.groups;
      if (avx512) {
        run_item512(s, a, packed, bias, residual, post, y, r0, r1, p0, p1);
      } else {
        run_item(s, a, packed, bias, residual, post, y, r0, r1, p0, p1);
      }
    }
  }
#else
  (void)s, (void)a, (void)packed, (void)bias, (void)residual, (void)post, (void)y, (void)threads, (void)avx512;
  throw Error("MatrixMultiply packed_avx2: not built for this processor");
#endif
}

// The prefix of prepare()'s errors, after checking the inputs and outputs are a, b (a bias) and y.
std::string product_where(const Layer& layer, const char* tactic, const std::vector<TensorDesc>& inputs,
                          const std::vector<TensorDesc>& outputs) {
  const std::string where = "layer '" + layer.name() + "' (MatrixMultiply) " + tactic + ": ";
  if (inputs.size() < 2 || inputs.size() > 4 || outputs.empty()) {
    throw Error(where + "expects inputs a, b (a bias, a residual) and output y");
  }
  return where;
}

// Whether input 3 (a residual, the output's dims, added before the activation) is there; throws
// where its dims differ from the output's.
bool check_residual(const std::string& where, const std::vector<TensorDesc>& inputs, const Dims& out) {
  if (inputs.size() < 4 || !inputs[3].present) return false;
  if (inputs[3].dims != out) {
    throw Error(where + "the residual " + inputs[3].dims.to_string() + " must have the output's dims " +
                out.to_string());
  }
  return true;
}

class MatmulPacked : public Kernel {
 public:
  MatmulPacked(const MatMulParams& p, const PostOp& post, bool avx512)
      : transpose_b_(p.transpose_b), avx512_(avx512), post_(post) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = product_where(layer, tactic(), inputs, outputs);
    threads_ = std::max(1, num_threads);
    int64_t k = 0, n = 0;
    if (!b_sizes(inputs[1].dims, transpose_b_, &k, &n) || k < 1) throw Error(where + "b must be a non-empty matrix");
    const Dims& ad = inputs[0].dims;
    if (ad.rank() < 1 || ad[ad.rank() - 1] != k) {
      throw Error(where + "a " + ad.to_string() + " does not end in b's " + std::to_string(k) + " rows");
    }
    s_ = make_sizes(ad.volume() / k, k, n, threads_);  // k >= 1: supports() declines empty products
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    if (has_bias_ && inputs[2].dims.volume() != n) {
      throw Error(where + "the bias " + inputs[2].dims.to_string() + " must hold the product's " + std::to_string(n) +
                  " columns");
    }
    if (outputs[0].dims.volume() != s_.m * n) {
      throw Error(where + "output dims " + outputs[0].dims.to_string() + " hold " +
                  std::to_string(outputs[0].dims.volume()) + " elements, the product " + std::to_string(s_.m * n));
    }
    has_residual_ = check_residual(where, inputs, outputs[0].dims);
    if (!packed_) {
      const HostTensor* b = inputs[1].value;
      if (!b || b->type() != DataType::kFloat32 || b->count() != k * n) {
        throw Error(where + "b must be a constant float32 matrix (the builder chooses this kernel only then)");
      }
      packed_ =
          std::make_shared<const std::vector<float>>(pack_b(static_cast<const float*>(b->data()), k, n, transpose_b_));
    }
  }

  const char* tactic() const { return avx512_ ? kTactic512 : kTactic; }

  // The instances for other shapes of a (a dynamic batch) share the packed b.
  std::unique_ptr<Kernel> another_instance() const override {
    auto k = std::make_unique<MatmulPacked>(*this);
    return k;
  }

  void execute(const KernelContext& ctx) override {
    if (!packed_) throw Error(std::string("MatrixMultiply ") + tactic() + ": execute() before prepare()");
    float* y = ctx.outputs.at(0).as<float>();
    if (s_.m == 0) return;
    const float* bias = has_bias_ ? ctx.inputs.at(2).as<const float>() : nullptr;
    const float* residual = has_residual_ ? ctx.inputs.at(3).as<const float>() : nullptr;
    run_packed(s_, ctx.inputs.at(0).as<const float>(), packed_->data(), bias, residual, post_, y, threads_, avx512_);
  }

 private:
  bool transpose_b_ = false;
  bool avx512_ = false;        // packed_avx512: the 8 x 32 register block
  PostOp post_;                // the fused activation (CPU builds' activation_fusion)
  bool has_bias_ = false;      // input 2, [N], added to every row
  bool has_residual_ = false;  // input 3, the output's dims, added before the activation
  int threads_ = 1;
  Sizes s_;
  // b packed once, at the first prepare() of the first instance (b is constant: every shape of a
  // uses the same panels, and another_instance() shares them).
  std::shared_ptr<const std::vector<float>> packed_;
};

// What the packed and batched tactics share: float32 a, b (a rank-1 bias, a residual) in linear
// memory, an activation activate() computes, a linear output, a not transposed, AVX2 + FMA.
bool product_inputs_ok(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!KILN_PACKED_X86 || !cpu::has_avx2_fma()) return false;
  if (inputs.size() < 2 || inputs.size() > 4 || !inputs[0].present || !inputs[1].present) return false;
  for (const TensorDesc& d : inputs) {
    if (d.present && (d.type != DataType::kFloat32 || d.format != TensorFormat::kLinear)) return false;
  }
  if (inputs.size() > 2 && inputs[2].present && inputs[2].dims.rank() != 1) return false;
  if (!cpu::activation_vectorized(read_post_op(layer))) return false;
  if (layer.num_outputs() < 1 || layer.output(0)->format() != TensorFormat::kLinear) return false;
  return !params_of<MatMulParams>(layer).transpose_a;
}

// A constant float32 matrix b (at most kMaxK rows of the product and 256 MB packed), a float32 a
// not transposed, both row-major, on a processor with AVX2 + FMA.
bool supports_packed(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!product_inputs_ok(layer, inputs)) return false;
  const MatMulParams& p = params_of<MatMulParams>(layer);
  int64_t k = 0, n = 0;
  if (!b_sizes(inputs[1].dims, p.transpose_b, &k, &n)) return false;
  const HostTensor* b = inputs[1].value;
  if (!b || b->type() != DataType::kFloat32 || b->count() != k * n) return false;
  if (k < 1 || k > kMaxK || n < 1) return false;
  if ((n + kPanel - 1) / kPanel * kPanel * k * static_cast<int64_t>(sizeof(float)) > kMaxPackedBytes) return false;
  const Dims& a = inputs[0].dims;
  if (a.rank() < 1) return false;
  const int64_t ak = a[a.rank() - 1];
  return ak < 0 || ak == k;  // dynamic: prepare() checks
}

// ---- batched_avx512 / batched_avx2: products of two activations -------------------------------
//
// "batched_avx512" (priority 97) and "batched_avx2" (96) of MatrixMultiply: y = a . b where b is
// not a constant, such as attention's Q . K^T and P . V: a [..., M, K], b [..., K, N] (with
// transpose_b [..., N, K]), the batch dims broadcast as in numpy. Each work item (a batch matrix
// and a chunk of its rows) packs its b matrix into the panels above in its thread's part of the
// workspace (a thread that runs several chunks of one matrix packs it once) and runs the same
// register blocks, bias and activation included. Without it, builds without oneDNN ran these on
// the reference kernel: bert_tiny's attention products at batch 8 took 0.15-0.17 ms each, about a
// third of an inference. Timed against oneDNN's where oneDNN is built in.
constexpr const char* kTacticBatched = "batched_avx2";
constexpr const char* kTacticBatched512 = "batched_avx512";

class MatmulBatched : public Kernel {
 public:
  MatmulBatched(const MatMulParams& p, const PostOp& post, bool avx512)
      : transpose_b_(p.transpose_b), avx512_(avx512), post_(post) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = product_where(layer, tactic(), inputs, outputs);
    const Dims& ad = inputs[0].dims;
    const Dims& bd = inputs[1].dims;
    if (ad.rank() < 2 || bd.rank() < 2) throw Error(where + "a and b must be matrices or batches of them");
    const int64_t m = ad[ad.rank() - 2], k = ad[ad.rank() - 1];
    const int64_t bk = transpose_b_ ? bd[bd.rank() - 1] : bd[bd.rank() - 2];
    const int64_t n = transpose_b_ ? bd[bd.rank() - 2] : bd[bd.rank() - 1];
    if (bk != k) {
      throw Error(where + "a " + ad.to_string() + " and b " + bd.to_string() + (transpose_b_ ? " (transposed)" : "") +
                  " differ in the inner dimension (" + std::to_string(k) + " vs " + std::to_string(bk) + ")");
    }
    if (k > kMaxK) throw Error(where + "K " + std::to_string(k) + " exceeds " + std::to_string(kMaxK));
    // The batch dims, broadcast as in numpy (the shape rules' broadcast_dims), and each batch
    // matrix's offsets in a and b.
    const Dims a_batch = leading(ad), b_batch = leading(bd);
    const Dims batch = broadcast_dims(ShapeContext(layer, {}), a_batch, b_batch);
    Dims want = batch;
    want.push_back(m);
    want.push_back(n);
    if (outputs[0].dims != want) {
      throw Error(where + "output dims " + outputs[0].dims.to_string() + " differ from the product's " +
                  want.to_string());
    }
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    if (has_bias_ && inputs[2].dims.volume() != n) {
      throw Error(where + "the bias " + inputs[2].dims.to_string() + " must hold the product's " + std::to_string(n) +
                  " columns");
    }
    has_residual_ = check_residual(where, inputs, outputs[0].dims);
    const auto as = cpu::broadcast_strides(a_batch, batch), bs = cpu::broadcast_strides(b_batch, batch);
    const int64_t count = batch.volume();
    a_off_.resize(static_cast<size_t>(count));
    b_off_.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      a_off_[static_cast<size_t>(i)] = cpu::broadcast_offset(i, batch, as) * m * k;
      b_off_[static_cast<size_t>(i)] = cpu::broadcast_offset(i, batch, bs) * k * n;
    }
    s_ = make_sizes(m, k, n, 1);
    s_.groups = 1;
    items_ = count * s_.chunks;
    threads_ = static_cast<int>(std::clamp<int64_t>(items_, 1, std::max(1, num_threads)));
    // Small products on one thread: the team's start costs more than they take.
    if (count * m * k * n < kBatchedOneThreadMacs) threads_ = 1;
  }

  const char* tactic() const { return avx512_ ? kTacticBatched512 : kTacticBatched; }

  std::unique_ptr<Kernel> another_instance() const override { return std::make_unique<MatmulBatched>(*this); }

  // One slot of packed panels per thread.
  size_t workspace_size() const override { return static_cast<size_t>(threads_) * slot_floats() * sizeof(float); }

  void execute(const KernelContext& ctx) override {
    const size_t need = workspace_size();
    if (ctx.workspace_size < need || (need && !ctx.workspace)) {
      throw Error(std::string("MatrixMultiply ") + tactic() + ": workspace of " + std::to_string(ctx.workspace_size) +
                  " bytes, " + std::to_string(need) + " needed");
    }
    if (items_ == 0 || s_.n == 0) return;
    const float* a = ctx.inputs.at(0).as<const float>();
    const float* b = ctx.inputs.at(1).as<const float>();
    const float* bias = has_bias_ ? ctx.inputs.at(2).as<const float>() : nullptr;
    const float* residual = has_residual_ ? ctx.inputs.at(3).as<const float>() : nullptr;
    float* y = ctx.outputs.at(0).as<float>();
    auto* slots = static_cast<float*>(ctx.workspace);
#if KILN_PACKED_X86
#pragma omp parallel num_threads(threads_)
    {
      const int64_t t = omp_get_num_threads(), id = omp_get_thread_num();
      float* slot = slots + id * static_cast<int64_t>(slot_floats());
      int64_t packed_matrix = -1;
      for (int64_t item = items_ * id / t; item < items_ * (id + 1) / t; ++item) {
        const int64_t matrix = item / s_.chunks, chunk = item % s_.chunks;
        if (matrix != packed_matrix) {
          pack_b_into(b + b_off_[static_cast<size_t>(matrix)], s_.k, s_.n, transpose_b_, slot);
          packed_matrix = matrix;
        }
        const int64_t r0 = chunk * kChunkRows, r1 = std::min(s_.m, r0 + kChunkRows);
        const float* am = a + a_off_[static_cast<size_t>(matrix)];
        float* ym = y + matrix * s_.m * s_.n;
        const float* rm = residual ? residual + matrix * s_.m * s_.n : nullptr;
        if (avx512_) {
          run_item512(s_, am, slot, bias, rm, post_, ym, r0, r1, 0, s_.panels);
        } else {
          run_item(s_, am, slot, bias, rm, post_, ym, r0, r1, 0, s_.panels);
        }
      }
    }
#else
    (void)a, (void)b, (void)bias, (void)residual, (void)y, (void)slots;
    throw Error("MatrixMultiply batched_avx2: not built for this processor");
#endif
  }

 private:
  static constexpr int64_t kBatchedOneThreadMacs = 1 << 16;
  static Dims leading(const Dims& d) {
    Dims out;
    for (int i = 0; i + 2 < d.rank(); ++i) out.push_back(d[i]);
    return out;
  }
  size_t slot_floats() const { return static_cast<size_t>(s_.panels * s_.k * kPanel); }

  bool transpose_b_ = false;
  bool avx512_ = false;
  PostOp post_;
  bool has_bias_ = false;
  bool has_residual_ = false;
  int threads_ = 1;
  Sizes s_;
  int64_t items_ = 0;                   // batch matrices x row chunks
  std::vector<int64_t> a_off_, b_off_;  // each batch matrix's first element in a and b
};

// Float32 a [..., M, K] (not transposed) and b [..., K, N] or [..., N, K] (rank >= 2 each, b not
// a constant 2-D matrix: packed_avx2 takes those), K up to kMaxK, a rank-1 bias or none, an
// activation activate() computes, linear formats, AVX2 + FMA.
bool supports_batched(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!product_inputs_ok(layer, inputs)) return false;
  const Dims& a = inputs[0].dims;
  const Dims& b = inputs[1].dims;
  if (a.rank() < 2 || b.rank() < 2) return false;
  if (b.rank() == 2 && inputs[1].value) return false;
  const int64_t k = a[a.rank() - 1];
  return k < 0 || (k >= 1 && k <= kMaxK);  // dynamic: prepare() checks
}

bool supports_batched512(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return has_avx512f() && supports_batched(layer, inputs);
}

// "pointwise_packed" (priority 108) of Convolution: a 1x1 convolution (stride 1, no padding,
// ungrouped) over few pixels, such as a squeeze-excitation block's two fully connected layers on
// a globally pooled [N, C, 1, 1] tensor, is the product y [pixels, K] = x [pixels, C] . w^T with
// x and y channels-last (for 1x1 images also linear: the same memory). oneDNN spends 4-8 us
// per call on these whatever their size (MobileNetV3-small has 18 of them); here the weights are
// packed once like packed_avx2's b and the register blocks above run the product, with bias and
// activation in the epilogue, on one thread where the product is small.
//
// "pointwise_gemm_avx512" (priority 99) and "pointwise_gemm_avx2" (98): the same product for 1x1
// convolutions over more pixels (channels-last x and y are the row-major [pixels, C] and
// [pixels, K] matrices), with packed_avx512's 8 x 32 register block where there is AVX-512F.
// For builds without oneDNN, where 1x1 convolutions over more than 64 pixels had only the
// reference kernel (SqueezeNet's 128 -> 16 squeeze layer at batch 8: about 270 ms). With oneDNN
// built in they decline: as products in a one-layer model they beat oneDNN's 1x1 kernels (that
// layer 0.99 against 1.16 ms, bench/cpu_matmul_layers.py), and the builder's timing then chose
// them, but inside the models they were slower (that layer 1.92 against 1.63 ms in SqueezeNet,
// TinyYolo's 64 -> 255 detection layer 0.57 against 0.50 ms; Zen 4, 1 thread).
constexpr const char* kTacticPointwise = "pointwise_packed";
constexpr const char* kTacticPointwiseGemm512 = "pointwise_gemm_avx512";
constexpr const char* kTacticPointwiseGemm = "pointwise_gemm_avx2";
constexpr int64_t kPointwiseMaxPixels = 64;           // beyond: the pointwise_gemm tactics
constexpr int64_t kPointwiseOneThreadMacs = 1 << 16;  // smaller products: one thread

class ConvPointwisePacked : public Kernel {
 public:
  ConvPointwisePacked(const PostOp& post, const char* tactic, bool avx512)
      : post_(post), tactic_(tactic), avx512_(avx512) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (Convolution) " + tactic_ + ": ";
    if (inputs.size() < 2 || outputs.empty()) throw Error(where + "expects inputs x, w and output y");
    const Dims& x = inputs[0].dims;
    const Dims& w = inputs[1].dims;
    if (x.rank() != 4 || w.rank() != 4 || w[1] != x[1] || w[2] != 1 || w[3] != 1) {
      throw Error(where + "x " + x.to_string() + " and w " + w.to_string() + " are not a 1x1 convolution");
    }
    const int64_t pixels = x[0] * x[2] * x[3], c = x[1], k = w[0];
    const Dims want{x[0], k, x[2], x[3]};
    if (outputs[0].dims != want) {
      throw Error(where + "output dims " + outputs[0].dims.to_string() + " differ from the convolution's " +
                  want.to_string());
    }
    const bool small = pixels * c * k < kPointwiseOneThreadMacs;
    s_ = make_sizes(pixels, c, k, small ? 1 : std::max(1, num_threads));
    threads_ = small ? 1 : std::max(1, num_threads);
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    if (!packed_) {
      const HostTensor* wv = inputs[1].value;
      if (!wv || wv->type() != DataType::kFloat32 || wv->count() != k * c) {
        throw Error(where + "the weights must be constant float32 (the builder chooses this kernel only then)");
      }
      packed_ = std::make_shared<const std::vector<float>>(pack_b(static_cast<const float*>(wv->data()), c, k, true));
    }
  }

  std::unique_ptr<Kernel> another_instance() const override { return std::make_unique<ConvPointwisePacked>(*this); }

  void execute(const KernelContext& ctx) override {
    if (!packed_) throw Error(std::string("Convolution ") + tactic_ + ": execute() before prepare()");
    if (s_.m == 0 || s_.n == 0) return;
    const float* bias = has_bias_ ? ctx.inputs.at(2).as<const float>() : nullptr;
    run_packed(s_, ctx.inputs.at(0).as<const float>(), packed_->data(), bias, nullptr, post_,
               ctx.outputs.at(0).as<float>(), threads_, avx512_);
  }

 private:
  PostOp post_;
  const char* tactic_ = kTacticPointwise;
  bool avx512_ = false;  // the 8 x 32 register block (pointwise_gemm_avx512)
  bool has_bias_ = false;
  int threads_ = 1;
  Sizes s_;
  std::shared_ptr<const std::vector<float>> packed_;  // shared by the instances for other shapes
};

// A float32 1x1 convolution, stride 1, no padding, undilated, ungrouped, with constant weights
// (C up to kMaxK), a rank-1 bias or none, no residual, an activation activate() computes, x and y
// channels-last or of 1x1 images, on a processor with AVX2 + FMA. `small`: static dims with at
// most kPointwiseMaxPixels pixels (pointwise_packed); otherwise more pixels, or a dynamic batch
// (the pointwise_gemm tactics; C, H and W static).
bool supports_pointwise_common(const Layer& layer, const std::vector<TensorDesc>& inputs, bool small) {
  if (!KILN_PACKED_X86 || !cpu::has_avx2_fma()) return false;
  if (inputs.size() < 2 || inputs.size() > 4 || !inputs[0].present || !inputs[1].present) return false;
  if (inputs.size() > 3 && inputs[3].present) return false;
  for (const TensorDesc& d : inputs) {
    if (d.present && d.type != DataType::kFloat32) return false;
  }
  const ConvParams& p = params_of<ConvParams>(layer);
  if (p.deconv || p.group != 1 || !cpu::activation_vectorized(p.post)) return false;
  const Dims& x = inputs[0].dims;
  const Dims& w = inputs[1].dims;
  if (x.rank() != 4 || w.rank() != 4 || w.is_dynamic()) return false;
  if (x[1] < 0 || x[2] < 0 || x[3] < 0 || (small && x[0] < 0)) return false;
  if (w[1] != x[1] || w[2] != 1 || w[3] != 1 || x[1] < 1 || x[1] > kMaxK || w[0] < 1) return false;
  ConvGeometry g;
  try {
    g = conv_geometry(p, x, w);
  } catch (const Error&) {
    return false;
  }
  for (int i = 0; i < g.spatial_rank; ++i) {
    const auto u = static_cast<size_t>(i);
    if (g.stride[u] != 1 || g.pad_begin[u] != 0 || g.pad_end[u] != 0) return false;
  }
  const bool few_pixels = x[0] >= 0 && x[0] * x[2] * x[3] <= kPointwiseMaxPixels;
  if (small != few_pixels) return false;
  // Channels-last memory is [pixels][C]; a 1x1 image is that in either format.
  const bool one_pixel_images = x[2] * x[3] == 1;
  const auto format_ok = [&](TensorFormat f) { return f == TensorFormat::kChannelsLast || one_pixel_images; };
  if (!format_ok(inputs[0].format) || inputs[1].format != TensorFormat::kLinear) return false;
  if (layer.num_outputs() < 1 || !format_ok(layer.output(0)->format())) return false;
  if (inputs.size() > 2 && inputs[2].present && (inputs[2].dims.rank() != 1 || inputs[2].dims[0] != w[0])) {
    return false;
  }
  const HostTensor* wv = inputs[1].value;
  return wv && wv->type() == DataType::kFloat32 && wv->count() == w[0] * w[1];
}

bool supports_pointwise(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return supports_pointwise_common(layer, inputs, true);
}

bool supports_pointwise_gemm(const Layer& layer, const std::vector<TensorDesc>& inputs) {
#if KILN_HAVE_ONEDNN
  (void)layer, (void)inputs;
  return false;  // oneDNN's 1x1 kernels (see above)
#else
  return supports_pointwise_common(layer, inputs, false);
#endif
}

bool supports_pointwise_gemm512(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return has_avx512f() && supports_pointwise_gemm(layer, inputs);
}

}  // namespace

bool supports_packed512(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return has_avx512f() && supports_packed(layer, inputs);
}

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerMatrixMultiply, kTactic, 104, supports_packed, [](const Layer& layer) {
      return std::make_unique<MatmulPacked>(params_of<MatMulParams>(layer), read_post_op(layer), false);
    }});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerMatrixMultiply, kTactic512, 106, supports_packed512, [](const Layer& layer) {
      return std::make_unique<MatmulPacked>(params_of<MatMulParams>(layer), read_post_op(layer), true);
    }});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerMatrixMultiply, kTacticBatched512, 97, supports_batched512, [](const Layer& layer) {
      return std::make_unique<MatmulBatched>(params_of<MatMulParams>(layer), read_post_op(layer), true);
    }});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerMatrixMultiply, kTacticBatched, 96, supports_batched, [](const Layer& layer) {
      return std::make_unique<MatmulBatched>(params_of<MatMulParams>(layer), read_post_op(layer), false);
    }});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTacticPointwise, 108, supports_pointwise, [](const Layer& layer) {
      return std::make_unique<ConvPointwisePacked>(params_of<ConvParams>(layer).post, kTacticPointwise, false);
    }});

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerConvolution, kTacticPointwiseGemm512, 99,
                                 supports_pointwise_gemm512, [](const Layer& layer) {
                                   return std::make_unique<ConvPointwisePacked>(params_of<ConvParams>(layer).post,
                                                                                kTacticPointwiseGemm512, true);
                                 }});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTacticPointwiseGemm, 98, supports_pointwise_gemm, [](const Layer& layer) {
      return std::make_unique<ConvPointwisePacked>(params_of<ConvParams>(layer).post, kTacticPointwiseGemm, false);
    }});

}  // namespace kiln
