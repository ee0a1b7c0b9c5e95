// Core value types of kiln's public API: data types, tensor formats, devices, dimensions,
// host tensors and typed attributes. Everything here is a plain value type; all of it is
// thread-compatible (const use from many threads is safe, mutation needs external locking).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln {

// Element types. Serialized by name (to_string / parse_data_type), never by number.
enum class DataType : int32_t {
  kFloat32,
  kFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
  kFloat64,
  // Text (ONNX STRING): each element is a StringRef (below). Only a few layer types take string
  // tensors (StringNormalizer, Cast, Identity, Constant) and only on the CPU; docs/layers.md.
  kString,
  // ONNX INT16, UINT16, UINT32, UINT64: on the CPU and CUDA, in ElementWise, BitShift, Cast and
  // the data movement layers (docs/layers.md); other kernels reject them.
  kInt16,
  kUInt16,
  kUInt32,
  kUInt64,
};

// One element of a kString tensor: UTF-8 bytes (not NUL-terminated) that the tensor does not
// own. Fixed-size and trivially copyable, so string tensors move through buffers, the memory
// planner and engine I/O like any other type. Who owns the characters: for a network input,
// the caller (valid during execute); for strings a layer produces, the execution context
// (include/kiln/runtime.h); for a HostTensor, the tensor itself (HostTensor::set_string).
struct StringRef {
  const char* data = nullptr;  // may be null when size == 0
  uint64_t size = 0;
  std::string_view view() const {
    return size ? std::string_view(data, static_cast<size_t>(size)) : std::string_view();
  }
};
static_assert(sizeof(StringRef) == 16, "StringRef is part of the engine I/O contract");

// Owner of string characters: add() copies a string into chunked storage and returns a
// StringRef to the copy, which stays valid (never moves) until clear() or destruction.
class StringArena {
 public:
  StringRef add(std::string_view s);
  // Drops every string (their StringRefs dangle afterwards); keeps one chunk for reuse.
  void clear();
  // Characters held.
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<char[]>> chunks_;
  size_t chunk_capacity_ = 0;  // of chunks_.back()
  size_t chunk_used_ = 0;
  uint64_t bytes_ = 0;
};

// Bytes per element (kBool is one byte, kString sizeof(StringRef)).
size_t data_type_size(DataType type);
// "float32", "float16", "int8", "uint8", "int32", "int64", "bool", "float64", "string", "int16",
// "uint16", "uint32", "uint64".
const char* to_string(DataType type);
// Inverse of to_string; throws kiln::Error for an unknown name.
DataType parse_data_type(std::string_view name);
bool is_floating_point(DataType type);

// Memory layout of a tensor. kLinear is row-major in the order of the dims (NCHW for images);
// kChannelsLast stores dim 1 innermost (NHWC for a 4-D tensor, NDHWC for 5-D).
enum class TensorFormat : int32_t { kLinear, kChannelsLast };
const char* to_string(TensorFormat format);
TensorFormat parse_tensor_format(std::string_view name);

// Where an engine runs.
enum class DeviceType : int32_t { kCPU, kCUDA };
const char* to_string(DeviceType device);
// Accepts "cpu" and "cuda" (case-insensitive); throws kiln::Error otherwise.
DeviceType parse_device_type(std::string_view name);

// The largest CPU thread count kiln accepts anywhere: BuilderConfig::num_threads (stored in the
// engine), ExecutionContext::set_num_threads, engine files and `--threads`. Far above the
// hardware threads of any machine kiln runs on, far below what the OpenMP runtime fails on
// (tens of thousands of threads); docs/security.md.
inline constexpr int kMaxThreads = 1024;
// The most streams a build can be tuned for (BuilderConfig::tune_for_streams).
inline constexpr int kMaxTuneStreams = 64;

// A dimension value of -1 means "unknown until run time" (a dynamic dimension).
inline constexpr int64_t kDynamic = -1;
inline constexpr int kMaxDims = 8;

// Tensor dimensions: a rank (0..kMaxDims) and that many extents. Rank 0 is a scalar.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values);
  static Dims from(std::span<const int64_t> values);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return d_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return d_[static_cast<size_t>(i)]; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + rank_; }
  // Appends one extent; throws kiln::Error past kMaxDims.
  void push_back(int64_t value);
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  // True when any extent is kDynamic.
  bool is_dynamic() const;
  // Product of the extents (1 for a scalar). Throws kiln::Error for a dynamic dims or on overflow.
  int64_t volume() const;
  // "1x3x224x224"; "-1" prints as "?"; a scalar prints as "()".
  std::string to_string() const;

  friend bool operator==(const Dims& a, const Dims& b);
  friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }

 private:
  int32_t rank_ = 0;
  std::array<int64_t, kMaxDims> d_{};
};

// Parses "1x3x224x224" (or "()" / "" for a scalar). Throws kiln::Error on bad text.
Dims parse_dims(std::string_view text);

// Bytes of a tensor of `type` and `dims`: dims.volume() * data_type_size(type). Throws
// kiln::Error for dynamic dims and when the element count or the byte size does not fit in an
// int64 (files can claim dims such as [2^62]; sizes never wrap around to small numbers).
uint64_t tensor_byte_size(DataType type, const Dims& dims);

// A tensor in host memory with shared, 64-byte aligned storage. Copies share the storage
// (use clone() for a deep copy). Used for weights, constants and I/O in the tools.
// A kString tensor also owns its characters: its StringRefs point into a StringArena that
// copies share, so they stay valid as long as any copy lives. Write elements with set_string
// (not through data()), read them with string_at.
class HostTensor {
 public:
  HostTensor() = default;
  // Allocates zero-initialized storage for dims.volume() elements of type (empty strings).
  // Throws kiln::Error when the size overflows (tensor_byte_size) or the memory cannot be
  // allocated (the message gives the type, dims and bytes; callers add the tensor's name).
  HostTensor(DataType type, const Dims& dims);
  // Copies nbytes from data (must equal the size implied by type and dims; checked before
  // anything is allocated). For kString, data is an array of StringRef whose characters are
  // copied too (a deep copy).
  static HostTensor from_bytes(DataType type, const Dims& dims, const void* data, size_t nbytes);
  // A kString tensor holding copies of `values` (row-major; values.size() == dims.volume()).
  static HostTensor from_strings(const Dims& dims, const std::vector<std::string>& values);
  template <typename T>
  static HostTensor from_vector(DataType type, const Dims& dims, const std::vector<T>& values) {
    return from_bytes(type, dims, values.data(), values.size() * sizeof(T));
  }

  bool empty() const { return !storage_; }
  DataType type() const { return type_; }
  const Dims& dims() const { return dims_; }
  int64_t count() const { return count_; }
  // count() * data_type_size(type()), computed (overflow-checked) when the tensor was made.
  size_t nbytes() const { return nbytes_; }
  void* data() { return storage_.get(); }
  const void* data() const { return storage_.get(); }
  template <typename T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data());
  }
  HostTensor clone() const;
  // Same storage, other dims of the same volume.
  HostTensor reshaped(const Dims& dims) const;
  // Values of an integer tensor (int8/16/32/64, uint8/16/32, bool) widened to int64 (uint64 values
  // above 2^63-1 wrap to negative ones). Throws kiln::Error for a kString tensor.
  std::vector<int64_t> to_int64() const;
  // Values of a numeric tensor converted to double. Throws kiln::Error for a kString tensor.
  std::vector<double> to_double() const;

  // kString only (kiln::Error otherwise, or for i outside [0, count())): element i, which
  // set_string replaces by a copy of `value` owned by this tensor (and its copies).
  std::string_view string_at(int64_t i) const;
  void set_string(int64_t i, std::string_view value);
  // Every element of a kString tensor as std::string.
  std::vector<std::string> to_strings() const;

 private:
  void check_string_index(int64_t i, const char* what) const;

  DataType type_ = DataType::kFloat32;
  Dims dims_;
  int64_t count_ = 0;
  size_t nbytes_ = 0;
  std::shared_ptr<uint8_t> storage_;
  std::shared_ptr<StringArena> strings_;  // kString: owner of the characters
};

// Typed attribute values: the one value type of layer attributes and of plugin fields (a
// plugin field's value is an AttrValue of type attr_type_of(PluginFieldType), plugin.h).
enum class AttrType : int32_t { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
const char* to_string(AttrType type);
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                               std::vector<std::string>, HostTensor>;
AttrType attr_type_of(const AttrValue& value);

// A name -> value map, ordered by name so that iteration (and serialization) is deterministic.
class Attributes {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  void erase(const std::string& name) { values_.erase(name); }
  const std::map<std::string, AttrValue>& all() const { return values_; }

  // Typed getters: return the default when the attribute is absent; throw kiln::Error naming
  // the attribute when it is present with another type.
  int64_t get_int(const std::string& name, int64_t def = 0) const;
  double get_float(const std::string& name, double def = 0.0) const;
  std::string get_string(const std::string& name, const std::string& def = "") const;
  std::vector<int64_t> get_ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<double> get_floats(const std::string& name, const std::vector<double>& def = {}) const;
  std::vector<std::string> get_strings(const std::string& name) const;
  // Throws kiln::Error when absent.
  const HostTensor& get_tensor(const std::string& name) const;
  // The value of any type: throws kiln::Error naming the attribute when it is absent or has
  // another type than `expected` (the typed getters' message).
  const AttrValue& get(const std::string& name, AttrType expected) const;

 private:
  std::map<std::string, AttrValue> values_;
};

// Library version, e.g. "0.1.0".
const char* version();

}  // namespace kiln
