// CUDA kernel (tactic "cuda") of Det (src/ir/ops_linalg.h, docs/layers.md), matching the CPU
// reference (linalg_cpu.cpp) operation for operation: each M x M matrix is copied to double (in
// the workspace), factored by Gaussian elimination with partial pivoting (largest magnitude in
// the column; exactly 0 once a pivot column is all zeros), and the determinant is the product
// of the pivots, negated once per row swap. The updates use __dmul_rn / __dsub_rn so that no
// fused multiply-add changes the rounding against the reference.
// One thread per matrix (Det is used on batches of small matrices); the matrices' rows in the
// workspace are the thread's private scratch.
//
// Layout: kLinear only (dense row-major).
#include <cuda_fp16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/kernel.h"
#include "src/ir/ops_linalg.h"

namespace kiln::cuda {
namespace {

__device__ __forceinline__ double load_double(float v) { return static_cast<double>(v); }
__device__ __forceinline__ double load_double(double v) { return v; }
__device__ __forceinline__ double load_double(__half v) { return static_cast<double>(__half2float(v)); }

template <typename T>
__device__ T store_double(double v);
template <>
__device__ float store_double<float>(double v) {
  return static_cast<float>(v);
}
template <>
__device__ double store_double<double>(double v) {
  return v;
}
template <>
__device__ __half store_double<__half>(double v) {
  return __float2half_rn(static_cast<float>(v));
}

template <typename T>
__global__ void det_kernel(const T* __restrict__ x, T* __restrict__ y, double* __restrict__ scratch, int64_t matrices,
                           int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t nn = n * n;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; m < matrices; m += step) {
    const T* src = x + m * nn;
    double* a = scratch + m * nn;
    for (int64_t i = 0; i < nn; ++i) a[i] = load_double(src[i]);
    double det = 1.0;
    for (int64_t k = 0; k < n; ++k) {
      int64_t pivot = k;
      for (int64_t r = k + 1; r < n; ++r) {
        if (fabs(a[r * n + k]) > fabs(a[pivot * n + k])) pivot = r;
      }
      if (a[pivot * n + k] == 0.0) {
        det = 0.0;
        break;
      }
      if (pivot != k) {
        for (int64_t c = 0; c < n; ++c) {
          const double t = a[k * n + c];
          a[k * n + c] = a[pivot * n + c];
          a[pivot * n + c] = t;
        }
        det = -det;
      }
      const double p = a[k * n + k];
      det = __dmul_rn(det, p);
      for (int64_t r = k + 1; r < n; ++r) {
        const double f = __ddiv_rn(a[r * n + k], p);
        for (int64_t c = k + 1; c < n; ++c) a[r * n + c] = __dsub_rn(a[r * n + c], __dmul_rn(f, a[k * n + c]));
      }
    }
    y[m] = store_double<T>(det);
  }
}

class DetCuda : public Kernel {
 public:
  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& d = inputs.at(0).dims;
    if (d.rank() < 2 || d[d.rank() - 1] != d[d.rank() - 2]) {
      throw Error("Det (CUDA): input " + d.to_string() + " is not a batch of square matrices");
    }
    n_ = d[d.rank() - 1];
    matrices_ = outputs.at(0).dims.volume();
    type_ = inputs[0].type;
    workspace_ = static_cast<size_t>(matrices_) * static_cast<size_t>(n_ * n_) * sizeof(double);
  }

  size_t workspace_size() const override { return workspace_; }

  void execute(const KernelContext& ctx) override {
    if (matrices_ == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    if (workspace_ > 0 && (!ctx.workspace || ctx.workspace_size < workspace_)) {
      throw Error("Det (CUDA): missing workspace");
    }
    if (type_ == DataType::kFloat32) return launch<float>(ctx, stream);
    if (type_ == DataType::kFloat16) return launch<__half>(ctx, stream);
    if (type_ == DataType::kFloat64) return launch<double>(ctx, stream);
    throw Error(std::string("Det (CUDA): unsupported data type ") + to_string(type_));
  }

 private:
  template <typename T>
  void launch(const KernelContext& ctx, cudaStream_t stream) const {
    // Small blocks: one thread per matrix, so spread few matrices over many SMs.
    constexpr int kDetBlock = 64;
    det_kernel<T><<<grid_for(matrices_, kDetBlock), kDetBlock, 0, stream>>>(
        ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), static_cast<double*>(ctx.workspace), matrices_, n_);
    KILN_CUDA_CHECK_LAUNCH();
  }

  int64_t n_ = 0, matrices_ = 0;
  DataType type_ = DataType::kFloat32;
  size_t workspace_ = 0;
};

bool det_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || layer.num_outputs() < 1 || !layer.output(0)) return false;
  if (layer.output(0)->format() != TensorFormat::kLinear || inputs[0].format != TensorFormat::kLinear) return false;
  const DataType t = inputs[0].type;
  if (t != DataType::kFloat32 && t != DataType::kFloat16 && t != DataType::kFloat64) return false;
  const Dims& d = inputs[0].dims;
  if (d.rank() < 2) return false;
  const int64_t r = d[d.rank() - 1], c = d[d.rank() - 2];
  return r == c || r < 0 || c < 0;  // a dynamic extent is checked in prepare()
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerDet, "cuda", 100, det_supports,
                                 [](const Layer&) { return std::make_unique<DetCuda>(); }});

}  // namespace kiln::cuda
