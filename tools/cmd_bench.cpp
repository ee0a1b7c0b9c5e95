// `kiln bench`: trtexec's benchmarking mode with kiln's names. Measures one engine (a file, or an
// ONNX model built in memory) the way servers drive it: N execution contexts on N threads (and,
// on a GPU, N streams) running at once, each rotating K input/output buffer sets, input shapes
// cycled call by call from a schedule, inputs copied in and outputs out on every call unless
// --no-data-transfers. It warms up, then times every call (host latency, time inside enqueue,
// device time between events, copies) for at least --iterations calls per stream and at least
// --duration seconds, and prints a trtexec-style summary (or JSON for scripts such as
// bench/serving_vs_pytorch.py) with the contexts' plan and graph cache counters. Per-layer
// profiling, when asked for, is a separate run afterwards so that it does not disturb the timing.
// Device work goes through kiln's Backend interface only, so this file compiles without CUDA.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "common.h"
#include "core/half.h"
#include "engine/engine_format.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "core/text.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct BenchOptions {
  std::string engine, onnx, device = "cpu";
  bool fp16 = false;
  ShapeFlags shapes;
  std::string timing_cache;
  std::vector<std::string> plugins;
  bool allow_embedded_plugins = false;
  bool allow_compiled_plans = false;
  int threads = 0;
  bool verbose = false;
  std::vector<std::string> inputs;
  std::string inputs_dir;
  uint64_t seed = 1;
  double duration = 3.0;
  int64_t iterations = 10;
  std::string warmup = "200ms";
  std::vector<std::string> schedule;
  int streams = 1, buffers = 1;
  bool cuda_graph = false, no_cuda_graph = false, no_data_transfers = false;
  int shape_cache = -1, graph_cache = -1;  // -1: the context's default
  std::vector<double> percentiles;
  std::string export_times, export_profile;
  bool json = false;
  CLI::Option* device_flag = nullptr;  // to tell an explicit --device from the default
};

// ---- flag parsing -----------------------------------------------------------------------------

struct Warmup {
  bool by_time = true;
  double ms = 200.0;
  int64_t runs = 0;
};

// "200ms", "2s", "1.5s" (a time) or "50" (runs).
Warmup parse_warmup(const std::string& text) {
  const std::string hint = "--warmup " + quote(text) + ": write a time like 200ms or 2s, or a number of runs like 50";
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  const std::string number = text.substr(0, end), unit = text.substr(end);
  char* stop = nullptr;
  const double value = number.empty() ? -1.0 : std::strtod(number.c_str(), &stop);
  if (number.empty() || *stop != '\0' || !std::isfinite(value)) throw UsageError(hint);
  Warmup w;
  if (unit.empty()) {
    if (number.find('.') != std::string::npos) throw UsageError(hint + " (runs are a whole number)");
    w.by_time = false;
    w.runs = static_cast<int64_t>(value);
  } else if (unit == "ms" || unit == "s") {
    w.ms = unit == "s" ? value * 1000.0 : value;
  } else {
    throw UsageError(hint + " (unknown unit " + quote(unit) + ")");
  }
  return w;
}

// One step of --shape-schedule as written: the inputs it sets.
struct ParsedStep {
  std::string where;  // "--shape-schedule step 2 ('x:4x16')" for messages
  std::map<std::string, Dims> dims;
};

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  return a == std::string::npos ? std::string() : s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// STEP[,STEP...] where a STEP is NAME:DIMS[+NAME:DIMS...], or @FILE with one step per line
// ('#' starts a comment line; within a line entries may be joined by '+' or ',').
std::vector<ParsedStep> parse_schedule(const std::vector<std::string>& values) {
  std::vector<ParsedStep> steps;
  auto add = [&](std::string text, const std::string& where) {
    std::replace(text.begin(), text.end(), '+', ',');
    steps.push_back({where, parse_shape_list({text}, where)});
  };
  for (const std::string& value : values) {
    if (!value.empty() && value[0] == '@') {
      const std::string file = value.substr(1);
      const std::vector<uint8_t> bytes = read_file_bytes(file, "--shape-schedule file", kMaxFlagFileBytes);
      std::istringstream lines(std::string(bytes.begin(), bytes.end()));
      std::string line;
      for (int number = 1; std::getline(lines, line); ++number) {
        line = trimmed(line);
        if (line.empty() || line[0] == '#') continue;
        add(line,
            "--shape-schedule file " + quote(file) + " line " + std::to_string(number) + " (" + quote(line) + ")");
      }
      if (steps.empty())
        throw UsageError("--shape-schedule file " + quote(file) +
                         " has no steps; write one NAME:DIMS[+NAME:DIMS] per line");
      continue;
    }
    std::string step;
    std::istringstream parts(value);
    while (std::getline(parts, step, ',')) {
      step = trimmed(step);
      if (step.empty())
        throw UsageError("--shape-schedule " + quote(value) + " has an empty step; write STEP[,STEP...]");
      add(step, "--shape-schedule step " + std::to_string(steps.size() + 1) + " (" + quote(step) + ")");
    }
  }
  return steps;
}

std::string percentile_key(double p) {
  std::ostringstream s;
  s << "p" << p;
  return s.str();
}

int64_t lcm64(int64_t a, int64_t b) { return a / std::gcd(a, b) * b; }

// ---- engine inputs ----------------------------------------------------------------------------

struct InputSpec {
  std::string name;
  DataType type = DataType::kFloat32;
  Dims engine_dims;                   // kDynamic where the profile decides
  Dims min, max;                      // profile 0's range (the engine dims when static)
  Dims base;                          // the shape when a step does not name the input
  const InputTensor* file = nullptr;  // the tensor from --input / --inputs-dir, if any
  int64_t lo = 0, hi = 0;             // random integers: [lo, hi)
  std::string range_why;              // where the bound came from
};

std::string input_list(const std::vector<InputSpec>& inputs) {
  std::string out;
  for (const auto& in : inputs) out += (out.empty() ? "'" : ", '") + in.name + "' (" + in.engine_dims.to_string() + ")";
  return out;
}

// Checks `dims` for input `name` against the engine: the input exists, the rank, the fixed dims and
// profile 0's range.
void check_step_dims(const std::vector<InputSpec>& inputs, const std::string& name, const Dims& dims,
                     const std::string& where) {
  auto it = std::find_if(inputs.begin(), inputs.end(), [&](const InputSpec& s) { return s.name == name; });
  if (it == inputs.end())
    throw UsageError(where + " names " + quote(name) + ", which is not an input of the engine; its inputs are " +
                     input_list(inputs));
  if (dims.rank() != it->engine_dims.rank())
    throw UsageError(where + " gives input " + quote(name) + " the shape " + dims.to_string() + " of rank " +
                     std::to_string(dims.rank()) + ", but it has rank " + std::to_string(it->engine_dims.rank()) +
                     " (" + it->engine_dims.to_string() + ")");
  for (int d = 0; d < dims.rank(); ++d) {
    if (dims[d] < it->min[d] || dims[d] > it->max[d]) {
      if (!it->engine_dims.is_dynamic())
        throw UsageError(where + " gives input " + quote(name) + " the shape " + dims.to_string() +
                         ", but its shape is fixed to " + it->engine_dims.to_string());
      throw UsageError(where + " gives input " + quote(name) + " the shape " + dims.to_string() +
                       ", outside the engine's profile (min " + it->min.to_string() + ", max " + it->max.to_string() +
                       "); choose shapes within it or build the engine with wider --min-shapes/--max-shapes");
    }
  }
}

// The extent that bounds the values of integer input `name` where it is used as an index: follows
// the input through layers that pass values on unchanged (Cast, Shuffle = Reshape / Squeeze /
// Unsqueeze / Flatten / Transpose, Identity, Reformat) to the index input of a Gather (any mode) or
// a Scatter ("elements") and takes the smallest static extent of the axes indexed there. 0 when
// the input indexes nothing, or only axes of unknown extent.
int64_t index_extent(const Network& network, const std::string& name, std::string& why) {
  const Tensor* start = nullptr;
  for (int i = 0; i < network.num_inputs(); ++i)
    if (network.input(i)->name() == name) start = network.input(i);
  int64_t best = 0;
  std::vector<const Tensor*> queue;
  std::set<const Tensor*> seen;
  if (start) queue.push_back(start);
  while (!queue.empty()) {
    const Tensor* t = queue.back();
    queue.pop_back();
    if (!seen.insert(t).second) continue;
    for (Layer* layer : t->consumers()) {
      for (int k = 0; k < layer->num_inputs(); ++k) {
        if (layer->input(k) != t) continue;
        const std::string& type = layer->type();
        if (k == 0 &&
            (type == kLayerCast || type == kLayerShuffle || type == kLayerIdentity || type == kLayerReformat)) {
          for (int o = 0; o < layer->num_outputs(); ++o) queue.push_back(layer->output(o));
          continue;
        }
        const bool gather = type == kLayerGather && k == 1;
        const bool scatter =
            type == kLayerScatter && k == 1 && layer->attrs().get_string("mode", "elements") == "elements";
        if (!gather && !scatter) continue;
        const Dims& data = layer->input(0)->dims();
        const std::string mode = gather ? layer->attrs().get_string("mode", "default") : "elements";
        std::vector<int> axes;
        if (mode == "nd") {
          const int batch = static_cast<int>(layer->attrs().get_int("batch_dims", 0));
          const Dims& idx = t->dims();
          const int64_t last = idx.rank() > 0 ? idx[idx.rank() - 1] : kDynamic;
          const int count = last > 0 ? static_cast<int>(last) : data.rank() - batch;
          for (int a = batch; a < batch + count && a < data.rank(); ++a) axes.push_back(a);
        } else if (data.rank() > 0) {
          int64_t axis = layer->attrs().get_int("axis", 0);
          if (axis < 0) axis += data.rank();
          if (axis >= 0 && axis < data.rank()) axes.push_back(static_cast<int>(axis));
        }
        for (int a : axes) {
          if (data[a] <= 0) continue;  // dynamic (or empty): unknown bound
          if (best == 0 || data[a] < best) {
            best = data[a];
            why = "indexes axis " + std::to_string(a) + " (extent " + std::to_string(data[a]) + ") of " + type + " '" +
                  layer->name() + "'";
          }
        }
      }
    }
  }
  return best;
}

// The largest value + 1 an integer type holds, capped at 2^62 (plenty for a random range).
int64_t type_limit(DataType type) {
  switch (type) {
    case DataType::kInt8:
      return 128;
    case DataType::kUInt8:
      return 256;
    case DataType::kInt16:
      return 32768;
    case DataType::kUInt16:
      return 65536;
    case DataType::kInt32:
      return int64_t{1} << 31;
    case DataType::kUInt32:
      return int64_t{1} << 32;
    default:
      return int64_t{1} << 62;
  }
}

// `count` seeded random values of the input's type: floats uniform in [-1, 1], bool 0/1, integers
// in [lo, hi), strings of 1-8 lowercase letters.
HostTensor random_tensor(const InputSpec& in, int64_t count, uint64_t seed, size_t index) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(index)};
  std::mt19937_64 rng(seq);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> integer(in.lo, std::max(in.lo, in.hi - 1));
  const Dims dims{count};
  if (in.type == DataType::kString) {
    std::vector<std::string> words(static_cast<size_t>(count));
    std::uniform_int_distribution<int> length(1, 8), letter('a', 'z');
    for (auto& w : words)
      for (int n = length(rng); n > 0; --n) w += static_cast<char>(letter(rng));
    return HostTensor::from_strings(dims, words);
  }
  HostTensor t(in.type, dims);
  for (int64_t i = 0; i < count; ++i) {
    switch (in.type) {
      case DataType::kFloat32:
        t.as<float>()[i] = static_cast<float>(real(rng));
        break;
      case DataType::kFloat64:
        t.as<double>()[i] = real(rng);
        break;
      case DataType::kFloat16:
        t.as<uint16_t>()[i] = float_to_half_bits(static_cast<float>(real(rng)));
        break;
      case DataType::kBool:
        t.as<uint8_t>()[i] = static_cast<uint8_t>(rng() & 1);
        break;
      case DataType::kInt8:
        t.as<int8_t>()[i] = static_cast<int8_t>(integer(rng));
        break;
      case DataType::kUInt8:
        t.as<uint8_t>()[i] = static_cast<uint8_t>(integer(rng));
        break;
      case DataType::kInt16:
        t.as<int16_t>()[i] = static_cast<int16_t>(integer(rng));
        break;
      case DataType::kUInt16:
        t.as<uint16_t>()[i] = static_cast<uint16_t>(integer(rng));
        break;
      case DataType::kInt32:
        t.as<int32_t>()[i] = static_cast<int32_t>(integer(rng));
        break;
      case DataType::kUInt32:
        t.as<uint32_t>()[i] = static_cast<uint32_t>(integer(rng));
        break;
      case DataType::kInt64:
        t.as<int64_t>()[i] = integer(rng);
        break;
      case DataType::kUInt64:
        t.as<uint64_t>()[i] = static_cast<uint64_t>(integer(rng));
        break;
      case DataType::kString:
        break;
    }
  }
  return t;
}

bool is_integer(DataType t) { return !is_floating_point(t) && t != DataType::kBool && t != DataType::kString; }

// ---- the benchmark ----------------------------------------------------------------------------

// One schedule step resolved for every input.
struct Step {
  std::vector<Dims> dims;     // per input
  std::string text;           // "x:1x16,mask:1x16"
  int shape_row = 0;          // index into the distinct shapes
  int64_t items = 1;          // first input's dim 0
  std::vector<size_t> bytes;  // per I/O tensor (inputs, then outputs) at this step
};

struct Sample {
  int stream = 0, step = 0, buffer = 0;
  int64_t iteration = 0;
  double start_ms = 0, latency_ms = 0, enqueue_ms = 0, gpu_ms = 0, h2d_ms = 0, d2h_ms = 0;
};

// The memory of one I/O tensor in one buffer set: device + pinned staging memory on a GPU, host
// memory on the CPU.
struct TensorBuffer {
  std::unique_ptr<DeviceIo> device;
  HostTensor host;
  void* address() { return device ? device->device : host.data(); }
  void* staging() { return device ? device->pinned : host.data(); }
};

// The barrier's completion: the timed phase starts when the last stream has warmed up.
struct PhaseStart {
  Clock::time_point* start;
  void operator()() noexcept { *start = Clock::now(); }
};

struct StreamState {
  std::unique_ptr<ExecutionContext> context;
  void* stream = nullptr;
  void* events[4] = {};                         // before H2D, before enqueue, after enqueue, after D2H
  std::vector<std::vector<TensorBuffer>> sets;  // [buffer set][I/O tensor]
  std::vector<Dims> current;                    // input shapes set on the context
  std::vector<Sample> samples;
  int64_t warmup_calls = 0;
  double end_ms = 0;  // when its last timed call ended, from the start of the timed phase
  std::exception_ptr error;
};

class Bench {
 public:
  Bench(const BenchOptions& o, std::shared_ptr<Engine> engine, std::vector<InputSpec> inputs, std::vector<Step> steps,
        std::ostream& out)
      : o_(o), engine_(std::move(engine)), inputs_(std::move(inputs)), steps_(std::move(steps)), out_(out) {
    on_device_ = engine_->device() != DeviceType::kCPU;
    backend_ = &get_backend(engine_->device());
    transfers_ = on_device_ && !o.no_data_transfers;
    for (TensorIOMode mode : {TensorIOMode::kInput, TensorIOMode::kOutput})
      for (const auto& info : engine_->io_tensors())
        if (info.mode == mode) io_.push_back(&info);
  }
  ~Bench() {
    for (auto& s : streams_) {
      s.context.reset();
      for (void* e : s.events)
        if (e) backend_->destroy_event(e);
      if (s.stream) backend_->destroy_stream(s.stream);
    }
  }
  int run();

 private:
  void prepare(const std::vector<HostTensor>& data);
  void configure(ExecutionContext& context) const;
  Sample call(StreamState& s, int index, int64_t i);
  void stream_main(int index, const Warmup& warmup, std::barrier<PhaseStart>& barrier);
  json profile_run(int threads);
  json report(double walltime_ms);

  const BenchOptions& o_;
  std::shared_ptr<Engine> engine_;
  std::vector<InputSpec> inputs_;
  std::vector<Step> steps_;
  std::ostream& out_;
  std::vector<const TensorInfo*> io_;  // inputs first, then outputs (the engine's order)
  std::vector<size_t> max_bytes_;      // per I/O tensor, over the steps
  bool on_device_ = false, transfers_ = false;
  Backend* backend_ = nullptr;
  std::vector<StreamState> streams_;
  std::atomic<bool> abort_{false};
  Clock::time_point phase_start_;
};

void Bench::configure(ExecutionContext& context) const {
  if (o_.threads > 0) context.set_num_threads(o_.threads);
  if (o_.cuda_graph) context.set_graph_capture(true);
  if (o_.no_cuda_graph) context.set_graph_capture(false);
  if (o_.shape_cache > 0) context.set_shape_cache_size(o_.shape_cache);
  if (o_.graph_cache >= 0) context.set_graph_cache_size(o_.graph_cache);
}

// Sizes every buffer for the largest shapes of the schedule (asked of a scratch context, so that
// the measured contexts' counters start clean), then allocates the buffer sets of every stream and
// writes the input data into each.
void Bench::prepare(const std::vector<HostTensor>& data) {
  const size_t n_in = inputs_.size();
  max_bytes_.assign(io_.size(), 0);
  for (Step& step : steps_)
    for (size_t k = 0; k < n_in; ++k) {
      step.bytes.push_back(static_cast<size_t>(tensor_byte_size(io_[k]->type, step.dims[k])));
      max_bytes_[k] = std::max(max_bytes_[k], step.bytes.back());
    }
  auto make_buffer = [&](size_t bytes) {
    TensorBuffer b;
    if (on_device_)
      b.device = std::make_unique<DeviceIo>(*backend_, bytes);
    else
      b.host = HostTensor(DataType::kUInt8, Dims{static_cast<int64_t>(std::max<size_t>(bytes, 1))});
    return b;
  };
  auto fill_inputs = [&](std::vector<TensorBuffer>& set) {
    for (size_t k = 0; k < n_in; ++k) {
      set.push_back(make_buffer(max_bytes_[k]));
      std::memcpy(set.back().staging(), data[k].data(), std::min(max_bytes_[k], data[k].nbytes()));
      if (on_device_ && max_bytes_[k])
        backend_->copy_host_to_device(set.back().address(), set.back().staging(), max_bytes_[k], nullptr);
    }
  };
  streams_.resize(static_cast<size_t>(o_.streams));
  for (auto& s : streams_) s.sets.resize(static_cast<size_t>(o_.buffers));
  {
    std::unique_ptr<ExecutionContext> scratch = engine_->create_execution_context();
    // One thread: a thread that runs an OpenMP parallel region keeps an idle thread pool, and once
    // the pools' threads outnumber the cores libgomp cuts every team's spin-waiting short; the
    // timed contexts' teams then slept between layers (bert_tiny on 2 cores, 2 threads: 0.32-0.39
    // ms per call here against 0.20 ms in `kiln run`). Sizing buffers needs no parallel work.
    scratch->set_num_threads(1);
    std::vector<TensorBuffer>& first = streams_[0].sets[0];
    fill_inputs(first);
    for (size_t k = 0; k < n_in; ++k) scratch->set_tensor_address(io_[k]->name, first[k].address());
    for (Step& step : steps_) {
      for (size_t k = 0; k < n_in; ++k)
        if (inputs_[k].engine_dims.is_dynamic()) scratch->set_input_shape(inputs_[k].name, step.dims[k]);
      for (size_t k = n_in; k < io_.size(); ++k) {
        const Dims dims = scratch->max_tensor_shape(io_[k]->name);
        if (dims.is_dynamic())
          throw Error("output " + quote(io_[k]->name) + " has the unresolved shape " + dims.to_string() +
                      " at the shapes " + step.text);
        step.bytes.push_back(static_cast<size_t>(tensor_byte_size(io_[k]->type, dims)));
        max_bytes_[k] = std::max(max_bytes_[k], step.bytes.back());
      }
    }
  }
  for (size_t s = 0; s < streams_.size(); ++s) {
    StreamState& st = streams_[s];
    for (size_t b = 0; b < st.sets.size(); ++b) {
      if (s || b) fill_inputs(st.sets[b]);
      for (size_t k = n_in; k < io_.size(); ++k) st.sets[b].push_back(make_buffer(max_bytes_[k]));
    }
    st.context = engine_->create_execution_context();
    configure(*st.context);
    if (on_device_) st.stream = backend_->create_stream();
    for (void*& e : st.events) e = backend_->create_event();
    st.current.assign(n_in, Dims{});
  }
}

// One inference of stream `index`, call number i: the step's shapes, the buffer set's addresses,
// [H2D], events around enqueue, [D2H], then a synchronization of the stream.
Sample Bench::call(StreamState& s, int index, int64_t i) {
  Sample r;
  r.stream = index;
  r.iteration = i;
  r.step = static_cast<int>(i % static_cast<int64_t>(steps_.size()));
  r.buffer = static_cast<int>(i % o_.buffers);
  const Step& step = steps_[static_cast<size_t>(r.step)];
  ExecutionContext& ctx = *s.context;
  const size_t n_in = inputs_.size();
  for (size_t k = 0; k < n_in; ++k) {
    if (!inputs_[k].engine_dims.is_dynamic() || s.current[k] == step.dims[k]) continue;
    ctx.set_input_shape(inputs_[k].name, step.dims[k]);
    s.current[k] = step.dims[k];
  }
  std::vector<TensorBuffer>& set = s.sets[static_cast<size_t>(r.buffer)];
  for (size_t k = 0; k < io_.size(); ++k) ctx.set_tensor_address(io_[k]->name, set[k].address());

  const Clock::time_point t0 = Clock::now();
  if (transfers_) {
    backend_->record_event(s.events[0], s.stream);
    for (size_t k = 0; k < n_in; ++k)
      if (step.bytes[k]) backend_->copy_host_to_device(set[k].address(), set[k].staging(), step.bytes[k], s.stream);
  }
  backend_->record_event(s.events[1], s.stream);
  const Clock::time_point t1 = Clock::now();
  ctx.enqueue(s.stream);
  const Clock::time_point t2 = Clock::now();
  backend_->record_event(s.events[2], s.stream);
  if (transfers_) {
    for (size_t k = n_in; k < io_.size(); ++k)
      if (step.bytes[k]) backend_->copy_device_to_host(set[k].staging(), set[k].address(), step.bytes[k], s.stream);
    backend_->record_event(s.events[3], s.stream);
  }
  backend_->synchronize(s.stream);
  const Clock::time_point t3 = Clock::now();
  r.start_ms = ms_between(phase_start_, t0);
  r.latency_ms = ms_between(t0, t3);
  r.enqueue_ms = ms_between(t1, t2);
  r.gpu_ms = backend_->elapsed_ms(s.events[1], s.events[2]);
  if (transfers_) {
    r.h2d_ms = backend_->elapsed_ms(s.events[0], s.events[1]);
    r.d2h_ms = backend_->elapsed_ms(s.events[2], s.events[3]);
  }
  return r;
}

// The thread of one stream: warm-up, wait for every stream, the timed calls, then the device
// error check. An error stops every stream (abort_) and is rethrown by run().
void Bench::stream_main(int index, const Warmup& warmup, std::barrier<PhaseStart>& barrier) {
  StreamState& s = streams_[static_cast<size_t>(index)];
  try {
    // Every (step, buffer set) pair the timed phase uses comes up once in lcm(steps, buffers) calls.
    const int64_t cover = lcm64(static_cast<int64_t>(steps_.size()), o_.buffers);
    const Clock::time_point start = Clock::now();
    if (warmup.by_time) {
      while (!abort_ && (s.warmup_calls < cover || ms_between(start, Clock::now()) < warmup.ms))
        call(s, index, s.warmup_calls++);
    } else if (warmup.runs > 0) {
      while (!abort_ && s.warmup_calls < std::max(warmup.runs, cover)) call(s, index, s.warmup_calls++);
    }
  } catch (...) {
    s.error = std::current_exception();
    abort_ = true;
  }
  barrier.arrive_and_wait();
  if (abort_) return;
  try {
    for (int64_t i = 0; !abort_; ++i) {
      if (i >= o_.iterations && s.end_ms >= o_.duration * 1000.0) break;
      s.samples.push_back(call(s, index, i));
      s.end_ms = s.samples.back().start_ms + s.samples.back().latency_ms;
    }
    s.context->check_device_errors();
  } catch (...) {
    s.error = std::current_exception();
    abort_ = true;
  }
}

// The per-layer profile: a fresh context with profiling on runs the schedule on stream 0's first
// buffer set (its device memory holds every input at the largest shapes again first). CPU: with
// the thread count the timed contexts had, so that the layers' times compare with the timed ones.
json Bench::profile_run(int threads) {
  std::unique_ptr<ExecutionContext> ctx = engine_->create_execution_context();
  if (!on_device_) ctx->set_num_threads(threads);
  ctx->set_profiling(true);
  std::vector<TensorBuffer>& set = streams_[0].sets[0];
  for (size_t k = 0; k < io_.size(); ++k) {
    if (k < inputs_.size() && on_device_ && max_bytes_[k])
      backend_->copy_host_to_device(set[k].address(), set[k].staging(), max_bytes_[k], nullptr);
    ctx->set_tensor_address(io_[k]->name, set[k].address());
  }
  const int64_t n = static_cast<int64_t>(steps_.size());
  const int64_t runs = (std::max<int64_t>(10, n) + n - 1) / n * n;
  for (int64_t i = 0; i < runs; ++i) {
    const Step& step = steps_[static_cast<size_t>(i % n)];
    for (size_t k = 0; k < inputs_.size(); ++k)
      if (inputs_[k].engine_dims.is_dynamic()) ctx->set_input_shape(inputs_[k].name, step.dims[k]);
    ctx->execute();
  }
  const std::vector<LayerTiming> layers = ctx->layer_profile();
  double total = 0;
  for (const auto& l : layers) total += l.total_ms;
  json rows = json::array();
  for (const auto& l : layers)
    rows.push_back({{"name", l.name},
                    {"type", l.type},
                    {"kernel", l.kernel},
                    {"runs", l.runs},
                    {"elided_runs", l.elided_runs},
                    {"total_ms", l.total_ms},
                    {"mean_ms", l.runs ? l.total_ms / static_cast<double>(l.runs) : 0.0},
                    {"share", total > 0 ? l.total_ms / total : 0.0}});
  out_ << "profile: " << runs << " profiled run(s) of the schedule, " << layers.size() << " layer(s), "
       << format_fixed(total) << " ms in all -> '" << o_.export_profile << "'\n";
  return rows;
}

int Bench::run() {
  // Input data: the files, or seeded random values at the largest shapes of the schedule.
  std::vector<HostTensor> data;
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const InputSpec& in = inputs_[k];
    if (in.file) {
      data.push_back(in.file->value);
      continue;
    }
    int64_t count = 0;
    for (const Step& step : steps_) count = std::max(count, step.dims[k].volume());
    data.push_back(random_tensor(in, count, o_.seed, k));
  }
  prepare(data);

  const Warmup warmup = parse_warmup(o_.warmup);
  std::barrier<PhaseStart> barrier(o_.streams, PhaseStart{&phase_start_});
  out_ << "running: " << o_.streams << " stream(s) x " << o_.buffers << " buffer set(s), warm-up " << o_.warmup
       << ", then at least " << o_.iterations << " call(s) per stream and " << o_.duration << " s\n"
       << std::flush;
  std::vector<std::thread> threads;
  for (int s = 0; s < o_.streams; ++s)
    threads.emplace_back([this, s, &warmup, &barrier] { stream_main(s, warmup, barrier); });
  for (auto& t : threads) t.join();
  for (auto& s : streams_)
    if (s.error) std::rethrow_exception(s.error);

  double walltime_ms = 0;
  for (auto& s : streams_) walltime_ms = std::max(walltime_ms, s.end_ms);
  json summary = report(walltime_ms);

  if (!o_.export_times.empty()) {
    std::vector<const Sample*> all;
    for (auto& s : streams_)
      for (const Sample& x : s.samples) all.push_back(&x);
    std::stable_sort(all.begin(), all.end(),
                     [](const Sample* a, const Sample* b) { return a->start_ms < b->start_ms; });
    json times = json::array();
    for (const Sample* x : all)
      times.push_back({{"stream", x->stream},
                       {"iteration", x->iteration},
                       {"buffer", x->buffer},
                       {"shapes", steps_[static_cast<size_t>(x->step)].text},
                       {"start_ms", x->start_ms},
                       {"latency_ms", x->latency_ms},
                       {"enqueue_ms", x->enqueue_ms},
                       {"gpu_ms", x->gpu_ms},
                       {"h2d_ms", x->h2d_ms},
                       {"d2h_ms", x->d2h_ms}});
    const std::string text = times.dump(1) + "\n";
    write_file_bytes(o_.export_times, std::vector<uint8_t>(text.begin(), text.end()), "--export-times file");
    out_ << "times: " << all.size() << " call(s) -> '" << o_.export_times << "'\n";
  }
  if (!o_.export_profile.empty()) {
    const int threads = streams_[0].context->num_threads();
    for (auto& s : streams_) s.context.reset();
    const std::string text = profile_run(threads).dump(1) + "\n";
    write_file_bytes(o_.export_profile, std::vector<uint8_t>(text.begin(), text.end()), "--export-profile file");
  }
  if (o_.json) std::cout << summary.dump(2) << std::endl;
  return kExitOk;
}

// STATS of `v`: min, max, mean, median, p50/p90/p95/p99 and each --percentile.
json stats_json(std::vector<double> v, const std::vector<double>& extra) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  json s;
  s["min"] = n ? v.front() : 0.0;
  s["max"] = n ? v.back() : 0.0;
  s["mean"] = n ? std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n) : 0.0;
  s["median"] = n ? ((n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0.0;
  for (double p : {50.0, 90.0, 95.0, 99.0}) s[percentile_key(p)] = nearest_rank_percentile(v, p);
  for (double p : extra) s[percentile_key(p)] = nearest_rank_percentile(v, p);
  return s;
}

// "min = 1.234 ms, max = ..., percentile(90%) = ..." as trtexec prints it.
std::string stats_text(const json& s, const std::vector<double>& extra) {
  std::string line = "min = " + format_fixed(s["min"].get<double>()) +
                     " ms, max = " + format_fixed(s["max"].get<double>()) +
                     " ms, mean = " + format_fixed(s["mean"].get<double>()) +
                     " ms, median = " + format_fixed(s["median"].get<double>()) + " ms";
  std::vector<double> ps = {90.0, 95.0, 99.0};
  for (double p : extra)
    if (std::find(ps.begin(), ps.end(), p) == ps.end()) ps.push_back(p);
  for (double p : ps)
    line += ", percentile(" + percentile_key(p).substr(1) + "%) = " + format_fixed(s[percentile_key(p)].get<double>()) +
            " ms";
  return line;
}

json Bench::report(double walltime_ms) {
  const auto& pct = o_.percentiles;
  std::vector<double> latency, enqueue, gpu, h2d, d2h;
  int64_t items = 0, calls = 0, warmup_calls = 0;
  std::vector<std::vector<double>> shape_latency, shape_gpu;
  std::vector<std::string> shape_text;
  for (const Step& step : steps_) {
    if (step.shape_row >= static_cast<int>(shape_text.size())) {
      shape_text.push_back(step.text);
      shape_latency.emplace_back();
      shape_gpu.emplace_back();
    }
  }
  json per_stream = json::array();
  for (size_t i = 0; i < streams_.size(); ++i) {
    const StreamState& s = streams_[i];
    warmup_calls += s.warmup_calls;
    for (const Sample& x : s.samples) {
      latency.push_back(x.latency_ms);
      enqueue.push_back(x.enqueue_ms);
      gpu.push_back(x.gpu_ms);
      h2d.push_back(x.h2d_ms);
      d2h.push_back(x.d2h_ms);
      const Step& step = steps_[static_cast<size_t>(x.step)];
      items += step.items;
      shape_latency[static_cast<size_t>(step.shape_row)].push_back(x.latency_ms);
      shape_gpu[static_cast<size_t>(step.shape_row)].push_back(x.gpu_ms);
    }
    calls += static_cast<int64_t>(s.samples.size());
    per_stream.push_back(
        {{"stream", i},
         {"iterations", s.samples.size()},
         {"walltime_s", s.end_ms / 1000.0},
         {"throughput_qps", s.end_ms > 0 ? 1000.0 * static_cast<double>(s.samples.size()) / s.end_ms : 0.0}});
  }
  const double qps = walltime_ms > 0 ? 1000.0 * static_cast<double>(calls) / walltime_ms : 0.0;
  const double items_per_s = walltime_ms > 0 ? 1000.0 * static_cast<double>(items) / walltime_ms : 0.0;
  const double gpu_total_ms = std::accumulate(gpu.begin(), gpu.end(), 0.0);

  ContextStats sum;
  for (const auto& s : streams_) {
    const ContextStats c = s.context->stats();
    sum.inferences += c.inferences;
    sum.shape_plans_built += c.shape_plans_built;
    sum.shape_plan_hits += c.shape_plan_hits;
    sum.shape_plans_evicted += c.shape_plans_evicted;
    sum.graph_captures += c.graph_captures;
    sum.graph_instantiations += c.graph_instantiations;
    sum.graph_updates += c.graph_updates;
    sum.graph_replays += c.graph_replays;
    sum.graph_capture_failures += c.graph_capture_failures;
    sum.plain_inferences += c.plain_inferences;
    sum.device_allocations += c.device_allocations;
    sum.thread_reductions += c.thread_reductions;
    sum.thread_restorations += c.thread_restorations;
    sum.shape_plan_ms += c.shape_plan_ms;
    sum.capture_ms += c.capture_ms;
    sum.instantiate_ms += c.instantiate_ms;
    sum.update_ms += c.update_ms;
  }

  json j;
  j["engine"] = o_.engine.empty() ? o_.onnx : o_.engine;
  j["device"] = to_string(engine_->device());
  j["streams"] = o_.streams;
  j["buffers"] = o_.buffers;
  j["cuda_graph"] = o_.cuda_graph ? "on" : (o_.no_cuda_graph || !on_device_) ? "off" : "auto";
  j["data_transfers"] = transfers_;
  j["threads"] = streams_[0].context->num_threads();
  j["warmup_iterations"] = warmup_calls;
  j["iterations"] = calls;
  j["walltime_s"] = walltime_ms / 1000.0;
  j["throughput_qps"] = qps;
  j["throughput_items_per_s"] = items_per_s;
  j["items"] = items;
  j["total_gpu_compute_s"] = gpu_total_ms / 1000.0;
  j["latency_ms"] = stats_json(latency, pct);
  j["enqueue_ms"] = stats_json(enqueue, pct);
  j["gpu_compute_ms"] = stats_json(gpu, pct);
  j["h2d_ms"] = stats_json(h2d, pct);
  j["d2h_ms"] = stats_json(d2h, pct);
  j["per_shape"] = json::array();
  for (size_t r = 0; r < shape_text.size(); ++r)
    j["per_shape"].push_back({{"shapes", shape_text[r]},
                              {"count", shape_latency[r].size()},
                              {"latency_ms", stats_json(shape_latency[r], pct)},
                              {"gpu_compute_ms", stats_json(shape_gpu[r], pct)}});
  j["per_stream"] = per_stream;
  j["schedule"] = json::array();
  for (const Step& step : steps_) j["schedule"].push_back(step.text);
  j["inputs"] = json::array();
  for (const InputSpec& in : inputs_) {
    json e = {{"name", in.name}, {"type", to_string(in.type)}, {"source", in.file ? in.file->file : "random"}};
    if (!in.file && is_integer(in.type)) e["range"] = {in.lo, in.hi};
    j["inputs"].push_back(e);
  }
  j["context_stats"] = {{"inferences", sum.inferences},
                        {"shape_plans_built", sum.shape_plans_built},
                        {"shape_plan_hits", sum.shape_plan_hits},
                        {"shape_plans_evicted", sum.shape_plans_evicted},
                        {"graph_captures", sum.graph_captures},
                        {"graph_instantiations", sum.graph_instantiations},
                        {"graph_updates", sum.graph_updates},
                        {"graph_replays", sum.graph_replays},
                        {"graph_capture_failures", sum.graph_capture_failures},
                        {"plain_inferences", sum.plain_inferences},
                        {"device_allocations", sum.device_allocations},
                        {"thread_reductions", sum.thread_reductions},
                        {"thread_restorations", sum.thread_restorations},
                        {"shape_plan_ms", sum.shape_plan_ms},
                        {"capture_ms", sum.capture_ms},
                        {"instantiate_ms", sum.instantiate_ms},
                        {"update_ms", sum.update_ms}};

  std::ostream& out = out_;
  out << "=== Performance summary ===\n";
  out << "Throughput: " << format_fixed(qps, 2) << " qps, " << format_fixed(items_per_s, 2) << " items/s (" << calls
      << " inference(s) on " << o_.streams << " stream(s) in " << format_fixed(walltime_ms / 1000.0) << " s)\n";
  out << "Latency: " << stats_text(j["latency_ms"], pct) << "\n";
  out << "Enqueue Time: " << stats_text(j["enqueue_ms"], pct) << "\n";
  if (transfers_) out << "H2D Latency: " << stats_text(j["h2d_ms"], pct) << "\n";
  // On the CPU the "device" time is the host's: the kernels run inside enqueue.
  const char* compute = on_device_ ? "GPU Compute Time" : "Compute Time (CPU engine: host time of enqueue)";
  out << compute << ": " << stats_text(j["gpu_compute_ms"], pct) << "\n";
  if (transfers_) out << "D2H Latency: " << stats_text(j["d2h_ms"], pct) << "\n";
  out << "Total Host Walltime: " << format_fixed(walltime_ms / 1000.0) << " s\n";
  out << "Total " << (on_device_ ? "GPU Compute Time" : "Compute Time") << ": " << format_fixed(gpu_total_ms / 1000.0)
      << " s\n";
  out << "Iterations per stream:";
  for (const auto& s : streams_) out << " " << s.samples.size();
  out << " (after " << warmup_calls << " warm-up call(s) in all)\n";
  if (shape_text.size() > 1) {
    size_t width = 6;
    for (const auto& t : shape_text) width = std::max(width, t.size());
    out << "Per shape (ms):\n  " << std::left << std::setw(static_cast<int>(width)) << "shapes" << std::right
        << std::setw(8) << "count" << std::setw(16) << "latency median" << std::setw(10) << "mean" << std::setw(14)
        << "GPU median" << std::setw(10) << "mean"
        << "\n";
    for (size_t r = 0; r < shape_text.size(); ++r) {
      const json& row = j["per_shape"][r];
      out << "  " << std::left << std::setw(static_cast<int>(width)) << shape_text[r] << std::right << std::setw(8)
          << row["count"].get<int64_t>() << std::setw(16) << format_fixed(row["latency_ms"]["median"].get<double>())
          << std::setw(10) << format_fixed(row["latency_ms"]["mean"].get<double>()) << std::setw(14)
          << format_fixed(row["gpu_compute_ms"]["median"].get<double>()) << std::setw(10)
          << format_fixed(row["gpu_compute_ms"]["mean"].get<double>()) << "\n";
    }
  }
  out << "Context stats (" << o_.streams << " context(s), warm-up included): " << sum.inferences << " inference(s); "
      << "shape plans built " << sum.shape_plans_built << " (" << format_fixed(sum.shape_plan_ms) << " ms), hits "
      << sum.shape_plan_hits << ", evicted " << sum.shape_plans_evicted << "; graph captures " << sum.graph_captures
      << " (" << format_fixed(sum.capture_ms) << " ms), instantiations " << sum.graph_instantiations << " ("
      << format_fixed(sum.instantiate_ms) << " ms), updates " << sum.graph_updates << " ("
      << format_fixed(sum.update_ms) << " ms), replays " << sum.graph_replays << ", capture failures "
      << sum.graph_capture_failures << "; plain inferences " << sum.plain_inferences << "; device allocations "
      << sum.device_allocations;
  if (!on_device_) {
    out << "; thread count halved " << sum.thread_reductions << " time(s) because the cores were shared, restored "
        << sum.thread_restorations << " time(s)";
  }
  out << "\n";
  return j;
}

// ---- setting up -------------------------------------------------------------------------------

struct Built {
  std::shared_ptr<Engine> engine;
  std::vector<uint8_t> bytes;  // --onnx: the serialized engine (its network is walked for index bounds)
};

// --onnx: the profile comes from the shape flags; an input they do not name takes its range from
// the schedule steps that name it (min and max over them, opt the first) or the shape of its file.
Built build_from_onnx(const BenchOptions& o, Network& network, const std::vector<ParsedStep>& schedule,
                      const std::map<std::string, const InputTensor*>& files, std::ostream& out) {
  ShapeFlags flags = o.shapes;
  std::set<std::string> named;
  for (const auto& [name, dims] : parse_shape_list(o.shapes.shapes, "--shapes")) named.insert(name);
  for (const auto& [name, dims] : parse_shape_list(o.shapes.min_shapes, "--min-shapes")) named.insert(name);
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* input = network.input(i);
    const std::string& name = input->name();
    if (named.count(name) || !input->dims().is_dynamic()) continue;
    const Dims* first = nullptr;
    Dims lo, hi;
    for (const ParsedStep& step : schedule) {
      auto it = step.dims.find(name);
      if (it == step.dims.end()) continue;
      if (!first) {
        first = &it->second;
        lo = hi = it->second;
      } else if (it->second.rank() != lo.rank()) {
        throw UsageError(step.where + " gives input " + quote(name) + " rank " + std::to_string(it->second.rank()) +
                         ", other steps rank " + std::to_string(lo.rank()));
      }
      for (int d = 0; d < lo.rank(); ++d) {
        lo[d] = std::min(lo[d], it->second[d]);
        hi[d] = std::max(hi[d], it->second[d]);
      }
    }
    if (first) {
      flags.min_shapes.push_back(name + ":" + lo.to_string());
      flags.opt_shapes.push_back(name + ":" + first->to_string());
      flags.max_shapes.push_back(name + ":" + hi.to_string());
    } else if (auto f = files.find(name); f != files.end()) {
      flags.shapes.push_back(name + ":" + f->second->value.dims().to_string());
    }
  }
  BuilderConfig config;
  config.device = parse_device_type(o.device);
  config.fp16 = o.fp16;
  config.num_threads = o.threads;
  config.verbose = o.verbose;
  config.timing_cache_path = o.timing_cache;
  config.profiles.push_back(make_profile(network, flags, out));
  BuildReport report;
  Built built;
  built.bytes = Builder().build_serialized(network, config, &report);
  out << "built '" << o.onnx << "' in memory: " << report.layers_before << " -> " << report.layers_after
      << " layers in " << format_fixed(report.build_seconds, 2) << " s\n";
  Runtime runtime;
  runtime.set_allow_compiled_plans(true);  // built by this process
  built.engine = runtime.deserialize(built.bytes.data(), built.bytes.size(), o.onnx + " (built in memory)");
  return built;
}

int run_bench(const BenchOptions& o) {
  std::ostream& out = o.json ? std::cerr : std::cout;
  if (o.verbose) default_logger().set_min_severity(Severity::kVerbose);
  if (o.engine.empty() == o.onnx.empty())
    throw UsageError("give the engine with --engine FILE or the model with --onnx FILE");
  if (!o.engine.empty()) {
    const ShapeFlags& f = o.shapes;
    if (!f.min_shapes.empty() || !f.opt_shapes.empty() || !f.max_shapes.empty())
      throw UsageError(
          "--min-shapes/--opt-shapes/--max-shapes apply when building: use them with --onnx (an engine "
          "file has its profile; --shapes and --shape-schedule choose shapes within it)");
    if (o.fp16 || !o.timing_cache.empty() || (o.device_flag && o.device_flag->count()))
      throw UsageError(
          "--device, --fp16 and --timing-cache apply when building: use them with --onnx (an engine file "
          "runs as it was built)");
  }
  if (o.streams < 1) throw UsageError("--streams " + std::to_string(o.streams) + ": need at least 1 execution context");
  if (o.buffers < 1)
    throw UsageError("--buffers " + std::to_string(o.buffers) + ": need at least 1 buffer set per stream");
  if (o.iterations < 1) throw UsageError("--iterations " + std::to_string(o.iterations) + ": need at least 1");
  if (!(o.duration >= 0)) throw UsageError("--duration must be 0 or more seconds");
  for (double p : o.percentiles)
    if (!(p >= 0 && p <= 100)) throw UsageError("--percentile " + percentile_key(p).substr(1) + " is outside 0..100");
  parse_warmup(o.warmup);
  if (o.shape_cache == 0) throw UsageError("--shape-cache 0: a context keeps at least 1 shape plan");
  using FileFlag = std::pair<std::string, const char*>;
  for (const auto& [path, flag] :
       {FileFlag{o.export_times, "--export-times"}, FileFlag{o.export_profile, "--export-profile"}}) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!path.empty() && !parent.empty() && !std::filesystem::is_directory(parent, ec))
      throw Error(std::string("cannot write ") + flag + " file " + quote(path) + ": folder '" + parent.string() +
                  "' does not exist");
  }
  check_shape_flags(o.shapes);
  const std::vector<ParsedStep> schedule = parse_schedule(o.schedule);
  load_plugins(o.plugins);

  // Input files are matched to the inputs by name; the engine's (or model's) order decides
  // which file of --inputs-dir is which.
  std::vector<InputTensor> files;
  auto load_files = [&](const std::vector<std::string>& names) {
    if (!o.inputs_dir.empty() || !o.inputs.empty()) files = load_inputs(names, o.inputs_dir, o.inputs);
  };
  std::map<std::string, const InputTensor*> file_by_name;
  Built built;
  if (!o.onnx.empty()) {
    std::unique_ptr<Network> network = load_onnx_network(o.onnx);
    std::vector<std::string> names;
    for (int i = 0; i < network->num_inputs(); ++i) names.push_back(network->input(i)->name());
    load_files(names);
    for (const auto& f : files) file_by_name[f.name] = &f;
    built = build_from_onnx(o, *network, schedule, file_by_name, out);
  } else {
    built.engine = load_engine_file(o.engine, o.allow_embedded_plugins, o.allow_compiled_plans);
    load_files(engine_input_names(*built.engine));
    for (const auto& f : files) file_by_name[f.name] = &f;
  }
  Engine& engine = *built.engine;
  const bool on_device = engine.device() != DeviceType::kCPU;
  if (o.cuda_graph && !on_device) throw UsageError("--cuda-graph needs a CUDA engine (this one runs on the CPU)");
  if (o.no_data_transfers && !on_device)
    throw UsageError(
        "--no-data-transfers applies to device engines; a CPU engine reads and writes host memory and "
        "copies nothing");

  // The inputs: types, ranges, the shape a step leaves alone.
  std::vector<InputSpec> inputs;
  {
    std::unique_ptr<ExecutionContext> probe = engine.create_execution_context();
    for (const auto& info : engine.io_tensors()) {
      if (info.mode != TensorIOMode::kInput) continue;
      if (info.format != TensorFormat::kLinear)
        throw Error("input " + quote(info.name) + " uses the " + std::string(to_string(info.format)) +
                    " format; `kiln bench` feeds linear (row-major) data only");
      InputSpec in;
      in.name = info.name;
      in.type = info.type;
      in.engine_dims = info.dims;
      in.min = in.max = info.dims;
      if (engine.num_profiles() > 0 && engine.profile(0).has(info.name)) {
        in.min = engine.profile(0).min(info.name);
        in.max = engine.profile(0).max(info.name);
      }
      in.base = probe->tensor_shape(info.name);
      if (auto f = file_by_name.find(info.name); f != file_by_name.end()) {
        in.file = f->second;
        if (in.file->value.type() != info.type)
          throw Error("input " + quote(info.name) + " is " + to_string(info.type) + ", but " + quote(in.file->file) +
                      " holds " + to_string(in.file->value.type()));
        check_step_dims({in}, info.name, in.file->value.dims(), "input file " + quote(in.file->file));
        in.base = in.file->value.dims();
      }
      inputs.push_back(in);
    }
  }
  for (const auto& [name, dims] : parse_shape_list(o.shapes.shapes, "--shapes")) {
    check_step_dims(inputs, name, dims, "--shapes");
    for (auto& in : inputs)
      if (in.name == name) {
        if (in.file && in.file->value.dims() != dims)
          throw UsageError("--shapes gives input " + quote(name) + " the shape " + dims.to_string() +
                           ", but its file '" + in.file->file + "' holds " + in.file->value.dims().to_string() +
                           "; drop the file to bench on random data");
        in.base = dims;
      }
  }

  // Steps: each the base shapes with the inputs it names replaced.
  std::vector<Step> steps;
  std::map<std::string, int> rows;
  auto add_step = [&](const std::map<std::string, Dims>& named, const std::string& where) {
    Step step;
    for (const auto& [name, dims] : named) check_step_dims(inputs, name, dims, where);
    for (const auto& in : inputs) {
      auto it = named.find(in.name);
      const Dims dims = it == named.end() ? in.base : it->second;
      if (in.file && dims != in.file->value.dims())
        throw UsageError(where + " gives input " + quote(in.name) + " the shape " + dims.to_string() +
                         ", but its file '" + in.file->file + "' holds " + in.file->value.dims().to_string() +
                         "; drop the input files to bench on random data");
      step.dims.push_back(dims);
      step.text += (step.text.empty() ? "" : ",") + in.name + ":" + dims.to_string();
    }
    if (!inputs.empty() && step.dims[0].rank() > 0) step.items = step.dims[0][0];
    step.shape_row = rows.emplace(step.text, static_cast<int>(rows.size())).first->second;
    steps.push_back(std::move(step));
  };
  if (schedule.empty()) add_step({}, "--shapes");
  for (const ParsedStep& p : schedule) add_step(p.dims, p.where);

  // Random integers: bounded by what they index where the engine's network says so.
  const bool need_network =
      std::any_of(inputs.begin(), inputs.end(), [](const InputSpec& in) { return !in.file && is_integer(in.type); });
  if (need_network) {
    if (built.bytes.empty()) built.bytes = read_file_bytes(o.engine, "engine file");
    const EngineData data =
        engine_deserialize(built.bytes.data(), built.bytes.size(), o.engine.empty() ? o.onnx : o.engine);
    for (auto& in : inputs) {
      if (in.file || !is_integer(in.type)) continue;
      const int64_t extent = index_extent(*data.network, in.name, in.range_why);
      in.hi = std::min(extent > 0 ? extent : 2, type_limit(in.type));
      if (extent <= 0) in.range_why = "indexes nothing kiln can see";
    }
  }
  built.bytes.clear();
  built.bytes.shrink_to_fit();

  out << "engine: " << (o.engine.empty() ? o.onnx + " (built in memory)" : o.engine) << " on "
      << to_string(engine.device()) << "\ninputs:\n";
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputSpec& in = inputs[k];
    out << "  " << describe_tensor(in.name, in.type, steps[0].dims[k]) << "  <- ";
    if (in.file)
      out << in.file->file;
    else if (is_integer(in.type))
      out << "random in [" << in.lo << ", " << in.hi << ") (" << in.range_why << ")";
    else
      out << "random" << (is_floating_point(in.type) ? " in [-1, 1]" : "") << " (seed " << o.seed << ")";
    out << "\n";
  }
  if (rows.size() > 1) out << "shape schedule: " << steps.size() << " step(s), " << rows.size() << " distinct\n";

  Bench bench(o, built.engine, std::move(inputs), std::move(steps), out);
  return bench.run();
}

}  // namespace

void setup_bench_command(CLI::App& parent, std::function<int()>& run) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = parent.add_subcommand(
      "bench",
      "Benchmark an engine the way servers use it (trtexec's benchmarking mode). Runs --streams execution contexts "
      "at once, each on its own thread (and CUDA stream), each rotating --buffers input/output buffer sets; input "
      "shapes come from --shapes or cycle through --shape-schedule; inputs are random (seeded; integers that index a "
      "Gather stay within its axis) unless given as files. After a warm-up, every call is timed for at least "
      "--iterations calls per stream and --duration seconds, then a summary gives throughput, latency, enqueue, "
      "copy and GPU compute statistics, a per-shape table and the contexts' plan and graph cache counters.");
  sub->footer(
      "Examples:\n"
      "  kiln bench --engine resnet50.kiln --streams 2 --buffers 2 --duration 10\n"
      "  kiln bench --engine bert.kiln --shape-schedule "
      "input_ids:1x16+attention_mask:1x16,input_ids:4x32+attention_mask:4x32 --percentile 99.9 --json > bench.json\n"
      "  kiln bench --onnx model.onnx --device cuda --fp16 --shapes images:8x3x320x320 --no-data-transfers "
      "--cuda-graph --warmup 500ms --iterations 200 --export-times times.json --export-profile profile.json\n"
      "  kiln bench --engine model.kiln --input images=x.npy --warmup 20 --shape-cache 64 --graph-cache 32 "
      "--no-cuda-graph --seed 7");
  auto* engine = sub->add_option("--engine", o->engine, "Engine file to benchmark")->type_name("FILE");
  auto* onnx = sub->add_option("--onnx", o->onnx, "ONNX model to build in memory and benchmark")->type_name("FILE");
  engine->excludes(onnx);
  o->device_flag = sub->add_option("--device", o->device, "With --onnx: the device to build for, cpu or cuda")
                       ->check(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))
                       ->capture_default_str();
  sub->add_flag("--fp16", o->fp16, "With --onnx: allow fp16 kernels (CUDA)");
  sub->add_option("--shapes", o->shapes.shapes,
                  "Run shapes NAME:DIMS[,NAME:DIMS...] (with --onnx also the profile, min = opt = max, unless the "
                  "ranges below are given)")
      ->type_name("SPEC");
  sub->add_option("--min-shapes", o->shapes.min_shapes, "With --onnx: smallest shapes of the profile")
      ->type_name("SPEC");
  sub->add_option("--opt-shapes", o->shapes.opt_shapes, "With --onnx: shapes the profile is tuned for")
      ->type_name("SPEC");
  sub->add_option("--max-shapes", o->shapes.max_shapes, "With --onnx: largest shapes of the profile")
      ->type_name("SPEC");
  sub->add_option("--timing-cache", o->timing_cache, "With --onnx on CUDA: kernel timing cache file, read and updated")
      ->type_name("FILE");
  auto* dir =
      sub->add_option("--inputs-dir", o->inputs_dir, "Input files input_<i>.pb / input_<i>.npy (default: random)")
          ->type_name("DIR");
  auto* inputs =
      sub->add_option("--input", o->inputs, "One input as NAME=FILE (.npy or .pb); repeat per input (default: random)")
          ->type_name("NAME=FILE");
  dir->excludes(inputs);
  sub->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  sub->add_option("--shape-schedule", o->schedule,
                  "Shapes cycled call by call: STEP[,STEP...], a STEP is NAME:DIMS[+NAME:DIMS...]; or @FILE with one "
                  "step per line. Inputs a step does not name keep their --shapes (or default) shape")
      ->type_name("STEPS");
  sub->add_option("--duration", o->duration, "Time at least this many seconds (with --iterations: both must be met)")
      ->type_name("S")
      ->capture_default_str();
  sub->add_option("--iterations", o->iterations, "Time at least this many calls per stream")->capture_default_str();
  sub->add_option(
         "--warmup", o->warmup,
         "Untimed warm-up per stream: a time (200ms, 2s) or a number of calls (50); at least one pass over the "
         "schedule and buffer sets, except 0, which turns warm-up off")
      ->type_name("TIME|N")
      ->capture_default_str();
  sub->add_option("--streams", o->streams, "Execution contexts running at once, each on its own thread and stream")
      ->capture_default_str();
  sub->add_option("--buffers", o->buffers, "Input/output buffer sets each context rotates through, call by call")
      ->capture_default_str();
  auto* graph_on = sub->add_flag("--cuda-graph", o->cuda_graph,
                                 "CUDA engines: replay each inference as a CUDA graph, an error where impossible "
                                 "(default: graphs where possible)");
  auto* graph_off = sub->add_flag("--no-cuda-graph", o->no_cuda_graph, "CUDA engines: launch every layer on each call");
  graph_on->excludes(graph_off);
  sub->add_flag("--no-data-transfers", o->no_data_transfers,
                "CUDA engines: upload the inputs once per buffer set and copy nothing per call (default: each call "
                "copies its inputs in and its outputs out through pinned memory)");
  sub->add_option("--shape-cache", o->shape_cache,
                  "Shape plans each context keeps (ExecutionContext::set_shape_cache_size)")
      ->type_name("N");
  sub->add_option("--graph-cache", o->graph_cache, "CUDA graphs each context keeps (set_graph_cache_size; 0: none)")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--percentile", o->percentiles,
                  "Also report this percentile, 0..100 (repeatable; p50/90/95/99 always)")
      ->type_name("P");
  sub->add_option("--export-times", o->export_times, "Write every timed call's times to FILE as a JSON array")
      ->type_name("FILE");
  sub->add_option("--export-profile", o->export_profile,
                  "After the timed run, profile each layer in a separate run and write the rows to FILE as JSON")
      ->type_name("FILE");
  add_threads_option(*sub, o->threads,
                     "CPU threads per context (0: the engine's setting, cores shared among contexts)");
  sub->add_flag("--json", o->json, "Print the summary as one JSON object on stdout (the report goes to stderr)");
  sub->add_option("--plugins", o->plugins, "Plugin library the engine needs, loaded first (repeatable)")
      ->type_name("LIB.so");
  sub->add_flag("--allow-compiled-plans", o->allow_compiled_plans, kAllowCompiledPlansHelp);
  sub->add_flag("--allow-embedded-plugins", o->allow_embedded_plugins,
                "Load the plugin libraries embedded in the engine (runs code from the engine file)");
  sub->add_flag("-v,--verbose", o->verbose, "Print the library's progress messages");
  sub->callback([&run, o] { run = [o] { return run_bench(*o); }; });
}

}  // namespace kiln::cli
