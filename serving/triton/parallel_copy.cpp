// ParallelCopier (parallel_copy.h).
//
// Protocol. A job is numbered; the caller writes the chunk table, resets the claim counter and
// then publishes the job with state_ = number * 2 + 1 (the store releases the table to the
// workers). A worker that sees an open job it has not worked on enters it: active_ += 1, then it
// checks that state_ still names that open job (else it leaves without touching the table), then
// claims chunks with next_.fetch_add until the counter passes the end, marking each copied chunk
// with done_[i] = number. The caller claims from the same counter, then waits for the done flags
// of the chunks the workers still copy, closes the job (state_ = number * 2) and waits for
// active_ == 0 before it returns, so no worker can touch the table, the counter or the caller's
// buffers once copy() has returned. The check after the increment and the caller's wait after
// the close are both sequentially consistent: either the caller sees the worker inside, or the
// worker sees the job closed.
//
// Only the calling thread runs the callback. In the backend the callback queues the host-to-device
// copy of a finished range on the instance's stream; doing that from the caller alone (in order,
// merging the chunks finished meanwhile into one range) rather than from whichever thread copied
// the chunk keeps every CUDA call on the instance's thread (the device and context that thread
// uses; no worker thread ever touches CUDA), gives the stream one producer (several threads
// calling cudaMemcpyAsync on one stream is safe, Backend::copy_host_to_device says thread-safe, but
// they would contend for the stream and queue the pieces out of order) and fewer, larger copies
// (with K workers about K + 1 chunks finish between two of the caller's). Workers run only
// memcpy: nothing on them can throw, and a throwing callback is the caller's own exception.
//
// Sleeping. A worker with nothing to do polls for Options::spin, then sleeps on a condition
// variable: sleepers_ += 1 under sleep_mutex_, then the wait's predicate reads state_. The caller
// stores state_, then reads sleepers_ and notifies only when a worker may be asleep (again
// sequentially consistent on both sides, so a wake-up is never lost and an awake pool costs no
// system call). It wakes one worker, which wakes the next, and so on: the caller pays for one
// wake-up, not K.
#include "serving/triton/parallel_copy.h"

#include <algorithm>
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::triton {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Waits for `done()`: spins briefly (what the caller waits for is a chunk copy of a few
// microseconds), then yields the core (on a machine with fewer cores than threads the one it
// waits for may need this core).
template <class F>
void spin_until(F&& done) {
  for (int spins = 0; !done(); ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

// Merges finished chunks into ranges of contiguous destination memory and hands them to the
// callback (the caller's thread only).
class RangeReporter {
 public:
  RangeReporter(const ParallelCopier::Copied& copied, size_t min_bytes) : copied_(copied), min_bytes_(min_bytes) {}
  void add(uint8_t* dst, size_t bytes) {
    if (!copied_) return;
    if (bytes_ && dst != dst_ + bytes_) flush();
    if (!bytes_) dst_ = dst;
    bytes_ += bytes;
  }
  // Reports the pending range when it is large enough (or always, at the end of a job).
  void maybe_flush(bool last) {
    if (bytes_ && (last || bytes_ >= min_bytes_)) flush();
  }

 private:
  void flush() {
    uint8_t* dst = dst_;
    const size_t bytes = bytes_;
    bytes_ = 0;
    copied_(dst, bytes);
  }
  const ParallelCopier::Copied& copied_;
  const size_t min_bytes_;
  uint8_t* dst_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

ParallelCopier::ParallelCopier(int workers, Options options) : options_(options) {
  options_.chunk_bytes = std::max<size_t>(options_.chunk_bytes, 1);
  threads_.reserve(static_cast<size_t>(std::max(workers, 0)));
  try {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_main(); });
  } catch (...) {
    shutdown();  // joins the threads started
    throw;
  }
}

ParallelCopier::~ParallelCopier() { shutdown(); }

void ParallelCopier::shutdown() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stop_.store(true, std::memory_order_seq_cst);
  }
  sleep_cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

ParallelCopier::Stats ParallelCopier::stats() const {
  Stats s;
  s.jobs = jobs_.load(std::memory_order_relaxed);
  s.parallel_jobs = parallel_jobs_.load(std::memory_order_relaxed);
  s.chunks_by_caller = chunks_by_caller_.load(std::memory_order_relaxed);
  s.chunks_by_workers = chunks_by_workers_.load(std::memory_order_relaxed);
  s.wakeups = wakeups_.load(std::memory_order_relaxed);
  return s;
}

void ParallelCopier::notify_sleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }  // a worker between its check and its wait holds it
  sleep_cv_.notify_one();  // that worker wakes the next one (worker_main): one system call here
}

void ParallelCopier::wake() {
  if (threads_.empty()) return;
  wake_hint_.fetch_add(1, std::memory_order_seq_cst);
  notify_sleepers();
}

void ParallelCopier::ensure_capacity(size_t chunks) {
  if (chunks <= done_capacity_) return;
  const size_t capacity = std::max(chunks, done_capacity_ * 2);
  auto flags = std::make_unique<std::atomic<uint64_t>[]>(capacity);
  for (size_t i = 0; i < capacity; ++i) flags[i].store(0, std::memory_order_relaxed);
  done_ = std::move(flags);
  done_capacity_ = capacity;
}

uint64_t ParallelCopier::work(uint64_t job, const std::function<void()>& after_chunk) {
  const size_t n = chunk_count_;
  uint64_t copied = 0;
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) break;
    const Chunk& c = chunks_[i];
    std::memcpy(c.dst, c.src, c.bytes);
    done_[i].store(job, std::memory_order_release);
    ++copied;
    if (after_chunk) after_chunk();
  }
  return copied;
}

void ParallelCopier::worker_main() {
#ifdef __linux__
  // SCHED_BATCH: a woken worker never preempts the thread running where it is placed (the caller
  // that woke it, often: the scheduler likes to put the wakee on the waker's core), it waits for a
  // free core or the next scheduling tick. Without it, on a machine with few idle cores, the
  // caller lost its core to the worker it had just woken and the copy took 5x longer. Failure
  // (a seccomp profile, say) leaves the default policy.
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
#endif
  uint64_t last_job = 0;
  uint64_t seen_hint = wake_hint_.load(std::memory_order_relaxed);
  uint64_t state = 0;
  const auto job_ready = [&] {
    state = state_.load(std::memory_order_seq_cst);
    return (state & 1) != 0 && state / 2 != last_job;
  };
  auto spin_deadline = std::chrono::steady_clock::now() + options_.spin;
  for (;;) {
    // Wait for a job this worker has not been in: poll until the deadline, then sleep.
    while (!job_ready()) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if (std::chrono::steady_clock::now() < spin_deadline) {
        for (int k = 0; k < 16; ++k) cpu_relax();
        std::this_thread::yield();  // polling, but a thread with real work on this core goes first
        continue;
      }
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      sleep_cv_.wait(lock, [&] {
        return stop_.load(std::memory_order_seq_cst) || job_ready() ||
               wake_hint_.load(std::memory_order_seq_cst) != seen_hint;
      });
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      seen_hint = wake_hint_.load(std::memory_order_relaxed);
      if (stop_.load(std::memory_order_relaxed)) return;
      lock.unlock();
      notify_sleepers();                                                 // the chain: each woken worker wakes one more
      spin_deadline = std::chrono::steady_clock::now() + options_.spin;  // woken: poll again
    }
    last_job = state / 2;
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (state_.load(std::memory_order_seq_cst) == state) {
      const uint64_t copied = work(state / 2);
      chunks_by_workers_.fetch_add(copied, std::memory_order_relaxed);
    }
    active_.fetch_sub(1, std::memory_order_release);
    spin_deadline = std::chrono::steady_clock::now() + options_.spin;
  }
}

void ParallelCopier::copy(const CopySegment* segments, size_t count, const Copied& copied) {
  std::lock_guard<std::mutex> call(call_mutex_);
  jobs_.fetch_add(1, std::memory_order_relaxed);
  // The chunk table (workers are all outside any job here: the last copy() waited for them).
  chunks_.clear();
  size_t total = 0;
  for (size_t s = 0; s < count; ++s) {
    auto* dst = static_cast<uint8_t*>(segments[s].dst);
    const auto* src = static_cast<const uint8_t*>(segments[s].src);
    for (size_t off = 0; off < segments[s].bytes; off += options_.chunk_bytes) {
      chunks_.push_back({dst + off, src + off, std::min(options_.chunk_bytes, segments[s].bytes - off)});
    }
    total += segments[s].bytes;
  }
  const size_t n = chunks_.size();
  RangeReporter report(copied, options_.min_callback_bytes);
  if (threads_.empty() || n < 2 || total < options_.min_parallel_bytes) {
    for (const Chunk& c : chunks_) {
      std::memcpy(c.dst, c.src, c.bytes);
      report.add(c.dst, c.bytes);
      report.maybe_flush(false);
    }
    chunks_by_caller_.fetch_add(n, std::memory_order_relaxed);
    report.maybe_flush(true);
    return;
  }

  ensure_capacity(n);
  chunk_count_ = n;
  next_.store(0, std::memory_order_relaxed);
  const uint64_t job = state_.load(std::memory_order_relaxed) / 2 + 1;
  state_.store(job * 2 + 1, std::memory_order_seq_cst);  // open: publishes the table
  parallel_jobs_.fetch_add(1, std::memory_order_relaxed);
  notify_sleepers();
  size_t prefix = 0;  // chunks [0, prefix) are known to be in place (and handed to `report`)
  uint64_t mine = 0;
  const auto advance = [&] {
    const size_t from = prefix;
    while (prefix < n && done_[prefix].load(std::memory_order_acquire) == job) {
      report.add(chunks_[prefix].dst, chunks_[prefix].bytes);
      ++prefix;
    }
    return prefix != from;
  };
  // Closes the job and waits for every worker to leave it.
  const auto close = [&] {
    state_.store(job * 2, std::memory_order_seq_cst);
    spin_until([&] { return active_.load(std::memory_order_seq_cst) == 0; });
    chunks_by_caller_.fetch_add(mine, std::memory_order_relaxed);
  };
  try {
    work(job, [&] {  // counted here: a throwing callback leaves the chunks copied so far counted
      ++mine;
      if (copied && advance()) report.maybe_flush(false);
    });
    // The rest is being copied by workers: report what finishes as it finishes. Every chunk has
    // been claimed; once no worker is inside the job, every claimed chunk is in place (a worker
    // marks its chunks before it leaves), so a chunk still missing then was claimed by no one: a
    // bug, reported rather than waited for forever.
    spin_until([&] {
      if (advance()) report.maybe_flush(false);
      if (prefix < n && active_.load(std::memory_order_seq_cst) == 0 && !advance() && prefix < n) {
        throw std::logic_error("internal error in the parallel input copy: chunk " + std::to_string(prefix) + " of " +
                               std::to_string(n) + " was never copied");
      }
      return prefix == n;
    });
    report.maybe_flush(true);
  } catch (...) {
    next_.store(n, std::memory_order_relaxed);  // workers stop claiming
    close();
    throw;
  }
  close();
}

}  // namespace kiln::triton
