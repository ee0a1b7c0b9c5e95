// Shared by the fuzz targets: silence kiln's logger (warnings for every odd model would flood the
// fuzzer's output and slow it down).
#pragma once

#include "kiln/logger.h"

namespace kiln_fuzz {

class QuietLogger : public kiln::Logger {
 public:
  void log(kiln::Severity, const std::string&) override {}
};

inline void quiet_logger() {
  static QuietLogger logger;
  static const bool once = (kiln::set_logger(&logger), true);
  (void)once;
}

}  // namespace kiln_fuzz
