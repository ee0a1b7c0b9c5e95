// Device versions of kiln's scalar math (the activation kinds of docs/layers.md, in the same
// formulas as src/core/activation_math.h so CUDA and CPU agree to float rounding), shared by the
// element-wise kernels, the fused element-wise interpreter and the epilogues of convolution and
// GEMM. Everything computes in float; fp16 tensors are converted on load and store.
#pragma once

#include <cuda_fp16.h>

#include "kiln/network.h"
#include "src/core/activation_math.h"

// libdevice's accurate tanh: under --use_fast_math tanhf becomes tanh.approx (about 5e-4
// relative error), too coarse for fp32 engines.
extern "C" __device__ float __nv_tanhf(float);

namespace kiln::cuda {

__device__ __forceinline__ float dev_tanh(float x) { return __nv_tanhf(x); }

__device__ __forceinline__ float dev_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__device__ __forceinline__ float dev_softplus(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

__device__ __forceinline__ float dev_activation(ActivationType kind, float x, float alpha, float beta) {
  switch (kind) {
    case ActivationType::kRelu:
      return x > 0.0f ? x : 0.0f;
    case ActivationType::kSigmoid:
      return dev_sigmoid(x);
    case ActivationType::kTanh:
      return dev_tanh(x);
    case ActivationType::kLeakyRelu:
      return x >= 0.0f ? x : alpha * x;
    case ActivationType::kElu:
      return x >= 0.0f ? x : alpha * (expf(x) - 1.0f);
    case ActivationType::kSelu:
      return beta * (x > 0.0f ? x : alpha * (expf(x) - 1.0f));
    case ActivationType::kSoftplus:
      return dev_softplus(x);
    case ActivationType::kClip:
      return fminf(fmaxf(x, alpha), beta);
    case ActivationType::kHardSigmoid:
      return fmaxf(0.0f, fminf(1.0f, alpha * x + beta));
    case ActivationType::kHardSwish:
      return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f));
    case ActivationType::kSilu:
      return x * dev_sigmoid(x);
    case ActivationType::kSwish:
      return x * dev_sigmoid(alpha * x);
    case ActivationType::kGeluErf:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case ActivationType::kGeluTanh: {
      const float k = 0.79788456080286536f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + dev_tanh(k * (x + 0.044715f * x * x * x)));
    }
    case ActivationType::kMish:
      return x * dev_tanh(dev_softplus(x));
    case ActivationType::kSoftsign:
      return x / (1.0f + fabsf(x));
    case ActivationType::kCelu:
      return fmaxf(0.0f, x) + fminf(0.0f, alpha * (expf(x / alpha) - 1.0f));
    case ActivationType::kThresholdedRelu:
      return x > alpha ? x : 0.0f;
  }
  return x;
}

// A fused post-op passed by value to kernels (read on the host with read_post_op()).
struct DevicePostOp {
  bool enabled = false;
  ActivationType kind = ActivationType::kRelu;
  float alpha = 0.0f;
  float beta = 0.0f;
  __device__ __forceinline__ float apply(float x) const { return enabled ? dev_activation(kind, x, alpha, beta) : x; }
};

inline DevicePostOp device_post_op(const PostOp& p) { return DevicePostOp{p.enabled, p.kind, p.alpha, p.beta}; }

}  // namespace kiln::cuda
