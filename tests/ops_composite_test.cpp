// Tests of the ONNX ops kiln imports as compositions of existing layers (DepthToSpace,
// SpaceToDepth, Size, EyeLike, Compress, Shrink, LpPool; src/onnx/ops_composite.cpp): whole
// ONNX models with static and dynamic dims against ONNX Runtime (tests/data/composite, made by its
// generate.py), that the compositions add no layer types of their own, and that models kiln
// cannot import are rejected naming the node.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/kiln.h"
#include "tests/onnx_case.h"

namespace kiln {
namespace {

const std::string kDataDir = std::string(KILN_SOURCE_DIR) + "/tests/data/composite";

class CompositeOnnx : public ::testing::TestWithParam<test::OnnxDataCase> {};

TEST_P(CompositeOnnx, MatchesOnnxRuntime) { test::run_onnx_data_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Data, CompositeOnnx, ::testing::ValuesIn(test::load_onnx_data_cases(kDataDir)),
                         [](const ::testing::TestParamInfo<test::OnnxDataCase>& info) { return info.param.name; });

TEST(CompositeOnnxData, CasesExist) {
  EXPECT_GE(test::load_onnx_data_cases(kDataDir).size(), 25u) << kDataDir << "/cases.json missing or truncated";
}

std::set<std::string> layer_types(const std::string& model) {
  Network net;
  OnnxParser(net).parse_file(kDataDir + "/" + model + ".onnx");
  std::set<std::string> types;
  for (int i = 0; i < net.num_layers(); ++i) types.insert(net.layer(i)->type());
  return types;
}

TEST(CompositeImport, UsesOnlyGeneralLayers) {
  EXPECT_EQ(layer_types("depthtospace_dcr_dynamic"),
            (std::set<std::string>{kLayerShuffle, kLayerShape, kLayerElementWise, kLayerConstant}));
  EXPECT_EQ(layer_types("size_static"), (std::set<std::string>{kLayerShape, kLayerReduce}));
  EXPECT_EQ(layer_types("shrink_soft"), (std::set<std::string>{kLayerFusedElementWise}));
  EXPECT_EQ(layer_types("compress_flat"), (std::set<std::string>{kLayerShuffle, kLayerGather, kLayerConstant}));
  EXPECT_TRUE(layer_types("lppool_p2_3x3").count(kLayerConvolution));
  EXPECT_TRUE(layer_types("eyelike_k0").count(kLayerTrilu));
  // A run-time condition: the positions come from NonZero (a data-dependent size; run in
  // tests/data_dependent_test.cpp and the conformance suite's test_compress_*).
  EXPECT_EQ(layer_types("reject_compress_runtime_condition"),
            (std::set<std::string>{kLayerNonZero, kLayerShuffle, kLayerGather}));
}

std::string parse_error(const std::string& model) {
  Network net;
  try {
    OnnxParser(net).parse_file(kDataDir + "/" + model + ".onnx");
  } catch (const ParseError& e) {
    return e.what();
  }
  ADD_FAILURE() << model << " imported without an error";
  return "";
}

TEST(CompositeImport, RejectsNamingTheNode) {
  const std::string d2s = parse_error("reject_depthtospace_bad_mode");
  EXPECT_NE(d2s.find("d2s"), std::string::npos) << d2s;
  EXPECT_NE(d2s.find("XYZ"), std::string::npos) << d2s;
}

}  // namespace
}  // namespace kiln
