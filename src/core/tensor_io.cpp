// Tensor files: numpy .npy (format versions 1.0, 2.0 and 3.0; little-endian numeric dtypes and
// '<U' unicode strings (kString tensors, UTF-8 in kiln) in C order) and serialized onnx.TensorProto .pb files, the
// layout of ONNX's test_data_set_* folders. Readers validate every header field and the data length against the file
// size before allocating, and every error names the file. TensorProto decoding is shared with the ONNX importer
// (tensor_from_proto in src/onnx/onnx_tensor.cpp).
#include "core/tensor_io.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <vector>

#include "kiln/error.h"
#include "src/core/file_io.h"
#include "src/core/utf8.h"
#include "src/onnx/onnx_proto.h"
#include "src/onnx/onnx_tensor.h"
#include "src/core/text.h"

namespace kiln {
namespace {

static_assert(std::endian::native == std::endian::little, "tensor files are little-endian, so is the host");

constexpr char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
// numpy pads the preamble + header to a multiple of 64 so the data is aligned.
constexpr size_t kNpyAlignment = 64;

// The .npy dtype strings kiln reads and the one it writes for each type. numpy writes '|' for
// one-byte types; '<' is accepted for them too.
struct NpyType {
  DataType type;
  const char* write;
  const char* also_read;
};
constexpr NpyType kNpyTypes[] = {
    {DataType::kFloat32, "<f4", nullptr}, {DataType::kFloat16, "<f2", nullptr}, {DataType::kFloat64, "<f8", nullptr},
    {DataType::kInt8, "|i1", "<i1"},      {DataType::kUInt8, "|u1", "<u1"},     {DataType::kInt32, "<i4", nullptr},
    {DataType::kInt64, "<i8", nullptr},   {DataType::kBool, "|b1", "<b1"},      {DataType::kInt16, "<i2", nullptr},
    {DataType::kUInt16, "<u2", nullptr},  {DataType::kUInt32, "<u4", nullptr},  {DataType::kUInt64, "<u8", nullptr},
};

struct OnnxType {
  DataType type;
  onnx::TensorProto::DataType onnx;
};
constexpr OnnxType kOnnxTypes[] = {
    {DataType::kFloat32, onnx::TensorProto::FLOAT},  {DataType::kFloat16, onnx::TensorProto::FLOAT16},
    {DataType::kFloat64, onnx::TensorProto::DOUBLE}, {DataType::kInt8, onnx::TensorProto::INT8},
    {DataType::kUInt8, onnx::TensorProto::UINT8},    {DataType::kInt32, onnx::TensorProto::INT32},
    {DataType::kInt64, onnx::TensorProto::INT64},    {DataType::kBool, onnx::TensorProto::BOOL},
    {DataType::kString, onnx::TensorProto::STRING},  {DataType::kInt16, onnx::TensorProto::INT16},
    {DataType::kUInt16, onnx::TensorProto::UINT16},  {DataType::kUInt32, onnx::TensorProto::UINT32},
    {DataType::kUInt64, onnx::TensorProto::UINT64},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("tensor file " + quote(path) + ": " + what);
}

// Tensor files are read whole after the regular-file check (file_io.h): a device or FIFO
// named as an input gives an error instead of an endless read.
std::string read_file(const std::string& path) { return read_whole_file_text(path, "tensor file"); }

void write_file(const std::string& path, const std::string& header, const void* data, size_t nbytes) {
  write_file_atomically(path, {{header.data(), header.size()}, {data, nbytes}}, "tensor file");
}

// The element count of `extents` or -1 on overflow.
int64_t checked_volume(const std::vector<int64_t>& extents) {
  int64_t v = 1;
  for (int64_t e : extents) {
    if (e < 0) return -1;
    if (e != 0 && v > std::numeric_limits<int64_t>::max() / e) return -1;
    v *= e;
  }
  return v;
}

// Checks that a tensor about to be written has data for every element of its dims.
void check_writable(const std::string& path, const HostTensor& t) {
  const int64_t volume = checked_volume(t.dims().to_vector());
  if (volume < 0 || static_cast<size_t>(volume) * data_type_size(t.type()) != t.nbytes() ||
      (t.nbytes() > 0 && t.data() == nullptr)) {
    fail(path, "the tensor to write has no data for dims " + t.dims().to_string());
  }
}

// ---- the .npy header: a Python dict literal ------------------------------------------------
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  void parse(std::string* descr, bool* fortran_order, std::vector<int64_t>* shape) {
    bool has_descr = false, has_order = false, has_shape = false;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"') bad("only simple dtypes are supported ('descr' is not a string)");
        *descr = string_literal();
        has_descr = true;
      } else if (key == "fortran_order") {
        *fortran_order = boolean();
        has_order = true;
      } else if (key == "shape") {
        *shape = tuple();
        has_shape = true;
      } else {
        bad("unexpected key " + quote(key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      if (peek() != '}') bad("expected ',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) bad("unexpected text after the dict");
    if (!has_descr || !has_order || !has_shape) bad("the header must have 'descr', 'fortran_order' and 'shape'");
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(path_, "malformed .npy header (" + what + " at header byte " + std::to_string(pos_) + ")");
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a quoted string");
    ++pos_;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') bad("escapes in strings are not supported");
      ++pos_;
    }
    if (pos_ >= text_.size()) bad("unterminated string");
    return std::string(text_.substr(start, pos_++ - start));
  }
  bool boolean() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> values;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) bad("expected a non-negative integer in 'shape'");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const int digit = text_[pos_++] - '0';
        if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) bad("extent too large");
        v = v * 10 + digit;
      }
      values.push_back(v);
      if (values.size() > static_cast<size_t>(kMaxDims)) {
        bad("rank exceeds kiln's maximum of " + std::to_string(kMaxDims));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        bad("expected ',' or ')' in 'shape'");
      }
    }
    ++pos_;
    return values;
  }

  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

// ---- numpy unicode arrays ('<U<n>': n UTF-32LE code units per element, zero-padded) ------------

// The code points of UTF-8 text; an invalid byte becomes U+FFFD.
std::vector<uint32_t> utf8_code_points(std::string_view s) {
  std::vector<uint32_t> cps;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const size_t len = utf8::decode(s, i, cp);
    cps.push_back(len ? cp : 0xFFFD);
    i += len ? len : 1;
  }
  return cps;
}

// Element width of a '<U<n>' descr; 0 when descr is not one.
size_t npy_unicode_width(const std::string& descr) {
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '=') || descr[1] != 'U') return 0;
  size_t n = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(descr[i])) || n > (size_t{1} << 24)) return 0;
    n = n * 10 + static_cast<size_t>(descr[i] - '0');
  }
  return n;
}

std::string npy_shape_text(const Dims& dims) {
  std::string s = "(";
  for (int i = 0; i < dims.rank(); ++i) {
    s += std::to_string(dims[i]);
    s += (dims.rank() == 1 || i + 1 < dims.rank()) ? "," : "";
    if (i + 1 < dims.rank()) s += " ";
  }
  return s + ")";
}

}  // namespace

HostTensor load_npy(const std::string& path) {
  const std::string bytes = read_file(path);
  const size_t preamble = sizeof kNpyMagic + 2;
  if (bytes.size() < preamble || std::memcmp(bytes.data(), kNpyMagic, sizeof kNpyMagic) != 0) {
    fail(path, "not a .npy file (no \\x93NUMPY magic)");
  }
  const auto major = static_cast<uint8_t>(bytes[6]), minor = static_cast<uint8_t>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    fail(path, ".npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " is not supported (1.0, 2.0 and 3.0 are)");
  }
  // Version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one.
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < preamble + len_bytes) fail(path, "truncated .npy header");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i)
    header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[preamble + i])) << (8 * i);
  const size_t header_start = preamble + len_bytes;
  if (header_len > bytes.size() - header_start) {
    fail(path, "truncated .npy header: it announces " + std::to_string(header_len) + " bytes, the file has " +
                   std::to_string(bytes.size() - header_start) + " after the preamble");
  }
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  NpyHeaderParser(path, std::string_view(bytes).substr(header_start, header_len)).parse(&descr, &fortran_order, &shape);

  const NpyType* npy_type = nullptr;
  for (const auto& t : kNpyTypes) {
    if (descr == t.write || (t.also_read && descr == t.also_read)) npy_type = &t;
  }
  if (const size_t width = npy_unicode_width(descr); width > 0 && !fortran_order) {
    const int64_t count = checked_volume(shape);
    const size_t data_bytes = bytes.size() - header_start - header_len;
    if (count < 0 || static_cast<uint64_t>(count) > data_bytes / (4 * width) ||
        static_cast<size_t>(count) * 4 * width != data_bytes) {
      fail(path, "data is " + std::to_string(data_bytes) + " bytes but shape " + npy_shape_text(Dims::from(shape)) +
                     " of " + descr + " needs " + std::to_string(count) + " elements of " + std::to_string(4 * width) +
                     " bytes");
    }
    HostTensor t(DataType::kString, Dims::from(shape));
    const char* data = bytes.data() + header_start + header_len;
    for (int64_t i = 0; i < count; ++i) {
      std::string text;
      for (size_t k = 0; k < width; ++k) {
        uint32_t cp = 0;
        std::memcpy(&cp, data + (static_cast<size_t>(i) * width + k) * 4, 4);
        if (cp == 0) break;  // numpy pads shorter strings with zeros
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          fail(path, "element " + std::to_string(i) + " holds an invalid code point");
        }
        utf8::append(text, cp);
      }
      t.set_string(i, text);
    }
    return t;
  }
  if (!npy_type) {
    const bool big_endian = !descr.empty() && descr[0] == '>';
    fail(path, "unsupported dtype " + quote(descr) +
                   (big_endian ? " (big-endian; save with arr.astype(arr.dtype.newbyteorder('<')))"
                               : " (kiln reads <f4 <f2 <f8 <i2 <i4 <i8 |i1 |u1 <u2 <u4 <u8 |b1 <U)"));
  }
  if (fortran_order) {
    fail(path, "Fortran-ordered arrays are not supported; save with np.save(path, np.ascontiguousarray(arr))");
  }
  const int64_t count = checked_volume(shape);
  const size_t data_bytes = bytes.size() - header_start - header_len;
  const size_t elem = data_type_size(npy_type->type);
  if (count < 0 || static_cast<uint64_t>(count) > data_bytes / elem ||
      static_cast<size_t>(count) * elem != data_bytes) {
    const bool too_few =
        count < 0 || static_cast<uint64_t>(count) > data_bytes / elem || static_cast<size_t>(count) * elem > data_bytes;
    const std::string needed = count < 0 ? std::string("more than 2^63 elements")
                               : static_cast<uint64_t>(count) > std::numeric_limits<uint64_t>::max() / elem
                                   ? std::to_string(count) + " elements"
                                   : std::to_string(static_cast<uint64_t>(count) * elem) + " bytes";
    fail(path, "data is " + std::to_string(data_bytes) + " bytes but shape " + npy_shape_text(Dims::from(shape)) +
                   " of " + descr + " needs " + needed + (too_few ? " (truncated file)" : " (trailing data)"));
  }
  HostTensor t(npy_type->type, Dims::from(shape));
  if (data_bytes > 0) std::memcpy(t.data(), bytes.data() + header_start + header_len, data_bytes);
  return t;
}

void save_npy(const std::string& path, const HostTensor& tensor) {
  check_writable(path, tensor);
  std::string descr;
  for (const auto& t : kNpyTypes) {
    if (t.type == tensor.type()) descr = t.write;
  }
  // Strings: numpy's fixed-width unicode, as wide as the longest element (at least 1).
  std::string utf32;
  if (tensor.type() == DataType::kString) {
    std::vector<std::vector<uint32_t>> cps;
    size_t width = 1;
    for (int64_t i = 0; i < tensor.count(); ++i) {
      cps.push_back(utf8_code_points(tensor.string_at(i)));
      width = std::max(width, cps.back().size());
    }
    utf32.assign(static_cast<size_t>(tensor.count()) * width * 4, '\0');
    for (size_t i = 0; i < cps.size(); ++i) {
      for (size_t k = 0; k < cps[i].size(); ++k) std::memcpy(&utf32[(i * width + k) * 4], &cps[i][k], 4);
    }
    descr = "<U" + std::to_string(width);
  }
  if (descr.empty()) fail(path, std::string("no .npy dtype for ") + to_string(tensor.type()));
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + npy_shape_text(tensor.dims()) + ", }";
  // Pad with spaces and a final newline so that the data starts 64-byte aligned (as numpy does).
  const size_t preamble = sizeof kNpyMagic + 2 + 2;
  const size_t total = (preamble + dict.size() + 1 + kNpyAlignment - 1) / kNpyAlignment * kNpyAlignment;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict += '\n';
  std::string header(kNpyMagic, sizeof kNpyMagic);
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>((dict.size() >> 8) & 0xff);
  header += dict;
  if (tensor.type() == DataType::kString) {
    write_file(path, header, utf32.data(), utf32.size());
    return;
  }
  write_file(path, header, tensor.data(), tensor.nbytes());
}

HostTensor load_tensor_pb(const std::string& path, std::string* name) {
  const std::string bytes = read_file(path);
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) fail(path, "larger than 2 GiB");
  onnx::TensorProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !proto.has_data_type() ||
      proto.data_type() == onnx::TensorProto::UNDEFINED) {
    fail(path, "not a serialized onnx.TensorProto");
  }
  // Without external data every element takes at least one byte of the file; checking that
  // first keeps a corrupt dims field from driving a huge allocation.
  if (proto.data_location() != onnx::TensorProto::EXTERNAL) {
    std::vector<int64_t> extents(proto.dims().begin(), proto.dims().end());
    const int64_t count = checked_volume(extents);
    if (count < 0 || static_cast<uint64_t>(count) > bytes.size()) {
      fail(path, "dims of " + std::to_string(extents.size()) + " extents declare more elements than the file's " +
                     std::to_string(bytes.size()) + " bytes can hold");
    }
  }
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  HostTensor t = tensor_from_proto(proto, base_dir, "tensor file " + quote(path));
  if (name) *name = proto.name();
  return t;
}

void save_tensor_pb(const std::string& path, const HostTensor& tensor, const std::string& name) {
  check_writable(path, tensor);
  const OnnxType* type = nullptr;
  for (const auto& t : kOnnxTypes) {
    if (t.type == tensor.type()) type = &t;
  }
  if (!type) fail(path, std::string("no ONNX element type for ") + to_string(tensor.type()));
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(type->onnx);
  for (int64_t d : tensor.dims()) proto.add_dims(d);
  if (tensor.type() == DataType::kString) {
    for (int64_t i = 0; i < tensor.count(); ++i) proto.add_string_data(std::string(tensor.string_at(i)));
  } else if (tensor.nbytes() > 0) {
    proto.set_raw_data(tensor.data(), tensor.nbytes());
  } else {
    proto.set_raw_data(std::string());
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) fail(path, "serializing the TensorProto failed");
  write_file(path, bytes, nullptr, 0);
}

HostTensor load_tensor_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".npy") return load_npy(path);
  if (ext == ".pb") return load_tensor_pb(path);
  fail(path, "unknown extension " + quote(ext) + "; tensor files are .npy (numpy) or .pb (onnx.TensorProto)");
}

std::string sanitize_file_name(const std::string& name) {
  std::string out = name;
  for (auto& c : out) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!keep) c = '_';
  }
  // "", "." and ".." are not usable file names (the last two name directories).
  if (out.empty() || out.find_first_not_of('.') == std::string::npos)
    out = std::string(std::max<size_t>(out.size(), 1), '_');
  return out;
}

}  // namespace kiln
