// Internals of the plugin checker (plugin_check.cpp): the memory and stream a plugin runs with
// per device, the crash guard, host-side type and layout conversion, and the guarded runner
// that executes one enqueue with poisoned outputs inside guard bytes, a guarded workspace of
// exactly workspace_size() bytes and inputs whose bytes are verified unchanged afterwards.
//
// Host memory is surrounded by inaccessible pages, so an access far outside a buffer becomes a
// caught fault (see run_guarded) rather than silent heap corruption. CUDA memory and the CUDA
// graph-capture check live in plugin_check_cuda.cpp (CUDA builds only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "kiln/types.h"
#include "src/plugins/plugin_calls.h"

namespace kiln::plugin_check {

// ---- devices ------------------------------------------------------------------------------

class CheckDevice {
 public:
  virtual ~CheckDevice() = default;
  virtual DeviceType device() const = 0;
  // At least `bytes` of device memory; throws kiln::Error when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  // Synchronous copies (never on the plugin's stream, so they are legal during a capture).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // What PluginExecContext::stream gets (null on the CPU).
  virtual void* stream() = 0;
  // Waits for the stream; "" or the device error it reports (cleared where possible).
  virtual std::string synchronize() = 0;
};

std::unique_ptr<CheckDevice> make_host_device();

#ifdef KILN_HAVE_CUDA
// Null with `why` set when no CUDA device is usable.
std::unique_ptr<CheckDevice> make_cuda_device(std::string* why);

struct CaptureOutcome {
  bool captured = false;  // the capture succeeded and the graph was replayed
  std::string problem;    // why not (names the CUDA errors)
};
// Begins a global-mode capture on the device's stream, calls `enqueue` (which returns the
// plugin's code), ends the capture and, when it succeeded, calls `before_replay` (to re-poison
// outputs), launches the graph on the stream and synchronizes. Clears the errors it provokes.
CaptureOutcome capture_and_replay(CheckDevice& device, const std::function<int()>& enqueue,
                                  const std::function<void()>& before_replay);
#endif

// ---- crash guard --------------------------------------------------------------------------

// Calls fn on this thread; returns "" or what went wrong: "crashed with SIGSEGV ..." when fn
// faulted (the fault is caught and fn abandoned), or "threw: <what>" for an exception.
std::string run_guarded(const std::function<void()>& fn);

// ---- types and layouts --------------------------------------------------------------------

struct Slot {
  DataType type = DataType::kFloat32;
  TensorFormat format = TensorFormat::kLinear;
  friend bool operator==(const Slot& a, const Slot& b) { return a.type == b.type && a.format == b.format; }
};
// Inputs first, then outputs (the positions of supports_format_combination).
using Combination = std::vector<Slot>;
// "float32:linear, float16:channels_last -> float32:linear".
std::string to_string(const Combination& combo, int num_inputs);

// The value `v` takes when stored as `type` (float16 rounding, integers rounded, bool = v > 0).
double quantize(double v, DataType type);
// Logical (row-major, NCHW) values -> the bytes of a tensor of `slot`, and back. Channels-last
// stores dim 1 innermost (NHWC for rank 4); for rank < 3 it equals linear.
std::vector<uint8_t> encode(const std::vector<double>& values, const Dims& dims, const Slot& slot);
std::vector<double> decode(const uint8_t* bytes, const Dims& dims, const Slot& slot);

// ---- comparison --------------------------------------------------------------------------

// 1.23e-04 / 12.3% style numbers for reports.
std::string sci(double v);
std::string percent(double share);
bool is_float(DataType type);
// The relative tolerance against the float32 CPU result: 1e-4 for float32 (and float64), 1e-2
// for float16; integer and bool outputs may be off by one (rounding vs truncation).
double tolerance_of(DataType type);

struct Stats {
  double max_abs = 0, max_rel = 0, mean_rel = 0, share_above_1e5 = 0;
  int64_t count = 0, violations = 0, first_violation = -1;
};
// Relative error |a-b| / max(|b|, 1e-3), as everywhere in kiln; NaN or Inf where the reference
// is finite (or the other way round) is a violation, as is an error above tolerance_of(type).
Stats compare(const std::vector<double>& actual, const std::vector<double>& expected, DataType type);
// "max rel err 1.2e-05, mean rel err 3.0e-07, rel err > 1e-5: 0.4%".
std::string stats_text(const Stats& stats);

// ---- the guarded runner -------------------------------------------------------------------

struct RunSpec {
  std::vector<Dims> in_dims, out_dims;
  Combination combo;                        // num_inputs + num_outputs slots
  std::vector<std::vector<double>> inputs;  // logical values, already quantized to their slot
  int num_threads = 1;
  uint8_t poison = 0xA5;  // fills outputs, guards and workspace
  bool capture = false;   // CUDA: run under graph capture and replay it
};

struct RunResult {
  std::string error;                          // enqueue failed, threw or crashed; nothing else valid
  std::vector<std::vector<uint8_t>> raw;      // each output's bytes as the kernel left them
  std::vector<std::vector<double>> outputs;   // the same decoded to logical order
  std::vector<int64_t> bytes_changed_before;  // per output: guard bytes changed before it
  std::vector<int64_t> bytes_changed_after;   // per output: extent of changed guard bytes after it
  std::vector<bool> input_modified;
  size_t workspace_size = 0;    // what workspace_size() declared
  int64_t scratch_extent = 0;   // bytes from the workspace start to its last changed byte
  bool scratch_before = false;  // a byte before the workspace changed
  std::string capture_problem;  // capture: why the capture failed ("" when it worked)
};

// configure() (min = opt = max = the dims), workspace_size() and one enqueue of `plugin` on
// `device` with the layout described above. Never throws for the plugin's faults.
RunResult run_plugin(GuardedPlugin& plugin, CheckDevice& device, const RunSpec& spec);

}  // namespace kiln::plugin_check
