// What a plugin author trips over (the plugin-authoring issue), each with a test that can fail:
// fixed input extents reach output_dims as constants and dynamic ones stay symbolic; two extents
// declared equal (ExprBuilder::require_equal) and broadcast inputs (ExprBuilder::broadcast) are
// checked by the builder and at run time, naming the layer; integer and float fields convert
// between 32 and 64 bits (getters and resolve_fields), with range checks; a failing enqueue's
// message (PluginExecContext::fail) reaches the error; `kiln plugin check` takes a creator's
// example values for required fields; an unknown pass name fails the build; the ONNX importer's
// "needs a plugin" hint appears only when no plugin of that name is registered; a library built
// against another plugin interface version is refused, naming both versions, before kiln calls
// anything in it.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "onnx/onnx_proto.h"
#include "engine/engine_format.h"
#include "plugins/plugin_check.h"
#include "plugin_test_util.h"

namespace kiln {
namespace {

constexpr const char* kNamespace = "kiln_authoring_test";

using test::FieldlessCreator;

// y = a * sigmoid(b) * alpha + beta (mode 0) or a * sigmoid(b) (mode 1), a and b broadcast
// (or, with `equal_batch`, of equal dims checked through require_equal). CPU, float32.
class GatedSigmoid : public Plugin {
 public:
  GatedSigmoid(float alpha, float beta, int64_t mode, bool equal_batch)
      : alpha_(alpha), beta_(beta), mode_(mode), equal_batch_(equal_batch) {}
  std::string type() const override { return equal_batch_ ? "GatedSigmoidEqual" : "GatedSigmoid"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder& exprs) const override {
    seen_constant_ = {};
    for (const DimsExprs& d : in) {
      std::vector<bool> c;
      for (const DimExpr* e : d.d) c.push_back(e->is_constant());
      seen_constant_.push_back(c);
    }
    if (!equal_batch_) return exprs.broadcast(in.at(0), in.at(1));
    DimsExprs out = in.at(0);
    for (int k = 0; k < out.rank(); ++k)
      exprs.require_equal(*in.at(0).d[static_cast<size_t>(k)], *in.at(1).d[static_cast<size_t>(k)]);
    return out;
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32 &&
           io[static_cast<size_t>(pos)].format == TensorFormat::kLinear;
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>& out,
              const void* const* inputs, void* const* outputs, void*, const PluginExecContext& exec) override {
    if (mode_ < 0 || mode_ > 1) return exec.fail("mode must be 0 or 1, not " + std::to_string(mode_), 7);
    const Dims& yd = out[0].dims;
    const auto* a = static_cast<const float*>(inputs[0]);
    const auto* b = static_cast<const float*>(inputs[1]);
    auto* y = static_cast<float*>(outputs[0]);
    const int64_t n = yd.volume();
    for (int64_t i = 0; i < n; ++i) {
      const float av = a[broadcast_index(i, yd, in[0].dims)], bv = b[broadcast_index(i, yd, in[1].dims)];
      const float g = av / (1.0f + std::exp(-bv));
      y[i] = mode_ == 0 ? g * alpha_ + beta_ : g;
    }
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<GatedSigmoid>(*this); }
  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::float32("alpha", {alpha_}));
    f.add(PluginField::float32("beta", {beta_}));
    f.add(PluginField::int64("mode", {mode_}));
    return f;
  }
  static std::vector<std::vector<bool>>& seen_constant() { return seen_constant_; }

 private:
  // The element of `d` (right-aligned, size-1 axes broadcast) that output element i reads.
  static int64_t broadcast_index(int64_t i, const Dims& y, const Dims& d) {
    int64_t idx = 0, stride = 1;
    for (int k = y.rank() - 1, j = d.rank() - 1; k >= 0; --k, --j) {
      const int64_t coord = i % y[k];
      i /= y[k];
      if (j < 0) continue;
      if (d[j] != 1) idx += coord * stride;
      stride *= d[j];
    }
    return idx;
  }
  float alpha_, beta_;
  int64_t mode_;
  bool equal_batch_;
  static inline std::vector<std::vector<bool>> seen_constant_;
};

template <bool kEqual>
class GatedSigmoidCreator : public PluginCreator {
 public:
  std::string name() const override { return kEqual ? "GatedSigmoidEqual" : "GatedSigmoid"; }
  std::string plugin_namespace() const override { return kNamespace; }
  std::vector<PluginFieldSpec> field_schema() const override {
    return {PluginFieldSpec{"alpha", PluginFieldType::kFloat32, 1, true, {}, "scale"},
            PluginFieldSpec{"beta", PluginFieldType::kFloat64, 1, false, PluginField::float64("beta", {0.0}), "offset"},
            PluginFieldSpec{"mode", PluginFieldType::kInt64, 1, false, PluginField::int64("mode", {0}), "0 or 1"}};
  }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection& f) const override {
    return std::make_unique<GatedSigmoid>(f.get_float32("alpha"), static_cast<float>(f.get_float64("beta")),
                                          f.get_int64("mode"), kEqual);
  }
  PluginFieldCollection example_fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::float32("alpha", {1.5f}));
    return f;
  }
};
using Broadcasting = GatedSigmoidCreator<false>;
using EqualDims = GatedSigmoidCreator<true>;
KILN_REGISTER_PLUGIN(Broadcasting);
KILN_REGISTER_PLUGIN(EqualDims);

const PluginCreator& creator(bool equal) {
  const PluginCreator* c =
      PluginRegistry::instance().find(equal ? "GatedSigmoidEqual" : "GatedSigmoid", "1", kNamespace);
  if (!c) throw Error("test plugin not registered");
  return *c;
}

std::unique_ptr<Plugin> make(bool equal, float alpha = 2.0f, int64_t mode = 0) {
  PluginFieldCollection f;
  f.add(PluginField::float32("alpha", {alpha}));
  f.add(PluginField::int32("mode", {static_cast<int32_t>(mode)}));  // an int32 for the int64 field
  return creator(equal).create("gate", PluginRegistry::instance().resolve_fields(creator(equal), f, "test"));
}

std::shared_ptr<Engine> build(Network& net, const OptimizationProfile* profile = nullptr) {
  BuilderConfig config;
  if (profile) config.profiles.push_back(*profile);
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), "authoring test");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(PluginAuthoring, FixedDimsAreConstantsDynamicOnesSymbolic) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{kDynamic, 3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{kDynamic, 3});
  Layer* l = add_plugin(net, {a, b}, *make(true), "gate");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  OptimizationProfile p;
  p.set_dimensions("a", Dims{1, 3}, Dims{2, 3}, Dims{4, 3});
  p.set_dimensions("b", Dims{1, 3}, Dims{2, 3}, Dims{4, 3});
  auto engine = build(net, &p);
  const auto& seen = GatedSigmoid::seen_constant();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0][0]) << "the dynamic batch must stay symbolic";
  EXPECT_TRUE(seen[0][1]) << "the fixed extent 3 must be a constant";
  EXPECT_TRUE(seen[1][1]);
  // Run: y = a * sigmoid(b) * 2 + 0, and batch 2 / batch 3 for a and b breaks require_equal.
  auto ctx = engine->create_execution_context();
  std::vector<float> av{1, 2, 3, 4, 5, 6}, bv{0, 0, 0, 1, -1, 2}, y(6);
  ctx->set_input_shape("a", Dims{2, 3});
  ctx->set_input_shape("b", Dims{2, 3});
  ctx->set_tensor_address("a", av.data());
  ctx->set_tensor_address("b", bv.data());
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], 2.0f * av[i] / (1.0f + std::exp(-bv[i]))) << i;
  ctx->set_input_shape("b", Dims{3, 3});
  const std::string err = error_of([&] { ctx->execute(); });
  EXPECT_NE(err.find("gate"), std::string::npos) << err;
  EXPECT_NE(err.find("extents declared equal differ"), std::string::npos) << err;
  EXPECT_NE(err.find("= 2"), std::string::npos) << err;
  EXPECT_NE(err.find("= 3"), std::string::npos) << err;
}

TEST(PluginAuthoring, StaticMismatchFailsTheBuildNamingTheLayer) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{2, 3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{2, 4});
  Layer* l = add_plugin(net, {a, b}, *make(true), "gate_static");
  net.mark_output(l->output(0));
  const std::string err = error_of([&] { (void)build(net); });
  EXPECT_NE(err.find("gate_static"), std::string::npos) << err;
  EXPECT_NE(err.find("require_equal"), std::string::npos) << err;
  EXPECT_NE(err.find("3"), std::string::npos) << err;
}

TEST(PluginAuthoring, BroadcastHelperFollowsNumpyAndChecksAtRunTime) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{kDynamic, 3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{kDynamic, 3});
  Layer* l = add_plugin(net, {a, b}, *make(false, 1.0f, 1), "gate_bc");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  OptimizationProfile p;
  p.set_dimensions("a", Dims{1, 3}, Dims{2, 3}, Dims{4, 3});
  p.set_dimensions("b", Dims{1, 3}, Dims{1, 3}, Dims{4, 3});
  auto engine = build(net, &p);
  auto ctx = engine->create_execution_context();
  std::vector<float> av{1, 2, 3, 4, 5, 6}, bv{0, 1, -1}, y(6, -9.0f);
  ctx->set_input_shape("a", Dims{2, 3});
  ctx->set_input_shape("b", Dims{1, 3});  // broadcast along the batch
  EXPECT_EQ(ctx->tensor_shape("y"), (Dims{2, 3}));
  ctx->set_tensor_address("a", av.data());
  ctx->set_tensor_address("b", bv.data());
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], av[i] / (1.0f + std::exp(-bv[i % 3]))) << i;
  std::vector<float> b3(9, 0.0f);
  ctx->set_input_shape("b", Dims{3, 3});  // 2 vs 3: neither equal nor 1
  ctx->set_tensor_address("b", b3.data());
  const std::string err = error_of([&] { ctx->execute(); });
  EXPECT_NE(err.find("gate_bc"), std::string::npos) << err;
  EXPECT_NE(err.find("must broadcast"), std::string::npos) << err;
  // Constant extents that cannot broadcast fail at once.
  ExprBuilder exprs;
  DimsExprs x{{exprs.constant(2), exprs.constant(3)}}, z{{exprs.constant(4)}};
  EXPECT_NE(error_of([&] { exprs.broadcast(x, z); }).find("neither equal nor 1"), std::string::npos);
  DimsExprs w{{exprs.constant(1)}};
  const DimsExprs r = exprs.broadcast(x, w);
  ASSERT_EQ(r.rank(), 2);
  EXPECT_EQ(r.d[1]->constant_value(), 3);
}

TEST(PluginAuthoring, FieldsConvertBetween32And64Bits) {
  PluginFieldCollection given;
  given.add(PluginField::float32("alpha", {0.5f}));
  given.add(PluginField::float32("beta", {0.25f}));  // float32 for the float64 field
  given.add(PluginField::int32("mode", {1}));        // int32 for the int64 field
  const PluginFieldCollection r = PluginRegistry::instance().resolve_fields(creator(false), given, "node 'n'");
  ASSERT_NE(r.find("beta"), nullptr);
  EXPECT_EQ(r.find("beta")->type, PluginFieldType::kFloat64);
  EXPECT_EQ(r.find("mode")->type, PluginFieldType::kInt64);
  EXPECT_EQ(r.get_int64("mode"), 1);
  EXPECT_EQ(r.get_int32("mode"), 1);
  EXPECT_DOUBLE_EQ(r.get_float64("beta"), 0.25);
  EXPECT_FLOAT_EQ(r.get_float32("beta"), 0.25f);
  PluginFieldCollection big;
  big.add(PluginField::int64("mode", {int64_t{1} << 40}));
  EXPECT_NE(error_of([&] { (void)big.get_int32("mode"); }).find("does not fit int32"), std::string::npos);
  PluginFieldCollection wrong;
  wrong.add(PluginField::float32("alpha", {1.0f}));
  wrong.add(PluginField::string("mode", "one"));
  const std::string err =
      error_of([&] { (void)PluginRegistry::instance().resolve_fields(creator(false), wrong, "node 'n'"); });
  EXPECT_NE(err.find("node 'n'"), std::string::npos) << err;
  EXPECT_NE(err.find("'mode'"), std::string::npos) << err;
  // A missing required field names the field and the place.
  const std::string missing = error_of(
      [&] { (void)PluginRegistry::instance().resolve_fields(creator(false), PluginFieldCollection{}, "node 'n'"); });
  EXPECT_NE(missing.find("needs field 'alpha'"), std::string::npos) << missing;
}

TEST(PluginAuthoring, EnqueueFailureMessageReachesTheError) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{1, 3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{1, 3});
  Layer* l = add_plugin(net, {a, b}, *make(false, 1.0f, 5), "gate_bad_mode");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  auto engine = build(net);
  auto ctx = engine->create_execution_context();
  std::vector<float> av(3, 1.0f), bv(3, 0.0f), y(3);
  ctx->set_tensor_address("a", av.data());
  ctx->set_tensor_address("b", bv.data());
  ctx->set_tensor_address("y", y.data());
  const std::string err = error_of([&] { ctx->execute(); });
  EXPECT_NE(err.find("gate_bad_mode"), std::string::npos) << err;
  EXPECT_NE(err.find("code 7"), std::string::npos) << err;
  EXPECT_NE(err.find("mode must be 0 or 1, not 5"), std::string::npos) << err;
}

TEST(PluginAuthoring, PluginCheckUsesTheCreatorsExampleValues) {
  PluginCheckOptions options;
  options.name = "GatedSigmoid";
  options.plugin_namespace = kNamespace;
  options.num_inputs = 2;
  const PluginCheckReport report = check_plugin(options);
  EXPECT_NE(report.fields.find("alpha=1.5"), std::string::npos) << report.fields;
  for (const auto& c : report.checks) EXPECT_NE(c.status, CheckStatus::kFail) << c.name << ": " << c.message;
}

TEST(PluginAuthoring, UnknownPassNamesFailTheBuild) {
  const auto& names = builder_pass_names();
  EXPECT_EQ(names.size(), 9u);
  EXPECT_EQ(names.back(), "concat_conv_split");
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2});
  net.mark_output(net.add_activation(x, ActivationType::kRelu)->output(0));
  BuilderConfig config;
  config.disabled_passes = {"constant_folding", "elementwise_fusoin"};
  const std::string err = error_of([&] { (void)Builder().build_serialized(net, config); });
  EXPECT_NE(err.find("elementwise_fusoin"), std::string::npos) << err;
  EXPECT_NE(err.find("layout"), std::string::npos) << "the message lists the passes: " << err;
  EXPECT_NE(err.find("concat_conv_split"), std::string::npos) << "the message lists the passes: " << err;
  config.disabled_passes = {"layout", "fp16_precision"};
  EXPECT_NO_THROW((void)Builder().build_serialized(net, config));
}

// One node, `op` in domain `custom` with attribute `attr` = 1.0, x [2] -> y [2].
std::string write_custom_model(const std::string& op, const std::string& attr) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* custom = model.add_opset_import();
  custom->set_domain("custom");
  custom->set_version(1);
  auto* g = model.mutable_graph();
  g->set_name("g");
  for (const char* name : {"x", "y"}) {
    auto* v = std::string(name) == "x" ? g->add_input() : g->add_output();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(2);
  }
  auto* node = g->add_node();
  node->set_name("n0");
  node->set_op_type(op);
  node->set_domain("custom");
  node->add_input("x");
  node->add_output("y");
  auto* a = node->add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(1.0f);
  const std::string path = ::testing::TempDir() + "/kiln_authoring_" + op + "_" + attr + ".onnx";
  std::ofstream out(path, std::ios::binary);
  model.SerializeToOstream(&out);
  return path;
}

TEST(PluginAuthoring, TheImportersPluginHintOnlyWhenNoPluginIsRegistered) {
  {
    Network net;
    const std::string err = error_of([&] { OnnxParser(net).parse_file(write_custom_model("Frobnicate", "k")); });
    EXPECT_NE(err.find("no registered plugin 'Frobnicate'"), std::string::npos) << err;
    EXPECT_NE(err.find("--plugins"), std::string::npos) << err;
  }
  {
    // TemperatureSwish is registered; only its attribute name is wrong.
    Network net;
    const std::string err =
        error_of([&] { OnnxParser(net).parse_file(write_custom_model("TemperatureSwish", "temp")); });
    EXPECT_NE(err.find("'temp'"), std::string::npos) << err;
    EXPECT_NE(err.find("temperature"), std::string::npos) << "the message lists the plugin's fields: " << err;
    EXPECT_EQ(err.find("need a kiln plugin"), std::string::npos) << "the plugin was found: " << err;
  }
}

// A creator of another interface version is refused without a call into it.
class NeverCalledCreator : public PluginCreator {
 public:
  std::string name() const override {
    ADD_FAILURE() << "kiln called into a creator of another interface version";
    return "NeverCalled";
  }
  std::vector<PluginFieldSpec> field_schema() const override { return {}; }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection&) const override { return nullptr; }
};

class CaptureErrors : public Logger {
 public:
  CaptureErrors() { set_logger(this); }
  ~CaptureErrors() override { set_logger(nullptr); }
  void log(Severity severity, const std::string& message) override {
    if (severity == Severity::kError) messages += message + "\n";
  }
  std::string messages;
};

TEST(PluginAuthoring, CreatorsOfAnotherInterfaceVersionAreRefused) {
  {
    CaptureErrors errors;
    detail::PluginRegistrar refused(std::make_unique<NeverCalledCreator>(), kPluginInterfaceVersion + 1);
    EXPECT_NE(errors.messages.find("interface version " + std::to_string(kPluginInterfaceVersion + 1)),
              std::string::npos)
        << errors.messages;
    EXPECT_NE(errors.messages.find("this kiln has version " + std::to_string(kPluginInterfaceVersion)),
              std::string::npos)
        << errors.messages;
  }
  for (const auto& p : PluginRegistry::instance().list()) EXPECT_NE(p.name, "NeverCalled");

  // The same from a library: loading it fails naming the library and both versions.
  const char* cxx_env = std::getenv("CXX");
  const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
  const std::string dir = ::testing::TempDir() + "/kiln_abi_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string src = dir + "/old_plugin.cpp", lib = dir + "/libold_plugin.so";
  {
    std::ofstream out(src);
    out << "#include \"kiln/plugin.h\"\n"
           "namespace {\n"
           "struct OldCreator : kiln::PluginCreator {\n"
           "  std::string name() const override { return \"OldPlugin\"; }\n"
           "  std::vector<kiln::PluginFieldSpec> field_schema() const override { return {}; }\n"
           "  std::unique_ptr<kiln::Plugin> create(const std::string&, const kiln::PluginFieldCollection&) const "
           "override {\n"
           "    return nullptr;\n"
           "  }\n"
           "};\n"
           "// What KILN_REGISTER_PLUGIN in a library built against interface version 1 amounts to.\n"
           "kiln::detail::PluginRegistrar registrar(std::make_unique<OldCreator>(), 1);\n"
           "}  // namespace\n";
  }
  const std::string compile = cxx + " -std=c++20 -fPIC -shared -I" + std::string(KILN_SOURCE_DIR) + "/include " + src +
                              " -o " + lib + " > " + dir + "/cc.log 2>&1";
  if (std::system(compile.c_str()) != 0) GTEST_SKIP() << "no C++ compiler to build the test library (" << cxx << ")";
  const std::string err = error_of([&] { (void)load_plugin_library(lib); });
  EXPECT_NE(err.find("libold_plugin.so"), std::string::npos) << err;
  EXPECT_NE(err.find("interface version 1"), std::string::npos) << err;
  EXPECT_NE(err.find("this kiln has version " + std::to_string(kPluginInterfaceVersion)), std::string::npos) << err;
  EXPECT_EQ(PluginRegistry::instance().find("OldPlugin"), nullptr);
  std::filesystem::remove_all(dir);
}

// Per-context plugin state (TensorRT's attachToContext): each execution context works with its
// own clone of the plugin object, initialize()d once and shared by the kernels the context
// prepares for each shape; contexts on several threads never use one object at once.
class StatefulPlugin : public Plugin {
 public:
  std::string type() const override { return "StatefulCounter"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32;
  }
  int initialize() override {
    initialized_.fetch_add(1);
    return 0;
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext& exec) override {
    if (busy_++ != 0) overlaps_.fetch_add(1);  // another thread is inside this very object
    std::this_thread::yield();
    ++calls_;  // mutable state, written without a lock
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    for (int64_t i = 0; i < in[0].dims.volume(); ++i) y[i] = x[i] + static_cast<float>(calls_);
    --busy_;
    return exec.device == DeviceType::kCPU ? 0 : 1;
  }
  std::unique_ptr<Plugin> clone() const override {
    auto c = std::make_unique<StatefulPlugin>();
    return c;
  }
  PluginFieldCollection fields() const override { return {}; }
  static inline std::atomic<int> overlaps_{0}, initialized_{0};

 private:
  int busy_ = 0;
  int64_t calls_ = 0;
};

using StatefulCreator = FieldlessCreator<StatefulPlugin>;
KILN_REGISTER_PLUGIN(StatefulCreator);

TEST(PluginAuthoring, EachContextHasItsOwnPluginStateAcrossThreadsAndShapes) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 4});
  Layer* l = add_plugin(net, {x}, StatefulPlugin(), "counter");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 4}, Dims{2, 4}, Dims{3, 4});
  auto engine = build(net, &p);
  StatefulPlugin::overlaps_ = 0;
  const int initialized_before = StatefulPlugin::initialized_.load();
  constexpr int kThreads = 4, kCalls = 60;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto ctx = engine->create_execution_context();
        ctx->set_num_threads(1);
        std::vector<float> in(12, 1.0f), out(12);
        ctx->set_tensor_address("x", in.data());
        ctx->set_tensor_address("y", out.data());
        for (int i = 0; i < kCalls; ++i) {
          const int64_t batch = 1 + i % 3;  // three shapes: three prepared kernels, one plugin object
          ctx->set_input_shape("x", Dims{batch, 4});
          ctx->execute();
          // The object's own call count: this context's calls only.
          if (out[0] != 1.0f + static_cast<float>(i + 1)) {
            errors[static_cast<size_t>(t)] =
                "call " + std::to_string(i) + " saw count " + std::to_string(out[0] - 1.0f);
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
  EXPECT_EQ(StatefulPlugin::overlaps_.load(), 0) << "two threads were inside one plugin object";
  EXPECT_EQ(StatefulPlugin::initialized_.load() - initialized_before, kThreads) << "one initialize() per context";
}

// A shape input (TensorRT's shape tensors): ReshapeTo(x, shape) gives x's elements with the dims
// that `shape`'s host value holds, read through ExprBuilder::input_value.
class ReshapeTo : public Plugin {
 public:
  std::string type() const override { return "ReshapeTo"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>&, ExprBuilder& exprs) const override {
    return DimsExprs{{exprs.input_value(1, 0), exprs.input_value(1, 1)}};
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == (pos == 1 ? DataType::kInt64 : DataType::kFloat32);
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>& out,
              const void* const* inputs, void* const* outputs, void*, const PluginExecContext& exec) override {
    if (in[0].dims.volume() != out[0].dims.volume()) return exec.fail("the target shape has another element count");
    std::copy_n(static_cast<const float*>(inputs[0]), in[0].dims.volume(), static_cast<float*>(outputs[0]));
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<ReshapeTo>(); }
  PluginFieldCollection fields() const override { return {}; }
};

using ReshapeToCreator = FieldlessCreator<ReshapeTo>;
KILN_REGISTER_PLUGIN(ReshapeToCreator);

TEST(PluginAuthoring, ShapeInputsFeedOutputDims) {
  // x [N, 6] -> target = [2 * Shape(x)[0], 3] (shape arithmetic, known on the host) -> y [2N, 3].
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 6});
  Tensor* shape = net.add_shape(x)->output(0);
  Tensor* zero = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {0}), "zero")->output(0);
  Tensor* n = net.add_gather(shape, zero, 0)->output(0);
  Tensor* two = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {2}), "two")->output(0);
  Tensor* rows = net.add_elementwise(n, two, ElementWiseOp::kProd)->output(0);
  Tensor* three =
      net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {3}), "three")->output(0);
  Tensor* target = net.add_concatenation({rows, three}, 0)->output(0);
  Layer* l = add_plugin(net, {x, target}, ReshapeTo(), "reshape_to");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 6}, Dims{2, 6}, Dims{4, 6});
  auto engine = build(net, &p);
  auto ctx = engine->create_execution_context();
  for (int64_t batch : {1, 3, 2}) {
    std::vector<float> in(static_cast<size_t>(batch * 6)), out(in.size(), -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
    ctx->set_input_shape("x", Dims{batch, 6});
    EXPECT_EQ(ctx->tensor_shape("y"), (Dims{2 * batch, 3})) << "batch " << batch;
    ctx->set_tensor_address("x", in.data());
    ctx->set_tensor_address("y", out.data());
    ctx->execute();
    EXPECT_EQ(out, in) << "batch " << batch;
  }
  // A "shape" that a kernel computes (from x's values) is not known at shape time: a clear error.
  Network bad;
  Tensor* bx = bad.add_input("x", DataType::kFloat32, Dims{2, 6});
  Tensor* slice = bad.add_slice(bx, {0, 0}, {1, 2})->output(0);  // x[0, 0:2], computed on the device
  Tensor* flat = bad.add_shuffle(slice, {}, {2}, {})->output(0);
  Tensor* as_int = bad.add_cast(flat, DataType::kInt64)->output(0);
  Layer* bl = add_plugin(bad, {bx, as_int}, ReshapeTo(), "reshape_by_data");
  bad.mark_output(bl->output(0));
  const std::string err = error_of([&] { (void)build(bad); });
  EXPECT_NE(err.find("reshape_by_data"), std::string::npos) << err;
  EXPECT_NE(err.find("needs the value of input 1"), std::string::npos) << err;
}

// Several implementations (TensorRT's getValidTactics / setTactic): the builder runs each and
// keeps the fastest, the engine stores it, every plugin object kiln makes for the layer is told.
class TwoWays : public Plugin {
 public:
  std::string type() const override { return "TwoWays"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32;
  }
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>&,
                                   const std::vector<PluginTensorDesc>&) const override {
    return {"slow", "fast"};
  }
  void set_tactic(const std::string& name) override {
    tactic_ = name;
    if (name == "fast") fast_set_.fetch_add(1);
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext& exec) override {
    if (tactic_.empty()) return exec.fail("set_tactic was not called");
    if (tactic_ == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(2));
    runs_.fetch_add(1);
    std::copy_n(static_cast<const float*>(inputs[0]), in[0].dims.volume(), static_cast<float*>(outputs[0]));
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<TwoWays>(*this); }
  PluginFieldCollection fields() const override { return {}; }
  static inline std::atomic<int> fast_set_{0}, runs_{0};

 private:
  std::string tactic_;
};

using TwoWaysCreator = FieldlessCreator<TwoWays>;
KILN_REGISTER_PLUGIN(TwoWaysCreator);

TEST(PluginAuthoring, TheBuilderTimesAPluginsTacticsAndTheEngineKeepsTheFastest) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{4, 8});
  Layer* l = add_plugin(net, {x}, TwoWays(), "two_ways");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  BuilderConfig config;  // CPU, time_tactics on: plugin tactics are timed on the host
  BuildReport report;
  const auto bytes = Builder().build_serialized(net, config, &report);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "two ways");
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "two ways");
  const Layer* stored = data.network->find_layer("two_ways");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->attrs().get_string("plugin_tactic", ""), "fast") << "the engine keeps the fastest implementation";
  auto ctx = engine->create_execution_context();
  TwoWays::fast_set_ = 0;
  std::vector<float> in(32, 2.0f), out(32, 0.0f);
  ctx->set_tensor_address("x", in.data());
  ctx->set_tensor_address("y", out.data());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) ctx->execute();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out, in);
  EXPECT_GE(TwoWays::fast_set_.load(), 1) << "the context's plugin object was not told the fast tactic";
  EXPECT_LT(ms, 20 * 2.0) << "20 runs took " << ms << " ms: the slow tactic (2 ms a run) runs";
  EXPECT_GE(report.layers_timed, 1);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// In-place outputs (TensorRT's getAliasedInput): y = 2x, output 0 may reuse input 0 (or, with
// `bad_index`, a nonexistent input). Records whether kiln passed one address for both.
class DoubleInPlace : public Plugin {
 public:
  explicit DoubleInPlace(int alias = 0) : alias_(alias) {}
  std::string type() const override { return "DoubleInPlace"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32 &&
           io[static_cast<size_t>(pos)].format == TensorFormat::kLinear;
  }
  int aliased_input(int) const override { return alias_; }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext&) override {
    (inputs[0] == outputs[0] ? same_ : different_).fetch_add(1);
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    for (int64_t i = 0; i < in[0].dims.volume(); ++i) y[i] = 2.0f * x[i];  // reads x[i] before writing y[i]
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<DoubleInPlace>(*this); }
  PluginFieldCollection fields() const override { return {}; }
  static inline std::atomic<int> same_{0}, different_{0};

 private:
  int alias_;
};

using DoubleInPlaceCreator = FieldlessCreator<DoubleInPlace>;
KILN_REGISTER_PLUGIN(DoubleInPlaceCreator);

// x -> relu (a) -> DoubleInPlace (b) -> relu -> y [, + a when `reuse_a`]; a dynamic batch.
std::shared_ptr<Engine> in_place_engine(bool reuse_a, bool from_input) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 37});
  Tensor* a = from_input ? x : net.add_activation(x, ActivationType::kRelu)->output(0);
  Tensor* b = add_plugin(net, {a}, DoubleInPlace(), "double")->output(0);
  Tensor* y = net.add_activation(b, ActivationType::kRelu)->output(0);
  if (reuse_a) y = net.add_elementwise(y, a, ElementWiseOp::kSum)->output(0);
  y->set_name("y");
  net.mark_output(y);
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 37}, Dims{2, 37}, Dims{4, 37});
  return build(net, &p);
}

std::vector<float> run_in_place(Engine& engine, int64_t batch) {
  auto ctx = engine.create_execution_context();
  std::vector<float> in(static_cast<size_t>(batch * 37)), out(in.size(), -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(static_cast<int>(i % 11) - 5);
  ctx->set_input_shape("x", Dims{batch, 37});
  ctx->set_tensor_address("x", in.data());
  ctx->set_tensor_address("y", out.data());
  ctx->execute();
  return out;
}

TEST(PluginAuthoring, InPlaceOutputsShareTheirInputsMemoryOnlyWhenNothingElseReadsIt) {
  for (bool reuse_a : {false, true}) {
    for (bool from_input : {false, true}) {
      if (reuse_a && from_input) continue;
      SCOPED_TRACE(std::string(reuse_a ? "a is read after the plugin" : "a dies at the plugin") +
                   (from_input ? ", the plugin reads the network input" : ""));
      auto engine = in_place_engine(reuse_a, from_input);
      DoubleInPlace::same_ = 0;
      DoubleInPlace::different_ = 0;
      for (int64_t batch : {2, 4}) {
        const std::vector<float> out = run_in_place(*engine, batch);
        for (size_t i = 0; i < out.size(); ++i) {
          const float x = static_cast<float>(static_cast<int>(i % 11) - 5);
          const float a = from_input ? x : std::max(x, 0.0f);
          const float expected = std::max(2.0f * a, 0.0f) + (reuse_a ? a : 0.0f);
          ASSERT_EQ(out[i], expected) << "batch " << batch << ", element " << i;
        }
      }
      const bool shared = !reuse_a && !from_input;
      EXPECT_EQ(DoubleInPlace::same_.load(), shared ? 2 : 0);
      EXPECT_EQ(DoubleInPlace::different_.load(), shared ? 0 : 2);
    }
  }
  // An alias of an input the layer does not have fails when the layer is added, naming it.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
  const std::string err = error_of([&] { (void)add_plugin(net, {x}, DoubleInPlace(3), "bad_alias"); });
  EXPECT_NE(err.find("bad_alias"), std::string::npos) << err;
  EXPECT_NE(err.find("reuses input 3"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
