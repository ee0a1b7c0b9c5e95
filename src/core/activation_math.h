// Scalar definitions of every activation kind (docs/layers.md), shared by the CPU reference
// kernels, fused post-ops and the element-wise fusion interpreter. Every path computes in float
// except the float64 reference, which uses the same formulas in double (activation_value<double>).
#pragma once

#include <algorithm>
#include <cmath>

#include "kiln/network.h"

namespace kiln {

// The formulas, for T = float (what every float32/float16 path computes) and T = double (the
// float64 reference). Constants are written as double literals: each one converts to exactly the
// float the former float literal gave (checked below), so the float path is bit-identical.
template <typename T>
inline T activation_sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
inline T activation_value(ActivationType kind, T x, T alpha, T beta) {
  constexpr T kZero = T(0), kOne = T(1), kHalf = T(0.5);
  switch (kind) {
    case ActivationType::kRelu:
      return x > kZero ? x : kZero;
    case ActivationType::kSigmoid:
      return activation_sigmoid(x);
    case ActivationType::kTanh:
      return std::tanh(x);
    case ActivationType::kLeakyRelu:
      return x >= kZero ? x : alpha * x;
    case ActivationType::kElu:
      return x >= kZero ? x : alpha * (std::exp(x) - kOne);
    case ActivationType::kSelu:
      return beta * (x > kZero ? x : alpha * (std::exp(x) - kOne));
    case ActivationType::kSoftplus:
      return x > T(20) ? x : std::log1p(std::exp(x));
    case ActivationType::kClip:
      return std::min(std::max(x, alpha), beta);
    case ActivationType::kHardSigmoid:
      return std::max(kZero, std::min(kOne, alpha * x + beta));
    case ActivationType::kHardSwish:
      return x * std::max(kZero, std::min(kOne, x / T(6) + kHalf));
    case ActivationType::kSilu:
      return x * activation_sigmoid(x);
    case ActivationType::kSwish:
      return x * activation_sigmoid(alpha * x);
    case ActivationType::kGeluErf:
      return kHalf * x * (kOne + std::erf(x * T(0.70710678118654752)));
    case ActivationType::kGeluTanh: {
      const T k = T(0.79788456080286536);  // sqrt(2/pi)
      return kHalf * x * (kOne + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }
    case ActivationType::kMish: {
      const T sp = x > T(20) ? x : std::log1p(std::exp(x));
      return x * std::tanh(sp);
    }
    case ActivationType::kSoftsign:
      return x / (kOne + std::fabs(x));
    case ActivationType::kCelu:
      return std::max(kZero, x) + std::min(kZero, alpha * (std::exp(x / alpha) - kOne));
    case ActivationType::kThresholdedRelu:
      return x > alpha ? x : kZero;
  }
  return x;
}
static_assert(static_cast<float>(0.70710678118654752) == 0.70710678118654752f &&
                  static_cast<float>(0.79788456080286536) == 0.79788456080286536f &&
                  static_cast<float>(0.044715) == 0.044715f,
              "the float path must keep the constants it always had");

inline float activation_sigmoid(float x) { return activation_sigmoid<float>(x); }
inline float apply_activation(ActivationType kind, float x, float alpha, float beta) {
  return activation_value<float>(kind, x, alpha, beta);
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
