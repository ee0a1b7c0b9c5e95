// Tests of the engine file format (src/engine/engine_format.cpp, docs/engine-format.md): round
// trips of a network using every attribute kind, determinism, an engine encoded by hand from
// the documentation (so the implementation is checked against the spec, not against itself),
// targeted malformed files, and sweeps of truncations and byte flips that must all fail
// cleanly with kiln::EngineFormatError.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/engine_format.h"
#include "kiln/error.h"
#include "kiln/network.h"

namespace kiln {
namespace {

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}
double from_bits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}

HostTensor float_tensor(const Dims& dims, float start, float step) {
  HostTensor t(DataType::kFloat32, dims);
  for (int64_t i = 0; i < t.count(); ++i) t.as<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

// A network touching every attribute kind, omitted inputs, several outputs, formats,
// precisions and dynamic dims.
std::unique_ptr<Network> make_rich_network() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{kDynamic, 3, 4, 4});
  x->set_format(TensorFormat::kChannelsLast);
  Tensor* ids = net->add_input("ids", DataType::kInt64, Dims{2});

  HostTensor w = float_tensor(Dims{2, 3, 1, 1}, -1.5f, 0.37f);
  w.as<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  w.as<float>()[2] = -0.0f;
  w.as<float>()[3] = std::numeric_limits<float>::infinity();
  Layer* wl = net->add_constant(w, "weights");

  Attributes conv;
  conv.set("strides", std::vector<int64_t>{1, 1});
  conv.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  conv.set("group", int64_t{1});
  conv.set("activation", std::string("leaky_relu"));
  conv.set("activation_alpha", 0.1);
  Layer* c = net->add_layer(kLayerConvolution, {x, wl->output(0), nullptr}, 1, conv, "conv");
  c->output(0)->set_name("conv_out");
  c->output(0)->set_dims(Dims{kDynamic, 2, 4, 4});
  c->set_precision(DataType::kFloat16);

  Attributes plugin;
  plugin.set("i", std::numeric_limits<int64_t>::min());
  plugin.set("f_nan", from_bits(0x7ff800000000abcdull));  // NaN with a payload
  plugin.set("f_neg_zero", -0.0);
  plugin.set("f_denormal", std::numeric_limits<double>::denorm_min());
  plugin.set("f_inf", -std::numeric_limits<double>::infinity());
  plugin.set("s", std::string("bin\0ary\xff\x01", 9));
  plugin.set("s_empty", std::string());
  plugin.set("ints", std::vector<int64_t>{std::numeric_limits<int64_t>::max(), -1, 0});
  plugin.set("ints_empty", std::vector<int64_t>{});
  plugin.set("floats", std::vector<double>{0.1, 1e-300, -7.25});
  plugin.set("strings", std::vector<std::string>{"a", "", "ccc"});
  HostTensor t64 = HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{3}, {-5, 1ll << 50, 7});
  plugin.set("t_int64", t64);
  HostTensor t16 = HostTensor::from_vector<uint16_t>(DataType::kFloat16, Dims{2, 2}, {0x3c00, 0xbc00, 0x7e00, 1});
  plugin.set("t_half", t16);
  plugin.set("t_bool", HostTensor::from_vector<uint8_t>(DataType::kBool, Dims{3}, {1, 0, 1}));
  plugin.set("t_scalar", HostTensor::from_vector<double>(DataType::kFloat64, Dims{}, {2.5}));
  plugin.set("t_zero", HostTensor(DataType::kInt32, Dims{0, 5}));
  plugin.set("t_none", HostTensor());
  Layer* p = net->add_layer(kLayerPlugin, {c->output(0), ids}, 2, plugin, "plug");
  p->output(0)->set_name("plug_a");
  p->output(1)->set_name("plug_b");
  p->output(1)->set_type(DataType::kInt64);
  p->output(1)->set_dims(Dims{2});

  Layer* act = net->add_activation(p->output(0), ActivationType::kSelu, 1.6732632423543772, 1.0507009873554805);
  act->set_name("selu");
  net->mark_output(act->output(0));
  net->mark_output(p->output(1));
  return net;
}

EngineData make_rich_engine() {
  EngineData d;
  d.device = DeviceType::kCUDA;
  d.num_threads = 3;
  d.network = make_rich_network();
  d.tactics = {{"conv", "onednn_direct"}, {"plug", "plugin"}, {"selu", "reference"}};
  OptimizationProfile p0, p1;
  p0.set_dimensions("x", Dims{1, 3, 4, 4}, Dims{2, 3, 4, 4}, Dims{8, 3, 4, 4});
  p1.set_dimensions("x", Dims{16, 3, 4, 4}, Dims{16, 3, 4, 4}, Dims{32, 3, 4, 4});
  d.profiles = {p0, p1};
  d.activation_peak_bytes = {1ull << 40, 12345};
  d.plugins = {{"Swish", "1", "kiln", ""}, {"Custom", "2", "acme", "libacme.so"}};
  d.build_info = {{"builder", "test"}, {"passes", "none"}};
  return d;
}

void expect_same_attr(const std::string& where, const AttrValue& a, const AttrValue& b) {
  ASSERT_EQ(attr_type_of(a), attr_type_of(b)) << where;
  switch (attr_type_of(a)) {
    case AttrType::kFloat:
      EXPECT_EQ(bits_of(std::get<double>(a)), bits_of(std::get<double>(b))) << where;
      break;
    case AttrType::kFloats: {
      const auto& x = std::get<std::vector<double>>(a);
      const auto& y = std::get<std::vector<double>>(b);
      ASSERT_EQ(x.size(), y.size()) << where;
      for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits_of(x[i]), bits_of(y[i])) << where << "[" << i << "]";
      break;
    }
    case AttrType::kTensor: {
      const auto& x = std::get<HostTensor>(a);
      const auto& y = std::get<HostTensor>(b);
      ASSERT_EQ(x.empty(), y.empty()) << where;
      if (x.empty()) break;
      EXPECT_EQ(x.type(), y.type()) << where;
      EXPECT_EQ(x.dims(), y.dims()) << where;
      ASSERT_EQ(x.nbytes(), y.nbytes()) << where;
      if (x.nbytes()) {
        EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << where;
      }
      EXPECT_NE(x.data(), y.data()) << where << ": the loaded tensor must own a copy";
      break;
    }
    case AttrType::kInt:
      EXPECT_EQ(std::get<int64_t>(a), std::get<int64_t>(b)) << where;
      break;
    case AttrType::kString:
      EXPECT_EQ(std::get<std::string>(a), std::get<std::string>(b)) << where;
      break;
    case AttrType::kInts:
      EXPECT_EQ(std::get<std::vector<int64_t>>(a), std::get<std::vector<int64_t>>(b)) << where;
      break;
    case AttrType::kStrings:
      EXPECT_EQ(std::get<std::vector<std::string>>(a), std::get<std::vector<std::string>>(b)) << where;
      break;
  }
}

void expect_same_tensor(const std::string& where, const Tensor* a, const Tensor* b) {
  ASSERT_EQ(a == nullptr, b == nullptr) << where;
  if (!a) return;
  EXPECT_EQ(a->name(), b->name()) << where;
  EXPECT_EQ(a->type(), b->type()) << where;
  EXPECT_EQ(a->dims(), b->dims()) << where;
  EXPECT_EQ(a->format(), b->format()) << where;
}

void expect_same_network(const Network& a, const Network& b) {
  ASSERT_EQ(a.num_inputs(), b.num_inputs());
  for (int i = 0; i < a.num_inputs(); ++i) {
    expect_same_tensor("input", a.input(i), b.input(i));
    EXPECT_TRUE(b.input(i)->is_network_input());
  }
  ASSERT_EQ(a.num_layers(), b.num_layers());
  for (int li = 0; li < a.num_layers(); ++li) {
    const Layer* x = a.layer(li);
    const Layer* y = b.layer(li);
    const std::string where = "layer " + x->name();
    EXPECT_EQ(x->name(), y->name());
    EXPECT_EQ(x->type(), y->type()) << where;
    EXPECT_EQ(x->has_precision(), y->has_precision()) << where;
    if (x->has_precision()) {
      EXPECT_EQ(x->precision(), y->precision()) << where;
    }
    ASSERT_EQ(x->num_inputs(), y->num_inputs()) << where;
    for (int i = 0; i < x->num_inputs(); ++i) expect_same_tensor(where + " input", x->input(i), y->input(i));
    ASSERT_EQ(x->num_outputs(), y->num_outputs()) << where;
    for (int i = 0; i < x->num_outputs(); ++i) {
      expect_same_tensor(where + " output", x->output(i), y->output(i));
      EXPECT_EQ(y->output(i)->producer(), y) << where;
    }
    const auto& xa = x->attrs().all();
    const auto& ya = y->attrs().all();
    ASSERT_EQ(xa.size(), ya.size()) << where;
    for (const auto& [name, value] : xa) {
      ASSERT_TRUE(ya.count(name)) << where << " lacks attribute " << name;
      expect_same_attr(where + " attribute " + name, value, ya.at(name));
    }
  }
  ASSERT_EQ(a.num_outputs(), b.num_outputs());
  for (int i = 0; i < a.num_outputs(); ++i) expect_same_tensor("output", a.output(i), b.output(i));
}

uint32_t get_u32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[at + static_cast<size_t>(i)]) << (8 * i);
  return v;
}
uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[at + static_cast<size_t>(i)]) << (8 * i);
  return v;
}
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}
// Recomputes the payload checksum so that a deliberate change reaches the section decoders.
void fix_checksum(std::vector<uint8_t>& b) { put_u64(b, 40, engine_checksum(b.data() + 64, b.size() - 64)); }

// Deserializes and returns the EngineFormatError message ("" when it parsed). Any other
// exception fails the test.
std::string load_error(const std::vector<uint8_t>& bytes, const std::string& source = "t.engine") {
  try {
    engine_deserialize(bytes.data(), bytes.size(), source);
    return "";
  } catch (const EngineFormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-format exception: " << e.what();
    return "wrong exception";
  }
}

// ---- a hand-written encoder that follows docs/engine-format.md ----------------------------
struct Blob {
  std::vector<uint8_t> b;
  Blob& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Blob& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Blob& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Blob& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Blob& dims(std::initializer_list<int64_t> d) {
    u32(static_cast<uint32_t>(d.size()));
    for (int64_t v : d) u64(static_cast<uint64_t>(v));
    return *this;
  }
};

struct Section {
  std::string id;
  std::vector<uint8_t> bytes;
};

// Header + table + sections packed at 64-byte boundaries, with a correct checksum.
std::vector<uint8_t> container(const std::vector<Section>& sections) {
  std::vector<uint8_t> payload(sections.size() * 24, 0);
  for (size_t i = 0; i < sections.size(); ++i) {
    payload.resize((payload.size() + 63) / 64 * 64, 0);
    const size_t offset = payload.size();
    std::memcpy(payload.data() + i * 24, sections[i].id.data(), sections[i].id.size());
    put_u64(payload, i * 24 + 8, offset);
    put_u64(payload, i * 24 + 16, sections[i].bytes.size());
    payload.insert(payload.end(), sections[i].bytes.begin(), sections[i].bytes.end());
  }
  Blob h;
  h.b = {'K', 'I', 'L', 'N', 'E', 'N', 'G', 0};
  h.u32(1).u32(64);
  std::string v = version();
  v.resize(16, '\0');
  h.b.insert(h.b.end(), v.begin(), v.end());
  h.u64(payload.size())
      .u64(engine_checksum(payload.data(), payload.size()))
      .u32(static_cast<uint32_t>(sections.size()));
  h.b.resize(64, 0);
  h.b.insert(h.b.end(), payload.begin(), payload.end());
  return h.b;
}

// x (float32 [2]) -> Identity "id" -> y, optionally with one attribute `attr` already encoded.
std::vector<Section> tiny_sections(const std::string& input_type = "float32", Blob attrs = Blob().u32(0),
                                   std::vector<uint8_t> weights = {}) {
  Blob meta;
  meta.str("cpu").u64(0).u32(0).u32(0).u32(0);
  Blob graph;
  graph.u32(1).str("x").str(input_type).str("linear").dims({2});
  graph.u32(1).str("id").str("Identity").u8(0);
  graph.u32(1).str("x");
  graph.u32(1).str("y").str("float32").str("linear").dims({2});
  graph.b.insert(graph.b.end(), attrs.b.begin(), attrs.b.end());
  graph.u32(1).str("y");
  return {{"META", meta.b},
          {"GRAPH", graph.b},
          {"PROFILES", Blob().u32(0).b},
          {"PLUGINS", Blob().u32(0).b},
          {"WEIGHTS", std::move(weights)}};
}

uint32_t load_u32_at(const std::vector<uint8_t>& bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | bytes[at + static_cast<size_t>(i)];
  return v;
}

// ---- tests --------------------------------------------------------------------------------
TEST(EngineFormat, ChecksumIsFnv1a64) {
  // Published FNV-1a 64 test vectors.
  EXPECT_EQ(engine_checksum(nullptr, 0), 0xcbf29ce484222325ull);
  const uint8_t a[] = {'a'};
  EXPECT_EQ(engine_checksum(a, 1), 0xaf63dc4c8601ec8cull);
  const std::string foobar = "foobar";
  EXPECT_EQ(engine_checksum(reinterpret_cast<const uint8_t*>(foobar.data()), foobar.size()), 0x85944171f73967e8ull);
}

TEST(EngineFormat, RoundTripEveryAttributeKind) {
  const EngineData original = make_rich_engine();
  const std::vector<uint8_t> bytes = engine_serialize(original);
  const EngineData loaded = engine_deserialize(bytes.data(), bytes.size(), "rich.engine");

  EXPECT_EQ(loaded.device, original.device);
  EXPECT_EQ(loaded.num_threads, original.num_threads);
  EXPECT_EQ(loaded.tactics, original.tactics);
  EXPECT_EQ(loaded.activation_peak_bytes, original.activation_peak_bytes);
  EXPECT_EQ(loaded.build_info, original.build_info);
  ASSERT_EQ(loaded.plugins.size(), original.plugins.size());
  for (size_t i = 0; i < loaded.plugins.size(); ++i) {
    EXPECT_EQ(loaded.plugins[i].name, original.plugins[i].name);
    EXPECT_EQ(loaded.plugins[i].version, original.plugins[i].version);
    EXPECT_EQ(loaded.plugins[i].plugin_namespace, original.plugins[i].plugin_namespace);
    EXPECT_EQ(loaded.plugins[i].library, original.plugins[i].library);
  }
  ASSERT_EQ(loaded.profiles.size(), original.profiles.size());
  for (size_t i = 0; i < loaded.profiles.size(); ++i) {
    ASSERT_TRUE(loaded.profiles[i].has("x"));
    EXPECT_EQ(loaded.profiles[i].all().size(), 1u);
    EXPECT_EQ(loaded.profiles[i].min("x"), original.profiles[i].min("x"));
    EXPECT_EQ(loaded.profiles[i].opt("x"), original.profiles[i].opt("x"));
    EXPECT_EQ(loaded.profiles[i].max("x"), original.profiles[i].max("x"));
  }
  ASSERT_TRUE(loaded.network);
  expect_same_network(*original.network, *loaded.network);
  // The omitted optional input stays omitted, and lookups by name work on the loaded graph.
  EXPECT_EQ(loaded.network->find_layer("conv")->input(2), nullptr);
  EXPECT_EQ(loaded.network->find_tensor("conv_out")->consumers().size(), 1u);
}

// LAUNCH: the tactics for plain launches that differ, written only when there are some.
TEST(EngineFormat, LaunchTacticsRoundTripAndAreChecked) {
  EngineData data = make_rich_engine();
  const std::vector<uint8_t> plain = engine_serialize(data);
  EXPECT_TRUE(engine_deserialize(plain.data(), plain.size(), "plain").launch_tactics.empty());
  ASSERT_FALSE(data.tactics.empty());
  const std::string layer = data.tactics.begin()->first;
  data.launch_tactics[layer] = data.tactics.begin()->second + "_cheap_launch";
  const std::vector<uint8_t> bytes = engine_serialize(data);
  EXPECT_EQ(load_u32_at(bytes, 48), load_u32_at(plain, 48) + 1) << "one more section";
  const EngineData loaded = engine_deserialize(bytes.data(), bytes.size(), "launch");
  EXPECT_EQ(loaded.launch_tactics, data.launch_tactics);
  EXPECT_EQ(loaded.tactics, data.tactics);
  // A launch tactic for a layer without a tactic, or equal to it, is a malformed file.
  for (const auto& [name, tactic] : std::vector<std::pair<std::string, std::string>>{
           {"no_such_layer", "x"}, {layer, data.tactics.begin()->second}}) {
    EngineData bad = make_rich_engine();
    bad.launch_tactics[name] = tactic;
    const std::vector<uint8_t> b = engine_serialize(bad);
    try {
      (void)engine_deserialize(b.data(), b.size(), "bad.engine");
      ADD_FAILURE() << "accepted a launch tactic for '" << name << "'";
    } catch (const EngineFormatError& e) {
      EXPECT_NE(std::string(e.what()).find("LAUNCH section"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(EngineFormat, HeaderFieldsAndWeightAlignment) {
  const EngineData data = make_rich_engine();
  const std::vector<uint8_t> bytes = engine_serialize(data);
  ASSERT_GT(bytes.size(), 64u);
  EXPECT_EQ(std::memcmp(bytes.data(), "KILNENG\0", 8), 0);
  EXPECT_EQ(get_u32(bytes, 8), 1u);    // format version
  EXPECT_EQ(get_u32(bytes, 12), 64u);  // header size
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data() + 16)), version());
  EXPECT_EQ(get_u64(bytes, 32), bytes.size() - 64);
  EXPECT_EQ(get_u64(bytes, 40), engine_checksum(bytes.data() + 64, bytes.size() - 64));
  EXPECT_EQ(get_u32(bytes, 48), 5u);
  // The constant's weights appear verbatim at a 64-byte aligned file offset.
  const HostTensor& w = data.network->find_layer("weights")->attrs().get_tensor("value");
  const auto* wb = static_cast<const uint8_t*>(w.data());
  auto it = std::search(bytes.begin(), bytes.end(), wb, wb + w.nbytes());
  ASSERT_NE(it, bytes.end());
  EXPECT_EQ((it - bytes.begin()) % 64, 0);
}

TEST(EngineFormat, Deterministic) {
  const std::vector<uint8_t> a = engine_serialize(make_rich_engine());
  const std::vector<uint8_t> b = engine_serialize(make_rich_engine());
  EXPECT_EQ(a, b);
  const EngineData loaded = engine_deserialize(a.data(), a.size(), "a");
  EXPECT_EQ(engine_serialize(loaded), a);
  // A clone of the network (shared constant storage) encodes the same.
  EngineData cloned = make_rich_engine();
  cloned.network = cloned.network->clone();
  EXPECT_EQ(engine_serialize(cloned), a);
}

TEST(EngineFormat, HandEncodedEngineMatchesTheDocumentation) {
  const std::vector<uint8_t> file = container(tiny_sections());
  const EngineData loaded = engine_deserialize(file.data(), file.size(), "hand");
  ASSERT_EQ(loaded.network->num_layers(), 1);
  EXPECT_EQ(loaded.network->layer(0)->type(), kLayerIdentity);
  EXPECT_EQ(loaded.network->output(0)->name(), "y");

  EngineData d;
  d.network = std::make_unique<Network>();
  Tensor* x = d.network->add_input("x", DataType::kFloat32, Dims{2});
  Layer* l = d.network->add_layer(kLayerIdentity, {x}, 1, {}, "id");
  l->output(0)->set_name("y");
  l->output(0)->set_dims(Dims{2});
  d.network->mark_output(l->output(0));
  EXPECT_EQ(engine_serialize(d), file);
}

TEST(EngineFormat, TensorAttributeByDocumentedReference) {
  std::vector<uint8_t> weights(64, 0xee);
  const float values[2] = {1.5f, -2.25f};
  weights.resize(72);
  std::memcpy(weights.data() + 64, values, 8);
  auto attr = [](uint64_t offset, uint64_t size, std::initializer_list<int64_t> dims) {
    Blob a;
    a.u32(1).str("t").str("tensor").u8(1).str("float32").dims(dims).u64(offset).u64(size);
    return a;
  };
  {
    const auto file = container(tiny_sections("float32", attr(64, 8, {2}), weights));
    const EngineData d = engine_deserialize(file.data(), file.size(), "ok");
    const HostTensor& t = d.network->layer(0)->attrs().get_tensor("t");
    EXPECT_EQ(t.dims(), (Dims{2}));
    EXPECT_EQ(t.as<float>()[0], 1.5f);
    EXPECT_EQ(t.as<float>()[1], -2.25f);
  }
  EXPECT_NE(load_error(container(tiny_sections("float32", attr(128, 8, {2}), weights))).find("outside the WEIGHTS"),
            std::string::npos);
  EXPECT_NE(load_error(container(tiny_sections("float32", attr(64, 12, {3}), weights))).find("outside the WEIGHTS"),
            std::string::npos);
  EXPECT_NE(load_error(container(tiny_sections("float32", attr(64, 4, {2}), weights))).find("needs 8"),
            std::string::npos);
  EXPECT_NE(load_error(container(tiny_sections("float32", attr(8, 8, {2}), weights))).find("aligned"),
            std::string::npos);
  EXPECT_NE(
      load_error(container(tiny_sections("float32", attr(0xffffffffffffffc0ull, 8, {2}), weights))).find("outside"),
      std::string::npos);
  EXPECT_NE(
      load_error(container(tiny_sections("float32", attr(0, 8, {1ll << 62, 1ll << 62}), weights))).find("overflow"),
      std::string::npos);
}

TEST(EngineFormat, MalformedContentErrors) {
  struct Case {
    const char* name;
    std::vector<uint8_t> file;
    const char* expect;
  };
  std::vector<Case> cases;
  cases.push_back({"unknown data type", container(tiny_sections("float33")), "unknown data type 'float33'"});
  cases.push_back({"data type alias", container(tiny_sections("fp32")), "canonical"});
  {
    auto s = tiny_sections();
    s[1].bytes = Blob().u32(1).str("x").str("float32").str("linear").dims({1, 1, 1, 1, 1, 1, 1, 1, 1}).b;
    cases.push_back({"rank 9", container(s), "rank 9"});
    s[1].bytes = Blob().u32(1).str("x").str("float32").str("linear").dims({2, -2}).b;
    cases.push_back({"negative extent", container(s), "extent -2"});
    s[1].bytes = Blob().u32(0xffffffffu).b;
    cases.push_back({"huge count", container(s), "bytes are left"});
    s[1].bytes = Blob().u32(0).u32(0).u32(0).u8(0).b;
    cases.push_back({"trailing bytes", container(s), "unexpected bytes"});
    s[1].bytes = Blob().u32(1).str("x").u32(100).u64(0).b;  // a 100-byte type name, 8 bytes left
    cases.push_back({"truncated section", container(s), "truncated"});
    s[1].bytes = Blob().u32(1).str("x").b;
    cases.push_back({"count beyond the data", container(s), "bytes are left"});
  }
  cases.push_back({"unknown attribute kind",
                   container(tiny_sections("float32", Blob().u32(1).str("a").str("complex").u8(0))),
                   "unknown kind 'complex'"});
  cases.push_back(
      {"unsorted attributes",
       container(tiny_sections("float32", Blob().u32(2).str("b").str("int").u64(1).str("a").str("int").u64(2))),
       "strictly increasing"});
  cases.push_back(
      {"bad bool", container(tiny_sections("float32", Blob().u32(1).str("t").str("tensor").u8(7))), "expected 0 or 1"});
  {
    auto s = tiny_sections();
    s.pop_back();
    cases.push_back({"missing section", container(s), "required section WEIGHTS is missing"});
    s = tiny_sections();
    s[4].id = "WEIGHTZ";
    cases.push_back({"unknown section", container(s), "unknown section 'WEIGHTZ'"});
    s = tiny_sections();
    s[4].id = "META";
    cases.push_back({"duplicate section", container(s), "appears twice"});
    s = tiny_sections();
    s[0].bytes = Blob().str("tpu").u64(0).u32(0).u32(0).u32(0).b;
    cases.push_back({"unknown device", container(s), "unknown device 'tpu'"});
    s = tiny_sections();
    s[2].bytes = Blob().u32(1).u32(1).str("nope").dims({1}).dims({1}).dims({1}).b;
    cases.push_back({"profile for unknown input", container(s), "not a network input"});
    s[2].bytes = Blob().u32(1).u32(1).str("x").dims({3}).dims({2}).dims({4}).b;
    cases.push_back({"profile min > opt", container(s), "min <= opt <= max"});
    s = tiny_sections();
    s[1].bytes = Blob().u32(0).u32(1).str("id").str("NoSuchLayer").u8(0).u32(0).u32(0).u32(0).u32(0).b;
    cases.push_back({"unknown layer type", container(s), "unknown layer type 'NoSuchLayer'"});
    s[1].bytes = Blob().u32(0).u32(1).str("id").str("Identity").u8(0).u32(1).str("ghost").u32(0).u32(0).u32(0).b;
    cases.push_back({"dangling input", container(s), "reads tensor 'ghost'"});
    s[1].bytes = Blob().u32(1).str("x").str("float32").str("linear").dims({2}).u32(0).u32(1).str("y").b;
    cases.push_back({"unknown network output", container(s), "network output 'y'"});
  }
  for (const auto& c : cases) {
    const std::string err = load_error(c.file, "case.engine");
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": got '" << err << "'";
    EXPECT_NE(err.find("case.engine"), std::string::npos) << c.name << ": the error must name the source";
  }
}

TEST(EngineFormat, HeaderErrorsSayWhatIsWrong) {
  const std::vector<uint8_t> good = container(tiny_sections());
  ASSERT_EQ(load_error(good), "");

  EXPECT_NE(load_error({}, "empty.engine").find("empty.engine"), std::string::npos);
  EXPECT_NE(load_error({'K', 'I'}).find("too small"), std::string::npos);
  std::vector<uint8_t> onnx_like = {0x08, 0x07, 0x12, 0x04, 'k', 'i', 'l', 'n', 0, 0};
  EXPECT_NE(load_error(onnx_like).find("not a kiln engine file (magic"), std::string::npos);

  auto v2 = good;
  v2[8] = 2;
  const std::string verr = load_error(v2);
  EXPECT_NE(verr.find("format version 2"), std::string::npos) << verr;
  EXPECT_NE(verr.find("reads format version 1"), std::string::npos) << verr;
  EXPECT_NE(verr.find("rebuild"), std::string::npos) << verr;

  std::vector<uint8_t> cut(good.begin(), good.end() - 10);
  const std::string terr = load_error(cut);
  EXPECT_NE(terr.find("truncated"), std::string::npos) << terr;
  EXPECT_NE(terr.find(std::to_string(good.size() - 64)), std::string::npos) << terr;  // expected payload
  EXPECT_NE(terr.find(std::to_string(good.size() - 74)), std::string::npos) << terr;  // actual

  auto extra = good;
  extra.push_back(0);
  EXPECT_NE(load_error(extra).find("trailing"), std::string::npos);

  auto flipped = good;
  flipped[good.size() - 3] ^= 0x10;
  EXPECT_NE(load_error(flipped).find("corrupted"), std::string::npos);

  // Table problems behind a valid checksum.
  auto oob = good;
  put_u64(oob, 64 + 4 * 24 + 16, 1ull << 40);  // WEIGHTS size
  fix_checksum(oob);
  EXPECT_NE(load_error(oob).find("outside the"), std::string::npos);
  auto overlap = good;
  put_u64(overlap, 64 + 1 * 24 + 8, get_u64(good, 64 + 8));  // GRAPH at META's offset
  fix_checksum(overlap);
  EXPECT_NE(load_error(overlap).find("overlaps"), std::string::npos) << load_error(overlap);
  auto into_table = good;
  put_u64(into_table, 64 + 8, 16);  // META inside the table
  fix_checksum(into_table);
  EXPECT_NE(load_error(into_table).find("overlaps the section table"), std::string::npos);
  auto count = good;
  count[48] = 200;
  EXPECT_NE(load_error(count).find("section count 200"), std::string::npos);
}

// ---- sweeps -------------------------------------------------------------------------------
std::vector<uint8_t> small_engine_bytes() {
  EngineData d;
  d.network = std::make_unique<Network>();
  Tensor* x = d.network->add_input("x", DataType::kFloat32, Dims{kDynamic, 4});
  Layer* c = d.network->add_constant(float_tensor(Dims{4}, 0.5f, 1.0f), "bias");
  Layer* add = d.network->add_elementwise(x, c->output(0), ElementWiseOp::kSum);
  add->set_name("add");
  add->output(0)->set_dims(Dims{kDynamic, 4});
  d.network->mark_output(add->output(0));
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 4}, Dims{2, 4}, Dims{4, 4});
  d.profiles = {p};
  d.activation_peak_bytes = {64};
  d.tactics = {{"add", "ref"}};
  d.plugins = {{"P", "1", "", ""}};
  d.build_info = {{"k", "v"}};
  return engine_serialize(d);
}

TEST(EngineFormat, EveryTruncationFails) {
  const std::vector<uint8_t> bytes = small_engine_bytes();
  ASSERT_EQ(load_error(bytes), "");
  const size_t step = bytes.size() / 1500 + 1;
  for (size_t len = 0; len < bytes.size(); len += step) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_NE(load_error(cut), "") << "truncation to " << len << " bytes parsed";
  }
}

TEST(EngineFormat, EveryByteFlipFails) {
  const std::vector<uint8_t> bytes = small_engine_bytes();
  const size_t table_end = 64 + 5 * 24;
  std::vector<size_t> positions;
  for (size_t i = 0; i < table_end; ++i) positions.push_back(i);
  for (size_t i = table_end; i < bytes.size(); i += 3) positions.push_back(i);
  for (size_t pos : positions) {
    for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
      auto bad = bytes;
      bad[pos] ^= mask;
      const std::string err = load_error(bad);
      // A one-bit change of a printable kiln version character may give another valid version
      // string: that field is informational (only the 0xff flip is sure to break it).
      const bool version_char = pos >= 16 && pos < 32 && bytes[pos] != 0 && mask != 0xff;
      if (!version_char) {
        EXPECT_NE(err, "") << "flip " << int(mask) << " at byte " << pos << " parsed";
      }
    }
  }
}

// Changes behind a recomputed checksum reach the section decoders: each must end in a clean
// EngineFormatError or a valid engine, never a crash or another exception.
TEST(EngineFormat, ChecksumFixedCorruptionNeverCrashes) {
  for (const std::vector<uint8_t>& bytes : {small_engine_bytes(), engine_serialize(make_rich_engine())}) {
    const size_t payload = 64;
    std::mt19937 rng(1234);
    int parsed = 0, rejected = 0;
    const size_t step = std::max<size_t>(1, (bytes.size() - payload) / 300);
    for (size_t pos = payload; pos < bytes.size(); pos += step) {
      for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}, static_cast<uint8_t>(rng() | 1)}) {
        auto bad = bytes;
        bad[pos] ^= mask;
        fix_checksum(bad);
        const std::string err = load_error(bad);
        if (err.empty()) {
          ++parsed;
          // A valid parse must re-serialize without trouble.
          const EngineData d = engine_deserialize(bad.data(), bad.size(), "x");
          EXPECT_NO_THROW(engine_serialize(d));
        } else {
          ++rejected;
          EXPECT_NE(err.find("t.engine"), std::string::npos) << err;
        }
      }
    }
    // Random multi-byte damage, including the length fields.
    for (int trial = 0; trial < 200; ++trial) {
      auto bad = bytes;
      for (int k = 0; k < 4; ++k) bad[payload + rng() % (bytes.size() - payload)] = static_cast<uint8_t>(rng());
      fix_checksum(bad);
      if (load_error(bad).empty()) {
        ++parsed;
      } else {
        ++rejected;
      }
    }
    EXPECT_GT(rejected, 100);
    RecordProperty("parsed_" + std::to_string(bytes.size()), parsed);
  }
}

TEST(EngineFormat, SerializeRefusesWhatCannotBeRead) {
  EngineData d;
  EXPECT_THROW(engine_serialize(d), Error);  // no network
  d.network = std::make_unique<Network>();
  Tensor* x = d.network->add_input("x", DataType::kFloat32, Dims{2});
  Layer* a = d.network->add_identity(x);
  a->output(0)->set_name("x");  // duplicate tensor name
  EXPECT_THROW(engine_serialize(d), Error);
}

}  // namespace
}  // namespace kiln
