// Tests of the Einsum layer: equation parsing (src/ir/einsum_equation.h) including ellipsis,
// diagonals, implicit outputs and its error messages, shape inference, the reference kernel on a
// hand-computed case. Its op cases (whole ONNX Einsum models against ONNX Runtime, made by
// tests/data/einsum/generate.py, and the harness cases of four types) are in the op table,
// tests/data/einsum/cases.json (tests/op_table.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/ir/einsum_equation.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

Dims out_dims(const std::string& eq, const std::vector<Dims>& dims) { return plan_einsum(eq, dims).output_dims; }

TEST(EinsumEquation, OutputDims) {
  EXPECT_EQ(out_dims("ij,jk->ik", {{2, 3}, {3, 4}}), (Dims{2, 4}));
  EXPECT_EQ(out_dims("ij,jk", {{2, 3}, {3, 4}}), (Dims{2, 4}));  // implicit: letters seen once, sorted
  EXPECT_EQ(out_dims("ba", {{2, 3}}), (Dims{3, 2}));
  EXPECT_EQ(out_dims("ii->i", {{5, 5}}), (Dims{5}));
  EXPECT_EQ(out_dims("i,i", {{4}, {4}}), (Dims{}));
  EXPECT_EQ(out_dims("...ij,...jk->...ik", {{2, 1, 3, 4}, {7, 4, 5}}), (Dims{2, 7, 3, 5}));
  EXPECT_EQ(out_dims("...ii", {{3, 4, 4}}), (Dims{3}));  // implicit: ellipsis first, i repeated
  EXPECT_EQ(out_dims(" b i j , b j k -> b i k ", {{2, 3, 4}, {2, 4, 5}}), (Dims{2, 3, 5}));
  EXPECT_EQ(out_dims("Ab,bA->A", {{2, 3}, {3, 2}}), (Dims{2}));
}

TEST(EinsumEquation, ErrorsSayWhatIsWrong) {
  auto error = [](const std::string& eq, const std::vector<Dims>& dims) -> std::string {
    try {
      plan_einsum(eq, dims);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error("ij,jk->ik", {{2, 3}}).find("2 operand terms but the layer has 1 inputs"), std::string::npos);
  EXPECT_NE(error("ij->ji", {{2, 3, 4}}).find("labels 2 axes"), std::string::npos);
  EXPECT_NE(error("ij,jk->ik", {{2, 3}, {4, 5}}).find("extent"), std::string::npos);
  EXPECT_NE(error("ij->iz", {{2, 3}}).find("'z' appears in no operand"), std::string::npos);
  EXPECT_NE(error("ij->ii", {{2, 3}}).find("appears twice"), std::string::npos);
  EXPECT_NE(error("i1->i", {{2}}).find("unexpected character '1'"), std::string::npos);
  EXPECT_NE(error("......", {{2}}).find("two '...'"), std::string::npos);
}

test::InputSpec given(DataType type, Dims dims, std::vector<double> values) {
  test::InputSpec s;
  s.type = type;
  s.dims = dims;
  HostTensor t(type, dims);
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == DataType::kFloat32)
      t.as<float>()[i] = static_cast<float>(values[i]);
    else
      t.as<int32_t>()[i] = static_cast<int32_t>(values[i]);
  }
  s.value = t;
  return s;
}

TEST(EinsumReference, TraceAndBilinear) {
  test::OpCase trace;
  trace.name = "hand_trace";
  trace.layer_type = kLayerEinsum;
  trace.inputs = {given(DataType::kInt32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})};
  trace.attrs.set("equation", std::string("ii"));
  const HostTensor t = test::reference_outputs(trace).at(0);
  EXPECT_EQ(t.dims(), (Dims{}));
  EXPECT_EQ(t.as<int32_t>()[0], 15);

  // x^T A y for x = [1, 2], A = [[1, 2], [3, 4]], y = [1, -1]: [7, 10] . [1, -1] = -3.
  test::OpCase bil;
  bil.name = "hand_bilinear";
  bil.layer_type = kLayerEinsum;
  bil.inputs = {given(DataType::kFloat32, {2}, {1, 2}), given(DataType::kFloat32, {2, 2}, {1, 2, 3, 4}),
                given(DataType::kFloat32, {2}, {1, -1})};
  bil.attrs.set("equation", std::string("i,ij,j->"));
  EXPECT_EQ(test::reference_outputs(bil).at(0).as<float>()[0], -3.0f);
}

}  // namespace
}  // namespace kiln
