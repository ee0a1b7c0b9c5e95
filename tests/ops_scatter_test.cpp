// Tests of the Scatter layer (ONNX ScatterElements / Scatter / ScatterND with every reduction):
// shape-inference rules and their error messages, the CPU reference through the op harness
// (guard bytes, determinism) against hand-computed values, and the ONNX backend conformance
// tests of the scatter and gather operators (GatherElements / GatherND share the indexing rules;
// their layer is Gather). The ONNX models checked against ONNX Runtime's outputs
// (tests/data/scatter, made by generate.py there) are cases of the op table (tests/op_table.h).
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
constexpr DataType kI64 = DataType::kInt64;

Attributes scatter_attrs(const std::string& mode, int64_t axis = 0, const std::string& reduction = "none") {
  Attributes a;
  a.set("mode", mode);
  a.set("axis", axis);
  a.set("reduction", reduction);
  return a;
}

TEST(ScatterShapes, OutputIsData) {
  auto r = infer_outputs(kLayerScatter, {{kF32, {4, 5}}, {kI64, {2, 5}}, {kF32, {2, 5}}}, scatter_attrs("elements", 0));
  EXPECT_EQ(r.at(0).first, kF32);
  EXPECT_EQ(r.at(0).second, (Dims{4, 5}));
  r = infer_outputs(kLayerScatter, {{DataType::kInt32, {4, 5, 6}}, {kI64, {3, 2}}, {DataType::kInt32, {3, 6}}},
                    scatter_attrs("nd", 0, "max"));
  EXPECT_EQ(r.at(0).first, DataType::kInt32);
  EXPECT_EQ(r.at(0).second, (Dims{4, 5, 6}));
}

TEST(ScatterShapes, ErrorsNameTheRule) {
  EXPECT_NE(infer_error(kLayerScatter, {{kF32, {4, 5}}, {kI64, {2, 5}}, {kF32, {2, 4}}}, scatter_attrs("elements"))
                .find("must have the dims of indices"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerScatter, {{kF32, {4, 5}}, {kI64, {2, 5}}, {kF32, {2, 5}}}, scatter_attrs("elements", 2))
                .find("axis 2 is out of range"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerScatter, {{kF32, {4, 5}}, {kI64, {2, 3}}, {kF32, {2}}}, scatter_attrs("nd"))
                .find("must lie in 1..2"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerScatter, {{kF32, {4, 5}}, {kI64, {2, 1}}, {kF32, {2, 4}}}, scatter_attrs("nd"))
                .find("must have dims 2x5"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerScatter, {{kF32, {4}}, {kF32, {2}}, {kF32, {2}}}, scatter_attrs("elements"))
                .find("indices must be int32 or int64"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerScatter, {{kF32, {4}}, {kI64, {2}}, {kF32, {2}}}, scatter_attrs("elements", 0, "sum"))
                .find("attribute 'reduction' is \"sum\"; allowed values: \"none\", \"add\", \"mul\", \"max\", \"min\""),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerScatter, {{DataType::kBool, {4}}, {kI64, {2}}, {DataType::kBool, {2}}},
                        scatter_attrs("elements", 0, "add"))
                .find("not defined for bool"),
            std::string::npos);
}

// The hand-computed ScatterElements add with a duplicate index is in the op table,
// tests/data/scatter/cases.json (scatter_elements_add).

TEST(ScatterReference, OutOfRangeIndexIsAnError) {
  test::OpCase c;
  c.name = "scatter_nd_oob";
  c.layer_type = kLayerScatter;
  c.attrs = scatter_attrs("nd");
  c.inputs.push_back({kF32, {3}, false, {}});
  c.inputs.push_back({kI64, {1, 1}, false, HostTensor::from_vector(kI64, Dims{1, 1}, std::vector<int64_t>{3})});
  c.inputs.push_back({kF32, {1}, false, {}});
  try {
    test::reference_outputs(c);
    ADD_FAILURE() << "expected an out-of-range error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("index 3 is out of range"), std::string::npos) << e.what();
  }
}

class IndexingConformance : public ::testing::TestWithParam<const char*> {};
TEST_P(IndexingConformance, MatchesTheOnnxBackendTest) { test::ortcase::check_node_test(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Node, IndexingConformance,
    ::testing::Values("test_scatter_elements_with_axis", "test_scatter_elements_with_duplicate_indices",
                      "test_scatter_elements_with_negative_indices", "test_scatter_elements_without_axis",
                      "test_scatter_elements_with_reduction_max", "test_scatter_elements_with_reduction_min",
                      "test_scatter_with_axis", "test_scatter_without_axis", "test_scatternd", "test_scatternd_add",
                      "test_scatternd_multiply", "test_scatternd_max", "test_scatternd_min", "test_gather_0",
                      "test_gather_1", "test_gather_2d_indices", "test_gather_negative_indices",
                      "test_gather_elements_0", "test_gather_elements_1", "test_gather_elements_negative_indices",
                      "test_gathernd_example_float32", "test_gathernd_example_int32",
                      "test_gathernd_example_int32_batch_dim1"),
    [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
