// CUDA kernel of the SigmoidGate example plugin: y = alpha * a * sigmoid(b) + beta (mode 0) or
// a * sigmoid(b) (mode 1), float32, a, b and y contiguous with one layout (element-wise, so which
// layout does not matter). Launched on the stream kiln gives the plugin, never on the default
// stream, and without synchronizing: kiln may capture it in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void sigmoid_gate_kernel(const float* a, const float* b, float* y, int64_t n, float alpha, float beta,
                                    int mode) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gate = a[i] / (1.0f + expf(-b[i]));  // the CPU kernel's formula, for matching results
    y[i] = mode == 1 ? gate : alpha * gate + beta;
  }
}

}  // namespace

int sigmoid_gate_cuda(const float* a, const float* b, float* y, int64_t n, float alpha, float beta, int mode,
                      void* stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const int blocks = static_cast<int>(n / threads + 1 < 65535 ? n / threads + 1 : 65535);
  sigmoid_gate_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(a, b, y, n, alpha, beta, mode);
  return static_cast<int>(cudaGetLastError());
}
