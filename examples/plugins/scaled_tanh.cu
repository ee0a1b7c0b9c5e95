// CUDA kernel of the ScaledTanh example plugin: y = alpha * tanh(beta * x), float32, contiguous
// (the layout does not matter for an element-wise op). Launched on the stream kiln gives the
// plugin, never on the default stream, and without synchronizing: kiln may capture it in a graph.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void scaled_tanh_kernel(const float* x, float* y, int64_t n, float alpha, float beta) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = alpha * tanhf(beta * x[i]);
  }
}

}  // namespace

int scaled_tanh_cuda(const float* x, float* y, int64_t n, float alpha, float beta, void* stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const int blocks = static_cast<int>(n / threads + 1 < 65535 ? n / threads + 1 : 65535);
  scaled_tanh_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n, alpha, beta);
  return static_cast<int>(cudaGetLastError());
}
