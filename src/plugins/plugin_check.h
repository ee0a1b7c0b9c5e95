// The plugin conformance suite behind `kiln plugin check`: it creates a plugin through its
// creator and checks every answer it gives against what its kernel really does: output dims
// against the elements the kernel writes (poisoned outputs inside guard bytes, several shapes),
// symbolic dims staying symbolic, every claimed type/format combination against the plugin's own
// float32 CPU result, the fields and byte serialization round trips, clone(), the declared
// workspace, CUDA stream discipline (graph capture) and NaN/Inf and run-to-run determinism.
// Library code so that tests call it directly; the CLI only prints the report.
//
// Thread-safety: check_plugin runs the plugin on the calling thread (CPU kernels with one or two
// threads) and temporarily installs SIGSEGV/SIGBUS/SIGFPE/SIGILL handlers so that a plugin that
// crashes (reads past its bytes, writes far past a buffer) is reported instead of ending the
// process; do not run it concurrently with other code that installs those handlers.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "kiln/types.h"

namespace kiln {

enum class CheckStatus : int32_t { kPass, kFail, kSkip };
const char* to_string(CheckStatus status);  // "PASS", "FAIL", "SKIP"

// One row of the report: what was checked, the outcome and, for FAIL, what is wrong and what to
// change.
struct PluginCheckResult {
  std::string name;  // "shapes 2x3x13x7", "types float16:linear -> float16:linear", "workspace", ...
  CheckStatus status = CheckStatus::kPass;
  std::string message;
};

struct PluginCheckOptions {
  std::string name;  // creator name
  std::string version = "1";
  std::string plugin_namespace;
  DeviceType device = DeviceType::kCPU;
  PluginFieldCollection fields;  // as given; checked against the schema, defaults filled in
  int num_inputs = 0;            // 0: found by asking output_types / output_dims for 1..4 inputs
  uint64_t seed = 20240601;      // input values (uniform in [-8, 8])
};

struct PluginCheckReport {
  std::string plugin;   // "TemperatureSwish version '1' namespace ''"
  std::string library;  // where the creator came from ("" when built in)
  DeviceType device = DeviceType::kCPU;
  std::string fields;  // "temperature=1"
  int num_inputs = 0, num_outputs = 0;
  std::vector<PluginCheckResult> checks;

  // True when no check FAILed (SKIP is not a failure).
  bool passed() const;
  // The first row whose name starts with `prefix`; null when none.
  const PluginCheckResult* find(const std::string& prefix) const;
  // Every FAIL row's name and message, one per line (for test messages).
  std::string failures() const;
};

// Runs the suite on the creator registered as options.name / version / namespace. Throws
// kiln::Error when it is not registered, the fields do not match its schema, or the device is
// not built in / not present; every problem of the plugin itself is a FAIL row, never an
// exception.
PluginCheckReport check_plugin(const PluginCheckOptions& options);

// The same for a creator object (registered or not).
PluginCheckReport check_plugin(const PluginCreator& creator, const PluginCheckOptions& options);

// Whether `device` can run plugins here (CUDA: built in and a GPU present); `why` says why not.
bool plugin_check_device_available(DeviceType device, std::string* why = nullptr);

// Parses "k=v,k2=v2" into fields typed by the creator's schema: float32/float64/int32/int64
// values (several as "k=1,2,3": a piece without '=' continues the previous value), strings as
// written. Throws kiln::Error naming the field for unknown names, bad numbers and tensor fields.
PluginFieldCollection parse_plugin_fields(const std::string& text, const PluginCreator& creator);

// "temperature=1, mode=tanh" (tensors as "<tensor float32 3x4>").
std::string plugin_fields_to_string(const PluginFieldCollection& fields);

// The pass/fail table: a header with the plugin, device and fields, then one row per check
// (name, PASS/FAIL/SKIP, message) and a summary line.
void print_plugin_check_report(const PluginCheckReport& report, std::ostream& out);

}  // namespace kiln
