// "winograd_avx2" (priority 105): kiln's own Winograd F(4x4, 3x3) convolution for the CPU, float32,
// channels-last (NHWC) tensors, AVX2 + FMA (chosen at run time; supports() declines elsewhere).
//
// A 3x3, stride 1, undilated, ungrouped 2-D convolution computes each 4x4 block of outputs from
// a 6x6 block of inputs with 36 products per channel pair instead of 144 (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2016):
//
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A     per output tile, summed over input channels,
//
// which turns the layer into three phases over its tiles (in blocks of tiles whose transformed
// data is about the size of the transformed weights, so that the workspace does not grow with the
// batch):
//   1. input transform: V[xi][tile][c] = (B^T d B)[xi] for the 36 positions xi, 8 channels per
//      AVX2 register (channels-last memory keeps them contiguous);
//   2. 36 matrix products M[xi] = V[xi] . U[xi] ([tiles x C] . [C x K]) with a 6x16 register
//      block; U = G g G^T is computed once from constant weights (in double) and packed in panels
//      of 16 output channels;
//   3. output transform: y = A^T M A per tile, plus bias, plus the residual input, then the fused
//      activation, stored where the 4x4 tile lies inside the output.
// The phases run on the context's threads in one OpenMP region (two barriers per block).
//
// Where it is chosen (the CPU builder does not time kernels; measured against oneDNN 2.6's NHWC
// direct kernels on an AVX2 machine, see supports_winograd): the products of a layer are 4x fewer
// than a direct convolution's, but its transformed weights are 4x larger than the layer's own and
// are read once per block of tiles; at small images (few tiles) reading them costs more than the
// products save.
//
// Numerics: the transforms add and scale values by up to 8 before the products, so results differ
// from a direct sum by a few float32 roundings of the largest partial values (the tests bound the
// difference against the reference kernel).
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
#define KILN_WINOGRAD_X86 1
#else
#define KILN_WINOGRAD_X86 0
#endif

namespace kiln {
namespace {

constexpr const char* kTactic = "winograd_avx2";
constexpr int64_t kTile = 4;   // outputs per tile side: F(4x4, 3x3)
constexpr int64_t kAlpha = 6;  // inputs per tile side
constexpr int64_t kPoints = kAlpha * kAlpha;
constexpr int64_t kPanel = 16;  // output channels per packed weight panel
// Transformed inputs and products of one block of tiles (both together): at least this many bytes.
constexpr int64_t kMinChunkBytes = int64_t{768} << 10;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Everything one input shape needs.
struct WinogradShape : cpu::Conv2dSizes {
  int64_t tiles_h = 0, tiles_w = 0, tiles = 0;   // tiles per column, per row, in all
  int64_t cp = 0, kp = 0;                        // C rounded up to 8, K to 16
  int64_t chunk = 0;                             // tiles per block
  size_t v_bytes = 0, m_bytes = 0, u_bytes = 0;  // workspace parts (u: non-constant weights only)
};

// G g G^T of every (k, c) pair of w [K, C, 3, 3], packed (double inside; float result).
void transform_weights(const float* w, int64_t k_count, int64_t c_count, int64_t cp, int64_t kp, float* u,
                       int num_threads) {
  static const double G[6][3] = {{1.0 / 4, 0, 0},
                                 {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                 {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                 {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                 {0, 0, 1}};
  const int64_t panels = kp / kPanel;
  std::memset(u, 0, sizeof(float) * static_cast<size_t>(kPoints * kp * cp));
#pragma omp parallel for num_threads(std::max(1, num_threads)) schedule(static)
  for (int64_t k = 0; k < k_count; ++k) {
    for (int64_t c = 0; c < c_count; ++c) {
      const float* g = w + (k * c_count + c) * 9;
      double t[6][3];  // G g
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 3; ++j) {
          t[i][j] = G[i][0] * g[0 * 3 + j] + G[i][1] * g[1 * 3 + j] + G[i][2] * g[2 * 3 + j];
        }
      }
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) {
          const double v = t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
          const int64_t xi = i * 6 + j;
          u[((xi * panels + k / kPanel) * cp + c) * kPanel + k % kPanel] = static_cast<float>(v);
        }
      }
    }
  }
}

#if KILN_WINOGRAD_X86
KILN_ISA_AVX2_BEGIN

using cpu::avx2::activate;
static_assert(kPanel == cpu::avx2::kPanel, "the packed panels are the register block's");
using cpu::avx2::lane_mask;

// One transform of six values by B^T (F(4x4, 3x3)).
inline void input_1d(const __m256 d[6], __m256 r[6]) {
  const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
  const __m256 s12 = _mm256_add_ps(d[1], d[2]), s34 = _mm256_add_ps(d[3], d[4]);
  const __m256 d12 = _mm256_sub_ps(d[1], d[2]), d43 = _mm256_sub_ps(d[4], d[3]);
  const __m256 d42 = _mm256_sub_ps(d[4], d[2]), d31 = _mm256_sub_ps(d[3], d[1]);
  r[0] = _mm256_fnmadd_ps(five, d[2], _mm256_fmadd_ps(four, d[0], d[4]));
  r[1] = _mm256_fnmadd_ps(four, s12, s34);
  r[2] = _mm256_fmadd_ps(four, d12, d43);
  r[3] = _mm256_fmadd_ps(two, d31, d42);
  r[4] = _mm256_fnmadd_ps(two, d31, d42);
  r[5] = _mm256_fnmadd_ps(five, d[3], _mm256_fmadd_ps(four, d[1], d[5]));
}

// One transform of six values by A^T.
inline void output_1d(const __m256 m[6], __m256 o[4]) {
  const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), eight = _mm256_set1_ps(8.0f);
  const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
  const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  o[1] = _mm256_fmadd_ps(two, d34, d12);
  o[2] = _mm256_fmadd_ps(four, s34, s12);
  o[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, d34, d12), m[5]);
}

// Tile t of the whole batch -> its image and its top-left output position.
struct TilePos {
  int64_t n, oy, ox;
};
inline TilePos tile_pos(const WinogradShape& s, int64_t t) {
  const int64_t per_image = s.tiles_h * s.tiles_w;
  const int64_t n = t / per_image, r = t % per_image;
  return {n, (r / s.tiles_w) * kTile, (r % s.tiles_w) * kTile};
}

// Phase 1 for tiles [t0, t1) of the block starting at tile `first`: V[xi][t - first][c].
void input_transform(const WinogradShape& s, const float* x, float* v, int64_t first, int64_t rows, int64_t t0,
                     int64_t t1) {
  const int64_t c_full = s.c / 8 * 8;
  const __m256i tail = lane_mask(s.c - c_full);
  const int64_t point_stride = rows * s.cp;
  for (int64_t t = t0; t < t1; ++t) {
    const TilePos p = tile_pos(s, t);
    const int64_t iy0 = p.oy - s.pad_t, ix0 = p.ox - s.pad_l;
    const float* rows_at[6][6];
    if (iy0 >= 0 && iy0 + 6 <= s.h && ix0 >= 0 && ix0 + 6 <= s.w) {  // inside the image: no bounds checks
      const float* base = x + ((p.n * s.h + iy0) * s.w + ix0) * s.c;
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) rows_at[i][j] = base + (i * s.w + j) * s.c;
      }
    } else {
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) {
          const int64_t iy = iy0 + i, ix = ix0 + j;
          rows_at[i][j] =
              iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? x + ((p.n * s.h + iy) * s.w + ix) * s.c : nullptr;
        }
      }
    }
    float* out = v + (t - first) * s.cp;
    for (int64_t c0 = 0; c0 < s.cp; c0 += 8) {
      const bool full = c0 < c_full;
      __m256 tmp[6][6];
      for (int j = 0; j < 6; ++j) {  // columns: B^T d
        __m256 d[6];
        for (int i = 0; i < 6; ++i) {
          const float* src = rows_at[i][j];
          d[i] = !src ? _mm256_setzero_ps() : full ? _mm256_loadu_ps(src + c0) : _mm256_maskload_ps(src + c0, tail);
        }
        __m256 r[6];
        input_1d(d, r);
        for (int i = 0; i < 6; ++i) tmp[i][j] = r[i];
      }
      for (int i = 0; i < 6; ++i) {  // rows: (B^T d) B
        __m256 r[6];
        input_1d(tmp[i], r);
        for (int j = 0; j < 6; ++j) _mm256_storeu_ps(out + (i * 6 + j) * point_stride + c0, r[j]);
      }
    }
  }
}

// Phase 2 for work items [i0, i1) (item = point xi and panel): all `rows` rows of the block.
void products(const WinogradShape& s, const float* v, const float* u, float* m, int64_t rows, int64_t i0, int64_t i1) {
  const int64_t panels = s.kp / kPanel;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t xi = item / panels, panel = item % panels;
    float* c = m + xi * rows * s.kp + panel * kPanel;
    cpu::avx2::gemm_rows(v + xi * rows * s.cp, s.cp, u + (xi * panels + panel) * s.cp * kPanel, s.cp, rows,
                         [c, ldc = s.kp](int64_t r, __m256 lo, __m256 hi) {
                           _mm256_storeu_ps(c + r * ldc, lo);
                           _mm256_storeu_ps(c + r * ldc + 8, hi);
                         });
  }
}

// Phase 3 for tiles [t0, t1) of the block starting at `first`; the activation's kind a template
// argument (cpu::with_activation_kind), not read per register.
template <bool kOn, ActivationType K>
void output_transform_as(const WinogradShape& s, const float* m, const float* bias, const float* residual, float* y,
                         const PostOp& runtime_post, int64_t first, int64_t rows, int64_t t0, int64_t t1) {
  const PostOp post{kOn, K, runtime_post.alpha, runtime_post.beta};
  const int64_t point_stride = rows * s.kp;
  for (int64_t t = t0; t < t1; ++t) {
    const TilePos p = tile_pos(s, t);
    const int64_t hy = std::min(kTile, s.oh - p.oy), hx = std::min(kTile, s.ow - p.ox);
    const float* in = m + (t - first) * s.kp;
    for (int64_t k0 = 0; k0 < s.k; k0 += 8) {
      const int64_t lanes = std::min<int64_t>(8, s.k - k0);
      const __m256i mask = lane_mask(lanes);
      __m256 tmp[4][6];
      for (int j = 0; j < 6; ++j) {  // columns: A^T m
        __m256 col[6];
        for (int i = 0; i < 6; ++i) col[i] = _mm256_loadu_ps(in + (i * 6 + j) * point_stride + k0);
        __m256 o[4];
        output_1d(col, o);
        for (int i = 0; i < 4; ++i) tmp[i][j] = o[i];
      }
      const __m256 b = !bias        ? _mm256_setzero_ps()
                       : lanes == 8 ? _mm256_loadu_ps(bias + k0)
                                    : _mm256_maskload_ps(bias + k0, mask);
      for (int i = 0; i < hy; ++i) {  // rows: (A^T m) A
        __m256 o[4];
        output_1d(tmp[i], o);
        for (int j = 0; j < hx; ++j) {
          const int64_t at = ((p.n * s.oh + p.oy + i) * s.ow + p.ox + j) * s.k + k0;
          __m256 val = _mm256_add_ps(o[j], b);
          if (residual) {
            val = _mm256_add_ps(val,
                                lanes == 8 ? _mm256_loadu_ps(residual + at) : _mm256_maskload_ps(residual + at, mask));
          }
          val = activate(val, post);
          if (lanes == 8) {
            _mm256_storeu_ps(y + at, val);
          } else {
            _mm256_maskstore_ps(y + at, mask, val);
          }
        }
      }
    }
  }
}

void output_transform(const WinogradShape& s, const float* m, const float* bias, const float* residual, float* y,
                      const PostOp& post, int64_t first, int64_t rows, int64_t t0, int64_t t1) {
  cpu::with_activation_kind(post, [&]<bool kOn, ActivationType K>() {
    output_transform_as<kOn, K>(s, m, bias, residual, y, post, first, rows, t0, t1);
  });
}

KILN_ISA_END
#endif  // KILN_WINOGRAD_X86

// The three phases over every block of tiles, on `threads` OpenMP threads.
void run_winograd(const WinogradShape& s, const float* x, const float* u, const float* bias, const float* residual,
                  float* y, float* v, float* m, const PostOp& post, int threads) {
#if KILN_WINOGRAD_X86
  const int64_t items = kPoints * (s.kp / kPanel);
#pragma omp parallel num_threads(std::max(1, threads))
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    for (int64_t first = 0; first < s.tiles; first += s.chunk) {
      const int64_t rows = std::min(s.chunk, s.tiles - first);
      input_transform(s, x, v, first, rows, first + rows * id / nt, first + rows * (id + 1) / nt);
#pragma omp barrier
      products(s, v, u, m, rows, items * id / nt, items * (id + 1) / nt);
#pragma omp barrier
      output_transform(s, m, bias, residual, y, post, first, rows, first + rows * id / nt,
                       first + rows * (id + 1) / nt);
      // The next block's input transform writes V only, which no thread reads any more.
    }
  }
#else
  (void)s, (void)x, (void)u, (void)bias, (void)residual, (void)y, (void)v, (void)m, (void)post, (void)threads;
  throw Error("Convolution winograd_avx2: not built for this processor");
#endif
}

bool shape_of(const ConvParams& params, const Dims& x, const Dims& w, WinogradShape* s, std::string* why) {
  ConvGeometry g;
  if (!cpu::conv2d_geometry(params, x, w, &g, why)) return false;
  if (g.kernel[0] != 3 || g.kernel[1] != 3 || g.stride[0] != 1 || g.stride[1] != 1 || g.dilation[0] != 1 ||
      g.dilation[1] != 1) {
    *why = "not a 3x3, stride 1, undilated, ungrouped 2-D convolution";
    return false;
  }
  static_cast<cpu::Conv2dSizes&>(*s) = cpu::Conv2dSizes(g);
  s->tiles_h = (s->oh + kTile - 1) / kTile;
  s->tiles_w = (s->ow + kTile - 1) / kTile;
  s->tiles = s->n * s->tiles_h * s->tiles_w;
  s->cp = round_up(s->c, 8);
  s->kp = round_up(s->k, kPanel);
  const int64_t per_tile = kPoints * (s->cp + s->kp) * 4;
  // Blocks of about the transformed weights' size, at least kMinChunkBytes: the products read all
  // of U once per block, and smaller blocks keep V and M nearer the cores (a chain of 56x56 64 ->
  // 64 layers: 0.54-0.78 ms a layer with 768 KiB blocks, 0.75-0.94 ms with 6 MiB ones; 14x14
  // 256 -> 256 layers got slower with blocks under U's 9.4 MB).
  const int64_t chunk_bytes = std::max<int64_t>(kMinChunkBytes, kPoints * s->cp * s->kp * 4);
  s->chunk = std::max<int64_t>(1, std::min(s->tiles, chunk_bytes / per_tile));
  s->v_bytes = static_cast<size_t>(kPoints * s->chunk * s->cp * 4);
  s->m_bytes = static_cast<size_t>(kPoints * s->chunk * s->kp * 4);
  s->u_bytes = static_cast<size_t>(kPoints * s->cp * s->kp * 4);
  return true;
}

size_t align64(size_t v) { return (v + 63) / 64 * 64; }

// weights_: the transformed, packed weights U[xi][K/16 panel][c][16], zero beyond C and K (4x the
// layer's own), shared by the instances for other shapes.
class ConvWinograd : public cpu::ChannelsLastConv<ConvWinograd, WinogradShape> {
 public:
  using ChannelsLastConv::ChannelsLastConv;

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (Convolution) " + kTactic + ": ";
    if (inputs.size() < 2 || outputs.empty()) throw Error(where + "expects inputs x, w and output y");
    std::string why;
    if (!shape_of(params_, inputs[0].dims, inputs[1].dims, &shape_, &why)) throw Error(where + why);
    const Dims want{shape_.n, shape_.k, shape_.oh, shape_.ow};
    has_residual_ = cpu::check_conv_output(where, inputs, outputs, want);
    const HostTensor* w = inputs[1].value;
    if (!weights_ && w && w->type() == DataType::kFloat32 && w->count() == shape_.k * shape_.c * 9) {
      auto packed = std::make_shared<std::vector<float>>(shape_.u_bytes / 4);
      transform_weights(static_cast<const float*>(w->data()), shape_.k, shape_.c, shape_.cp, shape_.kp, packed->data(),
                        num_threads);
      weights_ = std::move(packed);
    }
    threads_ = std::max(1, num_threads);
  }

  size_t workspace_size() const override {
    return align64(shape_.v_bytes) + align64(shape_.m_bytes) + (weights_ ? 0 : align64(shape_.u_bytes));
  }

  void execute(const KernelContext& ctx) override {
    cpu::check_workspace(kTactic, ctx, workspace_size());
    auto* ws = static_cast<char*>(ctx.workspace);
    auto* v = reinterpret_cast<float*>(ws);
    auto* m = reinterpret_cast<float*>(ws + align64(shape_.v_bytes));
    const float* u = nullptr;
    if (weights_) {
      u = weights_->data();
    } else {
      auto* scratch = reinterpret_cast<float*>(ws + align64(shape_.v_bytes) + align64(shape_.m_bytes));
      transform_weights(ctx.inputs.at(1).as<float>(), shape_.k, shape_.c, shape_.cp, shape_.kp, scratch, threads_);
      u = scratch;
    }
    run_winograd(shape_, ctx.inputs.at(0).as<float>(), u, bias_of(ctx), residual_of(ctx), ctx.outputs.at(0).as<float>(),
                 v, m, params_.post, threads_);
  }
};

// Whether the tactic takes the layer: the convolution it computes, the formats and types it
// reads, and the shapes where it is faster than oneDNN's direct kernels.
bool supports_winograd(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!cpu::channels_last_conv_inputs(layer, inputs)) return false;
  const ConvParams& params = params_of<ConvParams>(layer);
  WinogradShape s;
  std::string why;
  if (!shape_of(params, inputs[0].dims, inputs[1].dims, &s, &why)) return false;
  if (s.tiles == 0 || s.c == 0 || s.k == 0) return false;
  // Where it is faster than oneDNN 2.6's NHWC direct kernels (2 threads, AVX2, per-layer profiles
  // of ResNet-50, TinyYolo and SqueezeNet at batch 1; docs/status.md, session 19):
  //  - at least 9 tiles in all (ResNet-50's 7x7 images with 512 channels, 4 tiles: 1.05x the direct
  //    kernel's time, the transformed weights read for 4 tiles; TinyYolo's 10x10, 9 tiles: 0.73x;
  //    14x14, 16 tiles: 0.76x; 28x28 and 56x56: 0.50-0.67x);
  //  - C * K >= 1024 (16 -> 16 channels at 80x80 with SiLU: 1.0-1.27x in TinyYolo, the products too
  //    small to pay for the transforms; after the SiLU's division became a reciprocal, 0.8-1.2x in
  //    a chain of such layers on a noisy machine, not a clear gain; 16 -> 64 at 55x55: 0.55-1.1x;
  //    32 -> 32 at 40x40: 0.5-0.67x);
  //  - C >= 32 (SqueezeNet's 16 -> 64 at 55x55, session 20: 0.96x oneDNN's time at batch 1, 1.36x
  //    at batch 8).
  if (s.tiles < 9 || s.c * s.k < 1024 || s.c < 32) return false;
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic, 105, supports_winograd,
    [](const Layer& layer) { return std::make_unique<ConvWinograd>(params_of<ConvParams>(layer)); }, 0,
    kConvResidualInput});

}  // namespace kiln
