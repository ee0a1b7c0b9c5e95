#include "src/engine/thread_adaptation.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <string>

namespace kiln {
namespace {

std::string lower_trimmed(const char* text) {
  std::string v(text);
  const auto blank = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; };
  while (!v.empty() && blank(v.back())) v.pop_back();
  size_t first = 0;
  while (first < v.size() && blank(v[first])) ++first;
  v.erase(0, first);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return v;
}

}  // namespace

ThreadAdaptation::ThreadAdaptation()
    : enabled_(default_enabled(std::getenv("KILN_CPU_THREAD_ADAPTATION"), std::getenv("OMP_WAIT_POLICY"),
                               &default_off_reason_)) {}

bool ThreadAdaptation::default_enabled(const char* adaptation_env, const char* omp_wait_policy, std::string* why) {
  if (why) why->clear();
  // Off for reproducible runs (a context's results may differ in the last bits between thread
  // counts where a kernel splits a reduction among its threads).
  if (adaptation_env) {
    const std::string v = lower_trimmed(adaptation_env);
    const bool on = !(v == "0" || v == "off" || v == "false");
    if (!on && why) *why = "KILN_CPU_THREAD_ADAPTATION is " + std::string(adaptation_env);
    return on;
  }
  // OpenMP reads OMP_WAIT_POLICY case-insensitively, surrounding blanks allowed.
  if (omp_wait_policy && lower_trimmed(omp_wait_policy) == "passive") {
    if (why) {
      *why =
          "OMP_WAIT_POLICY is passive: waiting OpenMP threads sleep, so a thread's share of its core no longer "
          "tells whether other processes share the cores (KILN_CPU_THREAD_ADAPTATION=1 turns it on anyway)";
    }
    return false;
  }
  return true;
}

void ThreadAdaptation::set_enabled(bool enabled) {
  enabled_ = enabled;
  halvings_ = 0;
  restore_window_ = kWindowNs;
  changed_at_ = 0;
  last_was_restore_ = false;
  reset_window();
}

int ThreadAdaptation::threads(int configured) const {
  if (!enabled_ || configured <= 1) return configured;
  return std::max(1, configured >> halvings_);
}

void ThreadAdaptation::reset_window() {
  window_wall_ = 0;
  window_cpu_ = 0;
}

ThreadAdaptation::Change ThreadAdaptation::record(int configured, int64_t wall_ns, int64_t cpu_ns, int64_t now_ns) {
  if (!enabled_ || configured <= 1) return Change::kNone;
  window_wall_ += std::max<int64_t>(wall_ns, 0);
  window_cpu_ += std::max<int64_t>(cpu_ns, 0);
  if (window_wall_ < kWindowNs) return Change::kNone;
  const double share = static_cast<double>(window_cpu_) / static_cast<double>(window_wall_);
  const int current = threads(configured);
  if (current > 1 && share < kReduceBelow) {
    // Contended again soon after a restore: the next restore needs a longer quiet spell.
    if (last_was_restore_ && now_ns - changed_at_ < kStableNs) {
      restore_window_ = std::min(restore_window_ * 2, kMaxRestoreWindowNs);
    }
    ++halvings_;
    ++reductions_;
    changed_at_ = now_ns;
    last_was_restore_ = false;
    reset_window();
    return Change::kReduced;
  }
  if (halvings_ == 0) {  // full count, not contended
    if (changed_at_ && now_ns - changed_at_ >= kStableNs) restore_window_ = kWindowNs;
    reset_window();
    return Change::kNone;
  }
  if (share < kRestoreAbove) {  // still shared: start the quiet spell over
    reset_window();
    return Change::kNone;
  }
  if (window_wall_ < restore_window_) return Change::kNone;  // quiet so far: keep watching
  --halvings_;
  ++restorations_;
  changed_at_ = now_ns;
  last_was_restore_ = true;
  reset_window();
  return Change::kRestored;
}

int64_t ThreadAdaptation::thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace kiln
