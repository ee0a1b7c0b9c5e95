// CUDA test helpers for the element-wise built-in plugins (plugins/<name>/<name>_cuda_test.cpp):
// run a plugin through enqueue on a GPU in float32 or float16, at chosen element offsets from an
// aligned allocation, with guard bytes around the output, and compare with the plugin's own CPU
// kernel (itself checked against double precision by <name>_test.cpp). Only for CUDA builds;
// tests skip when no GPU is present.
#pragma once

#ifdef KILN_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/plugin.h"
#include "plugins/common/unary_plugin_test_util.h"
#include "src/core/half.h"

namespace kiln::plugins::testing {

inline bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define KILN_SKIP_WITHOUT_GPU() \
  if (!::kiln::plugins::testing::cuda_device_available()) GTEST_SKIP() << "no CUDA device"

#define KILN_CUDA_CHECK(call)                                                                      \
  do {                                                                                             \
    const cudaError_t kiln_cuda_err_ = (call);                                                     \
    ASSERT_EQ(kiln_cuda_err_, cudaSuccess) << #call << ": " << cudaGetErrorString(kiln_cuda_err_); \
  } while (0)

constexpr unsigned char kGuardByte = 0x7f;
constexpr int64_t kGuardElements = 64;

struct CudaRun {
  int code = -1;               // enqueue's return value
  std::vector<float> x_seen;   // the input as the kernel saw it (rounded to half for float16)
  std::vector<float> y;        // the output, widened to float
  bool guards_intact = false;  // bytes around the output untouched
};

struct CudaRunOptions {
  DataType type = DataType::kFloat32;
  TensorFormat format = TensorFormat::kLinear;
  int64_t in_offset = 0;  // elements past a 256-byte aligned address
  int64_t out_offset = 0;
  bool in_place = false;       // output pointer = input pointer
  bool graph_capture = false;  // enqueue inside stream capture, then run the graph
};

// Runs `plugin` on the current CUDA device over x (rank-1 of x.size() elements, as dims
// {x.size()}) on a fresh non-blocking stream. Fails the test on CUDA API errors.
inline void run_cuda(Plugin& plugin, const std::vector<float>& x, const CudaRunOptions& options, CudaRun& run) {
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t esize = data_type_size(options.type);
  const bool half_type = options.type == DataType::kFloat16;

  // Host input in the element type.
  std::vector<unsigned char> host_in(static_cast<size_t>(n) * esize);
  run.x_seen.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (half_type) {
      const half h(x[static_cast<size_t>(i)]);
      std::memcpy(&host_in[static_cast<size_t>(i) * 2], &h.bits, 2);
      run.x_seen[static_cast<size_t>(i)] = static_cast<float>(h);
    } else {
      std::memcpy(&host_in[static_cast<size_t>(i) * 4], &x[static_cast<size_t>(i)], 4);
      run.x_seen[static_cast<size_t>(i)] = x[static_cast<size_t>(i)];
    }
  }

  const int64_t in_elems = options.in_offset + n + kGuardElements;
  const int64_t out_elems = options.out_offset + n + kGuardElements;
  void* d_in = nullptr;
  void* d_out = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&d_in, static_cast<size_t>(in_elems) * esize));
  KILN_CUDA_CHECK(cudaMalloc(&d_out, static_cast<size_t>(out_elems) * esize));
  std::unique_ptr<void, void (*)(void*)> free_in(d_in, [](void* p) { cudaFree(p); });
  std::unique_ptr<void, void (*)(void*)> free_out(d_out, [](void* p) { cudaFree(p); });
  KILN_CUDA_CHECK(cudaMemset(d_in, kGuardByte, static_cast<size_t>(in_elems) * esize));
  KILN_CUDA_CHECK(cudaMemset(d_out, kGuardByte, static_cast<size_t>(out_elems) * esize));
  char* in_ptr = static_cast<char*>(d_in) + options.in_offset * static_cast<int64_t>(esize);
  char* out_ptr =
      options.in_place ? in_ptr : static_cast<char*>(d_out) + options.out_offset * static_cast<int64_t>(esize);
  KILN_CUDA_CHECK(cudaMemcpy(in_ptr, host_in.data(), host_in.size(), cudaMemcpyHostToDevice));
  // The memsets and the copy run on the legacy default stream, which the plugin's non-blocking
  // stream does not wait for; a copy from pageable memory may return before its last DMA lands
  // (the kernel then read guard bytes: NaN in the tail of n=1000003 on an H100).
  KILN_CUDA_CHECK(cudaDeviceSynchronize());

  cudaStream_t stream = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> destroy_stream(stream,
                                                                      [](cudaStream_t s) { cudaStreamDestroy(s); });

  PluginTensorDesc desc;
  desc.type = options.type;
  desc.format = options.format;
  desc.dims = Dims{n};
  const void* inputs[] = {in_ptr};
  void* outputs[] = {out_ptr};
  PluginExecContext exec;
  exec.device = DeviceType::kCUDA;
  exec.stream = stream;
  plugin.set_target_device(DeviceType::kCUDA);

  if (options.graph_capture) {
    // Global capture mode: a launch on the legacy default stream or a device synchronization
    // inside enqueue fails the capture.
    KILN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    run.code = plugin.enqueue({desc}, {desc}, inputs, outputs, nullptr, exec);
    cudaGraph_t graph = nullptr;
    KILN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t graph_exec = nullptr;
    KILN_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
    KILN_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(graph_exec);
    cudaGraphDestroy(graph);
  } else {
    run.code = plugin.enqueue({desc}, {desc}, inputs, outputs, nullptr, exec);
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  KILN_CUDA_CHECK(cudaGetLastError());

  // Read back the whole output allocation (or the input one, in place) to check the guards.
  const int64_t total = options.in_place ? in_elems : out_elems;
  const int64_t offset = options.in_place ? options.in_offset : options.out_offset;
  std::vector<unsigned char> host_out(static_cast<size_t>(total) * esize);
  KILN_CUDA_CHECK(
      cudaMemcpy(host_out.data(), options.in_place ? d_in : d_out, host_out.size(), cudaMemcpyDeviceToHost));
  run.guards_intact = true;
  for (int64_t i = 0; i < total; ++i) {
    if (i >= offset && i < offset + n) continue;
    for (size_t b = 0; b < esize; ++b) {
      if (host_out[static_cast<size_t>(i) * esize + b] != kGuardByte) run.guards_intact = false;
    }
  }
  run.y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char* p = &host_out[static_cast<size_t>(offset + i) * esize];
    if (half_type) {
      half h;
      std::memcpy(&h.bits, p, 2);
      run.y[static_cast<size_t>(i)] = static_cast<float>(h);
    } else {
      std::memcpy(&run.y[static_cast<size_t>(i)], p, 4);
    }
  }
}

// float32: within 1e-5 relative of the CPU kernel; below ~1e-36 the GPU flushes subnormal
// intermediates to zero (--use_fast_math), so an absolute floor covers those results.
// float16: the output's own rounding is 4.9e-4; 1e-2 relative, with a floor for fp16 subnormals.
inline Tolerance cuda_tolerance(DataType type) {
  return type == DataType::kFloat16 ? relative_tolerance(1e-2, 1e-6) : relative_tolerance(1e-5, 1e-36);
}

// Runs `plugin` on CUDA with `options` and compares with the CPU kernel of a CPU clone of the same
// plugin on the same (type-rounded) inputs; also checks the return code and the guards.
inline void expect_cuda_matches_cpu(const Plugin& plugin, const std::vector<float>& x, const CudaRunOptions& options,
                                    const std::string& what) {
  SCOPED_TRACE(plugin.type() + " " + what + " " + to_string(options.type) + " n=" + std::to_string(x.size()) +
               " offsets " + std::to_string(options.in_offset) + "/" + std::to_string(options.out_offset) +
               (options.in_place ? " in place" : "") + (options.graph_capture ? " graph capture" : ""));
  std::unique_ptr<Plugin> gpu = plugin.clone();
  std::unique_ptr<Plugin> cpu = plugin.clone();
  CudaRun run;
  run_cuda(*gpu, x, options, run);
  ASSERT_EQ(run.code, 0);
  EXPECT_TRUE(run.guards_intact) << "the kernel wrote outside its output";
  const std::vector<float> expected = run_cpu(*cpu, run.x_seen, 2);
  ASSERT_EQ(run.y.size(), expected.size());
  EXPECT_TRUE(matches_expected(
      run.x_seen.data(), run.y.data(), static_cast<int64_t>(expected.size()),
      [&](int64_t i) { return static_cast<double>(expected[static_cast<size_t>(i)]); }, cuda_tolerance(options.type)));
}

// The CUDA checks every element-wise plugin runs: float32 and float16; sizes 1, 13, 1000003;
// same and different misalignments (vector path with a scalar head, all-scalar path); in place;
// channels-last; and a run inside stream capture (no default stream, no device sync).
inline void check_cuda_plugin(const Plugin& plugin, float lo = -20.0f, float hi = 20.0f) {
  for (const DataType type : {DataType::kFloat32, DataType::kFloat16}) {
    for (const int64_t n : {int64_t{1}, int64_t{13}, int64_t{1000003}}) {
      CudaRunOptions options;
      options.type = type;
      expect_cuda_matches_cpu(plugin, make_inputs(n, static_cast<uint64_t>(n), lo, hi), options, "sizes");
    }
    const std::vector<float> x = make_inputs(4099, 17, lo, hi);
    for (const auto& [in_offset, out_offset] :
         {std::pair{1, 1}, std::pair{7, 7}, std::pair{1, 0}, std::pair{0, 3}, std::pair{2, 6}}) {
      CudaRunOptions options;
      options.type = type;
      options.in_offset = in_offset;
      options.out_offset = out_offset;
      expect_cuda_matches_cpu(plugin, x, options, "misaligned");
    }
    CudaRunOptions in_place;
    in_place.type = type;
    in_place.in_offset = 3;
    in_place.in_place = true;
    expect_cuda_matches_cpu(plugin, x, in_place, "in place");
    CudaRunOptions channels_last;
    channels_last.type = type;
    channels_last.format = TensorFormat::kChannelsLast;
    expect_cuda_matches_cpu(plugin, x, channels_last, "channels last");
    CudaRunOptions captured;
    captured.type = type;
    captured.graph_capture = true;
    expect_cuda_matches_cpu(plugin, x, captured, "graph");
  }
}

}  // namespace kiln::plugins::testing

#endif  // KILN_HAVE_CUDA
