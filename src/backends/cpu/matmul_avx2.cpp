// "packed_avx2" (priority 104) of MatrixMultiply: y = a . b with b a constant matrix (the weights
// of a fully connected layer), float32, row-major, AVX2 + FMA (chosen at run time; supports()
// declines elsewhere).
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
#include <omp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/gemm_avx2.h"
#include "src/backends/kernel.h"
#include "src/ir/matmul_params.h"
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
constexpr int64_t kPanel = 16;      // columns per packed panel of b
constexpr int64_t kChunkRows = 48;  // rows per work item
constexpr int64_t kMaxK = 4096;     // a block's rows and a panel: 6 x 16 KB + 256 KB at most
constexpr int64_t kMaxPackedBytes = int64_t{256} << 20;

// The product's sizes for one shape of a.
struct Sizes {
  int64_t m = 0, k = 0, n = 0, panels = 0, chunks = 0, groups = 1;
};

// b's dims as [K, N] (transposed: stored [N, K]); false when b is not a matrix.
bool b_sizes(const Dims& b, bool transpose_b, int64_t* k, int64_t* n) {
  if (b.rank() != 2 || b.is_dynamic()) return false;
  *k = transpose_b ? b[1] : b[0];
  *n = transpose_b ? b[0] : b[1];
  return true;
}

// b -> [N/16][K][16], zero beyond N.
std::vector<float> pack_b(const float* b, int64_t k, int64_t n, bool transpose_b) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  std::vector<float> out(static_cast<size_t>(panels * k * kPanel), 0.0f);
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      out[static_cast<size_t>(((c / kPanel) * k + r) * kPanel + c % kPanel)] =
          transpose_b ? b[c * k + r] : b[r * n + c];
    }
  }
  return out;
}

#if KILN_PACKED_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// Rows [r0, r1) x panels [p0, p1) of y = a . b.
void run_item(const Sizes& s, const float* a, const float* packed, float* y, int64_t r0, int64_t r1, int64_t p0,
              int64_t p1) {
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
  }
}

#pragma GCC pop_options
#endif

void run_packed(const Sizes& s, const float* a, const float* packed, float* y, int threads) {
#if KILN_PACKED_X86
  const int64_t items = s.chunks * s.groups;
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_num_threads(), id = omp_get_thread_num();
    for (int64_t item = items * id / t; item < items * (id + 1) / t; ++item) {
      const int64_t chunk = item / s.groups, group = item % s.groups;
      const int64_t r0 = chunk * kChunkRows, r1 = std::min(s.m, r0 + kChunkRows);
      run_item(s, a, packed, y, r0, r1, s.panels * group / s.groups, s.panels * (group + 1) / s.groups);
    }
  }
#else
  (void)s, (void)a, (void)packed, (void)y, (void)threads;
  throw Error("MatrixMultiply packed_avx2: not built for this processor");
#endif
}

class MatmulPacked : public Kernel {
 public:
  explicit MatmulPacked(const MatMulParams& p) : transpose_b_(p.transpose_b) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (MatrixMultiply) " + kTactic + ": ";
    if (inputs.size() != 2 || outputs.empty()) throw Error(where + "expects inputs a, b and output y");
    threads_ = std::max(1, num_threads);
    int64_t k = 0, n = 0;
    if (!b_sizes(inputs[1].dims, transpose_b_, &k, &n) || k < 1) throw Error(where + "b must be a non-empty matrix");
    const Dims& ad = inputs[0].dims;
    if (ad.rank() < 1 || ad[ad.rank() - 1] != k) {
      throw Error(where + "a " + ad.to_string() + " does not end in b's " + std::to_string(k) + " rows");
    }
    s_.k = k;
    s_.n = n;
    s_.m = ad.volume() / k;  // k >= 1: supports() declines empty products
    s_.panels = (n + kPanel - 1) / kPanel;
    s_.chunks = (s_.m + kChunkRows - 1) / kChunkRows;
    // Few chunks: split the panels too, so that every thread has about four items.
    const int64_t want = 4 * threads_;
    s_.groups = s_.chunks >= want ? 1
                                  : std::clamp<int64_t>((want + s_.chunks - 1) / std::max<int64_t>(1, s_.chunks), 1,
                                                        std::max<int64_t>(1, s_.panels));
    if (outputs[0].dims.volume() != s_.m * n) {
      throw Error(where + "output dims " + outputs[0].dims.to_string() + " hold " +
                  std::to_string(outputs[0].dims.volume()) + " elements, the product " + std::to_string(s_.m * n));
    }
    if (!packed_) {
      const HostTensor* b = inputs[1].value;
      if (!b || b->type() != DataType::kFloat32 || b->count() != k * n) {
        throw Error(where + "b must be a constant float32 matrix (the builder chooses this kernel only then)");
      }
      packed_ =
          std::make_shared<const std::vector<float>>(pack_b(static_cast<const float*>(b->data()), k, n, transpose_b_));
    }
  }

  // The instances for other shapes of a (a dynamic batch) share the packed b.
  std::unique_ptr<Kernel> another_instance() const override {
    auto k = std::make_unique<MatmulPacked>(*this);
    return k;
  }

  void execute(const KernelContext& ctx) override {
    if (!packed_) throw Error(std::string("MatrixMultiply ") + kTactic + ": execute() before prepare()");
    float* y = ctx.outputs.at(0).as<float>();
    if (s_.m == 0) return;
    run_packed(s_, ctx.inputs.at(0).as<const float>(), packed_->data(), y, threads_);
  }

 private:
  bool transpose_b_ = false;
  int threads_ = 1;
  Sizes s_;
  // b packed once, at the first prepare() of the first instance (b is constant: every shape of a
  // uses the same panels, and another_instance() shares them).
  std::shared_ptr<const std::vector<float>> packed_;
};

// A constant float32 matrix b (at most kMaxK rows of the product and 256 MB packed), a float32 a
// not transposed, both row-major, on a processor with AVX2 + FMA.
bool supports_packed(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!KILN_PACKED_X86 || !cpu::has_avx2_fma()) return false;
  if (inputs.size() != 2 || !inputs[0].present || !inputs[1].present) return false;
  for (const TensorDesc& d : inputs) {
    if (d.type != DataType::kFloat32 || d.format != TensorFormat::kLinear) return false;
  }
  if (layer.num_outputs() < 1 || layer.output(0)->format() != TensorFormat::kLinear) return false;
  const MatMulParams& p = params_of<MatMulParams>(layer);
  if (p.transpose_a) return false;
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

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerMatrixMultiply, kTactic, 104, supports_packed,
    [](const Layer& layer) { return std::make_unique<MatmulPacked>(params_of<MatMulParams>(layer)); }});

}  // namespace kiln
