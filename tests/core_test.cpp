// Unit tests of the core value types (Dims, parse_dims, HostTensor, Attributes, names of
// enums) and of whole-network shape inference with host evaluation of shape arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/kiln.h"
#include "src/ir/shape_inference.h"

namespace kiln {
namespace {

TEST(Dims, BasicsAndText) {
  Dims d{2, 3, 4};
  EXPECT_EQ(d.rank(), 3);
  EXPECT_EQ(d.volume(), 24);
  EXPECT_EQ(d.to_string(), "2x3x4");
  EXPECT_FALSE(d.is_dynamic());
  Dims dyn{kDynamic, 3};
  EXPECT_TRUE(dyn.is_dynamic());
  EXPECT_EQ(dyn.to_string(), "?x3");
  EXPECT_THROW((void)dyn.volume(), Error);
  EXPECT_EQ(Dims{}.volume(), 1);  // scalar
  EXPECT_EQ(Dims{}.to_string(), "()");
  EXPECT_EQ((Dims{0, 5}).volume(), 0);
  Dims big;
  for (int i = 0; i < kMaxDims; ++i) big.push_back(1);
  EXPECT_THROW(big.push_back(1), Error);
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_THROW((void)(Dims{huge, 4}).volume(), Error);
}

TEST(Dims, Parse) {
  EXPECT_EQ(parse_dims("1x3x224x224"), (Dims{1, 3, 224, 224}));
  EXPECT_EQ(parse_dims("?x3"), (Dims{kDynamic, 3}));
  EXPECT_EQ(parse_dims("()"), Dims{});
  EXPECT_THROW(parse_dims("1xx3"), Error);
  EXPECT_THROW(parse_dims("1x-3"), Error);
  EXPECT_THROW(parse_dims("1xa"), Error);
}

TEST(Types, NamesRoundTrip) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kUInt8, DataType::kInt32,
                     DataType::kInt64, DataType::kBool, DataType::kFloat64}) {
    EXPECT_EQ(parse_data_type(to_string(t)), t);
  }
  EXPECT_EQ(data_type_size(DataType::kFloat16), 2u);
  EXPECT_THROW(parse_data_type("float8"), Error);
  EXPECT_EQ(parse_device_type("CUDA"), DeviceType::kCUDA);
  EXPECT_THROW(parse_device_type("tpu"), Error);
  for (auto a : {ActivationType::kRelu, ActivationType::kGeluTanh, ActivationType::kThresholdedRelu}) {
    EXPECT_EQ(parse_activation_type(to_string(a)), a);
  }
  EXPECT_THROW(parse_activation_type("nope"), Error);
}

// Floating-point values read as integers (axes, conditions, shapes a model gives as floats):
// truncated toward zero; NaN and values outside int64 are an error naming the element, not
// undefined behaviour (found by the onnx_structured fuzzer: Compress and Unsqueeze on 1e20).
TEST(HostTensor, FloatValuesOutsideInt64AreAnErrorWhenReadAsIntegers) {
  const auto f = HostTensor::from_vector(DataType::kFloat32, Dims{4}, std::vector<float>{1.9f, -2.7f, 0.0f, -9.2e18f});
  EXPECT_EQ(f.to_int64(), (std::vector<int64_t>{1, -2, 0, static_cast<int64_t>(-9.2e18f)}));
  const auto min = HostTensor::from_vector(DataType::kFloat64, Dims{1}, std::vector<double>{-9223372036854775808.0});
  EXPECT_EQ(min.to_int64(), (std::vector<int64_t>{INT64_MIN}));
  for (double bad : {2.76879e20, 9223372036854775808.0, -1e19, std::nan(""), HUGE_VAL}) {
    const auto t = HostTensor::from_vector(DataType::kFloat64, Dims{2}, std::vector<double>{0.0, bad});
    try {
      (void)t.to_int64();
      ADD_FAILURE() << bad << " was read as an integer";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("element 1 "), std::string::npos) << e.what();
    }
  }
  const auto f32 = HostTensor::from_vector(DataType::kFloat32, Dims{1}, std::vector<float>{7.39749e31f});
  EXPECT_THROW((void)f32.to_int64(), Error);
}

TEST(HostTensor, StorageAndConversion) {
  auto t = HostTensor::from_vector(DataType::kInt32, Dims{2, 2}, std::vector<int32_t>{1, -2, 3, 4});
  EXPECT_EQ(t.nbytes(), 16u);
  EXPECT_EQ(t.to_int64(), (std::vector<int64_t>{1, -2, 3, 4}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  HostTensor shared = t;
  HostTensor deep = t.clone();
  t.as<int32_t>()[0] = 9;
  EXPECT_EQ(shared.as<int32_t>()[0], 9);
  EXPECT_EQ(deep.as<int32_t>()[0], 1);
  EXPECT_EQ(t.reshaped(Dims{4}).dims(), Dims{4});
  EXPECT_THROW(t.reshaped(Dims{3}), Error);
  EXPECT_THROW(HostTensor::from_bytes(DataType::kFloat32, Dims{3}, "abcd", 4), Error);
}

TEST(Attributes, TypedAccess) {
  Attributes a;
  a.set("i", int64_t{3});
  a.set("f", 2.5);
  a.set("s", std::string("x"));
  EXPECT_EQ(a.get_int("i"), 3);
  EXPECT_EQ(a.get_float("i"), 3.0);  // ints read as floats
  EXPECT_EQ(a.get_int("missing", 7), 7);
  EXPECT_THROW(a.get_string("i"), Error);
  EXPECT_THROW(a.get_tensor("missing"), Error);
}

TEST(ShapeInference, ExporterShapeArithmeticIsEvaluatedOnTheHost) {
  // x[N,C,H,W] -> Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape: the pattern of
  // torch.flatten in exported models; the shape tensor must be computed on the host.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 4, 3, 2});
  Tensor* shape = net.add_shape(x)->output(0);
  Tensor* idx = net.add_constant(HostTensor::from_vector(DataType::kInt64, Dims{}, std::vector<int64_t>{0}))->output(0);
  Tensor* n = net.add_gather(shape, idx, 0)->output(0);
  Attributes ua;
  ua.set("reshape_mode", std::string("unsqueeze"));
  ua.set("axes", std::vector<int64_t>{0});
  Tensor* n1 = net.add_layer(kLayerShuffle, {n}, 1, ua)->output(0);
  Tensor* minus1 =
      net.add_constant(HostTensor::from_vector(DataType::kInt64, Dims{1}, std::vector<int64_t>{-1}))->output(0);
  Tensor* target = net.add_concatenation({n1, minus1}, 0)->output(0);
  Layer* reshape = net.add_shuffle_dynamic(x, target);
  net.mark_output(reshape->output(0));
  for (int64_t batch : {1, 5}) {
    const auto states = infer_shapes(net, {{"x", Dims{batch, 4, 3, 2}}});
    EXPECT_EQ(states.at(reshape->output(0)).dims, (Dims{batch, 24}));
    ASSERT_TRUE(states.at(target).value);
    EXPECT_EQ(states.at(target).value->to_int64(), (std::vector<int64_t>{batch, -1}));
  }
  EXPECT_THROW(infer_shapes(net, {}), Error);                         // dynamic input without dims
  EXPECT_THROW(infer_shapes(net, {{"x", Dims{2, 5, 3, 2}}}), Error);  // contradicts declared dims
  EXPECT_THROW(infer_shapes(net, {{"x", Dims{2, 4, 3}}}), Error);     // wrong rank
}

TEST(ShapeInference, ErrorsNameTheLayer) {
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{2, 3});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{4, 5});
  Layer* mm = net.add_matrix_multiply(a, false, b, false);
  mm->set_name("bad_matmul");
  net.mark_output(mm->output(0));
  try {
    infer_shapes(net, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_matmul"), std::string::npos) << e.what();
  }
}

TEST(Network, ValidateReportsEveryProblem) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 3});
  Attributes to;
  to.set("to", std::string("float16"));
  // Edited to a wrong type after creation: validate checks it.
  net.add_layer(kLayerCast, {x}, 1, to, "cast")->attrs().set("to", int64_t{3});
  net.add_layer("NoSuchLayer", {x}, 1, {}, "mystery");
  // A layer type with typed params refuses a bad attribute when the layer is created.
  Attributes bad_kind;
  bad_kind.set("kind", int64_t{3});
  try {
    net.add_layer(kLayerActivation, {x}, 1, bad_kind, "act");
    ADD_FAILURE() << "an Activation with an int kind was created";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attribute 'kind' has type int, expected string"), std::string::npos)
        << e.what();
  }
  try {
    net.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'to'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NoSuchLayer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no outputs"), std::string::npos) << msg;
  }
}

TEST(Network, CloneIsDeepAndTopologicalOrderIsStable) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2});
  Layer* r = net.add_activation(x, ActivationType::kRelu);
  Layer* s = net.add_activation(r->output(0), ActivationType::kSigmoid);
  net.mark_output(s->output(0));
  auto copy = net.clone();
  EXPECT_EQ(to_text(*copy), to_text(net));
  copy->layer(0)->set_name("renamed");
  EXPECT_NE(to_text(*copy), to_text(net));
  const auto order = net.topological_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], r);
  EXPECT_EQ(order[1], s);
}

}  // namespace
}  // namespace kiln
