// Tests of the BitShift layer: shape/type inference and its errors, the reference on signed
// types and out-of-range shift amounts (by hand), the harness checks, and whole ONNX BitShift
// models on uint8 against ONNX Runtime (tests/data/bitwise, made by its generate.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/onnx_case.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

test::InputSpec given(HostTensor value) {
  test::InputSpec s;
  s.type = value.type();
  s.dims = value.dims();
  s.value = std::move(value);
  return s;
}

HostTensor shift(const std::string& direction, const HostTensor& a, const HostTensor& b) {
  test::OpCase c;
  c.name = "hand_bitshift_" + direction;
  c.layer_type = kLayerBitShift;
  c.inputs = {given(a), given(b)};
  c.attrs.set("direction", direction);
  return test::reference_outputs(c).at(0);
}

TEST(BitShiftReference, LogicalShiftsOfBitPatterns) {
  const auto a = HostTensor::from_vector(DataType::kInt32, Dims{4}, std::vector<int32_t>{-8, 1, 5, 7});
  const auto b = HostTensor::from_vector(DataType::kInt32, Dims{4}, std::vector<int32_t>{1, 31, 32, -1});
  const HostTensor r = shift("right", a, b);
  EXPECT_EQ(r.as<int32_t>()[0], static_cast<int32_t>(0xFFFFFFF8u >> 1));  // logical, not arithmetic
  EXPECT_EQ(r.as<int32_t>()[1], 0);
  EXPECT_EQ(r.as<int32_t>()[2], 0);  // a shift of the width or more gives 0
  EXPECT_EQ(r.as<int32_t>()[3], 0);  // negative amounts are huge as unsigned
  const HostTensor l = shift("left", a, b);
  EXPECT_EQ(l.as<int32_t>()[0], -16);
  EXPECT_EQ(l.as<int32_t>()[1], static_cast<int32_t>(0x80000000u));
  // Broadcasting a [2,1] tensor against [3].
  const auto x = HostTensor::from_vector(DataType::kUInt8, Dims{2, 1}, std::vector<uint8_t>{1, 255});
  const auto s = HostTensor::from_vector(DataType::kUInt8, Dims{3}, std::vector<uint8_t>{0, 4, 8});
  const HostTensor y = shift("left", x, s);
  EXPECT_EQ(y.dims(), (Dims{2, 3}));
  EXPECT_EQ(std::vector<uint8_t>(y.as<uint8_t>(), y.as<uint8_t>() + 6), (std::vector<uint8_t>{1, 16, 0, 255, 240, 0}));
}

TEST(BitShiftShapes, ErrorsNameTheProblem) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{3});
  Attributes attrs;
  attrs.set("direction", std::string("left"));
  net.add_layer(kLayerBitShift, {a, b}, 1, attrs, "op");
  net.mark_output(net.find_layer("op")->output(0));
  BuilderConfig config;
  try {
    Builder().build_serialized(net, config);
    ADD_FAILURE() << "a float BitShift built";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'op'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  }
}

TEST(BitShiftReference, Harness) {
  for (DataType type : {DataType::kUInt8, DataType::kInt8, DataType::kInt32, DataType::kInt64}) {
    test::OpCase c;
    c.name = std::string("harness_bitshift_") + to_string(type);
    c.layer_type = kLayerBitShift;
    test::InputSpec a, b;
    a.type = b.type = type;
    a.dims = {3, 13};
    b.dims = {13};
    b.low = 0;
    b.high = 9;
    c.inputs = {a, b};
    c.attrs.set("direction", std::string("right"));
    for (const auto& r : test::run_op_case(c)) EXPECT_EQ(r.outcome, test::Outcome::kPassed) << c.name << ": " << r.message;
  }
}

const std::string kDataDir = std::string(KILN_SOURCE_DIR) + "/tests/data/bitwise";

class BitShiftOnnx : public ::testing::TestWithParam<test::OnnxDataCase> {};

TEST_P(BitShiftOnnx, MatchesOnnxRuntime) { test::run_onnx_data_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Data, BitShiftOnnx, ::testing::ValuesIn(test::load_onnx_data_cases(kDataDir)),
                         [](const ::testing::TestParamInfo<test::OnnxDataCase>& info) { return info.param.name; });

TEST(BitShiftOnnxData, CasesExist) {
  EXPECT_GE(test::load_onnx_data_cases(kDataDir).size(), 4u) << kDataDir << "/cases.json missing or truncated";
}

}  // namespace
}  // namespace kiln
