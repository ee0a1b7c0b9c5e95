// Shared plumbing of the oneDNN CPU tactics: engine, descriptors, the activation -> eltwise
// post-op table, the OpenMP thread guard and workspace carving (see onednn_common.h).
#include "src/backends/cpu/onednn_common.h"

#include <omp.h>

#include <map>
#include <optional>

#include "kiln/error.h"
#include "src/core/text.h"

namespace kiln::onednn {

dnnl::engine& engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

dnnl::memory::dims to_dnnl(const Dims& dims) { return dnnl::memory::dims(dims.begin(), dims.end()); }

dnnl::memory::dims to_dnnl(const std::vector<int64_t>& values) {
  return dnnl::memory::dims(values.begin(), values.end());
}

dnnl::memory::dims plain_strides(const dnnl::memory::dims& dims) {
  dnnl::memory::dims s(dims.size());
  dnnl::memory::dim acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, plain_strides(dims));
}

dnnl::memory::desc activation_desc(const dnnl::memory::dims& dims, TensorFormat format) {
  if (format == TensorFormat::kLinear || dims.size() < 3) return plain_desc(dims);
  // Channels-last: C innermost, then the spatial dims row-major, then N.
  dnnl::memory::dims strides(dims.size());
  const dnnl::memory::dim c = dims[1];
  dnnl::memory::dim acc = c;
  for (size_t i = dims.size(); i-- > 2;) {
    strides[i] = acc;
    acc *= dims[i];
  }
  strides[1] = 1;
  strides[0] = acc;
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

bool all_float32(const std::vector<TensorDesc>& tensors) {
  for (const TensorDesc& t : tensors) {
    if (t.present && t.type != DataType::kFloat32) return false;
  }
  return true;
}

namespace {

using Steps = std::vector<EltwiseStep>;
using StepsFn = std::optional<Steps> (*)(float alpha, float beta);

// kiln activation kind -> the oneDNN 2.6 eltwise chain computing it (docs/layers.md semantics).
// Kinds absent here (softsign, thresholded_relu) have no 2.6 eltwise; supports() declines them.
// oneDNN's relu/elu test x > 0 where kiln's leaky_relu/elu test x >= 0: equal at 0.
// A chain never repeats an algorithm: 2.6's jit post-op injectors then share one constant table
// (two `linear` steps both used the first one's alpha), so scales go into the post-op's scale.
const std::map<ActivationType, StepsFn>& activation_table() {
  using A = dnnl::algorithm;
  static const std::map<ActivationType, StepsFn> table = {
      {ActivationType::kRelu,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_relu, 0.f, 0.f}};
       }},
      {ActivationType::kSigmoid,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_logistic, 0.f, 0.f}};
       }},
      {ActivationType::kTanh,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_tanh, 0.f, 0.f}};
       }},
      {ActivationType::kLeakyRelu,
       [](float a, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_relu, a, 0.f}};
       }},
      {ActivationType::kElu,
       [](float a, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_elu, a, 0.f}};
       }},
      // selu = beta * elu_alpha(x)
      {ActivationType::kSelu,
       [](float a, float b) -> std::optional<Steps> {
         return Steps{{A::eltwise_elu, a, 0.f, b}};
       }},
      // 2.6's soft_relu is log(1 + e^x) and ignores alpha (3.x added a scale).
      {ActivationType::kSoftplus,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_soft_relu, 0.f, 0.f}};
       }},
      {ActivationType::kClip,
       [](float a, float b) -> std::optional<Steps> {
         return Steps{{A::eltwise_clip, a, b}};
       }},
      // 2.6 has no hardsigmoid: clip(alpha*x + beta, 0, 1).
      {ActivationType::kHardSigmoid,
       [](float a, float b) -> std::optional<Steps> {
         return Steps{{A::eltwise_linear, a, b}, {A::eltwise_clip, 0.f, 1.f}};
       }},
      // 2.6's hardswish is x * relu6(x + 3) / 6, kiln's hard_swish exactly.
      {ActivationType::kHardSwish,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_hardswish, 0.f, 0.f}};
       }},
      {ActivationType::kSilu,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_swish, 1.f, 0.f}};
       }},
      {ActivationType::kSwish,
       [](float a, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_swish, a, 0.f}};
       }},
      {ActivationType::kGeluErf,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_gelu_erf, 0.f, 0.f}};
       }},
      {ActivationType::kGeluTanh,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_gelu_tanh, 0.f, 0.f}};
       }},
      {ActivationType::kMish,
       [](float, float) -> std::optional<Steps> {
         return Steps{{A::eltwise_mish, 0.f, 0.f}};
       }},
      // celu_a(x) = a * elu_1(x / a), valid for a > 0 only (the sign of a flips the branch test).
      {ActivationType::kCelu,
       [](float a, float) -> std::optional<Steps> {
         if (!(a > 0.f)) return std::nullopt;
         return Steps{{A::eltwise_linear, 1.f / a, 0.f}, {A::eltwise_elu, 1.f, 0.f, a}};
       }},
  };
  return table;
}

}  // namespace

std::optional<std::vector<EltwiseStep>> eltwise_steps(const PostOp& post) {
  const auto& table = activation_table();
  const auto it = table.find(post.kind);
  if (it == table.end()) return std::nullopt;
  return it->second(post.alpha, post.beta);
}

bool append_activation(dnnl::post_ops& ops, const PostOp& post) {
  if (!post.enabled) return true;
  const auto steps = eltwise_steps(post);
  if (!steps) return false;
  for (const EltwiseStep& s : *steps) ops.append_eltwise(s.scale, s.alg, s.alpha, s.beta);
  return true;
}

bool activation_supported(const PostOp& post) { return !post.enabled || eltwise_steps(post).has_value(); }

bool read_post_op_safe(const Layer& layer, PostOp* post) {
  try {
    *post = read_post_op(layer);
    return true;
  } catch (const Error&) {
    *post = PostOp{};
    return false;
  }
}

ScopedOmpThreads::ScopedOmpThreads(int num_threads) {
  if (num_threads <= 0) return;
  previous_ = omp_get_max_threads();
  if (previous_ != num_threads) {
    omp_set_num_threads(num_threads);
    changed_ = true;
  }
}

ScopedOmpThreads::~ScopedOmpThreads() {
  if (changed_) omp_set_num_threads(previous_);
}

size_t WorkspaceLayout::add(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t offset = (total_ + kAlign - 1) / kAlign * kAlign;
  total_ = offset + bytes;
  return offset;
}

void* workspace_at(const KernelContext& ctx, size_t offset, size_t needed, const char* what) {
  if (needed == 0) return nullptr;
  if (!ctx.workspace || ctx.workspace_size < needed) {
    throw Error(std::string(what) + ": the runtime gave a workspace of " + std::to_string(ctx.workspace_size) +
                " bytes, the kernel asked for " + std::to_string(needed) +
                " (workspace_size() must be honoured after prepare())");
  }
  return static_cast<uint8_t*>(ctx.workspace) + offset;
}

std::string where(const Layer& layer) { return "layer " + quote(layer.name()) + " (" + layer.type() + ") onednn: "; }

std::string shape_key(const std::vector<TensorDesc>& inputs) {
  std::string key;
  for (const TensorDesc& t : inputs) {
    key += t.present ? t.dims.to_string() : std::string("-");
    key += t.format == TensorFormat::kLinear ? "L;" : "C;";
  }
  return key;
}

}  // namespace kiln::onednn
