// Plugin::configure is called once per optimization profile with the profile's ranges: by the
// builder for every profile, and when an execution context selects a profile (not per shape
// change). A plugin that records every configure() call is built into an engine with two
// profiles; the test checks the number of calls and each call's min/opt/max and kDynamic dims
// against the profiles it set, for the input and for the output (whose last axis the plugin
// doubles), and that changing input shapes inside a profile configures nothing again while the
// results stay right (y = [x, x + 1] along the last axis).
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "kiln/plugin.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

constexpr const char* kName = "KilnTestRecordConfigure";
constexpr const char* kNamespace = "kiln_test";

struct ConfigureCall {
  std::string layer;
  std::vector<DynamicPluginTensorDesc> inputs, outputs;
};

std::mutex g_mutex;
std::vector<ConfigureCall> g_calls;

std::vector<ConfigureCall> take_calls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<ConfigureCall> r;
  r.swap(g_calls);
  return r;
}

// y[..., 0:n] = x, y[..., n:2n] = x + 1 (float32, CPU).
class RecordConfigurePlugin final : public Plugin {
 public:
  explicit RecordConfigurePlugin(std::string layer) : layer_(std::move(layer)) {}
  std::string type() const override { return kName; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder& exprs) const override {
    DimsExprs out = in.at(0);
    const int last = out.rank() - 1;
    out.d[static_cast<size_t>(last)] =
        exprs.operation(DimOp::kProd, *out.d[static_cast<size_t>(last)], *exprs.constant(2));
    return out;
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32 &&
           io[static_cast<size_t>(pos)].format == TensorFormat::kLinear && target_device() == DeviceType::kCPU;
  }
  void configure(const std::vector<DynamicPluginTensorDesc>& in,
                 const std::vector<DynamicPluginTensorDesc>& out) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_calls.push_back(ConfigureCall{layer_, in, out});
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext&) override {
    const Dims& d = in[0].dims;
    const int64_t n = d[d.rank() - 1], rows = n ? d.volume() / n : 0;
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        y[r * 2 * n + j] = x[r * n + j];
        y[r * 2 * n + n + j] = x[r * n + j] + 1.0f;
      }
    }
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<RecordConfigurePlugin>(*this); }
  PluginFieldCollection fields() const override { return {}; }

 private:
  std::string layer_;
};

class RecordConfigureCreator final : public PluginCreator {
 public:
  std::string name() const override { return kName; }
  std::string plugin_namespace() const override { return kNamespace; }
  std::vector<PluginFieldSpec> field_schema() const override { return {}; }
  std::unique_ptr<Plugin> create(const std::string& layer, const PluginFieldCollection&) const override {
    return std::make_unique<RecordConfigurePlugin>(layer);
  }
};

KILN_REGISTER_PLUGIN(RecordConfigureCreator);

struct Range {
  Dims min, opt, max;
};
// Input x: [N, 3, W], both N and W dynamic. Profile 0 varies both; profile 1 fixes N = 8.
const Range kProfile0{Dims{1, 3, 4}, Dims{2, 3, 8}, Dims{4, 3, 16}};
const Range kProfile1{Dims{8, 3, 2}, Dims{8, 3, 5}, Dims{8, 3, 10}};

Dims doubled_last(Dims d) {
  d[d.rank() - 1] *= 2;
  return d;
}

std::vector<uint8_t> build_engine() {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 3, kDynamic});
  RecordConfigurePlugin plugin("record");
  Layer* layer = add_plugin(net, {x}, plugin, "record");
  layer->output(0)->set_name("y");
  net.mark_output(layer->output(0));
  BuilderConfig config;
  config.num_threads = 1;
  for (const Range& r : {kProfile0, kProfile1}) {
    OptimizationProfile p;
    p.set_dimensions("x", r.min, r.opt, r.max);
    config.profiles.push_back(p);
  }
  return Builder().build_serialized(net, config);
}

// `call` configured the plugin for `profile`: input ranges as set, output ranges with the last
// axis doubled, kDynamic exactly where min != max.
void expect_configured_for(const ConfigureCall& call, const Range& profile, const Dims& dynamic_dims) {
  EXPECT_EQ(call.layer, "record");
  ASSERT_EQ(call.inputs.size(), 1u);
  ASSERT_EQ(call.outputs.size(), 1u);
  const DynamicPluginTensorDesc& in = call.inputs[0];
  EXPECT_EQ(in.min, profile.min);
  EXPECT_EQ(in.opt, profile.opt);
  EXPECT_EQ(in.max, profile.max);
  EXPECT_EQ(in.desc.dims, dynamic_dims);
  EXPECT_EQ(in.desc.type, DataType::kFloat32);
  EXPECT_EQ(in.desc.format, TensorFormat::kLinear);
  const DynamicPluginTensorDesc& out = call.outputs[0];
  EXPECT_EQ(out.min, doubled_last(profile.min));
  EXPECT_EQ(out.opt, doubled_last(profile.opt));
  EXPECT_EQ(out.max, doubled_last(profile.max));
  EXPECT_EQ(out.desc.dims, dynamic_dims);
}

TEST(PluginConfigure, BuilderConfiguresOncePerProfile) {
  take_calls();
  (void)build_engine();
  const auto calls = take_calls();
  ASSERT_EQ(calls.size(), 2u) << "one configure() per optimization profile";
  expect_configured_for(calls[0], kProfile0, Dims{kDynamic, 3, kDynamic});
  expect_configured_for(calls[1], kProfile1, Dims{8, 3, kDynamic});
}

void run_and_check(ExecutionContext& ctx, const Dims& dims) {
  ctx.set_input_shape("x", dims);
  std::vector<float> x(static_cast<size_t>(dims.volume()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const Dims out_dims = ctx.tensor_shape("y");
  ASSERT_EQ(out_dims, doubled_last(dims));
  std::vector<float> y(static_cast<size_t>(out_dims.volume()), -999.0f);
  ctx.set_tensor_address("x", x.data());
  ctx.set_tensor_address("y", y.data());
  ctx.execute();
  const int64_t n = dims[dims.rank() - 1];
  for (int64_t r = 0; r < dims.volume() / n; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(y[static_cast<size_t>(r * 2 * n + j)], x[static_cast<size_t>(r * n + j)]);
      ASSERT_EQ(y[static_cast<size_t>(r * 2 * n + n + j)], x[static_cast<size_t>(r * n + j)] + 1.0f);
    }
  }
}

TEST(PluginConfigure, ContextConfiguresWhenItSelectsAProfileNotPerShape) {
  const auto bytes = build_engine();
  take_calls();
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();  // selects profile 0
  auto calls = take_calls();
  ASSERT_EQ(calls.size(), 1u) << "a new context configures its plugin for profile 0, once";
  expect_configured_for(calls[0], kProfile0, Dims{kDynamic, 3, kDynamic});

  // Shapes inside the profile: prepared again, not configured again.
  run_and_check(*ctx, Dims{1, 3, 4});
  run_and_check(*ctx, Dims{3, 3, 13});
  EXPECT_TRUE(take_calls().empty()) << "configure() must not run per shape change";

  ctx->set_optimization_profile(1);
  calls = take_calls();
  ASSERT_EQ(calls.size(), 1u);
  expect_configured_for(calls[0], kProfile1, Dims{8, 3, kDynamic});
  run_and_check(*ctx, Dims{8, 3, 2});
  run_and_check(*ctx, Dims{8, 3, 10});
  EXPECT_TRUE(take_calls().empty());

  // A second context configures its own plugin object.
  auto other = engine->create_execution_context();
  calls = take_calls();
  ASSERT_EQ(calls.size(), 1u);
  expect_configured_for(calls[0], kProfile0, Dims{kDynamic, 3, kDynamic});
}

}  // namespace
}  // namespace kiln
