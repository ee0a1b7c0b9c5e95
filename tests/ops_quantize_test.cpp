// Tests of the quantization layers (Quantize, Dequantize) and of the ONNX integer operators the
// importer composes from them and the math layers (MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv, DynamicQuantizeLinear): shape/type rules and their messages, the reference
// kernels against hand-computed values (round half to even, saturation, per-axis and blocked
// parameters) and the ONNX backend conformance tests. The ONNX models against ONNX Runtime's
// outputs (tests/data/quantize, generate.py there; integer outputs must match exactly) are cases
// of the op table (tests/op_table.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/network.h"
#include "tests/ort_model_case.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

using test::ortcase::infer_error;
using test::ortcase::infer_outputs;
constexpr DataType kF32 = DataType::kFloat32;
constexpr DataType kU8 = DataType::kUInt8;
constexpr DataType kI8 = DataType::kInt8;

Attributes quant_attrs(int64_t axis = 1, int64_t block = 0) {
  Attributes a;
  a.set("axis", axis);
  a.set("block_size", block);
  return a;
}

TEST(QuantizeShapes, TypesFollowTheZeroPointOrTheAttribute) {
  auto r = infer_outputs(kLayerQuantize, {{kF32, {2, 3}}, {kF32, {}}, {kI8, {}}}, quant_attrs());
  EXPECT_EQ(r.at(0).first, kI8);
  EXPECT_EQ(r.at(0).second, (Dims{2, 3}));
  r = infer_outputs(kLayerQuantize, {{kF32, {2, 3}}, {kF32, {3}}}, quant_attrs());
  EXPECT_EQ(r.at(0).first, kU8);  // no zero point: output_type's default
  Attributes a = quant_attrs();
  a.set("output_type", std::string("int8"));
  EXPECT_EQ(infer_outputs(kLayerQuantize, {{kF32, {4}}, {kF32, {1}}}, a).at(0).first, kI8);
  r = infer_outputs(kLayerDequantize, {{DataType::kInt32, {5, 4}}, {DataType::kFloat16, {2, 4}}}, quant_attrs(0, 3));
  EXPECT_EQ(r.at(0).first, DataType::kFloat16);
  EXPECT_EQ(r.at(0).second, (Dims{5, 4}));
}

TEST(QuantizeShapes, ErrorsNameTheRule) {
  EXPECT_NE(infer_error(kLayerQuantize, {{kF32, {2, 3}}, {kF32, {2}}}, quant_attrs()).find("per axis 1"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerQuantize, {{kF32, {2, 6}}, {kF32, {2, 2}}}, quant_attrs(1, 2)).find("needs 2x3"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerQuantize, {{kF32, {3}}, {kF32, {3}}, {kU8, {1}}}, quant_attrs(0))
                .find("must have the dims of scale"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerQuantize, {{kF32, {3}}, {kF32, {}}, {DataType::kInt32, {}}}, quant_attrs(0))
                .find("must be int8 or uint8"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerQuantize, {{kU8, {3}}, {kF32, {}}}, quant_attrs(0)).find("floating-point"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerDequantize, {{kF32, {3}}, {kF32, {}}}, quant_attrs(0)).find("int8, uint8 or int32"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerDequantize, {{kU8, {3}}, {kF32, {}}, {kI8, {}}}, quant_attrs(0))
                .find("zero point has type int8"),
            std::string::npos);
}

// The hand-computed cases (round half to even and saturation; per-axis dequantization) are in
// the op table, tests/data/quantize/cases.json (quantize_ties, dequantize_axis).

class QuantizeConformance : public ::testing::TestWithParam<const char*> {};
TEST_P(QuantizeConformance, MatchesTheOnnxBackendTest) { test::ortcase::check_node_test(GetParam(), 0.0, 1e-6); }
INSTANTIATE_TEST_SUITE_P(Node, QuantizeConformance,
                         ::testing::Values("test_quantizelinear", "test_quantizelinear_axis", "test_dequantizelinear",
                                           "test_dequantizelinear_axis", "test_dynamicquantizelinear",
                                           "test_dynamicquantizelinear_max_adjusted",
                                           "test_dynamicquantizelinear_min_adjusted", "test_matmulinteger",
                                           "test_convinteger_with_padding", "test_convinteger_without_padding",
                                           "test_qlinearmatmul_2D", "test_qlinearmatmul_3D", "test_qlinearconv"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
