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
};

// Bytes per element (kBool is one byte).
size_t data_type_size(DataType type);
// "float32", "float16", "int8", "uint8", "int32", "int64", "bool", "float64".
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

// A tensor in host memory with shared, 64-byte aligned storage. Copies share the storage
// (use clone() for a deep copy). Used for weights, constants and I/O in the tools.
class HostTensor {
 public:
  HostTensor() = default;
  // Allocates zero-initialized storage for dims.volume() elements of type.
  HostTensor(DataType type, const Dims& dims);
  // Copies nbytes from data (must equal the size implied by type and dims).
  static HostTensor from_bytes(DataType type, const Dims& dims, const void* data, size_t nbytes);
  template <typename T>
  static HostTensor from_vector(DataType type, const Dims& dims, const std::vector<T>& values) {
    return from_bytes(type, dims, values.data(), values.size() * sizeof(T));
  }

  bool empty() const { return !storage_; }
  DataType type() const { return type_; }
  const Dims& dims() const { return dims_; }
  int64_t count() const { return count_; }
  size_t nbytes() const { return static_cast<size_t>(count_) * data_type_size(type_); }
  void* data() { return storage_.get(); }
  const void* data() const { return storage_.get(); }
  template <typename T>
  T* as() { return static_cast<T*>(data()); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data()); }
  HostTensor clone() const;
  // Same storage, other dims of the same volume.
  HostTensor reshaped(const Dims& dims) const;
  // Values of an integer tensor (int32/int64/uint8/int8/bool) widened to int64.
  std::vector<int64_t> to_int64() const;
  // Values of a numeric tensor converted to double.
  std::vector<double> to_double() const;

 private:
  DataType type_ = DataType::kFloat32;
  Dims dims_;
  int64_t count_ = 0;
  std::shared_ptr<uint8_t> storage_;
};

// Typed attribute values of layers (and of plugin fields).
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

 private:
  std::map<std::string, AttrValue> values_;
};

// Library version, e.g. "0.1.0".
const char* version();

}  // namespace kiln
