// kiln as a Triton Inference Server backend (docs/serving.md): libtriton_kiln.so, loaded by
// tritonserver from --backend-directory/kiln/. A model is a kiln engine file, or an ONNX file
// built into an engine when the model loads (cached next to it, keyed by kiln's version, the
// device and the build parameters). The model configuration can be completed from the engine
// (inputs, outputs, types, dims, max_batch_size from the profile). Each instance of
// instance_group is one execution context on the shared engine; Triton's dynamic batcher hands an
// instance several requests, which run as one inference when their shapes allow it. A bad request (a missing or unknown
// input, a wrong type, shape or byte size, a batch outside the profile) gets an error response
// naming the input and the model, and the other requests of the batch still run.
//
// Request data in GPU memory (a client's CUDA shared memory region, or an in-process caller's
// device buffers): CUDA engines copy such inputs device-to-device into their input staging and
// write outputs the server's allocator places in GPU memory device-to-device, so neither crosses
// the PCIe bus; host inputs and outputs go through pinned staging. CPU engines answer GPU-memory
// inputs and outputs with an error naming the tensor.
//
// Parameters (config.pbtxt `parameters { key: ... value { string_value: ... } }`):
//   plugin_libraries        comma-separated plugin libraries to load (relative to the model folder)
//   allow_embedded_plugins  "true": load plugin libraries embedded in the engine (runs their code)
//   allow_compiled_plans    "false": build the engine's cuDNN plans instead of loading the compiled
//                           ones it carries (GPU code from the file; default "true")
//   device                  "cpu" (default) or "cuda": the device ONNX models are built for
//   precision               "fp32" (default) or "fp16": ONNX builds allow fp16 kernels (kiln
//                           build --fp16)
//   builder_optimization_level  0..5 (default 3): ONNX builds' kernel search (kiln build
//                           --builder-optimization-level)
//   threads                 CPU threads per instance (default: the cores divided among instances)
//   min_batch / opt_batch   the batch range ONNX models are built for (max: max_batch_size)
//   compiled_plans_every_batch  "true" (default): CUDA ONNX builds store the cuDNN plans of every
//                           batch size; "false": those of min, opt and max only
//   warmup                  "batch_sizes": each instance runs every batch size of the profile
//                           up to max_batch_size twice when it starts (shape plans, kernels
//                           prepared per shape, CUDA graphs), so no request pays those first-time
//                           costs (seconds on CUDA with cuDNN graph-API kernels); "none" skips it.
//                           Default: batch_sizes on CUDA, none on the CPU (cheap first calls).
//   input_copy_threads      threads per instance that help copy request inputs into the engine's
//                           input (CPU) or pinned staging (CUDA) when a batch's input has at least
//                           256 KiB (parallel_copy.h); 0: the instance's thread copies alone.
//                           Default: 0 (on an H200, 3 helpers cut a 602 KB input's copy from 93
//                           to 76 us per execution: the source's read rate bounds it, not threads).
// A parameter with a value outside these fails the model's load, naming it (the ONNX build's
// parameters device, precision, builder_optimization_level, min_batch, opt_batch and
// compiled_plans_every_batch are read only for ONNX models). ONNX builds are cached beside the
// model, named by kiln's version, the device (GPU model) and those parameters.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "serving/triton/parallel_copy.h"
#include "src/backends/backend.h"
#include "triton/core/tritonbackend.h"

namespace kiln::triton {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ---- errors and logging -------------------------------------------------------------------

TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, message.c_str());
}

void log_line(TRITONSERVER_LogLevel level, const std::string& message) {
  TRITONSERVER_Error* e = TRITONSERVER_LogMessage(level, __FILE__, __LINE__, message.c_str());
  if (e) TRITONSERVER_ErrorDelete(e);
}

// Throws kiln::Error with Triton's message when a Triton call fails.
void check(TRITONSERVER_Error* e, const char* what) {
  if (!e) return;
  std::string message = std::string(what) + ": " + TRITONSERVER_ErrorMessage(e);
  TRITONSERVER_ErrorDelete(e);
  throw Error(message);
}

// Runs f, turning every exception into a Triton error (nothing may escape into the server).
template <class F>
TRITONSERVER_Error* guarded(const std::string& where, F&& f) {
  try {
    f();
    return nullptr;
  } catch (const std::exception& e) {
    return error(TRITONSERVER_ERROR_INTERNAL, "kiln backend: " + where + ": " + e.what());
  } catch (...) {
    return error(TRITONSERVER_ERROR_INTERNAL, "kiln backend: " + where + ": unknown exception");
  }
}

// Routes kiln's log to Triton's.
class TritonLogger : public Logger {
 public:
  void log(Severity s, const std::string& message) override {
    const TRITONSERVER_LogLevel level = s == Severity::kError     ? TRITONSERVER_LOG_ERROR
                                        : s == Severity::kWarning ? TRITONSERVER_LOG_WARN
                                        : s == Severity::kInfo    ? TRITONSERVER_LOG_INFO
                                                                  : TRITONSERVER_LOG_VERBOSE;
    log_line(level, "kiln: " + message);
  }
};

// ---- types --------------------------------------------------------------------------------

struct TypeNames {
  DataType kiln;
  TRITONSERVER_DataType triton;
  const char* config;
};
constexpr TypeNames kTypes[] = {
    {DataType::kFloat32, TRITONSERVER_TYPE_FP32, "TYPE_FP32"},
    {DataType::kFloat16, TRITONSERVER_TYPE_FP16, "TYPE_FP16"},
    {DataType::kFloat64, TRITONSERVER_TYPE_FP64, "TYPE_FP64"},
    {DataType::kInt8, TRITONSERVER_TYPE_INT8, "TYPE_INT8"},
    {DataType::kInt16, TRITONSERVER_TYPE_INT16, "TYPE_INT16"},
    {DataType::kInt32, TRITONSERVER_TYPE_INT32, "TYPE_INT32"},
    {DataType::kInt64, TRITONSERVER_TYPE_INT64, "TYPE_INT64"},
    {DataType::kUInt8, TRITONSERVER_TYPE_UINT8, "TYPE_UINT8"},
    {DataType::kUInt16, TRITONSERVER_TYPE_UINT16, "TYPE_UINT16"},
    {DataType::kUInt32, TRITONSERVER_TYPE_UINT32, "TYPE_UINT32"},
    {DataType::kUInt64, TRITONSERVER_TYPE_UINT64, "TYPE_UINT64"},
    {DataType::kBool, TRITONSERVER_TYPE_BOOL, "TYPE_BOOL"},
};

const TypeNames* names_of(DataType t) {
  for (const auto& n : kTypes)
    if (n.kiln == t) return &n;
  return nullptr;
}
const TypeNames* names_of(TRITONSERVER_DataType t) {
  for (const auto& n : kTypes)
    if (n.triton == t) return &n;
  return nullptr;
}
const TypeNames* names_of(const std::string& config) {
  for (const auto& n : kTypes)
    if (config == n.config) return &n;
  return nullptr;
}

std::string shape_text(const int64_t* d, uint32_t n) {
  std::string s = "[";
  for (uint32_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::string parameter(const json& config, const std::string& key, const std::string& def = "") {
  auto p = config.find("parameters");
  if (p == config.end() || !p->contains(key)) return def;
  const json& v = (*p)[key];
  if (v.is_object() && v.contains("string_value")) return v["string_value"].get<std::string>();
  return def;
}

// ---- the model ------------------------------------------------------------------------------

struct ModelState {
  std::string name;
  std::string dir;  // <repository>/<model>/<version>
  json config;
  std::shared_ptr<Engine> engine;
  int max_batch = 0;  // Triton's max_batch_size: 0 = no batch dim in requests
  std::vector<TensorInfo> inputs, outputs;
  int threads = 0;
  int input_copy_threads = 0;  // workers per instance helping the input copy (ParallelCopier)
};

// Parameters with a fixed form: anything else fails the model's load with a message naming the
// parameter, its value and what is expected (the caller's message adds the model).
std::string bad_parameter(const std::string& key, const std::string& value, const std::string& expected) {
  return "parameter '" + key + "' is \"" + value + "\"; expected " + expected;
}

// An integer lo..hi (decimal digits only), `def` when the parameter is absent.
int64_t int_parameter(const json& config, const std::string& key, int64_t def, int64_t lo, int64_t hi,
                      const std::string& meaning) {
  const std::string text = parameter(config, key);
  if (text.empty()) return def;
  const bool digits =
      text.size() <= 9 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int64_t value = digits ? std::stoll(text) : lo - 1;
  if (value < lo || value > hi) {
    throw Error(bad_parameter(key, text,
                              "an integer " + std::to_string(lo) + ".." + std::to_string(hi) + " (" + meaning + ")"));
  }
  return value;
}

// One of `allowed` (the first is the default when the parameter is absent, unless `def` is given).
std::string choice_parameter(const json& config, const std::string& key, const std::vector<std::string>& allowed,
                             const std::string& def = "") {
  const std::string text = parameter(config, key, def.empty() ? allowed.front() : def);
  if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) return text;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
  throw Error(bad_parameter(key, text, "one of " + list));
}

bool bool_parameter(const json& config, const std::string& key, bool def) {
  return choice_parameter(config, key, {"true", "false"}, def ? "true" : "false") == "true";
}

// The `input_copy_threads` parameter (default 0 on every device: on the H200 three helpers copied
// 64% of a 602 KB input's chunks yet cut the copy only from 93 to 76 us,
// bench/results/2026-12-03_h200_session17_triton_gpu_sweep.md).
constexpr int kMaxInputCopyThreads = 64;
int parse_input_copy_threads(const ModelState& m) {
  return static_cast<int>(int_parameter(m.config, "input_copy_threads", 0, 0, kMaxInputCopyThreads,
                                        "threads per instance that help copy request inputs; 0: none"));
}

// How the backend builds an ONNX model: the parameters that change the engine, checked before
// anything is built. Their values name the cached engine, so changing one builds a new engine.
struct OnnxBuildSettings {
  DeviceType device = DeviceType::kCPU;
  bool fp16 = false;
  int level = 3;
  int64_t min_batch = 1, opt_batch = 1, max_batch = 1;
  bool plans_every_batch = true;

  // The part of the cache file's name after the device: "fp16.level3.batch1-4-8".
  std::string tag() const {
    return std::string(fp16 ? "fp16" : "fp32") + ".level" + std::to_string(level) + ".batch" +
           std::to_string(min_batch) + "-" + std::to_string(opt_batch) + "-" + std::to_string(max_batch) +
           (device == DeviceType::kCUDA && !plans_every_batch ? ".plans-at-points" : "");
  }
};

OnnxBuildSettings onnx_build_settings(const ModelState& m) {
  OnnxBuildSettings b;
  const std::string device = parameter(m.config, "device", "cpu");
  try {
    b.device = parse_device_type(device);
  } catch (const Error&) {
    throw Error(bad_parameter("device", device, "\"cpu\" or \"cuda\" (the device ONNX models are built for)"));
  }
  b.fp16 = choice_parameter(m.config, "precision", {"fp32", "fp16"}) == "fp16";
  b.level = static_cast<int>(int_parameter(m.config, "builder_optimization_level", 3, 0, 5,
                                           "how hard the build searches for the fastest kernels, as `kiln build "
                                           "--builder-optimization-level`"));
  b.plans_every_batch = bool_parameter(m.config, "compiled_plans_every_batch", true);
  b.max_batch = std::max<int64_t>(1, m.config.value("max_batch_size", 0));
  b.min_batch = int_parameter(m.config, "min_batch", 1, 1, b.max_batch,
                              "the smallest batch the engine is built for, at most max_batch_size");
  b.opt_batch = int_parameter(m.config, "opt_batch", b.max_batch, b.min_batch, b.max_batch,
                              "the batch the engine's kernels are chosen for, min_batch..max_batch_size");
  return b;
}

// The engine of a model: an engine file, or an ONNX file built now (and cached beside it).
std::shared_ptr<Engine> load_engine(ModelState& m) {
  for (const std::string& lib : [&] {
         std::vector<std::string> libs;
         std::stringstream ss(parameter(m.config, "plugin_libraries"));
         for (std::string item; std::getline(ss, item, ',');) {
           if (!item.empty())
             libs.push_back(fs::path(item).is_absolute() ? item : (fs::path(m.dir) / ".." / item).string());
         }
         return libs;
       }()) {
    load_plugin_library(lib);
  }
  Runtime runtime;
  runtime.set_allow_embedded_plugins(bool_parameter(m.config, "allow_embedded_plugins", false));
  // The model repository is the server's trusted configuration (Triton runs its Python models'
  // code): an engine's compiled plans load unless the model says "false".
  runtime.set_allow_compiled_plans(bool_parameter(m.config, "allow_compiled_plans", true));
  std::string file = m.config.value("default_model_filename", std::string());
  if (file.empty()) file = fs::exists(fs::path(m.dir) / "model.kiln") ? "model.kiln" : "model.onnx";
  const fs::path path = fs::path(m.dir) / file;
  if (!fs::exists(path)) {
    throw Error("model '" + m.name + "': no model file " + path.string() +
                " (put model.kiln, an engine from `kiln build`, or model.onnx there, or set default_model_filename)");
  }
  if (path.extension() != ".onnx") return runtime.deserialize_file(path.string());

  const OnnxBuildSettings b = onnx_build_settings(m);
  // The cache is per kiln version and per device, and on CUDA per GPU model: a model folder
  // shared by servers on several GPU types (a volume in a cluster) keeps one engine per type;
  // and per build settings (precision, level, batch range), so changing one rebuilds.
  std::string tag = to_string(b.device);
  if (b.device == DeviceType::kCUDA) {
    tag = "cuda-" + get_backend(DeviceType::kCUDA).describe();  // "NVIDIA H200 sm_90"
    for (char& c : tag) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
    }
  }
  const fs::path cache = path.string() + "." + version() + "." + tag + "." + b.tag() + ".kiln";
  if (fs::exists(cache) && fs::last_write_time(cache) >= fs::last_write_time(path)) {
    try {
      return runtime.deserialize_file(cache.string());
    } catch (const std::exception& e) {
      log_line(TRITONSERVER_LOG_WARN, "kiln: rebuilding " + cache.string() + ": " + e.what());
    }
  }
  Network net;
  OnnxParser(net).parse_file(path.string());
  BuilderConfig config;
  config.device = b.device;
  config.fp16 = b.fp16;
  config.optimization_level = b.level;
  // CUDA: the cuDNN plans of every batch size the batcher may form go into the cached engine, so
  // that the warm-up (and a restart, or a replica given the cached engine) loads them instead of
  // compiling them (docs/serving.md, "Start-up on fresh GPU hosts").
  config.compiled_plans_every_batch = b.plans_every_batch;
  OptimizationProfile profile;
  bool dynamic = false;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Tensor* t = net.input(i);
    Dims lo = t->dims(), opt = t->dims(), hi = t->dims();
    for (int k = 0; k < t->dims().rank(); ++k) {
      if (t->dims()[k] != kDynamic) continue;
      if (k != 0) {
        throw Error("model '" + m.name + "': input '" + t->name() + "' of " + path.string() + " has a dynamic dim " +
                    std::to_string(k) +
                    " beyond the batch; build the engine with `kiln build` and its profile, and "
                    "serve model.kiln");
      }
      lo[0] = b.min_batch;
      opt[0] = b.opt_batch;
      hi[0] = b.max_batch;
      dynamic = true;
    }
    if (dynamic) profile.set_dimensions(t->name(), lo, opt, hi);
  }
  if (dynamic) config.profiles.push_back(profile);
  log_line(TRITONSERVER_LOG_INFO, "kiln: building an engine for " + path.string() + " on " + to_string(b.device) +
                                      " (" + b.tag() + ") into " + cache.filename().string());
  const std::vector<uint8_t> bytes = Builder().build_serialized(net, config);
  const fs::path tmp = cache.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error("cannot write the engine cache " + tmp.string());
  }
  fs::rename(tmp, cache);
  return runtime.deserialize(bytes.data(), bytes.size(), cache.string());
}

json tensor_config(const TensorInfo& t, int max_batch) {
  json j;
  j["name"] = t.name;
  const TypeNames* n = names_of(t.type);
  if (!n) throw Error("tensor '" + t.name + "' has type " + to_string(t.type) + ", which this backend does not serve");
  j["data_type"] = n->config;
  json dims = json::array();
  for (int k = max_batch > 0 ? 1 : 0; k < t.dims.rank(); ++k) dims.push_back(t.dims[k]);
  j["dims"] = dims;
  return j;
}

// Completes (when Triton allows) and checks the configuration against the engine.
void reconcile_config(ModelState& m, TRITONBACKEND_Model* model) {
  for (const TensorInfo& t : m.engine->io_tensors())
    (t.mode == TensorIOMode::kInput ? m.inputs : m.outputs).push_back(t);
  bool auto_complete = false;
  check(TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete), "ModelAutoCompleteConfig");
  bool batch_dim = !m.inputs.empty();
  int64_t engine_max_batch = 0;
  for (const TensorInfo& t : m.inputs) {
    if (t.dims.rank() == 0 || t.dims[0] != kDynamic) batch_dim = false;
  }
  if (batch_dim && m.engine->num_profiles() > 0) {
    engine_max_batch = INT64_MAX;
    for (const TensorInfo& t : m.inputs)
      engine_max_batch = std::min(engine_max_batch, m.engine->profile(0).max(t.name)[0]);
  }
  if (auto_complete) {
    bool changed = false;
    if (!m.config.contains("max_batch_size") || m.config["max_batch_size"].get<int64_t>() == 0) {
      if (batch_dim) {
        m.config["max_batch_size"] = engine_max_batch;
        changed = true;
      }
    }
    const int mb = m.config.value("max_batch_size", 0);
    if (!m.config.contains("input") || m.config["input"].empty()) {
      for (const TensorInfo& t : m.inputs) m.config["input"].push_back(tensor_config(t, mb));
      changed = true;
    }
    if (!m.config.contains("output") || m.config["output"].empty()) {
      for (const TensorInfo& t : m.outputs) m.config["output"].push_back(tensor_config(t, mb));
      changed = true;
    }
    if (changed) {
      const std::string text = m.config.dump();
      TRITONSERVER_Message* msg = nullptr;
      check(TRITONSERVER_MessageNewFromSerializedJson(&msg, text.data(), text.size()), "MessageNewFromSerializedJson");
      TRITONSERVER_Error* e = TRITONBACKEND_ModelSetConfig(model, 1, msg);
      TRITONSERVER_MessageDelete(msg);
      check(e, "ModelSetConfig");
    }
  }
  m.max_batch = m.config.value("max_batch_size", 0);
  if (m.max_batch > 0 && !batch_dim) {
    throw Error("model '" + m.name + "': max_batch_size is " + std::to_string(m.max_batch) +
                " but the engine's inputs have no dynamic batch dim (dim 0); set max_batch_size: 0");
  }
  if (m.max_batch > 0 && m.max_batch > engine_max_batch) {
    throw Error("model '" + m.name + "': max_batch_size " + std::to_string(m.max_batch) +
                " exceeds the engine's profile, whose largest batch is " + std::to_string(engine_max_batch));
  }
  // Every configured input and output must be one of the engine's, with its type.
  for (const char* section : {"input", "output"}) {
    if (!m.config.contains(section)) continue;
    for (const json& c : m.config[section]) {
      const std::string name = c.value("name", std::string());
      const TensorInfo* t = nullptr;
      for (const TensorInfo& e : m.engine->io_tensors())
        if (e.name == name) t = &e;
      if (!t) {
        std::string names;
        for (const TensorInfo& e : m.engine->io_tensors()) names += (names.empty() ? "" : ", ") + e.name;
        throw Error("model '" + m.name + "': config " + section + " '" + name +
                    "' is not a tensor of the engine (it has: " + names + ")");
      }
      const TypeNames* n = names_of(c.value("data_type", std::string()));
      if (!n || n->kiln != t->type) {
        throw Error("model '" + m.name + "': config " + section + " '" + name + "' has data_type " +
                    c.value("data_type", std::string("?")) + ", the engine's tensor is " + to_string(t->type));
      }
    }
  }
}

// ---- an instance --------------------------------------------------------------------------

// Memory of at least `size` bytes, reused across executions: host memory (no backend), the
// backend's device memory, or (pinned) the host memory the device copies from and to fastest.
struct Staging {
  Backend* backend = nullptr;  // null: host memory
  bool pinned = false;         // with a backend: Backend::allocate_host instead of allocate
  void* ptr = nullptr;
  size_t size = 0;
  std::vector<uint8_t> host;
  Staging() = default;
  Staging(Backend* b, bool pinned_host) : backend(b), pinned(pinned_host) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  Staging(Staging&& o) noexcept
      : backend(o.backend),
        pinned(o.pinned),
        ptr(std::exchange(o.ptr, nullptr)),
        size(o.size),
        host(std::move(o.host)) {}
  uint8_t* reserve(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    if (!backend) {
      if (host.size() < bytes) host.resize(bytes);
      return host.data();
    }
    if (size < bytes) {
      free();
      ptr = pinned ? backend->allocate_host(bytes) : backend->allocate(bytes);
      size = bytes;
    }
    return static_cast<uint8_t*>(ptr);
  }
  void free() {
    if (backend && ptr) pinned ? backend->release_host(ptr) : backend->release(ptr);
    ptr = nullptr;
    size = 0;
  }
  ~Staging() { free(); }
};

struct InstanceState {
  ModelState* model = nullptr;
  std::string name;
  std::unique_ptr<ExecutionContext> ctx;
  // CUDA engines: inputs gathered into pinned host memory, copied to device staging on the
  // instance's own stream, the inference enqueued on it, the outputs copied back into pinned
  // memory, one wait (never the default stream, which would serialize the instances).
  Backend* device = nullptr;
  void* stream = nullptr;
  std::vector<Staging> in, out;
  std::vector<Staging> pinned_in, pinned_out;
  // Copies request inputs into `in` (CPU) or `pinned_in` (CUDA) with input_copy_threads helpers.
  std::unique_ptr<ParallelCopier> copier;
  // Where the input gathering's time went, logged when the instance is unloaded (a request's
  // compute_input in Triton's statistics is mostly this copy when inputs are large).
  struct InputCopyTotals {
    uint64_t executions = 0;
    uint64_t host_buffers = 0, host_bytes = 0;      // request buffers in host memory, copied by copier
    uint64_t device_buffers = 0, device_bytes = 0;  // in GPU memory, copied device-to-device
    uint64_t copy_ns = 0;                           // in copier->copy(), the device copies' queueing included
    uint64_t queue_ns = 0;                          // of which in queueing host-to-device copies (CUDA)
  } totals;
  InstanceState() = default;
  InstanceState(const InstanceState&) = delete;
  InstanceState& operator=(const InstanceState&) = delete;
  ~InstanceState() {
    if (device && stream) {
      try {
        device->synchronize(stream);
      } catch (const std::exception&) {}
      device->destroy_stream(stream);
    }
  }
};

struct Pending {
  TRITONBACKEND_Request* request = nullptr;
  int64_t batch = 1;
  std::vector<std::vector<int64_t>> shapes;  // per engine input (the request's shape)
  std::vector<TRITONBACKEND_Input*> inputs;
};

// Calls f(data, bytes, memory type) for each buffer of a request input, in order.
template <class F>
void for_each_buffer(TRITONBACKEND_Input* in, F&& f) {
  uint32_t buffers = 0;
  check(TRITONBACKEND_InputProperties(in, nullptr, nullptr, nullptr, nullptr, nullptr, &buffers), "InputProperties");
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* src = nullptr;
    uint64_t n = 0;
    TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
    int64_t type_id = 0;
    check(TRITONBACKEND_InputBuffer(in, b, &src, &n, &type, &type_id), "InputBuffer");
    f(src, n, type);
  }
}

// Whether any buffer of a request input lies in GPU memory.
bool in_gpu_memory(TRITONBACKEND_Input* in) {
  bool gpu = false;
  for_each_buffer(
      in, [&](const void*, uint64_t, TRITONSERVER_MemoryType type) { gpu = gpu || type == TRITONSERVER_MEMORY_GPU; });
  return gpu;
}

// The request's inputs checked against the engine; "" when fine, else what is wrong.
std::string inspect_request(const ModelState& m, TRITONBACKEND_Request* r, Pending& p) {
  uint32_t count = 0;
  check(TRITONBACKEND_RequestInputCount(r, &count), "RequestInputCount");
  for (uint32_t i = 0; i < count; ++i) {
    TRITONBACKEND_Input* in = nullptr;
    check(TRITONBACKEND_RequestInputByIndex(r, i, &in), "RequestInputByIndex");
    const char* name = nullptr;
    check(TRITONBACKEND_InputProperties(in, &name, nullptr, nullptr, nullptr, nullptr, nullptr), "InputProperties");
    const bool known =
        std::any_of(m.inputs.begin(), m.inputs.end(), [&](const TensorInfo& t) { return t.name == name; });
    if (!known) {
      std::string names;
      for (const TensorInfo& t : m.inputs) names += (names.empty() ? "" : ", ") + t.name;
      return "unexpected input '" + std::string(name) + "' (model '" + m.name + "' takes: " + names + ")";
    }
  }
  for (const TensorInfo& t : m.inputs) {
    TRITONBACKEND_Input* in = nullptr;
    TRITONSERVER_Error* e = TRITONBACKEND_RequestInput(r, t.name.c_str(), &in);
    if (e) {
      TRITONSERVER_ErrorDelete(e);
      return "missing input '" + t.name + "' (model '" + m.name + "')";
    }
    TRITONSERVER_DataType type;
    const int64_t* shape = nullptr;
    uint32_t rank = 0;
    uint64_t bytes = 0;
    check(TRITONBACKEND_InputProperties(in, nullptr, &type, &shape, &rank, &bytes, nullptr), "InputProperties");
    const TypeNames* n = names_of(type);
    if (!n || n->kiln != t.type) {
      return "input '" + t.name + "' has type " + TRITONSERVER_DataTypeString(type) + ", model '" + m.name +
             "' takes " + names_of(t.type)->config;
    }
    if (static_cast<int>(rank) != t.dims.rank()) {
      return "input '" + t.name + "' has shape " + shape_text(shape, rank) + " of rank " + std::to_string(rank) +
             ", model '" + m.name + "' takes rank " + std::to_string(t.dims.rank()) + " (" + t.dims.to_string() + ")";
    }
    int64_t volume = 1;
    for (uint32_t k = 0; k < rank; ++k) {
      if (t.dims[static_cast<int>(k)] != kDynamic && shape[k] != t.dims[static_cast<int>(k)]) {
        return "input '" + t.name + "' has shape " + shape_text(shape, rank) + ", model '" + m.name + "' takes " +
               t.dims.to_string();
      }
      if (shape[k] < 0) return "input '" + t.name + "' has a negative extent in " + shape_text(shape, rank);
      volume *= shape[k];
    }
    const uint64_t want = static_cast<uint64_t>(volume) * data_type_size(t.type);
    if (bytes != want) {
      return "input '" + t.name + "' has " + std::to_string(bytes) + " bytes of data, its shape " +
             shape_text(shape, rank) + " and type need " + std::to_string(want);
    }
    if (m.engine->device() == DeviceType::kCPU && in_gpu_memory(in)) {
      return "input '" + t.name + "' is in GPU memory (CUDA shared memory) and model '" + m.name +
             "' runs on the CPU: send it in the request body or in system shared memory";
    }
    if (m.max_batch > 0) {
      if (rank == 0 || shape[0] < 1 || shape[0] > m.max_batch) {
        return "input '" + t.name + "' has batch " + std::to_string(rank ? shape[0] : 0) + ", model '" + m.name +
               "' takes 1.." + std::to_string(m.max_batch) + " (max_batch_size)";
      }
      if (&t != &m.inputs[0] && shape[0] != p.batch) return "inputs disagree on the batch size";
      p.batch = shape[0];
    }
    p.shapes.emplace_back(shape, shape + rank);
    p.inputs.push_back(in);
  }
  return "";
}

// Sends a response as the request's final one, with `failure` (null: success); frees `failure`.
void send_response(TRITONBACKEND_Response* response, TRITONSERVER_Error* failure) {
  TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, failure);
  if (failure) TRITONSERVER_ErrorDelete(failure);
  if (sent) TRITONSERVER_ErrorDelete(sent);
}

void send_error(TRITONBACKEND_Request* r, TRITONSERVER_Error_Code code, const std::string& message) {
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, r);
  if (e) {
    TRITONSERVER_ErrorDelete(e);
    return;
  }
  send_response(response, error(code, message));
}

// A request input's buffers as copy segments into the engine's input, at the input's byte offset
// within the batch: host buffers (also pinned ones) into `host` (CPU engines: the memory the
// engine reads; CUDA engines: pinned staging whose device twin is `device`), buffers in GPU memory
// (a client's CUDA shared memory) as device-to-device copies into `device` (CUDA engines only;
// inspect_request turns them away for CPU engines). Bytes checked against the shape's.
void add_segments(TRITONBACKEND_Input* in, uint8_t* host, uint8_t* device, uint64_t bytes,
                  std::vector<CopySegment>& host_segments, std::vector<CopySegment>& device_segments) {
  uint64_t done = 0;
  for_each_buffer(in, [&](const void* src, uint64_t n, TRITONSERVER_MemoryType type) {
    if (done + n > bytes) throw Error("an input has more bytes than its shape says");
    if (n && type == TRITONSERVER_MEMORY_GPU) {
      if (!device) throw Error("an input buffer is in GPU memory and the engine runs on the CPU");
      device_segments.push_back({device + done, src, n});
    } else if (n) {
      host_segments.push_back({host + done, src, n});
    }
    done += n;
  });
  if (done != bytes) throw Error("an input has fewer bytes than its shape says");
}

// The instance's copy helpers, asleep after a pause between executions, are woken as soon as an
// execution starts when its inputs are large enough for them (from the byte sizes the requests
// declare; checked later): they wake while the requests are inspected and the shapes set instead
// of after the copy has begun (the copy never waits for them either way).
void wake_copy_helpers(InstanceState& s, TRITONBACKEND_Request** requests, uint32_t count) {
  if (s.copier->workers() == 0) return;
  uint64_t bytes = 0;
  for (uint32_t r = 0; r < count; ++r) {
    uint32_t inputs = 0;
    if (TRITONSERVER_Error* e = TRITONBACKEND_RequestInputCount(requests[r], &inputs)) {
      TRITONSERVER_ErrorDelete(e);
      continue;
    }
    for (uint32_t i = 0; i < inputs; ++i) {
      TRITONBACKEND_Input* in = nullptr;
      uint64_t n = 0;
      TRITONSERVER_Error* e = TRITONBACKEND_RequestInputByIndex(requests[r], i, &in);
      if (!e) e = TRITONBACKEND_InputProperties(in, nullptr, nullptr, nullptr, nullptr, &n, nullptr);
      if (e) {
        TRITONSERVER_ErrorDelete(e);
        continue;
      }
      bytes += n;
    }
  }
  if (bytes >= s.copier->options().min_parallel_bytes) s.copier->wake();
}

// Bytes of input i in a request.
uint64_t input_bytes(const ModelState& m, const Pending& p, size_t i) {
  uint64_t n = data_type_size(m.inputs[i].type);
  for (int64_t d : p.shapes[i]) n *= static_cast<uint64_t>(d);
  return n;
}

// When the phases of one group's execution ended (now_ns()): inputs gathered and bound, kiln's
// inference done; for Triton's compute_input / compute_infer / compute_output statistics.
struct GroupTimes {
  uint64_t inputs_done = 0, infer_done = 0;
};

// Every output bound to staging sized for its largest shape (so its address stays the same).
void bind_outputs(InstanceState& s) {
  const ModelState& m = *s.model;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    const Dims most = s.ctx->max_tensor_shape(m.outputs[o].name);
    s.ctx->set_tensor_address(
        m.outputs[o].name, s.out[o].reserve(static_cast<uint64_t>(most.volume()) * data_type_size(m.outputs[o].type)));
  }
}

// Outputs of a batched model keep the batch dim (they are split among the group's requests).
void check_output_batch(const ModelState& m, size_t o, const Dims& dims, int64_t total) {
  if (m.max_batch > 0 && (dims.rank() == 0 || dims[0] != total)) {
    throw Error("output '" + m.outputs[o].name + "' has dims " + dims.to_string() + ", not a batch of " +
                std::to_string(total) + " (outputs must keep the batch dim to be split among requests)");
  }
}

// An execution over 100 ms is reported in the server's log with what the context did in it
// (shape plans built, graphs captured, failed captures, allocations): where a request's time went
// when a client sees a slow one.
constexpr uint64_t kSlowExecutionNs = 100'000'000;

void log_slow_execution(const InstanceState& s, int64_t batch, uint64_t start, const GroupTimes& t, uint64_t end,
                        const ContextStats& before) {
  const ContextStats after = s.ctx->stats();
  const auto ms = [](uint64_t ns) { return std::to_string(static_cast<double>(ns) / 1e6); };
  log_line(TRITONSERVER_LOG_INFO,
           "kiln backend: model '" + s.model->name + "' instance '" + s.name + "': an execution of batch " +
               std::to_string(batch) + " took " + ms(end - start) + " ms (inputs " + ms(t.inputs_done - start) +
               " ms, inference " + ms(t.infer_done - t.inputs_done) + " ms, outputs " + ms(end - t.infer_done) +
               " ms); in it the context built " + std::to_string(after.shape_plans_built - before.shape_plans_built) +
               " shape plan(s), captured " + std::to_string(after.graph_captures - before.graph_captures) +
               " graph(s) (" + std::to_string(after.graph_capture_failures - before.graph_capture_failures) +
               " failed), ran " + std::to_string(after.plain_inferences - before.plain_inferences) +
               " plain inference(s) and made " + std::to_string(after.device_allocations - before.device_allocations) +
               " device allocation(s)");
}

// Runs requests that share their non-batch dims as one inference and sends their responses.
// Everything that can fail runs before the first response is sent; a failure there throws
// (the caller answers every request of the group with the error).
void run_group(InstanceState& s, std::vector<Pending>& group, GroupTimes& times) {
  ModelState& m = *s.model;
  int64_t total = 0;
  for (const Pending& p : group) total += p.batch;
  std::vector<CopySegment> segments, device_segments;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    std::vector<int64_t> shape = group[0].shapes[i];
    if (m.max_batch > 0) shape[0] = total;
    s.ctx->set_input_shape(m.inputs[i].name, Dims::from(shape));  // throws naming the input and the profile
    int64_t volume = 1;
    for (int64_t d : shape) volume *= d;
    const uint64_t bytes = static_cast<uint64_t>(volume) * data_type_size(m.inputs[i].type);
    // The requests' buffers are copied one after another (the batch dim concatenated) by the
    // instance's thread and its input_copy_threads helpers, in chunks. CUDA: into pinned memory,
    // each finished range's copy to the device queued on the instance's stream at once (by this
    // thread, in order: parallel_copy.cpp says why), so the host copy and the DMA overlap. CPU:
    // into the memory the engine reads. One input at a time: the ranges reported lie in one
    // staging buffer, whose device twin is at the same offset.
    uint8_t* host = s.device ? s.pinned_in[i].reserve(bytes) : s.in[i].reserve(bytes);
    uint8_t* bound = s.device ? s.in[i].reserve(bytes) : host;
    segments.clear();
    device_segments.clear();
    uint64_t offset = 0;
    for (const Pending& p : group) {
      const uint64_t n = input_bytes(m, p, i);
      add_segments(p.inputs[i], host + offset, s.device ? bound + offset : nullptr, n, segments, device_segments);
      offset += n;
    }
    const uint64_t copy_start = now_ns();
    if (s.device) {
      s.copier->copy(segments, [&](uint8_t* from, size_t n) {
        const uint64_t t = now_ns();
        s.device->copy_host_to_device(bound + (from - host), from, n, s.stream);
        s.totals.queue_ns += now_ns() - t;
      });
      for (const CopySegment& d : device_segments) s.device->copy_device_to_device(d.dst, d.src, d.bytes, s.stream);
    } else {
      s.copier->copy(segments);
    }
    s.totals.copy_ns += now_ns() - copy_start;
    s.totals.host_buffers += segments.size();
    s.totals.device_buffers += device_segments.size();
    uint64_t on_device = 0;
    for (const CopySegment& d : device_segments) on_device += d.bytes;
    s.totals.device_bytes += on_device;
    s.totals.host_bytes += bytes - on_device;  // every byte of the input is in one kind of segment
    s.ctx->set_tensor_address(m.inputs[i].name, bound);
  }
  bind_outputs(s);
  ++s.totals.executions;
  times.inputs_done = now_ns();
  std::vector<Dims> out_dims(m.outputs.size());
  std::vector<const uint8_t*> out_host(m.outputs.size());
  const auto read_dims = [&] {
    bool known = true;
    for (size_t o = 0; o < m.outputs.size(); ++o) {
      out_dims[o] = s.ctx->tensor_shape(m.outputs[o].name);
      for (int64_t d : out_dims[o].to_vector()) known = known && d >= 0;
    }
    return known;
  };
  if (s.device) {
    // The copies back are queued behind the inference and the instance waits once (it waits
    // for the inference first only where output dims depend on the data).
    s.ctx->enqueue(s.stream);
    if (!read_dims()) {
      s.device->synchronize(s.stream);
      read_dims();
    }
    try {
      for (size_t o = 0; o < m.outputs.size(); ++o) check_output_batch(m, o, out_dims[o], total);
    } catch (...) {
      s.device->synchronize(s.stream);  // the inference still uses the staging buffers
      throw;
    }
    for (size_t o = 0; o < m.outputs.size(); ++o) {
      const uint64_t n = static_cast<uint64_t>(out_dims[o].volume()) * data_type_size(m.outputs[o].type);
      uint8_t* dst = s.pinned_out[o].reserve(n);
      s.device->copy_device_to_host(dst, s.out[o].ptr, n, s.stream);
      out_host[o] = dst;
    }
    s.device->synchronize(s.stream);
  } else {
    s.ctx->execute();
    read_dims();
    for (size_t o = 0; o < m.outputs.size(); ++o) {
      check_output_batch(m, o, out_dims[o], total);
      out_host[o] = s.out[o].host.data();
    }
  }
  times.infer_done = now_ns();
  // Each response's outputs: host buffers are filled from the pinned copies and sent at once;
  // outputs the server wants in GPU memory (a client's CUDA shared memory region) are copied on
  // the device from the engine's output staging, and those responses are sent after one wait.
  std::vector<uint64_t> offsets(m.outputs.size(), 0);
  std::vector<TRITONBACKEND_Response*> on_device;  // responses waiting for their device copies
  for (Pending& p : group) {
    // This request's part of each output starts at `at`; the next request's part follows it
    // whatever happens to this one (a failed response must not shift the others' data).
    const std::vector<uint64_t> at = offsets;
    std::vector<std::vector<int64_t>> shapes(m.outputs.size());
    std::vector<uint64_t> sizes(m.outputs.size());
    for (size_t o = 0; o < m.outputs.size(); ++o) {
      shapes[o] = out_dims[o].to_vector();
      if (m.max_batch > 0) shapes[o][0] = p.batch;
      sizes[o] = data_type_size(m.outputs[o].type);
      for (int64_t d : shapes[o]) sizes[o] *= static_cast<uint64_t>(d);
      offsets[o] += sizes[o];
    }
    TRITONBACKEND_Response* response = nullptr;
    TRITONSERVER_Error* failure = TRITONBACKEND_ResponseNew(&response, p.request);
    if (failure) {  // nothing can be sent for this request
      TRITONSERVER_ErrorDelete(failure);
      continue;
    }
    bool device_copies = false;
    for (size_t o = 0; o < m.outputs.size() && !failure; ++o) {
      const std::vector<int64_t>& shape = shapes[o];
      const uint64_t n = sizes[o];
      TRITONBACKEND_Output* out = nullptr;
      failure =
          TRITONBACKEND_ResponseOutput(response, &out, m.outputs[o].name.c_str(), names_of(m.outputs[o].type)->triton,
                                       shape.data(), static_cast<uint32_t>(shape.size()));
      if (failure) break;
      void* dst = nullptr;
      // CUDA engines prefer GPU memory (used where the server's allocator can give it: a CUDA
      // shared memory region; HTTP and gRPC responses otherwise come in host memory).
      TRITONSERVER_MemoryType type = s.device ? TRITONSERVER_MEMORY_GPU : TRITONSERVER_MEMORY_CPU;
      int64_t type_id = 0;
      failure = TRITONBACKEND_OutputBuffer(out, &dst, n, &type, &type_id);
      if (failure) break;
      if (type == TRITONSERVER_MEMORY_GPU && !s.device) {
        failure = error(TRITONSERVER_ERROR_UNSUPPORTED,
                        "kiln backend: output '" + m.outputs[o].name + "' was asked for in GPU memory (CUDA shared " +
                            "memory) and model '" + m.name +
                            "' runs on the CPU: read it from the response body or from system shared memory");
        break;
      }
      if (type == TRITONSERVER_MEMORY_GPU) {
        s.device->copy_device_to_device(dst, static_cast<uint8_t*>(s.out[o].ptr) + at[o], n, s.stream);
        device_copies = true;
      } else {
        std::memcpy(dst, out_host[o] + at[o], n);
      }
    }
    if (device_copies && !failure) {
      on_device.push_back(response);
    } else {
      send_response(response, failure);
    }
  }
  if (on_device.empty()) return;
  std::string failed;
  try {
    s.device->synchronize(s.stream);
  } catch (const std::exception& e) {
    failed =
        std::string("kiln backend: model '") + m.name + "': copying the outputs into GPU memory failed: " + e.what();
  }
  for (TRITONBACKEND_Response* response : on_device) {
    send_response(response, failed.empty() ? nullptr : error(TRITONSERVER_ERROR_INTERNAL, failed));
  }
}

}  // namespace
}  // namespace kiln::triton

using namespace kiln;
using namespace kiln::triton;

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  uint32_t major = 0, minor = 0;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ApiVersion(&major, &minor)) return e;
  if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR) {
    return error(TRITONSERVER_ERROR_UNSUPPORTED,
                 "the kiln backend needs the Triton backend API " + std::to_string(TRITONBACKEND_API_VERSION_MAJOR) +
                     "." + std::to_string(TRITONBACKEND_API_VERSION_MINOR) + " or a later 1.x; this server has " +
                     std::to_string(major) + "." + std::to_string(minor));
  }
  static TritonLogger logger;
  set_logger(&logger);
  log_line(TRITONSERVER_LOG_INFO, std::string("kiln backend ") + version() + " (Triton backend API " +
                                      std::to_string(major) + "." + std::to_string(minor) + ")");
  (void)backend;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend*) {
  set_logger(nullptr);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name = nullptr;
  uint64_t model_version = 0;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelName(model, &name)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelVersion(model, &model_version)) return e;
  auto state = std::make_unique<ModelState>();
  state->name = name;
  TRITONSERVER_Error* e = guarded("loading model '" + state->name + "'", [&] {
    TRITONBACKEND_ArtifactType type;
    const char* location = nullptr;
    check(TRITONBACKEND_ModelRepository(model, &type, &location), "ModelRepository");
    state->dir = (fs::path(location) / std::to_string(model_version)).string();
    TRITONSERVER_Message* msg = nullptr;
    check(TRITONBACKEND_ModelConfig(model, 1, &msg), "ModelConfig");
    const char* text = nullptr;
    size_t size = 0;
    TRITONSERVER_Error* se = TRITONSERVER_MessageSerializeToJson(msg, &text, &size);
    if (!se) state->config = json::parse(std::string(text, size));
    TRITONSERVER_MessageDelete(msg);
    check(se, "MessageSerializeToJson");
    const std::string threads = parameter(state->config, "threads", "0");
    state->threads = std::stoi(threads);
    // Checked before the (possibly long) engine build.
    state->input_copy_threads = parse_input_copy_threads(*state);
    state->engine = load_engine(*state);
    reconcile_config(*state, model);
  });
  if (e) return e;
  log_line(TRITONSERVER_LOG_INFO, "kiln: model '" + state->name + "' loaded on " + to_string(state->engine->device()) +
                                      " (max_batch_size " + std::to_string(state->max_batch) + ", " +
                                      std::to_string(state->input_copy_threads) +
                                      " input copy thread(s) per instance)");
  return TRITONBACKEND_ModelSetState(model, state.release());
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* p = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelState(model, &p)) return e;
  delete static_cast<ModelState*>(p);
  return nullptr;
}

// The `warmup` parameter: runs the instance's context at every batch size of the engine's
// profile up to max_batch_size, twice each (on CUDA the first run prepares the shape plan, the
// second captures its graph), on zeroed staging memory reserved for the largest batch, so that
// the addresses requests use later are the ones warmed up. A failure is logged and the instance
// serves on (the same request would then fail and be answered with the error).
void warm_up(InstanceState& s) {
  ModelState& m = *s.model;
  const std::string mode = choice_parameter(m.config, "warmup", {"batch_sizes", "none"},
                                            m.engine->device() == DeviceType::kCPU ? "none" : "batch_sizes");
  if (mode == "none") return;
  if (m.max_batch <= 0 || m.engine->num_profiles() == 0 || m.inputs.empty()) return;
  const OptimizationProfile& profile = m.engine->profile(0);
  int64_t lo = 1;
  for (const TensorInfo& t : m.inputs) lo = std::max<int64_t>(lo, profile.min(t.name)[0]);
  const auto t0 = std::chrono::steady_clock::now();
  // Staging for the largest batch, zeroed once.
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    Dims most = profile.max(m.inputs[i].name);
    most[0] = m.max_batch;
    const uint64_t bytes = static_cast<uint64_t>(most.volume()) * data_type_size(m.inputs[i].type);
    uint8_t* p = s.in[i].reserve(bytes);
    if (s.device) {
      s.device->memset_device(p, 0, bytes, s.stream);
      s.pinned_in[i].reserve(bytes);  // requests gather into it: no pinned allocation on their path
    } else {
      std::memset(p, 0, bytes);
    }
  }
  // The outputs' staging (and pinned staging), for the largest batch: the addresses every batch
  // size's graph is captured with stay those of the requests.
  try {
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      Dims d = profile.max(m.inputs[i].name);
      d[0] = m.max_batch;
      s.ctx->set_input_shape(m.inputs[i].name, d);
    }
    bind_outputs(s);
    for (size_t o = 0; s.device && o < m.outputs.size(); ++o) s.pinned_out[o].reserve(s.out[o].size);
  } catch (const std::exception& e) {  // the per-batch runs below report what is wrong
    log_line(TRITONSERVER_LOG_VERBOSE, "kiln backend: model '" + m.name + "' instance '" + s.name +
                                           "': output staging for the largest batch not reserved: " + e.what());
  }
  int64_t done = 0;
  for (int64_t b = lo; b <= m.max_batch; ++b) {
    try {
      for (size_t i = 0; i < m.inputs.size(); ++i) {
        Dims d = profile.opt(m.inputs[i].name);
        d[0] = b;
        s.ctx->set_input_shape(m.inputs[i].name, d);
        s.ctx->set_tensor_address(m.inputs[i].name, s.in[i].reserve(1));
      }
      bind_outputs(s);
      for (int run = 0; run < (s.device ? 2 : 1); ++run) {
        if (s.device) {
          s.ctx->enqueue(s.stream);
          s.device->synchronize(s.stream);
        } else {
          s.ctx->execute();
        }
      }
      ++done;
    } catch (const std::exception& e) {
      if (s.device) {
        try {
          s.device->synchronize(s.stream);
        } catch (const std::exception&) {}
      }
      log_line(TRITONSERVER_LOG_WARN, "kiln backend: model '" + m.name + "' instance '" + s.name +
                                          "': warm-up at batch " + std::to_string(b) + " failed: " + e.what() +
                                          " (the instance serves on)");
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_line(TRITONSERVER_LOG_INFO, "kiln backend: model '" + m.name + "' instance '" + s.name + "' warmed up " +
                                      std::to_string(done) + " batch size(s) (" + std::to_string(lo) + ".." +
                                      std::to_string(m.max_batch) + ") in " + std::to_string(seconds) +
                                      " s (parameter warmup: \"none\" skips it)");
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceModel(instance, &model)) return e;
  void* p = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelState(model, &p)) return e;
  auto* m = static_cast<ModelState*>(p);
  const char* name = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceName(instance, &name)) return e;
  auto state = std::make_unique<InstanceState>();
  state->model = m;
  state->name = name;
  TRITONSERVER_Error* e = guarded("instance '" + state->name + "'", [&] {
    state->ctx = m->engine->create_execution_context();
    if (m->threads > 0) state->ctx->set_num_threads(m->threads);
    if (m->engine->device() != DeviceType::kCPU) state->device = &get_backend(m->engine->device());
    state->in.resize(m->inputs.size());
    state->out.resize(m->outputs.size());
    for (Staging& st : state->in) st.backend = state->device;
    for (Staging& st : state->out) st.backend = state->device;
    ParallelCopier::Options copy_options;
    // CUDA: a device copy per 128 KiB at least (each costs the host a few microseconds).
    if (state->device) copy_options.min_callback_bytes = 128 * 1024;
    state->copier = std::make_unique<ParallelCopier>(m->input_copy_threads, copy_options);
    if (state->device) {
      state->stream = state->device->create_stream();
      for (size_t i = 0; i < m->inputs.size(); ++i) state->pinned_in.emplace_back(state->device, true);
      for (size_t i = 0; i < m->outputs.size(); ++i) state->pinned_out.emplace_back(state->device, true);
    }
    warm_up(*state);
  });
  if (e) return e;
  return TRITONBACKEND_ModelInstanceSetState(instance, state.release());
}

// The instance's input gathering over its life, for the server's log at unload: how many request
// buffers, how many bytes, how long the copy took per execution and at what rate.
void log_input_copy_totals(const InstanceState& s) {
  const InstanceState::InputCopyTotals& t = s.totals;
  const double execs = static_cast<double>(t.executions);
  const auto fixed = [](double v, int digits) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(digits) << v;
    return out.str();
  };
  std::string line =
      "kiln backend: model '" + s.model->name + "' instance '" + s.name + "': " + std::to_string(t.executions) +
      " executions; inputs from host memory: " + std::to_string(t.host_bytes) + " bytes in " +
      std::to_string(t.host_buffers) + " buffers (" + fixed(static_cast<double>(t.host_buffers) / execs, 1) +
      " per execution), copied in " + fixed(static_cast<double>(t.copy_ns) / execs / 1e3, 1) + " us per execution";
  if (t.copy_ns > 0)
    line += " (" + fixed(static_cast<double>(t.host_bytes) / static_cast<double>(t.copy_ns), 2) + " GB/s)";
  if (s.device) {
    line += ", of which queueing the copies to the device " + fixed(static_cast<double>(t.queue_ns) / execs / 1e3, 1) +
            " us; inputs in GPU memory: " + std::to_string(t.device_bytes) + " bytes in " +
            std::to_string(t.device_buffers) + " buffers";
  }
  log_line(TRITONSERVER_LOG_INFO, line);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* p = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &p)) return e;
  auto* s = static_cast<InstanceState*>(p);
  if (s && s->totals.executions > 0) log_input_copy_totals(*s);
  if (s && s->copier && s->copier->workers() > 0) {  // whether the helpers took part
    const ParallelCopier::Stats st = s->copier->stats();
    log_line(TRITONSERVER_LOG_INFO,
             "kiln backend: model '" + s->model->name + "' instance '" + s->name + "': " + std::to_string(st.jobs) +
                 " input copies, " + std::to_string(st.parallel_jobs) + " of them shared with " +
                 std::to_string(s->copier->workers()) + " input copy thread(s); chunks copied by the instance " +
                 std::to_string(st.chunks_by_caller) + ", by the helpers " + std::to_string(st.chunks_by_workers) +
                 "; helpers woken " + std::to_string(st.wakeups) + " time(s)");
  }
  delete s;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, const uint32_t request_count) {
  void* p = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &p)) return e;
  auto& s = *static_cast<InstanceState*>(p);
  const ModelState& m = *s.model;
  wake_copy_helpers(s, requests, request_count);
  // Check each request; bad ones get an error response now, good ones run in groups of equal
  // non-batch shapes whose total batch fits the profile.
  std::vector<Pending> good;
  for (uint32_t r = 0; r < request_count; ++r) {
    Pending pending;
    pending.request = requests[r];
    std::string problem;
    try {
      problem = inspect_request(m, requests[r], pending);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (problem.empty()) {
      good.push_back(std::move(pending));
    } else {
      send_error(requests[r], TRITONSERVER_ERROR_INVALID_ARG, "kiln backend: " + problem);
      TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceReportStatistics(instance, requests[r], false, now_ns(),
                                                                          now_ns(), now_ns(), now_ns());
      if (e) TRITONSERVER_ErrorDelete(e);
    }
  }
  auto same_shape = [&](const Pending& a, const Pending& b) {
    for (size_t i = 0; i < a.shapes.size(); ++i) {
      if (!std::equal(a.shapes[i].begin() + (m.max_batch > 0 ? 1 : 0), a.shapes[i].end(),
                      b.shapes[i].begin() + (m.max_batch > 0 ? 1 : 0), b.shapes[i].end())) {
        return false;
      }
    }
    return true;
  };
  size_t begin = 0;
  while (begin < good.size()) {
    std::vector<Pending> group{good[begin]};
    int64_t total = good[begin].batch;
    size_t next = begin + 1;
    while (m.max_batch > 0 && next < good.size() && same_shape(good[begin], good[next]) &&
           total + good[next].batch <= m.max_batch) {
      total += good[next].batch;
      group.push_back(good[next++]);
    }
    const uint64_t start = now_ns();
    try {
      GroupTimes times;
      const ContextStats stats_before = s.ctx->stats();
      run_group(s, group, times);
      const uint64_t end = now_ns();
      if (end - start > kSlowExecutionNs) log_slow_execution(s, total, start, times, end, stats_before);
      // compute_input: gathering and binding the inputs; compute_infer: kiln's inference;
      // compute_output: the outputs copied into the responses and sent.
      for (Pending& g : group) {
        TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceReportStatistics(instance, g.request, true, start,
                                                                            times.inputs_done, times.infer_done, end);
        if (e) TRITONSERVER_ErrorDelete(e);
      }
      TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceReportBatchStatistics(
          instance, static_cast<uint64_t>(total), start, times.inputs_done, times.infer_done, end);
      if (e) TRITONSERVER_ErrorDelete(e);
    } catch (const std::exception& ex) {
      if (s.device) {  // copies queued before the failure must not read staging the next group writes
        try {
          s.device->synchronize(s.stream);
        } catch (const std::exception&) {}
      }
      for (Pending& g : group) {
        send_error(g.request, TRITONSERVER_ERROR_INVALID_ARG, "kiln backend: model '" + m.name + "': " + ex.what());
      }
    }
    begin = next;
  }
  for (uint32_t r = 0; r < request_count; ++r) {
    TRITONSERVER_Error* e = TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
    if (e) TRITONSERVER_ErrorDelete(e);
  }
  return nullptr;
}

}  // extern "C"
