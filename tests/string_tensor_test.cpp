// String tensors (DataType::kString): HostTensor's string storage, StringNormalizer (through the
// C++ network API and through ONNX models built here with the protobuf API), Cast and Identity on
// strings, who owns output strings (valid after execute, replaced by the next one, never pointing
// into the caller's input), string constants in the engine file, host evaluation (constant
// folding) of string layers, .pb/.npy string files, and the errors for string tensors where kiln
// has none (arithmetic layers, CUDA). Expected values are written out by hand from the ONNX spec
// (StringNormalizer-10, Cast-13) and the Unicode case tables, never taken from kiln's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/runtime.h"
#include "src/core/half.h"
#include "src/core/tensor_io.h"
#include "src/engine/engine_format.h"
#include "src/onnx/onnx_proto.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

std::shared_ptr<Engine> build_cpu(const Network& net, const OptimizationProfile* profile = nullptr) {
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  config.time_tactics = false;
  if (profile) config.profiles.push_back(*profile);
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), "string tensor test network");
}

// Runs one inference with host inputs; returns every output as a HostTensor that owns its data
// (strings copied with from_bytes before the context may reuse its storage).
class Runner {
 public:
  explicit Runner(std::shared_ptr<Engine> engine)
      : engine_(std::move(engine)), ctx_(engine_->create_execution_context()) {}

  // Binds the inputs, runs, and returns raw outputs (StringRefs into the context's storage,
  // valid until the next run).
  std::map<std::string, HostTensor> run_raw(const std::map<std::string, HostTensor>& inputs) {
    for (const auto& [name, value] : inputs) {
      if (engine_->io_tensor(name).dims.is_dynamic()) ctx_->set_input_shape(name, value.dims());
      ctx_->set_tensor_address(name, const_cast<void*>(value.data()));
    }
    std::map<std::string, HostTensor> outs;
    for (const auto& info : engine_->io_tensors()) {
      if (info.mode != TensorIOMode::kOutput) continue;
      outs[info.name] = HostTensor(info.type, ctx_->max_tensor_shape(info.name));
      ctx_->set_tensor_address(info.name, outs[info.name].data());
    }
    ctx_->execute();
    for (auto& [name, t] : outs) {
      const Dims actual = ctx_->tensor_shape(name);
      if (actual != t.dims()) {  // data-dependent: the leading elements
        HostTensor trimmed(t.type(), actual);
        std::memcpy(trimmed.data(), t.data(), trimmed.nbytes());
        t = trimmed;
      }
    }
    return outs;
  }

  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs) {
    auto outs = run_raw(inputs);
    for (auto& [name, t] : outs) t = HostTensor::from_bytes(t.type(), t.dims(), t.data(), t.nbytes());
    return outs;
  }

  Engine& engine() { return *engine_; }

 private:
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ExecutionContext> ctx_;
};

Strings values_of(const HostTensor& t) {
  EXPECT_EQ(t.type(), DataType::kString);
  return t.to_strings();
}

// A network x -> StringNormalizer -> "y".
std::unique_ptr<Network> normalizer_network(const Dims& dims, const std::string& action, bool case_sensitive,
                                            const Strings& stopwords, const std::string& locale = "") {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kString, dims);
  Attributes a;
  a.set("case_change_action", action);
  a.set("is_case_sensitive", int64_t{case_sensitive ? 1 : 0});
  a.set("stopwords", stopwords);
  a.set("locale", locale);
  Layer* l = net->add_layer(kLayerStringNormalizer, {x}, 2, std::move(a), "normalizer");
  l->output(0)->set_name("y");
  net->mark_output(l->output(0));
  return net;
}

struct Normalized {
  Dims dims;
  Strings values;
};

Normalized normalize(const Dims& dims, const Strings& input, const std::string& action, bool case_sensitive,
                     const Strings& stopwords) {
  auto net = normalizer_network(dims, action, case_sensitive, stopwords);
  Runner runner(build_cpu(*net));
  const HostTensor y = runner.run({{"x", HostTensor::from_strings(dims, input)}}).at("y");
  return {y.dims(), values_of(y)};
}

// ---- HostTensor -----------------------------------------------------------------------------------

TEST(StringTensor, TypeNameAndSize) {
  EXPECT_EQ(data_type_size(DataType::kString), sizeof(StringRef));
  EXPECT_STREQ(to_string(DataType::kString), "string");
  EXPECT_EQ(parse_data_type("string"), DataType::kString);
  EXPECT_FALSE(is_floating_point(DataType::kString));
}

TEST(StringTensor, HostTensorOwnsItsCharacters) {
  HostTensor copy;
  {
    std::string word = "temporary";
    HostTensor t(DataType::kString, Dims{3});
    EXPECT_EQ(t.string_at(0), "");  // zero-initialized elements are empty strings
    t.set_string(0, word);
    t.set_string(2, std::string(100000, 'z'));  // longer than one arena chunk
    word.assign("XXXXXXXXX");                   // the tensor holds a copy
    copy = t;                                   // shares storage and characters
  }
  EXPECT_EQ(copy.string_at(0), "temporary");
  EXPECT_EQ(copy.string_at(1), "");
  EXPECT_EQ(copy.string_at(2), std::string(100000, 'z'));

  HostTensor deep = copy.clone();
  deep.set_string(0, "changed");
  EXPECT_EQ(copy.string_at(0), "temporary");
  EXPECT_EQ(deep.string_at(0), "changed");
  EXPECT_EQ(deep.string_at(2).size(), 100000u);

  const HostTensor r = copy.reshaped(Dims{1, 3});
  EXPECT_EQ(r.string_at(0), "temporary");

  EXPECT_THROW((void)copy.string_at(3), Error);
  EXPECT_THROW((void)copy.to_double(), Error);
  EXPECT_THROW((void)copy.to_int64(), Error);
  HostTensor numbers(DataType::kFloat32, Dims{2});
  EXPECT_THROW(numbers.set_string(0, "x"), Error);
  EXPECT_THROW((void)HostTensor::from_strings(Dims{2}, {"only one"}), Error);
}

TEST(StringTensor, FromBytesCopiesTheCharacters) {
  std::string a = "alpha", b = "\xce\xb2\xce\xb7\xcf\x84\xce\xb1";  // "βητα"
  const StringRef refs[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  const HostTensor t = HostTensor::from_bytes(DataType::kString, Dims{2}, refs, sizeof refs);
  a[0] = 'A';
  b.clear();
  EXPECT_EQ(t.to_strings(), (Strings{"alpha", "\xce\xb2\xce\xb7\xcf\x84\xce\xb1"}));
}

// ---- StringNormalizer through the C++ API ----------------------------------------------------------

TEST(StringNormalizer, CaseActions) {
  // Latin-1, Latin Extended-A, Greek and Cyrillic letters, ASCII punctuation and digits.
  const Strings input = {"Monday",
                         "\xc3\x89"
                         "cole",  // "École"
                         "\xc5\x81\xc3\xb3"
                         "d\xc5\xba",                                                 // "Łódź"
                         "\xce\xa3\xce\xaf\xcf\x83\xcf\x85\xcf\x86\xce\xbf\xcf\x82",  // "Σίσυφος"
                         "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",          // "Привет"
                         "a1-b2"};
  const Dims dims{6};
  EXPECT_EQ(normalize(dims, input, "NONE", true, {}).values, input);
  const Strings lower = {"monday",
                         "\xc3\xa9"
                         "cole",  // "école"
                         "\xc5\x82\xc3\xb3"
                         "d\xc5\xba",                                                 // "łódź"
                         "\xcf\x83\xce\xaf\xcf\x83\xcf\x85\xcf\x86\xce\xbf\xcf\x82",  // "σίσυφος"
                         "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",          // "привет"
                         "a1-b2"};
  EXPECT_EQ(normalize(dims, input, "LOWER", true, {}).values, lower);
  const Strings upper = {"MONDAY",
                         "\xc3\x89"
                         "COLE",  // "ÉCOLE"
                         "\xc5\x81\xc3\x93"
                         "D\xc5\xb9",                                                 // "ŁÓDŹ"
                         "\xce\xa3\xce\x8a\xce\xa3\xce\xa5\xce\xa6\xce\x9f\xce\xa3",  // "ΣΊΣΥΦΟΣ"
                         "\xd0\x9f\xd0\xa0\xd0\x98\xd0\x92\xd0\x95\xd0\xa2",          // "ПРИВЕТ"
                         "A1-B2"};
  const Normalized up = normalize(dims, input, "UPPER", true, {});
  EXPECT_EQ(up.values, upper);
  EXPECT_EQ(up.dims, (Dims{6}));
}

TEST(StringNormalizer, SimpleCaseMappingKeepsSharpSAndInvalidBytes) {
  // Unicode simple mappings: ß has no one-letter upper case; ÿ -> Ÿ (U+0178); µ -> Μ (U+039C).
  // Bytes that are not UTF-8 stay as they are.
  const Strings input = {
      "stra\xc3\x9f"
      "e",
      "\xc3\xbf", "\xc2\xb5",
      "\xff"
      "abc\xc3"};
  const Strings upper = {
      "STRA\xc3\x9f"
      "E",
      "\xc5\xb8", "\xce\x9c",
      "\xff"
      "ABC\xc3"};
  EXPECT_EQ(normalize(Dims{4}, input, "UPPER", true, {}).values, upper);
}

TEST(StringNormalizer, TitlecaseDigraphsDottedIAndAstralLetters) {
  // UnicodeData.txt: U+01C5 (Dž) upper U+01C4, lower U+01C6; U+0130 (İ) lower U+0069 (simple
  // mapping); U+10428 (Deseret small long i) upper U+10400.
  const Strings input = {"\xc7\x85", "\xc4\xb0", "\xf0\x90\x90\xa8"};
  EXPECT_EQ(normalize(Dims{3}, input, "UPPER", true, {}).values, (Strings{"\xc7\x84", "\xc4\xb0", "\xf0\x90\x90\x80"}));
  EXPECT_EQ(normalize(Dims{3}, input, "LOWER", true, {}).values, (Strings{"\xc7\x86", "i", "\xf0\x90\x90\xa8"}));
  // Caseless matching: "Dž" matches "DŽ" and "dž"; dotless i (U+0131) does not match "I" or "i".
  EXPECT_EQ(normalize(Dims{4}, {"\xc7\x86", "\xc4\xb1", "I", "x"}, "NONE", false, {"\xc7\x85", "\xc4\xb1"}).values,
            (Strings{"I", "x"}));
}

TEST(StringNormalizer, CaseSensitiveAndInsensitiveStopwords) {
  const Strings input = {"Monday", "monday", "tuesday", "MONDAY", "wednesday"};
  // Case-sensitive: only the exact word goes; the case change applies afterwards.
  EXPECT_EQ(normalize(Dims{5}, input, "NONE", true, {"monday"}).values,
            (Strings{"Monday", "tuesday", "MONDAY", "wednesday"}));
  EXPECT_EQ(normalize(Dims{5}, input, "LOWER", true, {"monday"}).values,
            (Strings{"monday", "tuesday", "monday", "wednesday"}));
  // Case-insensitive: every spelling goes, and stopwords in any case match.
  const Normalized n = normalize(Dims{5}, input, "UPPER", false, {"MoNdAy", "wednesday"});
  EXPECT_EQ(n.values, (Strings{"TUESDAY"}));
  EXPECT_EQ(n.dims, (Dims{1}));
  // Non-ASCII case folding: "ÉTÉ" matches "été"; final sigma matches sigma ("ΟΔΟΣ" vs "οδος").
  EXPECT_EQ(normalize(Dims{3}, {"\xc3\xa9t\xc3\xa9", "\xce\xbf\xce\xb4\xce\xbf\xcf\x82", "rest"}, "NONE", false,
                      {"\xc3\x89T\xc3\x89", "\xce\x9f\xce\x94\xce\x9f\xce\xa3"})
                .values,
            (Strings{"rest"}));
}

TEST(StringNormalizer, TwoDimensionalInputKeepsTheLeadingOne) {
  const Normalized n = normalize(Dims{1, 6}, {"Monday", "tuesday", "wednesday", "Monday", "tuesday", "wednesday"},
                                 "UPPER", false, {"monday"});
  EXPECT_EQ(n.dims, (Dims{1, 4}));
  EXPECT_EQ(n.values, (Strings{"TUESDAY", "WEDNESDAY", "TUESDAY", "WEDNESDAY"}));
}

TEST(StringNormalizer, EverythingRemovedGivesOneEmptyString) {
  Normalized n = normalize(Dims{2}, {"monday", "monday"}, "UPPER", true, {"monday"});
  EXPECT_EQ(n.dims, (Dims{1}));
  EXPECT_EQ(n.values, (Strings{""}));
  n = normalize(Dims{1, 3}, {"a", "B", "a"}, "NONE", false, {"b", "A"});
  EXPECT_EQ(n.dims, (Dims{1, 1}));
  EXPECT_EQ(n.values, (Strings{""}));
}

TEST(StringNormalizer, EmptyStringsAreWordsLikeOthers) {
  EXPECT_EQ(normalize(Dims{4}, {"", "a", "", "b"}, "UPPER", true, {"a"}).values, (Strings{"", "", "B"}));
  EXPECT_EQ(normalize(Dims{4}, {"", "a", "", "b"}, "NONE", true, {""}).values, (Strings{"a", "b"}));
}

TEST(StringNormalizer, DynamicLengthAndOutputsOwnedByTheContext) {
  auto net = normalizer_network(Dims{kDynamic}, "LOWER", false, {"stop"});
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1}, Dims{4}, Dims{8});
  Runner runner(build_cpu(*net, &profile));
  EXPECT_EQ(runner.engine().io_tensor("y").dims, (Dims{kDynamic}));

  // The caller's input characters change after the first inference: the outputs must not point
  // into them.
  std::vector<std::string> words = {"One", "STOP", "Two", "three"};
  HostTensor x(DataType::kString, Dims{4});
  for (int i = 0; i < 4; ++i)
    x.as<StringRef>()[i] = StringRef{words[static_cast<size_t>(i)].data(), words[static_cast<size_t>(i)].size()};
  auto first = runner.run_raw({{"x", x}});
  for (auto& w : words) w.assign(w.size(), '#');
  EXPECT_EQ(first.at("y").to_strings(), (Strings{"one", "two", "three"}));
  const HostTensor kept =
      HostTensor::from_bytes(DataType::kString, first.at("y").dims(), first.at("y").data(), first.at("y").nbytes());

  // A second inference of another length on the same context: new strings; the copy keeps the old.
  const auto second = runner.run({{"x", HostTensor::from_strings(Dims{6}, {"A", "stop", "B", "Stop", "C", "D"})}});
  EXPECT_EQ(second.at("y").dims(), (Dims{4}));
  EXPECT_EQ(second.at("y").to_strings(), (Strings{"a", "b", "c", "d"}));
  EXPECT_EQ(kept.to_strings(), (Strings{"one", "two", "three"}));

  // Many inferences, some with strings longer than the context's usual storage chunk.
  for (int round = 0; round < 50; ++round) {
    const std::string big(round % 2 ? 70000 + round : 5 + round, static_cast<char>('A' + round % 26));
    const auto out = runner.run({{"x", HostTensor::from_strings(Dims{2}, {big, "STOP"})}});
    ASSERT_EQ(out.at("y").to_strings(), (Strings{std::string(big.size(), static_cast<char>('a' + round % 26))}));
  }
}

TEST(StringNormalizer, EngineRoundTripWithStringConstants) {
  // y = StringNormalizer(x); z = a string constant (a network output the engine file stores).
  auto net = normalizer_network(Dims{3}, "UPPER", true, {"skip"});
  const std::string with_nul("with\0nul", 8);
  Layer* c = net->add_constant(HostTensor::from_strings(Dims{2, 2}, {"", "\xe2\x82\xac", with_nul, "end"}), "consts");
  c->output(0)->set_name("z");
  net->mark_output(c->output(0));
  BuilderConfig config;
  config.time_tactics = false;
  const auto bytes = Builder().build_serialized(*net, config);
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "round trip");
    EXPECT_EQ(engine->io_tensor("z").type, DataType::kString);
    Runner runner(engine);
    const auto out = runner.run({{"x", HostTensor::from_strings(Dims{3}, {"keep", "skip", "b\xc3\xa4r"})}});
    EXPECT_EQ(out.at("y").to_strings(), (Strings{"KEEP", "B\xc3\x84R"}));
    EXPECT_EQ(out.at("z").dims(), (Dims{2, 2}));
    EXPECT_EQ(out.at("z").to_strings(), (Strings{"", "\xe2\x82\xac", with_nul, "end"}));
  }
}

TEST(StringNormalizer, CorruptStringConstantsAreRejected) {
  // An engine whose only weights are one string constant; its length prefix is then corrupted
  // behind a recomputed checksum, so that the WEIGHTS checks of the GRAPH decoder see it.
  Network net;
  Tensor* x = net.add_input("x", DataType::kString, Dims{1});
  net.mark_output(net.add_identity(x)->output(0));
  Layer* c = net.add_constant(HostTensor::from_strings(Dims{2}, {"head", "UNIQUEMARKER"}), "consts");
  net.mark_output(c->output(0));
  BuilderConfig config;
  config.time_tactics = false;
  const auto good = Builder().build_serialized(net, config);
  const std::string marker = "UNIQUEMARKER";
  const auto at = std::search(good.begin(), good.end(), marker.begin(), marker.end());
  ASSERT_NE(at, good.end());
  const size_t prefix = static_cast<size_t>(at - good.begin()) - 8;
  uint64_t length = 0;
  std::memcpy(&length, good.data() + prefix, 8);
  ASSERT_EQ(length, marker.size());  // the documented layout: u64 length, then the bytes
  auto load_error = [&](uint64_t corrupt_length) {
    std::vector<uint8_t> bad = good;
    std::memcpy(bad.data() + prefix, &corrupt_length, 8);
    const uint64_t sum = engine_checksum(bad.data() + 64, bad.size() - 64);
    std::memcpy(bad.data() + 40, &sum, 8);
    try {
      (void)Runtime().deserialize(bad.data(), bad.size(), "corrupt");
    } catch (const EngineFormatError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string msg = load_error(1000);
  EXPECT_NE(msg.find("string element 1 has length 1000"), std::string::npos) << msg;
  msg = load_error(marker.size() - 1);  // the last element leaves one byte of the blob unused
  EXPECT_NE(msg.find("follow the last string element"), std::string::npos) << msg;
  EXPECT_NO_THROW((void)Runtime().deserialize(good.data(), good.size(), "good"));
}

TEST(StringNormalizer, ConstantInputIsFoldedOnTheHost) {
  // The whole network is constant: the builder evaluates StringNormalizer (and the Cast) on the
  // host, and the engine stores the resulting strings as constants.
  Network net;
  Layer* c = net.add_constant(HostTensor::from_strings(Dims{1, 4}, {"x", "Drop", "y", "drop"}), "words");
  Attributes a;
  a.set("case_change_action", std::string("UPPER"));
  a.set("stopwords", Strings{"drop"});
  Layer* n = net.add_layer(kLayerStringNormalizer, {c->output(0)}, 2, std::move(a), "normalizer");
  n->output(0)->set_name("y");
  net.mark_output(n->output(0));
  Layer* f =
      net.add_constant(HostTensor::from_vector<float>(DataType::kFloat32, Dims{2}, std::vector<float>{0.25f, 3.0f}));
  Layer* s = net.add_cast(f->output(0), DataType::kString);
  s->output(0)->set_name("s");
  net.mark_output(s->output(0));
  Runner runner(build_cpu(net));
  const auto out = runner.run({});
  EXPECT_EQ(out.at("y").dims(), (Dims{1, 2}));
  EXPECT_EQ(out.at("y").to_strings(), (Strings{"X", "Y"}));
  EXPECT_EQ(out.at("s").to_strings(), (Strings{"0.25", "3.0"}));
}

// ---- errors -------------------------------------------------------------------------------------------

std::string build_error(const Network& net, DeviceType device) {
  BuilderConfig config;
  config.device = device;
  config.time_tactics = false;
  try {
    (void)Builder().build_serialized(net, config);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the build succeeded";
  return "";
}

TEST(StringTensorErrors, ArithmeticOnStringsNamesTheLayer) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kString, Dims{3});
  Layer* add = net.add_elementwise(x, x, ElementWiseOp::kSum);
  add->set_name("adder");
  net.mark_output(add->output(0));
  const std::string msg = build_error(net, DeviceType::kCPU);
  EXPECT_NE(msg.find("layer 'adder' (ElementWise)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("string tensors are supported only by"), std::string::npos) << msg;
  EXPECT_NE(msg.find("StringNormalizer"), std::string::npos) << msg;
}

TEST(StringTensorErrors, CudaRejectsStringTensors) {
  auto net = normalizer_network(Dims{3}, "NONE", true, {});
  const std::string msg = build_error(*net, DeviceType::kCUDA);
  EXPECT_NE(msg.find("string tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CPU only"), std::string::npos) << msg;
}

TEST(StringTensorErrors, BadAttributesAndInputs) {
  // Attribute values fail when the layer is created (StringNormalizerParams), input dims at build.
  const auto creation_error = [](const std::string& action, const std::string& locale) {
    try {
      (void)normalizer_network(Dims{3}, action, true, {}, locale);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "the layer was created";
    return std::string();
  };
  std::string msg = creation_error("TITLE", "");
  EXPECT_NE(msg.find("layer 'normalizer' (StringNormalizer): attribute 'case_change_action' is \"TITLE\"; allowed "
                     "values: \"NONE\", \"LOWER\", \"UPPER\""),
            std::string::npos)
      << msg;
  msg = creation_error("UPPER", "tr_TR");
  EXPECT_NE(msg.find("layer 'normalizer' (StringNormalizer)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("special casing"), std::string::npos) << msg;
  msg = creation_error("UPPER", "not a locale!");
  EXPECT_NE(msg.find("locale"), std::string::npos) << msg;
  msg = build_error(*normalizer_network(Dims{2, 3}, "UPPER", true, {}), DeviceType::kCPU);
  EXPECT_NE(msg.find("[C] or [1, C]"), std::string::npos) << msg;
  // Accepted locales build.
  for (const char* locale : {"", "en_US", "de_DE.UTF-8", "C", "fr"}) {
    EXPECT_NO_THROW(build_cpu(*normalizer_network(Dims{3}, "UPPER", true, {}, locale))) << locale;
  }
  Network net;
  Tensor* f = net.add_input("f", DataType::kFloat32, Dims{3});
  Attributes a;
  Layer* l = net.add_layer(kLayerStringNormalizer, {f}, 2, std::move(a), "sn");
  net.mark_output(l->output(0));
  msg = build_error(net, DeviceType::kCPU);
  EXPECT_NE(msg.find("takes a string tensor"), std::string::npos) << msg;
}

// ---- Cast and Identity ----------------------------------------------------------------------------------

HostTensor cast_run(const HostTensor& x, DataType to) {
  Network net;
  Tensor* in = net.add_input("x", x.type(), x.dims());
  Layer* c = net.add_cast(in, to);
  c->output(0)->set_name("y");
  net.mark_output(c->output(0));
  Runner runner(build_cpu(net));
  return runner.run({{"x", x}}).at("y");
}

TEST(StringCast, FloatToString) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {0.5f,      0.039187793f, 1.0f,   -2.25f,      1e-5f, 1e20f,         0.1f, 0.0f, -0.0f,
                                123456.0f, 1e7f,         1.5e8f, 16777216.0f, 1e-4f, std::nanf(""), inf,  -inf};
  const HostTensor y = cast_run(HostTensor::from_vector(DataType::kFloat32, Dims{17}, v), DataType::kString);
  // numpy's str() of each float32 (shortest digits that read back; positional for
  // 1e-4 <= |x| < 1e6, else scientific; float32(1e-4) is just below 1e-4) and ONNX's special
  // literals.
  EXPECT_EQ(y.to_strings(), (Strings{"0.5", "0.039187793", "1.0", "-2.25", "1e-05", "1e+20", "0.1", "0.0", "-0.0",
                                     "123456.0", "1e+07", "1.5e+08", "1.6777216e+07", "1e-04", "NaN", "INF", "-INF"}));
}

TEST(StringCast, OtherTypesToString) {
  EXPECT_EQ(
      cast_run(HostTensor::from_vector(DataType::kFloat64, Dims{4}, std::vector<double>{0.1, 1.0 / 3, 1e15, 1e16}),
               DataType::kString)
          .to_strings(),
      (Strings{"0.1", "0.3333333333333333", "1000000000000000.0", "1e+16"}));
  EXPECT_EQ(cast_run(HostTensor::from_vector(DataType::kInt32, Dims{3}, std::vector<int32_t>{-5, 0, 2147483647}),
                     DataType::kString)
                .to_strings(),
            (Strings{"-5", "0", "2147483647"}));
  EXPECT_EQ(cast_run(HostTensor::from_vector(DataType::kInt8, Dims{2}, std::vector<int8_t>{-128, 7}), DataType::kString)
                .to_strings(),
            (Strings{"-128", "7"}));
  EXPECT_EQ(cast_run(HostTensor::from_vector(DataType::kBool, Dims{2}, std::vector<uint8_t>{1, 0}), DataType::kString)
                .to_strings(),
            (Strings{"True", "False"}));
  // float16: the shortest digits that read back to the same half (0.1 is 0.0999755859375 in
  // half; 65504 reads back from 6.55e+04), positional below 1e3 as numpy.
  const std::vector<half> h = {half(0.1f), half(1.0f), half(65504.0f), half(-0.5f), half(999.0f), half(1024.0f)};
  EXPECT_EQ(cast_run(HostTensor::from_vector(DataType::kFloat16, Dims{6}, h), DataType::kString).to_strings(),
            (Strings{"0.1", "1.0", "6.55e+04", "-0.5", "999.0", "1.024e+03"}));
}

TEST(StringCast, StringToNumbers) {
  const HostTensor x =
      HostTensor::from_strings(Dims{3, 3}, {"3.14", "-1e-5", "1E8", " 42 ", "NaN", "INF", "+INF", "-inf", "100.5"});
  const HostTensor f = cast_run(x, DataType::kFloat32);
  const float* p = f.as<float>();
  EXPECT_EQ(p[0], 3.14f);
  EXPECT_EQ(p[1], -1e-5f);
  EXPECT_EQ(p[2], 1e8f);
  EXPECT_EQ(p[3], 42.0f);
  EXPECT_TRUE(std::isnan(p[4]));
  EXPECT_EQ(p[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(p[6], std::numeric_limits<float>::infinity());
  EXPECT_EQ(p[7], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(p[8], 100.5f);
  const HostTensor d = cast_run(HostTensor::from_strings(Dims{2}, {"0.1", "1e300"}), DataType::kFloat64);
  EXPECT_EQ(d.as<double>()[0], 0.1);
  EXPECT_EQ(d.as<double>()[1], 1e300);
  // Integers: exact when the text is one, else truncated toward zero (the spec's "100.5" -> 100).
  const HostTensor i =
      cast_run(HostTensor::from_strings(Dims{4}, {"100.5", "-7", "12345678901234", "+3"}), DataType::kInt64);
  EXPECT_EQ(i.to_int64(), (std::vector<int64_t>{100, -7, 12345678901234, 3}));
  const HostTensor b = cast_run(HostTensor::from_strings(Dims{4}, {"True", "false", "0", "2.5"}), DataType::kBool);
  EXPECT_EQ(b.to_int64(), (std::vector<int64_t>{1, 0, 0, 1}));
}

TEST(StringCast, TextThatIsNoNumberIsAnError) {
  try {
    (void)cast_run(HostTensor::from_strings(Dims{2}, {"1.5", "Hello World!"}), DataType::kFloat32);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("string element 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Hello World!"), std::string::npos) << msg;
  }
}

TEST(StringCast, RoundTripThroughText) {
  // float -> string -> float gives the same values back (shortest round-trip digits).
  std::vector<float> v;
  for (int k = 0; k < 200; ++k)
    v.push_back(std::ldexp(1.0f + static_cast<float>(k) / 199.0f, k % 60 - 30) * (k % 3 ? 1.0f : -1.0f));
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{200});
  Tensor* s = net.add_cast(x, DataType::kString)->output(0);
  Tensor* same = net.add_identity(s)->output(0);
  Layer* back = net.add_cast(same, DataType::kFloat32);
  back->output(0)->set_name("y");
  net.mark_output(back->output(0));
  Runner runner(build_cpu(net));
  const HostTensor y = runner.run({{"x", HostTensor::from_vector(DataType::kFloat32, Dims{200}, v)}}).at("y");
  for (size_t k = 0; k < v.size(); ++k) EXPECT_EQ(y.as<float>()[k], v[k]) << k;
}

// ---- through ONNX -------------------------------------------------------------------------------------------

class OnnxModel {
 public:
  explicit OnnxModel(int64_t opset) {
    proto_.set_ir_version(8);
    proto_.add_opset_import()->set_version(opset);
    proto_.mutable_graph()->set_name("g");
  }
  void input(const std::string& name, int32_t type, const std::vector<int64_t>& dims) {
    auto* t = add_value(proto_.mutable_graph()->add_input(), name, type);
    auto* shape = t->mutable_shape();
    for (int64_t d : dims) {
      if (d < 0)
        shape->add_dim()->set_dim_param("n");
      else
        shape->add_dim()->set_dim_value(d);
    }
  }
  void output(const std::string& name, int32_t type) { add_value(proto_.mutable_graph()->add_output(), name, type); }
  void string_initializer(const std::string& name, const Strings& values) {
    auto* t = proto_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::STRING);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (const auto& v : values) t->add_string_data(v);
  }
  onnx::NodeProto* node(const std::string& op, const Strings& inputs, const Strings& outputs) {
    auto* n = proto_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(op + "_node");
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  std::unique_ptr<Network> import() const {
    const std::string bytes = proto_.SerializeAsString();
    auto net = std::make_unique<Network>();
    OnnxParser(*net).parse_bytes(bytes.data(), bytes.size(), ".", "string test model");
    return net;
  }

 private:
  static onnx::TypeProto_Tensor* add_value(onnx::ValueInfoProto* v, const std::string& name, int32_t type) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    return t;
  }
  onnx::ModelProto proto_;
};

void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_strings(onnx::NodeProto* n, const std::string& name, const Strings& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const auto& s : v) a->add_strings(s);
}

TEST(StringOnnx, StringNormalizerNode) {
  OnnxModel m(10);
  m.input("x", onnx::TensorProto::STRING, {1, -1});
  m.output("y", onnx::TensorProto::STRING);
  auto* n = m.node("StringNormalizer", {"x"}, {"y"});
  attr_string(n, "case_change_action", "LOWER");
  attr_strings(n, "stopwords", {"THE", "a"});
  attr_string(n, "locale", "en_US");
  auto net = m.import();
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1, 1}, Dims{1, 5}, Dims{1, 10});
  Runner runner(build_cpu(*net, &profile));
  // is_case_sensitive defaults to 0: "The", "the" and "A" are stopwords too.
  const auto out = runner.run({{"x", HostTensor::from_strings(Dims{1, 6}, {"The", "Quick", "the", "A", "FOX", "a"})}});
  EXPECT_EQ(out.at("y").dims(), (Dims{1, 2}));
  EXPECT_EQ(out.at("y").to_strings(), (Strings{"quick", "fox"}));
}

TEST(StringOnnx, UnsupportedLocaleNamesTheNode) {
  OnnxModel m(10);
  m.input("x", onnx::TensorProto::STRING, {3});
  m.output("y", onnx::TensorProto::STRING);
  auto* n = m.node("StringNormalizer", {"x"}, {"y"});
  attr_string(n, "case_change_action", "UPPER");
  attr_string(n, "locale", "tr_TR.UTF-8");
  try {
    (void)m.import();
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("StringNormalizer_node"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tr_TR"), std::string::npos) << msg;
  }
}

TEST(StringOnnx, CastAndCastLikeWithStrings) {
  OnnxModel m(15);
  m.input("f", onnx::TensorProto::FLOAT, {3});
  m.input("s", onnx::TensorProto::STRING, {2});
  m.output("f_text", onnx::TensorProto::STRING);
  m.output("s_value", onnx::TensorProto::DOUBLE);
  m.output("f_like", onnx::TensorProto::STRING);
  m.string_initializer("like", {"model"});
  attr_int(m.node("Cast", {"f"}, {"f_text"}), "to", onnx::TensorProto::STRING);
  attr_int(m.node("Cast", {"s"}, {"s_value"}), "to", onnx::TensorProto::DOUBLE);
  m.node("CastLike", {"f", "like"}, {"f_like"});
  auto net = m.import();
  Runner runner(build_cpu(*net));
  const auto out =
      runner.run({{"f", HostTensor::from_vector(DataType::kFloat32, Dims{3}, std::vector<float>{1.5f, -3.0f, 0.2f})},
                  {"s", HostTensor::from_strings(Dims{2}, {"2.5e3", "-INF"})}});
  EXPECT_EQ(out.at("f_text").to_strings(), (Strings{"1.5", "-3.0", "0.2"}));
  EXPECT_EQ(out.at("f_like").to_strings(), (Strings{"1.5", "-3.0", "0.2"}));
  EXPECT_EQ(out.at("s_value").as<double>()[0], 2500.0);
  EXPECT_EQ(out.at("s_value").as<double>()[1], -std::numeric_limits<double>::infinity());
}

// ---- files --------------------------------------------------------------------------------------------------

TEST(StringFiles, PbAndNpyRoundTrip) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_string_files_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const HostTensor t = HostTensor::from_strings(Dims{2, 2}, {"", "\xf0\x9f\x99\x82 ok", "\xc3\xa9t\xc3\xa9", "plain"});
  save_tensor_pb((dir / "t.pb").string(), t, "t");
  std::string name;
  const HostTensor pb = load_tensor_pb((dir / "t.pb").string(), &name);
  EXPECT_EQ(name, "t");
  EXPECT_EQ(pb.dims(), t.dims());
  EXPECT_EQ(pb.to_strings(), t.to_strings());

  save_npy((dir / "t.npy").string(), t);
  std::ifstream f(dir / "t.npy", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The widest element, "plain", is 5 code points: '<U5', 4 elements of 20 bytes after the header.
  EXPECT_NE(bytes.find("'descr': '<U5'"), std::string::npos);
  ASSERT_GE(bytes.size(), 64u);
  const size_t data = bytes.size() - 4 * 20;
  uint32_t cp = 0;
  std::memcpy(&cp, bytes.data() + data + 20, 4);  // element 1, code point 0: U+1F642
  EXPECT_EQ(cp, 0x1F642u);
  std::memcpy(&cp, bytes.data() + data + 40 + 4, 4);  // element 2, code point 1: 't'
  EXPECT_EQ(cp, static_cast<uint32_t>('t'));
  std::memcpy(&cp, bytes.data() + data, 4);  // element 0 is empty: all padding
  EXPECT_EQ(cp, 0u);
  const HostTensor npy = load_npy((dir / "t.npy").string());
  EXPECT_EQ(npy.to_strings(), t.to_strings());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
