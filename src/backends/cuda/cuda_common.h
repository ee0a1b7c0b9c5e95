// Shared helpers of the CUDA backend's kernels: status checks that turn every CUDA, cuDNN and
// cuBLASLt error into a kiln::Error naming the call (the runtime adds the layer), the per-thread
// library handles, launch geometry, and the element-type helpers used by templated kernels.
//
// Kernel contract on CUDA (see src/backends/kernel.h): execute() only enqueues work on
// ctx.stream (a cudaStream_t, never the legacy default stream), never synchronizes, never
// allocates (scratch comes from ctx.workspace, sized by workspace_size()); prepare() may create
// descriptors, query algorithms and allocate long-lived state. Both may throw kiln::Error.
#pragma once

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kiln/error.h"
#include "kiln/types.h"
#include "src/backends/kernel.h"

namespace kiln::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

#define KILN_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                        \
    const cudaError_t kiln_status_ = (call);                                                                  \
    if (kiln_status_ != cudaSuccess) ::kiln::cuda::throw_cuda_error(kiln_status_, #call, __FILE__, __LINE__); \
  } while (0)
#define KILN_CUDNN_CHECK(call)                                                  \
  do {                                                                          \
    const cudnnStatus_t kiln_status_ = (call);                                  \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS)                                   \
      ::kiln::cuda::throw_cudnn_error(kiln_status_, #call, __FILE__, __LINE__); \
  } while (0)
#define KILN_CUBLAS_CHECK(call)                                                  \
  do {                                                                           \
    const cublasStatus_t kiln_status_ = (call);                                  \
    if (kiln_status_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::kiln::cuda::throw_cublas_error(kiln_status_, #call, __FILE__, __LINE__); \
  } while (0)
// After a <<<...>>> launch: reports launch-configuration errors at once (asynchronous faults
// surface at the next synchronization and are reported there).
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())

inline cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// One cuDNN / cuBLASLt handle per host thread and device, created on first use and kept for the
// thread's life. Set the stream before every call (cudnnSetStream): contexts share handles.
cudnnHandle_t cudnn_handle();
cublasLtHandle_t cublaslt_handle();
// Destroys the calling thread's handles (made again on next use): after a failed graph capture,
// so that no state a library set up during it is reused. Never throws.
void reset_thread_handles() noexcept;

// Launch geometry for a grid-stride loop over n elements.
constexpr int kBlock = 256;
inline unsigned grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  const int64_t cap = 65535LL * 8;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// The floating-point types CUDA math kernels support.
inline bool is_cuda_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16; }

// cuDNN data type of a kiln type (throws for types cuDNN does not take).
cudnnDataType_t cudnn_type(DataType t);
// Compute capability major*10+minor of the current device (cached).
int compute_capability();

// Keeps `stream` busy for about `ms` milliseconds (timing_cuda.cu; for CudaBackend::time_runs).
void launch_spin(cudaStream_t stream, double ms);

// The SMs library kernels (cuBLASLt, cuDNN's graph API) should aim at when `streams` contexts run
// the engine at once (ConvParams::concurrent_streams, BuilderConfig::tune_for_streams): the
// current device's SMs / streams, at least 1; 0 (the libraries' default: every SM) for one.
inline int sm_count_target(int64_t streams) {
  if (streams <= 1) return 0;
  int device = 0, n = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return std::max(1, static_cast<int>(n / streams));
}

// Element conversions usable in templated device code: load as float, store from float.
__host__ __device__ inline float to_float(float v) { return v; }
__host__ __device__ inline float to_float(__half v) { return __half2float(v); }
template <typename T>
__host__ __device__ inline T from_float(float v);
template <>
__host__ __device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__host__ __device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

}  // namespace kiln::cuda
