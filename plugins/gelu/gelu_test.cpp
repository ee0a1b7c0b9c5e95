// Tests of the GELU plugin's CPU kernels against double-precision evaluations of the two
// definitions, plus its registration, fields, defaults and the `approximation` check.
//
// The references avoid the cancellation of 1 + erf / 1 + tanh for x < 0 with textbook
// identities (1 + erf(-a) = erfc(a); 1 + tanh(u) = e^u / cosh(u)), and use the definitions
// as written for x >= 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "plugins/common/unary_plugin_test_util.h"
#include "plugins/gelu/gelu.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

double gelu_erf_reference(double x) {
  const double a = x / std::sqrt(2.0);
  return x >= 0 ? 0.5 * x * (1.0 + std::erf(a)) : 0.5 * x * std::erfc(-a);
}

double gelu_tanh_reference(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x >= 0 ? 0.5 * x * (1.0 + std::tanh(u)) : 0.5 * x * std::exp(u) / std::cosh(u);
}

// erf: the float argument x/sqrt2 is rounded (2^-24 relative); erfc(a) has condition number
// ~2a^2 for large a. tanh: u is rounded a few times and e^-2u has condition number 2|u|.
const Tolerance kErfTolerance = [](float x, double ref) {
  return (4.0 + 2.0 * x * x) * 0x1p-24 * std::fabs(ref) + 1.2e-38;
};
const Tolerance kTanhTolerance = [](float x, double ref) {
  const double u = std::fabs(0.7978845608 * (x + 0.044715 * x * x * x));
  return (4.0 + 6.0 * u) * 0x1p-24 * std::fabs(ref) + 1.2e-38;
};

struct Form {
  const char* approximation;
  double (*reference)(double);
  const Tolerance* tolerance;
};
const Form kForms[] = {{"erf", gelu_erf_reference, &kErfTolerance}, {"tanh", gelu_tanh_reference, &kTanhTolerance}};

PluginFieldCollection approximation_field(const std::string& value) {
  PluginFieldCollection c;
  c.add(PluginField::string("approximation", value));
  return c;
}

TEST(GeluPlugin, RegisteredWithIdentityShapes) { check_identity("GELU"); }

TEST(GeluPlugin, CpuMatchesReferenceOnOddSizes) {
  for (const Form& form : kForms) {
    auto plugin = create_registered("GELU", approximation_field(form.approximation));
    SCOPED_TRACE(form.approximation);
    check_odd_sizes(*plugin, form.reference, *form.tolerance);
  }
}

TEST(GeluPlugin, CpuMatchesReferenceOnRanks1To5) {
  for (const Form& form : kForms) {
    auto plugin = create_registered("GELU", approximation_field(form.approximation));
    SCOPED_TRACE(form.approximation);
    check_ranks(*plugin, form.reference, *form.tolerance);
  }
}

TEST(GeluPlugin, CpuMisalignedAndInPlace) {
  for (const Form& form : kForms) {
    auto plugin = create_registered("GELU", approximation_field(form.approximation));
    SCOPED_TRACE(form.approximation);
    check_misaligned_and_in_place(*plugin, form.reference, *form.tolerance);
  }
}

TEST(GeluPlugin, FormsDifferByTheApproximationError) {
  // The tanh form approximates the erf form to ~1e-3 absolute; a mix-up of the two would show.
  auto erf_plugin = create_registered("GELU", approximation_field("erf"));
  auto tanh_plugin = create_registered("GELU", approximation_field("tanh"));
  const std::vector<float> x = make_inputs(2000, 5, -6.0f, 6.0f);
  const std::vector<float> a = run_cpu(*erf_plugin, x), b = run_cpu(*tanh_plugin, x);
  double max_diff = 0;
  for (size_t i = 0; i < x.size(); ++i) max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  EXPECT_GT(max_diff, 1e-5);
  EXPECT_LT(max_diff, 1e-3);
}

TEST(GeluPlugin, SpecialValues) {
  for (const Form& form : kForms) {
    auto plugin = create_registered("GELU", approximation_field(form.approximation));
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> y = run_cpu(*plugin, {std::nanf(""), inf, 30.0f, -30.0f, 0.0f});
    EXPECT_TRUE(std::isnan(y[0])) << form.approximation;
    EXPECT_EQ(y[1], inf) << form.approximation;
    EXPECT_EQ(y[2], 30.0f) << form.approximation;
    EXPECT_EQ(y[3], 0.0f) << form.approximation;
    EXPECT_EQ(y[4], 0.0f) << form.approximation;
  }
}

TEST(GeluPlugin, FieldsRoundTrip) {
  for (const GeluApproximation approximation : {GeluApproximation::kErf, GeluApproximation::kTanh}) {
    const GeluPlugin original("gelu", approximation);
    const PluginFieldCollection fields = original.fields();
    ASSERT_NE(fields.find("approximation"), nullptr);
    EXPECT_EQ(fields.find("approximation")->type, PluginFieldType::kString);
    EXPECT_EQ(fields.find("approximation")->str, to_string(approximation));
    auto recreated = create_registered("GELU", fields);
    EXPECT_EQ(dynamic_cast<GeluPlugin&>(*recreated).approximation(), approximation);

    GeluPlugin original_copy = original;
    const std::vector<float> x = make_inputs(1001);
    EXPECT_EQ(run_cpu(original_copy, x), run_cpu(*recreated, x));
  }
}

TEST(GeluPlugin, DefaultApproximationIsErf) {
  const auto schema = GeluCreator().field_schema();
  ASSERT_EQ(schema.size(), 1u);
  EXPECT_EQ(schema[0].name, "approximation");
  EXPECT_EQ(schema[0].type, PluginFieldType::kString);
  EXPECT_FALSE(schema[0].required);
  EXPECT_EQ(schema[0].default_value.str, "erf");

  std::vector<std::unique_ptr<Plugin>> plugins;
  plugins.push_back(create_registered("GELU", {}));
  plugins.push_back(GeluCreator().create("direct", PluginFieldCollection{}));
  for (const auto& plugin : plugins) {
    EXPECT_EQ(plugin->fields().find("approximation")->str, "erf");
    const std::vector<float> x = make_inputs(200);
    EXPECT_TRUE(matches_reference(x, run_cpu(*plugin, x), gelu_erf_reference, kErfTolerance));
  }
}

TEST(GeluPlugin, RejectsUnknownApproximation) {
  for (const std::string bad : {"none", "ERF", "", "tanh "}) {
    try {
      create_registered("GELU", approximation_field(bad), "gelu_7");
      FAIL() << "accepted approximation '" << bad << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("gelu_7"), std::string::npos) << message;
      EXPECT_NE(message.find("approximation"), std::string::npos) << message;
      EXPECT_NE(message.find("\"erf\""), std::string::npos) << message;
      EXPECT_NE(message.find("\"tanh\""), std::string::npos) << message;
    }
  }
  PluginFieldCollection wrong_type;
  wrong_type.add(PluginField::int64("approximation", {1}));
  EXPECT_THROW(GeluCreator().create("g", wrong_type), Error);
}

}  // namespace
}  // namespace kiln::plugins
