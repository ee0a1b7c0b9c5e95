// Deliberately broken CUDA plugins for tests/plugin_check_test.cpp (CUDA builds only; namespace
// "kiln_test"). Both compute y = alpha * x + beta correctly, on the CPU (the checker's reference)
// and on CUDA, and both break stream discipline inside enqueue, which the "cuda graph capture"
// check must catch: "enqueue launched on the default stream or synchronized the device".
//  * BrokenDefaultStream launches on the legacy default stream (0) instead of exec.stream.
//  * BrokenDeviceSync launches on exec.stream, then calls cudaDeviceSynchronize().
// And LazyCudaAffine, a correct plugin with the habit of libraries that set things up on first
// use: the first enqueue at each element count allocates a scratch buffer (cudaMalloc) and fills
// it with a synchronous cudaMemset; later ones only launch. Run under a capture, that first call
// would invalidate the capture; kiln's warm-up run at each new shape keeps it outside
// (tests/cuda_graph_capture_test.cpp).
#include <cuda_runtime.h>

#include <map>

#include "tests/broken_plugins/affine_plugin.h"

namespace kiln::test {
namespace {

__global__ void affine_kernel(const float* x, float* y, int64_t n, float alpha, float beta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + beta;
}

// float32 linear on the CPU and on CUDA; the CUDA kernel is launched by `launch`.
class CudaAffine : public AffinePlugin {
 public:
  using AffinePlugin::AffinePlugin;
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>& out,
              const void* const* inputs, void* const* outputs, void* workspace,
              const PluginExecContext& exec) override {
    if (exec.device == DeviceType::kCPU) return AffinePlugin::enqueue(in, out, inputs, outputs, workspace, exec);
    const int64_t n = in[0].dims.volume();
    const int blocks = static_cast<int>((n + 255) / 256);
    return launch(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]), n, blocks,
                  static_cast<cudaStream_t>(exec.stream));
  }

 protected:
  virtual int launch(const float* x, float* y, int64_t n, int blocks, cudaStream_t stream) = 0;
};

class BrokenDefaultStream final : public CudaAffine {
 public:
  static constexpr const char* kName = "BrokenDefaultStream";
  BrokenDefaultStream(float a, float b) : CudaAffine(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenDefaultStream>(*this); }

 protected:
  int launch(const float* x, float* y, int64_t n, int blocks, cudaStream_t) override {
    affine_kernel<<<blocks, 256>>>(x, y, n, alpha_, beta_);  // the legacy default stream
    return 0;                                                // ignores the launch error, as careless plugins do
  }
};
using BrokenDefaultStreamCreator = AffineCreator<BrokenDefaultStream>;
KILN_REGISTER_PLUGIN(BrokenDefaultStreamCreator);

class BrokenDeviceSync final : public CudaAffine {
 public:
  static constexpr const char* kName = "BrokenDeviceSync";
  BrokenDeviceSync(float a, float b) : CudaAffine(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenDeviceSync>(*this); }

 protected:
  int launch(const float* x, float* y, int64_t n, int blocks, cudaStream_t stream) override {
    affine_kernel<<<blocks, 256, 0, stream>>>(x, y, n, alpha_, beta_);
    cudaDeviceSynchronize();  // "to be safe": stalls every stream and breaks graph capture
    return 0;
  }
};
using BrokenDeviceSyncCreator = AffineCreator<BrokenDeviceSync>;
KILN_REGISTER_PLUGIN(BrokenDeviceSyncCreator);

class LazyCudaAffine final : public CudaAffine {
 public:
  static constexpr const char* kName = "LazyCudaAffine";
  LazyCudaAffine(float a, float b) : CudaAffine(kName, a, b) {}
  LazyCudaAffine(const LazyCudaAffine& o) : CudaAffine(o) {}  // a clone sets itself up again
  ~LazyCudaAffine() override {
    for (auto& [n, p] : scratch_) cudaFree(p);
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<LazyCudaAffine>(*this); }
  static int setups() { return setups_; }

 protected:
  int launch(const float* x, float* y, int64_t n, int blocks, cudaStream_t stream) override {
    if (!scratch_.count(n)) {  // lazy one-time work per shape: capture-unsafe calls
      void* p = nullptr;
      if (cudaMalloc(&p, static_cast<size_t>(n) * sizeof(float)) != cudaSuccess) return 1;
      if (cudaMemset(p, 0, static_cast<size_t>(n) * sizeof(float)) != cudaSuccess) return 2;
      scratch_[n] = p;
      ++setups_;
    }
    affine_kernel<<<blocks, 256, 0, stream>>>(x, y, n, alpha_, beta_);
    return static_cast<int>(cudaGetLastError());
  }

 private:
  std::map<int64_t, void*> scratch_;
  static inline int setups_ = 0;
};
using LazyCudaAffineCreator = AffineCreator<LazyCudaAffine>;
KILN_REGISTER_PLUGIN(LazyCudaAffineCreator);

// A correct CUDA twin, so the CUDA test also shows the capture check passing.
class GoodCudaAffine final : public CudaAffine {
 public:
  static constexpr const char* kName = "GoodCudaAffine";
  GoodCudaAffine(float a, float b) : CudaAffine(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<GoodCudaAffine>(*this); }

 protected:
  int launch(const float* x, float* y, int64_t n, int blocks, cudaStream_t stream) override {
    affine_kernel<<<blocks, 256, 0, stream>>>(x, y, n, alpha_, beta_);
    return static_cast<int>(cudaGetLastError());
  }
};
using GoodCudaAffineCreator = AffineCreator<GoodCudaAffine>;
KILN_REGISTER_PLUGIN(GoodCudaAffineCreator);

}  // namespace
}  // namespace kiln::test
