// Tests of the plugin conformance suite (src/plugins/plugin_check.h, `kiln plugin check`): every
// deliberately broken plugin of tests/broken_plugins/ must FAIL with the message that names its
// mistake, and the correct ones (GoodAffine and kiln's built-in plugins) must PASS on the CPU.
// The suite is what catches users' plugin bugs, so these tests pin down that it really does.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/error.h"
#include "kiln/plugin.h"
#include "src/plugins/plugin_check.h"

namespace kiln {
namespace {

PluginFieldCollection affine_fields(float alpha, float beta) {
  PluginFieldCollection f;
  f.add(PluginField::float32("alpha", {alpha}));
  f.add(PluginField::float32("beta", {beta}));
  return f;
}

// Non-default fields, so that swapping alpha and beta changes the results.
PluginCheckReport check_test_plugin(const std::string& name, DeviceType device = DeviceType::kCPU) {
  if (PluginRegistry::instance().find(name, "1", "kiln_test") == nullptr) {
    ADD_FAILURE() << "test plugin '" << name
                  << "' is not registered: are tests/broken_plugins/*.cpp linked into "
                     "kiln_tests (tests/plugin_tests.cmake)?";
    return {};
  }
  PluginCheckOptions o;
  o.name = name;
  o.plugin_namespace = "kiln_test";
  o.device = device;
  o.fields = affine_fields(2.0f, 0.5f);
  return check_plugin(o);
}

std::string table(const PluginCheckReport& r) {
  std::ostringstream s;
  print_plugin_check_report(r, s);
  return s.str();
}

// The row `check` FAILs and its message contains `text`.
::testing::AssertionResult fails_with(const PluginCheckReport& r, const std::string& check, const std::string& text) {
  if (r.passed()) return ::testing::AssertionFailure() << "the suite passed:\n" << table(r);
  for (const auto& c : r.checks) {
    if (c.name.rfind(check, 0) == 0 && c.status == CheckStatus::kFail && c.message.find(text) != std::string::npos)
      return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no FAIL row '" << check << "...' mentions \"" << text << "\":\n" << table(r);
}

::testing::AssertionResult passes(const PluginCheckReport& r) {
  if (!r.passed() || r.checks.empty()) return ::testing::AssertionFailure() << table(r);
  return ::testing::AssertionSuccess();
}

// ---- the control ------------------------------------------------------------------------------

TEST(PluginCheck, PassesCorrectPluginWithBytesWorkspaceFp16AndChannelsLast) {
  const PluginCheckReport r = check_test_plugin("GoodAffine");
  ASSERT_TRUE(passes(r));
  // Each part really ran: both types and both formats, the byte round trip, every shape rank.
  for (const char* row :
       {"types float32:linear -> float32:linear", "types float16:linear -> float16:linear",
        "types float16:channels_last -> float16:channels_last", "bytes round trip", "fields round trip", "clone",
        "workspace", "dynamic dims", "shape 2x3x13x7", "shape 127", "shape 2x3x5x7x13"}) {
    const PluginCheckResult* c = r.find(row);
    ASSERT_NE(c, nullptr) << row << "\n" << table(r);
    EXPECT_EQ(c->status, CheckStatus::kPass) << row << "\n" << table(r);
  }
  EXPECT_EQ(r.find("cuda graph capture")->status, CheckStatus::kSkip);
  EXPECT_EQ(r.num_inputs, 1);
  EXPECT_EQ(r.num_outputs, 1);
}

// ---- each broken plugin fails with its message -------------------------------------------------

TEST(PluginCheck, FailsWrongOutputShape) {
  const auto r = check_test_plugin("BrokenWrongShape");
  EXPECT_TRUE(fails_with(r, "shape 2x3x13x7", "output_dims says output 0 is 2x3x13x8"));
  EXPECT_TRUE(fails_with(r, "shape 2x3x13x7", "but the kernel wrote 546 of them"));
}

TEST(PluginCheck, FailsFp16ClaimWithoutFp16Kernel) {
  const auto r = check_test_plugin("BrokenHalfAsFloat");
  EXPECT_TRUE(fails_with(r, "types float16:linear -> float16:linear", "past its end"));
  // float32 itself is fine.
  ASSERT_NE(r.find("types float32:linear"), nullptr);
  EXPECT_EQ(r.find("types float32:linear")->status, CheckStatus::kPass) << table(r);
}

TEST(PluginCheck, FailsSerializedSizeMismatch) {
  EXPECT_TRUE(fails_with(check_test_plugin("BrokenSerializedSize"), "bytes round trip",
                         "deserialize() read past the 4 bytes serialize() wrote"));
}

TEST(PluginCheck, FailsSwappedFieldOrderInBytes) {
  const auto r = check_test_plugin("BrokenFieldOrder");
  EXPECT_TRUE(fails_with(r, "bytes round trip", "computes different results"));
  EXPECT_TRUE(fails_with(r, "bytes round trip", "disagree on the layout"));
}

TEST(PluginCheck, FailsSwappedFieldNames) {
  EXPECT_TRUE(fails_with(check_test_plugin("BrokenFieldsSwapped"), "fields round trip",
                         "a plugin re-created from fields() {alpha=0.5, beta=2} computes different results"));
}

TEST(PluginCheck, FailsScratchWithoutWorkspace) {
  // The largest tested shape has 3*2*5*127 = 3810 floats of scratch.
  const auto r = check_test_plugin("BrokenScratch");
  EXPECT_TRUE(fails_with(r, "workspace", "bytes of scratch but declared workspace_size() = 0"));
  EXPECT_TRUE(fails_with(r, "workspace", "wrote 52 bytes of scratch")) << "the first run is shape 13";
}

TEST(PluginCheck, FailsElementCountIgnoringBatch) {
  const auto r = check_test_plugin("BrokenIgnoresBatch");
  EXPECT_TRUE(fails_with(r, "shape 2x3x13x7", "but the kernel wrote 273 of them"));
  EXPECT_TRUE(fails_with(r, "shape 2x3x13x7", "(element count ignores the batch?)"));
  // Batch 1 is fine: the mistake only shows with batch > 1.
  ASSERT_NE(r.find("shape 1x3x13x13"), nullptr);
  EXPECT_EQ(r.find("shape 1x3x13x13")->status, CheckStatus::kPass) << table(r);
}

TEST(PluginCheck, FailsConstantDynamicDim) {
  EXPECT_TRUE(fails_with(check_test_plugin("BrokenConstantDims"), "dynamic dims",
                         "output dim 0 is the constant 1, it should follow the input's dynamic dim"));
}

TEST(PluginCheck, CudaFailsDefaultStreamAndDeviceSync) {
  std::string why;
  if (!plugin_check_device_available(DeviceType::kCUDA, &why)) GTEST_SKIP() << why;
  for (const char* name : {"BrokenDefaultStream", "BrokenDeviceSync"}) {
    EXPECT_TRUE(fails_with(check_test_plugin(name, DeviceType::kCUDA), "cuda graph capture",
                           "enqueue launched on the default stream or synchronized the device: launch only on the "
                           "given stream"))
        << name;
  }
  EXPECT_TRUE(passes(check_test_plugin("GoodCudaAffine", DeviceType::kCUDA)));
}

// ---- kiln's built-in plugins pass on the CPU ---------------------------------------------------

class BuiltinPluginCheck : public ::testing::TestWithParam<const char*> {};

TEST_P(BuiltinPluginCheck, PassesOnCpu) {
  if (PluginRegistry::instance().find(GetParam()) == nullptr) GTEST_SKIP() << GetParam() << " is not built in yet";
  PluginCheckOptions o;
  o.name = GetParam();
  const PluginCheckReport r = check_plugin(o);
  EXPECT_TRUE(passes(r));
}

TEST_P(BuiltinPluginCheck, PassesOnCuda) {
  std::string why;
  if (!plugin_check_device_available(DeviceType::kCUDA, &why)) GTEST_SKIP() << why;
  if (PluginRegistry::instance().find(GetParam()) == nullptr) GTEST_SKIP() << GetParam() << " is not built in yet";
  PluginCheckOptions o;
  o.name = GetParam();
  o.device = DeviceType::kCUDA;
  EXPECT_TRUE(passes(check_plugin(o)));
}

INSTANTIATE_TEST_SUITE_P(Builtins, BuiltinPluginCheck,
                         ::testing::Values("TemperatureSwish", "ThresholdReLU", "GELU", "Mish"));

// ---- the pieces the CLI uses -------------------------------------------------------------------

TEST(PluginCheck, ParsesFieldsTypedBySchema) {
  const PluginCreator* creator = PluginRegistry::instance().find("GoodAffine", "1", "kiln_test");
  ASSERT_NE(creator, nullptr);
  const PluginFieldCollection f = parse_plugin_fields("alpha=2.5,beta=-1e-3", *creator);
  EXPECT_EQ(f.get_float32("alpha"), 2.5f);
  EXPECT_EQ(f.get_float32("beta"), -1e-3f);
  EXPECT_EQ(plugin_fields_to_string(f), "alpha=2.5, beta=-0.001");
  EXPECT_THROW(parse_plugin_fields("gamma=1", *creator), Error);
  EXPECT_THROW(parse_plugin_fields("alpha=abc", *creator), Error);
  EXPECT_THROW(parse_plugin_fields("alpha", *creator), Error);
  try {
    parse_plugin_fields("gamma=1", *creator);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its fields: alpha, beta"), std::string::npos) << e.what();
  }
}

TEST(PluginCheck, UnknownPluginIsAnErrorNamingPlugins) {
  PluginCheckOptions o;
  o.name = "NoSuchPlugin";
  try {
    check_plugin(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--plugins"), std::string::npos) << e.what();
  }
}

TEST(PluginCheck, ReportTableListsEveryCheck) {
  const PluginCheckReport r = check_test_plugin("BrokenScratch");
  const std::string text = table(r);
  EXPECT_NE(text.find("CHECK"), std::string::npos);
  EXPECT_NE(text.find("FAIL"), std::string::npos);
  EXPECT_NE(text.find("FAILED"), std::string::npos) << text;
  EXPECT_NE(text.find("'BrokenScratch' version '1' namespace 'kiln_test'"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln
