// The CUDA backend: device memory through cudaMalloc (256-byte granules), asynchronous copies
// on the caller's stream, and non-blocking streams. A null stream means "synchronous": the copy is
// done on a private stream and waited for, so kiln never touches the legacy default stream.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "kiln/error.h"
#include "src/backends/backend.h"
#include "src/backends/cuda/cuda_common.h"

namespace kiln {
namespace {

class CudaBackend : public Backend {
 public:
  DeviceType device() const override { return DeviceType::kCUDA; }

  bool available(std::string* why) const override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      cudaGetLastError();
      if (why) {
        *why = e != cudaSuccess
                   ? std::string("no usable CUDA device (") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")"
                   : std::string("no CUDA device found");
      }
      return false;
    }
    return true;
  }

  // Allocation and freeing hold device_lifecycle_mutex (backend.h): cudaFree waits for the
  // device, which would invalidate another thread's capture in progress.
  void* allocate(size_t bytes) override {
    std::lock_guard<std::recursive_mutex> lifecycle(device_lifecycle_mutex());
    count_allocation(bytes);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? (bytes + 255) / 256 * 256 : 256);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      throw Error("out of CUDA device memory allocating " + std::to_string(bytes) + " bytes (" +
                  std::to_string(free_bytes >> 20) + " MiB free of " + std::to_string(total >> 20) +
                  " MiB); lower the profile's max shapes or the batch");
    }
    try {
      record_allocation(p, bytes);  // the books may fail to grow
    } catch (...) {
      cudaFree(p);
      throw;
    }
    return p;
  }
  void release(void* ptr) override {
    if (!ptr) return;
    std::lock_guard<std::recursive_mutex> lifecycle(device_lifecycle_mutex());
    record_release(ptr);
    cudaFree(ptr);
  }
  void* allocate_host(size_t bytes) override {
    check_host_allocation_fault(bytes);
    std::lock_guard<std::recursive_mutex> lifecycle(device_lifecycle_mutex());
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
  }
  void release_host(void* ptr) override {
    if (!ptr) return;
    std::lock_guard<std::recursive_mutex> lifecycle(device_lifecycle_mutex());
    cudaFreeHost(ptr);
  }

  void copy_host_to_device(void* dst, const void* src, size_t bytes, void* stream) override {
    copy(dst, src, bytes, cudaMemcpyHostToDevice, stream);
  }
  void copy_device_to_host(void* dst, const void* src, size_t bytes, void* stream) override {
    copy(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  }
  void copy_device_to_device(void* dst, const void* src, size_t bytes, void* stream) override {
    if (dst == src) return;
    copy(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  }
  void memset_device(void* dst, int value, size_t bytes, void* stream) override {
    if (!bytes) return;
    cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : private_stream();
    KILN_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, s));
    if (!stream) {
      count_synchronization();
      KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }

  void* create_stream() override {
    cudaStream_t s = nullptr;
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void destroy_stream(void* stream) override {
    if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  void synchronize(void* stream) override {
    count_synchronization();
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream ? static_cast<cudaStream_t>(stream) : private_stream()));
  }

  std::string describe() const override {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      cudaGetLastError();
      return "cuda";
    }
    return std::string(prop.name) + " sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  }

  // Device time per run (see Backend::time_runs): one run timed on the host gives the cost of
  // enqueueing; a spin kernel longer than enqueueing all runs holds the stream meanwhile, so the
  // events around the runs see them back to back. If the host is slower than that (preempted),
  // the gap only adds time: the caller takes the median of several measurements.
  double time_runs(void* stream, int runs, const std::function<void()>& enqueue, double* host_ms_per_run) override {
    if (!stream) throw Error("internal: CUDA kernel timing needs a stream");
    runs = std::max(runs, 1);
    const auto s = static_cast<cudaStream_t>(stream);
    KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto t0 = std::chrono::steady_clock::now();
    enqueue();
    const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    struct Events {
      cudaEvent_t start = nullptr, stop = nullptr;
      ~Events() {
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
      }
    } ev;
    KILN_CUDA_CHECK(cudaEventCreate(&ev.start));
    KILN_CUDA_CHECK(cudaEventCreate(&ev.stop));
    cuda::launch_spin(s, std::min(50.0, 0.05 + 2.0 * host_ms * runs));
    KILN_CUDA_CHECK(cudaEventRecord(ev.start, s));
    const auto h0 = std::chrono::steady_clock::now();
    for (int r = 0; r < runs; ++r) enqueue();
    if (host_ms_per_run) {
      *host_ms_per_run =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count() / runs;
    }
    KILN_CUDA_CHECK(cudaEventRecord(ev.stop, s));
    KILN_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0.0f;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    return static_cast<double>(ms) / runs;
  }

  // Copies on several streams at once (BuilderConfig::tune_for_streams): the spin kernel holds
  // streams[0] while the host enqueues every copy's runs, interleaved; the other streams wait for
  // the start event behind it, so all copies start together and share the device as contexts on
  // their own streams do. The time from the start to the last copy's end, per run per copy.
  double time_concurrent_runs(const std::vector<void*>& streams, int runs, const std::function<void(size_t)>& enqueue,
                              double* host_ms_per_run) override {
    if (streams.empty()) throw Error("internal: time_concurrent_runs without streams");
    for (void* st : streams) {
      if (!st) throw Error("internal: CUDA kernel timing needs a stream");
    }
    runs = std::max(runs, 1);
    const size_t n = streams.size();
    const auto s0 = static_cast<cudaStream_t>(streams[0]);
    for (void* st : streams) KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(st)));
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) enqueue(i);
    const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (void* st : streams) KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(st)));
    struct Events {
      std::vector<cudaEvent_t> all;
      ~Events() {
        for (cudaEvent_t e : all) cudaEventDestroy(e);
      }
      cudaEvent_t make(unsigned flags) {
        cudaEvent_t e = nullptr;
        KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
        all.push_back(e);
        return e;
      }
    } ev;
    const cudaEvent_t start = ev.make(cudaEventDefault);
    const cudaEvent_t stop = ev.make(cudaEventDefault);
    std::vector<cudaEvent_t> done;
    for (size_t i = 1; i < n; ++i) done.push_back(ev.make(cudaEventDisableTiming));
    cuda::launch_spin(s0, std::min(50.0, 0.05 + 2.0 * host_ms * runs));
    KILN_CUDA_CHECK(cudaEventRecord(start, s0));
    for (size_t i = 1; i < n; ++i)
      KILN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(streams[i]), start, 0));
    const auto h0 = std::chrono::steady_clock::now();
    for (int r = 0; r < runs; ++r) {
      for (size_t i = 0; i < n; ++i) enqueue(i);
    }
    if (host_ms_per_run) {
      *host_ms_per_run =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count() / (runs * n);
    }
    for (size_t i = 1; i < n; ++i) {
      KILN_CUDA_CHECK(cudaEventRecord(done[i - 1], static_cast<cudaStream_t>(streams[i])));
      KILN_CUDA_CHECK(cudaStreamWaitEvent(s0, done[i - 1], 0));
    }
    KILN_CUDA_CHECK(cudaEventRecord(stop, s0));
    KILN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return static_cast<double>(ms) / (static_cast<double>(runs) * static_cast<double>(n));
  }

  bool supports_graphs() const override { return true; }
  bool is_capturing(void* stream) const override {
    if (!stream) return false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
    return status != cudaStreamCaptureStatusNone;
  }
  void prepare_thread() override {
    cuda::cudnn_handle();
    cuda::cublaslt_handle();
    private_stream();
  }
  void begin_capture(void* stream) override {
    if (!stream) throw Error("CUDA graph capture needs a stream (got the null stream)");
    // Thread-local mode: work other threads enqueue meanwhile is not swept into this graph,
    // and their unsafe calls (cudaMalloc, synchronizations) do not invalidate it.
    KILN_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
  }
  void* end_capture(void* stream) override {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
    if (ended != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // a failed capture is not sticky: leave no error behind for later checks
      throw Error(std::string("CUDA graph capture failed: ") + cudaGetErrorName(ended) + " (" +
                  cudaGetErrorString(ended) + ") in cudaStreamEndCapture");
    }
    return graph;
  }
  void abort_capture(void* stream) noexcept override {
    if (!stream) return;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
      if (graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();
  }
  void recover_after_failed_capture(void* stream) noexcept override {
    if (stream) cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    cudaGetLastError();
    cuda::reset_thread_handles();
  }
  void* instantiate_graph(void* captured) override {
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(captured), 0);
    if (e != cudaSuccess) {
      cudaGetLastError();
      KILN_CUDA_CHECK(e);
    }
    return exec;
  }
  bool update_graph(void* exec, void* captured) override {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t e =
        cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(exec), static_cast<cudaGraph_t>(captured), &info);
    if (e != cudaSuccess) {
      cudaGetLastError();  // cudaErrorGraphExecUpdateFailure: the caller instantiates instead
      return false;
    }
    return true;
  }
  void destroy_captured(void* captured) override {
    if (captured) cudaGraphDestroy(static_cast<cudaGraph_t>(captured));
  }
  void launch_graph(void* graph, void* stream) override {
    KILN_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream)));
  }
  void destroy_graph(void* graph) override {
    if (graph) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  }

  void* create_event() override {
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  void destroy_event(void* event) override {
    if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  void record_event(void* event, void* stream) override {
    KILN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  }
  void event_synchronize(void* event) override {
    KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  double elapsed_ms(void* start, void* end) override {
    float ms = 0.0f;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
    return ms;
  }

 private:
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, void* stream) {
    if (!bytes) return;
    cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : private_stream();
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    if (!stream) {
      count_synchronization();
      KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }

  // One non-blocking stream per host thread for "synchronous" (null-stream) operations.
  static cudaStream_t private_stream() {
    thread_local struct Owned {
      cudaStream_t s = nullptr;
      ~Owned() {
        if (s) cudaStreamDestroy(s);
      }
    } owned;
    if (!owned.s) KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
    return owned.s;
  }
};

struct Registrar {
  Registrar() { BackendRegistry::instance().add(DeviceType::kCUDA, std::make_unique<CudaBackend>()); }
} registrar;

}  // namespace
}  // namespace kiln
