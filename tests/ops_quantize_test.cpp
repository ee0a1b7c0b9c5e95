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
  EXPECT_NE(infer_error(kLayerQuantize, {{kF32, {3}}, {kF32, {3}}, {kU8, {1}}}, quant_attrs(0)).find("must have the dims of scale"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerQuantize, {{kF32, {3}}, {kF32, {}}, {DataType::kInt32, {}}}, quant_attrs(0))
                .find("must be int8 or uint8"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerQuantize, {{kU8, {3}}, {kF32, {}}}, quant_attrs(0)).find("floating-point"), std::string::npos);
  EXPECT_NE(infer_error(kLayerDequantize, {{kF32, {3}}, {kF32, {}}}, quant_attrs(0)).find("int8, uint8 or int32"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerDequantize, {{kU8, {3}}, {kF32, {}}, {kI8, {}}}, quant_attrs(0)).find("zero point has type int8"),
            std::string::npos);
}

HostTensor f32(const Dims& d, const std::vector<float>& v) { return HostTensor::from_vector(kF32, d, v); }

// Hand-computed: scale 0.5 per tensor, zero point 10 (uint8); x / 0.5 = -1.5 -0.5 0.5 1.5 2.5 (ties
// to even: -2 -0 0 2 2), then saturation at 0 and 255.
TEST(QuantizeReference, RoundsHalfToEvenAndSaturates) {
  test::OpCase c;
  c.name = "quantize_ties";
  c.layer_type = kLayerQuantize;
  c.attrs = quant_attrs();
  c.inputs.push_back({kF32, {7}, false, f32(Dims{7}, {-0.75f, -0.25f, 0.25f, 0.75f, 1.25f, -100.0f, 200.0f})});
  c.inputs.push_back({kF32, {}, false, f32(Dims{}, {0.5f})});
  c.inputs.push_back({kU8, {}, false, HostTensor::from_vector(kU8, Dims{}, std::vector<uint8_t>{10})});
  for (const auto& r : test::run_op_case(c)) EXPECT_EQ(r.outcome, test::Outcome::kPassed) << r.tactic << ": " << r.message;
  const auto out = test::reference_outputs(c).at(0);
  const std::vector<int> expected{8, 10, 10, 12, 12, 0, 255};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(out.as<uint8_t>()[i], expected[static_cast<size_t>(i)]) << i;
}

// Hand-computed: per-axis dequantization along axis 0 of int8 [2, 2]: (x - zp[i]) * scale[i].
TEST(QuantizeReference, DequantizePerAxisByHand) {
  test::OpCase c;
  c.name = "dequantize_axis";
  c.layer_type = kLayerDequantize;
  c.attrs = quant_attrs(0);
  c.inputs.push_back({kI8, {2, 2}, false, HostTensor::from_vector(kI8, Dims{2, 2}, std::vector<int8_t>{-128, 127, 3, -4})});
  c.inputs.push_back({kF32, {2}, false, f32(Dims{2}, {0.5f, 2.0f})});
  c.inputs.push_back({kI8, {2}, false, HostTensor::from_vector(kI8, Dims{2}, std::vector<int8_t>{1, -4})});
  for (const auto& r : test::run_op_case(c)) EXPECT_EQ(r.outcome, test::Outcome::kPassed) << r.tactic << ": " << r.message;
  const auto out = test::reference_outputs(c).at(0);
  const std::vector<float> expected{-64.5f, 63.0f, 14.0f, 0.0f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out.as<float>()[i], expected[static_cast<size_t>(i)]) << i;
}

class QuantizeConformance : public ::testing::TestWithParam<const char*> {};
TEST_P(QuantizeConformance, MatchesTheOnnxBackendTest) { test::ortcase::check_node_test(GetParam(), 0.0, 1e-6); }
INSTANTIATE_TEST_SUITE_P(
    Node, QuantizeConformance,
    ::testing::Values("test_quantizelinear", "test_quantizelinear_axis", "test_dequantizelinear",
                      "test_dequantizelinear_axis", "test_dynamicquantizelinear",
                      "test_dynamicquantizelinear_max_adjusted", "test_dynamicquantizelinear_min_adjusted",
                      "test_matmulinteger", "test_convinteger_with_padding", "test_convinteger_without_padding",
                      "test_qlinearmatmul_2D", "test_qlinearmatmul_3D", "test_qlinearconv"),
    [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
