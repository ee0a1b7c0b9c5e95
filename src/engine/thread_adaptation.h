// CPU contexts under contention: fewer threads while the cores are shared.
//
// oneDNN (Debian's 2.6, OpenMP) splits each layer statically among the context's threads and
// libgomp's idle threads spin. When another process keeps the same cores busy, every layer
// waits for whichever of the context's threads the scheduler put aside, while the others spin
// on the cores it needs: measured on 2 cores against a spinning ONNX Runtime neighbour,
// ResNet-50 at 2 threads took 577 ms per inference where 1 thread took ~50 ms and a quiet
// machine 24-26 ms (docs/runtime.md, "CPU threads").
//
// The signal is the share of an inference's wall-clock time that the calling thread was on a
// core (its CPU time over the wall time). On a quiet machine it is about 1 even while the thread
// waits for its team (libgomp's master spins). When the context's threads are descheduled it
// drops. Over a window of at least kWindowNs of inference time:
//   - below kReduceBelow: halve the thread count (the plan of that count is built once and
//     cached: the thread count is part of the shape-plan key);
//   - at a reduced count, kRestoreAbove or more: double it again.
// A reduction shortly after a restore (the neighbour is still there) doubles the quiet time a
// later restore needs, up to kMaxRestoreWindowNs, so an oscillation costs little; a count that
// held for kStableNs resets it.
//
// Not thread-safe (one per context, like the context itself).
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

class ThreadAdaptation {
 public:
  static constexpr int64_t kWindowNs = 20'000'000;               // 20 ms of inference time per decision
  static constexpr double kReduceBelow = 0.70;                   // share that halves the threads
  static constexpr double kRestoreAbove = 0.90;                  // share that doubles them again
  static constexpr int64_t kMaxRestoreWindowNs = 2'000'000'000;  // 2 s
  static constexpr int64_t kStableNs = 1'000'000'000;            // 1 s

  enum class Change { kNone, kReduced, kRestored };

  // Whether the context adapts: default_enabled() of the process's environment.
  ThreadAdaptation();

  // The default from the environment variables' values (nullptr: unset). KILN_CPU_THREAD_ADAPTATION
  // decides where it is set (0/off/false: off, anything else: on). Otherwise it is on, except
  // under OMP_WAIT_POLICY=passive: there the OpenMP runtime's waiting threads sleep instead of
  // spinning, so the calling thread is off its core whenever it waits for its team, also on a
  // quiet machine, and the share this class measures no longer says whether the cores are
  // shared (measured: SqueezeNet on 2 quiet cores halved 8 times in 4 s). `why`, where given,
  // receives the reason it is off ("" where on).
  static bool default_enabled(const char* adaptation_env, const char* omp_wait_policy, std::string* why = nullptr);
  // Why the constructor left it off ("" where it started on).
  const std::string& default_off_reason() const { return default_off_reason_; }
  void set_enabled(bool enabled);
  bool enabled() const { return enabled_; }

  // The thread count to use when `configured` is asked for.
  int threads(int configured) const;

  // After an inference that ran at threads(configured): its wall-clock time and the calling
  // thread's CPU time over it, and the time now (any monotonic clock, ns). Returns what changed.
  Change record(int configured, int64_t wall_ns, int64_t cpu_ns, int64_t now_ns);

  // How many times the count was halved / doubled again.
  uint64_t reductions() const { return reductions_; }
  uint64_t restorations() const { return restorations_; }

  // The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), ns; -1 where that clock fails.
  static int64_t thread_cpu_ns();

 private:
  void reset_window();

  std::string default_off_reason_;
  bool enabled_ = true;
  int halvings_ = 0;  // the count is configured >> halvings_ (at least 1)
  int64_t window_wall_ = 0, window_cpu_ = 0;
  int64_t restore_window_ = kWindowNs;
  int64_t changed_at_ = 0;  // when the count last changed (0: never)
  bool last_was_restore_ = false;
  uint64_t reductions_ = 0, restorations_ = 0;
};

}  // namespace kiln
