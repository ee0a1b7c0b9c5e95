// The module kiln._kiln and its value types: errors as Python exceptions (same messages), enums,
// the logger (to a Python callable, e.g. the logging module through kiln.route_logging_to_python),
// and the conversions of common.h.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <mutex>

#include "common.h"

namespace kiln::python {

Dims dims_from(const std::vector<int64_t>& values) {
  if (values.size() > static_cast<size_t>(kMaxDims)) {
    throw Error("a shape has at most " + std::to_string(kMaxDims) + " dims, this one has " +
                std::to_string(values.size()));
  }
  return Dims::from(values);
}

nb::tuple dims_to_tuple(const Dims& dims) {
  nb::list out;
  for (int64_t d : dims) out.append(d);
  return nb::tuple(out);
}

nb::dlpack::dtype dlpack_dtype(DataType type) {
  using C = nb::dlpack::dtype_code;
  auto make = [](C code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (type) {
    case DataType::kFloat32:
      return make(C::Float, 32);
    case DataType::kFloat16:
      return make(C::Float, 16);
    case DataType::kFloat64:
      return make(C::Float, 64);
    case DataType::kInt8:
      return make(C::Int, 8);
    case DataType::kInt16:
      return make(C::Int, 16);
    case DataType::kInt32:
      return make(C::Int, 32);
    case DataType::kInt64:
      return make(C::Int, 64);
    case DataType::kUInt8:
      return make(C::UInt, 8);
    case DataType::kUInt16:
      return make(C::UInt, 16);
    case DataType::kUInt32:
      return make(C::UInt, 32);
    case DataType::kUInt64:
      return make(C::UInt, 64);
    case DataType::kBool:
      return make(C::Bool, 8);
    case DataType::kString:
      break;
  }
  throw Error("string tensors have no array dtype (pass a numpy array of str objects)");
}

DataType data_type_of(nb::dlpack::dtype dt, const std::string& what) {
  using C = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    const auto code = static_cast<C>(dt.code);
    if (code == C::Float && dt.bits == 32) return DataType::kFloat32;
    if (code == C::Float && dt.bits == 16) return DataType::kFloat16;
    if (code == C::Float && dt.bits == 64) return DataType::kFloat64;
    if (code == C::Int && dt.bits == 8) return DataType::kInt8;
    if (code == C::Int && dt.bits == 16) return DataType::kInt16;
    if (code == C::Int && dt.bits == 32) return DataType::kInt32;
    if (code == C::Int && dt.bits == 64) return DataType::kInt64;
    if (code == C::UInt && dt.bits == 8) return DataType::kUInt8;
    if (code == C::UInt && dt.bits == 16) return DataType::kUInt16;
    if (code == C::UInt && dt.bits == 32) return DataType::kUInt32;
    if (code == C::UInt && dt.bits == 64) return DataType::kUInt64;
    if (code == C::Bool && dt.bits == 8) return DataType::kBool;
  }
  throw Error(what + " has an element type kiln does not have (DLPack code " + std::to_string(dt.code) + ", " +
              std::to_string(dt.bits) + " bits); kiln takes float16/32/64, int8-64, uint8-64 and bool");
}

const char* numpy_name(DataType type) { return to_string(type); }  // kiln's names are numpy's

HostTensor host_tensor_from(const AnyArray& a, const std::string& what) {
  if (a.device_type() != nb::device::cpu::value) {
    throw Error(what + " is not in host memory (DLPack device type " + std::to_string(a.device_type()) +
                "); weights and constants must be CPU arrays (torch: .cpu())");
  }
  std::vector<int64_t> shape;
  for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<int64_t>(a.shape(i)));
  const DataType type = data_type_of(a.dtype(), what);
  HostTensor t(type, dims_from(shape));
  const size_t item = data_type_size(type);
  // Row-major copy that follows the array's strides (in elements), so any view works.
  const auto* src = static_cast<const uint8_t*>(a.data());
  auto* dst = static_cast<uint8_t*>(t.data());
  const int64_t n = t.count();
  const size_t nd = a.ndim();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (size_t k = 0; k < nd; ++k) off += idx[k] * a.stride(k);
    std::memcpy(dst + static_cast<size_t>(e) * item, src + off * static_cast<int64_t>(item), item);
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return t;
}

nb::object numpy_from(const HostTensor& tensor) {
  nb::module_ np = nb::module_::import_("numpy");
  std::vector<size_t> shape;
  for (int64_t d : tensor.dims()) shape.push_back(static_cast<size_t>(d));
  if (tensor.type() == DataType::kString) {
    nb::list values;
    for (const std::string& s : tensor.to_strings()) values.append(nb::str(s.c_str(), s.size()));
    return np.attr("array")(values, "dtype"_a = "object").attr("reshape")(dims_to_tuple(tensor.dims()));
  }
  // The array owns a HostTensor copy (shared storage, no element copy).
  auto* keep = new HostTensor(tensor);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<HostTensor*>(p); });
  nb::ndarray<nb::numpy> array(keep->data(), shape.size(), shape.data(), owner, nullptr, dlpack_dtype(tensor.type()));
  return array.cast();
}

namespace {

// Routes kiln's log messages to a Python callable(severity, message). Called from any thread:
// takes the GIL; never lets an exception escape into kiln.
class CallbackLogger : public Logger {
 public:
  void set(PyObject* callback) {  // new reference or null; the GIL is held
    std::lock_guard<std::mutex> lock(mutex_);
    PyObject* old = callback_;
    callback_ = callback;
    Py_XDECREF(old);
  }
  void log(Severity severity, const std::string& message) override {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    PyObject* cb = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cb = callback_;
      Py_XINCREF(cb);
    }
    if (!cb) return;
    try {
      nb::handle target(cb);
      target(severity, message);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("kiln log callback");
    } catch (...) {}
    Py_DECREF(cb);
  }

 private:
  std::mutex mutex_;
  PyObject* callback_ = nullptr;
};

CallbackLogger& callback_logger() {
  static auto* logger = new CallbackLogger();  // never destroyed: kiln may log during exit
  return *logger;
}

}  // namespace

void bind_core(nb::module_& m) {
  static nb::object error = nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  nb::exception<EngineFormatError>(m, "EngineFormatError", error);
  m.attr("EngineFormatError").attr("__doc__") = "A malformed, truncated or foreign engine file (a kiln.Error).";
  nb::exception<ParseError>(m, "ParseError", error);
  m.attr("ParseError").attr("__doc__") =
      "An ONNX model kiln cannot import; the message lists every unsupported node (a kiln.Error).";
  m.attr("Error").attr("__doc__") =
      "Every kiln failure: the message says what failed, where (layer, node, tensor or file by name) and what to do.";

  nb::enum_<DataType>(m, "DataType", "Element types (names as numpy's).")
      .value("float32", DataType::kFloat32)
      .value("float16", DataType::kFloat16)
      .value("float64", DataType::kFloat64)
      .value("int8", DataType::kInt8)
      .value("int16", DataType::kInt16)
      .value("int32", DataType::kInt32)
      .value("int64", DataType::kInt64)
      .value("uint8", DataType::kUInt8)
      .value("uint16", DataType::kUInt16)
      .value("uint32", DataType::kUInt32)
      .value("uint64", DataType::kUInt64)
      .value("bool", DataType::kBool)
      .value("string", DataType::kString);
  nb::enum_<TensorFormat>(m, "TensorFormat", "Memory layouts: linear (row-major, NCHW) or channels_last (NHWC).")
      .value("linear", TensorFormat::kLinear)
      .value("channels_last", TensorFormat::kChannelsLast);
  nb::enum_<DeviceType>(m, "DeviceType", "Where an engine runs.")
      .value("cpu", DeviceType::kCPU)
      .value("cuda", DeviceType::kCUDA);
  nb::enum_<Severity>(m, "Severity", "Log message severities, most severe first.")
      .value("error", Severity::kError)
      .value("warning", Severity::kWarning)
      .value("info", Severity::kInfo)
      .value("verbose", Severity::kVerbose);

  m.def(
      "version", [] { return std::string(version()); }, "The kiln library's version, e.g. '0.1.0'.");
  m.def(
      "parse_dims", [](const std::string& text) { return dims_to_tuple(parse_dims(text)); }, "text"_a,
      "Parses '1x3x224x224' into a tuple (a scalar: '()').");
  m.def("data_type_size", &data_type_size, "type"_a, "Bytes per element of a type.");

  m.def(
      "set_log_callback",
      [](nb::object callback) {
        if (callback.is_none()) {
          callback_logger().set(nullptr);
          set_logger(nullptr);
          return;
        }
        if (!PyCallable_Check(callback.ptr()))
          throw Error("set_log_callback needs a callable(severity, message) or None");
        callback_logger().set(callback.inc_ref().ptr());
        set_logger(&callback_logger());
      },
      "callback"_a.none(),
      "Sends every kiln log message to callback(severity: Severity, message: str), from any thread (the GIL is "
      "taken); None restores the default logger (stderr, warnings and errors). kiln.route_logging_to_python() "
      "uses this to feed Python's logging module.");
  m.def(
      "set_log_severity", [](Severity s) { default_logger().set_min_severity(s); }, "severity"_a,
      "The least severe message the default (stderr) logger prints (default: Severity.warning).");
  m.def(
      "_log", [](Severity s, const std::string& message) { log(s, message); }, "severity"_a, "message"_a,
      "Logs a message through kiln's logger (for tests).");
}

}  // namespace kiln::python

NB_MODULE(_kiln, m) {
  namespace nb = nanobind;
  m.doc() = "kiln's compiled API (import kiln instead; docs/python.md).";
  nb::set_leak_warnings(false);  // the plugin registry keeps Python plugin specs for the process's life
  kiln::python::bind_core(m);
  kiln::python::bind_network(m);
  kiln::python::bind_runtime(m);
  kiln::python::bind_plugins(m);
}
