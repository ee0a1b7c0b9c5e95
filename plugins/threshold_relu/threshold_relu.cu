// CUDA kernel of ThresholdReLU (float32, float16 compared in float): the shared element-wise
// kernel (plugins/common/unary_cuda.cuh) with y = x < t ? t : x, so that NaN stays NaN as on
// the CPU (fmaxf would return t).
#include "plugins/common/unary_cuda.cuh"
#include "plugins/threshold_relu/threshold_relu.h"

namespace kiln::plugins {
namespace {

struct ThresholdReluOp {
  float threshold;
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    return x < threshold ? threshold : x;
  }
};

}  // namespace

int threshold_relu_cuda(const void* x, void* y, int64_t n, DataType type, float threshold, void* stream) {
  return cuda::launch_unary(x, y, n, type, stream, ThresholdReluOp{threshold});
}

}  // namespace kiln::plugins
