// Tests of the ONNX conformance work (issue 5): the importer and kernel fixes that the ONNX
// backend tests found, each on a small model built here and checked against values worked out by
// hand (including the variants the backend tests do not cover: int64 values beyond float
// precision, one-sided bounds, non-trailing legacy broadcast); and `kiln conformance` itself, run
// as a user would on a test-data folder written here, so that pass, wrong, frozen shape inputs,
// excluded and unsupported tests, the passing-list check and its update are all exercised without
// libonnx-testdata.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "src/core/tensor_io.h"
#include "src/onnx/onnx_proto.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// ---- building small ONNX models ---------------------------------------------------------------

struct ValueSpec {
  std::string name;
  int32_t elem_type;  // onnx::TensorProto::FLOAT, ...
  std::vector<int64_t> dims;
};

onnx::TensorProto to_proto(const std::string& name, const HostTensor& t) {
  static const std::map<DataType, int32_t> kTypes = {
      {DataType::kFloat32, onnx::TensorProto::FLOAT}, {DataType::kFloat64, onnx::TensorProto::DOUBLE},
      {DataType::kInt32, onnx::TensorProto::INT32},   {DataType::kInt64, onnx::TensorProto::INT64},
      {DataType::kInt8, onnx::TensorProto::INT8},     {DataType::kBool, onnx::TensorProto::BOOL}};
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(kTypes.at(t.type()));
  for (int64_t d : t.dims()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(t.data()), t.nbytes()));
  return p;
}

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset) {
    model_.set_ir_version(7);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("g");
  }
  ModelBuilder& input(const ValueSpec& v) { return value(*model_.mutable_graph()->add_input(), v); }
  ModelBuilder& output(const ValueSpec& v) { return value(*model_.mutable_graph()->add_output(), v); }
  ModelBuilder& initializer(const std::string& name, const HostTensor& t) {
    *model_.mutable_graph()->add_initializer() = to_proto(name, t);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto& n = *model_.mutable_graph()->add_node();
    n.set_op_type(op);
    for (const auto& i : inputs) n.add_input(i);
    for (const auto& o : outputs) n.add_output(o);
    return n;
  }
  const onnx::ModelProto& model() const { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

 private:
  ModelBuilder& value(onnx::ValueInfoProto& v, const ValueSpec& spec) {
    v.set_name(spec.name);
    auto* tt = v.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(spec.elem_type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : spec.dims) shape->add_dim()->set_dim_value(d);
    return *this;
  }
  onnx::ModelProto model_;
};

void set_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

template <typename T>
HostTensor tensor(DataType type, const Dims& dims, std::vector<T> values) {
  return HostTensor::from_vector(type, dims, values);
}

// Imports the model, builds a CPU engine for the inputs' shapes, runs it; outputs by graph order.
std::vector<HostTensor> run_model(const onnx::ModelProto& model, const std::map<std::string, HostTensor>& inputs) {
  const std::string bytes = model.SerializeAsString();
  Network net;
  OnnxParser(net).parse_bytes(bytes.data(), bytes.size());
  BuilderConfig config;
  config.num_threads = 1;
  OptimizationProfile profile;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Dims& d = inputs.at(net.input(i)->name()).dims();
    if (net.input(i)->dims().is_dynamic()) profile.set_dimensions(net.input(i)->name(), d, d, d);
  }
  config.profiles.push_back(profile);
  const auto engine_bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(engine_bytes.data(), engine_bytes.size());
  auto ctx = engine->create_execution_context();
  std::vector<HostTensor> in_copies;
  for (int i = 0; i < net.num_inputs(); ++i) {
    in_copies.push_back(inputs.at(net.input(i)->name()).clone());
    ctx->set_tensor_address(net.input(i)->name(), in_copies.back().data());
  }
  std::vector<HostTensor> outs;
  for (int i = 0; i < net.num_outputs(); ++i) {
    const std::string& name = net.output(i)->name();
    outs.emplace_back(engine->io_tensor(name).type, ctx->tensor_shape(name));
  }
  for (int i = 0; i < net.num_outputs(); ++i)
    ctx->set_tensor_address(net.output(i)->name(), outs[static_cast<size_t>(i)].data());
  ctx->execute();
  return outs;
}

template <typename T>
std::vector<T> values(const HostTensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.count());
}

// ---- importer and kernel fixes ------------------------------------------------------------------

// Integer Clip runs as max/min in the input's type, so int64 values beyond float precision stay
// exact (a float clip would round 2^53 + 3 to 2^53 + 4).
TEST(ConformanceFixes, ClipInt64IsExact) {
  const int64_t big = (int64_t{1} << 53) + 1;
  ModelBuilder b(13);
  b.input({"x", onnx::TensorProto::INT64, {3}}).output({"y", onnx::TensorProto::INT64, {3}});
  b.initializer("lo", tensor<int64_t>(DataType::kInt64, Dims{}, {-3}));
  b.initializer("hi", tensor<int64_t>(DataType::kInt64, Dims{}, {big}));
  b.node("Clip", {"x", "lo", "hi"}, {"y"});
  const auto out = run_model(b.model(), {{"x", tensor<int64_t>(DataType::kInt64, Dims{3}, {big + 2, -5, 7})}});
  ASSERT_EQ(out[0].type(), DataType::kInt64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{big, -3, 7}));
}

TEST(ConformanceFixes, ClipInt32OnlyMaxAndNoBounds) {
  ModelBuilder b(13);
  b.input({"x", onnx::TensorProto::INT32, {4}}).output({"y", onnx::TensorProto::INT32, {4}});
  b.output({"z", onnx::TensorProto::INT32, {4}});
  b.initializer("hi", tensor<int32_t>(DataType::kInt32, Dims{}, {5}));
  b.node("Clip", {"x", "", "hi"}, {"y"});
  b.node("Clip", {"x"}, {"z"});
  const auto out = run_model(b.model(), {{"x", tensor<int32_t>(DataType::kInt32, Dims{4}, {-100, 4, 5, 6})}});
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{-100, 4, 5, 5}));
  EXPECT_EQ(values<int32_t>(out[1]), (std::vector<int32_t>{-100, 4, 5, 6}));
}

// Pow with an exponent of another type: numpy's power(a, b).astype(a.dtype).
TEST(ConformanceFixes, PowMixedTypes) {
  ModelBuilder b(15);
  b.input({"i", onnx::TensorProto::INT64, {3}}).input({"f", onnx::TensorProto::FLOAT, {3}});
  b.input({"g", onnx::TensorProto::FLOAT, {2}}).input({"e", onnx::TensorProto::INT64, {2}});
  b.input({"k", onnx::TensorProto::INT32, {1}});
  b.output({"a", onnx::TensorProto::INT64, {3}}).output({"c", onnx::TensorProto::FLOAT, {2}});
  b.output({"d", onnx::TensorProto::INT32, {2}});
  b.node("Pow", {"i", "f"}, {"a"});
  b.node("Pow", {"g", "e"}, {"c"});
  b.node("Pow", {"k", "e"}, {"d"});  // int32 ** int64, k broadcast over e
  const auto out = run_model(b.model(), {{"i", tensor<int64_t>(DataType::kInt64, Dims{3}, {4, 3, 2})},
                                         {"f", tensor<float>(DataType::kFloat32, Dims{3}, {0.5f, 0.5f, 3.0f})},
                                         {"g", tensor<float>(DataType::kFloat32, Dims{2}, {2.0f, 9.0f})},
                                         {"e", tensor<int64_t>(DataType::kInt64, Dims{2}, {3, -1})},
                                         {"k", tensor<int32_t>(DataType::kInt32, Dims{1}, {3})}});
  ASSERT_EQ(out[0].type(), DataType::kInt64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{2, 1, 8}));  // sqrt 4, trunc(sqrt 3), 2^3
  ASSERT_EQ(out[1].type(), DataType::kFloat32);
  EXPECT_FLOAT_EQ(values<float>(out[1])[0], 8.0f);
  EXPECT_NEAR(values<float>(out[1])[1], 1.0f / 9.0f, 1e-7);
  ASSERT_EQ(out[2].type(), DataType::kInt32);
  EXPECT_EQ(values<int32_t>(out[2]), (std::vector<int32_t>{27, 0}));  // 3^3; 3^-1 truncates to 0
}

TEST(ConformanceFixes, IsInfOneSign) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  ModelBuilder b(10);
  b.input({"x", onnx::TensorProto::FLOAT, {5}});
  b.output({"pos", onnx::TensorProto::BOOL, {5}}).output({"neg", onnx::TensorProto::BOOL, {5}});
  b.output({"none", onnx::TensorProto::BOOL, {5}});
  set_int(b.node("IsInf", {"x"}, {"pos"}), "detect_negative", 0);
  set_int(b.node("IsInf", {"x"}, {"neg"}), "detect_positive", 0);
  auto& none = b.node("IsInf", {"x"}, {"none"});
  set_int(none, "detect_positive", 0);
  set_int(none, "detect_negative", 0);
  const auto out =
      run_model(b.model(), {{"x", tensor<float>(DataType::kFloat32, Dims{5}, {inf, -inf, 1.0f, nan, -0.0f})}});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{1, 0, 0, 0, 0}));
  EXPECT_EQ(values<uint8_t>(out[1]), (std::vector<uint8_t>{0, 1, 0, 0, 0}));
  EXPECT_EQ(values<uint8_t>(out[2]), (std::vector<uint8_t>{0, 0, 0, 0, 0}));
}

// Opset < 7 broadcast=1 with axis: B [3] aligns with A's dim 1 of [2,3,2], not with the last dim.
TEST(ConformanceFixes, LegacyBroadcastAxis) {
  ModelBuilder b(6);
  b.input({"a", onnx::TensorProto::FLOAT, {2, 3, 2}}).output({"y", onnx::TensorProto::FLOAT, {2, 3, 2}});
  b.initializer("b", tensor<float>(DataType::kFloat32, Dims{3}, {10, 20, 30}));
  auto& add = b.node("Add", {"a", "b"}, {"y"});
  set_int(add, "broadcast", 1);
  set_int(add, "axis", 1);
  std::vector<float> a(12);
  for (int i = 0; i < 12; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i);
  const auto out = run_model(b.model(), {{"a", tensor<float>(DataType::kFloat32, Dims{2, 3, 2}, a)}});
  const auto y = values<float>(out[0]);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(y[static_cast<size_t>(i)], a[static_cast<size_t>(i)] + 10.0f * ((i / 2) % 3 + 1)) << i;
}

// PRelu before opset 7: a 1-D slope of C values is per channel (axis 1).
TEST(ConformanceFixes, LegacyPReluPerChannel) {
  ModelBuilder b(6);
  b.input({"x", onnx::TensorProto::FLOAT, {1, 3, 2}}).output({"y", onnx::TensorProto::FLOAT, {1, 3, 2}});
  b.initializer("s", tensor<float>(DataType::kFloat32, Dims{3}, {0.5f, 0.25f, 2.0f}));
  b.node("PRelu", {"x", "s"}, {"y"});
  const auto out =
      run_model(b.model(), {{"x", tensor<float>(DataType::kFloat32, Dims{1, 3, 2}, {-1, 1, -4, 4, -3, 3})}});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-0.5f, 1, -1, 4, -6, 3}));
}

TEST(ConformanceFixes, DropoutMaskAndZeroRatioTraining) {
  ModelBuilder b(13);
  b.input({"x", onnx::TensorProto::FLOAT, {2, 2}});
  b.output({"y", onnx::TensorProto::FLOAT, {2, 2}}).output({"m", onnx::TensorProto::BOOL, {2, 2}});
  b.output({"y2", onnx::TensorProto::FLOAT, {2, 2}}).output({"m2", onnx::TensorProto::BOOL, {2, 2}});
  b.initializer("r", tensor<float>(DataType::kFloat32, Dims{}, {0.0f}));
  b.initializer("t", tensor<uint8_t>(DataType::kBool, Dims{}, {1}));
  b.node("Dropout", {"x"}, {"y", "m"});
  b.node("Dropout", {"x", "r", "t"}, {"y2", "m2"});
  const std::vector<float> x = {1, -2, 3, -4};
  const auto out = run_model(b.model(), {{"x", tensor<float>(DataType::kFloat32, Dims{2, 2}, x)}});
  EXPECT_EQ(values<float>(out[0]), x);
  ASSERT_EQ(out[1].type(), DataType::kBool);
  EXPECT_EQ(values<uint8_t>(out[1]), (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ(values<float>(out[2]), x);
  EXPECT_EQ(values<uint8_t>(out[3]), (std::vector<uint8_t>{1, 1, 1, 1}));
}

TEST(ConformanceFixes, DropoutRandomTrainingIsRejected) {
  ModelBuilder b(13);
  b.input({"x", onnx::TensorProto::FLOAT, {2}}).output({"y", onnx::TensorProto::FLOAT, {2}});
  b.initializer("t", tensor<uint8_t>(DataType::kBool, Dims{}, {1}));
  b.node("Dropout", {"x", "", "t"}, {"y"});
  const std::string bytes = b.model().SerializeAsString();
  Network net;
  try {
    OnnxParser(net).parse_bytes(bytes.data(), bytes.size());
    FAIL() << "a training-mode Dropout with ratio 0.5 imported";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("random masks"), std::string::npos) << e.what();
  }
}

// align_corners with `scales`: ONNX's length_resized is in * scale = 2.4 (not the floored 2), so
// output x = 1 reads input x = 1 * (4 - 1) / (2.4 - 1) = 2.142857: 3 + 0.142857 * (4 - 3).
TEST(ConformanceFixes, ResizeAlignCornersUsesUnflooredLength) {
  ModelBuilder b(13);
  b.input({"x", onnx::TensorProto::FLOAT, {1, 1, 2, 4}}).output({"y", onnx::TensorProto::FLOAT, {1, 1, 1, 2}});
  b.initializer("scales", tensor<float>(DataType::kFloat32, Dims{4}, {1, 1, 0.6f, 0.6f}));
  auto& n = b.node("Resize", {"x", "", "scales"}, {"y"});
  set_string(n, "mode", "linear");
  set_string(n, "coordinate_transformation_mode", "align_corners");
  const auto out =
      run_model(b.model(), {{"x", tensor<float>(DataType::kFloat32, Dims{1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})}});
  ASSERT_EQ(out[0].dims(), (Dims{1, 1, 1, 2}));
  EXPECT_FLOAT_EQ(values<float>(out[0])[0], 1.0f);
  EXPECT_NEAR(values<float>(out[0])[1], 1.0 + 3.0 / 1.4, 1e-5);
}

// ---- `kiln conformance` on a test-data folder written here ------------------------------------------

class ConformanceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_conformance_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data" / "node");
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }

  // A test folder: model.onnx and test_data_set_0 with the given inputs and outputs.
  void add_test(const std::string& name, const onnx::ModelProto& model, const std::vector<HostTensor>& inputs,
                const std::vector<HostTensor>& outputs) {
    const fs::path t = dir_ / "data" / "node" / name;
    fs::create_directories(t / "test_data_set_0");
    std::ofstream(t / "model.onnx", std::ios::binary) << model.SerializeAsString();
    for (size_t i = 0; i < inputs.size(); ++i)
      save_tensor_pb((t / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")).string(), inputs[i], "in");
    for (size_t i = 0; i < outputs.size(); ++i)
      save_tensor_pb((t / "test_data_set_0" / ("output_" + std::to_string(i) + ".pb")).string(), outputs[i], "out");
  }

  // pass, wrong, a frozen shape input, excluded (sequence input), unsupported (unknown op).
  void add_standard_tests() {
    const HostTensor x = tensor<float>(DataType::kFloat32, Dims{2, 3}, {-1, 2, -3, 4, -5, 6});
    const HostTensor relu = tensor<float>(DataType::kFloat32, Dims{2, 3}, {0, 2, 0, 4, 0, 6});
    ModelBuilder r(13);
    r.input({"x", onnx::TensorProto::FLOAT, {2, 3}}).output({"y", onnx::TensorProto::FLOAT, {2, 3}});
    r.node("Relu", {"x"}, {"y"});
    add_test("test_relu", r.model(), {x}, {relu});
    add_test("test_relu_wrong", r.model(), {x}, {tensor<float>(DataType::kFloat32, Dims{2, 3}, {0, 2, 0, 4, 0, 7})});

    ModelBuilder s(13);
    s.input({"data", onnx::TensorProto::FLOAT, {2, 3}}).input({"shape", onnx::TensorProto::INT64, {2}});
    s.output({"y", onnx::TensorProto::FLOAT, {3, 2}});
    s.node("Reshape", {"data", "shape"}, {"y"});
    add_test("test_reshape", s.model(), {x, tensor<int64_t>(DataType::kInt64, Dims{2}, {3, 2})},
             {x.reshaped(Dims{3, 2})});

    ModelBuilder q(13);
    auto& in = *q.graph().add_input();
    in.set_name("seq");
    in.mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
    q.output({"y", onnx::TensorProto::FLOAT, {2, 3}});
    q.node("ConcatFromSequence", {"seq"}, {"y"});
    add_test("test_sequence", q.model(), {}, {});

    ModelBuilder u(13);
    u.input({"x", onnx::TensorProto::FLOAT, {2, 3}}).output({"y", onnx::TensorProto::FLOAT, {2, 3}});
    u.node("NoSuchOp", {"x"}, {"y"});
    add_test("test_nosuchop", u.model(), {x}, {x});
  }

  struct Result {
    int code = -1;
    std::string out;
  };
  Result kiln(const std::string& args) {
    const fs::path out = dir_ / "out.txt";
    const std::string cmd = std::string("'") + KILN_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>&1 </dev/null";
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    r.out = ss.str();
    return r;
  }
  std::string data() const { return "'" + (dir_ / "data").string() + "' --folders node"; }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(ConformanceCli, ClassifiesEveryKindOfTest) {
  add_standard_tests();
  const Result r = kiln("conformance --data-dir " + data() + " --json '" + file("c.json") + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(file("c.json"));
  const auto j = nlohmann::json::parse(in);
  std::map<std::string, nlohmann::json> by_id;
  for (const auto& t : j.at("tests")) by_id[t.at("id").get<std::string>()] = t;
  ASSERT_EQ(by_id.size(), 5u) << r.out;
  EXPECT_EQ(by_id["node/test_relu"]["status"], "pass");
  EXPECT_EQ(by_id["node/test_relu"]["ops"], nlohmann::json::array({"Relu"}));
  const auto& wrong = by_id["node/test_relu_wrong"];
  EXPECT_EQ(wrong["status"], "wrong");
  EXPECT_EQ(wrong["worst"]["index"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(wrong["worst"]["actual"], 6.0);
  EXPECT_EQ(wrong["worst"]["expected"], 7.0);
  EXPECT_EQ(by_id["node/test_reshape"]["status"], "pass");
  EXPECT_EQ(by_id["node/test_reshape"]["frozen_inputs"], nlohmann::json::array({"shape"}));
  EXPECT_EQ(by_id["node/test_sequence"]["status"], "excluded");
  EXPECT_EQ(by_id["node/test_nosuchop"]["status"], "unsupported");
  EXPECT_EQ(by_id["node/test_nosuchop"]["failing_ops"], nlohmann::json::array({"NoSuchOp"}));
  EXPECT_EQ(j["folders"]["node"]["pass"], 2);
  EXPECT_NE(r.out.find("by op"), std::string::npos) << r.out;
}

TEST_F(ConformanceCli, PassingListCatchesRegressionsAndUpdates) {
  add_standard_tests();
  {
    std::ofstream list(file("passing.txt"));
    list << "# comment\nnode/test_relu\nnode/test_relu_wrong  # no longer passes\nnode/test_gone\n";
  }
  Result r = kiln("conformance --data-dir " + data() + " --passing-list '" + file("passing.txt") + "'");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("node/test_relu_wrong: wrong"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node/test_reshape"), std::string::npos) << r.out;  // newly passing, reported

  // The filter leaves test_relu out: an update keeps its entry (and test_gone's), drops the
  // wrong one and adds the newly passing one.
  r = kiln("conformance --data-dir " + data() + " --filter 'reshape|wrong' --passing-list '" + file("passing.txt") +
           "' --update-passing-list");
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(file("passing.txt"));
  std::vector<std::string> ids;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') ids.push_back(line);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"node/test_gone", "node/test_relu", "node/test_reshape"}));
  r = kiln("conformance --data-dir " + data() + " --filter 'relu$|reshape' --passing-list '" + file("passing.txt") +
           "'");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(ConformanceCli, MissingDataSkipsOnlyWhenAsked) {
  EXPECT_EQ(kiln("conformance --data-dir '" + file("absent") + "' --skip-missing-data").code, 77);
  const Result r = kiln("conformance --data-dir '" + file("absent") + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("libonnx-testdata"), std::string::npos) << r.out;
}

TEST_F(ConformanceCli, ListsImportersWithTheirInfo) {
  const Result r = kiln("conformance --list-ops");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| op | domain | opsets | types | notes |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Conv | ai.onnx |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Clip | ai.onnx | 1+ |"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
