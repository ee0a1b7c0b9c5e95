// CUDA kernel of TemperatureSwish (float32, float16 computed in float): the shared element-wise
// kernel (plugins/common/unary_cuda.cuh) with the CPU kernel's symmetric sigmoid
// (temperature_swish_cpu.cpp); for float32 e^ comes from the accurate ex2 form and the division
// from a correctly rounded reciprocal, matching the CPU kernel to a few ulp.
#include "plugins/common/unary_cuda.cuh"
#include "plugins/temperature_swish/temperature_swish.h"

namespace kiln::plugins {
namespace {

struct TemperatureSwishOp {
  float temperature;
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    const float z = __fmul_rn(temperature, x);
    const float e = cuda::exp_for<T>(-fabsf(z));
    return x * cuda::divide_for<T>(z >= 0.0f ? 1.0f : e, 1.0f + e);
  }
};

}  // namespace

int temperature_swish_cuda(const void* x, void* y, int64_t n, DataType type, float temperature, void* stream) {
  return cuda::launch_unary(x, y, n, type, stream, TemperatureSwishOp{temperature});
}

}  // namespace kiln::plugins
