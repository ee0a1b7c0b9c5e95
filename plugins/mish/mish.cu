// CUDA kernel of Mish (float32, float16 computed in float): the shared element-wise kernel
// (plugins/common/unary_cuda.cuh) with the CPU kernel's form y = x * n/(n+2), n = e(e+2),
// e = e^x (mish_cpu.cpp explains it), and y = x from x = 20 on.
#include "plugins/common/unary_cuda.cuh"
#include "plugins/mish/mish.h"

namespace kiln::plugins {
namespace {

struct MishOp {
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    const float e = cuda::exp_for<T>(x);
    const float m = __fmul_rn(e, e + 2.0f);
    return x >= 20.0f ? x : __fmul_rn(x, cuda::divide_for<T>(m, m + 2.0f));
  }
};

}  // namespace

int mish_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) {
  return cuda::launch_unary(x, y, n, type, stream, MishOp{});
}

}  // namespace kiln::plugins
