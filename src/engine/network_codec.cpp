// Encoders and decoders of the engine file's META, GRAPH, PROFILES and PLUGINS sections and
// the bounds-checked byte reader they share (docs/engine-format.md). Names (data types,
// formats, devices, layer types, attribute kinds) are stored as strings, never as enum
// numbers, so reordering an enum never changes what a file means. Maps are written in key
// order and the reader insists on strictly increasing keys, so every engine has exactly one
// encoding (serialize(deserialize(bytes)) == bytes).
#include "engine/network_codec.h"

#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "ir/op_schema.h"
#include "kiln/network.h"
#include "src/core/text.h"

namespace kiln::engine_codec {
namespace {

constexpr size_t kWeightAlignment = 64;
// Smallest encodings, used to bound counts by the bytes left (see ByteReader::count).
constexpr size_t kMinStringBytes = 4;
constexpr size_t kMinDimsBytes = 4;
constexpr size_t kMinTensorDeclBytes = 3 * kMinStringBytes + kMinDimsBytes;  // name type format dims
constexpr size_t kMinAttrBytes = 2 * kMinStringBytes + 1;
constexpr size_t kMinLayerBytes = 2 * kMinStringBytes + 1 + 3 * 4;
constexpr size_t kMinProfileEntryBytes = kMinStringBytes + 3 * kMinDimsBytes;

std::string quoted(const std::string& s) { return quote(s); }

// Runs `fn`, turning a kiln::Error from the core (Network, Dims, parse_*) into a format error
// with the reader's context: a file that the core refuses is a bad file.
template <typename Fn>
auto guarded(ByteReader& r, const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const EngineFormatError&) {
    throw;
  } catch (const Error& e) {
    r.fail(what + ": " + e.what());
  }
}

// ---- attributes: one codec per AttrValue alternative, indexed by variant index -------------
using AttrEncodeFn = void (*)(const AttrValue&, ByteWriter&, WeightsWriter&);
using AttrDecodeFn = AttrValue (*)(ByteReader&, std::span<const uint8_t>, const std::string&);
struct AttrCodec {
  const char* name;  // what the file stores
  AttrEncodeFn encode;
  AttrDecodeFn decode;
};

// A string tensor's WEIGHTS blob: per element, u64 length + that many bytes (its StringRefs are
// addresses, meaningless in a file).
std::vector<uint8_t> string_blob(const HostTensor& t) {
  ByteWriter b;
  for (int64_t i = 0; i < t.count(); ++i) {
    const std::string_view s = t.string_at(i);
    b.u64(s.size());
    b.raw(s.data(), s.size());
  }
  return std::move(b.bytes());
}

void encode_tensor(const HostTensor& t, ByteWriter& w, WeightsWriter& weights) {
  w.boolean(!t.empty());
  if (t.empty()) return;
  w.str(to_string(t.type()));
  w.dims(t.dims());
  if (t.type() == DataType::kString) {
    const std::vector<uint8_t> blob = string_blob(t);
    w.u64(weights.add(blob.data(), blob.size()));
    w.u64(blob.size());
    return;
  }
  w.u64(weights.add(t));
  w.u64(t.nbytes());
}

// Reads the blob of string_blob into t (kString of the declared dims): every length must fit in
// the blob and the elements must use it exactly.
void decode_string_blob(ByteReader& outer, std::span<const uint8_t> blob, HostTensor& t, const std::string& what) {
  size_t pos = 0;
  for (int64_t i = 0; i < t.count(); ++i) {
    if (blob.size() - pos < 8) outer.fail(what + ": string element " + std::to_string(i) + " runs past its blob");
    uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= static_cast<uint64_t>(blob[pos + static_cast<size_t>(k)]) << (8 * k);
    pos += 8;
    if (n > blob.size() - pos) {
      outer.fail(what + ": string element " + std::to_string(i) + " has length " + std::to_string(n) +
                 ", more than the " + std::to_string(blob.size() - pos) + " bytes left in its blob");
    }
    t.set_string(i, std::string_view(reinterpret_cast<const char*>(blob.data() + pos), static_cast<size_t>(n)));
    pos += static_cast<size_t>(n);
  }
  if (pos != blob.size()) {
    outer.fail(what + ": " + std::to_string(blob.size() - pos) + " bytes follow the last string element of its blob");
  }
}

HostTensor decode_tensor(ByteReader& r, std::span<const uint8_t> weights, const std::string& what) {
  if (!r.boolean(what + " presence flag")) return HostTensor();
  const DataType type = r.data_type(what + " data type");
  const Dims dims = r.dims(what + " dims", /*allow_dynamic=*/false);
  const uint64_t offset = r.u64(what + " weights offset");
  const uint64_t size = r.u64(what + " weights size");
  // A string element takes its 8-byte length prefix at least.
  const bool strings = type == DataType::kString;
  uint64_t expected = strings ? 8 : data_type_size(type);
  for (int64_t extent : dims) {
    if (extent != 0 && expected > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(extent)) {
      r.fail(what + " dims " + dims.to_string() + " overflow");
    }
    expected *= static_cast<uint64_t>(extent);
  }
  if (strings ? size < expected : size != expected) {
    r.fail(what + " stores " + std::to_string(size) + " bytes but " + to_string(type) + " " + dims.to_string() +
           " needs " + std::to_string(expected));
  }
  if (offset % kWeightAlignment != 0) {
    r.fail(what + " weights offset " + std::to_string(offset) + " is not 64-byte aligned");
  }
  if (offset > weights.size() || size > weights.size() - offset) {
    r.fail(what + " refers to weights bytes [" + std::to_string(offset) + ", +" + std::to_string(size) +
           ") outside the WEIGHTS section (" + std::to_string(weights.size()) + " bytes)");
  }
  HostTensor t = guarded(r, what, [&] { return HostTensor(type, dims); });
  if (strings) {
    decode_string_blob(r, weights.subspan(static_cast<size_t>(offset), static_cast<size_t>(size)), t, what);
    return t;
  }
  if (t.nbytes() != size) r.fail(what + ": tensor size mismatch");
  if (size > 0) std::memcpy(t.data(), weights.data() + offset, size);
  return t;
}

template <typename T>
const T& alt(const AttrValue& v) {
  return std::get<T>(v);
}

const AttrCodec kAttrCodecs[] = {
    {"int", [](const AttrValue& v, ByteWriter& w, WeightsWriter&) { w.i64(alt<int64_t>(v)); },
     [](ByteReader& r, std::span<const uint8_t>, const std::string& what) -> AttrValue { return r.i64(what); }},
    {"float", [](const AttrValue& v, ByteWriter& w, WeightsWriter&) { w.f64(alt<double>(v)); },
     [](ByteReader& r, std::span<const uint8_t>, const std::string& what) -> AttrValue { return r.f64(what); }},
    {"string", [](const AttrValue& v, ByteWriter& w, WeightsWriter&) { w.str(alt<std::string>(v)); },
     [](ByteReader& r, std::span<const uint8_t>, const std::string& what) -> AttrValue { return r.str(what); }},
    {"ints",
     [](const AttrValue& v, ByteWriter& w, WeightsWriter&) {
       const auto& xs = alt<std::vector<int64_t>>(v);
       w.count(xs.size(), "ints attribute");
       for (int64_t x : xs) w.i64(x);
     },
     [](ByteReader& r, std::span<const uint8_t>, const std::string& what) -> AttrValue {
       std::vector<int64_t> xs(r.count(8, what + " length"));
       for (auto& x : xs) x = r.i64(what);
       return xs;
     }},
    {"floats",
     [](const AttrValue& v, ByteWriter& w, WeightsWriter&) {
       const auto& xs = alt<std::vector<double>>(v);
       w.count(xs.size(), "floats attribute");
       for (double x : xs) w.f64(x);
     },
     [](ByteReader& r, std::span<const uint8_t>, const std::string& what) -> AttrValue {
       std::vector<double> xs(r.count(8, what + " length"));
       for (auto& x : xs) x = r.f64(what);
       return xs;
     }},
    {"strings",
     [](const AttrValue& v, ByteWriter& w, WeightsWriter&) {
       const auto& xs = alt<std::vector<std::string>>(v);
       w.count(xs.size(), "strings attribute");
       for (const auto& x : xs) w.str(x);
     },
     [](ByteReader& r, std::span<const uint8_t>, const std::string& what) -> AttrValue {
       std::vector<std::string> xs(r.count(kMinStringBytes, what + " length"));
       for (auto& x : xs) x = r.str(what);
       return xs;
     }},
    {"tensor", [](const AttrValue& v, ByteWriter& w, WeightsWriter& ww) { encode_tensor(alt<HostTensor>(v), w, ww); },
     [](ByteReader& r, std::span<const uint8_t> weights, const std::string& what) -> AttrValue {
       return decode_tensor(r, weights, what);
     }},
};
static_assert(std::size(kAttrCodecs) == std::variant_size_v<AttrValue>, "one codec per attribute kind");

const AttrCodec* find_attr_codec(const std::string& name) {
  for (const auto& codec : kAttrCodecs) {
    if (name == codec.name) return &codec;
  }
  return nullptr;
}

// ---- string maps (tactics, build_info) ------------------------------------------------------
void encode_map(const std::map<std::string, std::string>& m, ByteWriter& w, const char* what) {
  w.count(m.size(), what);
  for (const auto& [k, v] : m) {
    w.str(k);
    w.str(v);
  }
}

std::map<std::string, std::string> decode_map(ByteReader& r, const std::string& what) {
  std::map<std::string, std::string> m;
  const uint32_t n = r.count(2 * kMinStringBytes, what + " entry count");
  for (uint32_t i = 0; i < n; ++i) {
    std::string key = r.str(what + " key");
    if (!m.empty() && !(m.rbegin()->first < key)) {
      r.fail(what + " keys are not strictly increasing at " + quoted(key));
    }
    std::string value = r.str(what + " value");
    m.emplace_hint(m.end(), std::move(key), std::move(value));
  }
  return m;
}

// A tensor declaration: name, data type, format, dims.
void encode_tensor_decl(const Tensor& t, ByteWriter& w) {
  w.str(t.name());
  w.str(to_string(t.type()));
  w.str(to_string(t.format()));
  w.dims(t.dims());
}

struct TensorDecl {
  std::string name;
  DataType type;
  TensorFormat format;
  Dims dims;
};

TensorDecl decode_tensor_decl(ByteReader& r, const std::string& what) {
  TensorDecl d;
  d.name = r.str(what + " name");
  if (d.name.empty()) r.fail(what + " has an empty name");
  d.type = r.data_type(what + " " + quoted(d.name) + " data type");
  d.format = r.tensor_format(what + " " + quoted(d.name) + " format");
  d.dims = r.dims(what + " " + quoted(d.name) + " dims", /*allow_dynamic=*/true);
  return d;
}

void apply_decl(Tensor* t, const TensorDecl& d) {
  t->set_name(d.name);
  t->set_type(d.type);
  t->set_dims(d.dims);
  t->set_format(d.format);
}

// Tracks names while encoding so that the writer refuses what the reader would refuse.
void check_new_name(std::unordered_set<std::string>& names, const std::string& name, const char* kind) {
  if (name.empty()) throw Error("engine_serialize: a " + std::string(kind) + " has an empty name; name it first");
  if (!names.insert(name).second) {
    throw Error("engine_serialize: two " + std::string(kind) + "s are named " + quoted(name) +
                "; names must be unique (run Network::validate)");
  }
}

}  // namespace

// ---- ByteWriter / ByteReader -----------------------------------------------------------------
void ByteWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void ByteWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void ByteWriter::f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  u64(bits);
}
void ByteWriter::str(const std::string& s) {
  count(s.size(), "string length");
  raw(s.data(), s.size());
}
void ByteWriter::count(size_t n, const char* what) {
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw Error(std::string("engine_serialize: ") + what + " " + std::to_string(n) +
                " exceeds the format's 2^32-1 limit");
  }
  u32(static_cast<uint32_t>(n));
}
void ByteWriter::dims(const Dims& d) {
  u32(static_cast<uint32_t>(d.rank()));
  for (int64_t v : d) i64(v);
}
void ByteWriter::raw(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  bytes_.insert(bytes_.end(), p, p + n);
}

void ByteReader::fail(const std::string& what) const {
  throw EngineFormatError(context_ + ": " + what + " (at byte " + std::to_string(pos_) + " of the section)");
}

std::span<const uint8_t> ByteReader::take(size_t n, const std::string& what) {
  if (n > remaining()) {
    fail("truncated " + what + ": needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
  }
  auto out = data_.subspan(pos_, n);
  pos_ += n;
  return out;
}

uint8_t ByteReader::u8(const std::string& what) { return take(1, what)[0]; }

bool ByteReader::boolean(const std::string& what) {
  const uint8_t v = u8(what);
  if (v > 1) fail(what + " is " + std::to_string(v) + ", expected 0 or 1");
  return v == 1;
}

uint32_t ByteReader::u32(const std::string& what) {
  auto b = take(4, what);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[static_cast<size_t>(i)]) << (8 * i);
  return v;
}

uint64_t ByteReader::u64(const std::string& what) {
  auto b = take(8, what);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[static_cast<size_t>(i)]) << (8 * i);
  return v;
}

int64_t ByteReader::i64(const std::string& what) { return static_cast<int64_t>(u64(what)); }

double ByteReader::f64(const std::string& what) {
  const uint64_t bits = u64(what);
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::string ByteReader::str(const std::string& what) {
  const uint32_t n = u32(what + " length");
  auto b = take(n, what);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

uint32_t ByteReader::count(size_t min_item_bytes, const std::string& what) {
  const uint32_t n = u32(what);
  if (min_item_bytes > 0 && n > remaining() / min_item_bytes) {
    fail(what + " is " + std::to_string(n) + " but only " + std::to_string(remaining()) +
         " bytes are left (each item takes at least " + std::to_string(min_item_bytes) + ")");
  }
  return n;
}

Dims ByteReader::dims(const std::string& what, bool allow_dynamic) {
  const uint32_t rank = u32(what + " rank");
  if (rank > static_cast<uint32_t>(kMaxDims)) {
    fail(what + " has rank " + std::to_string(rank) + "; kiln supports at most " + std::to_string(kMaxDims));
  }
  std::vector<int64_t> values(rank);
  for (auto& v : values) {
    v = i64(what);
    if (v < 0 && !(allow_dynamic && v == kDynamic)) {
      fail(what + " has extent " + std::to_string(v) +
           (allow_dynamic ? "; extents must be >= 0 or -1 (dynamic)" : "; extents must be >= 0"));
    }
  }
  return Dims::from(values);
}

// Names are parsed by the core and must print back identically (one spelling per value).
DataType ByteReader::data_type(const std::string& what) {
  const std::string name = str(what);
  DataType t{};
  try {
    t = parse_data_type(name);
  } catch (const Error&) {
    fail(what + ": unknown data type " + quoted(name));
  }
  if (name != to_string(t)) fail(what + ": data type " + quoted(name) + " is not spelled canonically");
  return t;
}

TensorFormat ByteReader::tensor_format(const std::string& what) {
  const std::string name = str(what);
  TensorFormat f{};
  try {
    f = parse_tensor_format(name);
  } catch (const Error&) {
    fail(what + ": unknown tensor format " + quoted(name));
  }
  if (name != to_string(f)) fail(what + ": tensor format " + quoted(name) + " is not spelled canonically");
  return f;
}

void ByteReader::expect_end() {
  if (remaining() != 0) fail(std::to_string(remaining()) + " unexpected bytes after the section's content");
}

uint64_t WeightsWriter::add(const HostTensor& tensor) { return add(tensor.data(), tensor.nbytes()); }

uint64_t WeightsWriter::add(const void* data, size_t n) {
  const size_t offset = (bytes.size() + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
  bytes.resize(offset, 0);
  const auto* p = static_cast<const uint8_t*>(data);
  if (n) bytes.insert(bytes.end(), p, p + n);
  return offset;
}

// ---- META -----------------------------------------------------------------------------------
void encode_meta(const EngineData& data, ByteWriter& w) {
  w.str(to_string(data.device));
  w.i64(data.num_threads);
  encode_map(data.tactics, w, "tactics");
  w.count(data.activation_peak_bytes.size(), "activation_peak_bytes");
  for (uint64_t v : data.activation_peak_bytes) w.u64(v);
  encode_map(data.build_info, w, "build_info");
}

void decode_meta(ByteReader& r, EngineData& data) {
  const std::string device = r.str("device");
  try {
    data.device = parse_device_type(device);
  } catch (const Error&) {
    r.fail("unknown device " + quoted(device));
  }
  if (device != to_string(data.device)) r.fail("device " + quoted(device) + " is not spelled canonically");
  // An engine asking for more CPU threads than kMaxThreads is corrupt, not ambitious.
  const int64_t threads = r.i64("num_threads");
  if (threads < 0 || threads > kMaxThreads) {
    r.fail("num_threads is " + std::to_string(threads) + ", expected 0.." + std::to_string(kMaxThreads));
  }
  data.num_threads = static_cast<int>(threads);
  data.tactics = decode_map(r, "tactics");
  data.activation_peak_bytes.resize(r.count(8, "activation_peak_bytes count"));
  for (auto& v : data.activation_peak_bytes) v = r.u64("activation_peak_bytes");
  data.build_info = decode_map(r, "build_info");
  r.expect_end();
}

// ---- LAUNCH ---------------------------------------------------------------------------------
void encode_launch_tactics(const std::map<std::string, std::string>& launch, ByteWriter& w) {
  encode_map(launch, w, "launch tactics");
}

std::map<std::string, std::string> decode_launch_tactics(ByteReader& r,
                                                         const std::map<std::string, std::string>& tactics) {
  std::map<std::string, std::string> m = decode_map(r, "launch tactics");
  if (m.empty()) r.fail("has no entry (an engine without launch tactics has no LAUNCH section)");
  for (const auto& [layer, tactic] : m) {
    auto it = tactics.find(layer);
    if (it == tactics.end()) r.fail("names layer " + quoted(layer) + ", which has no tactic in META");
    if (it->second == tactic) r.fail("gives layer " + quoted(layer) + " its META tactic " + quoted(tactic) + " again");
    if (tactic.empty()) r.fail("gives layer " + quoted(layer) + " an empty tactic");
  }
  r.expect_end();
  return m;
}

// ---- GRAPH ----------------------------------------------------------------------------------
void encode_graph(const Network& network, ByteWriter& w, WeightsWriter& weights) {
  std::unordered_set<std::string> tensor_names, layer_names;
  w.count(static_cast<size_t>(network.num_inputs()), "network inputs");
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* t = network.input(i);
    check_new_name(tensor_names, t->name(), "tensor");
    encode_tensor_decl(*t, w);
  }
  // Topological order so that the reader meets every tensor before its readers; stable, so a
  // sorted network keeps its order.
  const std::vector<Layer*> order = network.topological_order();
  w.count(order.size(), "layers");
  for (const Layer* layer : order) {
    check_new_name(layer_names, layer->name(), "layer");
    w.str(layer->name());
    w.str(layer->type());
    w.boolean(layer->has_precision());
    if (layer->has_precision()) w.str(to_string(layer->precision()));
    w.count(static_cast<size_t>(layer->num_inputs()), "layer inputs");
    for (int i = 0; i < layer->num_inputs(); ++i) {
      const Tensor* t = layer->input(i);
      if (t && !tensor_names.count(t->name())) {
        throw Error("engine_serialize: layer " + quoted(layer->name()) + " reads tensor " + quoted(t->name()) +
                    ", which is neither a network input nor produced by a layer (run Network::validate)");
      }
      w.str(t ? t->name() : std::string());
    }
    w.count(static_cast<size_t>(layer->num_outputs()), "layer outputs");
    for (int i = 0; i < layer->num_outputs(); ++i) {
      check_new_name(tensor_names, layer->output(i)->name(), "tensor");
      encode_tensor_decl(*layer->output(i), w);
    }
    const auto& attrs = layer->attrs().all();
    w.count(attrs.size(), "layer attributes");
    for (const auto& [name, value] : attrs) {
      const AttrCodec& codec = kAttrCodecs[value.index()];
      w.str(name);
      w.str(codec.name);
      codec.encode(value, w, weights);
    }
  }
  w.count(static_cast<size_t>(network.num_outputs()), "network outputs");
  for (int i = 0; i < network.num_outputs(); ++i) {
    const Tensor* t = network.output(i);
    if (!tensor_names.count(t->name())) {
      throw Error("engine_serialize: network output " + quoted(t->name()) + " is not produced by any layer");
    }
    w.str(t->name());
  }
}

std::unique_ptr<Network> decode_graph(ByteReader& r, std::span<const uint8_t> weights) {
  auto network = std::make_unique<Network>();
  std::unordered_map<std::string, Tensor*> tensors;
  std::unordered_set<std::string> layer_names;

  const uint32_t num_inputs = r.count(kMinTensorDeclBytes, "network input count");
  for (uint32_t i = 0; i < num_inputs; ++i) {
    const TensorDecl d = decode_tensor_decl(r, "network input " + std::to_string(i));
    if (tensors.count(d.name)) r.fail("network input " + quoted(d.name) + " is declared twice");
    Tensor* t =
        guarded(r, "network input " + quoted(d.name), [&] { return network->add_input(d.name, d.type, d.dims); });
    apply_decl(t, d);
    tensors.emplace(d.name, t);
  }

  const uint32_t num_layers = r.count(kMinLayerBytes, "layer count");
  for (uint32_t li = 0; li < num_layers; ++li) {
    const std::string name = r.str("layer " + std::to_string(li) + " name");
    const std::string where = "layer " + std::to_string(li) + " (" + quoted(name) + ")";
    if (name.empty()) r.fail(where + " has an empty name");
    if (!layer_names.insert(name).second) r.fail(where + ": duplicate layer name");
    const std::string type = r.str(where + " type");
    if (type != kLayerPlugin && !OpSchemaRegistry::instance().find(type)) {
      r.fail(where + " has unknown layer type " + quoted(type) + "; rebuild the engine with this kiln");
    }
    const bool has_precision = r.boolean(where + " precision flag");
    const DataType precision = has_precision ? r.data_type(where + " precision") : DataType::kFloat32;

    std::vector<Tensor*> inputs(r.count(kMinStringBytes, where + " input count"));
    for (auto& input : inputs) {
      const std::string tname = r.str(where + " input name");
      if (tname.empty()) continue;  // an omitted optional input
      auto it = tensors.find(tname);
      if (it == tensors.end()) {
        r.fail(where + " reads tensor " + quoted(tname) + ", which no network input or earlier layer produces");
      }
      input = it->second;
    }
    std::vector<TensorDecl> outputs(r.count(kMinTensorDeclBytes, where + " output count"));
    for (auto& out : outputs) {
      out = decode_tensor_decl(r, where + " output");
      if (tensors.count(out.name)) r.fail(where + " output " + quoted(out.name) + " reuses an existing tensor name");
      tensors.emplace(out.name, nullptr);  // reserved; filled once the layer exists
    }
    Attributes attrs;
    std::string previous;
    const uint32_t num_attrs = r.count(kMinAttrBytes, where + " attribute count");
    for (uint32_t ai = 0; ai < num_attrs; ++ai) {
      std::string aname = r.str(where + " attribute name");
      if (ai > 0 && !(previous < aname)) {
        r.fail(where + " attribute names are not strictly increasing at " + quoted(aname));
      }
      const std::string what = where + " attribute " + quoted(aname);
      const std::string kind = r.str(what + " kind");
      const AttrCodec* codec = find_attr_codec(kind);
      if (!codec) r.fail(what + " has unknown kind " + quoted(kind));
      attrs.set(aname, codec->decode(r, weights, what));
      previous = std::move(aname);
    }

    Layer* layer = guarded(r, where, [&] {
      return network->add_layer(type, inputs, static_cast<int>(outputs.size()), std::move(attrs), name);
    });
    if (layer->num_outputs() != static_cast<int>(outputs.size())) {
      r.fail(where + " has " + std::to_string(layer->num_outputs()) + " outputs, the file declares " +
             std::to_string(outputs.size()));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      Tensor* t = layer->output(static_cast<int>(i));
      apply_decl(t, outputs[i]);
      tensors[outputs[i].name] = t;
    }
    if (layer->name() != name) layer->set_name(name);
    if (has_precision) layer->set_precision(precision);
  }

  const uint32_t num_outputs = r.count(kMinStringBytes, "network output count");
  std::unordered_set<std::string> marked;
  for (uint32_t i = 0; i < num_outputs; ++i) {
    const std::string tname = r.str("network output name");
    auto it = tensors.find(tname);
    if (it == tensors.end()) r.fail("network output " + quoted(tname) + " is not a tensor of the graph");
    if (!marked.insert(tname).second) r.fail("network output " + quoted(tname) + " is listed twice");
    guarded(r, "network output " + quoted(tname), [&] { network->mark_output(it->second); });
  }
  r.expect_end();
  return network;
}

// ---- PROFILES -------------------------------------------------------------------------------
void encode_profiles(const std::vector<OptimizationProfile>& profiles, ByteWriter& w) {
  w.count(profiles.size(), "profiles");
  for (const auto& profile : profiles) {
    w.count(profile.all().size(), "profile inputs");
    for (const auto& [input, shapes] : profile.all()) {
      w.str(input);
      w.dims(shapes.min);
      w.dims(shapes.opt);
      w.dims(shapes.max);
    }
  }
}

std::vector<OptimizationProfile> decode_profiles(ByteReader& r, const Network& network) {
  std::vector<OptimizationProfile> profiles(r.count(4, "profile count"));
  for (size_t pi = 0; pi < profiles.size(); ++pi) {
    const std::string where = "profile " + std::to_string(pi);
    const uint32_t n = r.count(kMinProfileEntryBytes, where + " input count");
    std::string previous;
    for (uint32_t i = 0; i < n; ++i) {
      std::string input = r.str(where + " input name");
      if (i > 0 && !(previous < input)) r.fail(where + " input names are not strictly increasing at " + quoted(input));
      const std::string what = where + " input " + quoted(input);
      const Dims min = r.dims(what + " min", false);
      const Dims opt = r.dims(what + " opt", false);
      const Dims max = r.dims(what + " max", false);
      const Tensor* t = network.find_tensor(input);
      if (!t || !t->is_network_input()) r.fail(what + ": not a network input of the GRAPH section");
      if (min.rank() != t->dims().rank() || opt.rank() != min.rank() || max.rank() != min.rank()) {
        r.fail(what + ": min/opt/max ranks " + std::to_string(min.rank()) + "/" + std::to_string(opt.rank()) + "/" +
               std::to_string(max.rank()) + " differ from the input's rank " + std::to_string(t->dims().rank()));
      }
      for (int d = 0; d < min.rank(); ++d) {
        if (min[d] > opt[d] || opt[d] > max[d]) r.fail(what + ": needs min <= opt <= max in every dimension");
      }
      guarded(r, what, [&] { profiles[pi].set_dimensions(input, min, opt, max); });
      previous = std::move(input);
    }
  }
  r.expect_end();
  return profiles;
}

// ---- PLUGINS --------------------------------------------------------------------------------
void encode_plugins(const std::vector<EngineData::PluginRecord>& plugins, ByteWriter& w) {
  w.count(plugins.size(), "plugins");
  for (const auto& p : plugins) {
    w.str(p.name);
    w.str(p.version);
    w.str(p.plugin_namespace);
    w.str(p.library);
  }
}

std::vector<EngineData::PluginRecord> decode_plugins(ByteReader& r) {
  std::vector<EngineData::PluginRecord> plugins(r.count(4 * kMinStringBytes, "plugin count"));
  for (auto& p : plugins) {
    p.name = r.str("plugin name");
    p.version = r.str("plugin " + quoted(p.name) + " version");
    p.plugin_namespace = r.str("plugin " + quoted(p.name) + " namespace");
    p.library = r.str("plugin " + quoted(p.name) + " library");
  }
  r.expect_end();
  return plugins;
}

}  // namespace kiln::engine_codec
