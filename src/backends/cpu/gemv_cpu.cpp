// CPU "gemv" tactic of Gemm (priority 110, before oneDNN's matmul where it applies):
// y = act(A B' + c) for at most 4 rows of A (any number in builds without oneDNN, in passes of
// 4 rows over the weights), with B a constant weight matrix, c absent or a
// constant per-column bias and alpha = beta = 1: classifier heads at small batch (MobileNetV3's
// 576x1024 and 1024x1000 fully connected layers, ResNet-50's 2048x1000). There the product is a
// matrix-vector product whose cost is streaming the weights once; oneDNN 2.6's matmul (brgemm on
// blocked weights) moves them at 14-17 GB/s on this project's AVX-512 machine at 1 thread.
//
// The weights are packed once per prepare() as N rows of K floats (B' row-major); each output is
// the dot product of an A row with a weight row in sixteen float32 partial sums, all A rows at
// once so the weights are read once. The summation order differs from oneDNN's, so results agree
// to rounding, not bit for bit. Threads split the N outputs. The fused activation is applied per
// output (activation_math.h). Layout: kLinear, contiguous.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

constexpr int64_t kMaxRows = 4;  // rows of A per pass over the weights
// Rows the tactic takes: 4 where oneDNN is built in (its matmul does better on more); without
// oneDNN any number, in passes of kMaxRows over the weights, since the alternative there is the
// reference kernel (MobileNetV3's two classifier layers at batch 8: 10.5 of its 25.7 ms).
#if KILN_HAVE_ONEDNN
constexpr int64_t kMaxRowsTaken = kMaxRows;
#else
constexpr int64_t kMaxRowsTaken = std::numeric_limits<int64_t>::max();
#endif

// out[m * ldo + n] = sum_k a[m * K + k] * w[n * K + k] + bias[n], for n in [n0, n1), M rows.
#define KILN_GEMV_ROWS(suffix)                                                                                \
  template <int M>                                                                                            \
  void gemv_rows_##suffix(const float* __restrict a, const float* __restrict w, const float* __restrict bias, \
                          float* __restrict out, int64_t K, int64_t ldo, int64_t n0, int64_t n1) {            \
    const int64_t k16 = K / 16 * 16;                                                                          \
    for (int64_t n = n0; n < n1; ++n) {                                                                       \
      const float* __restrict row = w + n * K;                                                                \
      float acc[M][16] = {};                                                                                  \
      for (int64_t k = 0; k < k16; k += 16) {                                                                 \
        for (int m = 0; m < M; ++m) {                                                                         \
          const float* __restrict x = a + m * K + k;                                                          \
          for (int l = 0; l < 16; ++l) acc[m][l] += x[l] * row[k + l];                                        \
        }                                                                                                     \
      }                                                                                                       \
      for (int m = 0; m < M; ++m) {                                                                           \
        float s = 0.0f;                                                                                       \
        for (int l = 0; l < 16; ++l) s += acc[m][l];                                                          \
        for (int64_t k = k16; k < K; ++k) s += a[m * K + k] * row[k];                                         \
        out[m * ldo + n] = s + bias[n];                                                                       \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  void gemv_##suffix(int64_t rows, const float* a, const float* w, const float* bias, float* out, int64_t K,  \
                     int64_t ldo, int64_t n0, int64_t n1) {                                                   \
    switch (rows) {                                                                                           \
      case 1:                                                                                                 \
        return gemv_rows_##suffix<1>(a, w, bias, out, K, ldo, n0, n1);                                        \
      case 2:                                                                                                 \
        return gemv_rows_##suffix<2>(a, w, bias, out, K, ldo, n0, n1);                                        \
      case 3:                                                                                                 \
        return gemv_rows_##suffix<3>(a, w, bias, out, K, ldo, n0, n1);                                        \
      default:                                                                                                \
        return gemv_rows_##suffix<4>(a, w, bias, out, K, ldo, n0, n1);                                        \
    }                                                                                                         \
  }
KILN_GEMV_ROWS(baseline)
#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN
KILN_GEMV_ROWS(avx2)
KILN_ISA_END
#else
void gemv_avx2(int64_t rows, const float* a, const float* w, const float* bias, float* out, int64_t K, int64_t ldo,
               int64_t n0, int64_t n1) {
  gemv_baseline(rows, a, w, bias, out, K, ldo, n0, n1);
}
#endif
#undef KILN_GEMV_ROWS

// The product's extents, or false (with the reason) when the tactic does not take the layer.
struct GemvShape {
  int64_t M = 0, K = 0, N = 0;
};

// `max_rows`: the most rows taken (supports(): kMaxRowsTaken; prepare() computes any number).
bool gemv_shape(const Layer& layer, const std::vector<TensorDesc>& inputs, GemvShape* s, std::string* why,
                int64_t max_rows = kMaxRowsTaken) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (inputs.size() < 2 || inputs.size() > 3 || !inputs[0].present || !inputs[1].present) return no("inputs");
  for (const TensorDesc& t : inputs) {
    if (!t.present) continue;
    if (t.type != DataType::kFloat32 || t.format != TensorFormat::kLinear) return no("float32, linear only");
    if (t.dims.is_dynamic()) return no("dynamic dims");
  }
  const GemmParams& p = params_of<GemmParams>(layer);
  if (p.alpha != 1.0) return no("alpha != 1");
  const Dims& a = inputs[0].dims;
  const Dims& b = inputs[1].dims;
  if (a.rank() != 2 || b.rank() != 2 || !inputs[1].value) return no("a 2-D input and constant 2-D weights");
  s->M = p.trans_a ? a[1] : a[0];
  s->K = p.trans_a ? a[0] : a[1];
  s->N = p.trans_b ? b[0] : b[1];
  if ((p.trans_b ? b[1] : b[0]) != s->K) return no("inner extents differ");
  if (s->M < 1 || s->M > max_rows || s->K < 1 || s->N < 1) return no("more than 4 rows");
  if (inputs.size() == 3 && inputs[2].present) {
    const TensorDesc& c = inputs[2];
    const bool per_column =
        (c.dims.rank() == 1 && c.dims[0] == s->N) || (c.dims.rank() == 2 && c.dims[0] == 1 && c.dims[1] == s->N);
    if (!per_column || !c.value || p.beta != 1.0) return no("C is not a constant per-column bias with beta 1");
  }
  try {
    (void)read_post_op(layer);
  } catch (const std::exception&) {
    return no("unknown activation");
  }
  return true;
}

class GemvCpu : public Kernel {
 public:
  explicit GemvCpu(const Layer& layer) : post_(read_post_op(layer)), trans_a_(params_of<GemmParams>(layer).trans_a) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    std::string why;
    if (!gemv_shape(layer, inputs, &shape_, &why, std::numeric_limits<int64_t>::max())) {
      throw Error("Gemm gemv: layer '" + layer.name() + "' is not a small-batch product with constant weights (" + why +
                  ")");
    }
    if (trans_a_) a_rows_.resize(static_cast<size_t>(shape_.M * shape_.K));
    const HostTensor* b = inputs[1].value;
    if (b == packed_from_ && weights_.size() == static_cast<size_t>(shape_.N * shape_.K)) return;
    const bool trans_b = params_of<GemmParams>(layer).trans_b;
    const float* bv = b->as<float>();
    weights_.resize(static_cast<size_t>(shape_.N * shape_.K));
    for (int64_t n = 0; n < shape_.N; ++n) {
      for (int64_t k = 0; k < shape_.K; ++k) {
        weights_[static_cast<size_t>(n * shape_.K + k)] = trans_b ? bv[n * shape_.K + k] : bv[k * shape_.N + n];
      }
    }
    bias_.assign(static_cast<size_t>(shape_.N), 0.0f);
    if (inputs.size() == 3 && inputs[2].present) {
      std::memcpy(bias_.data(), inputs[2].value->data(), static_cast<size_t>(shape_.N) * sizeof(float));
    }
    packed_from_ = b;
  }

  void execute(const KernelContext& ctx) override {
    const TensorView& a = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    const int64_t M = trans_a_ ? a.dims[1] : a.dims[0];
    if (weights_.empty() || M != shape_.M || y.count() != M * shape_.N) {
      throw Error("Gemm gemv: execute() with " + a.dims.to_string() + " after prepare() for " +
                  std::to_string(shape_.M) + " rows");
    }
    const int64_t K = shape_.K, N = shape_.N;
    const float* av = a.as<const float>();
    if (trans_a_) {  // A is K x M: the rows of A' gathered once (M x K floats, sized by prepare())
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < K; ++k) a_rows_[static_cast<size_t>(m * K + k)] = av[k * M + m];
      }
      av = a_rows_.data();
    }
    float* out = y.as<float>();
    const auto gemv = cpu::has_avx2_fma() ? &gemv_avx2 : &gemv_baseline;
    cpu::parallel_for(
        N, ctx.num_threads,
        [&](int64_t n0, int64_t n1) {
          for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
            gemv(std::min(kMaxRows, M - m0), av + m0 * K, weights_.data(), bias_.data(), out + m0 * N, K, N, n0, n1);
          }
          if (post_.enabled) {
            for (int64_t m = 0; m < M; ++m) {
              for (int64_t n = n0; n < n1; ++n) out[m * N + n] = post_.apply(out[m * N + n]);
            }
          }
        },
        std::max<int64_t>(16, (int64_t{1} << 16) / K));
  }

 private:
  PostOp post_;
  bool trans_a_ = false;
  GemvShape shape_;
  std::vector<float> weights_, bias_, a_rows_;
  const HostTensor* packed_from_ = nullptr;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerGemm, "gemv", 110,
                                 [](const Layer& layer, const std::vector<TensorDesc>& inputs) {
                                   GemvShape shape;
                                   return gemv_shape(layer, inputs, &shape, nullptr);
                                 },
                                 [](const Layer& layer) { return std::make_unique<GemvCpu>(layer); }});

}  // namespace kiln
