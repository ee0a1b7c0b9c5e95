// Tests of the sampling layers GridSample, RoiAlign and MaxRoiPool: shape rules and their
// messages, the references against hand-computed values and the ONNX backend conformance
// tests. The ONNX models against ONNX Runtime's outputs (tests/data/sampling, generate.py there:
// every GridSample mode x padding x align_corners in 2-D, 3-D grids, RoiAlign avg/max in both
// coordinate modes, MaxRoiPool) are cases of the op table (tests/op_table.h).
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

Attributes grid_attrs(const std::string& mode, const std::string& padding, int64_t align) {
  Attributes a;
  a.set("mode", mode);
  a.set("padding_mode", padding);
  a.set("align_corners", align);
  return a;
}

TEST(SamplingShapes, OutputDims) {
  EXPECT_EQ(
      infer_outputs(kLayerGridSample, {{kF32, {2, 3, 5, 7}}, {kF32, {2, 4, 6, 2}}}, grid_attrs("linear", "zeros", 0))
          .at(0)
          .second,
      (Dims{2, 3, 4, 6}));
  EXPECT_EQ(infer_outputs(kLayerGridSample, {{kF32, {1, 2, 4, 5, 3}}, {kF32, {1, 3, 2, 4, 3}}},
                          grid_attrs("cubic", "border", 1))
                .at(0)
                .second,
            (Dims{1, 2, 3, 2, 4}));
  Attributes ra;
  ra.set("output_height", int64_t{3});
  ra.set("output_width", int64_t{4});
  EXPECT_EQ(infer_outputs(kLayerRoiAlign, {{kF32, {2, 3, 12, 10}}, {kF32, {5, 4}}, {kI64, {5}}}, ra).at(0).second,
            (Dims{5, 3, 3, 4}));
  Attributes pa;
  pa.set("pooled_shape", std::vector<int64_t>{2, 3});
  EXPECT_EQ(infer_outputs(kLayerMaxRoiPool, {{kF32, {1, 4, 8, 8}}, {kF32, {6, 5}}}, pa).at(0).second,
            (Dims{6, 4, 2, 3}));
}

TEST(SamplingShapes, ErrorsNameTheRule) {
  EXPECT_NE(
      infer_error(kLayerGridSample, {{kF32, {2, 3, 5, 7}}, {kF32, {2, 4, 6, 3}}}, grid_attrs("linear", "zeros", 0))
          .find("must be [N, O1..2, 2]"),
      std::string::npos);
  EXPECT_NE(
      infer_error(kLayerGridSample, {{kF32, {2, 3, 5, 7}}, {kF32, {2, 4, 6, 2}}}, grid_attrs("bilinear", "zeros", 0))
          .find("'mode' is \"bilinear\"; allowed values: \"linear\", \"nearest\", \"cubic\""),
      std::string::npos);
  EXPECT_NE(
      infer_error(kLayerGridSample, {{kF32, {1, 1, 2, 2}}, {kF32, {1, 1, 1, 2}}}, grid_attrs("linear", "mirror", 0))
          .find("allowed values: \"zeros\", \"border\", \"reflection\""),
      std::string::npos);
  EXPECT_NE(infer_error(kLayerRoiAlign, {{kF32, {2, 3, 12, 10}}, {kF32, {5, 4}}, {kI64, {4}}}, {}).find("one per roi"),
            std::string::npos);
  EXPECT_NE(
      infer_error(kLayerRoiAlign, {{kF32, {2, 3, 12, 10}}, {kF32, {5, 5}}, {kI64, {5}}}, {}).find("[num_rois, 4]"),
      std::string::npos);
  Attributes pa;
  pa.set("pooled_shape", std::vector<int64_t>{2});
  EXPECT_NE(infer_error(kLayerMaxRoiPool, {{kF32, {1, 4, 8, 8}}, {kF32, {6, 5}}}, pa).find("two positive values"),
            std::string::npos);
}

// The hand-computed GridSample and MaxRoiPool cases are in the op table,
// tests/data/sampling/cases.json (grid_sample_hand, max_roi_pool_hand).

class SamplingConformance : public ::testing::TestWithParam<const char*> {};
// ONNX backend-test tolerances (rtol 1e-3, atol 1e-7): several expected outputs are printed to 4 digits.
TEST_P(SamplingConformance, MatchesTheOnnxBackendTest) { test::ortcase::check_node_test(GetParam(), 1e-3, 1e-7); }
INSTANTIATE_TEST_SUITE_P(Node, SamplingConformance,
                         ::testing::Values("test_gridsample", "test_gridsample_aligncorners_true",
                                           "test_gridsample_bicubic", "test_gridsample_bilinear",
                                           "test_gridsample_border_padding", "test_gridsample_nearest",
                                           "test_gridsample_reflection_padding", "test_gridsample_zeros_padding",
                                           "test_roialign_aligned_false", "test_roialign_aligned_true"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
