// Scalar definitions of every activation kind (docs/layers.md), shared by the CPU reference
// kernels, fused post-ops and the element-wise fusion interpreter. Written for float; the
// reference computes in float (double where noted for accuracy).
#pragma once

#include <algorithm>
#include <cmath>

#include "kiln/network.h"

namespace kiln {

inline float activation_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

inline float apply_activation(ActivationType kind, float x, float alpha, float beta) {
  switch (kind) {
    case ActivationType::kRelu: return x > 0.0f ? x : 0.0f;
    case ActivationType::kSigmoid: return activation_sigmoid(x);
    case ActivationType::kTanh: return std::tanh(x);
    case ActivationType::kLeakyRelu: return x >= 0.0f ? x : alpha * x;
    case ActivationType::kElu: return x >= 0.0f ? x : alpha * (std::exp(x) - 1.0f);
    case ActivationType::kSelu: return beta * (x > 0.0f ? x : alpha * (std::exp(x) - 1.0f));
    case ActivationType::kSoftplus: return x > 20.0f ? x : std::log1p(std::exp(x));
    case ActivationType::kClip: return std::min(std::max(x, alpha), beta);
    case ActivationType::kHardSigmoid: return std::max(0.0f, std::min(1.0f, alpha * x + beta));
    case ActivationType::kHardSwish: return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
    case ActivationType::kSilu: return x * activation_sigmoid(x);
    case ActivationType::kSwish: return x * activation_sigmoid(alpha * x);
    case ActivationType::kGeluErf: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case ActivationType::kGeluTanh: {
      const float k = 0.79788456080286536f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    case ActivationType::kMish: {
      const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
      return x * std::tanh(sp);
    }
    case ActivationType::kSoftsign: return x / (1.0f + std::fabs(x));
    case ActivationType::kCelu: return std::max(0.0f, x) + std::min(0.0f, alpha * (std::exp(x / alpha) - 1.0f));
    case ActivationType::kThresholdedRelu: return x > alpha ? x : 0.0f;
  }
  return x;
}

// A fused post-op as read from a layer's `activation`, `activation_alpha`, `activation_beta`.
struct PostOp {
  bool enabled = false;
  ActivationType kind = ActivationType::kRelu;
  float alpha = 0.0f;
  float beta = 0.0f;
  float apply(float x) const { return enabled ? apply_activation(kind, x, alpha, beta) : x; }
};

// Reads the fused post-op attributes of a layer (Convolution, Deconvolution, Gemm).
inline PostOp read_post_op(const Layer& layer) {
  PostOp p;
  const std::string kind = layer.attrs().get_string("activation", "");
  if (kind.empty()) return p;
  p.enabled = true;
  p.kind = parse_activation_type(kind);
  p.alpha = static_cast<float>(layer.attrs().get_float("activation_alpha", 0.0));
  p.beta = static_cast<float>(layer.attrs().get_float("activation_beta", 0.0));
  return p;
}

}  // namespace kiln
