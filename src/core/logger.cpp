// The process-wide logger and the default stderr logger.
#include "kiln/logger.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace kiln {

const char* to_string(Severity severity) {
  switch (severity) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kInfo:
      return "info";
    case Severity::kVerbose:
      return "verbose";
  }
  return "?";
}

void StderrLogger::log(Severity severity, const std::string& message) {
  if (static_cast<int>(severity) > static_cast<int>(min_)) return;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[kiln %s] %s\n", to_string(severity), message.c_str());
}

namespace {
std::atomic<Logger*> g_logger{nullptr};
}

StderrLogger& default_logger() {
  static StderrLogger logger;
  return logger;
}

Logger& get_logger() {
  Logger* l = g_logger.load();
  return l ? *l : default_logger();
}

void set_logger(Logger* logger) { g_logger.store(logger); }

void log(Severity severity, const std::string& message) { get_logger().log(severity, message); }

}  // namespace kiln
