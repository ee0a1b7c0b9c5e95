// oneDNN tactic ("onednn", priority 100) of Activation, float32: the kinds oneDNN 2.6 has as
// eltwise algorithms (the same table the convolution post-ops use, onednn_common.cpp), run as one
// eltwise primitive per step of the kind's chain, the later steps in place on y. oneDNN's jit
// eltwise kernels evaluate exp/tanh/erf with vector polynomials: on the AVX2 development machines
// a 408K-element sigmoid (TinyYolo's detection heads) takes about 0.4 ms against 2.6 ms for the
// "vectorized" tactic, whose loops call the scalar libm functions.
//
// gelu_erf and softplus are left to the "vectorized" tactic: oneDNN's erf and log1p(exp)
// approximations are off by a few float32 ulps (2.4e-7 absolute on [-3, 3]), more than the 1e-7 +
// 1e-6 relative that the op tests allow element-wise activations (ops_math_test.cpp).
//
// Layout: any format; x and y in the same one (element-wise work does not depend on the order).
// The tensor is seen as one flat run of elements.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/onednn_common.h"
#include "src/ir/op_schema.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using dnnl::memory;

// The activation of the layer as a PostOp (same kind/alpha/beta semantics as apply_activation);
// false when the kind is unknown.
bool read_activation(const Layer& layer, PostOp* post) {
  try {
    post->enabled = true;
    const ActivationParams& p = params_of<ActivationParams>(layer);
    post->kind = p.kind;
    post->alpha = static_cast<float>(p.alpha);
    post->beta = static_cast<float>(p.beta);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The eltwise steps of the activation, with any post-op scale turned into a linear step (a
// standalone eltwise primitive has no output scale); empty when this tactic does not take it.
std::vector<onednn::EltwiseStep> primitive_steps(const PostOp& post) {
  std::vector<onednn::EltwiseStep> steps;
  const auto chain = onednn::eltwise_steps(post);
  if (!chain) return steps;
  for (const onednn::EltwiseStep& s : *chain) {
    if (s.alg == dnnl::algorithm::eltwise_gelu_erf || s.alg == dnnl::algorithm::eltwise_soft_relu) return {};
    steps.push_back({s.alg, s.alpha, s.beta});
    if (s.scale != 1.f) steps.push_back({dnnl::algorithm::eltwise_linear, s.scale, 0.f});
  }
  return steps;
}

struct ActivationPlan {
  memory::desc data;
  std::vector<dnnl::eltwise_forward> steps;
  int num_threads = 1;
};

class ActivationOneDnn : public Kernel {
 public:
  explicit ActivationOneDnn(const Layer& layer) : stream_(onednn::engine()) {
    if (!read_activation(layer, &post_) || primitive_steps(post_).empty()) {
      throw Error(onednn::where(layer) + "activation kind '" + to_string(post_.kind) +
                  "' has no oneDNN eltwise; the vectorized tactic handles it");
    }
  }

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    if (inputs.empty() || outputs.empty()) throw Error(onednn::where(layer) + "expects input x and output y");
    const int64_t count = inputs[0].dims.volume();
    const std::string key = std::to_string(count) + "t" + std::to_string(num_threads);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      onednn::ScopedOmpThreads threads(num_threads);
      ActivationPlan plan;
      plan.num_threads = num_threads;
      plan.data = onednn::plain_desc({count});
      try {
        for (const onednn::EltwiseStep& s : primitive_steps(post_)) {
          dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, s.alg, plan.data, s.alpha, s.beta);
          plan.steps.emplace_back(dnnl::eltwise_forward::primitive_desc(d, onednn::engine()));
        }
      } catch (const dnnl::error& e) {
        throw Error(onednn::where(layer) + "oneDNN declined the eltwise primitive (" + e.what() +
                    "); the vectorized tactic handles this layer");
      }
      it = plans_.emplace(key, std::move(plan)).first;
    }
    current_ = &it->second;
  }

  void execute(const KernelContext& ctx) override {
    if (!current_) throw Error("Activation onednn: execute() before prepare()");
    const ActivationPlan& p = *current_;
    if (ctx.inputs.at(0).count() == 0) return;
    onednn::ScopedOmpThreads threads(p.num_threads);
    auto& eng = onednn::engine();
    memory x(p.data, eng, ctx.inputs.at(0).data), y(p.data, eng, ctx.outputs.at(0).data);
    for (size_t i = 0; i < p.steps.size(); ++i) {
      p.steps[i].execute(stream_, {{DNNL_ARG_SRC, i == 0 ? x : y}, {DNNL_ARG_DST, y}});
    }
    stream_.wait();
  }

 private:
  PostOp post_;
  dnnl::stream stream_;
  std::unordered_map<std::string, ActivationPlan> plans_;
  const ActivationPlan* current_ = nullptr;
};

bool supports_activation(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() != 1 || !inputs[0].present || inputs[0].type != DataType::kFloat32) return false;
  const TensorFormat y_format = layer.num_outputs() > 0 ? layer.output(0)->format() : TensorFormat::kLinear;
  if (inputs[0].format != y_format) return false;
  PostOp post;
  if (!read_activation(layer, &post) || primitive_steps(post).empty()) return false;
  if (inputs[0].dims.is_dynamic()) return true;
  if (inputs[0].dims.volume() == 0) return false;
  try {
    const memory::desc data = onednn::plain_desc({inputs[0].dims.volume()});
    for (const onednn::EltwiseStep& s : primitive_steps(post)) {
      dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, s.alg, data, s.alpha, s.beta);
      dnnl::eltwise_forward::primitive_desc pd(d, onednn::engine());
    }
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerActivation, onednn::kTactic, onednn::kPriority,
                                 supports_activation,
                                 [](const Layer& layer) { return std::make_unique<ActivationOneDnn>(layer); }});

}  // namespace kiln
