// The backend interface: device memory, streams and copies for one device type. The CPU
// backend (src/backends/cpu) uses host memory and runs synchronously; the CUDA backend
// (src/backends/cuda) wraps cudaMalloc / cudaStream_t. Backends register themselves with
// KILN_REGISTER_BACKEND; get_backend throws a clear error for a device not built in or absent.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/types.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType device() const = 0;
  // False when the device is compiled in but not usable on this machine (no GPU).
  virtual bool available(std::string* why = nullptr) const = 0;

  // Device memory, aligned to at least 256 bytes. Throws kiln::Error on failure. Thread-safe.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  // Bytes of device memory this backend has handed out and not released, and the most at
  // once since the process started (what allocate() recorded with record_allocation).
  uint64_t bytes_in_use() const;
  uint64_t peak_bytes_in_use() const;
  // Calls of allocate(), and host waits for the device (synchronize(), copies and memsets with
  // a null stream), since the process started: what tests read to check that a hot path
  // neither allocates nor synchronizes. Thread-safe.
  uint64_t allocation_count() const { return allocations_.load(std::memory_order_relaxed); }
  uint64_t synchronization_count() const { return synchronizations_.load(std::memory_order_relaxed); }
  // Host memory the device copies from/to fastest (pinned on CUDA). Thread-safe.
  virtual void* allocate_host(size_t bytes);
  virtual void release_host(void* ptr);

  // Copies; `stream` may be null (then synchronous). Thread-safe.
  virtual void copy_host_to_device(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void copy_device_to_host(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void copy_device_to_device(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void memset_device(void* dst, int value, size_t bytes, void* stream) = 0;

  // Streams: an opaque handle (cudaStream_t on CUDA, null on the CPU).
  virtual void* create_stream() = 0;
  virtual void destroy_stream(void* stream) = 0;
  virtual void synchronize(void* stream) = 0;

  // Milliseconds per run of `runs` back-to-back calls of `enqueue` (which enqueues work on
  // `stream`), for the builder's kernel timing. The default times the host clock around the runs
  // and a synchronize. CUDA measures the device's time with events and holds the stream behind a
  // spin kernel while the host enqueues, so the host's launch cost does not count: what a kernel
  // costs inside a CUDA graph, and the only thing that tells small kernels apart (at batch 1 a
  // convolution takes ~10 us on the device and about as long to launch).
  // `host_ms` (optional) receives the host's milliseconds per call of `enqueue` (what launching
  // costs the CPU), for the tactics of plain launches.
  virtual double time_runs(void* stream, int runs, const std::function<void()>& enqueue, double* host_ms = nullptr);
  // The same with several copies of the work running at once, copy i on streams[i]
  // (BuilderConfig::tune_for_streams): enqueue(i) enqueues one run of copy i; every copy runs
  // `runs` times, interleaved. Returns the device milliseconds per run per copy (the inverse of
  // the throughput when streams.size() copies share the device); `host_ms` the host's milliseconds
  // per call of enqueue. The default runs the copies one after another on streams[0].
  virtual double time_concurrent_runs(const std::vector<void*>& streams, int runs,
                                      const std::function<void(size_t)>& enqueue, double* host_ms = nullptr);

  // A one-line description of the device (name, compute capability) for timing-cache keys and
  // `kiln inspect`.
  virtual std::string describe() const { return to_string(device()); }

  // Whole-inference graphs (CUDA graphs): capture the work enqueued on `stream` between
  // begin_capture and end_capture into a graph, make it executable with instantiate_graph (or
  // update an executable graph of the same topology with it), replay it with launch_graph.
  // Backends without graphs return false from supports_graphs and throw from the others.
  virtual bool supports_graphs() const { return false; }
  // Whether `stream` is being captured into a graph right now (by kiln's caller, say).
  virtual bool is_capturing(void* stream) const {
    (void)stream;
    return false;
  }
  // Makes what the calling thread's kernels make on first use (library handles, the thread's
  // private stream), which a capture forbids: called before each capture, so that a context
  // prepared in one thread captures its graph in another (a server's loading thread and its
  // serving threads) and a capture after recover_after_failed_capture finds its handles made.
  // Cheap once done (thread-local lookups).
  virtual void prepare_thread() {}
  // Starts capturing `stream` in thread-local mode: CUDA calls other threads make meanwhile
  // neither join nor invalidate the capture.
  virtual void begin_capture(void* stream);
  // Ends the capture and returns the captured graph (destroy it with destroy_captured). When
  // the capture failed, throws after ending it, destroying what was captured and clearing the
  // error state, so that the stream and the device are usable at once.
  virtual void* end_capture(void* stream);
  // Ends a capture abandoned after an error (a kernel threw while enqueueing under capture):
  // ends it, destroys what was captured and clears the error state. Never throws.
  virtual void abort_capture(void* stream) noexcept;
  // After a failed capture: waits for `stream`, clears the error state and drops the calling
  // thread's library handles (cuDNN, cuBLASLt; made again on next use), so that no state a
  // library set up during the failed capture is used again. Never throws.
  virtual void recover_after_failed_capture(void* stream) noexcept { (void)stream; }
  // An executable graph of a captured one (destroy it with destroy_graph).
  virtual void* instantiate_graph(void* captured);
  // Makes the executable graph `exec` run `captured` instead, in place, when both have the
  // same topology (same nodes, other parameters such as addresses); false when that is not
  // possible (exec is then unchanged and still runs what it ran before).
  virtual bool update_graph(void* exec, void* captured);
  virtual void destroy_captured(void* captured);
  virtual void launch_graph(void* exec, void* stream);
  virtual void destroy_graph(void* exec);

  // Events for timing: record_event marks the point in `stream` where all work enqueued so far
  // is done; elapsed_ms gives the device time between two recorded events once both completed
  // (event_synchronize waits for one). CPU: host timestamps (the CPU backend runs
  // synchronously). Thread-safe.
  virtual void* create_event();
  virtual void destroy_event(void* event);
  virtual void record_event(void* event, void* stream);
  virtual void event_synchronize(void* event);
  virtual double elapsed_ms(void* start, void* end);

 protected:
  // Every allocate() calls this first: counts the call, and throws the out-of-memory error of an
  // injected fault (inject_allocation_fault) naming `bytes`.
  void count_allocation(size_t bytes);
  // allocate_host() calls this first (an injected fault; not counted as an allocate() call).
  void check_host_allocation_fault(size_t bytes);
  // allocate() and release() keep the books of bytes_in_use with these. Thread-safe.
  void record_allocation(void* ptr, size_t bytes);
  void record_release(void* ptr);
  void count_synchronization() { synchronizations_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> allocations_{0};
  std::atomic<uint64_t> synchronizations_{0};
  mutable std::mutex ledger_mutex_;
  std::unordered_map<void*, uint64_t> ledger_;  // live allocation -> bytes asked for
  uint64_t in_use_ = 0, peak_ = 0;
};

// Fault injection, for tests: from now on, the k-th allocation (allocate() or allocate_host() of
// any backend, counting from 1) fails as if memory were exhausted, with kiln's out-of-memory
// error; k = 0 disarms. Returns the number of allocations seen since the previous call, so a test
// can count a scenario's allocations (k = 0) and then fail each one in turn. Process-wide.
uint64_t inject_allocation_fault(uint64_t k);

// One process-wide lock that kiln holds while it does what must not overlap another thread's
// CUDA graph capture: allocating and freeing device memory (cudaFree waits for the whole device,
// which invalidates any capture in progress, thread-local mode or not), building and dropping
// execution plans, a plan's first run (where libraries load modules and set things up) and the
// capture itself. None of these happens in a steady-state inference, which never takes it.
// Recursive: a capture may drop a graph, a plan build may allocate. Never destroyed.
std::recursive_mutex& device_lifecycle_mutex();

// Owning device allocation (allocated and freed under device_lifecycle_mutex).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

class BackendRegistry {
 public:
  static BackendRegistry& instance();
  void add(DeviceType device, std::unique_ptr<Backend> backend);
  // Throws kiln::Error when the backend is not built in or not available on this machine.
  Backend& get(DeviceType device);
  bool has(DeviceType device) const;

 private:
  std::unique_ptr<Backend> backends_[2];
};

inline Backend& get_backend(DeviceType device) { return BackendRegistry::instance().get(device); }

}  // namespace kiln
