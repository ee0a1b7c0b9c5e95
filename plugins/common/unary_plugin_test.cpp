// Tests of UnaryPlugin, the base of the element-wise built-in plugins: its builder answers (types,
// symbolic dims, the type/format table per device), enqueue's argument checks and messages, and
// the creators' field helpers. Uses a small test-only subclass (y = -x) so that any failure
// points at the base, not at a particular plugin's math.
#include "plugins/common/unary_plugin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/logger.h"

namespace kiln::plugins {
namespace {

class NegatePlugin final : public UnaryPlugin {
 public:
  explicit NegatePlugin(std::string name) : UnaryPlugin(std::move(name)) {}
  std::string type() const override { return "NegateTest"; }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<NegatePlugin>(*this); }
  PluginFieldCollection fields() const override { return {}; }
  mutable int cpu_calls = 0, cuda_calls = 0;

 protected:
  void run_cpu(const float* x, float* y, int64_t n, int) const override {
    ++cpu_calls;
    for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
  }
  int run_cuda(const void*, void*, int64_t, DataType, void*) const override {
    ++cuda_calls;
    return 0;
  }
};

// Collects logged messages while alive.
class CapturingLogger : public Logger {
 public:
  CapturingLogger() { set_logger(this); }
  ~CapturingLogger() override { set_logger(nullptr); }
  void log(Severity, const std::string& message) override {
    std::lock_guard<std::mutex> lock(mutex_);
    text_ += message + "\n";
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 private:
  mutable std::mutex mutex_;
  std::string text_;
};

PluginTensorDesc desc(DataType type, TensorFormat format, Dims dims = Dims{2, 3}) {
  PluginTensorDesc d;
  d.type = type;
  d.format = format;
  d.dims = dims;
  return d;
}

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kUInt8,
                               DataType::kInt32,   DataType::kInt64,   DataType::kBool, DataType::kFloat64};
constexpr TensorFormat kFormats[] = {TensorFormat::kLinear, TensorFormat::kChannelsLast};

TEST(UnaryPlugin, OutputTypeAndSymbolicDimsFollowTheInput) {
  const NegatePlugin plugin("neg");
  EXPECT_EQ(plugin.num_outputs(), 1);
  for (const DataType t : kTypes) EXPECT_EQ(plugin.output_types({t}), std::vector<DataType>{t});
  EXPECT_THROW(plugin.output_types({}), Error);
  EXPECT_THROW(plugin.output_types({DataType::kFloat32, DataType::kFloat32}), Error);

  ExprBuilder exprs;
  DimsExprs in;
  in.d = {exprs.input_dim(0, 0), exprs.constant(3), exprs.input_dim(0, 2)};
  const DimsExprs out = plugin.output_dims(0, {in}, exprs);
  ASSERT_EQ(out.rank(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out.d[static_cast<size_t>(i)], in.d[static_cast<size_t>(i)]);
  EXPECT_FALSE(out.d[0]->is_constant());  // a dynamic batch stays symbolic
  EXPECT_THROW(plugin.output_dims(1, {in}, exprs), Error);
}

TEST(UnaryPlugin, FormatTablePerDevice) {
  NegatePlugin plugin("neg");
  for (const DeviceType device : {DeviceType::kCPU, DeviceType::kCUDA}) {
    plugin.set_target_device(device);
    for (const DataType t : kTypes) {
      for (const TensorFormat f : kFormats) {
        // Both formats on both devices (element-wise: the layout does not matter); float16 on CUDA.
        const bool expected =
            device == DeviceType::kCPU ? t == DataType::kFloat32 : (t == DataType::kFloat32 || t == DataType::kFloat16);
        const PluginTensorDesc in = desc(t, f);
        EXPECT_EQ(plugin.supports_format_combination(0, {in}, 1, 1), expected)
            << to_string(device) << " " << to_string(t) << " " << to_string(f);
        if (!expected) continue;
        // The output must repeat the input's type and format.
        for (const DataType ot : kTypes) {
          for (const TensorFormat of : kFormats) {
            EXPECT_EQ(plugin.supports_format_combination(1, {in, desc(ot, of)}, 1, 1), ot == t && of == f)
                << to_string(device) << " in " << to_string(t) << "/" << to_string(f) << " out " << to_string(ot) << "/"
                << to_string(of);
          }
        }
      }
    }
  }
  const PluginTensorDesc f32 = desc(DataType::kFloat32, TensorFormat::kLinear);
  EXPECT_FALSE(plugin.supports_format_combination(2, {f32, f32, f32}, 1, 1));
  EXPECT_FALSE(plugin.supports_format_combination(0, {f32, f32, f32}, 2, 1));
  EXPECT_FALSE(plugin.supports_format_combination(-1, {f32, f32}, 1, 1));
}

TEST(UnaryPlugin, EnqueueRunsTheCpuKernelOverAllElements) {
  NegatePlugin plugin("neg");
  const std::vector<float> x = {1, -2, 3, -4, 5, -6};
  std::vector<float> y(6, 0.0f);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  const PluginTensorDesc d = desc(DataType::kFloat32, TensorFormat::kLinear, Dims{2, 3});
  ASSERT_EQ(plugin.enqueue({d}, {d}, in, out, nullptr, PluginExecContext{}), kUnaryOk);
  EXPECT_EQ(y, (std::vector<float>{-1, 2, -3, 4, -5, 6}));
  // Empty tensors succeed without touching the (null) pointers.
  const PluginTensorDesc empty = desc(DataType::kFloat32, TensorFormat::kLinear, Dims{0, 3});
  const void* null_in[] = {nullptr};
  void* null_out[] = {nullptr};
  EXPECT_EQ(plugin.enqueue({empty}, {empty}, null_in, null_out, nullptr, PluginExecContext{}), kUnaryOk);
  EXPECT_EQ(plugin.cpu_calls, 1);
}

TEST(UnaryPlugin, EnqueueRejectsBadArgumentsWithTheLayerName) {
  NegatePlugin plugin("neg_1");
  std::vector<float> x(8, 1.0f), y(8, 0.0f);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  const void* null_in[] = {nullptr};
  const PluginTensorDesc d = desc(DataType::kFloat32, TensorFormat::kLinear, Dims{2, 3});
  const PluginExecContext cpu{};
  struct Case {
    const char* what;
    std::vector<PluginTensorDesc> ins, outs;
    const void* const* inputs;
    int code;
  };
  const std::vector<Case> cases = {
      {"two inputs", {d, d}, {d}, in, kUnaryBadArguments},
      {"no output", {d}, {}, in, kUnaryBadArguments},
      {"other output dims", {d}, {desc(DataType::kFloat32, TensorFormat::kLinear, Dims{3, 2})}, in, kUnaryBadArguments},
      {"other output type", {d}, {desc(DataType::kFloat16, TensorFormat::kLinear)}, in, kUnaryBadArguments},
      {"other output format", {d}, {desc(DataType::kFloat32, TensorFormat::kChannelsLast)}, in, kUnaryBadArguments},
      {"dynamic dims",
       {desc(DataType::kFloat32, TensorFormat::kLinear, Dims{kDynamic, 3})},
       {desc(DataType::kFloat32, TensorFormat::kLinear, Dims{kDynamic, 3})},
       in,
       kUnaryBadArguments},
      {"null input", {d}, {d}, null_in, kUnaryBadArguments},
      {"float16 on the CPU",
       {desc(DataType::kFloat16, TensorFormat::kLinear)},
       {desc(DataType::kFloat16, TensorFormat::kLinear)},
       in,
       kUnaryUnsupported},
      {"int32 on the CPU",
       {desc(DataType::kInt32, TensorFormat::kLinear)},
       {desc(DataType::kInt32, TensorFormat::kLinear)},
       in,
       kUnaryUnsupported},
  };
  for (const Case& c : cases) {
    CapturingLogger logger;
    EXPECT_EQ(plugin.enqueue(c.ins, c.outs, c.inputs, out, nullptr, cpu), c.code) << c.what;
    EXPECT_NE(logger.text().find("NegateTest layer 'neg_1'"), std::string::npos) << c.what << ": " << logger.text();
  }
  // A float pointer that is not 4-byte aligned.
  CapturingLogger logger;
  const void* odd_in[] = {reinterpret_cast<const char*>(x.data()) + 1};
  EXPECT_EQ(plugin.enqueue({d}, {d}, odd_in, out, nullptr, cpu), kUnaryMisaligned);
  EXPECT_NE(logger.text().find("aligned"), std::string::npos) << logger.text();
  EXPECT_EQ(plugin.cpu_calls, 0);
}

TEST(UnaryPlugin, EnqueueOnCudaNeedsCudaAndAStream) {
  NegatePlugin plugin("neg_cuda");
  float dummy[6] = {};
  const void* in[] = {dummy};
  void* out[] = {dummy};
  const PluginTensorDesc d = desc(DataType::kFloat32, TensorFormat::kLinear, Dims{2, 3});
  PluginExecContext cuda;
  cuda.device = DeviceType::kCUDA;
  CapturingLogger logger;
#ifdef KILN_HAVE_CUDA
  EXPECT_EQ(plugin.enqueue({d}, {d}, in, out, nullptr, cuda), kUnaryBadArguments);  // null stream
  EXPECT_NE(logger.text().find("stream"), std::string::npos) << logger.text();
#else
  EXPECT_EQ(plugin.enqueue({d}, {d}, in, out, nullptr, cuda), kUnaryNoCuda);
  EXPECT_NE(logger.text().find("without CUDA"), std::string::npos) << logger.text();
#endif
  EXPECT_EQ(plugin.cuda_calls, 0);
}

TEST(UnaryPlugin, FieldHelpers) {
  PluginFieldCollection fields;
  fields.add(PluginField::float32("scale", {2.5f}));
  fields.add(PluginField::float32("pair", {1.0f, 2.0f}));
  fields.add(PluginField::float32("bad", {std::numeric_limits<float>::quiet_NaN()}));
  fields.add(PluginField::int64("count", {3}));
  fields.add(PluginField::string("mode", "fast"));
  EXPECT_EQ(read_float32_field(fields, "scale", 1.0f, "L"), 2.5f);
  EXPECT_EQ(read_float32_field(fields, "absent", 1.5f, "L"), 1.5f);
  for (const char* name : {"pair", "bad", "count", "mode"}) {
    try {
      read_float32_field(fields, name, 0.0f, "MyOp layer 'x'");
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("MyOp layer 'x'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_string_field(fields, "mode", "slow", "L"), "fast");
  EXPECT_EQ(read_string_field(fields, "absent", "slow", "L"), "slow");
  EXPECT_THROW(read_string_field(fields, "scale", "", "L"), Error);

  const PluginFieldSpec f = float32_field_spec("alpha", 0.25f, "doc");
  EXPECT_EQ(f.name, "alpha");
  EXPECT_EQ(f.type, PluginFieldType::kFloat32);
  EXPECT_EQ(f.count, 1);
  EXPECT_FALSE(f.required);
  EXPECT_EQ(f.default_value.f32, std::vector<float>{0.25f});
  const PluginFieldSpec s = string_field_spec("mode", "erf", "doc");
  EXPECT_EQ(s.type, PluginFieldType::kString);
  EXPECT_EQ(s.default_value.str, "erf");
  EXPECT_EQ(plugin_label("GELU", "g1"), "GELU layer 'g1'");
  EXPECT_EQ(plugin_label("GELU", ""), "GELU layer");
}

}  // namespace
}  // namespace kiln::plugins
