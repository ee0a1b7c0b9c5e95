// Tests of the BitShift layer: shape/type inference and its errors, the reference on signed
// types and out-of-range shift amounts (by hand). Its op cases (whole ONNX BitShift models on
// uint8 against ONNX Runtime, made by tests/data/bitwise/generate.py, and the harness cases of
// every integer type) are in the op table, tests/data/bitwise/cases.json (tests/op_table.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
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

}  // namespace
}  // namespace kiln
