// Tests of the Mish plugin's CPU kernel against x * tanh(log1p(exp(x))) in double (the
// definition; no cancellation anywhere), plus its registration and its lack of fields.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "plugins/common/unary_plugin_test_util.h"
#include "plugins/mish/mish.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

double mish_reference(double x) { return x * std::tanh(std::log1p(std::exp(x))); }

// e^x has condition number |x|; x itself is exact, so only a few roundings remain, plus
// |x| * 2^-24 where the kernel's e(e + 2) and n / (n + 2) meet large exponents.
const Tolerance kMishTolerance = [](float x, double ref) {
  return (8.0 + std::fabs(x)) * 0x1p-24 * std::fabs(ref) + 1.2e-38;
};

TEST(MishPlugin, RegisteredWithIdentityShapes) { check_identity("Mish"); }

TEST(MishPlugin, CpuMatchesReferenceOnOddSizes) {
  auto plugin = create_registered("Mish", {});
  check_odd_sizes(*plugin, mish_reference, kMishTolerance);
}

TEST(MishPlugin, CpuMatchesReferenceOnRanks1To5) {
  auto plugin = create_registered("Mish", {});
  check_ranks(*plugin, mish_reference, kMishTolerance);
}

TEST(MishPlugin, CpuMisalignedAndInPlace) {
  auto plugin = create_registered("Mish", {});
  check_misaligned_and_in_place(*plugin, mish_reference, kMishTolerance);
}

TEST(MishPlugin, CpuMatchesReferenceAroundTheCutover) {
  // y = x from x = 20 on; both sides must agree with the definition.
  auto plugin = create_registered("Mish", {});
  std::vector<float> x;
  for (float v = 19.0f; v < 21.0f; v += 0.0625f) x.push_back(v);
  for (float v = -90.0f; v < -19.0f; v += 0.5f) x.push_back(v);
  EXPECT_TRUE(matches_reference(x, run_cpu(*plugin, x), mish_reference, kMishTolerance));
}

TEST(MishPlugin, SpecialValues) {
  auto plugin = create_registered("Mish", {});
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> y = run_cpu(*plugin, {std::nanf(""), inf, 100.0f, -200.0f, 0.0f});
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 100.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 0.0f);
}

TEST(MishPlugin, HasNoFields) {
  EXPECT_TRUE(MishCreator().field_schema().empty());
  const MishPlugin original("mish");
  EXPECT_TRUE(original.fields().all().empty());
  auto recreated = create_registered("Mish", original.fields());
  MishPlugin original_copy = original;
  const std::vector<float> x = make_inputs(1001);
  EXPECT_EQ(run_cpu(original_copy, x), run_cpu(*recreated, x));
}

TEST(MishPlugin, RejectsAnyField) {
  PluginFieldCollection fields;
  fields.add(PluginField::float32("beta", {1.0f}));
  try {
    MishCreator().create("mish_3", fields);
    FAIL() << "accepted a field";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beta"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mish_3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(create_registered("Mish", fields), Error);
}

}  // namespace
}  // namespace kiln::plugins
