// "avx2" (priority 105) and "avx512" (106) tactics of Activation, float32: the kinds
// cpu::activation_vectorized() names (ReLU, leaky ReLU, clip, SiLU, sigmoid, hard sigmoid, hard
// swish, GELU), 8 or 16 elements per register with activation_formulas.h's formulas (the
// convolutions' fused activations), on processors with AVX2 + FMA or AVX-512F (chosen at run
// time). Above oneDNN's eltwise, whose jit logistic is slower on AVX2: TinyYolo's 2.14M-element
// detection sigmoid on 1 thread took 2.1-2.2 ms there, 1.6-1.9 ms here (ONNX Runtime 1.0 ms); an
// 85K-element one 92 us there, 65 us here (ORT 53 us, Python's call included). Session 20,
// docs/status.md. On AMD's Zen 4 the 16-lane loop runs SiLU 1.3x faster than the 8-lane one
// (fewer instructions for the same FMA rate; session 26).
//
// Layout: any format, x and y in the same one (element-wise work does not depend on the order).
// y may be x's memory (KernelEntry::in_place_input): each element is read before it is written.
#include <memory>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/activation_avx512.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using RangeFn = void (*)(const float*, float*, int64_t, int64_t, float, float);

#if defined(__x86_64__) && defined(__GNUC__)
template <bool kWide, ActivationType K>
constexpr RangeFn range() {
  if constexpr (kWide) {
    return cpu::avx512::activate_range<K>;
  } else {
    return cpu::avx2::activate_range<K>;
  }
}

// The kinds activate() computes (cpu::activation_vectorized), else null; 16 lanes or 8.
template <bool kWide>
RangeFn range_fn(ActivationType kind) {
  switch (kind) {
    case ActivationType::kRelu:
      return range<kWide, ActivationType::kRelu>();
    case ActivationType::kLeakyRelu:
      return range<kWide, ActivationType::kLeakyRelu>();
    case ActivationType::kClip:
      return range<kWide, ActivationType::kClip>();
    case ActivationType::kSilu:
      return range<kWide, ActivationType::kSilu>();
    case ActivationType::kSigmoid:
      return range<kWide, ActivationType::kSigmoid>();
    case ActivationType::kHardSigmoid:
      return range<kWide, ActivationType::kHardSigmoid>();
    case ActivationType::kHardSwish:
      return range<kWide, ActivationType::kHardSwish>();
    case ActivationType::kGeluErf:
      return range<kWide, ActivationType::kGeluErf>();
    default:
      return nullptr;
  }
}
#else
template <bool kWide>
RangeFn range_fn(ActivationType) {
  return nullptr;
}
#endif

// The loop for `post` in 16 lanes (wide, where the processor has AVX-512F) or 8 (AVX2 + FMA), or
// null.
RangeFn pick(const PostOp& post, bool wide) {
  if (!post.enabled) return nullptr;
  if (wide) return cpu::has_avx512f() ? range_fn<true>(post.kind) : nullptr;
  return cpu::has_avx2_fma() ? range_fn<false>(post.kind) : nullptr;
}

bool run(RangeFn fn, const PostOp& post, const float* x, float* y, int64_t n, int threads) {
  if (!fn) return false;
  cpu::parallel_for(n, threads, [&](int64_t begin, int64_t end) { fn(x, y, begin, end, post.alpha, post.beta); });
  return true;
}

class ActivationVector : public Kernel {
 public:
  ActivationVector(const ActivationParams& p, bool wide)
      : post_{true, p.kind, static_cast<float>(p.alpha), static_cast<float>(p.beta)}, fn_(pick(post_, wide)) {}
  void execute(const KernelContext& ctx) override {
    if (!run(fn_, post_, ctx.inputs.at(0).as<const float>(), ctx.outputs.at(0).as<float>(), ctx.outputs[0].count(),
             ctx.num_threads)) {
      throw Error("Activation avx2/avx512: not built for this processor or this activation");
    }
  }

 private:
  PostOp post_;
  RangeFn fn_;
};

bool supports(const Layer& layer, const std::vector<TensorDesc>& inputs, bool wide) {
  if (inputs.empty() || inputs[0].type != DataType::kFloat32) return false;
  if (layer.num_outputs() < 1 || inputs[0].format != layer.output(0)->format()) return false;
  const ActivationParams& p = params_of<ActivationParams>(layer);
  return pick(PostOp{true, p.kind, 0.0f, 0.0f}, wide) != nullptr;
}

}  // namespace

bool cpu::activate_avx2(const PostOp& post, const float* x, float* y, int64_t n, int threads) {
  return run(pick(post, false), post, x, y, n, threads);
}

bool cpu::activate_avx512(const PostOp& post, const float* x, float* y, int64_t n, int threads) {
  return run(pick(post, true), post, x, y, n, threads);
}

bool cpu::activate_simd(const PostOp& post, const float* x, float* y, int64_t n, int threads) {
  return run(pick(post, cpu::has_avx512f()), post, x, y, n, threads);
}

bool cpu::activation_after_onednn(const PostOp& post) {
  return post.enabled && (post.kind == ActivationType::kSilu || post.kind == ActivationType::kSigmoid) &&
         pick(post, false) != nullptr;
}

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerActivation, "avx2", 105,
    [](const Layer& layer, const std::vector<TensorDesc>& inputs) { return supports(layer, inputs, false); },
    [](const Layer& layer) { return std::make_unique<ActivationVector>(params_of<ActivationParams>(layer), false); }, 0,
    /*in_place_input=*/0});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerActivation, "avx512", 106,
    [](const Layer& layer, const std::vector<TensorDesc>& inputs) { return supports(layer, inputs, true); },
    [](const Layer& layer) { return std::make_unique<ActivationVector>(params_of<ActivationParams>(layer), true); }, 0,
    /*in_place_input=*/0});

}  // namespace kiln
