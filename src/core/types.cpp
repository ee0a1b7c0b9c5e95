// Implementation of the value types in include/kiln/types.h: names of enums, Dims, HostTensor
// and typed attribute access.
#include "kiln/types.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <new>

#include "kiln/error.h"
#include "src/core/checked_math.h"
#include "src/core/half.h"
#include "src/core/text.h"

namespace kiln {

namespace {

struct TypeInfo {
  DataType type;
  const char* name;
  size_t size;
};
constexpr TypeInfo kTypeInfo[] = {
    {DataType::kFloat32, "float32", 4},
    {DataType::kFloat16, "float16", 2},
    {DataType::kInt8, "int8", 1},
    {DataType::kUInt8, "uint8", 1},
    {DataType::kInt32, "int32", 4},
    {DataType::kInt64, "int64", 8},
    {DataType::kBool, "bool", 1},
    {DataType::kFloat64, "float64", 8},
    {DataType::kString, "string", sizeof(StringRef)},
    {DataType::kInt16, "int16", 2},
    {DataType::kUInt16, "uint16", 2},
    {DataType::kUInt32, "uint32", 4},
    {DataType::kUInt64, "uint64", 8},
};

const TypeInfo& info(DataType type) {
  for (const auto& t : kTypeInfo) {
    if (t.type == type) return t;
  }
  throw Error("invalid data type value " + std::to_string(static_cast<int>(type)));
}

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return r;
}

}  // namespace

size_t data_type_size(DataType type) { return info(type).size; }
const char* to_string(DataType type) { return info(type).name; }

DataType parse_data_type(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& t : kTypeInfo) {
    if (n == t.name) return t.type;
  }
  if (n == "float" || n == "fp32") return DataType::kFloat32;
  if (n == "half" || n == "fp16") return DataType::kFloat16;
  if (n == "double") return DataType::kFloat64;
  throw Error(
      "unknown data type '" + std::string(name) +
      "' (expected float32, float16, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool or "
      "string)");
}

bool is_floating_point(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat16 || type == DataType::kFloat64;
}

const char* to_string(TensorFormat format) { return format == TensorFormat::kLinear ? "linear" : "channels_last"; }

TensorFormat parse_tensor_format(std::string_view name) {
  const std::string n = lower(name);
  if (n == "linear" || n == "nchw") return TensorFormat::kLinear;
  if (n == "channels_last" || n == "nhwc") return TensorFormat::kChannelsLast;
  throw Error("unknown tensor format " + quote(std::string(name)) + " (expected linear or channels_last)");
}

const char* to_string(DeviceType device) { return device == DeviceType::kCPU ? "cpu" : "cuda"; }

DeviceType parse_device_type(std::string_view name) {
  const std::string n = lower(name);
  if (n == "cpu") return DeviceType::kCPU;
  if (n == "cuda" || n == "gpu") return DeviceType::kCUDA;
  throw Error("unknown device " + quote(std::string(name)) + " (expected cpu or cuda)");
}

// ---- Dims ---------------------------------------------------------------------------------

Dims::Dims(std::initializer_list<int64_t> values) {
  for (int64_t v : values) push_back(v);
}

Dims Dims::from(std::span<const int64_t> values) {
  Dims d;
  for (int64_t v : values) d.push_back(v);
  return d;
}

void Dims::push_back(int64_t value) {
  if (rank_ >= kMaxDims) {
    throw Error("tensor rank exceeds kiln's maximum of " + std::to_string(kMaxDims) + " dimensions");
  }
  d_[static_cast<size_t>(rank_++)] = value;
}

bool Dims::is_dynamic() const {
  return std::any_of(begin(), end(), [](int64_t v) { return v < 0; });
}

int64_t Dims::volume() const {
  int64_t v = 1;
  for (int64_t e : *this) {
    if (e < 0) throw Error("volume of dims " + to_string() + " is unknown (dynamic dimension)");
    if (e != 0 && v > std::numeric_limits<int64_t>::max() / e) {
      throw Error("volume of dims " + to_string() + " overflows 64 bits");
    }
    v *= e;
  }
  return v;
}

std::string Dims::to_string() const {
  if (rank_ == 0) return "()";
  std::string s;
  for (int i = 0; i < rank_; ++i) {
    if (i) s += 'x';
    s += d_[static_cast<size_t>(i)] < 0 ? "?" : std::to_string(d_[static_cast<size_t>(i)]);
  }
  return s;
}

bool operator==(const Dims& a, const Dims& b) {
  return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
}

Dims parse_dims(std::string_view text) {
  Dims d;
  if (text.empty() || text == "()") return d;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t next = text.find_first_of("x*,", pos);
    if (next == std::string_view::npos) next = text.size();
    const std::string_view part = text.substr(pos, next - pos);
    if (part.empty())
      throw Error("bad dims " + quote(std::string(text)) + ": empty extent (expected e.g. 1x3x224x224)");
    int64_t v = 0;
    if (part == "?" || part == "-1") {
      v = kDynamic;
    } else {
      for (char c : part) {
        if (c < '0' || c > '9') {
          throw Error("bad dims " + quote(std::string(text)) + ": " + quote(std::string(part)) +
                      " is not a number (expected e.g. 1x3x224x224)");
        }
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10)
          throw Error("bad dims " + quote(std::string(text)) + ": extent too large");
        v = v * 10 + (c - '0');
      }
    }
    d.push_back(v);
    pos = next + 1;
  }
  return d;
}

uint64_t tensor_byte_size(DataType type, const Dims& dims) {
  const int64_t count = dims.volume();
  int64_t bytes = 0;
  if (mul_overflows(count, static_cast<int64_t>(data_type_size(type)), bytes)) {
    throw Error("dims " + dims.to_string() + " of type " + to_string(type) + " (" + std::to_string(count) +
                " elements) need 2^63 bytes or more");
  }
  return static_cast<uint64_t>(bytes);
}

// ---- HostTensor ---------------------------------------------------------------------------

namespace {
// `bytes` is at most 2^63 - 1 (tensor_byte_size), so rounding up to 64 cannot wrap.
std::shared_ptr<uint8_t> allocate_aligned(size_t bytes, DataType type, const Dims& dims) {
  const size_t n = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = nullptr;
  try {
    p = ::operator new(n, std::align_val_t(64));
  } catch (const std::bad_alloc&) {
    throw Error("out of memory: cannot allocate " + std::to_string(bytes) + " bytes for a tensor of type " +
                to_string(type) + " and dims " + dims.to_string());
  }
  std::memset(p, 0, n);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p),
                                  [](uint8_t* q) { ::operator delete(q, std::align_val_t(64)); });
}
}  // namespace

// ---- StringArena ----------------------------------------------------------------------------

StringRef StringArena::add(std::string_view s) {
  if (s.empty()) return StringRef{};
  constexpr size_t kChunk = 64 * 1024;
  if (chunks_.empty() || chunk_capacity_ - chunk_used_ < s.size()) {
    // A string longer than a chunk gets a chunk of its own.
    chunk_capacity_ = std::max(kChunk, s.size());
    chunks_.push_back(std::make_unique<char[]>(chunk_capacity_));
    chunk_used_ = 0;
  }
  char* p = chunks_.back().get() + chunk_used_;
  std::memcpy(p, s.data(), s.size());
  chunk_used_ += s.size();
  bytes_ += s.size();
  return StringRef{p, s.size()};
}

void StringArena::clear() {
  if (chunks_.size() > 1) {
    // Keep the last chunk (the newest, at least as large as the others' default size).
    auto last = std::move(chunks_.back());
    chunks_.clear();
    chunks_.push_back(std::move(last));
  }
  chunk_used_ = 0;
  bytes_ = 0;
}

// ---- HostTensor ---------------------------------------------------------------------------

HostTensor::HostTensor(DataType type, const Dims& dims) : type_(type), dims_(dims) {
  nbytes_ = static_cast<size_t>(tensor_byte_size(type, dims));
  count_ = dims.volume();
  storage_ = allocate_aligned(nbytes_, type, dims);
  // Created with the tensor (not on the first set_string) so that every copy shares it.
  if (type == DataType::kString) strings_ = std::make_shared<StringArena>();
}

HostTensor HostTensor::from_bytes(DataType type, const Dims& dims, const void* data, size_t nbytes) {
  // Checked before allocating: a file's dims may claim far more than the data it holds.
  const uint64_t expected = tensor_byte_size(type, dims);
  if (nbytes != expected) {
    throw Error("tensor data of " + std::to_string(nbytes) + " bytes does not match " + std::string(to_string(type)) +
                " dims " + dims.to_string() + " (" + std::to_string(expected) + " bytes)");
  }
  HostTensor t(type, dims);
  if (type == DataType::kString) {
    const auto* refs = static_cast<const StringRef*>(data);
    for (int64_t i = 0; i < t.count_; ++i) t.set_string(i, refs[i].view());
    return t;
  }
  if (nbytes) std::memcpy(t.data(), data, nbytes);
  return t;
}

HostTensor HostTensor::from_strings(const Dims& dims, const std::vector<std::string>& values) {
  HostTensor t(DataType::kString, dims);
  if (static_cast<int64_t>(values.size()) != t.count_) {
    throw Error(std::to_string(values.size()) + " strings do not fill string dims " + dims.to_string() + " (" +
                std::to_string(t.count_) + " elements)");
  }
  for (int64_t i = 0; i < t.count_; ++i) t.set_string(i, values[static_cast<size_t>(i)]);
  return t;
}

void HostTensor::check_string_index(int64_t i, const char* what) const {
  if (type_ != DataType::kString) {
    throw Error(std::string(what) + ": the tensor is " + to_string(type_) + ", not string");
  }
  if (i < 0 || i >= count_) {
    throw Error(std::string(what) + ": element " + std::to_string(i) + " is outside a string tensor of dims " +
                dims_.to_string());
  }
}

std::string_view HostTensor::string_at(int64_t i) const {
  check_string_index(i, "HostTensor::string_at");
  return as<StringRef>()[i].view();
}

void HostTensor::set_string(int64_t i, std::string_view value) {
  check_string_index(i, "HostTensor::set_string");
  as<StringRef>()[i] = strings_->add(value);
}

std::vector<std::string> HostTensor::to_strings() const {
  std::vector<std::string> r;
  r.reserve(static_cast<size_t>(count_));
  for (int64_t i = 0; i < count_; ++i) r.emplace_back(string_at(i));
  return r;
}

HostTensor HostTensor::clone() const {
  if (empty()) return {};
  return from_bytes(type_, dims_, data(), nbytes());
}

HostTensor HostTensor::reshaped(const Dims& dims) const {
  if (dims.volume() != count_) {
    throw Error("cannot reshape tensor of dims " + dims_.to_string() + " to " + dims.to_string());
  }
  HostTensor t = *this;
  t.dims_ = dims;
  return t;
}

namespace {

// A floating-point value as int64 (truncated toward zero, as a C++ cast): NaN and values outside
// int64's range are an error instead of undefined behaviour (a model's float "axes" or
// "condition" of 1e20, found by fuzzing).
int64_t checked_float_to_int64(double v, int64_t index) {
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (!(v >= -kLimit && v < kLimit)) {              // NaN fails both
    throw Error("element " + std::to_string(index) + " of a floating-point tensor read as integers is " +
                std::to_string(v) + ", which is not a 64-bit integer value");
  }
  return static_cast<int64_t>(v);
}

}  // namespace

std::vector<int64_t> HostTensor::to_int64() const {
  if (type_ == DataType::kString) throw Error("a string tensor has no integer values (to_int64)");
  std::vector<int64_t> r(static_cast<size_t>(count_));
  for (int64_t i = 0; i < count_; ++i) {
    const auto k = static_cast<size_t>(i);
    switch (type_) {
      case DataType::kInt64:
        r[k] = as<int64_t>()[i];
        break;
      case DataType::kInt32:
        r[k] = as<int32_t>()[i];
        break;
      case DataType::kInt8:
        r[k] = as<int8_t>()[i];
        break;
      case DataType::kUInt8:
        r[k] = as<uint8_t>()[i];
        break;
      case DataType::kBool:
        r[k] = as<uint8_t>()[i] != 0;
        break;
      case DataType::kFloat32:
        r[k] = checked_float_to_int64(as<float>()[i], i);
        break;
      case DataType::kFloat64:
        r[k] = checked_float_to_int64(as<double>()[i], i);
        break;
      case DataType::kFloat16:
        r[k] = checked_float_to_int64(static_cast<float>(as<half>()[i]), i);
        break;
      case DataType::kInt16:
        r[k] = as<int16_t>()[i];
        break;
      case DataType::kUInt16:
        r[k] = as<uint16_t>()[i];
        break;
      case DataType::kUInt32:
        r[k] = as<uint32_t>()[i];
        break;
      case DataType::kUInt64:
        r[k] = static_cast<int64_t>(as<uint64_t>()[i]);
        break;
      case DataType::kString:
        break;  // rejected above
    }
  }
  return r;
}

std::vector<double> HostTensor::to_double() const {
  if (type_ == DataType::kString) throw Error("a string tensor has no numeric values (to_double)");
  std::vector<double> r(static_cast<size_t>(count_));
  for (int64_t i = 0; i < count_; ++i) {
    const auto k = static_cast<size_t>(i);
    switch (type_) {
      case DataType::kInt64:
        r[k] = static_cast<double>(as<int64_t>()[i]);
        break;
      case DataType::kInt32:
        r[k] = as<int32_t>()[i];
        break;
      case DataType::kInt8:
        r[k] = as<int8_t>()[i];
        break;
      case DataType::kUInt8:
        r[k] = as<uint8_t>()[i];
        break;
      case DataType::kBool:
        r[k] = as<uint8_t>()[i] != 0;
        break;
      case DataType::kFloat32:
        r[k] = as<float>()[i];
        break;
      case DataType::kFloat64:
        r[k] = as<double>()[i];
        break;
      case DataType::kFloat16:
        r[k] = static_cast<float>(as<half>()[i]);
        break;
      case DataType::kInt16:
        r[k] = as<int16_t>()[i];
        break;
      case DataType::kUInt16:
        r[k] = as<uint16_t>()[i];
        break;
      case DataType::kUInt32:
        r[k] = as<uint32_t>()[i];
        break;
      case DataType::kUInt64:
        r[k] = static_cast<double>(as<uint64_t>()[i]);
        break;
      case DataType::kString:
        break;  // rejected above
    }
  }
  return r;
}

// ---- Attributes ---------------------------------------------------------------------------

const char* to_string(AttrType type) {
  static const char* const kNames[] = {"int", "float", "string", "ints", "floats", "strings", "tensor"};
  return kNames[static_cast<int>(type)];
}

AttrType attr_type_of(const AttrValue& value) { return static_cast<AttrType>(value.index()); }

namespace {
template <typename T>
const T* typed(const std::map<std::string, AttrValue>& values, const std::string& name, AttrType expected) {
  auto it = values.find(name);
  if (it == values.end()) return nullptr;
  if (const T* v = std::get_if<T>(&it->second)) return v;
  throw Error("attribute " + quote(name) + " has type " + to_string(attr_type_of(it->second)) + ", expected " +
              to_string(expected));
}
}  // namespace

int64_t Attributes::get_int(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it != values_.end() && std::holds_alternative<double>(it->second)) {
    return static_cast<int64_t>(std::get<double>(it->second));
  }
  const auto* v = typed<int64_t>(values_, name, AttrType::kInt);
  return v ? *v : def;
}

double Attributes::get_float(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it != values_.end() && std::holds_alternative<int64_t>(it->second)) {
    return static_cast<double>(std::get<int64_t>(it->second));
  }
  const auto* v = typed<double>(values_, name, AttrType::kFloat);
  return v ? *v : def;
}

std::string Attributes::get_string(const std::string& name, const std::string& def) const {
  const auto* v = typed<std::string>(values_, name, AttrType::kString);
  return v ? *v : def;
}

std::vector<int64_t> Attributes::get_ints(const std::string& name, const std::vector<int64_t>& def) const {
  const auto* v = typed<std::vector<int64_t>>(values_, name, AttrType::kInts);
  return v ? *v : def;
}

std::vector<double> Attributes::get_floats(const std::string& name, const std::vector<double>& def) const {
  const auto* v = typed<std::vector<double>>(values_, name, AttrType::kFloats);
  return v ? *v : def;
}

std::vector<std::string> Attributes::get_strings(const std::string& name) const {
  const auto* v = typed<std::vector<std::string>>(values_, name, AttrType::kStrings);
  return v ? *v : std::vector<std::string>{};
}

const AttrValue& Attributes::get(const std::string& name, AttrType expected) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error("attribute " + quote(name) + " (" + to_string(expected) + ") is missing");
  if (attr_type_of(it->second) != expected) {
    throw Error("attribute " + quote(name) + " has type " + to_string(attr_type_of(it->second)) + ", expected " +
                to_string(expected));
  }
  return it->second;
}

const HostTensor& Attributes::get_tensor(const std::string& name) const {
  const auto* v = typed<HostTensor>(values_, name, AttrType::kTensor);
  if (!v) throw Error("attribute " + quote(name) + " (tensor) is missing");
  return *v;
}

const char* version() {
#ifdef KILN_VERSION_STRING
  return KILN_VERSION_STRING;
#else
  return "0.0.0";
#endif
}

}  // namespace kiln
