// "avx2" tactic (priority 105) of Activation, float32: the kinds cpu::activation_vectorized()
// names (ReLU, leaky ReLU, clip, SiLU, sigmoid, hard sigmoid, hard swish, GELU), 8 elements per AVX2
// register with the formulas of activation_avx2.h (the convolutions' fused activations), on
// processors with AVX2 + FMA (chosen at run time). Above oneDNN's eltwise, whose jit logistic is
// slower on AVX2: TinyYolo's 2.14M-element detection sigmoid on 1 thread took 2.1-2.2 ms there,
// 1.6-1.9 ms here (ONNX Runtime 1.0 ms); an 85K-element one 92 us there, 65 us here (ORT 53 us,
// Python's call included). Session 20, docs/status.md.
//
// Layout: any format, x and y in the same one (element-wise work does not depend on the order).
// y may be x's memory (KernelEntry::in_place_input): each element is read before it is written.
#include <memory>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using RangeFn = void (*)(const float*, float*, int64_t, int64_t, float, float);

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// y = act(x) over [begin, end), with the kind a constant so that activate()'s switch folds away.
template <ActivationType K>
void run_range(const float* x, float* y, int64_t begin, int64_t end, float alpha, float beta) {
  const PostOp post{true, K, alpha, beta};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) _mm256_storeu_ps(y + i, cpu::avx2::activate(_mm256_loadu_ps(x + i), post));
  if (i < end) {
    const __m256i mask = cpu::avx2::lane_mask(end - i);
    _mm256_maskstore_ps(y + i, mask, cpu::avx2::activate(_mm256_maskload_ps(x + i, mask), post));
  }
}

#pragma GCC pop_options

// The kinds activate() computes (cpu::activation_vectorized), else null.
RangeFn range_fn(ActivationType kind) {
  switch (kind) {
    case ActivationType::kRelu:
      return run_range<ActivationType::kRelu>;
    case ActivationType::kLeakyRelu:
      return run_range<ActivationType::kLeakyRelu>;
    case ActivationType::kClip:
      return run_range<ActivationType::kClip>;
    case ActivationType::kSilu:
      return run_range<ActivationType::kSilu>;
    case ActivationType::kSigmoid:
      return run_range<ActivationType::kSigmoid>;
    case ActivationType::kHardSigmoid:
      return run_range<ActivationType::kHardSigmoid>;
    case ActivationType::kHardSwish:
      return run_range<ActivationType::kHardSwish>;
    case ActivationType::kGeluErf:
      return run_range<ActivationType::kGeluErf>;
    default:
      return nullptr;
  }
}
#else
RangeFn range_fn(ActivationType) { return nullptr; }
#endif

class ActivationAvx2 : public Kernel {
 public:
  explicit ActivationAvx2(const ActivationParams& p)
      : post_{true, p.kind, static_cast<float>(p.alpha), static_cast<float>(p.beta)} {}
  void execute(const KernelContext& ctx) override {
    if (!cpu::activate_avx2(post_, ctx.inputs.at(0).as<const float>(), ctx.outputs.at(0).as<float>(),
                            ctx.outputs[0].count(), ctx.num_threads)) {
      throw Error("Activation avx2: not built for this processor or this activation");
    }
  }

 private:
  PostOp post_;
};

bool supports_avx2(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!cpu::has_avx2_fma() || inputs.empty() || inputs[0].type != DataType::kFloat32) return false;
  if (layer.num_outputs() < 1 || inputs[0].format != layer.output(0)->format()) return false;
  return range_fn(params_of<ActivationParams>(layer).kind) != nullptr;
}

}  // namespace

bool cpu::activate_avx2(const PostOp& post, const float* x, float* y, int64_t n, int threads) {
  const RangeFn fn = post.enabled && cpu::has_avx2_fma() ? range_fn(post.kind) : nullptr;
  if (!fn) return false;
  cpu::parallel_for(n, threads, [&](int64_t begin, int64_t end) { fn(x, y, begin, end, post.alpha, post.beta); });
  return true;
}

bool cpu::activation_after_onednn(const PostOp& post) {
  return post.enabled && (post.kind == ActivationType::kSilu || post.kind == ActivationType::kSigmoid) &&
         cpu::has_avx2_fma() && range_fn(post.kind) != nullptr;
}

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerActivation, "avx2", 105, supports_avx2,
    [](const Layer& layer) { return std::make_unique<ActivationAvx2>(params_of<ActivationParams>(layer)); }, 0,
    /*in_place_input=*/0});

}  // namespace kiln
