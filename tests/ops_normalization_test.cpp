// Tests of the normalization layers (Normalization in every mode, LRN) and their ONNX importers
// (LayerNormalization, InstanceNormalization, GroupNormalization, MeanVarianceNormalization,
// LpNormalization, LRN): shape/type inference and its errors, the reference kernels against
// hand-computed values. The family's op cases (whole ONNX models against ONNX Runtime, made by
// tests/data/normalization/generate.py, and the harness cases on awkward shapes of every float
// type) are in the op table, tests/data/normalization/cases.json (tests/op_table.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/ir/shape_inference.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

constexpr DataType kF32 = DataType::kFloat32;

Attributes attrs_of(std::initializer_list<std::pair<std::string, AttrValue>> list) {
  Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

test::InputSpec given(HostTensor value) {
  test::InputSpec s;
  s.type = value.type();
  s.dims = value.dims();
  s.value = std::move(value);
  return s;
}

HostTensor floats(Dims dims, std::vector<float> values) { return HostTensor::from_vector(kF32, dims, values); }

// Output (type, dims) of a one-layer network; inputs are (type, dims) pairs.
std::vector<std::pair<DataType, Dims>> infer(const std::string& type,
                                             const std::vector<std::pair<DataType, Dims>>& inputs, Attributes attrs,
                                             int num_outputs = 1) {
  Network net;
  std::vector<Tensor*> tensors;
  std::vector<TensorState> states(inputs.size());
  std::vector<const TensorState*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tensors.push_back(net.add_input("x" + std::to_string(i), inputs[i].first, inputs[i].second));
    states[i].type = inputs[i].first;
    states[i].dims = inputs[i].second;
    ptrs.push_back(&states[i]);
  }
  Layer* layer = net.add_layer(type, tensors, num_outputs, std::move(attrs), "op");
  return infer_layer(*layer, ptrs);
}

template <typename Fn>
void expect_error(Fn fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    EXPECT_NE(msg.find("'op'"), std::string::npos) << "the message should name the layer: " << msg;
  }
}

// ---- shape inference ------------------------------------------------------------------------------

TEST(NormalizationShapes, LayerModeStatisticsOutputs) {
  const auto out = infer(kLayerNormalization, {{kF32, {2, 3, 4}}, {kF32, {3, 4}}, {kF32, {4}}},
                         attrs_of({{"mode", std::string("layer")}, {"axis", int64_t{-2}}}), 3);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].second, (Dims{2, 3, 4}));
  EXPECT_EQ(out[1].second, (Dims{2, 1, 1}));
  EXPECT_EQ(out[2].first, kF32);
  const auto half_out = infer(kLayerNormalization, {{DataType::kFloat16, {2, 8}}, {DataType::kFloat16, {8}}},
                              attrs_of({{"mode", std::string("layer")}}), 2);
  EXPECT_EQ(half_out[0].first, DataType::kFloat16);
  EXPECT_EQ(half_out[1].first, kF32);  // statistics are float32 (ONNX stash_type 1)
}

TEST(NormalizationShapes, ErrorsNameTheProblem) {
  auto mode = [](const char* m) { return std::string(m); };
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 3}}}, attrs_of({{"mode", mode("batch")}}));
      },
      "allowed values");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{DataType::kInt32, {2, 3}}}, attrs_of({{"mode", mode("layer")}}));
      },
      "floating-point");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 3}}, {kF32, {2}}}, attrs_of({{"mode", mode("layer")}}));
      },
      "broadcast");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 3, 4}}, {kF32, {4}}}, attrs_of({{"mode", mode("instance")}}));
      },
      "one value per channel");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 6, 4}}},
              attrs_of({{"mode", mode("group")}, {"num_groups", int64_t{4}}}));
      },
      "divide the channel count");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 3}}},
              attrs_of({{"mode", mode("mvn")}, {"axes", std::vector<int64_t>{1, -1}}}));
      },
      "twice");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 3}}}, attrs_of({{"mode", mode("lp")}, {"p", int64_t{3}}}));
      },
      "supports 1 and 2");
  expect_error(
      [&] {
        infer(kLayerNormalization, {{kF32, {2, 3}}}, attrs_of({{"mode", mode("lp")}}), 2);
      },
      "only mode 'layer'");
  expect_error([&] { infer(kLayerLRN, {{kF32, {2, 3}}}, attrs_of({{"size", int64_t{3}}})); }, "rank >= 3");
}

// ---- reference kernels by hand ----------------------------------------------------------------------

TEST(NormalizationReference, LayerNormByHand) {
  test::OpCase c;
  c.name = "hand_layer_norm";
  c.layer_type = kLayerNormalization;
  c.inputs = {given(floats({2, 4}, {1, 2, 3, 4, 0, 0, 0, 4})), given(floats({4}, {1, 2, 1, 1})),
              given(floats({4}, {0, 0, 0, 1}))};
  c.attrs = attrs_of({{"mode", std::string("layer")}, {"epsilon", 0.0}});
  c.num_outputs = 3;
  const auto out = test::reference_outputs(c);
  const double s = std::sqrt(1.25);  // variance of 1,2,3,4
  const std::vector<double> want = {-1.5 / s, 2 * -0.5 / s, 0.5 / s, 1.5 / s + 1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[0].as<float>()[i], want[static_cast<size_t>(i)], 1e-6);
  EXPECT_FLOAT_EQ(out[1].as<float>()[0], 2.5f);
  EXPECT_FLOAT_EQ(out[1].as<float>()[1], 1.0f);
  EXPECT_NEAR(out[2].as<float>()[0], 1.0 / s, 1e-6);
  EXPECT_NEAR(out[2].as<float>()[1], 1.0 / std::sqrt(3.0), 1e-6);  // variance of 0,0,0,4 is 3
  EXPECT_NEAR(out[0].as<float>()[7], 3.0 / std::sqrt(3.0) + 1, 1e-6);
}

TEST(NormalizationReference, GroupAndLpAndLrnByHand) {
  // group: 2 groups of 2 channels, one element each: groups {1,3} and {5,9}.
  test::OpCase g;
  g.name = "hand_group_norm";
  g.layer_type = kLayerNormalization;
  g.inputs = {given(floats({1, 4, 1}, {1, 3, 5, 9}))};
  g.attrs = attrs_of({{"mode", std::string("group")}, {"num_groups", int64_t{2}}, {"epsilon", 0.0}});
  const HostTensor gy = test::reference_outputs(g).at(0);
  const std::vector<float> gwant = {-1, 1, -1, 1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(gy.as<float>()[i], gwant[static_cast<size_t>(i)], 1e-6);

  test::OpCase lp;
  lp.name = "hand_lp_norm";
  lp.layer_type = kLayerNormalization;
  lp.inputs = {given(floats({2, 2}, {3, -4, 0, 0}))};
  lp.attrs = attrs_of({{"mode", std::string("lp")}, {"axis", int64_t{1}}, {"p", int64_t{2}}});
  const HostTensor ly = test::reference_outputs(lp).at(0);
  EXPECT_FLOAT_EQ(ly.as<float>()[0], 0.6f);
  EXPECT_FLOAT_EQ(ly.as<float>()[1], -0.8f);
  EXPECT_EQ(ly.as<float>()[2], 0.0f);  // a zero norm gives zeros, not NaN

  // LRN size 3 over 3 channels of one pixel: channel 0 sums channels 0-1, channel 1 all three.
  test::OpCase lrn;
  lrn.name = "hand_lrn";
  lrn.layer_type = kLayerLRN;
  lrn.inputs = {given(floats({1, 3, 1}, {1, 2, 3}))};
  lrn.attrs = attrs_of({{"size", int64_t{3}}, {"alpha", 3.0}, {"beta", 1.0}, {"bias", 1.0}});
  const HostTensor ry = test::reference_outputs(lrn).at(0);
  EXPECT_FLOAT_EQ(ry.as<float>()[0], 1.0f / (1.0f + 5.0f));
  EXPECT_FLOAT_EQ(ry.as<float>()[1], 2.0f / (1.0f + 14.0f));
  EXPECT_FLOAT_EQ(ry.as<float>()[2], 3.0f / (1.0f + 13.0f));
}

}  // namespace
}  // namespace kiln
