// Tests of the TemperatureSwish plugin's CPU kernel against a double-precision evaluation of
// x * sigmoid(t*x), plus its registration, fields, defaults and field checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "plugins/common/unary_plugin_test_util.h"
#include "plugins/temperature_swish/temperature_swish.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

Reference swish_reference(float temperature) {
  return [t = static_cast<double>(temperature)](double x) { return x / (1.0 + std::exp(-t * x)); };
}

// exp(z) has condition number |z|: the float rounding of z = t*x (2^-24 relative) becomes
// |z| * 2^-24 in the result, on top of a few roundings.
Tolerance swish_tolerance(float temperature) {
  return [=](float x, double ref) {
    return (4.0 + std::fabs(static_cast<double>(temperature) * x)) * 0x1p-24 * std::fabs(ref) + 1.2e-38;
  };
}

TEST(TemperatureSwishPlugin, RegisteredWithIdentityShapes) { check_identity("TemperatureSwish"); }

TEST(TemperatureSwishPlugin, CpuMatchesReferenceOnOddSizes) {
  for (const float t : {1.0f, 0.5f, 2.5f, -1.5f, 0.0f}) {
    auto plugin = create_registered("TemperatureSwish", one_float32_field("temperature", t));
    SCOPED_TRACE("temperature " + std::to_string(t));
    check_odd_sizes(*plugin, swish_reference(t), swish_tolerance(t));
  }
}

TEST(TemperatureSwishPlugin, CpuMatchesReferenceOnRanks1To5) {
  auto plugin = create_registered("TemperatureSwish", one_float32_field("temperature", 1.7f));
  check_ranks(*plugin, swish_reference(1.7f), swish_tolerance(1.7f));
}

TEST(TemperatureSwishPlugin, CpuMisalignedAndInPlace) {
  auto plugin = create_registered("TemperatureSwish", one_float32_field("temperature", 0.8f));
  check_misaligned_and_in_place(*plugin, swish_reference(0.8f), swish_tolerance(0.8f));
}

TEST(TemperatureSwishPlugin, CpuAccurateToTheEndOfTheNormalRange) {
  // t*x down to -100: e^(t*x) reaches the subnormals while y is still a normal float.
  auto plugin = create_registered("TemperatureSwish", one_float32_field("temperature", 5.0f));
  const std::vector<float> x = make_inputs(5000, 11, -20.0f, -15.0f);
  EXPECT_TRUE(matches_reference(x, run_cpu(*plugin, x), swish_reference(5.0f), swish_tolerance(5.0f)));
}

TEST(TemperatureSwishPlugin, SpecialValues) {
  auto plugin = create_registered("TemperatureSwish", one_float32_field("temperature", 1.0f));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> y = run_cpu(*plugin, {std::nanf(""), inf, 100.0f, -100.0f, -0.0f});
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 100.0f);
  EXPECT_LE(y[3], 0.0f);  // -100 * e^-100 = -3.7e-42, a subnormal
  EXPECT_GT(y[3], -1e-40f);
  EXPECT_EQ(y[4], 0.0f);
}

TEST(TemperatureSwishPlugin, FieldsRoundTrip) {
  const TemperatureSwishPlugin original("swish", -0.37f);
  const PluginFieldCollection fields = original.fields();
  ASSERT_NE(fields.find("temperature"), nullptr);
  EXPECT_EQ(fields.find("temperature")->type, PluginFieldType::kFloat32);
  auto recreated = create_registered("TemperatureSwish", fields);
  EXPECT_EQ(recreated->fields().find("temperature")->f32, std::vector<float>{-0.37f});

  TemperatureSwishPlugin original_copy = original;
  const std::vector<float> x = make_inputs(1001);
  EXPECT_EQ(run_cpu(original_copy, x), run_cpu(*recreated, x));  // bit-identical
}

TEST(TemperatureSwishPlugin, DefaultTemperatureIsOne) {
  const auto schema = TemperatureSwishCreator().field_schema();
  ASSERT_EQ(schema.size(), 1u);
  EXPECT_EQ(schema[0].name, "temperature");
  EXPECT_EQ(schema[0].type, PluginFieldType::kFloat32);
  EXPECT_FALSE(schema[0].required);
  EXPECT_EQ(schema[0].default_value.f32, std::vector<float>{1.0f});

  // Through the registry (defaults filled by resolve_fields) and straight through the creator.
  std::vector<std::unique_ptr<Plugin>> plugins;
  plugins.push_back(create_registered("TemperatureSwish", {}));
  plugins.push_back(TemperatureSwishCreator().create("direct", PluginFieldCollection{}));
  for (const auto& plugin : plugins) {
    EXPECT_EQ(plugin->fields().find("temperature")->f32, std::vector<float>{1.0f});
    const std::vector<float> x = make_inputs(200);
    EXPECT_TRUE(matches_reference(x, run_cpu(*plugin, x), swish_reference(1.0f), swish_tolerance(1.0f)));
  }
}

TEST(TemperatureSwishPlugin, RejectsBadFieldValues) {
  const TemperatureSwishCreator creator;
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    try {
      creator.create("sw1", one_float32_field("temperature", bad));
      FAIL() << "accepted temperature " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("sw1"), std::string::npos) << e.what();
    }
  }
  PluginFieldCollection wrong_type;
  wrong_type.add(PluginField::int64("temperature", {2}));
  EXPECT_THROW(creator.create("sw2", wrong_type), Error);
  EXPECT_THROW(create_registered("TemperatureSwish", wrong_type), Error);
  PluginFieldCollection two_values;
  two_values.add(PluginField::float32("temperature", {1.0f, 2.0f}));
  EXPECT_THROW(creator.create("sw3", two_values), Error);
  EXPECT_THROW(create_registered("TemperatureSwish", one_float32_field("temprature", 1.0f)), Error);
}

}  // namespace
}  // namespace kiln::plugins
