// Logging: kiln writes diagnostics through a process-wide Logger. The default logger prints
// warnings and errors to stderr. set_logger is not thread-safe against concurrent logging;
// call it at start-up.
#pragma once

#include <string>

namespace kiln {

enum class Severity : int32_t { kError = 0, kWarning = 1, kInfo = 2, kVerbose = 3 };
const char* to_string(Severity severity);

class Logger {
 public:
  virtual ~Logger() = default;
  // Called from any thread; implementations must be thread-safe.
  virtual void log(Severity severity, const std::string& message) = 0;
};

// A logger printing messages at or above min_severity (kError is the most severe) to stderr.
class StderrLogger : public Logger {
 public:
  explicit StderrLogger(Severity min_severity = Severity::kWarning) : min_(min_severity) {}
  void log(Severity severity, const std::string& message) override;
  void set_min_severity(Severity s) { min_ = s; }

 private:
  Severity min_;
};

// The process-wide logger (never null). set_logger(nullptr) restores the default.
// kiln does not take ownership; the logger must outlive its use.
Logger& get_logger();
void set_logger(Logger* logger);
// The default StderrLogger, e.g. to change its verbosity.
StderrLogger& default_logger();

void log(Severity severity, const std::string& message);

}  // namespace kiln
