// Tests of the ThresholdReLU plugin's CPU kernel against max(x, threshold) in double (exact:
// the result is one of the two inputs), plus its registration, fields, defaults and field checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "plugins/common/unary_plugin_test_util.h"
#include "plugins/threshold_relu/threshold_relu.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

Reference threshold_reference(float threshold) {
  return [t = static_cast<double>(threshold)](double x) { return std::max(x, t); };
}

const Tolerance kExact = [](float, double) { return 0.0; };

TEST(ThresholdReluPlugin, RegisteredWithIdentityShapes) { check_identity("ThresholdReLU"); }

TEST(ThresholdReluPlugin, CpuMatchesReferenceOnOddSizes) {
  for (const float t : {0.0f, -1.25f, 3.0f, 19.5f, -25.0f}) {
    auto plugin = create_registered("ThresholdReLU", one_float32_field("threshold", t));
    SCOPED_TRACE("threshold " + std::to_string(t));
    check_odd_sizes(*plugin, threshold_reference(t), kExact);
  }
}

TEST(ThresholdReluPlugin, CpuMatchesReferenceOnRanks1To5) {
  auto plugin = create_registered("ThresholdReLU", one_float32_field("threshold", 0.75f));
  check_ranks(*plugin, threshold_reference(0.75f), kExact);
}

TEST(ThresholdReluPlugin, CpuMisalignedAndInPlace) {
  auto plugin = create_registered("ThresholdReLU", one_float32_field("threshold", -2.0f));
  check_misaligned_and_in_place(*plugin, threshold_reference(-2.0f), kExact);
}

TEST(ThresholdReluPlugin, SpecialValues) {
  auto plugin = create_registered("ThresholdReLU", one_float32_field("threshold", 0.5f));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> y = run_cpu(*plugin, {std::nanf(""), inf, -inf, 0.5f, 0.49999997f});
  EXPECT_TRUE(std::isnan(y[0])) << "NaN must stay NaN, as in ReLU";
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[4], 0.5f);
}

TEST(ThresholdReluPlugin, FieldsRoundTrip) {
  const ThresholdReluPlugin original("relu", -0.125f);
  const PluginFieldCollection fields = original.fields();
  ASSERT_NE(fields.find("threshold"), nullptr);
  EXPECT_EQ(fields.find("threshold")->type, PluginFieldType::kFloat32);
  auto recreated = create_registered("ThresholdReLU", fields);
  EXPECT_EQ(recreated->fields().find("threshold")->f32, std::vector<float>{-0.125f});

  ThresholdReluPlugin original_copy = original;
  const std::vector<float> x = make_inputs(1001);
  EXPECT_EQ(run_cpu(original_copy, x), run_cpu(*recreated, x));
}

TEST(ThresholdReluPlugin, DefaultThresholdIsZero) {
  const auto schema = ThresholdReluCreator().field_schema();
  ASSERT_EQ(schema.size(), 1u);
  EXPECT_EQ(schema[0].name, "threshold");
  EXPECT_EQ(schema[0].type, PluginFieldType::kFloat32);
  EXPECT_FALSE(schema[0].required);
  EXPECT_EQ(schema[0].default_value.f32, std::vector<float>{0.0f});

  std::vector<std::unique_ptr<Plugin>> plugins;
  plugins.push_back(create_registered("ThresholdReLU", {}));
  plugins.push_back(ThresholdReluCreator().create("direct", PluginFieldCollection{}));
  for (const auto& plugin : plugins) {
    EXPECT_EQ(plugin->fields().find("threshold")->f32, std::vector<float>{0.0f});
    const std::vector<float> x = make_inputs(200);
    EXPECT_TRUE(matches_reference(x, run_cpu(*plugin, x), threshold_reference(0.0f), kExact));
  }
}

TEST(ThresholdReluPlugin, RejectsBadFieldValues) {
  const ThresholdReluCreator creator;
  for (const float bad : {std::nanf(""), -std::numeric_limits<float>::infinity()}) {
    try {
      creator.create("tr1", one_float32_field("threshold", bad));
      FAIL() << "accepted threshold " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("threshold"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tr1"), std::string::npos) << e.what();
    }
  }
  PluginFieldCollection wrong_type;
  wrong_type.add(PluginField::string("threshold", "0.5"));
  EXPECT_THROW(creator.create("tr2", wrong_type), Error);
  EXPECT_THROW(create_registered("ThresholdReLU", wrong_type), Error);
  PluginFieldCollection empty_array;
  empty_array.add(PluginField::float32("threshold", {}));
  EXPECT_THROW(creator.create("tr3", empty_array), Error);
}

}  // namespace
}  // namespace kiln::plugins
