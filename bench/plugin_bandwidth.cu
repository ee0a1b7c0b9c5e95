// Memory bandwidth of kiln's element-wise built-in plugins on CUDA, against a device-to-device
// cudaMemcpyAsync of the same tensor, in one run on the same GPU.
//
// Each plugin is created the way kiln creates it (PluginRegistry::find -> create) and run
// through Plugin::enqueue on a non-blocking stream, in float32 and float16, over a 256 MB tensor
// (2^26 float32 or 2^27 float16 elements). Plugin launches and copies alternate; each is timed
// with its own pair of CUDA events after a warm-up, and the median of --iters runs is reported as
// effective bandwidth = (bytes read + bytes written) / time. The ratio plugin / copy should be
// >= 0.90 (element-wise kernels are memory-bound). The first 4096 outputs are checked against the
// plugin's CPU kernel, so a fast but wrong kernel cannot pass.
//
//   kiln_plugin_bandwidth [--strict] [--iters N] [--mb M]
//     --strict   exit 1 when any ratio is below 0.90 (default: report only)
//     --iters N  timed runs per measurement (default 50)
//     --mb M     tensor size in MiB (default 256)
// Exits 2 on errors (CUDA failure, enqueue failure, wrong results).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/plugin.h"
#include "kiln/types.h"

namespace {

constexpr double kTargetRatio = 0.90;
constexpr int kWarmup = 5;
constexpr int64_t kCheckElements = 4096;

#define BENCH_CUDA(call)                                                                                  \
  do {                                                                                                    \
    const cudaError_t bench_err_ = (call);                                                                \
    if (bench_err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(bench_err_)); \
      std::exit(2);                                                                                       \
    }                                                                                                     \
  } while (0)

struct Case {
  const char* plugin;
  const char* label;
  kiln::PluginFieldCollection fields;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  kiln::PluginFieldCollection swish;
  swish.add(kiln::PluginField::float32("temperature", {1.5f}));
  c.push_back({"TemperatureSwish", "TemperatureSwish", swish});
  kiln::PluginFieldCollection relu;
  relu.add(kiln::PluginField::float32("threshold", {0.25f}));
  c.push_back({"ThresholdReLU", "ThresholdReLU", relu});
  kiln::PluginFieldCollection erf;
  erf.add(kiln::PluginField::string("approximation", "erf"));
  c.push_back({"GELU", "GELU(erf)", erf});
  kiln::PluginFieldCollection tanh_form;
  tanh_form.add(kiln::PluginField::string("approximation", "tanh"));
  c.push_back({"GELU", "GELU(tanh)", tanh_form});
  c.push_back({"Mish", "Mish", {}});
  return c;
}

// Values in [-8, 8) from a hash of the index: the transcendental paths all get exercised.
template <typename T>
__global__ void fill_kernel(T* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (h >> 8) * (16.0f / 16777216.0f) - 8.0f;
    if constexpr (std::is_same_v<T, float>) {
      x[i] = v;
    } else {
      x[i] = __float2half_rn(v);
    }
  }
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (static_cast<double>(v[m - 1]) + v[m]);
}

// Compares the first outputs with the plugin's CPU kernel on the same (type-rounded) inputs.
bool check_outputs(const kiln::Plugin& plugin, kiln::DataType type, const void* d_x, const void* d_y) {
  const size_t es = kiln::data_type_size(type);
  std::vector<unsigned char> hx(kCheckElements * es), hy(kCheckElements * es);
  BENCH_CUDA(cudaMemcpy(hx.data(), d_x, hx.size(), cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(hy.data(), d_y, hy.size(), cudaMemcpyDeviceToHost));
  std::vector<float> x(kCheckElements), y(kCheckElements), ref(kCheckElements);
  for (int64_t i = 0; i < kCheckElements; ++i) {
    if (type == kiln::DataType::kFloat16) {
      __half hxi, hyi;
      std::memcpy(&hxi, &hx[i * 2], 2);
      std::memcpy(&hyi, &hy[i * 2], 2);
      x[i] = __half2float(hxi);
      y[i] = __half2float(hyi);
    } else {
      std::memcpy(&x[i], &hx[i * 4], 4);
      std::memcpy(&y[i], &hy[i * 4], 4);
    }
  }
  std::unique_ptr<kiln::Plugin> cpu = plugin.clone();
  cpu->set_target_device(kiln::DeviceType::kCPU);
  kiln::PluginTensorDesc desc;
  desc.dims = kiln::Dims{kCheckElements};
  const void* in[] = {x.data()};
  void* out[] = {ref.data()};
  kiln::PluginExecContext exec;  // CPU, one thread
  if (cpu->enqueue({desc}, {desc}, in, out, nullptr, exec) != 0) return false;
  const double rtol = type == kiln::DataType::kFloat16 ? 1e-2 : 1e-5;
  const double atol = type == kiln::DataType::kFloat16 ? 1e-6 : 1e-36;
  for (int64_t i = 0; i < kCheckElements; ++i) {
    if (!(std::fabs(static_cast<double>(y[i]) - ref[i]) <= rtol * std::fabs(ref[i]) + atol)) {
      std::fprintf(stderr, "%s: output %lld is %.9g, the CPU kernel gives %.9g (x = %.9g)\n", plugin.type().c_str(),
                   static_cast<long long>(i), y[i], ref[i], x[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool strict = false;
  int iters = 50;
  int64_t mib = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--strict") {
      strict = true;
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--mb" && i + 1 < argc) {
      mib = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--strict] [--iters N] [--mb MiB]\n", argv[0]);
      return 2;
    }
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;

  int device = 0;
  BENCH_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s (%d SMs), tensor %lld MiB, median of %d runs after %d warm-up\n\n", prop.name,
              prop.multiProcessorCount, static_cast<long long>(mib), iters, kWarmup);

  void* d_x = nullptr;
  void* d_y = nullptr;
  void* d_copy = nullptr;
  BENCH_CUDA(cudaMalloc(&d_x, bytes));
  BENCH_CUDA(cudaMalloc(&d_y, bytes));
  BENCH_CUDA(cudaMalloc(&d_copy, bytes));
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> events(4 * static_cast<size_t>(iters));
  for (cudaEvent_t& e : events) BENCH_CUDA(cudaEventCreate(&e));

  std::printf("%-18s %-8s %10s %10s %7s  %s\n", "plugin", "dtype", "GB/s", "copy GB/s", "ratio", "");
  bool failed = false, below_target = false;
  for (const kiln::DataType type : {kiln::DataType::kFloat32, kiln::DataType::kFloat16}) {
    const int64_t n = static_cast<int64_t>(bytes / kiln::data_type_size(type));
    if (type == kiln::DataType::kFloat32) {
      fill_kernel<float><<<prop.multiProcessorCount * 8, 256, 0, stream>>>(static_cast<float*>(d_x), n);
    } else {
      fill_kernel<__half><<<prop.multiProcessorCount * 8, 256, 0, stream>>>(static_cast<__half*>(d_x), n);
    }
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(stream));

    for (const Case& c : cases()) {
      const kiln::PluginCreator* creator = kiln::PluginRegistry::instance().find(c.plugin);
      if (creator == nullptr) {
        std::fprintf(stderr, "plugin '%s' is not registered\n", c.plugin);
        return 2;
      }
      const std::string layer = std::string("bench_") + c.label;
      std::unique_ptr<kiln::Plugin> plugin =
          creator->create(layer, kiln::PluginRegistry::instance().resolve_fields(*creator, c.fields, layer));
      plugin->set_target_device(kiln::DeviceType::kCUDA);
      kiln::PluginTensorDesc desc;
      desc.type = type;
      desc.dims = kiln::Dims{n};
      const void* inputs[] = {d_x};
      void* outputs[] = {d_y};
      kiln::PluginExecContext exec;
      exec.device = kiln::DeviceType::kCUDA;
      exec.stream = stream;

      const auto run_plugin = [&] {
        if (plugin->enqueue({desc}, {desc}, inputs, outputs, nullptr, exec) != 0) {
          std::fprintf(stderr, "%s %s: enqueue failed\n", c.label, kiln::to_string(type));
          std::exit(2);
        }
      };
      const auto run_copy = [&] { BENCH_CUDA(cudaMemcpyAsync(d_copy, d_x, bytes, cudaMemcpyDeviceToDevice, stream)); };

      for (int w = 0; w < kWarmup; ++w) {
        run_plugin();
        run_copy();
      }
      for (int it = 0; it < iters; ++it) {
        cudaEvent_t* e = &events[4 * static_cast<size_t>(it)];
        BENCH_CUDA(cudaEventRecord(e[0], stream));
        run_plugin();
        BENCH_CUDA(cudaEventRecord(e[1], stream));
        BENCH_CUDA(cudaEventRecord(e[2], stream));
        run_copy();
        BENCH_CUDA(cudaEventRecord(e[3], stream));
      }
      BENCH_CUDA(cudaStreamSynchronize(stream));
      std::vector<float> plugin_ms(static_cast<size_t>(iters)), copy_ms(static_cast<size_t>(iters));
      for (int it = 0; it < iters; ++it) {
        cudaEvent_t* e = &events[4 * static_cast<size_t>(it)];
        BENCH_CUDA(cudaEventElapsedTime(&plugin_ms[static_cast<size_t>(it)], e[0], e[1]));
        BENCH_CUDA(cudaEventElapsedTime(&copy_ms[static_cast<size_t>(it)], e[2], e[3]));
      }
      const double moved = 2.0 * static_cast<double>(bytes);  // read + write
      const double plugin_gbs = moved / (median(plugin_ms) * 1e-3) / 1e9;
      const double copy_gbs = moved / (median(copy_ms) * 1e-3) / 1e9;
      const double ratio = plugin_gbs / copy_gbs;
      const bool correct = check_outputs(*plugin, type, d_x, d_y);
      failed = failed || !correct;
      below_target = below_target || ratio < kTargetRatio;
      std::printf("%-18s %-8s %10.1f %10.1f %7.3f  %s\n", c.label, kiln::to_string(type), plugin_gbs, copy_gbs, ratio,
                  !correct               ? "WRONG RESULTS"
                  : ratio < kTargetRatio ? "below 0.90"
                                         : "");
    }
  }

  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaFree(d_x);
  cudaFree(d_y);
  cudaFree(d_copy);
  if (failed) return 2;
  if (strict && below_target) return 1;
  return 0;
}
