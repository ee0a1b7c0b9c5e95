// Tests of the ONNX ops kiln imports as compositions of existing layers (DepthToSpace,
// SpaceToDepth, Size, EyeLike, Compress, Shrink, LpPool; src/onnx/ops_composite.cpp): LpPool
// ceil_mode on symbolic dims through one engine over several shapes, that the compositions add no
// layer types of their own, and that models kiln cannot import are rejected naming the node. The
// whole ONNX models with static and dynamic dims against ONNX Runtime (made by
// tests/data/composite/generate.py) are cases of the op table, tests/data/composite/cases.json
// (tests/op_table.h).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/kiln.h"
#include "src/core/tensor_io.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

const std::string kDataDir = std::string(KILN_SOURCE_DIR) + "/tests/data/composite";

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
  // ceil_mode on symbolic spatial dims: the extra end padding is a Padding layer whose pads are
  // shape arithmetic; with static dims it is folded into the Convolution's pads.
  EXPECT_TRUE(layer_types("lppool_ceil_2d_p2_dynamic").count(kLayerPadding));
  EXPECT_FALSE(layer_types("lppool_ceil_mode").count(kLayerPadding));
  EXPECT_TRUE(layer_types("eyelike_k0").count(kLayerTrilu));
  // A run-time condition: the positions come from NonZero (a data-dependent size; run in
  // tests/data_dependent_test.cpp and the conformance suite's test_compress_*).
  EXPECT_EQ(layer_types("reject_compress_runtime_condition"),
            (std::set<std::string>{kLayerNonZero, kLayerShuffle, kLayerGather}));
}

// LpPool with ceil_mode=1 on symbolic spatial dims: one engine (profile over all three shapes)
// runs inputs of three shapes, so the run-time extra padding is recomputed on each shape change;
// each output is ONNX Runtime's for that input (the cases lppool_ceil_shapes<i>_dynamic).
TEST(CompositeImport, LpPoolCeilModeOneEngineManyShapes) {
  Network net;
  OnnxParser(net).parse_file(kDataDir + "/lppool_ceil_shapes0_dynamic.onnx");
  const std::string in = net.input(0)->name(), out = net.output(0)->name();
  OptimizationProfile profile;
  profile.set_dimensions(in, Dims{1, 1, 5, 4}, Dims{1, 2, 7, 6}, Dims{2, 3, 8, 9});
  BuilderConfig config;
  config.num_threads = 1;
  config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  for (int round = 0; round < 2; ++round) {  // back to an earlier shape too
    for (const char* i : {"0", "1", "2"}) {
      const std::string base = kDataDir + "/lppool_ceil_shapes" + i + "_dynamic";
      HostTensor x = load_npy(base + "_in0.npy");
      const HostTensor expected = load_npy(base + "_out0.npy");
      ctx->set_input_shape(in, x.dims());
      ctx->set_tensor_address(in, x.data());
      ASSERT_EQ(ctx->tensor_shape(out), expected.dims()) << "shapes" << i;
      HostTensor y(expected.type(), expected.dims());
      ctx->set_tensor_address(out, y.data());
      ctx->execute();
      std::string message;
      EXPECT_TRUE(test::compare_tensors(y, expected, 1e-5, 1e-5, nullptr, &message))
          << "shapes" << i << ": " << message;
    }
  }
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
