// Typed op parameters (src/ir/op_params.h): decoded and checked once when a layer is created,
// validated or loaded, with messages naming the layer, the attribute and the allowed values;
// cached per layer and decoded again after an edit; and the shared geometry functions
// (conv_geometry, pool_geometry, resize_output_dims, reduce_output_dims, check_scatter_shapes, ...)
// that shape inference and every kernel use.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/engine/network_codec.h"
#include "src/ir/conv_params.h"
#include "src/ir/gather_params.h"
#include "src/ir/normalization_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/pool_params.h"
#include "src/ir/reduce_params.h"
#include "src/ir/resize_params.h"
#include "src/ir/rnn_params.h"
#include "src/ir/sampling_params.h"
#include "src/ir/scatter_params.h"
#include "src/ir/string_params.h"
#include "tests/op_params_util.h"

namespace kiln {
namespace {

using namespace op_params_test;  // NOLINT: error_of, expect_contains, attrs, Ints

// ---- decoded once, when the layer is created ------------------------------------------------

TEST(OpParams, BadEnumFailsWhenCreatedNamingLayerAttributeAndAllowedValues) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 5, 5});
  const std::string msg = error_of([&] {
    net.add_layer(kLayerPooling, {x}, 1, attrs({{"mode", std::string("min")}, {"kernel", Ints{2, 2}}}), "pool1");
  });
  expect_contains(msg, {"'pool1'", "Pooling", "'mode'", "\"min\"", "\"max\"", "\"average\""});
  EXPECT_EQ(net.num_layers(), 0) << "a layer that fails to decode is not added";

  const std::string pad = error_of([&] {
    net.add_layer(kLayerPooling, {x}, 1,
                  attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"auto_pad", std::string("SAME")}}),
                  "pool2");
  });
  expect_contains(pad,
                  {"'pool2'", "'auto_pad'", "\"SAME\"", "\"SAME_UPPER\"", "\"SAME_LOWER\"", "\"VALID\"", "\"NOTSET\""});

  Tensor* w = net.add_constant(HostTensor(DataType::kFloat32, Dims{2, 2, 3, 3}), "w")->output(0);
  const std::string act = error_of([&] {
    net.add_layer(kLayerConvolution, {x, w}, 1, attrs({{"activation", std::string("sigmoidal")}}), "conv1");
  });
  expect_contains(act, {"'conv1'", "'activation'", "sigmoidal"});
}

TEST(OpParams, OutOfRangeAndMissingFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 5, 5});
  Tensor* w = net.add_constant(HostTensor(DataType::kFloat32, Dims{2, 2, 3, 3}), "w")->output(0);
  expect_contains(error_of([&] {
                    net.add_layer(kLayerConvolution, {x, w}, 1, attrs({{"group", int64_t{0}}}), "g0");
                  }),
                  {"'g0'", "'group'", "is 0", "allowed range: 1 to"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerConvolution, {x, w}, 1, attrs({{"strides", Ints{0, 1}}}), "s0");
                  }),
                  {"'s0'", "'strides'", "[0, 1]", ">= 1"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerConvolution, {x, w}, 1, attrs({{"pads", Ints{0, -1, 0, 0}}}), "p");
                  }),
                  {"'p'", "'pads'", ">= 0"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerDeconvolution, {x, w}, 1, attrs({{"output_padding", Ints{-1, 0}}}), "op");
                  }),
                  {"'op'", "'output_padding'", ">= 0"});
  expect_contains(error_of([&] {
                    net.add_layer(
                        kLayerPooling, {x}, 1,
                        attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"ceil_mode", int64_t{2}}}), "c");
                  }),
                  {"'c'", "'ceil_mode'", "is 2", "allowed range: 0 to 1"});
  // mode is required in one place, the schema: no kernel defaults it.
  expect_contains(error_of([&] {
                    net.add_layer(kLayerPooling, {x}, 1, attrs({{"kernel", Ints{2, 2}}}), "nomode");
                  }),
                  {"'nomode'", "'mode'", "required"});
  // The wrong attribute type is named too.
  expect_contains(error_of([&] {
                    net.add_layer(kLayerConvolution, {x, w}, 1, attrs({{"group", std::string("2")}}), "t");
                  }),
                  {"'t'", "'group'", "expected int"});
  // The typed helpers go through the same decoding.
  ConvolutionDesc desc;
  desc.num_output_maps = 2;
  desc.kernel = {3, 3};
  desc.strides = {1, -2};
  expect_contains(error_of([&] {
                    net.add_convolution(x, desc, HostTensor(DataType::kFloat32, Dims{2, 2, 3, 3}));
                  }),
                  {"'strides'", ">= 1"});
}

TEST(OpParams, EditedAttributesAreDecodedAgainAndValidateNamesTheLayer) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 6, 6});
  Layer* pool =
      net.add_layer(kLayerPooling, {x}, 1, attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}}), "p");
  net.mark_output(pool->output(0));
  const PoolParams& first = params_of<PoolParams>(*pool);
  EXPECT_TRUE(first.is_max());
  EXPECT_EQ(first.kernel, (Ints{2, 2}));
  EXPECT_EQ(&params_of<PoolParams>(*pool), &first) << "cached: decoded once";

  pool->attrs().set("mode", std::string("average"));
  EXPECT_FALSE(params_of<PoolParams>(*pool).is_max()) << "an edit is seen";

  pool->attrs().set("mode", std::string("median"));
  expect_contains(error_of([&] { net.validate(); }), {"'p'", "'mode'", "\"median\"", "\"max\"", "\"average\""});
  expect_contains(error_of([&] { (void)params_of<PoolParams>(*pool); }), {"'p'", "'mode'"});
  // Another params type than the schema's is refused.
  pool->attrs().set("mode", std::string("max"));
  expect_contains(error_of([&] { (void)params_of<ConvParams>(*pool); }), {"'p'", "another type"});
}

// An engine's graph whose stored attributes do not decode fails to load, naming the layer and
// the attribute (the params come from the stored attributes; the format is unchanged).
TEST(OpParams, LoadingABadAttributeFailsNamingLayerAndAttribute) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 6, 6});
  Layer* pool =
      net.add_layer(kLayerPooling, {x}, 1, attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}}), "pool");
  net.mark_output(pool->output(0));

  auto load = [&] {
    engine_codec::ByteWriter w;
    engine_codec::WeightsWriter weights;
    engine_codec::encode_graph(net, w, weights);
    engine_codec::ByteReader r(w.bytes(), "graph");
    return engine_codec::decode_graph(r, weights.bytes);
  };
  std::unique_ptr<Network> loaded = load();
  EXPECT_TRUE(params_of<PoolParams>(*loaded->find_layer("pool")).is_max());

  pool->attrs().set("count_include_pad", int64_t{7});  // edited after creation: the file stores it
  expect_contains(error_of([&] { (void)load(); }), {"'pool'", "'count_include_pad'", "is 7", "0 to 1"});
}

// ---- conv_geometry: the one definition of output sizes and padding ---------------------------

ConvParams conv_params(Ints strides, Ints pads, Ints dilations, AutoPad auto_pad = AutoPad::kNotSet,
                       int64_t group = 1) {
  ConvParams p;
  p.window.strides = std::move(strides);
  p.window.pads = std::move(pads);
  p.window.dilations = std::move(dilations);
  p.window.auto_pad = auto_pad;
  p.group = group;
  return p;
}

TEST(ConvGeometry, ExplicitAsymmetricPadsStridesDilations) {
  // H: (9 + 1 + 2 - (2*(3-1)+1)) / 2 + 1 = 4; W: (8 + 0 + 1 - 3) / 1 + 1 = 7.
  const ConvGeometry g = conv_geometry(conv_params({2, 1}, {1, 0, 2, 1}, {2, 1}), Dims{2, 4, 9, 8}, Dims{6, 4, 3, 3});
  EXPECT_EQ(g.spatial_rank, 2);
  EXPECT_EQ(g.batch, 2);
  EXPECT_EQ(g.out_channels, 6);
  EXPECT_EQ(g.out, (Ints{4, 7}));
  EXPECT_EQ(g.pad_begin, (Ints{1, 0}));
  EXPECT_EQ(g.pad_end, (Ints{2, 1}));
  EXPECT_EQ(g.dilation, (Ints{2, 1}));
  EXPECT_EQ(g.kernel_volume(), 9);
  EXPECT_FALSE(g.pointwise());
  // Empty lists are the defaults.
  const ConvGeometry d = conv_geometry(ConvParams{}, Dims{1, 3, 5}, Dims{2, 3, 1});
  EXPECT_EQ(d.out, (Ints{5}));
  EXPECT_EQ(d.stride, (Ints{1}));
  EXPECT_TRUE(d.pointwise());
}

TEST(ConvGeometry, AutoPad) {
  const Dims w{1, 1, 3, 3};
  // SAME: out = ceil(in / s); total pad = (out-1)*s + k - in, the odd cell at the end (UPPER) or
  // the beginning (LOWER). H: in 7, s 2 -> out 4, total 2 -> 1/1; W: in 8, s 2 -> out 4, total 1.
  ConvGeometry up = conv_geometry(conv_params({2, 2}, {9, 9, 9, 9}, {}, AutoPad::kSameUpper), Dims{1, 1, 7, 8}, w);
  EXPECT_EQ(up.out, (Ints{4, 4}));
  EXPECT_EQ(up.pad_begin, (Ints{1, 0}));
  EXPECT_EQ(up.pad_end, (Ints{1, 1}));  // explicit pads are ignored under auto_pad
  ConvGeometry low = conv_geometry(conv_params({2, 2}, {}, {}, AutoPad::kSameLower), Dims{1, 1, 7, 8}, w);
  EXPECT_EQ(low.out, (Ints{4, 4}));
  EXPECT_EQ(low.pad_begin, (Ints{1, 1}));
  EXPECT_EQ(low.pad_end, (Ints{1, 0}));
  // Stride 1 keeps the size; dilation 2 makes the kernel extent 5 (total pad 4).
  ConvGeometry dil = conv_geometry(conv_params({}, {}, {2, 2}, AutoPad::kSameUpper), Dims{1, 1, 6, 6}, w);
  EXPECT_EQ(dil.out, (Ints{6, 6}));
  EXPECT_EQ(dil.pad_begin, (Ints{2, 2}));
  EXPECT_EQ(dil.pad_end, (Ints{2, 2}));
  ConvGeometry valid = conv_geometry(conv_params({2, 2}, {1, 1, 1, 1}, {}, AutoPad::kValid), Dims{1, 1, 7, 8}, w);
  EXPECT_EQ(valid.out, (Ints{3, 3}));
  EXPECT_EQ(valid.pad_begin, (Ints{0, 0}));
  // The same helper the ONNX importer uses.
  int64_t b = -1, e = -1;
  same_padding(AutoPad::kSameLower, 5, 4, 1, &b, &e);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(e, 1);
}

TEST(ConvGeometry, GroupsAndChannelChecks) {
  // Depthwise: C = 4, group 4, w [8, 1, 3, 3].
  const ConvGeometry g =
      conv_geometry(conv_params({}, {1, 1, 1, 1}, {}, AutoPad::kNotSet, 4), Dims{1, 4, 5, 5}, Dims{8, 1, 3, 3});
  EXPECT_EQ(g.group, 4);
  EXPECT_EQ(g.out_channels, 8);
  EXPECT_EQ(g.out, (Ints{5, 5}));
  expect_contains(error_of([&] {
                    conv_geometry(conv_params({}, {}, {}, AutoPad::kNotSet, 2), Dims{1, 4, 5, 5}, Dims{3, 2, 3, 3});
                  }),
                  {"divisible by group 2"});
  expect_contains(error_of([&] { conv_geometry(ConvParams{}, Dims{1, 4, 5, 5}, Dims{4, 3, 3, 3}); }), {"channels"});
  expect_contains(error_of([&] { conv_geometry(ConvParams{}, Dims{1, 3, 2, 5}, Dims{4, 3, 3, 3}); }), {"non-positive"});
  expect_contains(error_of([&] {
                    conv_geometry(conv_params({1, 1, 1}, {}, {}), Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3});
                  }),
                  {"'strides' has 3 values", "2 spatial dims"});
}

TEST(ConvGeometry, Deconvolution) {
  ConvParams p = conv_params({2, 2}, {1, 0, 0, 1}, {});
  p.deconv = true;
  p.output_padding = {1, 0};
  // out = (in-1)*s - pb - pe + d*(k-1) + op + 1: H (4-1)*2 - 1 - 0 + 2 + 1 + 1 = 9, W (5-1)*2 - 0 - 1 + 2 + 0 + 1 = 10.
  const ConvGeometry g = conv_geometry(p, Dims{2, 3, 4, 5}, Dims{3, 2, 3, 3});
  EXPECT_EQ(g.out_channels, 2);
  EXPECT_EQ(g.out, (Ints{9, 10}));
  // SAME: out = in * stride.
  ConvParams same = conv_params({2}, {}, {}, AutoPad::kSameUpper);
  same.deconv = true;
  const ConvGeometry s = conv_geometry(same, Dims{1, 2, 5}, Dims{2, 3, 3});
  EXPECT_EQ(s.out, (Ints{10}));
  EXPECT_EQ(s.pad_begin, (Ints{0}));
  EXPECT_EQ(s.pad_end, (Ints{1}));
  // Grouped: w [C, M/group, k]; M = 3 * 2.
  ConvParams grouped = conv_params({}, {}, {}, AutoPad::kNotSet, 2);
  grouped.deconv = true;
  EXPECT_EQ(conv_geometry(grouped, Dims{1, 4, 6}, Dims{4, 3, 2}).out_channels, 6);
}

TEST(PoolGeometry, CeilModeGlobalAndAutoPad) {
  PoolParams p;
  p.kernel = {2, 2};
  p.window.strides = {2, 2};
  p.window.pads = {1, 1, 1, 1};
  p.ceil_mode = true;
  // ceil((5+2-2)/2)+1 = 4 windows, but the 4th would start in the right padding only: 3.
  EXPECT_EQ(pool_geometry(p, Dims{1, 2, 5, 5}).out, (Ints{3, 3}));
  p.ceil_mode = false;
  EXPECT_EQ(pool_geometry(p, Dims{1, 2, 5, 5}).out, (Ints{3, 3}));
  p.window.auto_pad = AutoPad::kSameUpper;
  const PoolGeometry same = pool_geometry(p, Dims{1, 2, 5, 6});
  EXPECT_EQ(same.out, (Ints{3, 3}));
  EXPECT_EQ(same.pad_begin, (Ints{0, 0}));
  EXPECT_EQ(same.pad_end, (Ints{1, 0}));
  PoolParams global;
  global.global = true;
  const PoolGeometry g = pool_geometry(global, Dims{2, 3, 4, 5, 6});
  EXPECT_EQ(g.out, (Ints{1, 1, 1}));
  EXPECT_EQ(g.kernel, (Ints{4, 5, 6}));
  expect_contains(error_of([&] { pool_geometry(PoolParams{}, Dims{1, 2, 5, 5}); }), {"'kernel'", "global=1"});
}

// ---- the schema traits the passes read -----------------------------------------------------

TEST(OpTraits, PassListsAreSchemaFlags) {
  const auto traits = [](const char* type) { return OpSchemaRegistry::instance().find(type)->traits; };
  EXPECT_TRUE(traits(kLayerConvolution).channels_last_seed);
  EXPECT_TRUE(traits(kLayerDeconvolution).channels_last_seed);
  EXPECT_FALSE(traits(kLayerPooling).channels_last_seed);
  for (const char* t :
       {kLayerConvolution, kLayerDeconvolution, kLayerPooling, kLayerActivation, kLayerParametricReLU, kLayerScale,
        kLayerElementWise, kLayerFusedElementWise, kLayerConcatenation, kLayerResize, kLayerIdentity, kLayerCast}) {
    EXPECT_TRUE(traits(t).channels_last) << t;
  }
  EXPECT_FALSE(traits(kLayerSoftMax).channels_last);
  for (const char* t : {kLayerActivation, kLayerUnary, kLayerScale, kLayerElementWise}) {
    EXPECT_TRUE(traits(t).elementwise_fusible) << t;
  }
  EXPECT_FALSE(traits(kLayerConvolution).elementwise_fusible);

  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 4});
  Layer* ln = net.add_layer(kLayerNormalization, {x}, 1, attrs({{"mode", std::string("layer")}}), "ln");
  Layer* in = net.add_layer(kLayerNormalization, {x}, 1, attrs({{"mode", std::string("instance")}}), "in");
  Layer* sum = net.add_layer(kLayerElementWise, {x, x}, 1, attrs({{"op", std::string("sum")}}), "sum");
  Layer* prod = net.add_layer(kLayerElementWise, {x, x}, 1, attrs({{"op", std::string("prod")}}), "prod");
  const auto role = [](const Layer* l) {
    return OpSchemaRegistry::instance().find(l->type())->traits.accuracy_role(*l);
  };
  EXPECT_EQ(role(ln), AccuracyRole::kAnchor);
  EXPECT_EQ(role(in), AccuracyRole::kNone);
  EXPECT_EQ(role(sum), AccuracyRole::kStream);
  EXPECT_EQ(role(prod), AccuracyRole::kNone);
}

// ---- Resize: ResizeParams, resize_output_dims, resize_axes ----------------------------------

TEST(OpParams, ResizeAttributesFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 4, 4});
  Tensor* scales =
      net.add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{4}, std::vector<float>{1, 1, 2, 2}), "scales")
          ->output(0);
  const auto add = [&](Attributes a, const std::string& name) {
    net.add_layer(kLayerResize, {x, scales}, 1, std::move(a), name);
  };
  expect_contains(error_of([&] {
                    add(attrs({{"mode", std::string("bicubic")}}), "r1");
                  }),
                  {"'r1'", "Resize", "'mode'", "\"bicubic\"", "\"nearest\"", "\"linear\"", "\"cubic\""});
  expect_contains(error_of([&] {
                    add(attrs({{"coordinate_transformation_mode", std::string("half")}}), "r2");
                  }),
                  {"'r2'", "'coordinate_transformation_mode'", "\"half\"", "\"half_pixel\"", "\"half_pixel_symmetric\"",
                   "\"pytorch_half_pixel\"", "\"align_corners\"", "\"asymmetric\"", "\"tf_half_pixel_for_nn\""});
  expect_contains(error_of([&] {
                    add(attrs({{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}), "r3");
                  }),
                  {"'r3'", "'coordinate_transformation_mode'", "tf_crop_and_resize", "roi"});
  expect_contains(error_of([&] {
                    add(attrs({{"nearest_mode", std::string("round")}}), "r4");
                  }),
                  {"'r4'", "'nearest_mode'", "\"round\"", "\"round_prefer_floor\"", "\"round_prefer_ceil\"",
                   "\"floor\"", "\"ceil\""});
  expect_contains(error_of([&] {
                    add(attrs({{"exclude_outside", int64_t{2}}}), "r5");
                  }),
                  {"'r5'", "'exclude_outside'", "is 2", "0 to 1"});
  EXPECT_EQ(net.num_layers(), 1) << "only the constant";

  Layer* ok = net.add_layer(kLayerResize, {x, scales}, 1,
                            attrs({{"mode", std::string("cubic")},
                                   {"coordinate_transformation_mode", std::string("align_corners")},
                                   {"cubic_coeff_a", -0.5},
                                   {"exclude_outside", int64_t{1}}}),
                            "r");
  const ResizeParams& p = params_of<ResizeParams>(*ok);
  EXPECT_EQ(p.mode, InterpolationMode::kCubic);
  EXPECT_EQ(p.coord, ResizeCoordMode::kAlignCorners);
  EXPECT_EQ(p.nearest, ResizeNearestMode::kRoundPreferFloor) << "the schema's default";
  EXPECT_EQ(p.cubic_a, -0.5);
  EXPECT_TRUE(p.exclude_outside);
}

TEST(ResizeGeometry, OutputDimsAndAxes) {
  // floor(in * scale) in float: 7 * 1.5 = 10.5 -> 10; 5 * 0.3 = 1.5 -> 1.
  EXPECT_EQ(resize_output_dims(Dims{1, 3, 5, 7}, {1, 1, 0.3, 1.5}, {}), (Dims{1, 3, 1, 10}));
  EXPECT_EQ(resize_output_dims(Dims{1, 3, 5, 7}, {}, {2, 3, 9, 4}), (Dims{2, 3, 9, 4}));
  expect_contains(error_of([] { resize_output_dims(Dims{2, 3}, {}, {}); }), {"needs scales", "or sizes"});
  expect_contains(error_of([] { resize_output_dims(Dims{2, 3}, {1, 1}, {2, 3}); }), {"not both"});
  expect_contains(error_of([] { resize_output_dims(Dims{2, 3}, {1}, {}); }), {"scales has 1 values", "rank 2"});
  expect_contains(error_of([] { resize_output_dims(Dims{2, 3}, {1, 0}, {}); }), {"positive and finite", "axis 1"});
  expect_contains(error_of([] { resize_output_dims(Dims{2, 3}, {}, {2, -1}); }), {"sizes must be >= 0"});
  expect_contains(error_of([] { resize_output_dims(Dims{0, 3}, {}, {2, 3}); }), {"axis 0 of extent 0"});

  // With scales: the given scale, resized length in * scale (fractional); else out / in and out.
  const std::vector<ResizeAxis> given = resize_axes(Dims{1, 5, 7}, Dims{1, 1, 10}, {1, 0.3, 1.5});
  EXPECT_TRUE(given[0].identity());
  EXPECT_FLOAT_EQ(given[1].scale, 0.3f);
  EXPECT_DOUBLE_EQ(given[1].resized_len, static_cast<double>(0.3f) * 5);
  EXPECT_FALSE(given[1].identity());
  EXPECT_DOUBLE_EQ(given[2].resized_len, 10.5);
  const std::vector<ResizeAxis> sized = resize_axes(Dims{4, 6}, Dims{4, 9}, {});
  EXPECT_TRUE(sized[0].identity());
  EXPECT_EQ(sized[1].scale, 9.0f / 6.0f);
  EXPECT_EQ(sized[1].resized_len, 9.0);
  expect_contains(error_of([] { resize_axes(Dims{4, 6}, Dims{4}, {}); }), {"ranks differ"});
  expect_contains(error_of([] { resize_axes(Dims{4, 6}, Dims{4, 6}, {1}); }), {"one value per axis"});
  EXPECT_STREQ(to_string(InterpolationMode::kCubic), "cubic") << "messages use the decoding's names";
}

// ---- Reduce and ArgReduce: ReduceParams, ArgReduceParams and their axis rules ------------------

TEST(OpParams, RnnAttributesFailWhenCreatedAndEmptyAlphaBetaTakeTheDefaults) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{5, 2, 3});
  Tensor* w = net.add_input("w", DataType::kFloat32, Dims{2, 24, 3});
  Tensor* r = net.add_input("r", DataType::kFloat32, Dims{2, 24, 8});
  const auto rnn = [&](const std::string& name, Attributes a) {
    return net.add_layer(kLayerRNN, {x, w, r}, 2, a, name);
  };
  const std::vector<std::string> acts = {"hard_sigmoid", "tanh", "leaky_relu", "tanh"};
  expect_contains(
      error_of([&] {
        rnn("c", attrs({{"cell", std::string("gruu")}, {"hidden_size", int64_t{8}}, {"activations", acts}}));
      }),
      {"'c'", "RNN", "'cell'", "\"gruu\"", "\"rnn\"", "\"gru\"", "\"lstm\""});
  expect_contains(error_of([&] {
                    rnn("h", attrs({{"cell", std::string("gru")}, {"hidden_size", int64_t{0}}, {"activations", acts}}));
                  }),
                  {"'h'", "'hidden_size'", "is 0"});
  expect_contains(error_of([&] {
                    rnn("n", attrs({{"cell", std::string("gru")}, {"hidden_size", int64_t{8}}, {"activations", acts}}));
                  }),
                  {"'n'", "'activations'", "must list 2 names", "got 4"});
  expect_contains(error_of([&] {
                    rnn("ab", attrs({{"cell", std::string("gru")},
                                     {"hidden_size", int64_t{8}},
                                     {"direction", std::string("bidirectional")},
                                     {"activations", acts},
                                     {"activation_alpha", std::vector<double>{1.0}}}));
                  }),
                  {"'ab'", "'activation_alpha'", "one value per activation (4)"});
  // RNNDesc leaves alpha and beta empty: each activation's ONNX Runtime default.
  RNNDesc d;
  d.cell = RNNCell::kGru;
  d.hidden_size = 8;
  d.direction = RNNDirection::kBidirectional;
  d.activations = acts;
  const RnnParams& p = params_of<RnnParams>(*net.add_rnn({x, w, r}, d));
  EXPECT_EQ(p.cell, RNNCell::kGru);
  EXPECT_EQ(p.directions(), 2);
  EXPECT_EQ(p.gates(), 3);
  EXPECT_EQ(p.alpha, (std::vector<double>{0.2, 0.0, 0.01, 0.0}));
  EXPECT_EQ(p.beta, (std::vector<double>{0.5, 0.0, 0.0, 0.0}));
}

TEST(OpParams, ReduceAndArgReduceAttributesFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3, 4});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerReduce, {x}, 1, attrs({{"op", std::string("average")}}), "red");
                  }),
                  {"'red'", "Reduce", "'op'", "\"average\"", "\"sum\"", "\"mean\"", "\"log_sum_exp\""});
  expect_contains(error_of([&] { net.add_layer(kLayerReduce, {x}, 1, attrs({}), "red0"); }),
                  {"'red0'", "'op'", "required"});
  expect_contains(
      error_of([&] {
        net.add_layer(kLayerReduce, {x}, 1, attrs({{"op", std::string("sum")}, {"keep_dims", int64_t{-1}}}), "k");
      }),
      {"'k'", "'keep_dims'", "is -1", "0 to 1"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerArgReduce, {x}, 1, attrs({{"op", std::string("mean")}}), "arg");
                  }),
                  {"'arg'", "ArgReduce", "'op'", "\"mean\"", "\"max\"", "\"min\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerArgReduce, {x}, 1,
                                  attrs({{"op", std::string("max")}, {"select_last_index", int64_t{3}}}), "arg2");
                  }),
                  {"'arg2'", "'select_last_index'", "is 3", "0 to 1"});

  Layer* r =
      net.add_layer(kLayerReduce, {x}, 1,
                    attrs({{"op", std::string("log_sum_exp")}, {"axes", Ints{-1, 0}}, {"keep_dims", int64_t{0}}}), "r");
  EXPECT_EQ(params_of<ReduceParams>(*r).op, ReduceOp::kLogSumExp);
  EXPECT_EQ(params_of<ReduceParams>(*r).axes, (Ints{-1, 0}));
  EXPECT_FALSE(params_of<ReduceParams>(*r).keep_dims);
  Layer* a = net.add_layer(kLayerArgReduce, {x}, 1, attrs({{"op", std::string("min")}, {"axis", int64_t{-2}}}), "a");
  EXPECT_FALSE(params_of<ArgReduceParams>(*a).is_max);
  EXPECT_EQ(params_of<ArgReduceParams>(*a).axis, -2);
  EXPECT_TRUE(params_of<ArgReduceParams>(*a).keep_dims) << "the schema's default";
}

TEST(ReduceGeometry, AxesAndOutputDims) {
  ReduceParams p;
  p.axes = {-1, 0};
  EXPECT_EQ(reduced_axes(p, 3), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(reduce_output_dims(p, Dims{2, 3, 4}), (Dims{1, 3, 1}));
  p.keep_dims = false;
  EXPECT_EQ(reduce_output_dims(p, Dims{2, 3, 4}), (Dims{3}));
  p.axes = {};
  EXPECT_EQ(reduced_axes(p, 2), (std::vector<bool>{true, true})) << "no axes: all";
  EXPECT_EQ(reduce_output_dims(p, Dims{2, 3}), (Dims{}));
  p.axes = {1, -1};
  expect_contains(error_of([&] { reduced_axes(p, 2); }), {"'axes' names axis 1 twice"});
  p.axes = {3};
  expect_contains(error_of([&] { reduced_axes(p, 3); }), {"axis 3 is out of range", "rank 3", "-3 to 2"});

  ArgReduceParams a;
  a.axis = -1;
  EXPECT_EQ(arg_reduce_axis(a, 3), 2);
  EXPECT_EQ(arg_reduce_output_dims(a, Dims{2, 3, 4}), (Dims{2, 3, 1}));
  a.keep_dims = false;
  EXPECT_EQ(arg_reduce_output_dims(a, Dims{2, 3, 4}), (Dims{2, 3}));
  a.one_hot = true;
  EXPECT_EQ(arg_reduce_output_dims(a, Dims{2, 3, 4}), (Dims{2, 3, 4})) << "one_hot: x's dims";
  a.axis = -4;
  expect_contains(error_of([&] { arg_reduce_axis(a, 3); }), {"axis -4 is out of range"});
}

// ---- Scatter: ScatterParams and check_scatter_shapes ---------------------------------------

TEST(OpParams, ScatterAttributesFailWhenCreated) {
  Network net;
  Tensor* data = net.add_input("data", DataType::kFloat32, Dims{4, 5});
  Tensor* idx = net.add_input("idx", DataType::kInt64, Dims{2, 5});
  Tensor* upd = net.add_input("upd", DataType::kFloat32, Dims{2, 5});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerScatter, {data, idx, upd}, 1, attrs({{"mode", std::string("slices")}}), "s1");
                  }),
                  {"'s1'", "Scatter", "'mode'", "\"slices\"", "\"elements\"", "\"nd\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerScatter, {data, idx, upd}, 1, attrs({{"reduction", std::string("sum")}}), "s2");
                  }),
                  {"'s2'", "'reduction'", "\"sum\"", "\"none\"", "\"add\"", "\"mul\"", "\"max\"", "\"min\""});
  Layer* s = net.add_layer(kLayerScatter, {data, idx, upd}, 1,
                           attrs({{"mode", std::string("nd")}, {"reduction", std::string("max")}}), "s");
  EXPECT_TRUE(params_of<ScatterParams>(*s).nd);
  EXPECT_EQ(params_of<ScatterParams>(*s).reduction, ScatterReductionKind::kMax);
  EXPECT_EQ(params_of<ScatterParams>(*s).axis, 0) << "the schema's default";
}

TEST(ScatterGeometry, ShapeRules) {
  ScatterParams e;
  e.axis = -1;
  EXPECT_EQ(scatter_axis(e, 2), 1);
  EXPECT_NO_THROW(check_scatter_shapes(e, Dims{4, 5}, Dims{2, 5}, Dims{2, 5}));
  expect_contains(error_of([&] {
                    check_scatter_shapes(e, Dims{4, 5}, Dims{2, 5}, Dims{2, 4});
                  }),
                  {"updates 2x4", "dims of indices 2x5"});
  expect_contains(error_of([&] { check_scatter_shapes(e, Dims{4, 5}, Dims{5}, Dims{5}); }), {"rank of data"});
  e.axis = 2;
  expect_contains(error_of([&] {
                    check_scatter_shapes(e, Dims{4, 5}, Dims{2, 5}, Dims{2, 5});
                  }),
                  {"axis 2 is out of range"});
  ScatterParams nd;
  nd.nd = true;
  EXPECT_NO_THROW(check_scatter_shapes(nd, Dims{4, 5, 6}, Dims{3, 2}, Dims{3, 6}));
  expect_contains(error_of([&] { check_scatter_shapes(nd, Dims{4, 5}, Dims{2, 3}, Dims{2}); }), {"1..2"});
  expect_contains(error_of([&] {
                    check_scatter_shapes(nd, Dims{4, 5}, Dims{2, 1}, Dims{2, 4});
                  }),
                  {"must have dims 2x5"});
  EXPECT_STREQ(to_string(ScatterReductionKind::kMul), "mul");
}

// ---- StringNormalizer: case_change_action and locale checked in one place -----------------------

TEST(OpParams, StringNormalizerAttributesFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kString, Dims{3});
  const auto add = [&](Attributes a, const std::string& name) {
    return net.add_layer(kLayerStringNormalizer, {x}, 2, std::move(a), name);
  };
  expect_contains(
      error_of([&] {
        add(attrs({{"case_change_action", std::string("lower")}}), "n1");
      }),
      {"'n1'", "StringNormalizer", "'case_change_action'", "\"lower\"", "\"NONE\"", "\"LOWER\"", "\"UPPER\""});
  expect_contains(error_of([&] {
                    add(attrs({{"locale", std::string("tr_TR")}}), "n2");
                  }),
                  {"'n2'", "'locale'", "tr_TR", "special casing"});
  expect_contains(error_of([&] {
                    add(attrs({{"is_case_sensitive", int64_t{2}}}), "n3");
                  }),
                  {"'n3'", "'is_case_sensitive'", "is 2", "0 to 1"});
  Layer* n = add(attrs({{"case_change_action", std::string("UPPER")},
                        {"stopwords", std::vector<std::string>{"a", "the"}},
                        {"locale", std::string("en_US.UTF-8")}}),
                 "n");
  const StringNormalizerParams& p = params_of<StringNormalizerParams>(*n);
  EXPECT_EQ(p.case_change, CaseChangeAction::kUpper);
  EXPECT_FALSE(p.case_sensitive);
  EXPECT_EQ(p.stopwords, (std::vector<std::string>{"a", "the"}));
  EXPECT_EQ(p.locale, "en_US.UTF-8");
}

// ---- Normalization and LRN: NormalizationParams, LrnParams, normalization_stats_view ----------

TEST(OpParams, NormalizationAttributesFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 6, 4});
  const auto add = [&](const std::string& type, Attributes a, const std::string& name) {
    return net.add_layer(type, {x}, 1, std::move(a), name);
  };
  expect_contains(
      error_of([&] {
        add(kLayerNormalization, attrs({{"mode", std::string("batch")}}), "n1");
      }),
      {"'n1'", "Normalization", "'mode'", "\"batch\"", "\"layer\"", "\"instance\"", "\"group\"", "\"mvn\"", "\"lp\""});
  expect_contains(error_of([&] { add(kLayerNormalization, attrs({}), "n0"); }), {"'n0'", "'mode'", "required"});
  expect_contains(error_of([&] {
                    add(kLayerNormalization, attrs({{"mode", std::string("lp")}, {"p", int64_t{3}}}), "n2");
                  }),
                  {"'n2'", "'p'", "is 3", "supports 1 and 2"});
  expect_contains(error_of([&] {
                    add(kLayerNormalization, attrs({{"mode", std::string("group")}, {"num_groups", int64_t{0}}}), "n3");
                  }),
                  {"'n3'", "'num_groups'", "is 0", ">= 1"});
  expect_contains(error_of([&] {
                    add(kLayerLRN, attrs({{"size", int64_t{0}}}), "lrn");
                  }),
                  {"'lrn'", "LRN", "'size'", ">= 1"});
  // p and num_groups only matter to their modes.
  Layer* n = add(kLayerNormalization,
                 attrs({{"mode", std::string("mvn")}, {"p", int64_t{3}}, {"normalize_variance", int64_t{0}}}), "mvn");
  EXPECT_EQ(params_of<NormalizationParams>(*n).mode, NormalizationMode::kMvn);
  EXPECT_FALSE(params_of<NormalizationParams>(*n).normalize_variance);
  EXPECT_EQ(params_of<NormalizationParams>(*n).axes, (Ints{0, 2, 3})) << "the schema's default";
  Layer* lrn = add(kLayerLRN, attrs({{"size", int64_t{5}}, {"beta", 0.5}}), "lrn_ok");
  EXPECT_EQ(params_of<LrnParams>(*lrn).size, 5);
  EXPECT_EQ(params_of<LrnParams>(*lrn).beta, 0.5);
  EXPECT_EQ(params_of<LrnParams>(*lrn).alpha, 1e-4);
}

TEST(NormalizationGeometry, StatsViews) {
  NormalizationParams p;
  p.mode = NormalizationMode::kLayer;
  p.axis = -2;
  NormStatsView v = normalization_stats_view(p, Dims{2, 3, 4});
  EXPECT_EQ(v.dims, (Ints{2, 3, 4}));
  EXPECT_EQ(v.reduced, (std::vector<bool>{false, true, true}));
  p.mode = NormalizationMode::kInstance;
  EXPECT_EQ(normalization_stats_view(p, Dims{2, 3, 4, 5}).reduced, (std::vector<bool>{false, false, true, true}));
  expect_contains(error_of([&] { normalization_stats_view(p, Dims{3}); }), {"'instance'", "rank >= 2"});
  p.mode = NormalizationMode::kGroup;
  p.num_groups = 3;
  v = normalization_stats_view(p, Dims{2, 6, 4, 5});
  EXPECT_EQ(v.dims, (Ints{2, 3, 40}));
  EXPECT_EQ(v.reduced, (std::vector<bool>{false, false, true}));
  p.num_groups = 4;
  expect_contains(error_of([&] { normalization_stats_view(p, Dims{2, 6, 4}); }), {"divide the channel count 6"});
  p.mode = NormalizationMode::kMvn;
  p.axes = {0, -1};
  EXPECT_EQ(normalization_stats_view(p, Dims{2, 3, 4}).reduced, (std::vector<bool>{true, false, true}));
  p.axes = {1, -2};
  expect_contains(error_of([&] { normalization_stats_view(p, Dims{2, 3, 4}); }), {"names axis 1 twice"});
  p.mode = NormalizationMode::kLp;
  p.axis = 1;
  EXPECT_EQ(normalization_stats_view(p, Dims{2, 3, 4}).reduced, (std::vector<bool>{false, true, false}));
  p.axis = 3;
  expect_contains(error_of([&] { normalization_stats_view(p, Dims{2, 3, 4}); }), {"axis 3 is out of range"});
  EXPECT_STREQ(to_string(NormalizationMode::kMvn), "mvn");
}

// ---- Sampling: GridSampleParams, RoiAlignParams, MaxRoiPoolParams and their output sizes --------

TEST(OpParams, SamplingAttributesFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 8, 8});
  Tensor* grid = net.add_input("grid", DataType::kFloat32, Dims{1, 4, 4, 2});
  Tensor* rois = net.add_input("rois", DataType::kFloat32, Dims{3, 4});
  Tensor* bi = net.add_input("bi", DataType::kInt64, Dims{3});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerGridSample, {x, grid}, 1, attrs({{"mode", std::string("bilinear")}}), "g1");
                  }),
                  {"'g1'", "GridSample", "'mode'", "\"bilinear\"", "\"linear\"", "\"nearest\"", "\"cubic\""});
  expect_contains(
      error_of([&] {
        net.add_layer(kLayerGridSample, {x, grid}, 1, attrs({{"padding_mode", std::string("mirror")}}), "g2");
      }),
      {"'g2'", "'padding_mode'", "\"zeros\"", "\"border\"", "\"reflection\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerGridSample, {x, grid}, 1, attrs({{"align_corners", int64_t{-1}}}), "g3");
                  }),
                  {"'g3'", "'align_corners'", "is -1", "0 to 1"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerRoiAlign, {x, rois, bi}, 1, attrs({{"mode", std::string("mean")}}), "r1");
                  }),
                  {"'r1'", "RoiAlign", "'mode'", "\"avg\"", "\"max\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerRoiAlign, {x, rois, bi}, 1,
                                  attrs({{"coordinate_transformation_mode", std::string("align_corners")}}), "r2");
                  }),
                  {"'r2'", "'coordinate_transformation_mode'", "\"half_pixel\"", "\"output_half_pixel\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerRoiAlign, {x, rois, bi}, 1, attrs({{"output_width", int64_t{0}}}), "r3");
                  }),
                  {"'r3'", "'output_width'", "is 0", "allowed range: 1 to"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerRoiAlign, {x, rois, bi}, 1, attrs({{"sampling_ratio", int64_t{-1}}}), "r4");
                  }),
                  {"'r4'", "'sampling_ratio'", "is -1", "allowed range: 0 to"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerMaxRoiPool, {x, rois}, 1, attrs({{"pooled_shape", Ints{2, 0}}}), "m1");
                  }),
                  {"'m1'", "MaxRoiPool", "'pooled_shape'", "[2, 0]", "two positive values"});

  Layer* r =
      net.add_layer(kLayerRoiAlign, {x, rois, bi}, 1,
                    attrs({{"mode", std::string("max")}, {"output_height", int64_t{3}}, {"spatial_scale", 0.25}}), "r");
  EXPECT_TRUE(params_of<RoiAlignParams>(*r).max_mode);
  EXPECT_EQ(params_of<RoiAlignParams>(*r).output_height, 3);
  EXPECT_EQ(params_of<RoiAlignParams>(*r).output_width, 1) << "the schema's default";
  EXPECT_TRUE(params_of<RoiAlignParams>(*r).half_pixel);
  EXPECT_EQ(params_of<RoiAlignParams>(*r).spatial_scale, 0.25);
  Layer* g = net.add_layer(kLayerGridSample, {x, grid}, 1,
                           attrs({{"mode", std::string("cubic")}, {"padding_mode", std::string("reflection")}}), "g");
  EXPECT_EQ(params_of<GridSampleParams>(*g).mode, InterpolationMode::kCubic);
  EXPECT_EQ(params_of<GridSampleParams>(*g).padding, GridSamplePadding::kReflection);
}

TEST(SamplingGeometry, OutputDims) {
  EXPECT_EQ(grid_sample_output_dims(Dims{2, 3, 5, 7}, Dims{2, 4, 6, 2}), (Dims{2, 3, 4, 6}));
  expect_contains(error_of([] {
                    grid_sample_output_dims(Dims{2, 3, 5, 7}, Dims{2, 4, 6, 3});
                  }),
                  {"must be [N, O1..2, 2]"});
  expect_contains(error_of([] { grid_sample_output_dims(Dims{2, 3}, Dims{2, 3}); }), {"at least one spatial dim"});
  RoiAlignParams ra;
  ra.output_height = 2;
  ra.output_width = 3;
  EXPECT_EQ(roi_align_output_dims(ra, Dims{2, 4, 9, 9}, Dims{5, 4}, Dims{5}), (Dims{5, 4, 2, 3}));
  expect_contains(error_of([&] { roi_align_output_dims(ra, Dims{2, 4, 9, 9}, Dims{5, 4}, Dims{4}); }), {"one per roi"});
  expect_contains(error_of([&] { roi_align_output_dims(ra, Dims{2, 4, 9}, Dims{5, 4}, Dims{5}); }), {"[N, C, H, W]"});
  MaxRoiPoolParams mp;
  mp.pooled_height = 6;
  mp.pooled_width = 7;
  EXPECT_EQ(max_roi_pool_output_dims(mp, Dims{1, 4, 8, 8}, Dims{3, 5}), (Dims{3, 4, 6, 7}));
  expect_contains(error_of([&] { max_roi_pool_output_dims(mp, Dims{1, 4, 8, 8}, Dims{3, 4}); }), {"[num_rois, 5]"});
}

// ---- Gather: GatherParams and gather_output_dims -----------------------------------------------

TEST(OpParams, GatherAttributesFailWhenCreated) {
  Network net;
  Tensor* data = net.add_input("data", DataType::kFloat32, Dims{4, 5});
  Tensor* idx = net.add_input("idx", DataType::kInt64, Dims{2});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerGather, {data, idx}, 1, attrs({{"mode", std::string("take")}}), "g1");
                  }),
                  {"'g1'", "Gather", "'mode'", "\"take\"", "\"default\"", "\"elements\"", "\"nd\""});
  Layer* g = net.add_layer(kLayerGather, {data, idx}, 1, attrs({{"axis", int64_t{-1}}}), "g");
  EXPECT_EQ(params_of<GatherParams>(*g).mode, GatherMode::kDefault) << "the schema's default";
  EXPECT_EQ(params_of<GatherParams>(*g).axis, -1);
}

TEST(GatherGeometry, OutputDims) {
  GatherParams p;
  p.axis = -1;
  EXPECT_EQ(gather_axis(p, 3), 2);
  EXPECT_EQ(gather_output_dims(p, Dims{4, 5, 6}, Dims{2, 3}), (Dims{4, 5, 2, 3}));
  EXPECT_EQ(gather_output_dims(p, Dims{4}, Dims{}), (Dims{})) << "a scalar index drops the axis";
  expect_contains(error_of([&] { gather_output_dims(p, Dims{}, Dims{2}); }), {"scalar"});
  EXPECT_EQ(gather_output_dims(p, Dims{2, 2, 2, 2, 2, 2, 2}, Dims{2, 2}).rank(), 8) << "kMaxDims is allowed";
  p.axis = 0;
  expect_contains(error_of([&] {
                    gather_output_dims(p, Dims{2, 2, 2, 2, 2, 2, 2, 2}, Dims{2, 2});
                  }),
                  {"would have rank 9", "at most 8"});
  p.mode = GatherMode::kElements;
  p.axis = 1;
  EXPECT_EQ(gather_output_dims(p, Dims{4, 5}, Dims{3, 9}), (Dims{3, 9}));
  expect_contains(error_of([&] { gather_output_dims(p, Dims{4, 5}, Dims{5, 2}); }), {"exceed data", "axis 0"});
  expect_contains(error_of([&] { gather_output_dims(p, Dims{4, 5}, Dims{5}); }), {"same rank as data"});
  p.mode = GatherMode::kNd;
  p.batch_dims = 1;
  EXPECT_EQ(gather_output_dims(p, Dims{2, 3, 4, 5}, Dims{2, 7, 2}), (Dims{2, 7, 5}));
  expect_contains(error_of([&] { gather_output_dims(p, Dims{2, 3, 4}, Dims{3, 7, 2}); }), {"batch dim 0 differs"});
  expect_contains(error_of([&] {
                    gather_output_dims(p, Dims{2, 3}, Dims{2, 3});
                  }),
                  {"[1, rank(data) - batch_dims] = [1, 1]"});
  p.batch_dims = -1;
  expect_contains(error_of([&] { gather_output_dims(p, Dims{2, 3}, Dims{2, 1}); }), {"batch_dims -1 must be in"});
}

// ---- the params' enums are the public ones (one definition each) ---------------------------------

TEST(OpParamsEnums, AreThePublicEnumsAndEveryValueComesThroughTheNetworkApi) {
  static_assert(std::is_same_v<decltype(PoolParams::mode), PoolingType>);
  static_assert(std::is_same_v<decltype(NormalizationParams::mode), NormalizationMode>);
  static_assert(std::is_same_v<decltype(GridSampleParams::mode), InterpolationMode>);
  static_assert(std::is_same_v<decltype(ScatterParams::reduction), ScatterReductionKind>);
  static_assert(std::is_same_v<decltype(StringNormalizerParams::case_change), CaseChangeAction>);
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 4, 4});
  for (PoolingType type : {PoolingType::kMax, PoolingType::kAverage}) {
    PoolingDesc d;
    d.type = type;
    d.kernel = {2, 2};
    EXPECT_EQ(params_of<PoolParams>(*net.add_pooling(x, d)).mode, type);
  }
  for (NormalizationMode mode : {NormalizationMode::kLayer, NormalizationMode::kInstance, NormalizationMode::kGroup,
                                 NormalizationMode::kMvn, NormalizationMode::kLp}) {
    NormalizationDesc d;
    d.mode = mode;
    EXPECT_EQ(params_of<NormalizationParams>(*net.add_normalization(x, nullptr, nullptr, d)).mode, mode);
  }
  Tensor* grid = net.add_input("grid", DataType::kFloat32, Dims{1, 3, 3, 2});
  for (InterpolationMode mode : {InterpolationMode::kNearest, InterpolationMode::kLinear, InterpolationMode::kCubic}) {
    EXPECT_EQ(params_of<GridSampleParams>(*net.add_grid_sample(x, grid, mode)).mode, mode);
  }
  Tensor* data = net.add_input("data", DataType::kFloat32, Dims{4, 5});
  Tensor* idx = net.add_input("idx", DataType::kInt64, Dims{2, 5});
  Tensor* upd = net.add_input("upd", DataType::kFloat32, Dims{2, 5});
  for (ScatterReductionKind reduction :
       {ScatterReductionKind::kNone, ScatterReductionKind::kAdd, ScatterReductionKind::kMul, ScatterReductionKind::kMax,
        ScatterReductionKind::kMin}) {
    Layer* s = net.add_scatter(data, idx, upd, ScatterMode::kElements, 0, reduction);
    EXPECT_EQ(params_of<ScatterParams>(*s).reduction, reduction);
  }
  Tensor* words = net.add_input("words", DataType::kString, Dims{3});
  for (CaseChangeAction action : {CaseChangeAction::kNone, CaseChangeAction::kLower, CaseChangeAction::kUpper}) {
    EXPECT_EQ(params_of<StringNormalizerParams>(*net.add_string_normalizer(words, action)).case_change, action);
  }
  // A value outside the enum fails in the Network API, before any layer is made.
  const int layers = net.num_layers();
  expect_contains(error_of([&] {
                    net.add_scatter(data, idx, upd, ScatterMode::kElements, 0, static_cast<ScatterReductionKind>(7));
                  }),
                  {"invalid enum value 7"});
  expect_contains(error_of([&] { net.add_string_normalizer(words, static_cast<CaseChangeAction>(3)); }),
                  {"invalid enum value 3"});
  EXPECT_EQ(net.num_layers(), layers);
}

}  // namespace
}  // namespace kiln
