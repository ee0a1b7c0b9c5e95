// Typed op parameters of the data-movement, quantization, element-wise (Scale, Cast, BitShift),
// Einsum and FusedElementWise layers (src/ir/data_params.h, quantize_params.h,
// elementwise_params.h, einsum_params.h, ops_fused.h): bad attribute values fail when the layer is
// created, naming the layer and the attribute; decoded params equal the attributes; absent
// attributes take the schema's defaults; an engine round trip decodes the same params.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/engine/network_codec.h"
#include "src/ir/data_params.h"
#include "src/ir/einsum_params.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/ops_fused.h"
#include "src/ir/quantize_params.h"
#include "tests/op_params_util.h"

namespace kiln {
namespace {

using namespace op_params_test;  // NOLINT: error_of, expect_contains, attrs, Ints

// ---- bad values fail when the layer is created -----------------------------------------------

TEST(OpParamsData, BadEnumsFailWhenCreatedNamingLayerAndAttribute) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
  Tensor* pads = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{4}, {0, 0, 0, 0}))->output(0);
  Tensor* i = net.add_input("i", DataType::kInt32, Dims{4});
  const int before = net.num_layers();

  expect_contains(error_of([&] {
                    net.add_layer(kLayerPadding, {x, pads}, 1, attrs({{"mode", std::string("mirror")}}), "pad1");
                  }),
                  {"'pad1'", "Padding", "'mode'", "\"mirror\"", "\"constant\"", "\"reflect\"", "\"edge\"", "\"wrap\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerCast, {x}, 1, attrs({{"to", std::string("float128")}}), "cast1");
                  }),
                  {"'cast1'", "Cast", "'to'", "float128"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerBitShift, {i, i}, 1, attrs({{"direction", std::string("up")}}), "shift1");
                  }),
                  {"'shift1'", "BitShift", "'direction'", "\"up\"", "\"left\"", "\"right\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerShuffle, {x}, 1, attrs({{"reshape_mode", std::string("bogus")}}), "sh1");
                  }),
                  {"'sh1'", "Shuffle", "'reshape_mode'", "\"bogus\"", "\"flatten\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerScale, {x}, 1, attrs({{"mode", std::string("per_row")}}), "scale1");
                  }),
                  {"'scale1'", "Scale", "'mode'", "\"per_row\"", "\"uniform\"", "\"channel\"", "\"elementwise\""});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerFill, {i}, 1, attrs({{"mode", std::string("ramp")}}), "fill1");
                  }),
                  {"'fill1'", "Fill", "'mode'", "\"ramp\"", "\"constant\"", "\"range\""});
  EXPECT_EQ(net.num_layers(), before) << "a layer that fails to decode is not added";
}

TEST(OpParamsData, BadValuesAndMissingRequiredFailWhenCreated) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 4});
  Tensor* scale = net.add_constant(HostTensor::from_vector<float>(DataType::kFloat32, Dims{1}, {0.5f}))->output(0);
  Tensor* shape = net.add_input("shape", DataType::kInt64, Dims{2});

  expect_contains(error_of([&] {
                    net.add_layer(kLayerQuantize, {x, scale}, 1, attrs({{"block_size", int64_t{-2}}}), "q1");
                  }),
                  {"'q1'", "Quantize", "'block_size'", "-2"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerDequantize, {x, scale}, 1, attrs({{"block_size", int64_t{-1}}}), "dq1");
                  }),
                  {"'dq1'", "Dequantize", "'block_size'"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerQuantize, {x, scale}, 1, attrs({{"output_type", std::string("int3")}}), "q2");
                  }),
                  {"'q2'", "'output_type'", "int3"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerEinsum, {x, x}, 1, attrs({{"equation", std::string("ij,jk->iz")}}), "ein1");
                  }),
                  {"'ein1'", "Einsum", "'equation'", "'z'", "appears in no operand"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerEinsum, {x}, 1, attrs({{"equation", std::string("i$j")}}), "ein2");
                  }),
                  {"'ein2'", "'equation'", "unexpected character"});
  expect_contains(error_of([&] {
                    net.add_layer(
                        kLayerFill, {shape}, 1,
                        attrs({{"mode", std::string("constant")}, {"value", HostTensor(DataType::kFloat32, Dims{2})}}),
                        "fill2");
                  }),
                  {"'fill2'", "'value'", "one element"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerFusedElementWise, {x}, 1,
                                  attrs({{"program", std::vector<std::string>{"binary sum r0 r7"}}}), "fused1");
                  }),
                  {"'fused1'", "FusedElementWise"});
  // Required attributes.
  expect_contains(error_of([&] {
                    net.add_layer(kLayerConcatenation, {x, x}, 1, {}, "cat1");
                  }),
                  {"'cat1'", "'axis'", "required"});
  expect_contains(error_of([&] { net.add_layer(kLayerCast, {x}, 1, {}, "cast2"); }), {"'cast2'", "'to'", "required"});
  expect_contains(error_of([&] {
                    net.add_layer(kLayerBitShift, {x, x}, 1, {}, "shift2");
                  }),
                  {"'shift2'", "'direction'", "required"});
  expect_contains(error_of([&] { net.add_layer(kLayerEinsum, {x}, 1, {}, "ein3"); }),
                  {"'ein3'", "'equation'", "required"});
}

TEST(OpParamsData, AnEditToABadValueFailsValidation) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kInt32, Dims{4});
  Layer* l = net.add_bit_shift(x, x, BitShiftDirection::kRight);
  net.mark_output(l->output(0));
  EXPECT_EQ(params_of<BitShiftParams>(*l).direction, BitShiftDirection::kRight);
  l->attrs().set("direction", std::string("sideways"));
  expect_contains(error_of([&] { net.validate(); }), {"'direction'", "\"sideways\""});
  l->attrs().set("direction", std::string("left"));
  EXPECT_EQ(params_of<BitShiftParams>(*l).direction, BitShiftDirection::kLeft) << "decoded again after the edit";
}

// ---- decoded params equal the attributes; defaults -------------------------------------------

TEST(OpParamsData, DataParamsEqualTheAttributes) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3, 4});
  Tensor* pads =
      net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{6}, {0, 0, 0, 0, 0, 0}))->output(0);
  Tensor* shape = net.add_input("shape", DataType::kInt64, Dims{1});

  Layer* sh = net.add_layer(kLayerShuffle, {x}, 1,
                            attrs({{"first_transpose", Ints{2, 0, 1}},
                                   {"reshape_mode", std::string("flatten")},
                                   {"axis", int64_t{2}},
                                   {"zero_is_placeholder", int64_t{0}},
                                   {"second_transpose", Ints{1, 0}}}));
  const ShuffleParams& s = params_of<ShuffleParams>(*sh);
  EXPECT_EQ(s.first_transpose, (Ints{2, 0, 1}));
  EXPECT_EQ(s.reshape_mode, ReshapeMode::kFlatten);
  EXPECT_EQ(s.axis, 2);
  EXPECT_FALSE(s.zero_is_placeholder);
  EXPECT_EQ(s.second_transpose, (Ints{1, 0}));

  Layer* sq =
      net.add_layer(kLayerShuffle, {x}, 1, attrs({{"reshape_mode", std::string("unsqueeze")}, {"axes", Ints{0, -1}}}));
  EXPECT_EQ(params_of<ShuffleParams>(*sq).reshape_mode, ReshapeMode::kUnsqueeze);
  EXPECT_EQ(params_of<ShuffleParams>(*sq).axes, (Ints{0, -1}));

  EXPECT_EQ(
      params_of<ConcatenationParams>(*net.add_layer(kLayerConcatenation, {x, x}, 1, attrs({{"axis", int64_t{-2}}})))
          .axis,
      -2);
  Layer* split = net.add_layer(kLayerSplit, {x}, 2, attrs({{"axis", int64_t{2}}, {"split", Ints{1, 3}}}));
  EXPECT_EQ(params_of<SplitParams>(*split).axis, 2);
  EXPECT_EQ(params_of<SplitParams>(*split).split, (Ints{1, 3}));

  for (PaddingMode m : {PaddingMode::kConstant, PaddingMode::kReflect, PaddingMode::kEdge, PaddingMode::kWrap}) {
    EXPECT_EQ(params_of<PaddingParams>(*net.add_padding(x, pads, nullptr, m)).mode, m) << to_string(m);
  }
  Layer* shp = net.add_layer(kLayerShape, {x}, 1, attrs({{"start", int64_t{1}}, {"end", int64_t{-1}}}));
  EXPECT_EQ(params_of<ShapeParams>(*shp).start, 1);
  EXPECT_EQ(params_of<ShapeParams>(*shp).end, -1);

  const HostTensor seven = HostTensor::from_vector<int32_t>(DataType::kInt32, Dims{1}, {7});
  Layer* fill = net.add_fill(FillMode::kConstant, {shape}, seven);
  EXPECT_EQ(params_of<FillParams>(*fill).mode, FillMode::kConstant);
  EXPECT_EQ(params_of<FillParams>(*fill).value.type(), DataType::kInt32);
  EXPECT_EQ(params_of<FillParams>(*fill).value.as<int32_t>()[0], 7);
}

TEST(OpParamsData, DataParamsDefaults) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
  Tensor* shape = net.add_input("shape", DataType::kInt64, Dims{1});
  const ShuffleParams& s = params_of<ShuffleParams>(*net.add_layer(kLayerShuffle, {x}, 1));
  EXPECT_TRUE(s.first_transpose.empty());
  EXPECT_EQ(s.reshape_mode, ReshapeMode::kNone);
  EXPECT_TRUE(s.reshape.empty());
  EXPECT_TRUE(s.zero_is_placeholder);
  EXPECT_TRUE(s.axes.empty());
  EXPECT_EQ(s.axis, 1);
  EXPECT_TRUE(s.second_transpose.empty());
  const SplitParams& sp = params_of<SplitParams>(*net.add_layer(kLayerSplit, {x}, 2));
  EXPECT_EQ(sp.axis, 0);
  EXPECT_TRUE(sp.split.empty());
  Tensor* pads = net.add_input("pads", DataType::kInt64, Dims{4});
  EXPECT_EQ(params_of<PaddingParams>(*net.add_layer(kLayerPadding, {x, pads}, 1)).mode, PaddingMode::kConstant);
  const ShapeParams& shp = params_of<ShapeParams>(*net.add_layer(kLayerShape, {x}, 1));
  EXPECT_EQ(shp.start, 0);
  EXPECT_EQ(shp.end, std::numeric_limits<int64_t>::max());
  // Fill: the default value is one float32 0.
  const FillParams& f =
      params_of<FillParams>(*net.add_layer(kLayerFill, {shape}, 1, attrs({{"mode", std::string("constant")}})));
  EXPECT_EQ(f.value.type(), DataType::kFloat32);
  ASSERT_EQ(f.value.count(), 1);
  EXPECT_EQ(f.value.as<float>()[0], 0.0f);
  // Fill range: `value` is not used, so it need not be one element.
  const FillParams& r = params_of<FillParams>(
      *net.add_layer(kLayerFill, {shape, shape, shape}, 1, attrs({{"mode", std::string("range")}})));
  EXPECT_EQ(r.mode, FillMode::kRange);
}

TEST(OpParamsData, QuantizeScaleCastBitShiftSoftMaxParams) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 4});
  Tensor* scale = net.add_constant(HostTensor::from_vector<float>(DataType::kFloat32, Dims{1}, {0.5f}))->output(0);

  const QuantizeParams& qd = params_of<QuantizeParams>(*net.add_layer(kLayerQuantize, {x, scale}, 1));
  EXPECT_EQ(qd.axis, 1);
  EXPECT_EQ(qd.block_size, 0);
  EXPECT_EQ(qd.output_type, DataType::kUInt8);
  const QuantizeParams& q = params_of<QuantizeParams>(
      *net.add_layer(kLayerQuantize, {x, scale}, 1,
                     attrs({{"axis", int64_t{0}}, {"block_size", int64_t{2}}, {"output_type", std::string("int8")}})));
  EXPECT_EQ(q.axis, 0);
  EXPECT_EQ(q.block_size, 2);
  EXPECT_EQ(q.output_type, DataType::kInt8);
  const QuantizeParams& dq =
      params_of<QuantizeParams>(*net.add_layer(kLayerDequantize, {x, scale}, 1, attrs({{"axis", int64_t{-1}}})));
  EXPECT_EQ(dq.axis, -1);
  EXPECT_EQ(dq.block_size, 0);

  const ScaleParams& sd = params_of<ScaleParams>(*net.add_layer(kLayerScale, {x}, 1));
  EXPECT_EQ(sd.mode, ScaleMode::kUniform);
  EXPECT_EQ(sd.channel_axis, 1);
  const ScaleParams& sc = params_of<ScaleParams>(
      *net.add_layer(kLayerScale, {x}, 1, attrs({{"mode", std::string("channel")}, {"channel_axis", int64_t{-1}}})));
  EXPECT_EQ(sc.mode, ScaleMode::kChannel);
  EXPECT_EQ(sc.channel_axis, -1);
  EXPECT_EQ(
      params_of<ScaleParams>(*net.add_layer(kLayerScale, {x}, 1, attrs({{"mode", std::string("elementwise")}}))).mode,
      ScaleMode::kElementWise);

  EXPECT_EQ(params_of<CastParams>(*net.add_layer(kLayerCast, {x}, 1, attrs({{"to", std::string("int64")}}))).to,
            DataType::kInt64);
  EXPECT_EQ(params_of<CastParams>(*net.add_layer(kLayerCast, {x}, 1, attrs({{"to", std::string("float16")}}))).to,
            DataType::kFloat16);

  Tensor* i = net.add_input("i", DataType::kInt32, Dims{4});
  EXPECT_EQ(params_of<BitShiftParams>(*net.add_bit_shift(i, i, BitShiftDirection::kLeft)).direction,
            BitShiftDirection::kLeft);
  EXPECT_EQ(params_of<BitShiftParams>(*net.add_bit_shift(i, i, BitShiftDirection::kRight)).direction,
            BitShiftDirection::kRight);

  const SoftMaxParams& sm = params_of<SoftMaxParams>(
      *net.add_layer(kLayerSoftMax, {x}, 1, attrs({{"axis", int64_t{0}}, {"log", int64_t{1}}})));
  EXPECT_EQ(sm.axis, 0);
  EXPECT_TRUE(sm.log);
}

TEST(OpParamsData, EinsumAndFusedProgramParsedOnce) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{2, 3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{3, 4});
  Layer* ein = net.add_layer(kLayerEinsum, {a, b}, 1, attrs({{"equation", std::string("i j, jk -> ik")}}));
  const EinsumEquation& e = params_of<EinsumParams>(*ein).equation;
  EXPECT_EQ(e.text, "i j, jk -> ik");
  ASSERT_EQ(e.operands.size(), 2u);
  EXPECT_EQ(e.operands[0].letters, "ij");
  EXPECT_EQ(e.operands[1].letters, "jk");
  EXPECT_TRUE(e.explicit_output);
  EXPECT_EQ(e.output.letters, "ik");
  EXPECT_EQ(plan_einsum(e, {Dims{2, 3}, Dims{3, 4}}).output_dims, (Dims{2, 4}));
  const EinsumEquation& implicit =
      params_of<EinsumParams>(*net.add_layer(kLayerEinsum, {a}, 1, attrs({{"equation", std::string("...j")}})))
          .equation;
  EXPECT_FALSE(implicit.explicit_output);
  EXPECT_EQ(implicit.operands[0].ellipsis_at, 0);

  Layer* fused = net.add_layer(
      kLayerFusedElementWise, {a}, 1,
      attrs({{"program", std::vector<std::string>{fused_const(2.0), fused_binary(ElementWiseOp::kProd, 0, 1)}}}));
  const FusedProgram& p = params_of<FusedProgram>(*fused);
  EXPECT_EQ(p.num_inputs, 1);
  ASSERT_EQ(p.instrs.size(), 2u);
  EXPECT_EQ(p.instrs[0].code, FusedOpCode::kConst);
  EXPECT_EQ(p.instrs[0].p0, 2.0);
  EXPECT_EQ(p.instrs[1].code, FusedOpCode::kBinary);
  EXPECT_EQ(p.instrs[1].op, static_cast<int32_t>(ElementWiseOp::kProd));
}

// The engine stores attributes; a loaded network decodes the same params from them.
TEST(OpParamsData, AnEngineRoundTripDecodesTheSameParams) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
  Tensor* pads = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{4}, {1, 0, 0, 1}))->output(0);
  Layer* pad = net.add_padding(x, pads, nullptr, PaddingMode::kReflect);
  pad->set_name("pad");
  // An edit after creation is what the file stores.
  pad->attrs().set("mode", std::string("edge"));
  Layer* cast = net.add_layer(kLayerCast, {pad->output(0)}, 1, attrs({{"to", std::string("float16")}}), "cast");
  net.mark_output(cast->output(0));

  engine_codec::ByteWriter w;
  engine_codec::WeightsWriter weights;
  engine_codec::encode_graph(net, w, weights);
  engine_codec::ByteReader r(w.bytes(), "graph");
  const std::unique_ptr<Network> loaded = engine_codec::decode_graph(r, weights.bytes);
  const Layer* lp = loaded->find_layer("pad");
  const Layer* lc = loaded->find_layer("cast");
  ASSERT_TRUE(lp && lc);
  EXPECT_EQ(params_of<PaddingParams>(*lp).mode, PaddingMode::kEdge);
  EXPECT_EQ(params_of<CastParams>(*lc).to, DataType::kFloat16);
}

}  // namespace
}  // namespace kiln
