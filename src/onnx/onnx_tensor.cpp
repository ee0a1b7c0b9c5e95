// TensorProto -> HostTensor. ONNX stores tensor values in one of three places: raw_data
// (little-endian bytes), a typed repeated field whose C++ type depends on the element type (e.g.
// float16 bits and int8 values both live in int32_data), or an external file. Every path checks
// that the element count matches the dims, so a malformed model fails here with the tensor's
// name instead of reading out of bounds later.
#include "src/onnx/onnx_tensor.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "kiln/error.h"
#include "src/core/file_io.h"
#include "src/core/text.h"

namespace kiln {
namespace {

static_assert(std::endian::native == std::endian::little, "raw_data decoding assumes a little-endian host");

struct OnnxTypeInfo {
  const char* name;
  std::optional<DataType> kiln_type;
};

const std::map<int32_t, OnnxTypeInfo>& onnx_types() {
  static const std::map<int32_t, OnnxTypeInfo> table = {
      {onnx::TensorProto::FLOAT, {"FLOAT", DataType::kFloat32}},
      {onnx::TensorProto::UINT8, {"UINT8", DataType::kUInt8}},
      {onnx::TensorProto::INT8, {"INT8", DataType::kInt8}},
      {onnx::TensorProto::UINT16, {"UINT16", DataType::kUInt16}},
      {onnx::TensorProto::INT16, {"INT16", DataType::kInt16}},
      {onnx::TensorProto::INT32, {"INT32", DataType::kInt32}},
      {onnx::TensorProto::INT64, {"INT64", DataType::kInt64}},
      {onnx::TensorProto::STRING, {"STRING", DataType::kString}},
      {onnx::TensorProto::BOOL, {"BOOL", DataType::kBool}},
      {onnx::TensorProto::FLOAT16, {"FLOAT16", DataType::kFloat16}},
      {onnx::TensorProto::DOUBLE, {"DOUBLE", DataType::kFloat64}},
      {onnx::TensorProto::UINT32, {"UINT32", DataType::kUInt32}},
      {onnx::TensorProto::UINT64, {"UINT64", DataType::kUInt64}},
      {onnx::TensorProto::COMPLEX64, {"COMPLEX64", std::nullopt}},
      {onnx::TensorProto::COMPLEX128, {"COMPLEX128", std::nullopt}},
      {onnx::TensorProto::BFLOAT16, {"BFLOAT16", std::nullopt}},
  };
  return table;
}

// Copies a typed repeated field into the tensor, converting each value to the element type.
template <typename Field>
void copy_field(const Field& field, HostTensor& out, const std::string& what, const char* field_name) {
  if (field.size() != out.count()) {
    throw Error(what + ": " + field_name + " has " + std::to_string(field.size()) + " values but dims " +
                out.dims().to_string() + " need " + std::to_string(out.count()));
  }
  const int64_t n = out.count();
  switch (out.type()) {
    case DataType::kFloat32:
      for (int64_t i = 0; i < n; ++i) out.as<float>()[i] = static_cast<float>(field[static_cast<int>(i)]);
      break;
    case DataType::kFloat64:
      for (int64_t i = 0; i < n; ++i) out.as<double>()[i] = static_cast<double>(field[static_cast<int>(i)]);
      break;
    case DataType::kFloat16:  // int32_data holds the IEEE binary16 bits
      for (int64_t i = 0; i < n; ++i) out.as<uint16_t>()[i] = static_cast<uint16_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kInt8:
      for (int64_t i = 0; i < n; ++i) out.as<int8_t>()[i] = static_cast<int8_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kUInt8:
      for (int64_t i = 0; i < n; ++i) out.as<uint8_t>()[i] = static_cast<uint8_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kBool:
      for (int64_t i = 0; i < n; ++i) out.as<uint8_t>()[i] = field[static_cast<int>(i)] != 0 ? 1 : 0;
      break;
    case DataType::kInt32:
      for (int64_t i = 0; i < n; ++i) out.as<int32_t>()[i] = static_cast<int32_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kInt64:
      for (int64_t i = 0; i < n; ++i) out.as<int64_t>()[i] = static_cast<int64_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kInt16:
      for (int64_t i = 0; i < n; ++i) out.as<int16_t>()[i] = static_cast<int16_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kUInt16:
      for (int64_t i = 0; i < n; ++i) out.as<uint16_t>()[i] = static_cast<uint16_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kUInt32:
      for (int64_t i = 0; i < n; ++i) out.as<uint32_t>()[i] = static_cast<uint32_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kUInt64:
      for (int64_t i = 0; i < n; ++i) out.as<uint64_t>()[i] = static_cast<uint64_t>(field[static_cast<int>(i)]);
      break;
    case DataType::kString:  // string_data is read by tensor_from_proto
      throw Error(what + ": a string tensor keeps its values in string_data, not " + field_name);
  }
}

int64_t parse_nonnegative(const std::string& text, const std::string& key, const std::string& what) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 0) {
    throw Error(what + ": external data " + quote(key) + " is not a non-negative integer: " + quote(text));
  }
  return v;
}

// Where an external tensor's bytes are: checked (the file inside the model's folder, also
// through links; the range inside the file) before anything is allocated for them.
struct ExternalData {
  std::string path;
  uint64_t offset = 0;
};

ExternalData locate_external(const onnx::TensorProto& proto, uint64_t need, const DataType type, const Dims& dims,
                             const std::string& base_dir, const std::string& what) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = parse_nonnegative(kv.value(), "offset", what);
    else if (kv.key() == "length")
      length = parse_nonnegative(kv.value(), "length", what);
    // "checksum" and unknown keys are informational.
  }
  if (location.empty()) throw Error(what + ": external data has no 'location'");
  // Absolute paths, '..' and symbolic links that lead out of the model's folder are refused: a
  // model must not make kiln read (and copy into an engine or an output) files elsewhere.
  const std::string path =
      resolve_inside_folder(base_dir.empty() ? "." : base_dir, location, what + ": external data location").string();
  const uint64_t file_size = check_regular_file(path, what + ": external data file");
  if (length >= 0 && static_cast<uint64_t>(length) != need) {
    throw Error(what + ": external data length " + std::to_string(length) + " does not match " + to_string(type) +
                " dims " + dims.to_string() + " (" + std::to_string(need) + " bytes)");
  }
  if (static_cast<uint64_t>(offset) > file_size || need > file_size - static_cast<uint64_t>(offset)) {
    throw Error(what + ": external data at offset " + std::to_string(offset) + " with length " + std::to_string(need) +
                " runs past the end of " + quote(path) + " (" + std::to_string(file_size) + " bytes)");
  }
  return {path, static_cast<uint64_t>(offset)};
}

// The typed repeated field that holds elements of `proto`'s type: its name and size.
std::pair<const char*, int64_t> typed_field(const onnx::TensorProto& proto) {
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      return {"float_data", proto.float_data_size()};
    case onnx::TensorProto::DOUBLE:
      return {"double_data", proto.double_data_size()};
    case onnx::TensorProto::INT64:
      return {"int64_data", proto.int64_data_size()};
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64:
      return {"uint64_data", proto.uint64_data_size()};
    default:
      return {"int32_data", proto.int32_data_size()};
  }
}

// The tensor's memory; a failed allocation names the tensor.
HostTensor allocate(DataType type, const Dims& dims, const std::string& what) {
  try {
    return HostTensor(type, dims);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

}  // namespace

std::optional<DataType> data_type_from_onnx(int32_t onnx_type) {
  const auto it = onnx_types().find(onnx_type);
  return it == onnx_types().end() ? std::nullopt : it->second.kiln_type;
}

std::string onnx_data_type_name(int32_t onnx_type) {
  const auto it = onnx_types().find(onnx_type);
  return it == onnx_types().end() ? "type " + std::to_string(onnx_type) : it->second.name;
}

HostTensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what) {
  if (proto.has_segment()) throw Error(what + ": segmented tensors are not supported");
  const auto type = data_type_from_onnx(proto.data_type());
  if (!type) {
    throw Error(what + ": element type " + onnx_data_type_name(proto.data_type()) +
                " is not supported by kiln (float32/16/64, int8/16/32/64, uint8/16/32/64, bool, string are)");
  }
  if (proto.dims_size() > kMaxDims) {
    throw Error(what + ": rank " + std::to_string(proto.dims_size()) + " exceeds kiln's maximum of " +
                std::to_string(kMaxDims));
  }
  Dims dims;
  for (int64_t d : proto.dims()) {
    if (d < 0) throw Error(what + ": negative extent " + std::to_string(d));
    dims.push_back(d);
  }
  int64_t count = 0;
  uint64_t nbytes = 0;
  try {
    count = dims.volume();
    nbytes = tensor_byte_size(*type, dims);
  } catch (const Error&) {
    throw Error(what + ": dims " + dims.to_string() + " are too large");
  }
  if (count > (int64_t{1} << 40)) throw Error(what + ": dims " + dims.to_string() + " are too large");
  // Every check of the data against the dims comes before the tensor is allocated: a small file
  // can claim dims of 2^40 elements.
  if (*type == DataType::kString) {
    // ONNX stores strings only in string_data (raw_data and external data hold fixed-size elements).
    if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.has_raw_data()) {
      throw Error(what + ": a string tensor must keep its values in string_data, not in " +
                  (proto.has_raw_data() ? "raw_data" : "external data"));
    }
    if (proto.string_data_size() != count) {
      throw Error(what + ": string_data has " + std::to_string(proto.string_data_size()) + " values but dims " +
                  dims.to_string() + " need " + std::to_string(count));
    }
    HostTensor out = allocate(*type, dims, what);
    for (int64_t i = 0; i < count; ++i) out.set_string(i, proto.string_data(static_cast<int>(i)));
    return out;
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    const ExternalData ext = locate_external(proto, nbytes, *type, dims, base_dir, what);
    HostTensor out = allocate(*type, dims, what);
    read_file_range(ext.path, what + ": external data file", ext.offset, nbytes, out.data());
    return out;
  }
  if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    if (raw.size() != nbytes) {
      throw Error(what + ": raw_data has " + std::to_string(raw.size()) + " bytes but " + to_string(*type) + " dims " +
                  dims.to_string() + " need " + std::to_string(nbytes));
    }
    HostTensor out = allocate(*type, dims, what);
    if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  if (const auto [field, size] = typed_field(proto); size != count) {
    throw Error(what + ": " + field + " has " + std::to_string(size) + " values but dims " + dims.to_string() +
                " need " + std::to_string(count));
  }
  HostTensor out = allocate(*type, dims, what);
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      copy_field(proto.float_data(), out, what, "float_data");
      break;
    case onnx::TensorProto::DOUBLE:
      copy_field(proto.double_data(), out, what, "double_data");
      break;
    case onnx::TensorProto::INT64:
      copy_field(proto.int64_data(), out, what, "int64_data");
      break;
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64:
      copy_field(proto.uint64_data(), out, what, "uint64_data");
      break;
    default:
      copy_field(proto.int32_data(), out, what, "int32_data");
      break;  // (u)int8/16, int32, bool, float16
  }
  return out;
}

}  // namespace kiln
