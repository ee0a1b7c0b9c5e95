// Typed params of the position-driven layers (TopK, CumSum, Trilu, OneHot, ReverseSequence,
// MaxUnpool: src/ir/indexing_params.h) and the data-dependent ones (NonMaxSuppression, Unique:
// src/ir/data_dependent_params.h): bad attribute values fail when the layer is created or loaded,
// naming the layer and the attribute; decoded values and defaults; the shared size rules
// (max_unpool_dims, unique_slices); and Resize's mode being the public InterpolationMode.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/engine/network_codec.h"
#include "src/ir/data_dependent_params.h"
#include "src/ir/indexing_params.h"
#include "src/ir/op_params.h"
#include "src/ir/resize_params.h"
#include "src/ir/shape_inference.h"
#include "tests/op_params_util.h"

namespace kiln {
namespace {

using namespace op_params_test;  // NOLINT: error_of, expect_contains, attrs, Ints

HostTensor i64s(const Dims& dims, const Ints& values) {
  return HostTensor::from_vector(DataType::kInt64, dims, values);
}
HostTensor f32s(const Dims& dims, const std::vector<float>& values) {
  return HostTensor::from_vector(DataType::kFloat32, dims, values);
}

// A network with the inputs these layers take.
struct Net {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3, 4});
  Tensor* k = net.add_constant(i64s(Dims{1}, {2}), "k")->output(0);
  Tensor* axis = net.add_constant(i64s(Dims{}, {1}), "axis")->output(0);
  Tensor* lens = net.add_input("lens", DataType::kInt64, Dims{3});
  Tensor* pooled = net.add_input("pooled", DataType::kFloat32, Dims{1, 2, 3, 3});
  Tensor* pooled_at = net.add_input("pooled_at", DataType::kInt64, Dims{1, 2, 3, 3});
  Tensor* boxes = net.add_input("boxes", DataType::kFloat32, Dims{1, 5, 4});
  Tensor* scores = net.add_input("scores", DataType::kFloat32, Dims{1, 2, 5});

  std::string add_error(const std::string& type, std::vector<Tensor*> inputs, int outputs, Attributes a,
                        const std::string& name) {
    const int before = net.num_layers();
    std::string msg = error_of([&] { net.add_layer(type, inputs, outputs, std::move(a), name); });
    EXPECT_EQ(net.num_layers(), before) << "a layer that fails to decode is not added: " << name;
    return msg;
  }
};

// ---- bad values fail when the layer is created, naming the layer and the attribute -----------

TEST(IndexingParams, FlagsOutsideZeroOneFailWhenCreated) {
  Net n;
  expect_contains(n.add_error(kLayerTopK, {n.x, n.k}, 3, attrs({{"largest", int64_t{2}}}), "top"),
                  {"'top'", "TopK", "'largest'", "is 2", "allowed range: 0 to 1"});
  expect_contains(n.add_error(kLayerTopK, {n.x, n.k}, 3, attrs({{"sorted", int64_t{-1}}}), "top_sorted"),
                  {"'top_sorted'", "'sorted'", "is -1"});
  expect_contains(n.add_error(kLayerCumSum, {n.x, n.axis}, 1, attrs({{"exclusive", int64_t{3}}}), "cs"),
                  {"'cs'", "CumSum", "'exclusive'", "is 3"});
  expect_contains(n.add_error(kLayerCumSum, {n.x, n.axis}, 1, attrs({{"reverse", int64_t{5}}}), "cs_rev"),
                  {"'cs_rev'", "'reverse'", "is 5"});
  expect_contains(n.add_error(kLayerTrilu, {n.x}, 1, attrs({{"upper", int64_t{7}}}), "tri"),
                  {"'tri'", "Trilu", "'upper'", "is 7"});
  expect_contains(
      n.add_error(kLayerNonMaxSuppression, {n.boxes, n.scores}, 2, attrs({{"center_point_box", int64_t{2}}}), "nms"),
      {"'nms'", "NonMaxSuppression", "'center_point_box'", "is 2", "allowed range: 0 to 1"});
  expect_contains(n.add_error(kLayerUnique, {n.x}, 5, attrs({{"sorted", int64_t{2}}}), "uniq"),
                  {"'uniq'", "Unique", "'sorted'", "is 2"});
  expect_contains(n.add_error(kLayerUnique, {n.x}, 5, attrs({{"flatten", int64_t{2}}}), "uniq_flat"),
                  {"'uniq_flat'", "'flatten'", "is 2"});
}

TEST(IndexingParams, WrongAttributeTypeFailsWhenCreated) {
  Net n;
  expect_contains(n.add_error(kLayerTopK, {n.x, n.k}, 3, attrs({{"largest", std::string("yes")}}), "top"),
                  {"'top'", "'largest'", "expected int"});
  expect_contains(n.add_error(kLayerReverseSequence, {n.x, n.lens}, 1, attrs({{"time_axis", std::string("1")}}), "rs"),
                  {"'rs'", "'time_axis'", "expected int"});
  expect_contains(n.add_error(kLayerOneHot, {n.x, n.k, n.k}, 1, attrs({{"axis", Ints{1}}}), "oh"),
                  {"'oh'", "'axis'", "expected int"});
}

TEST(IndexingParams, MaxUnpoolWindowFailsWhenCreated) {
  Net n;
  const std::vector<Tensor*> in{n.pooled, n.pooled_at};
  expect_contains(n.add_error(kLayerMaxUnpool, in, 1, attrs({{"kernel", Ints{0, 2}}}), "k0"),
                  {"'k0'", "MaxUnpool", "'kernel'", "[0, 2]", ">= 1"});
  expect_contains(n.add_error(kLayerMaxUnpool, in, 1, attrs({{"kernel", Ints{}}}), "kempty"),
                  {"'kempty'", "'kernel'", "empty"});
  expect_contains(n.add_error(kLayerMaxUnpool, in, 1, attrs({}), "knone"), {"'knone'", "'kernel'", "required"});
  expect_contains(n.add_error(kLayerMaxUnpool, in, 1, attrs({{"kernel", Ints{2, 2}}, {"strides", Ints{2, 0}}}), "s0"),
                  {"'s0'", "'strides'", ">= 1"});
  expect_contains(n.add_error(kLayerMaxUnpool, in, 1, attrs({{"kernel", Ints{2, 2}}, {"strides", Ints{2}}}), "s1"),
                  {"'s1'", "'strides'", "has 1 values", "expected one per spatial dim (2"});
  expect_contains(
      n.add_error(kLayerMaxUnpool, in, 1, attrs({{"kernel", Ints{2, 2}}, {"pads", Ints{0, -1, 0, 0}}}), "pneg"),
      {"'pneg'", "'pads'", ">= 0"});
  expect_contains(n.add_error(kLayerMaxUnpool, in, 1, attrs({{"kernel", Ints{2, 2}}, {"pads", Ints{1, 1}}}), "p2"),
                  {"'p2'", "'pads'", "has 2 values", "expected two per spatial dim (4"});
}

// ---- decoded values and defaults -----------------------------------------------------------------

TEST(IndexingParams, DecodedValuesEqualTheAttributes) {
  Net n;
  const TopKParams& top = params_of<TopKParams>(*n.net.add_topk(n.x, n.k, 1, false, false));
  EXPECT_EQ(top.axis, 1);
  EXPECT_FALSE(top.largest);
  EXPECT_FALSE(top.sorted);
  const CumSumParams& cs = params_of<CumSumParams>(*n.net.add_cumsum(n.x, n.axis, true, true));
  EXPECT_TRUE(cs.exclusive);
  EXPECT_TRUE(cs.reverse);
  EXPECT_FALSE(params_of<TriluParams>(*n.net.add_trilu(n.x, nullptr, false)).upper);
  Tensor* depth = n.net.add_constant(i64s(Dims{}, {3}), "depth")->output(0);
  Tensor* values = n.net.add_constant(f32s(Dims{2}, {0, 1}), "values")->output(0);
  Tensor* idx = n.net.add_input("idx", DataType::kInt64, Dims{2, 3});
  EXPECT_EQ(params_of<OneHotParams>(*n.net.add_one_hot(idx, depth, values, -2)).axis, -2);
  const ReverseSequenceParams& rs = params_of<ReverseSequenceParams>(*n.net.add_reverse_sequence(n.x, n.lens, -2, 0));
  EXPECT_EQ(rs.batch_axis, -2);
  EXPECT_EQ(rs.time_axis, 0);
  const MaxUnpoolParams& mu =
      params_of<MaxUnpoolParams>(*n.net.add_max_unpool(n.pooled, n.pooled_at, nullptr, {2, 3}, {2, 1}, {0, 1, 1, 0}));
  EXPECT_EQ(mu.kernel, (Ints{2, 3}));
  EXPECT_EQ(mu.strides, (Ints{2, 1}));
  EXPECT_EQ(mu.pads, (Ints{0, 1, 1, 0}));
  EXPECT_TRUE(params_of<NonMaxSuppressionParams>(
                  *n.net.add_non_max_suppression(n.boxes, n.scores, nullptr, nullptr, nullptr, true))
                  .center_point_box);
  const UniqueParams& u = params_of<UniqueParams>(*n.net.add_unique(n.x, false, false, -1));
  EXPECT_FALSE(u.sorted);
  EXPECT_FALSE(u.flatten);
  EXPECT_EQ(u.axis, -1);
}

TEST(IndexingParams, AbsentAttributesTakeTheSchemaDefaults) {
  Net n;
  const TopKParams& top = params_of<TopKParams>(*n.net.add_layer(kLayerTopK, {n.x, n.k}, 3, {}, "top"));
  EXPECT_EQ(top.axis, -1);
  EXPECT_TRUE(top.largest);
  EXPECT_TRUE(top.sorted);
  const CumSumParams& cs = params_of<CumSumParams>(*n.net.add_layer(kLayerCumSum, {n.x, n.axis}, 1, {}, "cs"));
  EXPECT_FALSE(cs.exclusive);
  EXPECT_FALSE(cs.reverse);
  EXPECT_TRUE(params_of<TriluParams>(*n.net.add_layer(kLayerTrilu, {n.x}, 1, {}, "tri")).upper);
  const ReverseSequenceParams& rs =
      params_of<ReverseSequenceParams>(*n.net.add_layer(kLayerReverseSequence, {n.x, n.lens}, 1, {}, "rs"));
  EXPECT_EQ(rs.batch_axis, 1);
  EXPECT_EQ(rs.time_axis, 0);
  // Empty strides and pads mean 1 and 0 per spatial dim, filled in once by the decoding.
  const MaxUnpoolParams& mu = params_of<MaxUnpoolParams>(
      *n.net.add_layer(kLayerMaxUnpool, {n.pooled, n.pooled_at}, 1, attrs({{"kernel", Ints{2, 2}}}), "mu"));
  EXPECT_EQ(mu.strides, (Ints{1, 1}));
  EXPECT_EQ(mu.pads, (Ints{0, 0, 0, 0}));
  EXPECT_FALSE(
      params_of<NonMaxSuppressionParams>(*n.net.add_layer(kLayerNonMaxSuppression, {n.boxes, n.scores}, 2, {}, "nms"))
          .center_point_box);
  const UniqueParams& u = params_of<UniqueParams>(*n.net.add_layer(kLayerUnique, {n.x}, 5, {}, "uniq"));
  EXPECT_TRUE(u.sorted);
  EXPECT_TRUE(u.flatten);
  EXPECT_EQ(u.axis, 0);
}

// An edit after creation is decoded again; a bad one fails validation and loading (the engine
// stores the attributes, from which the params are decoded).
TEST(IndexingParams, EditedAndLoadedAttributesAreDecodedAgain) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
  Layer* uniq = net.add_unique(x);
  uniq->set_name("uniq");
  for (int i = 0; i < 4; ++i) net.mark_output(uniq->output(i));
  auto load = [&] {
    engine_codec::ByteWriter w;
    engine_codec::WeightsWriter weights;
    engine_codec::encode_graph(net, w, weights);
    engine_codec::ByteReader r(w.bytes(), "graph");
    return engine_codec::decode_graph(r, weights.bytes);
  };
  EXPECT_TRUE(params_of<UniqueParams>(*load()->find_layer("uniq")).sorted);

  uniq->attrs().set("sorted", int64_t{0});
  EXPECT_FALSE(params_of<UniqueParams>(*uniq).sorted) << "an edit is seen";
  EXPECT_FALSE(params_of<UniqueParams>(*load()->find_layer("uniq")).sorted) << "the stored value is decoded";

  uniq->attrs().set("sorted", int64_t{3});
  expect_contains(error_of([&] { net.validate(); }), {"'uniq'", "'sorted'", "is 3"});
  expect_contains(error_of([&] { (void)load(); }), {"'uniq'", "'sorted'", "is 3", "0 to 1"});
}

// ---- the shared size rules -------------------------------------------------------------------------

TEST(IndexingParams, MaxUnpoolDims) {
  MaxUnpoolParams p;
  p.kernel = {2, 3};
  p.strides = {2, 1};
  p.pads = {0, 1, 1, 0};
  // (3 - 1) * 2 - 0 - 1 + 2 = 5; (4 - 1) * 1 - 1 - 0 + 3 = 5
  EXPECT_EQ(max_unpool_dims(p, Dims{1, 2, 3, 4}), (Dims{1, 2, 5, 5}));
  expect_contains(error_of([&] { (void)max_unpool_dims(p, Dims{1, 2, 3}); }), {"k = 2 spatial dims"});
  p.kernel = {1};
  p.strides = {int64_t{1} << 62};
  p.pads = {0, 0};
  expect_contains(error_of([&] { (void)max_unpool_dims(p, Dims{1, 1, 9}); }), {"overflows"});
}

TEST(IndexingParams, UniqueSlices) {
  UniqueParams p;
  const UniqueSlices flat = unique_slices(p, Dims{2, 3, 4});
  EXPECT_EQ(flat.outer, 1);
  EXPECT_EQ(flat.n, 24);
  EXPECT_EQ(flat.inner, 1);
  p.flatten = false;
  p.axis = -2;
  const UniqueSlices mid = unique_slices(p, Dims{2, 3, 4});
  EXPECT_EQ(mid.outer, 2);
  EXPECT_EQ(mid.n, 3);
  EXPECT_EQ(mid.inner, 4);
  p.axis = 3;
  expect_contains(error_of([&] { (void)unique_slices(p, Dims{2, 3, 4}); }), {"axis 3", "out of range"});
}

// Shape inference reads the same params and normalizes their axes for the input's rank.
TEST(IndexingParams, ShapeInferenceReadsTheDecodedParams) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3, 4});
  Tensor* lens = net.add_input("lens", DataType::kInt64, Dims{3});
  Tensor* k = net.add_constant(i64s(Dims{1}, {2}), "k")->output(0);
  Layer* top = net.add_topk(x, k, -2);
  Layer* rs = net.add_reverse_sequence(x, lens, -2, 0);
  Layer* uniq = net.add_unique(x, true, false, -1);
  Tensor* pooled = net.add_input("pooled", DataType::kFloat32, Dims{1, 2, 3, 4});
  Tensor* at = net.add_input("at", DataType::kInt64, Dims{1, 2, 3, 4});
  Layer* unpool = net.add_max_unpool(pooled, at, nullptr, {2, 3}, {2, 1}, {0, 1, 1, 0});
  const std::map<std::string, Dims> dims{
      {"x", Dims{2, 3, 4}}, {"lens", Dims{3}}, {"pooled", Dims{1, 2, 3, 4}}, {"at", Dims{1, 2, 3, 4}}};
  const TensorStates s = infer_shapes(net, dims);
  EXPECT_EQ(s.at(top->output(0)).dims, (Dims{2, 2, 4}));
  EXPECT_EQ(s.at(rs->output(0)).dims, (Dims{2, 3, 4}));
  EXPECT_EQ(s.at(uniq->output(2)).dims, (Dims{4})) << "inverse indices: one per slice along the last axis";
  EXPECT_EQ(s.at(unpool->output(0)).dims, (Dims{1, 2, 5, 5}));

  // Any int decodes; an axis out of range for the rank fails in shape inference, naming the layer.
  top->attrs().set("axis", int64_t{3});
  expect_contains(error_of([&] { (void)infer_shapes(net, dims); }), {"TopK", "axis 3", "out of range"});
  top->attrs().set("axis", int64_t{-1});
  rs->attrs().set("batch_axis", int64_t{0});
  expect_contains(error_of([&] { (void)infer_shapes(net, dims); }),
                  {"ReverseSequence", "batch_axis and time_axis must differ"});
  rs->attrs().set("batch_axis", int64_t{1});
  unpool->attrs().set("kernel", Ints{2});
  unpool->attrs().set("strides", Ints{});
  unpool->attrs().set("pads", Ints{});
  expect_contains(error_of([&] { (void)infer_shapes(net, dims); }), {"MaxUnpool", "k = 1 spatial dims"});
}

// ---- Resize's mode is the public InterpolationMode --------------------------------------------------

TEST(ResizeParamsMode, IsThePublicInterpolationMode) {
  static_assert(std::is_same_v<decltype(ResizeParams::mode), InterpolationMode>);
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 1, 2, 2});
  Tensor* scales = net.add_constant(f32s(Dims{4}, {1, 1, 2, 2}), "scales")->output(0);
  for (InterpolationMode mode : {InterpolationMode::kNearest, InterpolationMode::kLinear, InterpolationMode::kCubic}) {
    ResizeDesc desc;
    desc.mode = mode;
    EXPECT_EQ(params_of<ResizeParams>(*net.add_resize(x, scales, nullptr, desc)).mode, mode);
  }
  EXPECT_STREQ(to_string(InterpolationMode::kLinear), "linear");
}

}  // namespace
}  // namespace kiln
