// "igemm_avx2" (priority 104): kiln's own direct convolution for the CPU as an indirect GEMM,
// float32, channels-last (NHWC) tensors, AVX2 + FMA (chosen at run time; supports() declines
// elsewhere).
//
// A 2-D convolution of any kernel size, stride, dilation and padding (one group) is, per output
// pixel p and output channel k, y[p][k] = sum over taps t = (kh, kw) and channels c of
// x[pixel under tap t of p][c] * w[k][c][kh][kw]. Channels-last memory keeps each pixel's C
// channels contiguous, so each tap is a GEMM row of C floats read where it lies (no im2col copy),
// and with unit horizontal dilation a kernel row's kw taps are one row of kw x C floats. The
// register block of gemm_avx2.h takes one row pointer per output pixel and GEMM row (an
// indirection table built per block of pixels; padding rows point at zeros, kernel rows over the
// left or right edge at a copy with zeros outside) and sums the products of 6 pixels x 16 output
// channels in registers. The weights are packed once into panels of 16 output channels,
// [K/16][taps][C][16] (the same memory as [K/16][kh][kw x C][16]).
//
// Work: blocks of output pixels whose input rows stay in a core's L2 cache, each running every
// panel (the block's input rows are read from cache for each panel); blocks and, where there are
// few, panels are shared among the context's threads. Bias, the residual input and the fused
// activation are applied to the registers before the one store.
//
// Where it is chosen (the CPU builder does not time kernels): under winograd_avx2 (3x3 stride 1
// layers with enough tiles and channels go there), over oneDNN's direct kernels for the layers
// where per-layer profiles found it faster (supports_igemm).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/isa_region.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/conv_channels_last.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/gemm_avx2.h"
#include "src/backends/kernel.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_IGEMM_X86 1
#else
#define KILN_IGEMM_X86 0
#endif

namespace kiln {
namespace {

constexpr const char* kTactic = "igemm_avx2";
constexpr int64_t kPanel = 16;  // output channels per packed weight panel
constexpr int64_t kRows = 6;    // output pixels per register block
// Input bytes a block of output pixels may read (its share of a core's L2 cache).
constexpr int64_t kBlockInputBytes = int64_t{256} << 10;
constexpr int64_t kMaxBlockPixels = 384;
constexpr int64_t kMaxKernelRows = 32;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
size_t align64(size_t v) { return (v + 63) / 64 * 64; }

// Everything one input shape needs.
struct IgemmShape : cpu::Conv2dSizes {
  int64_t taps = 0, pixels = 0, kp = 0, panels = 0;
  // GEMM rows per output pixel and their length: with unit horizontal dilation a kernel row's kw
  // taps are kw x C contiguous floats of the input (one row of kw * C); otherwise one per tap.
  int64_t rows = 0, kc = 0;
  int64_t edge_cols = 0;  // output columns whose kernel rows reach over the left or right edge
  int64_t edge_rows = 0;  // per thread: edge kernel rows a block may copy (with zeros) to scratch
  int64_t block = 0;      // output pixels per block (a multiple of kRows)
  int64_t blocks = 0;     // blocks in all
  int64_t groups = 1;     // panel groups per block (work items = blocks x groups)
  size_t table_bytes = 0, zero_bytes = 0, edge_bytes = 0, w_bytes = 0;
};

// w [K, C, KH, KW] -> [K/16][taps][C][16], zero beyond K.
void pack_weights(const float* w, const IgemmShape& s, float* out) {
  std::memset(out, 0, s.w_bytes);
  for (int64_t k = 0; k < s.k; ++k) {
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t t = 0; t < s.taps; ++t) {
        out[((k / kPanel * s.taps + t) * s.c + c) * kPanel + k % kPanel] = w[(k * s.c + c) * s.taps + t];
      }
    }
  }
}

#if KILN_IGEMM_X86
KILN_ISA_AVX2_BEGIN

using cpu::avx2::activate;
using cpu::avx2::lane_mask;
static_assert(kPanel == cpu::avx2::kPanel, "the packed panels are the register block's");

// The row pointers of output pixels [p0, p0 + count) (count <= block), kRows per GEMM row per
// group of kRows pixels: table[(g * rows + r) * kRows + i] for pixel p0 + g * kRows + i. Kernel rows
// over the left or right edge are copied, with zeros outside, to `edge` (edge_rows x kc floats).
void build_table(const IgemmShape& s, const float* x, const float* zeros, int64_t p0, int64_t count,
                 const float** table, float* edge) {
  // Locals, not the shape's fields: the stores into the table would make the compiler reload them.
  const int64_t h = s.h, w = s.w, c = s.c, kh = s.kh, kw = s.kw, ow = s.ow, oh = s.oh, rows = s.rows;
  const int64_t kc = s.kc, sh = s.sh, sw = s.sw, dh = s.dh, dw = s.dw, pad_t = s.pad_t, pad_l = s.pad_l;
  const bool merged = rows == kh;      // one GEMM row per kernel row
  const float* lines[kMaxKernelRows];  // per kernel row: the input line it reads, null in the padding
  // The pixel's coordinates, advanced with it (a division per pixel cost as much as the products of
  // a 16-channel layer).
  int64_t ox = p0 % ow, oy = p0 / ow % oh, n = p0 / (ow * oh);
  for (int64_t j = 0; j < count; ++j, ++ox) {
    if (ox == ow) {
      ox = 0;
      if (++oy == oh) oy = 0, ++n;
    }
    if (j == 0 || ox == 0) {
      for (int64_t a = 0; a < kh; ++a) {
        const int64_t iy = oy * sh - pad_t + a * dh;
        lines[a] = iy >= 0 && iy < h ? x + (n * h + iy) * w * c : nullptr;
      }
    }
    const float** at = table + (j / kRows) * rows * kRows + j % kRows;
    const int64_t ix0 = ox * sw - pad_l;
    if (merged && ix0 >= 0 && ix0 + kw <= w) {  // inside: kw x C floats where they lie
      for (int64_t a = 0; a < kh; ++a) at[a * kRows] = lines[a] ? lines[a] + ix0 * c : zeros;
      continue;
    }
    for (int64_t a = 0; a < kh; ++a) {
      const float* line = lines[a];
      if (!merged) {
        for (int64_t b = 0; b < kw; ++b) {
          const int64_t ix = ix0 + b * dw;
          at[(a * kw + b) * kRows] = line && ix >= 0 && ix < w ? line + ix * c : zeros;
        }
      } else if (!line) {
        at[a * kRows] = zeros;
      } else {  // over the left or right edge: a copy with zeros outside
        for (int64_t b = 0; b < kw; ++b) {
          const int64_t ix = ix0 + b;
          if (ix >= 0 && ix < w) {
            std::memcpy(edge + b * c, line + ix * c, sizeof(float) * static_cast<size_t>(c));
          } else {
            std::memset(edge + b * c, 0, sizeof(float) * static_cast<size_t>(c));
          }
        }
        at[a * kRows] = edge;
        edge += kc;
      }
    }
  }
}

// Output pixels [p0, p0 + count) x output channels of panels [g0, g1); the activation's kind a
// template argument (cpu::with_activation_kind), not read per register.
template <bool kOn, ActivationType K>
void run_block_as(const IgemmShape& s, const float** table, const float* wp, const float* bias, const float* residual,
                  float* y, const PostOp& runtime_post, int64_t p0, int64_t count, int64_t g0, int64_t g1) {
  const PostOp post{kOn, K, runtime_post.alpha, runtime_post.beta};
  for (int64_t panel = g0; panel < g1; ++panel) {
    const int64_t k0 = panel * kPanel;
    const int64_t lanes = std::min(kPanel, s.k - k0);
    const __m256i mlo = lane_mask(std::min<int64_t>(8, lanes)), mhi = lane_mask(std::max<int64_t>(0, lanes - 8));
    const __m256 blo = !bias ? _mm256_setzero_ps() : _mm256_maskload_ps(bias + k0, mlo);
    const __m256 bhi = !bias ? _mm256_setzero_ps() : _mm256_maskload_ps(bias + k0 + 8, mhi);
    const float* b = wp + panel * s.rows * s.kc * kPanel;
    for (int64_t j = 0; j < count; j += kRows) {
      float* yb = y + (p0 + j) * s.k + k0;
      const float* rb = residual ? residual + (p0 + j) * s.k + k0 : nullptr;
      // Inlined into the register block (a call per row cost 18% of a 16-channel layer's time).
      auto store = [&](int i, __m256 lo, __m256 hi) __attribute__((always_inline)) {
        lo = _mm256_add_ps(lo, blo);
        hi = _mm256_add_ps(hi, bhi);
        if (lanes == kPanel) {
          if (rb) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(rb + i * s.k));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(rb + i * s.k + 8));
          }
          _mm256_storeu_ps(yb + i * s.k, activate(lo, post));
          _mm256_storeu_ps(yb + i * s.k + 8, activate(hi, post));
        } else {
          if (rb) {
            lo = _mm256_add_ps(lo, _mm256_maskload_ps(rb + i * s.k, mlo));
            hi = _mm256_add_ps(hi, _mm256_maskload_ps(rb + i * s.k + 8, mhi));
          }
          _mm256_maskstore_ps(yb + i * s.k, mlo, activate(lo, post));
          _mm256_maskstore_ps(yb + i * s.k + 8, mhi, activate(hi, post));
        }
      };
      const float* const* rows = table + (j / kRows) * s.rows * kRows;
      cpu::avx2::gemm_block_indirect_n(std::min(kRows, count - j), rows, s.rows, b, s.kc, store);
    }
  }
}

void run_block(const IgemmShape& s, const float** table, const float* wp, const float* bias, const float* residual,
               float* y, const PostOp& post, int64_t p0, int64_t count, int64_t g0, int64_t g1) {
  cpu::with_activation_kind(post, [&]<bool kOn, ActivationType K>() {
    run_block_as<kOn, K>(s, table, wp, bias, residual, y, post, p0, count, g0, g1);
  });
}

KILN_ISA_END
#endif  // KILN_IGEMM_X86

// Every work item (block x panel group) on `threads` OpenMP threads, each with its own table.
void run_igemm(const IgemmShape& s, const float* x, const float* wp, const float* bias, const float* residual, float* y,
               const PostOp& post, const float* zeros, const float** tables, float* edges, int threads) {
#if KILN_IGEMM_X86
  const int64_t items = s.blocks * s.groups;
#pragma omp parallel num_threads(std::max(1, threads))
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const float** table = tables + id * (s.block / kRows) * s.rows * kRows;
    float* edge = edges + id * s.edge_rows * s.kc;
    int64_t built = -1;  // the block whose rows `table` holds
    for (int64_t item = items * id / nt; item < items * (id + 1) / nt; ++item) {
      const int64_t blk = item / s.groups, grp = item % s.groups;
      const int64_t p0 = blk * s.block, count = std::min(s.block, s.pixels - p0);
      if (blk != built) {
        build_table(s, x, zeros, p0, count, table, edge);
        built = blk;
      }
      run_block(s, table, wp, bias, residual, y, post, p0, count, s.panels * grp / s.groups,
                s.panels * (grp + 1) / s.groups);
    }
  }
#else
  (void)s, (void)x, (void)wp, (void)bias, (void)residual, (void)y, (void)post, (void)zeros, (void)tables, (void)edges,
      (void)threads;
  throw Error("Convolution igemm_avx2: not built for this processor");
#endif
}

bool shape_of(const ConvParams& params, const Dims& x, const Dims& w, int threads, IgemmShape* s, std::string* why) {
  ConvGeometry g;
  if (!cpu::conv2d_geometry(params, x, w, &g, why)) return false;
  if (g.kernel[0] > kMaxKernelRows) {
    *why = "more than " + std::to_string(kMaxKernelRows) + " kernel rows";
    return false;
  }
  static_cast<cpu::Conv2dSizes&>(*s) = cpu::Conv2dSizes(g);
  s->taps = s->kh * s->kw;
  s->pixels = s->n * s->oh * s->ow;
  s->kp = round_up(s->k, kPanel);
  s->panels = s->kp / kPanel;
  // A block's input: each output pixel brings about stride_h x stride_w new input pixels (all its
  // taps' when the kernel is smaller than the stride).
  const int64_t per_pixel = std::max<int64_t>(
      1, std::min(s->taps, std::max<int64_t>(1, s->sh * s->sw)) * s->c * static_cast<int64_t>(sizeof(float)));
  s->block = std::clamp<int64_t>(kBlockInputBytes / per_pixel / kRows * kRows, kRows, kMaxBlockPixels);
  s->block = std::min(s->block, round_up(std::max<int64_t>(1, s->pixels), kRows));
  s->blocks = (s->pixels + s->block - 1) / s->block;
  // Few blocks: split the panels too, so that every thread has about four items.
  const int64_t want = 4 * std::max(1, threads);
  s->groups = s->blocks >= want ? 1 : std::min(s->panels, (want + s->blocks - 1) / s->blocks);
  s->groups = std::max<int64_t>(1, s->groups);
  const bool merged = s->dw == 1;
  s->rows = merged ? s->kh : s->taps;
  s->kc = merged ? s->kw * s->c : s->c;
  s->edge_cols = 0;
  if (merged) {
    for (int64_t ox = 0; ox < s->ow; ++ox) {
      const int64_t ix0 = ox * s->sw - s->pad_l;
      s->edge_cols += ix0 < 0 || ix0 + s->kw > s->w;
    }
  }
  // A block touches at most block / ow + 2 output rows (a partial one at each end).
  s->edge_rows = s->edge_cols * s->kh * (s->block / std::max<int64_t>(1, s->ow) + 2);
  const int64_t nt = std::max(1, threads);
  s->table_bytes = static_cast<size_t>(nt * (s->block / kRows) * s->rows * kRows) * sizeof(float*);
  s->zero_bytes = static_cast<size_t>(s->kc) * sizeof(float);
  s->edge_bytes = static_cast<size_t>(nt * s->edge_rows * s->kc) * sizeof(float);
  s->w_bytes = static_cast<size_t>(s->kp * s->taps * s->c) * sizeof(float);
  return true;
}

// weights_: the packed weights [K/16][taps][C][16], zero beyond K, shared by the instances for
// other shapes.
class ConvIgemm : public cpu::ChannelsLastConv<ConvIgemm, IgemmShape> {
 public:
  using ChannelsLastConv::ChannelsLastConv;

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (Convolution) " + kTactic + ": ";
    if (inputs.size() < 2 || outputs.empty()) throw Error(where + "expects inputs x, w and output y");
    threads_ = std::max(1, num_threads);
    std::string why;
    if (!shape_of(params_, inputs[0].dims, inputs[1].dims, threads_, &shape_, &why)) throw Error(where + why);
    const Dims want{shape_.n, shape_.k, shape_.oh, shape_.ow};
    has_residual_ = cpu::check_conv_output(where, inputs, outputs, want);
    const HostTensor* w = inputs[1].value;
    if (!weights_ && w && w->type() == DataType::kFloat32 && w->count() == shape_.k * shape_.c * shape_.taps) {
      auto packed = std::make_shared<std::vector<float>>(shape_.w_bytes / sizeof(float));
      pack_weights(static_cast<const float*>(w->data()), shape_, packed->data());
      weights_ = std::move(packed);
    }
  }

  size_t workspace_size() const override {
    return align64(shape_.table_bytes) + align64(shape_.zero_bytes) + align64(shape_.edge_bytes) +
           (weights_ ? 0 : align64(shape_.w_bytes));
  }

  void execute(const KernelContext& ctx) override {
    cpu::check_workspace(kTactic, ctx, workspace_size());
    if (shape_.pixels == 0 || shape_.k == 0) return;
    auto* ws = static_cast<char*>(ctx.workspace);
    auto** tables = reinterpret_cast<const float**>(ws);
    auto* zeros = reinterpret_cast<float*>(ws + align64(shape_.table_bytes));
    std::memset(zeros, 0, shape_.zero_bytes);
    auto* edges = reinterpret_cast<float*>(ws + align64(shape_.table_bytes) + align64(shape_.zero_bytes));
    const float* wp = nullptr;
    if (weights_) {
      wp = weights_->data();
    } else {
      auto* scratch = reinterpret_cast<float*>(ws + align64(shape_.table_bytes) + align64(shape_.zero_bytes) +
                                               align64(shape_.edge_bytes));
      pack_weights(ctx.inputs.at(1).as<float>(), shape_, scratch);
      wp = scratch;
    }
    run_igemm(shape_, ctx.inputs.at(0).as<float>(), wp, bias_of(ctx), residual_of(ctx), ctx.outputs.at(0).as<float>(),
              params_.post, zeros, tables, edges, threads_);
  }
};

// Whether the tactic takes the layer: the convolution it computes, the formats and types it
// reads, and, where oneDNN is built in, the shapes where it is faster than oneDNN's kernels.
bool supports_igemm(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!cpu::channels_last_conv_inputs(layer, inputs)) return false;
  const ConvParams& params = params_of<ConvParams>(layer);
  IgemmShape s;
  std::string why;
  if (!shape_of(params, inputs[0].dims, inputs[1].dims, 1, &s, &why)) return false;
  if (s.pixels == 0 || s.c == 0 || s.k == 0) return false;
#if KILN_HAVE_ONEDNN
  // 1x1 convolutions stay on oneDNN's 1x1 kernels (a plain GEMM on this register block took 1.13x
  // their time; docs/status.md, session 19).
  if (s.taps == 1) return false;
  // At least 32 input channels: with fewer, each output pixel's products are too few to pay for
  // its row pointers and the fused epilogue (per-layer, 2 threads: TinyYolo's 6x6 stem, 3
  // channels, 1.0-1.6x oneDNN's time; ResNet-50's 7x7 stem 1.07-1.34x; 16 -> 16 and 16 -> 32
  // 3x3 layers 0.83-1.3x; 32 channels and more 0.36-0.92x, except for noise, see docs/status.md).
  if (s.c < 32) return false;
#endif
  // Without oneDNN the alternative is the reference kernel (SqueezeNet's 16 -> 64 3x3 layers at
  // 55 x 55: 96 ms each; ResNet-50's 1x1 layers with the residual or stride 2: 280-550 ms): this
  // kernel takes every ungrouped channels-last convolution.
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic, 104, supports_igemm,
    [](const Layer& layer) { return std::make_unique<ConvIgemm>(params_of<ConvParams>(layer)); }, 0,
    kConvResidualInput});

}  // namespace kiln
