// A pool of persistent threads that helps one caller copy host memory (serving/triton: the
// backend's gather of request inputs into pinned staging or the engine's input; docs/serving.md,
// parameter input_copy_threads). No Triton dependency: tests/parallel_copy_test.cpp runs it alone.
//
// copy() splits a list of (dst, src, bytes) segments into chunks (a chunk never spans two
// segments) that the calling thread and the workers claim through one atomic counter. The caller
// copies from the start and never waits for a worker to wake up: a worker that is late finds
// fewer chunks left (or none) and the caller copies more. Workers spin a few tens of microseconds
// after a job before sleeping, so that back-to-back requests find them awake; inputs smaller than
// Options::min_parallel_bytes are copied by the caller alone with no wake-up at all. On Linux the
// workers run under SCHED_BATCH, so a woken worker never takes the core of the thread it was meant
// to help (parallel_copy.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::triton {

struct CopySegment {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

class ParallelCopier {
 public:
  struct Options {
    // The unit of work claimed through the counter (the last chunk of a segment may be smaller).
    size_t chunk_bytes = 64 * 1024;
    // Jobs with fewer bytes in all are copied by the caller alone (no worker is woken).
    size_t min_parallel_bytes = 256 * 1024;
    // How long a worker keeps polling for the next job after its last one before it sleeps.
    std::chrono::microseconds spin{50};
    // The callback gets copied ranges of at least this many bytes, except where a range ends at a
    // discontinuity of the destination or at the end of the job (fewer, larger device copies).
    size_t min_callback_bytes = 0;
  };

  // Called on the calling thread with [dst, dst + bytes): bytes copied into place, in the order of
  // the segments (addresses increasing within a segment). The ranges never overlap, each lies in
  // destination memory that is contiguous (adjacent segments whose destinations touch are merged),
  // and together they cover every byte of every segment exactly once.
  using Copied = std::function<void(uint8_t* dst, size_t bytes)>;

  // `workers` threads (0: copy() runs on the caller alone). Throws std::system_error when a
  // thread cannot be started (the ones started are joined).
  explicit ParallelCopier(int workers, Options options);
  explicit ParallelCopier(int workers) : ParallelCopier(workers, Options{}) {}
  ~ParallelCopier();  // joins the workers
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;

  int workers() const { return static_cast<int>(threads_.size()); }
  const Options& options() const { return options_; }

  // Copies every segment and returns once every byte is in place and `copied` (when given) has
  // been called for all of it. Segments must not overlap each other's destinations. An exception
  // from `copied` is rethrown here after the workers have left the job (some chunks may then be
  // uncopied); the copier stays usable. Calls on one copier from several threads run one at a
  // time.
  void copy(const CopySegment* segments, size_t count, const Copied& copied = {});
  void copy(const std::vector<CopySegment>& segments, const Copied& copied = {}) {
    copy(segments.data(), segments.size(), copied);
  }

  // Wakes sleeping workers ahead of a copy() that is about to come (they spin for Options::spin
  // waiting for it). Optional; cheap when they are awake.
  void wake();

  // Counters since construction (relaxed; for tests and diagnostics).
  struct Stats {
    uint64_t jobs = 0;           // copy() calls
    uint64_t parallel_jobs = 0;  // of those, the ones offered to the workers
    uint64_t chunks_by_caller = 0;
    uint64_t chunks_by_workers = 0;
    uint64_t wakeups = 0;  // notifications of a sleeping worker (by copy(), wake() or a woken worker)
  };
  Stats stats() const;

 private:
  struct Chunk {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
  };
  void worker_main();
  // Claims and copies chunks of the current job until none is left, calling after_chunk() after
  // each (the caller reports finished ranges there; workers pass nothing); returns how many it
  // copied.
  uint64_t work(uint64_t job, const std::function<void()>& after_chunk = {});
  void notify_sleepers();
  void shutdown();  // stops and joins the workers
  void ensure_capacity(size_t chunks);

  Options options_;
  std::vector<std::thread> threads_;
  std::mutex call_mutex_;  // one copy() at a time

  // The job: written by the caller before it opens the job, read by workers inside it.
  std::vector<Chunk> chunks_;
  size_t chunk_count_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> done_;  // done_[i] == job number: chunk i is in place
  size_t done_capacity_ = 0;
  std::atomic<size_t> next_{0};  // the next chunk to claim

  // state_ = job number * 2 + 1 while job `number` is open to workers, job number * 2 once closed.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> active_{0};  // workers inside a job (see copy() and worker_main())
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> wake_hint_{0};  // bumped by wake(): workers awake spin for the next job
  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;
  std::atomic<int> sleepers_{0};

  std::atomic<uint64_t> jobs_{0}, parallel_jobs_{0}, chunks_by_caller_{0}, chunks_by_workers_{0}, wakeups_{0};
};

}  // namespace kiln::triton
