// The public headers' shape (issue 13): runtime.h stands alone without the builder, the
// constructors and impl() of Engine and ExecutionContext are the library's, and layer
// attributes and plugin fields share one value type (plugin.h: PluginField::value /
// from_value, attr_type_of).
#include "kiln/runtime.h"  // first and alone: it must compile without the builder's header

// Names of the builder's and the network's headers as aliases: were builder.h or network.h
// included by runtime.h, these would conflict with their classes and the file would not compile.
namespace kiln {
using Builder = int;
using BuilderConfig = int;
using ConvolutionDesc = int;
}  // namespace kiln

#include <gtest/gtest.h>

#include <climits>
#include <memory>
#include <type_traits>

#include "kiln/error.h"
#include "kiln/plugin.h"

namespace kiln {
namespace {

static_assert(!std::is_constructible_v<Engine, std::unique_ptr<EngineImpl>>,
              "Engine is made by Runtime::deserialize only");
static_assert(!std::is_constructible_v<ExecutionContext, std::shared_ptr<Engine>, std::unique_ptr<ContextImpl>>,
              "ExecutionContext is made by Engine::create_execution_context only");

TEST(PublicHeaders, RuntimeHeaderHasProfilesWithoutTheBuilder) {
  OptimizationProfile p;  // from kiln/profile.h, through runtime.h
  p.set_dimensions("x", {1, 3}, {2, 3}, {4, 3});
  EXPECT_EQ(p.opt("x"), (Dims{2, 3}));
}

TEST(PublicHeaders, PluginFieldTypesMapToAttributeTypes) {
  EXPECT_EQ(attr_type_of(PluginFieldType::kFloat32), AttrType::kFloats);
  EXPECT_EQ(attr_type_of(PluginFieldType::kFloat64), AttrType::kFloats);
  EXPECT_EQ(attr_type_of(PluginFieldType::kInt32), AttrType::kInts);
  EXPECT_EQ(attr_type_of(PluginFieldType::kInt64), AttrType::kInts);
  EXPECT_EQ(attr_type_of(PluginFieldType::kString), AttrType::kString);
  EXPECT_EQ(attr_type_of(PluginFieldType::kTensor), AttrType::kTensor);
}

TEST(PublicHeaders, PluginFieldValuesRoundTripThroughAttributeValues) {
  const PluginField fields[] = {
      PluginField::float32("a", {0.1f, -2.5f}),
      PluginField::float64("b", {0.1, 1e300}),
      PluginField::int32("c", {INT32_MIN, 7}),
      PluginField::int64("d", {INT64_MAX}),
      PluginField::string("e", "text"),
      PluginField::tensor_value("f", HostTensor::from_vector<float>(DataType::kFloat32, {2}, {1.f, 2.f}))};
  for (const PluginField& f : fields) {
    const AttrValue v = f.value();
    EXPECT_EQ(attr_type_of(v), attr_type_of(f.type)) << f.name;
    const PluginField back = PluginField::from_value(f.name, f.type, v);
    EXPECT_EQ(back.name, f.name);
    EXPECT_EQ(back.type, f.type);
    EXPECT_EQ(back.f32, f.f32);
    EXPECT_EQ(back.f64, f.f64);
    EXPECT_EQ(back.i32, f.i32);
    EXPECT_EQ(back.i64, f.i64);
    EXPECT_EQ(back.str, f.str);
    EXPECT_EQ(back.tensor.data(), f.tensor.data());  // tensors share storage
  }
  EXPECT_EQ(std::get<std::vector<double>>(PluginField::float32("a", {0.1f}).value()),
            std::vector<double>{double(0.1f)});
}

TEST(PublicHeaders, PluginFieldFromValueChecksTypeAndRange) {
  try {
    (void)PluginField::from_value("n", PluginFieldType::kInt32, std::vector<int64_t>{int64_t{1} << 40});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "field 'n' value 1099511627776 does not fit int32");
  }
  try {
    (void)PluginField::from_value("n", PluginFieldType::kFloat32, std::string("x"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "field 'n' (float32) takes floats, got string");
  }
}

TEST(PublicHeaders, AttributesGetChecksTheType) {
  Attributes a;
  a.set("k", std::vector<int64_t>{1, 2});
  EXPECT_EQ(attr_type_of(a.get("k", AttrType::kInts)), AttrType::kInts);
  try {
    (void)a.get("k", AttrType::kFloats);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attribute 'k' has type ints, expected floats");
  }
  EXPECT_THROW((void)a.get("absent", AttrType::kInt), Error);
}

}  // namespace
}  // namespace kiln
