// The device side of the builder's kernel timing on CUDA (CudaBackend::time_runs): a one-thread
// kernel that keeps the stream busy for a given time, so that the runs the host enqueues after it
// queue up on the device and then run back to back. Events recorded around them then measure the
// device's time only, not the host's launch cost (which at batch 1 is as large as the kernels).
#include <cuda_runtime.h>

#include <cstdint>

#include "src/backends/cuda/cuda_common.h"

namespace kiln::cuda {
namespace {

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_time_ns();
  while (global_time_ns() - start < ns) __nanosleep(500);
}

}  // namespace

void launch_spin(cudaStream_t stream, double ms) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(ms * 1e6));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
