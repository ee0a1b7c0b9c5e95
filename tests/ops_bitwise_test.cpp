// Tests of the BitShift layer: shape/type inference and its errors. Its op cases (whole ONNX
// BitShift models on uint8 against ONNX Runtime, made by tests/data/bitwise/generate.py, the
// harness cases of every integer type, and the hand-computed logical shifts of signed types and
// out-of-range amounts) are in the op table, tests/data/bitwise/cases.json (tests/op_table.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

// The logical shifts of bit patterns (shifts of the width or more, negative amounts, broadcasting)
// are hand-computed cases of the op table (tests/data/bitwise/cases.json: shift_right_logical,
// shift_left_bits, shift_left_broadcast_uint8).

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
