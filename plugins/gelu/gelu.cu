// CUDA kernels of GELU (float32, float16 computed in float): the shared element-wise kernel
// (plugins/common/unary_cuda.cuh) with two ops.
//
// erf (float32 and float16) and tanh (float16): the math is in gelu_approx.h, shared with the host
// test that checks it against double precision (gelu_approx_test.cpp). One reciprocal and one 2^x
// per element, no division or branch: about 30 instructions (float32) and 13 (float16) for erf,
// 9 for tanh in float16, so the kernels stay memory-bound.
//
// tanh, float32: the CPU kernel's x * sigmoid(2u), symmetric form (gelu_cpu.cpp), with u evaluated
// by __fmul_rn / __fadd_rn in the CPU's order so that no fma contraction changes u (an ulp of u
// moves e^-2u by 2|u| ulp); only e^ differs by a few ulp.
#include "plugins/common/unary_cuda.cuh"
#include "plugins/gelu/gelu.h"
#include "plugins/gelu/gelu_approx.h"

namespace kiln::plugins {
namespace {

constexpr float kSqrt2OverPi = 0.7978846f;
constexpr float kCubic = 0.044715f;

struct GeluErfOp {
  // The float16 vector path (8 elements of 13 instructions, interleaved) needs 33+ registers:
  // at 32 it spilled. 6 blocks of 256 threads leave it 40.
  template <typename T>
  static constexpr int kBlocksPerSmFor = std::is_same_v<T, __half> ? 6 : cuda::kBlocksPerSm;
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    if constexpr (std::is_same_v<T, float>) {
      return gelu_math::gelu_erf_f32(x);
    } else {
      return gelu_math::gelu_erf_f16(x);
    }
  }
};

struct GeluTanhOp {
  template <typename T>
  __device__ __forceinline__ float apply(float x) const {
    if constexpr (std::is_same_v<T, float>) {
      const float cube = __fmul_rn(__fmul_rn(__fmul_rn(kCubic, x), x), x);
      const float u = __fmul_rn(kSqrt2OverPi, __fadd_rn(x, cube));
      const float e = cuda::exp_for<T>(-2.0f * fabsf(u));
      return x * cuda::divide_for<T>(u >= 0.0f ? 1.0f : e, 1.0f + e);
    } else {
      return gelu_math::gelu_tanh_f16(x);
    }
  }
};

}  // namespace

int gelu_cuda(const void* x, void* y, int64_t n, DataType type, GeluApproximation approximation, void* stream) {
  if (approximation == GeluApproximation::kTanh) return cuda::launch_unary(x, y, n, type, stream, GeluTanhOp{});
  return cuda::launch_unary(x, y, n, type, stream, GeluErfOp{});
}

}  // namespace kiln::plugins
