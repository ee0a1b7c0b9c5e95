// "depthwise_avx2" (priority 97) of Convolution: a depthwise 2-D convolution (one group per
// channel, one output channel per group: MobileNet's) on channels-last float32 tensors, AVX2 +
// FMA (chosen at run time; supports() declines elsewhere), for builds without oneDNN, where such
// layers had only the reference kernel (MobileNetV3-small's eleven took about 24 of its 27 ms per
// inference at batch 1 on one Zen 4 thread). With oneDNN built in it declines: oneDNN's
// depthwise kernels run those layers (docs/status.md, session 22's per-layer profile).
//
// Channels-last memory keeps each pixel's channels contiguous, and a depthwise convolution
// multiplies channel c only by channel c's weights: per output pixel and block of channels, the
// products of the taps inside the image are summed in registers (32 channels in four
// accumulators, then 8, then a masked tail), with the weights packed once as [KH][KW][C]
// (channel fastest, like the pixels). Any kernel size, stride, dilation and padding; bias and the
// fused activation are applied before the one store. Output rows are shared among the context's
// threads.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/conv_channels_last.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/kernel.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_DEPTHWISE_X86 1
#else
#define KILN_DEPTHWISE_X86 0
#endif

namespace kiln {
namespace {

constexpr const char* kTactic = "depthwise_avx2";

// A depthwise convolution's sizes for one input shape (k == c).
using DwShape = cpu::Conv2dSizes;

// x [N, C, H, W] with w [C, 1, KH, KW] and group C (one output channel per group).
bool shape_of(const ConvParams& params, const Dims& x, const Dims& w, DwShape* s, std::string* why) {
  ConvGeometry g;
  if (!cpu::conv2d_geometry(params, x, w, &g, why, true)) return false;
  *s = cpu::Conv2dSizes(g);
  return true;
}

#if KILN_DEPTHWISE_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// Output row (n, oy): every pixel, every channel.
void run_row(const DwShape& s, const float* x, const float* wp, const float* bias, float* y, const PostOp& post,
             int64_t n, int64_t oy) {
  const int64_t c = s.c;
  const int64_t iy0 = oy * s.sh - s.pad_t;
  // Kernel rows inside the image for this output row.
  int64_t a0 = 0, a1 = s.kh;
  while (a0 < a1 && iy0 + a0 * s.dh < 0) ++a0;
  while (a1 > a0 && iy0 + (a1 - 1) * s.dh >= s.h) --a1;
  const float* xn = x + n * s.h * s.w * c;
  float* yrow = y + (n * s.oh + oy) * s.ow * c;
  const int64_t tail = c % 8;
  const __m256i tail_mask = cpu::avx2::lane_mask(tail);
  for (int64_t ox = 0; ox < s.ow; ++ox) {
    const int64_t ix0 = ox * s.sw - s.pad_l;
    int64_t b0 = 0, b1 = s.kw;
    while (b0 < b1 && ix0 + b0 * s.dw < 0) ++b0;
    while (b1 > b0 && ix0 + (b1 - 1) * s.dw >= s.w) --b1;
    float* out = yrow + ox * c;
    int64_t ch = 0;
    // 32 channels: four independent sums.
    for (; ch + 32 <= c; ch += 32) {
      __m256 s0 = bias ? _mm256_loadu_ps(bias + ch) : _mm256_setzero_ps();
      __m256 s1 = bias ? _mm256_loadu_ps(bias + ch + 8) : _mm256_setzero_ps();
      __m256 s2 = bias ? _mm256_loadu_ps(bias + ch + 16) : _mm256_setzero_ps();
      __m256 s3 = bias ? _mm256_loadu_ps(bias + ch + 24) : _mm256_setzero_ps();
      for (int64_t a = a0; a < a1; ++a) {
        const float* xr = xn + ((iy0 + a * s.dh) * s.w) * c + ch;
        const float* wr = wp + a * s.kw * c + ch;
        for (int64_t b = b0; b < b1; ++b) {
          const float* xp = xr + (ix0 + b * s.dw) * c;
          const float* wb = wr + b * c;
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wb), s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), _mm256_loadu_ps(wb + 8), s1);
          s2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), _mm256_loadu_ps(wb + 16), s2);
          s3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), _mm256_loadu_ps(wb + 24), s3);
        }
      }
      _mm256_storeu_ps(out + ch, cpu::avx2::activate(s0, post));
      _mm256_storeu_ps(out + ch + 8, cpu::avx2::activate(s1, post));
      _mm256_storeu_ps(out + ch + 16, cpu::avx2::activate(s2, post));
      _mm256_storeu_ps(out + ch + 24, cpu::avx2::activate(s3, post));
    }
    // 8 channels at a time, then the last 1-7 masked.
    for (; ch < c; ch += 8) {
      const bool full = ch + 8 <= c;
      const __m256i m = full ? _mm256_set1_epi32(-1) : tail_mask;
      __m256 sum = bias ? _mm256_maskload_ps(bias + ch, m) : _mm256_setzero_ps();
      for (int64_t a = a0; a < a1; ++a) {
        const float* xr = xn + ((iy0 + a * s.dh) * s.w) * c + ch;
        const float* wr = wp + a * s.kw * c + ch;
        for (int64_t b = b0; b < b1; ++b) {
          sum =
              _mm256_fmadd_ps(_mm256_maskload_ps(xr + (ix0 + b * s.dw) * c, m), _mm256_maskload_ps(wr + b * c, m), sum);
        }
      }
      _mm256_maskstore_ps(out + ch, m, cpu::avx2::activate(sum, post));
    }
  }
}

#pragma GCC pop_options
#endif  // KILN_DEPTHWISE_X86

class ConvDepthwise : public cpu::ChannelsLastConv<ConvDepthwise, DwShape> {
 public:
  using ChannelsLastConv::ChannelsLastConv;

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    const std::string where = "layer '" + layer.name() + "' (Convolution) " + kTactic + ": ";
    if (inputs.size() < 2 || outputs.empty()) throw Error(where + "expects inputs x, w and output y");
    std::string why;
    if (!shape_of(params_, inputs[0].dims, inputs[1].dims, &shape_, &why)) throw Error(where + why);
    if (cpu::check_conv_output(where, inputs, outputs, Dims{shape_.n, shape_.c, shape_.oh, shape_.ow})) {
      throw Error(where + "takes no residual input (the builder chooses this kernel only then)");
    }
    threads_ = std::max(1, num_threads);
    if (!weights_) {
      const HostTensor* wv = inputs[1].value;
      if (!wv || wv->type() != DataType::kFloat32 || wv->count() != shape_.c * shape_.kh * shape_.kw) {
        throw Error(where + "the weights must be constant float32 (the builder chooses this kernel only then)");
      }
      // [C][1][KH][KW] -> [KH][KW][C].
      const auto* w = static_cast<const float*>(wv->data());
      const int64_t taps = shape_.kh * shape_.kw;
      auto packed = std::make_shared<std::vector<float>>(static_cast<size_t>(shape_.c * taps));
      for (int64_t ch = 0; ch < shape_.c; ++ch) {
        for (int64_t t = 0; t < taps; ++t) (*packed)[static_cast<size_t>(t * shape_.c + ch)] = w[ch * taps + t];
      }
      weights_ = std::move(packed);
    }
  }

  void execute(const KernelContext& ctx) override {
    if (!weights_) throw Error(std::string("Convolution ") + kTactic + ": execute() before prepare()");
#if KILN_DEPTHWISE_X86
    const DwShape& s = shape_;
    const int64_t rows = s.n * s.oh;
    if (rows == 0 || s.c == 0 || s.ow == 0) return;
    const float* x = ctx.inputs.at(0).as<const float>();
    const float* wp = weights_->data();
    const float* bias = bias_of(ctx);
    float* y = ctx.outputs.at(0).as<float>();
    const PostOp& post = params_.post;
    const int nt = static_cast<int>(std::clamp<int64_t>(rows, 1, threads_));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; ++r) run_row(s, x, wp, bias, y, post, r / s.oh, r % s.oh);
#else
    (void)ctx;
    throw Error(std::string("Convolution ") + kTactic + ": not built for this processor");
#endif
  }
};

// A float32 2-D depthwise convolution (group = C = K) with constant weights, a rank-1 bias or
// none, no residual, an activation activate() computes, x and y channels-last, on a processor
// with AVX2 + FMA, in a build without oneDNN.
bool supports_depthwise(const Layer& layer, const std::vector<TensorDesc>& inputs) {
#if KILN_HAVE_ONEDNN
  (void)layer, (void)inputs;
  return false;  // oneDNN's depthwise kernels (see above)
#else
  if (!KILN_DEPTHWISE_X86 || !cpu::channels_last_conv_inputs(layer, inputs, true)) return false;
  if (inputs.size() > 3 && inputs[3].present) return false;  // no residual
  const ConvParams& p = params_of<ConvParams>(layer);
  const Dims& x = inputs[0].dims;
  const Dims& w = inputs[1].dims;
  if (x.rank() != 4 || w.rank() != 4) return false;
  DwShape s;
  std::string why;
  Dims probe = x;
  if (probe[0] < 0) probe[0] = 1;  // a dynamic batch: prepare() sees each
  if (!shape_of(p, probe, w, &s, &why)) return false;
  if (inputs.size() > 2 && inputs[2].present && inputs[2].dims[0] != s.c) return false;  // rank 1: checked above
  const HostTensor* wv = inputs[1].value;
  return wv && wv->type() == DataType::kFloat32 && wv->count() == w.volume();
#endif
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, kTactic, 97, supports_depthwise,
    [](const Layer& layer) { return std::make_unique<ConvDepthwise>(params_of<ConvParams>(layer)); }});

}  // namespace kiln
