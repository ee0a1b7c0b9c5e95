// CUDA side of the plugin checker (CUDA builds only; see plugin_check_runner.h): device memory,
// the created stream plugins are given, and the graph-capture check. The stream is created with
// default flags (blocking) on purpose: only then does a launch on the legacy default stream, or a
// device-wide synchronization, inside enqueue invalidate a global-mode capture of that stream,
// which is how the checker catches both.
#include <cuda_runtime_api.h>

#include <string>

#include "kiln/error.h"
#include "src/plugins/plugin_check_runner.h"

namespace kiln::plugin_check {
namespace {

std::string error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("kiln plugin check: ") + what + " failed: " + error_text(e));
  }
}

class CudaDevice final : public CheckDevice {
 public:
  CudaDevice() { check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~CudaDevice() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  DeviceType device() const override { return DeviceType::kCUDA; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void release(void* ptr) override { cudaFree(ptr); }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
  }
  void* stream() override { return stream_; }
  std::string synchronize() override {
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();  // launches on other streams, too
    if (e == cudaSuccess)
      e = cudaGetLastError();
    else
      cudaGetLastError();
    return e == cudaSuccess ? std::string() : error_text(e);
  }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<CheckDevice> make_cuda_device(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (why) *why = e != cudaSuccess ? "no usable CUDA device: " + error_text(e) : "no CUDA device found";
    return nullptr;
  }
  try {
    return std::make_unique<CudaDevice>();
  } catch (const Error& error) {
    if (why) *why = error.what();
    return nullptr;
  }
}

CaptureOutcome capture_and_replay(CheckDevice& device, const std::function<int()>& enqueue,
                                  const std::function<void()>& before_replay) {
  CaptureOutcome out;
  auto stream = static_cast<cudaStream_t>(device.stream());
  cudaGetLastError();
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    out.problem = "cudaStreamBeginCapture failed: " + error_text(e);
    return out;
  }
  int rc = 0;
  try {
    rc = enqueue();
  } catch (...) {
    cudaGraph_t abandoned = nullptr;
    cudaStreamEndCapture(stream, &abandoned);
    if (abandoned) cudaGraphDestroy(abandoned);
    cudaGetLastError();
    throw;
  }
  const cudaError_t during = cudaGetLastError();  // e.g. cudaErrorStreamCaptureImplicit from a launch on stream 0
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream, &graph);
  cudaGetLastError();
  if (e != cudaSuccess || graph == nullptr || rc != 0 || during != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    out.problem = e != cudaSuccess ? "cudaStreamEndCapture: " + error_text(e) : std::string();
    if (during != cudaSuccess)
      out.problem += (out.problem.empty() ? "" : "; ") + std::string("during the capture: ") + error_text(during);
    if (rc != 0)
      out.problem += (out.problem.empty() ? "" : "; ") + std::string("enqueue() returned ") + std::to_string(rc);
    if (out.problem.empty()) out.problem = "the capture produced no graph";
    return out;
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    out.problem = "cudaGraphInstantiate: " + error_text(e);
    return out;
  }
  before_replay();
  e = cudaGraphLaunch(exec, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  cudaGraphExecDestroy(exec);
  if (e != cudaSuccess) {
    cudaGetLastError();
    out.problem = "replaying the captured graph: " + error_text(e);
    return out;
  }
  out.captured = true;
  return out;
}

}  // namespace kiln::plugin_check
