// Builder, BuilderConfig, OptimizationProfile, OnnxParser, Runtime, Engine and ExecutionContext,
// with arrays bound in place: numpy (CPU engines) and, on CUDA, any DLPack tensor or object with
// __cuda_array_interface__ (torch, cupy). execute, enqueue, builds and loads release the GIL.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <fstream>
#include <map>

#include "common.h"
#include "src/backends/backend.h"
#include "src/engine/engine_format.h"
#include "src/engine/context_impl.h"  // complete for RuntimeAccess::make_context
#include "src/engine/engine_impl.h"
#include "src/engine/runtime_access.h"

namespace kiln::python {

namespace {

constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

// An execution context and the arrays bound to it (kept alive while bound).
struct PyContext {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ExecutionContext> ctx;
  std::map<std::string, nb::object> bound;
};

// A CUDA stream handle from None, an int, or a stream object (torch: .cuda_stream, cupy: .ptr).
void* stream_handle(nb::handle s) {
  if (s.is_none()) return nullptr;
  if (PyLong_Check(s.ptr())) return reinterpret_cast<void*>(nb::cast<uintptr_t>(s));
  for (const char* attr : {"cuda_stream", "ptr", "handle"}) {
    if (nb::hasattr(s, attr)) return reinterpret_cast<void*>(nb::cast<uintptr_t>(s.attr(attr)));
  }
  throw Error(
      "enqueue: the stream must be None, an int handle, or a stream object with .cuda_stream (torch) or .ptr (cupy)");
}

// Element type of an array-interface typestr ('<f4', '|b1', ...).
DataType type_of_typestr(const std::string& t, const std::string& what) {
  if (t.size() >= 3) {
    const char kind = t[1];
    const int bytes = std::stoi(t.substr(2));
    const int bits = bytes * 8;
    using C = nb::dlpack::dtype_code;
    C code = kind == 'f' ? C::Float : kind == 'i' ? C::Int : kind == 'u' ? C::UInt : kind == 'b' ? C::Bool : C::Complex;
    if (code != C::Complex)
      return data_type_of(nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1}, what);
  }
  throw Error(what + " has the array-interface type '" + t + "', which kiln does not have");
}

// What set_tensor needs to know of an array: address, dims, type, device, contiguity.
struct ArrayView {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DataType type = DataType::kFloat32;
  int device = kDLCPU;
  bool contiguous = true;
  bool read_only = false;
};

ArrayView view_of(nb::handle obj, const std::string& what) {
  ArrayView v;
  if (nb::hasattr(obj, "__cuda_array_interface__") && !nb::hasattr(obj, "__dlpack__")) {
    nb::dict cai = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
    nb::tuple data = nb::cast<nb::tuple>(cai["data"]);
    v.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(data[0]));
    v.read_only = nb::cast<bool>(data[1]);
    v.shape = nb::cast<std::vector<int64_t>>(cai["shape"]);
    v.type = type_of_typestr(nb::cast<std::string>(cai["typestr"]), what);
    v.device = kDLCUDA;
    if (cai.contains("strides") && !cai["strides"].is_none()) {
      auto strides = nb::cast<std::vector<int64_t>>(cai["strides"]);
      int64_t expect = static_cast<int64_t>(data_type_size(v.type));
      for (size_t k = v.shape.size(); k-- > 0;) {
        if (v.shape[k] != 1 && strides[k] != expect) v.contiguous = false;
        expect *= v.shape[k];
      }
    }
    return v;
  }
  nb::ndarray<nb::ro> a;
  try {
    a = nb::cast<nb::ndarray<nb::ro>>(obj);
  } catch (const nb::cast_error&) {
    throw Error(what +
                " must be an array (numpy; on CUDA a torch/cupy tensor or anything with __dlpack__ or "
                "__cuda_array_interface__), not " +
                nb::cast<std::string>(nb::type_name(obj.type())));
  }
  if (nb::hasattr(obj, "flags") && nb::hasattr(obj.attr("flags"), "writeable")) {
    v.read_only = !nb::cast<bool>(obj.attr("flags").attr("writeable"));
  }
  v.data = const_cast<void*>(a.data());
  for (size_t i = 0; i < a.ndim(); ++i) v.shape.push_back(static_cast<int64_t>(a.shape(i)));
  v.type = data_type_of(a.dtype(), what);
  v.device = a.device_type();
  int64_t expect = 1;
  for (size_t k = a.ndim(); k-- > 0;) {
    if (a.shape(k) != 1 && a.stride(k) != expect) v.contiguous = false;
    expect *= static_cast<int64_t>(a.shape(k));
  }
  return v;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

void set_tensor(PyContext& c, const std::string& name, nb::handle obj) {
  const TensorInfo& info = c.engine->io_tensor(name);  // throws naming the engine's tensors
  const bool input = info.mode == TensorIOMode::kInput;
  const std::string what = std::string(input ? "input" : "output") + " '" + name + "'";
  const ArrayView v = view_of(obj, what);
  const bool cuda = c.engine->device() == DeviceType::kCUDA;
  if (cuda && v.device != kDLCUDA && v.device != kDLCUDAManaged) {
    throw Error(what +
                " is not in CUDA device memory, and the engine runs on CUDA: pass a CUDA tensor (torch: "
                "t.cuda()) or use kiln.Session, which copies host arrays");
  }
  if (!cuda && v.device != kDLCPU && v.device != kDLCUDAHost) {
    throw Error(what + " is in device memory, and the engine runs on the CPU: pass a host array (torch: t.cpu())");
  }
  if (v.type != info.type) {
    throw Error(what + " has element type " + to_string(v.type) + ", the engine's tensor has " + to_string(info.type) +
                " (numpy: a.astype('" + numpy_name(info.type) + "'))");
  }
  if (!v.contiguous) {
    throw Error(what +
                " is not contiguous (row-major); kiln reads and writes it in place: pass a contiguous array "
                "(numpy.ascontiguousarray, torch .contiguous())");
  }
  if (input) {
    const Dims want = dims_from(v.shape);
    if (info.dims.is_dynamic() && c.ctx->tensor_shape(name) != want) c.ctx->set_input_shape(name, want);
    const Dims have = c.ctx->tensor_shape(name);
    if (have != want) {
      throw Error(what + " has shape " + shape_text(v.shape) + ", the engine's input is " + have.to_string());
    }
  } else {
    if (v.read_only) throw Error(what + " is read-only; kiln writes outputs in place");
    const Dims need = c.ctx->max_tensor_shape(name);
    const Dims exact = c.ctx->tensor_shape(name);
    int64_t numel = 1;
    for (int64_t d : v.shape) numel *= d;
    const bool data_dependent = need != exact;
    if (data_dependent ? numel < need.volume() : dims_from(v.shape) != exact) {
      throw Error(
          what + " has shape " + shape_text(v.shape) + ", the inference writes " +
          (data_dependent ? "up to " + need.to_string() + " elements (a data-dependent size)" : exact.to_string()) +
          " (context.get_tensor_shape('" + name + "') after setting the input shapes)");
    }
  }
  c.ctx->set_tensor_address(name, v.data);
  c.bound[name] = nb::borrow(obj);
}

std::vector<std::string> io_names(const Engine& e, TensorIOMode mode) {
  std::vector<std::string> v;
  for (const auto& t : e.io_tensors()) {
    if (t.mode == mode) v.push_back(t.name);
  }
  return v;
}

nb::dict stats_dict(const ContextStats& s) {
  nb::dict d;
  d["inferences"] = s.inferences;
  d["shape_plans_built"] = s.shape_plans_built;
  d["shape_plan_hits"] = s.shape_plan_hits;
  d["shape_plans_evicted"] = s.shape_plans_evicted;
  d["graph_captures"] = s.graph_captures;
  d["graph_instantiations"] = s.graph_instantiations;
  d["graph_updates"] = s.graph_updates;
  d["graph_replays"] = s.graph_replays;
  d["graph_capture_failures"] = s.graph_capture_failures;
  d["plain_inferences"] = s.plain_inferences;
  d["device_allocations"] = s.device_allocations;
  d["thread_reductions"] = s.thread_reductions;
  d["thread_restorations"] = s.thread_restorations;
  d["shape_plan_ms"] = s.shape_plan_ms;
  d["capture_ms"] = s.capture_ms;
  d["instantiate_ms"] = s.instantiate_ms;
  d["update_ms"] = s.update_ms;
  return d;
}

nb::dict profile_dict(const OptimizationProfile& p) {
  nb::dict d;
  for (const auto& [name, s] : p.all()) {
    nb::dict e;
    e["min"] = dims_to_tuple(s.min);
    e["opt"] = dims_to_tuple(s.opt);
    e["max"] = dims_to_tuple(s.max);
    d[name.c_str()] = e;
  }
  return d;
}

nb::dict tensor_info_dict(const TensorInfo& t) {
  nb::dict d;
  d["name"] = t.name;
  d["dtype"] = to_string(t.type);
  d["shape"] = dims_to_tuple(t.dims);
  d["format"] = to_string(t.format);
  return d;
}

// Python plugins (library "python:<module>") that an engine needs and this process lacks: import
// their modules when allowed, else fail saying which module and how to opt in.
void import_python_plugins(const uint8_t* bytes, size_t size, const std::string& source, bool allow) {
  EngineData data = engine_deserialize(bytes, size, source);
  for (const auto& p : data.plugins) {
    if (p.library.rfind("python:", 0) != 0 || PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace))
      continue;
    const std::string module = p.library.substr(7);
    if (!allow) {
      throw Error(source + ": the engine uses the Python plugin '" + p.name + "' from module '" + module +
                  "', which is not imported; importing it runs its code, so it needs an explicit opt-in: "
                  "kiln.Runtime(allow_python_plugins=True), or import " +
                  module + " yourself before loading");
    }
    nb::gil_scoped_acquire gil;
    nb::module_::import_(module.c_str());
    if (!PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace)) {
      throw Error(source + ": importing module '" + module + "' did not register the Python plugin '" + p.name + "'");
    }
  }
}

struct PyRuntime {
  Runtime runtime;
  bool allow_python_plugins = false;
  std::shared_ptr<Engine> load(const uint8_t* bytes, size_t size, const std::string& source) {
    import_python_plugins(bytes, size, source, allow_python_plugins);
    nb::gil_scoped_release release;
    return runtime.deserialize(bytes, size, source);
  }
  std::shared_ptr<Engine> load_bytes(nb::bytes data) {
    return load(reinterpret_cast<const uint8_t*>(data.c_str()), data.size(), "<memory>");
  }
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open engine file '" + path + "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Device memory of an engine's device, for staging host arrays (kiln.Session on CUDA).
struct DeviceBuffer {
  Backend* backend = nullptr;
  void* ptr = nullptr;
  size_t size = 0;
  DeviceBuffer(DeviceType device, size_t bytes) : backend(&get_backend(device)), size(bytes) {
    ptr = backend->allocate(bytes ? bytes : 1);
  }
  ~DeviceBuffer() {
    if (ptr) backend->release(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

void copy_check(const DeviceBuffer& b, const nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>& a) {
  if (a.nbytes() > b.size)
    throw Error("copy of " + std::to_string(a.nbytes()) + " bytes into a buffer of " + std::to_string(b.size));
}

}  // namespace

void bind_runtime(nb::module_& m) {
  nb::class_<OptimizationProfile>(m, "OptimizationProfile",
                                  "min/opt/max dims for each dynamic input (TensorRT's IOptimizationProfile).")
      .def(nb::init<>())
      .def(
          "set_shape",
          [](OptimizationProfile& p, const std::string& input, const std::vector<int64_t>& min,
             const std::vector<int64_t>& opt, const std::vector<int64_t>& max) {
            p.set_dimensions(input, dims_from(min), dims_from(opt), dims_from(max));
          },
          "input"_a, "min"_a, "opt"_a, "max"_a, "The range of an input's dims; opt is the shape the builder tunes for.")
      .def(
          "get_shape",
          [](const OptimizationProfile& p, const std::string& input) {
            return nb::make_tuple(dims_to_tuple(p.min(input)), dims_to_tuple(p.opt(input)),
                                  dims_to_tuple(p.max(input)));
          },
          "input"_a, "(min, opt, max) of an input.")
      .def("to_dict", &profile_dict, "{input: {'min': ..., 'opt': ..., 'max': ...}}")
      .def("__repr__", [](const OptimizationProfile& p) {
        return "<kiln.OptimizationProfile " + nb::cast<std::string>(nb::repr(profile_dict(p))) + ">";
      });

  nb::class_<BuilderConfig>(m, "BuilderConfig", "How to build an engine (TensorRT's IBuilderConfig).")
      .def(nb::init<>())
      .def_rw("device", &BuilderConfig::device, "DeviceType.cpu (default) or DeviceType.cuda.")
      .def_rw("fp16", &BuilderConfig::fp16, "Allow float16 kernels where they exist.")
      .def_rw("memory_limit", &BuilderConfig::memory_limit, "Upper bound for activation memory in bytes (0: none).")
      .def_rw("num_threads", &BuilderConfig::num_threads, "CPU threads the engine's kernels use (0: all cores).")
      .def_rw("disable_optimizations", &BuilderConfig::disable_optimizations)
      .def_rw("disabled_passes", &BuilderConfig::disabled_passes,
              "Passes turned off by name (kiln.builder_pass_names()).")
      .def_rw("verbose", &BuilderConfig::verbose)
      .def_rw("timing_cache_path", &BuilderConfig::timing_cache_path, "A file of measured kernel timings (CUDA).")
      .def_rw("time_tactics", &BuilderConfig::time_tactics,
              "Time the kernels of a layer and keep the fastest (False: highest priority, like level 0).")
      .def_rw("optimization_level", &BuilderConfig::optimization_level,
              "How hard the builder searches for fast kernels, 0..5 (default 3; docs/cli.md lists each level).")
      .def_rw("workspace_limit", &BuilderConfig::workspace_limit,
              "Most scratch bytes one kernel may use (0: no limit); kernels needing more are not considered.")
      .def_rw("tune_for_streams", &BuilderConfig::tune_for_streams,
              "How many contexts will run the engine at once, each on its own stream (1..64, CUDA): kernels are "
              "timed as that many copies at once and the highest throughput wins; 1 (default): lowest latency.")
      .def_rw("embed_plugin_libraries", &BuilderConfig::embed_plugin_libraries)
      .def_rw("embed_compiled_plans", &BuilderConfig::embed_compiled_plans,
              "Store the cuDNN plans the convolutions compiled for this GPU in the engine (default True), so that "
              "loading it on a GPU of the same model, driver and cuDNN skips building and compiling them.")
      .def_rw("compiled_plans_every_batch", &BuilderConfig::compiled_plans_every_batch,
              "Also store those plans at every batch size of each profile, not only at its min, opt and max.")
      .def(
          "add_optimization_profile",
          [](BuilderConfig& c, const OptimizationProfile& p) {
            c.profiles.push_back(p);
            return static_cast<int>(c.profiles.size()) - 1;
          },
          "profile"_a, "Adds a profile; returns its index.")
      .def_prop_ro("profiles", [](const BuilderConfig& c) { return c.profiles; });
  m.def("builder_pass_names", &builder_pass_names, "The builder's passes, in pipeline order.");

  nb::class_<BuildReport>(m, "BuildReport", "What a build did.")
      .def_ro("layers_before", &BuildReport::layers_before)
      .def_ro("layers_after", &BuildReport::layers_after)
      .def_ro("pass_log", &BuildReport::pass_log)
      .def_ro("activation_peak_bytes", &BuildReport::activation_peak_bytes)
      .def_ro("weights_bytes", &BuildReport::weights_bytes)
      .def_ro("build_seconds", &BuildReport::build_seconds)
      .def_ro("layers_timed", &BuildReport::layers_timed)
      .def_ro("timing_cache_hits", &BuildReport::timing_cache_hits)
      .def_ro("layers_reused", &BuildReport::layers_reused)
      .def_ro("tactics_timed", &BuildReport::tactics_timed)
      .def_ro("tactics_stopped_early", &BuildReport::tactics_stopped_early)
      .def_ro("tactics_over_workspace", &BuildReport::tactics_over_workspace)
      .def_ro("optimization_level", &BuildReport::optimization_level)
      .def_ro("workspace_bytes", &BuildReport::workspace_bytes)
      .def_ro("timing_seconds", &BuildReport::timing_seconds)
      .def_ro("timing_setup_seconds", &BuildReport::timing_setup_seconds)
      .def_ro("timing_measure_seconds", &BuildReport::timing_measure_seconds)
      .def_ro("level5_layers_differing", &BuildReport::level5_layers_differing)
      .def_ro("level5_engine_ms", &BuildReport::level5_engine_ms)
      .def_ro("level3_engine_ms", &BuildReport::level3_engine_ms)
      .def_ro("level3_kernels_kept", &BuildReport::level3_kernels_kept)
      .def_ro("level5_check_seconds", &BuildReport::level5_check_seconds)
      .def_ro("compiled_plans", &BuildReport::compiled_plans)
      .def_ro("compiled_plan_bytes", &BuildReport::compiled_plan_bytes);

  struct PyBuilder {
    BuildReport last_report;
  };
  nb::class_<PyBuilder>(m, "Builder", "Builds serialized engines from networks (TensorRT's IBuilder).")
      .def(nb::init<>())
      .def(
          "build_serialized_network",
          [](PyBuilder& b, const Network& net, const BuilderConfig& config) {
            std::vector<uint8_t> bytes;
            {
              nb::gil_scoped_release release;
              bytes = Builder().build_serialized(net, config, &b.last_report);
            }
            return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          "network"_a, "config"_a,
          "Validates, optimizes, picks kernels, plans memory; returns the engine as bytes (write them to a file to "
          "deploy). Raises kiln.Error naming the layer, tensor or profile at fault.")
      .def_ro("last_report", &PyBuilder::last_report, "The BuildReport of the last build.");

  nb::class_<UnsupportedNode>(m, "UnsupportedNode", "An ONNX node kiln cannot import.")
      .def_ro("op_type", &UnsupportedNode::op_type)
      .def_ro("domain", &UnsupportedNode::domain)
      .def_ro("node_name", &UnsupportedNode::node_name)
      .def_ro("opset", &UnsupportedNode::opset)
      .def_ro("reason", &UnsupportedNode::reason)
      .def("__repr__", [](const UnsupportedNode& u) {
        return "<kiln.UnsupportedNode '" + u.node_name + "' " + (u.domain.empty() ? "" : u.domain + "::") + u.op_type +
               ": " + u.reason + ">";
      });

  struct PyParser {
    Network* network;
    int64_t opset = 0;
  };
  nb::class_<PyParser>(m, "OnnxParser", "Fills a Network from an ONNX model (TensorRT's OnnxParser).")
      .def(
          "__init__", [](PyParser* p, Network& n) { new (p) PyParser{&n}; }, "network"_a, nb::keep_alive<1, 2>())
      .def(
          "parse_from_file",
          [](PyParser& p, const std::string& path) {
            OnnxParser parser(*p.network);
            parser.parse_file(path);
            p.opset = parser.opset();
          },
          "path"_a,
          "Parses a model file (external data next to it). Raises kiln.ParseError listing every unsupported node.")
      .def(
          "parse",
          [](PyParser& p, nb::bytes data, const std::string& base_dir) {
            OnnxParser parser(*p.network);
            parser.parse_bytes(data.c_str(), data.size(), base_dir);
            p.opset = parser.opset();
          },
          "model"_a, "base_dir"_a = ".", "Parses serialized model bytes (external data relative to base_dir).")
      .def_ro("opset", &PyParser::opset, "The default domain's opset of the last parsed model.")
      .def_static("check_file", &OnnxParser::check_file, "path"_a,
                  "Every node no importer (and no registered plugin) handles, without building anything.");

  nb::class_<TensorInfo>(m, "TensorInfo", "An engine input or output.")
      .def_ro("name", &TensorInfo::name)
      .def_prop_ro("is_input", [](const TensorInfo& t) { return t.mode == TensorIOMode::kInput; })
      .def_ro("dtype", &TensorInfo::type)
      .def_prop_ro(
          "shape", [](const TensorInfo& t) { return dims_to_tuple(t.dims); },
          "-1 where the engine accepts several extents")
      .def_ro("format", &TensorInfo::format)
      .def("__repr__", [](const TensorInfo& t) {
        return "<kiln.TensorInfo " + std::string(t.mode == TensorIOMode::kInput ? "input" : "output") + " '" + t.name +
               "' " + to_string(t.type) + " " + t.dims.to_string() + ">";
      });

  nb::class_<PyRuntime>(m, "Runtime", "Loads serialized engines (TensorRT's IRuntime).")
      .def(
          "__init__",
          [](PyRuntime* r, bool allow_embedded, bool allow_python, bool allow_compiled) {
            new (r) PyRuntime();
            r->runtime.set_allow_embedded_plugins(allow_embedded);
            r->allow_python_plugins = allow_python;
            r->runtime.set_allow_compiled_plans(allow_compiled);
          },
          "allow_embedded_plugins"_a = false, "allow_python_plugins"_a = false, "allow_compiled_plans"_a = false,
          "allow_embedded_plugins: load plugin libraries embedded in engine files (runs their code); "
          "allow_python_plugins: import the modules of Python plugins an engine names (runs their code); "
          "allow_compiled_plans: load the compiled cuDNN plans CUDA engines carry instead of building them "
          "(GPU code from the file; faster start-up).")
      .def("deserialize_cuda_engine", &PyRuntime::load_bytes, "data"_a,
           "An engine from bytes (the name TensorRT users know; works for CPU engines too).")
      .def("deserialize", &PyRuntime::load_bytes, "data"_a,
           "An engine from bytes. Raises kiln.EngineFormatError for corrupt or foreign data.")
      .def(
          "load",
          [](PyRuntime& r, const std::string& path) {
            const auto bytes = read_file(path);
            return r.load(bytes.data(), bytes.size(), path);
          },
          "path"_a, "An engine from a file (plugin libraries are also looked for next to it).")
      .def_prop_rw(
          "allow_embedded_plugins", [](const PyRuntime& r) { return r.runtime.allow_embedded_plugins(); },
          [](PyRuntime& r, bool a) { r.runtime.set_allow_embedded_plugins(a); })
      .def_prop_rw(
          "allow_compiled_plans", [](const PyRuntime& r) { return r.runtime.allow_compiled_plans(); },
          [](PyRuntime& r, bool a) { r.runtime.set_allow_compiled_plans(a); })
      .def_rw("allow_python_plugins", &PyRuntime::allow_python_plugins);

  nb::class_<Engine>(m, "Engine", "A loaded engine; make one ExecutionContext per concurrent job.")
      .def_prop_ro("device", &Engine::device)
      .def_prop_ro("io_tensors", &Engine::io_tensors, "Inputs first, then outputs.")
      .def_prop_ro("input_names", [](const Engine& e) { return io_names(e, TensorIOMode::kInput); })
      .def_prop_ro("output_names", [](const Engine& e) { return io_names(e, TensorIOMode::kOutput); })
      .def("get_tensor_info", &Engine::io_tensor, "name"_a, nb::rv_policy::copy,
           "The TensorInfo of an input or output; raises listing the engine's tensors for an unknown name.")
      .def_prop_ro("num_optimization_profiles", &Engine::num_profiles)
      .def("get_profile", &Engine::profile, "index"_a, nb::rv_policy::copy,
           "Optimization profile `index` (min/opt/max per input).")
      .def("describe", &Engine::describe, "Layers after fusion, kernels, tensors, formats, memory plan (text).")
      .def("activation_peak_bytes", &Engine::activation_peak_bytes, "profile"_a = 0,
           "Activation bytes the memory planner needs at a profile's largest shapes.")
      .def("device_memory_size", &Engine::device_memory_size, "profile"_a = 0,
           "Bytes a context with user-managed memory needs for a profile.")
      .def(
          "inspect",
          [](Engine& e) {
            const EngineData& d = detail::RuntimeAccess::impl(e).data;
            nb::dict out;
            out["device"] = to_string(d.device);
            out["num_threads"] = d.num_threads;
            nb::list inputs, outputs, profiles, layers, plugins;
            for (const auto& t : e.io_tensors())
              (t.mode == TensorIOMode::kInput ? inputs : outputs).append(tensor_info_dict(t));
            for (int i = 0; i < e.num_profiles(); ++i) {
              nb::dict p = profile_dict(e.profile(i));
              profiles.append(p);
            }
            for (int i = 0; i < d.network->num_layers(); ++i) {
              const Layer* l = d.network->layer(i);
              nb::dict ld;
              ld["name"] = l->name();
              ld["type"] = l->type();
              auto tac = d.tactics.find(l->name());
              ld["kernel"] = tac == d.tactics.end() ? std::string() : tac->second;
              auto launch = d.launch_tactics.find(l->name());
              if (launch != d.launch_tactics.end()) ld["plain_launch_kernel"] = launch->second;
              nb::list li, lo;
              for (int k = 0; k < l->num_inputs(); ++k)
                li.append(l->input(k) ? nb::cast(l->input(k)->name()) : nb::none());
              for (int k = 0; k < l->num_outputs(); ++k) lo.append(l->output(k)->name());
              ld["inputs"] = li;
              ld["outputs"] = lo;
              layers.append(ld);
            }
            for (const auto& p : d.plugins) {
              nb::dict pd;
              pd["name"] = p.name;
              pd["version"] = p.version;
              pd["namespace"] = p.plugin_namespace;
              pd["library"] = p.library;
              plugins.append(pd);
            }
            out["inputs"] = inputs;
            out["outputs"] = outputs;
            out["profiles"] = profiles;
            out["layers"] = layers;
            out["plugins"] = plugins;
            out["activation_peak_bytes"] = d.activation_peak_bytes;
            out["build_info"] = d.build_info;
            return out;
          },
          "The engine as a dict: device, inputs, outputs, profiles, layers (name, type, kernel), plugins, memory.")
      .def(
          "create_execution_context",
          [](std::shared_ptr<Engine> e, bool user_memory) {
            auto* c = new PyContext{e, nullptr, {}};
            nb::gil_scoped_release release;
            c->ctx = e->create_execution_context(user_memory ? ContextMemory::kUserManaged : ContextMemory::kStatic);
            return c;
          },
          "user_managed_memory"_a = false, nb::rv_policy::take_ownership,
          "A new context (own memory, own stream on CUDA). user_managed_memory: give it memory with "
          "set_device_memory before the first inference.");

  nb::class_<PyContext>(m, "ExecutionContext",
                        "Runs an engine: set input shapes, bind tensors, execute (one thread at a time per context).")
      .def_prop_ro("engine", [](const PyContext& c) { return c.engine; })
      .def(
          "set_input_shape",
          [](PyContext& c, const std::string& name, const std::vector<int64_t>& shape) {
            c.ctx->set_input_shape(name, dims_from(shape));
          },
          "name"_a, "shape"_a,
          "Dims of a dynamic input; raises naming the input and the profile's range when outside it.")
      .def(
          "get_tensor_shape",
          [](PyContext& c, const std::string& name) { return dims_to_tuple(c.ctx->tensor_shape(name)); }, "name"_a,
          "Current dims of an input or output (outputs follow the input shapes).")
      .def(
          "get_max_tensor_shape",
          [](PyContext& c, const std::string& name) { return dims_to_tuple(c.ctx->max_tensor_shape(name)); }, "name"_a,
          "Dims to allocate for an I/O tensor (the upper bound of data-dependent outputs).")
      .def(
          "set_tensor", &set_tensor, "name"_a, "array"_a,
          "Binds an array in place (no copy): numpy for CPU engines; on CUDA a torch/cupy tensor (DLPack or "
          "__cuda_array_interface__). Inputs also set the input shape. Checks device, dtype, contiguity and shape; the "
          "context keeps the array alive while bound.")
      .def(
          "set_tensor_address",
          [](PyContext& c, const std::string& name, uintptr_t address) {
            c.ctx->set_tensor_address(name, reinterpret_cast<void*>(address));
            c.bound.erase(name);
          },
          "name"_a, "address"_a, "Binds raw memory (an int address) to an I/O tensor; the caller keeps it valid.")
      .def(
          "get_tensor_address",
          [](const PyContext& c, const std::string& name) {
            return reinterpret_cast<uintptr_t>(c.ctx->tensor_address(name));
          },
          "name"_a, "The address bound to an I/O tensor (0 when none).")
      .def(
          "execute", [](PyContext& c) { c.ctx->execute(); }, nb::call_guard<nb::gil_scoped_release>(),
          "Runs the inference to completion (the GIL is released).")
      .def(
          "execute_v2",
          [](PyContext& c) {
            c.ctx->execute();
            return true;
          },
          nb::call_guard<nb::gil_scoped_release>(), "execute() under TensorRT's name; returns True.")
      .def(
          "enqueue",
          [](PyContext& c, nb::handle stream) {
            void* s = stream_handle(stream);
            nb::gil_scoped_release release;
            c.ctx->enqueue(s);
          },
          "stream"_a = nb::none(),
          "Queues the inference on a CUDA stream (an int, a torch.cuda.Stream or a cupy stream; None: the context's "
          "own) and returns; on the CPU it runs synchronously.")
      .def(
          "execute_async_v3",
          [](PyContext& c, uintptr_t stream) {
            nb::gil_scoped_release release;
            c.ctx->enqueue(reinterpret_cast<void*>(stream));
            return true;
          },
          "stream_handle"_a, "enqueue() under TensorRT's name; returns True.")
      .def(
          "check_device_errors", [](PyContext& c) { c.ctx->check_device_errors(); },
          "After an enqueue completed: raises naming the layer when a kernel found invalid data.")
      .def_prop_rw(
          "optimization_profile", [](const PyContext& c) { return c.ctx->optimization_profile(); },
          [](PyContext& c, int i) { c.ctx->set_optimization_profile(i); })
      .def_prop_rw(
          "shape_cache_size", [](const PyContext& c) { return c.ctx->shape_cache_size(); },
          [](PyContext& c, int n) { c.ctx->set_shape_cache_size(n); })
      .def_prop_rw(
          "graph_cache_size", [](const PyContext& c) { return c.ctx->graph_cache_size(); },
          [](PyContext& c, int n) { c.ctx->set_graph_cache_size(n); })
      .def_prop_rw(
          "graph_capture", [](const PyContext& c) { return c.ctx->graph_capture(); },
          [](PyContext& c, bool b) { c.ctx->set_graph_capture(b); }, "CUDA graphs (on by default where possible).")
      .def_prop_rw(
          "num_threads", [](const PyContext& c) { return c.ctx->num_threads(); },
          [](PyContext& c, int n) { c.ctx->set_num_threads(n); })
      .def_prop_rw(
          "thread_adaptation", [](const PyContext& c) { return c.ctx->thread_adaptation(); },
          [](PyContext& c, bool b) { c.ctx->set_thread_adaptation(b); },
          "CPU: halve the thread count while other processes keep the cores busy (default on; off under "
          "OMP_WAIT_POLICY=passive unless KILN_CPU_THREAD_ADAPTATION=1).")
      .def_prop_rw(
          "concat_elision", [](const PyContext& c) { return c.ctx->concat_elision(); },
          [](PyContext& c, bool b) { c.ctx->set_concat_elision(b); })
      .def(
          "set_device_memory",
          [](PyContext& c, uintptr_t address, uint64_t size) {
            c.ctx->set_device_memory(reinterpret_cast<void*>(address), size);
          },
          "address"_a, "size"_a, "User-managed memory (contexts made with user_managed_memory=True).")
      .def_prop_ro(
          "stats", [](const PyContext& c) { return stats_dict(c.ctx->stats()); },
          "Counters of plans, graphs, allocations.")
      .def(
          "reset_stats", [](PyContext& c) { c.ctx->reset_stats(); }, "Zeroes the counters of stats.")
      .def_prop_rw(
          "profiling", [](const PyContext&) { return false; }, [](PyContext& c, bool b) { c.ctx->set_profiling(b); },
          "Per-layer timing (synchronizes after each layer; for finding slow layers).")
      .def(
          "profile_report", [](const PyContext& c) { return c.ctx->profile_report(); },
          "Per-layer timing, slowest first (text; set profiling = True first).")
      .def(
          "layer_profile",
          [](const PyContext& c) {
            nb::list out;
            for (const LayerTiming& t : c.ctx->layer_profile()) {
              nb::dict d;
              d["name"] = t.name;
              d["type"] = t.type;
              d["kernel"] = t.kernel;
              d["runs"] = t.runs;
              d["total_ms"] = t.total_ms;
              out.append(d);
            }
            return out;
          },
          "Per-layer timing in execution order: a list of dicts (name, type, kernel, runs, total_ms).");

  // The C++ side of bench/python_overhead.py: the same calls in a C++ loop in this process.
  m.def(
      "_time_execute_loop",
      [](PyContext& c, int n) {
        nb::gil_scoped_release release;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) c.ctx->execute();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      "context"_a, "iterations"_a, "Seconds for `iterations` execute() calls made from C++ (benchmarks).");
  m.def(
      "_time_enqueue_loop",
      [](PyContext& c, uintptr_t stream, int n) {
        nb::gil_scoped_release release;
        Backend& b = get_backend(c.engine->device());
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) {
          c.ctx->enqueue(reinterpret_cast<void*>(stream));
          b.synchronize(reinterpret_cast<void*>(stream));
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      "context"_a, "stream"_a, "iterations"_a,
      "Seconds for `iterations` enqueue() + stream synchronizations made from C++ (benchmarks).");

  nb::class_<DeviceBuffer>(m, "_DeviceBuffer", "Device memory for staging host arrays (kiln.Session).")
      .def(nb::init<DeviceType, size_t>(), "device"_a, "nbytes"_a)
      .def_prop_ro("address", [](const DeviceBuffer& b) { return reinterpret_cast<uintptr_t>(b.ptr); })
      .def_ro("nbytes", &DeviceBuffer::size)
      .def(
          "upload",
          [](DeviceBuffer& b, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> a) {
            copy_check(b, a);
            nb::gil_scoped_release release;
            b.backend->copy_host_to_device(b.ptr, a.data(), a.nbytes(), nullptr);
          },
          "array"_a)
      .def(
          "download",
          [](DeviceBuffer& b, nb::ndarray<nb::c_contig, nb::device::cpu> a) {
            if (a.nbytes() > b.size)
              throw Error("download of " + std::to_string(a.nbytes()) + " bytes from a buffer of " +
                          std::to_string(b.size));
            nb::gil_scoped_release release;
            b.backend->copy_device_to_host(a.data(), b.ptr, a.nbytes(), nullptr);
          },
          "array"_a);
}

}  // namespace kiln::python
