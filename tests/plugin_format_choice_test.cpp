// The builder's choice among the type combinations a plugin accepts (supports_format_combination),
// on the CPU, where it is not timed: with --fp16 the float inputs are tried as float16, then
// float32, and the first accepted is kept (src/builder/passes/precision.cpp, plugin_type). A test
// plugin (y = 2x) accepts float32 only, float16 only, or both; for each the engine's plugin layer
// runs in a combination the plugin accepts, the one the preference order names, identically on
// every build, and the engine computes 2x (in float16 where the plugin runs in float16).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/plugin.h"
#include "kiln/runtime.h"
#include "src/core/half.h"
#include "src/engine/engine_format.h"

namespace kiln {
namespace {

constexpr const char* kName = "KilnTestTypeChoice";
constexpr const char* kNamespace = "kiln_test";

// y = 2x, CPU, linear, in the types `accept` names: "float32", "float16" or "both".
class TypeChoicePlugin final : public Plugin {
 public:
  explicit TypeChoicePlugin(std::string accept) : accept_(std::move(accept)) {}
  std::string type() const override { return kName; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool accepts(DataType t) const {
    return (t == DataType::kFloat32 && accept_ != "float16") || (t == DataType::kFloat16 && accept_ != "float32");
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    const PluginTensorDesc& d = io[static_cast<size_t>(pos)];
    if (target_device() != DeviceType::kCPU || d.format != TensorFormat::kLinear || !accepts(d.type)) return false;
    return pos == 0 || d.type == io[0].type;
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext&) override {
    const int64_t n = in[0].dims.volume();
    if (in[0].type == DataType::kFloat16) {
      const auto* x = static_cast<const uint16_t*>(inputs[0]);
      auto* y = static_cast<uint16_t*>(outputs[0]);
      for (int64_t i = 0; i < n; ++i) y[i] = float_to_half_bits(2.0f * half_bits_to_float(x[i]));
    } else {
      const auto* x = static_cast<const float*>(inputs[0]);
      auto* y = static_cast<float*>(outputs[0]);
      for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i];
    }
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<TypeChoicePlugin>(*this); }
  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::string("accept", accept_));
    return f;
  }

 private:
  std::string accept_;
};

class TypeChoiceCreator final : public PluginCreator {
 public:
  std::string name() const override { return kName; }
  std::string plugin_namespace() const override { return kNamespace; }
  std::vector<PluginFieldSpec> field_schema() const override {
    return {
        {"accept", PluginFieldType::kString, 1, true, PluginField::string("accept", ""), "float32, float16 or both"}};
  }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection& fields) const override {
    return std::make_unique<TypeChoicePlugin>(fields.get_string("accept"));
  }
};

KILN_REGISTER_PLUGIN(TypeChoiceCreator);

struct Built {
  std::vector<uint8_t> bytes;
  BuildReport report;
};

Built build(const std::string& accept, bool fp16) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 5});
  Layer* layer = add_plugin(net, {x}, TypeChoicePlugin(accept), "twice");
  layer->output(0)->set_name("y");
  net.mark_output(layer->output(0));
  BuilderConfig config;
  config.fp16 = fp16;
  config.num_threads = 1;
  Built b;
  b.bytes = Builder().build_serialized(net, config, &b.report);
  return b;
}

// The type the engine's plugin layer runs in, after checking that the plugin accepts the
// engine's combination (input and output types, linear).
DataType engine_plugin_type(const std::vector<uint8_t>& bytes, const std::string& accept) {
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "test");
  const Layer* plugin = nullptr;
  for (int i = 0; i < data.network->num_layers(); ++i) {
    if (data.network->layer(i)->type() == kLayerPlugin) plugin = data.network->layer(i);
  }
  EXPECT_NE(plugin, nullptr);
  if (!plugin) return DataType::kBool;
  const TypeChoicePlugin p(accept);
  const std::vector<PluginTensorDesc> io = {
      {plugin->input(0)->type(), plugin->input(0)->format(), plugin->input(0)->dims()},
      {plugin->output(0)->type(), plugin->output(0)->format(), plugin->output(0)->dims()}};
  for (int pos = 0; pos < 2; ++pos) EXPECT_TRUE(p.supports_format_combination(pos, io, 1, 1)) << "position " << pos;
  return plugin->input(0)->type();
}

// Runs the engine on x and checks y = 2x computed in `type`.
void expect_twice(const std::vector<uint8_t>& bytes, DataType type) {
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  std::vector<float> x = {0.1f, -1.7f, 3.14159f, 1000.3f, -0.0003f, 7.0f, 0.5f, -2.25f, 65.1f, 1e-3f};
  std::vector<float> y(x.size(), -1.0f);
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  for (size_t i = 0; i < x.size(); ++i) {
    const float expected =
        type == DataType::kFloat16 ? 2.0f * half_bits_to_float(float_to_half_bits(x[i])) : 2.0f * x[i];
    EXPECT_EQ(y[i], expected) << "x = " << x[i];
  }
}

bool logged(const BuildReport& r, const std::string& text) {
  return std::any_of(r.pass_log.begin(), r.pass_log.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

TEST(PluginFormatChoice, SeveralAcceptedOnCpuTakesTheFirstInPreferenceOrderDeterministically) {
  const Built a = build("both", true), b = build("both", true);
  EXPECT_EQ(a.bytes, b.bytes) << "the same network and config must give the same engine";
  EXPECT_EQ(engine_plugin_type(a.bytes, "both"), DataType::kFloat16);
  EXPECT_TRUE(logged(a.report, "'twice' accepts float16 and float32; float16 (first in the preference order"))
      << ::testing::PrintToString(a.report.pass_log);
  expect_twice(a.bytes, DataType::kFloat16);
}

TEST(PluginFormatChoice, OnlyAcceptedCombinationIsChosen) {
  const Built f32 = build("float32", true);
  EXPECT_EQ(engine_plugin_type(f32.bytes, "float32"), DataType::kFloat32);
  expect_twice(f32.bytes, DataType::kFloat32);
  const Built f16 = build("float16", true);
  EXPECT_EQ(engine_plugin_type(f16.bytes, "float16"), DataType::kFloat16);
  expect_twice(f16.bytes, DataType::kFloat16);
}

TEST(PluginFormatChoice, WithoutFp16TheDeclaredTypesStay) {
  const Built b = build("both", false);
  EXPECT_EQ(engine_plugin_type(b.bytes, "both"), DataType::kFloat32);
  expect_twice(b.bytes, DataType::kFloat32);
  // A plugin that takes float16 only cannot run a float32 network unless --fp16 allows casts.
  EXPECT_THROW(build("float16", false), Error);
}

}  // namespace
}  // namespace kiln
