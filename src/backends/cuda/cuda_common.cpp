// Status-to-error conversion and per-thread library handles of the CUDA backend (cuda_common.h).
#include "src/backends/cuda/cuda_common.h"

#include <map>
#include <memory>

#include "src/backends/backend.h"

namespace kiln::cuda {
namespace {

std::string where(const char* call, const char* file, int line) {
  std::string f = file;
  const auto slash = f.rfind("src/");
  if (slash != std::string::npos) f = f.substr(slash);
  return std::string(call) + " (" + f + ":" + std::to_string(line) + ")";
}

int current_device() {
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

struct Handles {
  std::map<int, cudnnHandle_t> cudnn;
  std::map<int, cublasLtHandle_t> lt;
  ~Handles() { reset(); }
  void reset() {
    if (cudnn.empty() && lt.empty()) return;
    // Destroying a handle frees device memory: not while another thread captures (backend.h).
    std::lock_guard<std::recursive_mutex> lock(device_lifecycle_mutex());
    for (auto& [d, h] : cudnn) cudnnDestroy(h);
    for (auto& [d, h] : lt) cublasLtDestroy(h);
    cudnn.clear();
    lt.clear();
  }
};

Handles& thread_handles() {
  thread_local Handles handles;
  return handles;
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky launch error so the next call starts clean
  throw Error(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ") in " +
              where(call, file, line));
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  throw Error(std::string("cuDNN error ") + cudnnGetErrorString(status) + " in " + where(call, file, line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(std::string("cuBLASLt error ") + std::to_string(static_cast<int>(status)) + " in " +
              where(call, file, line));
}

void reset_thread_handles() noexcept { thread_handles().reset(); }

cudnnHandle_t cudnn_handle() {
  auto& m = thread_handles().cudnn;
  const int d = current_device();
  auto it = m.find(d);
  if (it != m.end()) return it->second;
  cudnnHandle_t h = nullptr;
  KILN_CUDNN_CHECK(cudnnCreate(&h));
  m[d] = h;
  return h;
}

cublasLtHandle_t cublaslt_handle() {
  auto& m = thread_handles().lt;
  const int d = current_device();
  auto it = m.find(d);
  if (it != m.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  KILN_CUBLAS_CHECK(cublasLtCreate(&h));
  m[d] = h;
  return h;
}

cudnnDataType_t cudnn_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DataType::kFloat16:
      return CUDNN_DATA_HALF;
    case DataType::kFloat64:
      return CUDNN_DATA_DOUBLE;
    case DataType::kInt8:
      return CUDNN_DATA_INT8;
    case DataType::kInt32:
      return CUDNN_DATA_INT32;
    case DataType::kInt64:
      return CUDNN_DATA_INT64;
    case DataType::kUInt8:
      return CUDNN_DATA_UINT8;
    case DataType::kBool:
      return CUDNN_DATA_BOOLEAN;
    case DataType::kString:  // CPU-only types
    case DataType::kInt16:
    case DataType::kUInt16:
    case DataType::kUInt32:
    case DataType::kUInt64:
      break;
  }
  throw Error(std::string("cuDNN does not take data type ") + to_string(t));
}

int compute_capability() {
  static const int cc = [] {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, current_device()));
    return prop.major * 10 + prop.minor;
  }();
  return cc;
}

}  // namespace kiln::cuda
