// Tests of the math layer types (Activation, ParametricReLU, Scale, ElementWise, Unary, Select,
// Cast, Identity, SoftMax, Reduce, MatrixMultiply, Gemm): the enum name tables, shape/type
// inference (broadcast errors, matmul shapes, reduce keep_dims, output types), the CPU
// reference kernels against hand-computed tiny cases, and what the "vectorized" tactics decline.
// The math family's op cases (ONNX Runtime / numpy outputs from tests/data/math/generate.py, the
// vectorized tactics on odd sizes, oneDNN's MatrixMultiply and Gemm cases) are in the op table,
// tests/data/math/cases.json, run on every backend (tests/op_table.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/backends/kernel.h"
#include "src/core/half.h"
#include "src/ir/op_schema.h"
#include "src/ir/shape_inference.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

// ---- shape inference helpers ------------------------------------------------------------------

struct In {
  DataType type;
  Dims dims;
};

std::pair<DataType, Dims> infer(const std::string& type, const std::vector<In>& inputs, Attributes attrs = {}) {
  Network net;
  std::vector<Tensor*> tensors;
  std::vector<TensorState> states(inputs.size());
  std::vector<const TensorState*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tensors.push_back(net.add_input("x" + std::to_string(i), inputs[i].type, inputs[i].dims));
    states[i].type = inputs[i].type;
    states[i].dims = inputs[i].dims;
    ptrs.push_back(&states[i]);
  }
  Layer* layer = net.add_layer(type, tensors, 1, std::move(attrs), "op");
  return infer_layer(*layer, ptrs).at(0);
}

Attributes attrs_of(std::initializer_list<std::pair<std::string, AttrValue>> list) {
  Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

// Expects a kiln::Error whose message names the layer and contains `fragment`.
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

constexpr DataType kF32 = DataType::kFloat32;

// ---- enum names -------------------------------------------------------------------------------

TEST(MathEnums, NamesRoundTripAndUnknownNamesListValidOnes) {
  const std::vector<std::string> activations = {"relu", "sigmoid",          "tanh",      "leaky_relu",   "elu",
                                                "selu", "softplus",         "clip",      "hard_sigmoid", "hard_swish",
                                                "silu", "gelu_erf",         "gelu_tanh", "mish",         "softsign",
                                                "celu", "thresholded_relu", "swish"};
  for (const auto& n : activations) EXPECT_EQ(to_string(parse_activation_type(n)), n);
  EXPECT_EQ(parse_activation_type("leaky_relu"), ActivationType::kLeakyRelu);
  const std::vector<std::string> ew = {
      "sum", "sub",       "prod",  "div",  "pow",     "max",           "min",
      "mod", "floor_div", "equal", "less", "greater", "less_or_equal", "greater_or_equal",
      "and", "or",        "xor"};
  for (const auto& n : ew) EXPECT_EQ(to_string(parse_elementwise_op(n)), n);
  EXPECT_EQ(parse_elementwise_op("less_or_equal"), ElementWiseOp::kLessOrEqual);
  const std::vector<std::string> unary = {"exp",   "log",   "sqrt",  "recip", "abs",  "neg",  "floor", "ceil", "round",
                                          "sin",   "cos",   "tan",   "asin",  "acos", "atan", "sinh",  "cosh", "tanh",
                                          "asinh", "acosh", "atanh", "erf",   "not",  "sign", "isnan", "isinf"};
  for (const auto& n : unary) EXPECT_EQ(to_string(parse_unary_op(n)), n);
  EXPECT_EQ(parse_unary_op("isnan"), UnaryOp::kIsNaN);
  const std::vector<std::string> reduce = {"sum", "mean", "max",        "min",     "prod",
                                           "l1",  "l2",   "sum_square", "log_sum", "log_sum_exp"};
  for (const auto& n : reduce) EXPECT_EQ(to_string(parse_reduce_op(n)), n);
  EXPECT_EQ(parse_reduce_op("log_sum_exp"), ReduceOp::kLogSumExp);
  try {
    parse_elementwise_op("add");
    ADD_FAILURE() << "'add' is not an element-wise op name";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'add'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("floor_div"), std::string::npos) << msg;  // lists the valid names
  }
  EXPECT_THROW(parse_activation_type("Relu"), Error);
  EXPECT_THROW(parse_unary_op(""), Error);
  EXPECT_THROW(parse_reduce_op("avg"), Error);
}

// ---- shape inference --------------------------------------------------------------------------

TEST(MathShapes, ElementWiseBroadcastsAndTypes) {
  auto r = infer(kLayerElementWise, {{kF32, {2, 3, 4}}, {kF32, {3, 1}}}, attrs_of({{"op", std::string("sum")}}));
  EXPECT_EQ(r.first, kF32);
  EXPECT_EQ(r.second, (Dims{2, 3, 4}));
  r = infer(kLayerElementWise, {{kF32, {}}, {kF32, {5, 1, 2}}}, attrs_of({{"op", std::string("prod")}}));
  EXPECT_EQ(r.second, (Dims{5, 1, 2}));
  r = infer(kLayerElementWise, {{DataType::kInt64, {4, 1}}, {DataType::kInt64, {3}}},
            attrs_of({{"op", std::string("less_or_equal")}}));
  EXPECT_EQ(r.first, DataType::kBool);
  EXPECT_EQ(r.second, (Dims{4, 3}));
  expect_error(
      [] {
        infer(kLayerElementWise, {{kF32, {2, 3, 4}}, {kF32, {2, 1}}}, attrs_of({{"op", std::string("sum")}}));
      },
      "broadcast");
  expect_error(
      [] {
        infer(kLayerElementWise, {{kF32, {2}}, {DataType::kInt32, {2}}}, attrs_of({{"op", std::string("sum")}}));
      },
      "same data type");
  expect_error(
      [] {
        infer(kLayerElementWise, {{kF32, {2}}, {kF32, {2}}}, attrs_of({{"op", std::string("add")}}));
      },
      "floor_div");
}

TEST(MathShapes, UnarySelectCastIdentity) {
  auto r = infer(kLayerUnary, {{kF32, {2, 3}}}, attrs_of({{"op", std::string("isnan")}}));
  EXPECT_EQ(r.first, DataType::kBool);
  EXPECT_EQ(r.second, (Dims{2, 3}));
  r = infer(kLayerUnary, {{DataType::kBool, {4}}}, attrs_of({{"op", std::string("not")}}));
  EXPECT_EQ(r.first, DataType::kBool);
  r = infer(kLayerUnary, {{DataType::kInt32, {4}}}, attrs_of({{"op", std::string("abs")}}));
  EXPECT_EQ(r.first, DataType::kInt32);
  expect_error(
      [] {
        infer(kLayerUnary, {{DataType::kInt32, {4}}}, attrs_of({{"op", std::string("exp")}}));
      },
      "floating-point");

  r = infer(kLayerSelect, {{DataType::kBool, {2, 1, 4}}, {DataType::kInt64, {3, 4}}, {DataType::kInt64, {2, 3, 1}}});
  EXPECT_EQ(r.first, DataType::kInt64);
  EXPECT_EQ(r.second, (Dims{2, 3, 4}));
  expect_error([] { infer(kLayerSelect, {{kF32, {2}}, {kF32, {2}}, {kF32, {2}}}); }, "bool");
  expect_error([] { infer(kLayerSelect, {{DataType::kBool, {3}}, {kF32, {2}}, {kF32, {2}}}); }, "broadcast");

  r = infer(kLayerCast, {{kF32, {5, 2}}}, attrs_of({{"to", std::string("int8")}}));
  EXPECT_EQ(r.first, DataType::kInt8);
  EXPECT_EQ(r.second, (Dims{5, 2}));
  expect_error([] { infer(kLayerCast, {{kF32, {5}}}, attrs_of({{"to", std::string("int128")}})); }, "'to'");

  r = infer(kLayerIdentity, {{DataType::kUInt8, {7, 1}}});
  EXPECT_EQ(r.first, DataType::kUInt8);
  EXPECT_EQ(r.second, (Dims{7, 1}));
}

TEST(MathShapes, ActivationPReluScaleSoftMax) {
  auto r = infer(kLayerActivation, {{kF32, {1, 3}}}, attrs_of({{"kind", std::string("gelu_tanh")}}));
  EXPECT_EQ(r.second, (Dims{1, 3}));
  expect_error([] { infer(kLayerActivation, {{kF32, {1}}}, attrs_of({{"kind", std::string("gelu")}})); }, "gelu_erf");
  expect_error(
      [] {
        infer(kLayerActivation, {{DataType::kInt32, {1}}}, attrs_of({{"kind", std::string("relu")}}));
      },
      "floating-point");

  r = infer(kLayerParametricReLU, {{kF32, {2, 3, 4, 5}}, {kF32, {3, 1, 1}}});
  EXPECT_EQ(r.second, (Dims{2, 3, 4, 5}));
  expect_error([] { infer(kLayerParametricReLU, {{kF32, {2, 3}}, {kF32, {2}}}); }, "broadcast");

  r = infer(kLayerScale, {{kF32, {2, 3, 4}}, {kF32, {3}}, {kF32, {3}}}, attrs_of({{"mode", std::string("channel")}}));
  EXPECT_EQ(r.second, (Dims{2, 3, 4}));
  expect_error(
      [] {
        infer(kLayerScale, {{kF32, {2, 3, 4}}, {kF32, {4}}}, attrs_of({{"mode", std::string("channel")}}));
      },
      "one per channel");
  expect_error(
      [] {
        infer(kLayerScale, {{kF32, {2, 3}}, {kF32, {3}}}, attrs_of({{"mode", std::string("uniform")}}));
      },
      "one value");
  expect_error(
      [] {
        infer(kLayerScale, {{kF32, {2, 3}}, {kF32, {3}}}, attrs_of({{"mode", std::string("per_row")}}));
      },
      "mode");

  r = infer(kLayerSoftMax, {{kF32, {2, 3, 4, 5}}}, attrs_of({{"axis", int64_t{-3}}}));
  EXPECT_EQ(r.second, (Dims{2, 3, 4, 5}));
  expect_error([] { infer(kLayerSoftMax, {{kF32, {2, 3}}}, attrs_of({{"axis", int64_t{2}}})); }, "out of range");
}

TEST(MathShapes, ReduceKeepDims) {
  auto r = infer(kLayerReduce, {{kF32, {3, 4, 5}}},
                 attrs_of({{"op", std::string("sum")}, {"axes", std::vector<int64_t>{0, -1}}}));
  EXPECT_EQ(r.second, (Dims{1, 4, 1}));  // keep_dims defaults to 1
  r = infer(kLayerReduce, {{kF32, {3, 4, 5}}},
            attrs_of({{"op", std::string("max")}, {"axes", std::vector<int64_t>{2, 0}}, {"keep_dims", int64_t{0}}}));
  EXPECT_EQ(r.second, (Dims{4}));
  r = infer(kLayerReduce, {{DataType::kInt64, {3, 4}}},
            attrs_of({{"op", std::string("prod")}, {"keep_dims", int64_t{0}}}));
  EXPECT_EQ(r.first, DataType::kInt64);
  EXPECT_EQ(r.second.rank(), 0);  // empty axes: everything
  r = infer(kLayerReduce, {{kF32, {3, 4}}}, attrs_of({{"op", std::string("mean")}}));
  EXPECT_EQ(r.second, (Dims{1, 1}));
  expect_error(
      [] {
        infer(kLayerReduce, {{kF32, {3, 4}}},
              attrs_of({{"op", std::string("sum")}, {"axes", std::vector<int64_t>{1, -1}}}));
      },
      "twice");
  expect_error(
      [] {
        infer(kLayerReduce, {{kF32, {3, 4}}},
              attrs_of({{"op", std::string("sum")}, {"axes", std::vector<int64_t>{2}}}));
      },
      "out of range");
  expect_error([] { infer(kLayerReduce, {{kF32, {3}}}, attrs_of({{"op", std::string("average")}})); }, "log_sum_exp");
}

TEST(MathShapes, MatrixMultiply) {
  auto mm = [](Dims a, Dims b, int64_t ta = 0, int64_t tb = 0) {
    return infer(kLayerMatrixMultiply, {{kF32, a}, {kF32, b}}, attrs_of({{"transpose_a", ta}, {"transpose_b", tb}}))
        .second;
  };
  EXPECT_EQ(mm({5, 7}, {7, 3}), (Dims{5, 3}));
  EXPECT_EQ(mm({2, 1, 3, 4}, {5, 4, 6}), (Dims{2, 5, 3, 6}));
  EXPECT_EQ(mm({4}, {2, 4, 3}), (Dims{2, 3}));
  EXPECT_EQ(mm({2, 3, 4}, {4}), (Dims{2, 3}));
  EXPECT_EQ(mm({6}, {6}).rank(), 0);
  EXPECT_EQ(mm({2, 4, 3}, {4, 5}, 1, 0), (Dims{2, 3, 5}));
  EXPECT_EQ(mm({3, 2, 4}, {1, 5, 4}, 0, 1), (Dims{3, 2, 5}));
  EXPECT_EQ(mm({2, 4, 3}, {2, 5, 4}, 1, 1), (Dims{2, 3, 5}));
  expect_error([&] { mm({2, 3}, {4, 5}); }, "inner dimensions");
  expect_error([&] { mm({2, 3}, {2, 5}, 0, 1); }, "inner dimensions");  // b^T is 5x2
  expect_error([&] { mm({2, 2, 3}, {3, 3, 4}); }, "broadcast");
  expect_error([&] { infer(kLayerMatrixMultiply, {{kF32, {2, 3}}, {DataType::kInt32, {3, 2}}}); }, "same data type");
  // The bias [N] and residual (the output's dims) CPU builds fuse in (inputs 2 and 3).
  EXPECT_EQ(infer(kLayerMatrixMultiply, {{kF32, {2, 3, 4}}, {kF32, {4, 5}}, {kF32, {5}}, {kF32, {2, 3, 5}}}).second,
            (Dims{2, 3, 5}));
  expect_error([&] { infer(kLayerMatrixMultiply, {{kF32, {2, 3, 4}}, {kF32, {4, 5}}, {kF32, {4}}}); }, "bias");
  expect_error(
      [&] {
        infer(kLayerMatrixMultiply, {{kF32, {2, 3, 4}}, {kF32, {4, 5}}, {kF32, {5}}, {kF32, {1, 3, 5}}});
      },
      "residual");
}

TEST(MathShapes, Gemm) {
  auto gemm = [](Dims a, Dims b, std::optional<Dims> c, int64_t ta, int64_t tb) {
    std::vector<In> ins = {{kF32, a}, {kF32, b}};
    if (c) ins.push_back({kF32, *c});
    return infer(kLayerGemm, ins, attrs_of({{"trans_a", ta}, {"trans_b", tb}})).second;
  };
  EXPECT_EQ(gemm({4, 5}, {5, 3}, std::nullopt, 0, 0), (Dims{4, 3}));
  EXPECT_EQ(gemm({5, 4}, {3, 5}, Dims{3}, 1, 1), (Dims{4, 3}));
  EXPECT_EQ(gemm({4, 5}, {5, 3}, Dims{4, 1}, 0, 0), (Dims{4, 3}));
  EXPECT_EQ(gemm({4, 5}, {5, 3}, Dims{}, 0, 0), (Dims{4, 3}));
  expect_error([&] { gemm({4, 5}, {3, 5}, std::nullopt, 0, 0); }, "inner dimensions");
  expect_error([&] { gemm({4, 5}, {5, 3}, Dims{4}, 0, 0); }, "broadcast to the output");
  expect_error([&] { gemm({2, 4, 5}, {5, 3}, std::nullopt, 0, 0); }, "2-D");
  expect_error(
      [&] {
        infer(kLayerGemm, {{kF32, {2, 2}}, {kF32, {2, 2}}}, attrs_of({{"activation", std::string("rectify")}}));
      },
      "activation");
}

// ---- reference kernels: hand-computed tiny cases ------------------------------------------------

template <typename T>
HostTensor tensor(DataType type, Dims dims, std::vector<T> values) {
  return HostTensor::from_vector(type, dims, values);
}

test::InputSpec given(HostTensor value) {
  test::InputSpec s;
  s.type = value.type();
  s.dims = value.dims();
  s.value = std::move(value);
  return s;
}

test::InputSpec omitted() {
  test::InputSpec s;
  s.omitted = true;
  return s;
}

HostTensor run_reference(const std::string& type, std::vector<test::InputSpec> inputs, Attributes attrs = {}) {
  test::OpCase c;
  c.name = "hand_" + type;
  c.layer_type = type;
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return test::reference_outputs(c).at(0);
}

template <typename T>
std::vector<T> values_of(const HostTensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.count());
}

// Integer division, modulo, floor division and pow signs, a comparison's bool output, a broadcast
// by hand and NaN propagating through max are hand-computed cases of the op table
// (tests/data/math/cases.json: int_div_toward_zero, ..., ew_max_nan_propagates).

TEST(MathReference, SoftMaxByHand) {
  const auto x = tensor<float>(kF32, {2, 3}, {1, 2, 3, 1000, 1000, 1000});
  const HostTensor y = run_reference(kLayerSoftMax, {given(x)});
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(y.as<float>()[0], std::exp(1.0) / s, 1e-6);
  EXPECT_NEAR(y.as<float>()[2], std::exp(3.0) / s, 1e-6);
  for (int i = 3; i < 6; ++i) EXPECT_NEAR(y.as<float>()[i], 1.0 / 3.0, 1e-6);  // no overflow
  const HostTensor l = run_reference(kLayerSoftMax, {given(x)}, attrs_of({{"log", int64_t{1}}, {"axis", int64_t{0}}}));
  EXPECT_NEAR(l.as<float>()[0], 1.0 - 1000.0 - std::log1p(std::exp(1.0 - 1000.0)), 1e-4);
  EXPECT_NEAR(l.as<float>()[3], 0.0, 1e-6);
}

TEST(MathReference, ReduceMatMulGemmByHand) {
  const auto x = tensor<float>(kF32, {2, 2}, {1, 2, 3, 4});
  const HostTensor mean = run_reference(kLayerReduce, {given(x)},
                                        attrs_of({{"op", std::string("mean")}, {"axes", std::vector<int64_t>{0}}}));
  EXPECT_EQ(mean.dims(), (Dims{1, 2}));
  EXPECT_EQ(values_of<float>(mean), (std::vector<float>{2, 3}));
  const HostTensor prod =
      run_reference(kLayerReduce, {given(x)}, attrs_of({{"op", std::string("prod")}, {"keep_dims", int64_t{0}}}));
  EXPECT_EQ(prod.dims().rank(), 0);
  EXPECT_EQ(prod.as<float>()[0], 24.0f);

  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]]; with transpose_b: [[17,23],[39,53]].
  const auto b = tensor<float>(kF32, {2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(values_of<float>(run_reference(kLayerMatrixMultiply, {given(x), given(b)})),
            (std::vector<float>{19, 22, 43, 50}));
  EXPECT_EQ(values_of<float>(
                run_reference(kLayerMatrixMultiply, {given(x), given(b)}, attrs_of({{"transpose_b", int64_t{1}}}))),
            (std::vector<float>{17, 23, 39, 53}));
  const auto v = tensor<float>(kF32, {2}, {1, -1});
  const HostTensor mv = run_reference(kLayerMatrixMultiply, {given(x), given(v)});
  EXPECT_EQ(mv.dims(), (Dims{2}));
  EXPECT_EQ(values_of<float>(mv), (std::vector<float>{-1, -1}));
  // With a bias, a residual and ReLU: relu(x b + [1, -100] + r).
  const auto bias = tensor<float>(kF32, {2}, {1, -100});
  const auto r = tensor<float>(kF32, {2, 2}, {0.5f, 1, -50, 2});
  EXPECT_EQ(values_of<float>(run_reference(kLayerMatrixMultiply, {given(x), given(b), given(bias), given(r)},
                                           attrs_of({{"activation", std::string("relu")}}))),
            (std::vector<float>{20.5f, 0, 0, 0}));
  EXPECT_EQ(values_of<float>(run_reference(kLayerMatrixMultiply, {given(x), given(b), omitted(), given(r)})),
            (std::vector<float>{19.5f, 23, -7, 52}));

  // Gemm: 2 * x^T b + 0.5 * c (c = [10, 20] broadcast over rows), then relu.
  const auto c = tensor<float>(kF32, {2}, {10, -200});
  const HostTensor g = run_reference(
      kLayerGemm, {given(x), given(b), given(c)},
      attrs_of({{"alpha", 2.0}, {"beta", 0.5}, {"trans_a", int64_t{1}}, {"activation", std::string("relu")}}));
  // x^T b = [[1,3],[2,4]] x [[5,6],[7,8]] = [[26,30],[38,44]]
  EXPECT_EQ(values_of<float>(g), (std::vector<float>{57, 0, 81, 0}));
  const HostTensor g2 = run_reference(kLayerGemm, {given(x), given(b), omitted()});
  EXPECT_EQ(values_of<float>(g2), (std::vector<float>{19, 22, 43, 50}));
}

TEST(MathReference, CastIdentitySelectScaleByHand) {
  const auto f = tensor<float>(kF32, {5}, {-1.7f, 2.9f, 0.0f, -0.2f, 0.5f});
  EXPECT_EQ(values_of<int32_t>(run_reference(kLayerCast, {given(f)}, attrs_of({{"to", std::string("int32")}}))),
            (std::vector<int32_t>{-1, 2, 0, 0, 0}));
  EXPECT_EQ(values_of<uint8_t>(run_reference(kLayerCast, {given(f)}, attrs_of({{"to", std::string("bool")}}))),
            (std::vector<uint8_t>{1, 1, 0, 1, 1}));
  const HostTensor h = run_reference(kLayerCast, {given(f)}, attrs_of({{"to", std::string("float16")}}));
  EXPECT_EQ(static_cast<float>(h.as<half>()[4]), 0.5f);

  const auto i = tensor<int64_t>(DataType::kInt64, {3}, {-5, 1LL << 40, 7});
  EXPECT_EQ(values_of<int64_t>(run_reference(kLayerIdentity, {given(i)})), (std::vector<int64_t>{-5, 1LL << 40, 7}));

  const auto cond = tensor<uint8_t>(DataType::kBool, {2, 1}, {1, 0});
  const auto a = tensor<int64_t>(DataType::kInt64, {3}, {1, 2, 3});
  const auto b = tensor<int64_t>(DataType::kInt64, {1}, {-1});
  const HostTensor s = run_reference(kLayerSelect, {given(cond), given(a), given(b)});
  EXPECT_EQ(s.dims(), (Dims{2, 3}));
  EXPECT_EQ(values_of<int64_t>(s), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));

  // channel mode on [1,2,2]: y = (x*scale + shift)^power per channel.
  const auto x = tensor<float>(kF32, {1, 2, 2}, {1, 2, 3, 4});
  const auto sc = tensor<float>(kF32, {2}, {2, 3});
  const auto sh = tensor<float>(kF32, {2}, {1, 0});
  const auto pw = tensor<float>(kF32, {2}, {2, 1});
  EXPECT_EQ(values_of<float>(run_reference(kLayerScale, {given(x), given(sc), given(sh), given(pw)},
                                           attrs_of({{"mode", std::string("channel")}}))),
            (std::vector<float>{9, 25, 9, 12}));
  EXPECT_EQ(values_of<float>(run_reference(kLayerScale, {given(x), omitted(), given(sh)},
                                           attrs_of({{"mode", std::string("channel")}}))),
            (std::vector<float>{2, 3, 3, 4}));
}

// ---- the vectorized tactics: what they take and decline --------------------------------------------------
// (Their odd-size cases against the reference are in the op table, tests/data/math/cases.json.)

TEST(MathVectorized, ElementWiseTakesGeneralBroadcastOfLinearFloatsAndDeclinesOtherTypes) {
  const KernelEntry* vec = KernelRegistry::instance().find(DeviceType::kCPU, kLayerElementWise, "vectorized");
  ASSERT_NE(vec, nullptr);
  ASSERT_TRUE(vec->supports);
  Network net;
  Tensor* a = net.add_input("a", kF32, {2, 3, 4});
  Tensor* b = net.add_input("b", kF32, {2, 1, 4});
  Layer* sum = net.add_layer(kLayerElementWise, {a, b}, 1, attrs_of({{"op", std::string("sum")}}));
  auto desc = [](DataType t, Dims d) { return TensorDesc{t, d, TensorFormat::kLinear, true, nullptr}; };
  // General broadcasting (a bias row, a middle extent, neither operand y-shaped) in linear memory.
  EXPECT_TRUE(vec->supports(*sum, {desc(kF32, {2, 3, 4}), desc(kF32, {2, 1, 4})}));
  EXPECT_TRUE(vec->supports(*sum, {desc(kF32, {2, 3, 4}), desc(kF32, {4})}));
  EXPECT_TRUE(vec->supports(*sum, {desc(kF32, {2, 1, 4}), desc(kF32, {1, 3, 1})})) << "neither operand is y-shaped";
  // ... but not in channels-last memory, nor shapes that do not broadcast.
  auto cl = [](Dims d) { return TensorDesc{kF32, d, TensorFormat::kChannelsLast, true, nullptr}; };
  EXPECT_FALSE(vec->supports(*sum, {cl({2, 3, 4, 5}), cl({2, 1, 4, 5})}));
  EXPECT_FALSE(vec->supports(*sum, {desc(kF32, {2, 3, 4}), desc(kF32, {3, 3})}));
  // [3, 1] against [2, 3, 4] broadcasts over the last extent only: the per-channel case.
  EXPECT_TRUE(vec->supports(*sum, {desc(kF32, {2, 3, 4}), desc(kF32, {3, 1})}));
  EXPECT_TRUE(vec->supports(*sum, {desc(kF32, {2, 3, 4}), desc(kF32, {2, 3, 4})}));
  EXPECT_TRUE(vec->supports(*sum, {desc(kF32, {1, 1}), desc(kF32, {2, 3, 4})}));
  EXPECT_FALSE(vec->supports(*sum, {desc(DataType::kInt32, {4}), desc(DataType::kInt32, {4})}));
  Layer* less = net.add_layer(kLayerElementWise, {a, a}, 1, attrs_of({{"op", std::string("less")}}));
  EXPECT_FALSE(vec->supports(*less, {desc(kF32, {2, 3, 4}), desc(kF32, {2, 3, 4})}));
}

}  // namespace
}  // namespace kiln
