// Helpers shared by the `kiln` subcommands: exit codes, parsing of the trtexec-style shape and
// size flags, building the optimization profile from them, loading input tensors for an engine,
// latency statistics and small file utilities. Everything here throws kiln::Error with a
// message naming the flag, input or file at fault; main.cpp turns that into "kiln: error: ...".
// Plugin libraries named by --plugins are loaded here too, before a model or engine is read.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "kiln/types.h"

namespace CLI {
class App;
}
namespace kiln {
class Backend;
}

namespace kiln::cli {

// Process exit codes of `kiln` (documented in docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;        // any failure: bad file, build/run error, ...
inline constexpr int kExitUnsupported = 2;  // `kiln inspect --onnx`: some nodes are unsupported
inline constexpr int kExitMismatch = 3;     // `kiln run --compare-dir`: an output FAILed
inline constexpr int kExitUsage = 64;       // bad command line (sysexits' EX_USAGE)

// A mistake in the command line found after CLI11's parse (bad shape text, NAME=FILE syntax,
// missing choice between two flags). main() reports it like a parse error, with kExitUsage.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A subcommand: registers its options on `parent` and returns the action to run after a
// successful parse. The action returns the exit code and may throw.
struct Command {
  const char* name;
  // Adds the subcommand to `parent`; `run` receives the function to call when it is chosen.
  void (*setup)(CLI::App& parent, std::function<int()>& run);
};
// The subcommand table (defined in main.cpp from the cmd_*.cpp setup functions).
void setup_build_command(CLI::App& parent, std::function<int()>& run);
void setup_run_command(CLI::App& parent, std::function<int()>& run);
void setup_inspect_command(CLI::App& parent, std::function<int()>& run);
void setup_plugin_command(CLI::App& parent, std::function<int()>& run);  // cmd_plugin.cpp
void setup_debug_command(CLI::App& parent, std::function<int()>& run);   // cmd_debug.cpp
void setup_bench_command(CLI::App& parent, std::function<int()>& run);   // cmd_bench.cpp

// ---- shared flags -----------------------------------------------------------------------------
// Adds `--threads N` to `app`: a whole number from 0 to kMaxThreads, checked at parse time with a
// message saying so ("--threads: 'many' is not a whole number from 0 to 1024").
void add_threads_option(CLI::App& app, int& threads, const std::string& description);
// Adds a byte-size flag (--memory-limit): parse_byte_size's syntax, checked at parse time (an
// empty value is an error, not "no limit").
void add_byte_size_option(CLI::App& app, const std::string& flag, std::string& value, const std::string& description);
// Adds a tolerance flag (--rtol, --atol): a finite number >= 0, checked at parse time.
void add_tolerance_option(CLI::App& app, const std::string& flag, double& value, const std::string& description);

// ---- plugins ----------------------------------------------------------------------------------
// Loads each plugin library (the --plugins flag of build, run and plugin) with
// kiln::load_plugin_library, in order; returns the creators they registered ("Name v1").
// Throws kiln::Error naming the library (missing file, loader error, no or duplicate creators).
std::vector<std::string> load_plugins(const std::vector<std::string>& libraries);

// Reads an engine file (require_readable_file first, so a missing file is named); the embedded
// plugin libraries load only when `allow_embedded_plugins` (--allow-embedded-plugins).
// Its compiled plans load only when `allow_compiled_plans` (--allow-compiled-plans).
std::shared_ptr<Engine> load_engine_file(const std::string& path, bool allow_embedded_plugins,
                                         bool allow_compiled_plans = false);
// The help of --allow-compiled-plans (kiln run, kiln bench).
inline constexpr const char* kAllowCompiledPlansHelp =
    "Load the compiled cuDNN plans the engine carries (GPU code from the file: engines you built or trust) instead "
    "of building them: faster start-up";
// The engine's input names, in binding order.
std::vector<std::string> engine_input_names(const Engine& engine);

// Checks the file, then parses the ONNX model into a new Network (kiln::ParseError lists every
// unsupported node).
std::unique_ptr<Network> load_onnx_network(const std::string& path);
// One line per network input/output: "  in  images: float32 ?x3x320x320".
void print_network_io(const Network& network, std::ostream& out);

// ---- layer precisions -------------------------------------------------------------------------
// The --layer-precisions flag (trtexec's --layerPrecisions): entries "NAME:PREC", several joined by
// ',' or given in a file as "@FILE" (entries separated by ',' or new lines). NAME is a layer name
// as `kiln inspect --onnx` and `kiln debug` show it, with '*' matching any run of characters; PREC
// is fp32 or fp16 (float32 / float16). Each matching layer gets Layer::set_precision. Returns the
// number of layers set; throws UsageError naming the entry for bad syntax, an unknown precision
// or a name that matches no layer.
int apply_layer_precisions(Network& network, const std::vector<std::string>& specs);
// True when `name` matches `pattern`, whose '*' matches any run of characters.
bool glob_match(std::string_view pattern, std::string_view name);

// ---- shape flags ------------------------------------------------------------------------------
// Parses the dims of one shape flag entry: "1x3x224x224" (every extent a positive integer).
// `context` names the flag and entry in the error ("--shapes entry 'images:1xAx3'").
Dims parse_shape_dims(std::string_view text, const std::string& context);

// Parses shape-flag values, each "name:dims" and possibly several joined by ','
// ("images:1x3x320x320,mask:1x320"). The name is everything before the LAST ':' so that names
// such as "input:0" work ("input:0:1x3x224x224"). Throws on empty names or dims, bad numbers
// and duplicate names, naming `flag`.
std::map<std::string, Dims> parse_shape_list(const std::vector<std::string>& values, const std::string& flag);

// The --shapes / --min-shapes / --opt-shapes / --max-shapes flags of a command.
struct ShapeFlags {
  std::vector<std::string> shapes, min_shapes, opt_shapes, max_shapes;
};

// Checks the flags' syntax and consistency without a network (min/opt/max given together, same
// rank, min <= opt <= max, no input in both --shapes and the ranges); throws UsageError.
void check_shape_flags(const ShapeFlags& flags);

// Builds the single optimization profile for `network` from the flags:
//  * --shapes NAME:D sets min = opt = max = D;
//  * --min/--opt/--max-shapes must be given together for an input and satisfy min <= opt <= max;
//  * a dynamic input with no shape given gets 1 for every dynamic dim, and a notice saying so is
//    written to `notices`.
// Every named input must exist, have the declared rank and agree with its static dims.
// Only inputs with dynamic dims enter the profile (static inputs need none).
OptimizationProfile make_profile(const Network& network, const ShapeFlags& flags, std::ostream& notices);

// The profile for running given concrete input dims: min = opt = max = the dims, checked
// against the network's declared inputs (`source` says where the dims came from).
OptimizationProfile profile_from_input_dims(const Network& network, const std::map<std::string, Dims>& dims,
                                            const std::string& source);

// ---- sizes and files --------------------------------------------------------------------------
// "1048576", "512K", "64M", "2G" (binary units, case-insensitive, optional "iB"/"B").
uint64_t parse_byte_size(std::string_view text, const std::string& flag);
// "12.3 MiB" style.
std::string format_bytes(uint64_t bytes);

// Throws a kiln::Error "cannot open <what> '<path>': <reason>" unless `path` is a readable
// regular file (a folder, device or FIFO is refused; src/core/file_io.h).
void require_readable_file(const std::string& path, const std::string& what);
void require_directory(const std::string& path, const std::string& what);
// Creates the folder `path` (and its parents) unless it exists; throws "cannot create <flag>
// folder '<path>': <reason>" (a file of that name, a missing permission) instead of a raw
// filesystem error.
void make_output_directory(const std::string& path, const std::string& flag);
// The whole regular file (`max_bytes` 0: no limit but its size).
std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& what, uint64_t max_bytes = 0);
// Files given as flag values (--layer-precisions @FILE, --shape-schedule FILE) are text meant
// for a person to write: larger ones are refused (docs/security.md).
inline constexpr uint64_t kMaxFlagFileBytes = 16u << 20;
// Writes through a uniquely named temporary file and a rename (write_file_atomically): a failed
// write never leaves half a file, and an existing link, folder or device is never written to.
void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes, const std::string& what);

// ---- input tensors ----------------------------------------------------------------------------
struct InputTensor {
  std::string name;
  std::string file;
  HostTensor value;
};

// Loads one tensor per entry of `input_names` (in that order):
//  * from `inputs_dir`: input_<i>.pb, else input_<i>.npy, else <sanitized name>.npy;
//  * or from `assignments`, each "NAME=FILE" (.npy or .pb), which must cover every input.
// Exactly one of the two sources must be non-empty.
std::vector<InputTensor> load_inputs(const std::vector<std::string>& input_names, const std::string& inputs_dir,
                                     const std::vector<std::string>& assignments);

// ---- reference comparison ---------------------------------------------------------------------
// The reference file for output #index in `dir`: output_<i>.pb, output_<i>.npy or <name>.npy
// (name sanitized as --output-dir writes it); "" when there is none.
std::string find_reference(const std::string& dir, size_t index, const std::string& name);
struct CompareResult {
  std::string name;
  std::string reference_file;
  int64_t count = 0;
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;  // |a-b| / max(|b|, 1e-3)
  double mean_rel_err = 0.0;
  double share_rel_above_1e5 = 0.0;  // fraction of elements with rel err > 1e-5
  int64_t violations = 0;            // elements outside the tolerance below
  bool shape_mismatch = false;
  std::string note;  // why it failed when not a tolerance matter
  bool pass = false;
};
// Element-wise comparison of `actual` with `reference`; an element passes when
// |a-b| <= 1e-3*|b| + 1e-5*max(1, max|b|) (NaN only matches NaN, infinities must be equal).
// Pass per element: |a-b| <= rtol*|b| + atol*max(1, max|ref|).
CompareResult compare_tensors(const std::string& name, const HostTensor& actual, const HostTensor& reference,
                              double rtol = 1e-3, double atol = 1e-5);

// Host memory for output `name` of the engine; an allocation failure names the output.
HostTensor allocate_output(const std::string& name, DataType type, const Dims& dims);

// Runs `engine` once on the given inputs (matched by name; dynamic inputs take their dims) and
// returns host copies of every output, in the engine's output order. Device engines copy through
// device memory. Data-dependent outputs are trimmed to their actual shape.
std::vector<std::pair<std::string, HostTensor>> run_engine_once(Engine& engine, const std::vector<InputTensor>& inputs);
// After an inference, the host copy `value` of output `name` (allocated at max_tensor_shape):
// trimmed to the output's actual shape (data-dependent outputs), string elements copied out of
// the context's storage.
void settle_output(ExecutionContext& context, const std::string& name, HostTensor& value);

// ---- device buffers ---------------------------------------------------------------------------
// Device memory for one I/O tensor of a device engine, with a pinned host staging buffer of the
// same size (at least one byte each, so that empty tensors still get an address).
struct DeviceIo {
  Backend* backend = nullptr;
  void* device = nullptr;
  void* pinned = nullptr;
  size_t bytes = 0;
  DeviceIo(Backend& b, size_t n);
  ~DeviceIo();
  DeviceIo(const DeviceIo&) = delete;
  DeviceIo& operator=(const DeviceIo&) = delete;
};

// ---- timing -----------------------------------------------------------------------------------
// The p-th percentile (0..100) of ascending `sorted` samples by nearest rank (the smallest
// sample with at least p% of the samples at or below it); 0 when empty.
double nearest_rank_percentile(const std::vector<double>& sorted, double p);
// "12.346" style fixed-point text.
std::string format_fixed(double value, int precision = 3);

struct LatencyStats {
  int iterations = 0;
  double min_ms = 0, median_ms = 0, mean_ms = 0, p99_ms = 0, max_ms = 0;
};
// Statistics of per-iteration latencies in milliseconds (p99 by nearest rank).
LatencyStats compute_latency_stats(std::vector<double> samples_ms);

// "images: float32 1x3x320x320" style one-liners.
std::string describe_tensor(const std::string& name, DataType type, const Dims& dims);

}  // namespace kiln::cli
