// A logger for tests: while it lives it is kiln's logger and keeps the messages of one severity
// that start with a prefix (all of that severity for an empty prefix); take() returns those
// logged since the last call. Contexts on several threads may log at once.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/logger.h"

namespace kiln::test {

class LogCapture : public Logger {
 public:
  explicit LogCapture(Severity severity, std::string prefix = {}) : severity_(severity), prefix_(std::move(prefix)) {
    set_logger(this);
  }
  ~LogCapture() override { set_logger(nullptr); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  void log(Severity severity, const std::string& message) override {
    if (severity != severity_ || message.rfind(prefix_, 0) != 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    messages_.push_back(message);
  }
  std::vector<std::string> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(messages_, {});
  }

 private:
  const Severity severity_;
  const std::string prefix_;
  std::mutex mutex_;
  std::vector<std::string> messages_;
};

}  // namespace kiln::test
