// CPU kernels of GELU, float32, contiguous, any n, any alignment of a float. Both forms are
// rewritten to avoid the cancellation in 1 + erf / 1 + tanh for negative x (which loses all
// digits below x ~ -5 in float):
//   erf:  0.5x(1 + erf(x/sqrt2))                  = 0.5x * erfc(-x/sqrt2)
//   tanh: 0.5x(1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715x^3)  = x * sigmoid(2u)
// with the sigmoid in its symmetric form (e = exp(-|2u|); 1/(1 + e) for u >= 0, e/(1 + e) for
// u < 0), which neither cancels nor overflows down to the end of the normal float range.
#include <cmath>

#include "plugins/gelu/gelu.h"
#include "src/backends/cpu/cpu_utils.h"

namespace kiln::plugins {
namespace {

constexpr float kSqrtHalf = 0.70710677f;    // 1/sqrt(2)
constexpr float kSqrt2OverPi = 0.7978846f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

void gelu_erf_cpu(const float* x, float* y, int64_t n, int num_threads) {
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      y[i] = 0.5f * v * std::erfc(-v * kSqrtHalf);
    }
  });
}

void gelu_tanh_cpu(const float* x, float* y, int64_t n, int num_threads) {
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
      const float e = std::exp(-2.0f * std::fabs(u));
      y[i] = v * ((u >= 0.0f ? 1.0f : e) / (1.0f + e));
    }
  });
}

}  // namespace

void gelu_cpu(const float* x, float* y, int64_t n, GeluApproximation approximation, int num_threads) {
  if (approximation == GeluApproximation::kTanh) {
    gelu_tanh_cpu(x, y, n, num_threads);
  } else {
    gelu_erf_cpu(x, y, n, num_threads);
  }
}

}  // namespace kiln::plugins
