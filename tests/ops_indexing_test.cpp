// Tests of the position-driven layers (ArgReduce, TopK, CumSum, Trilu, OneHot, ReverseSequence,
// MaxUnpool) and their ONNX importers (ArgMax, ArgMin, Hardmax, TopK, CumSum, Trilu, OneHot,
// ReverseSequence, MaxUnpool): shape/type inference and its errors, the reference kernels on
// hand-computed cases (ties, exclusive/reverse sums, out-of-range indices). The family's op
// cases (whole ONNX models against ONNX Runtime, made by tests/data/indexing/generate.py, and the
// harness cases on awkward shapes of every type) are in the op table,
// tests/data/indexing/cases.json (tests/op_table.h).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/ir/shape_inference.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

constexpr DataType kF32 = DataType::kFloat32;
constexpr DataType kI64 = DataType::kInt64;

Attributes attrs_of(std::initializer_list<std::pair<std::string, AttrValue>> list) {
  Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

HostTensor i64s(Dims dims, std::vector<int64_t> v) { return HostTensor::from_vector(kI64, dims, v); }
HostTensor f32s(Dims dims, std::vector<float> v) { return HostTensor::from_vector(kF32, dims, v); }

test::InputSpec given(HostTensor value, bool constant = false) {
  test::InputSpec s;
  s.type = value.type();
  s.dims = value.dims();
  s.value = std::move(value);
  s.constant = constant;
  return s;
}

template <typename T>
std::vector<T> values_of(const HostTensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.count());
}

std::vector<HostTensor> run_reference(const std::string& type, std::vector<test::InputSpec> inputs, Attributes attrs,
                                      int num_outputs = 1) {
  test::OpCase c;
  c.name = "hand_" + type;
  c.layer_type = type;
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  c.num_outputs = num_outputs;
  return test::reference_outputs(c);
}

// An inference input: type and dims, and a value when it is known on the host.
struct In {
  DataType type;
  Dims dims;
  std::optional<HostTensor> value;
};

std::vector<std::pair<DataType, Dims>> infer(const std::string& type, const std::vector<In>& inputs, Attributes attrs,
                                             int num_outputs = 1) {
  Network net;
  std::vector<Tensor*> tensors;
  std::vector<TensorState> states(inputs.size());
  std::vector<const TensorState*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tensors.push_back(net.add_input("x" + std::to_string(i), inputs[i].type, inputs[i].dims));
    states[i].type = inputs[i].type;
    states[i].dims = inputs[i].dims;
    if (inputs[i].value) states[i].value = std::make_shared<HostTensor>(*inputs[i].value);
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

TEST(IndexingShapes, OutputsAndTypes) {
  const auto arg = infer(kLayerArgReduce, {{kF32, {2, 3, 4}, {}}},
                         attrs_of({{"op", std::string("max")}, {"axis", int64_t{-2}}, {"keep_dims", int64_t{0}}}));
  EXPECT_EQ(arg[0], std::make_pair(kI64, Dims{2, 4}));
  const auto hard = infer(kLayerArgReduce, {{DataType::kFloat16, {2, 3}, {}}},
                          attrs_of({{"op", std::string("max")}, {"one_hot", int64_t{1}}}));
  EXPECT_EQ(hard[0], std::make_pair(DataType::kFloat16, Dims{2, 3}));
  const auto topk = infer(kLayerTopK, {{DataType::kInt32, {3, 9}, {}}, {kI64, {1}, i64s({1}, {4})}}, {}, 2);
  EXPECT_EQ(topk[0], std::make_pair(DataType::kInt32, Dims{3, 4}));
  EXPECT_EQ(topk[1], std::make_pair(kI64, Dims{3, 4}));
  const auto hot = infer(kLayerOneHot, {{kF32, {2, 3}, {}}, {kF32, {}, f32s({}, {5})}, {DataType::kInt32, {2}, {}}},
                         attrs_of({{"axis", int64_t{1}}}));
  EXPECT_EQ(hot[0], std::make_pair(DataType::kInt32, Dims{2, 5, 3}));
  const auto unpool =
      infer(kLayerMaxUnpool, {{kF32, {1, 2, 3, 3}, {}}, {kI64, {1, 2, 3, 3}, {}}},
            attrs_of({{"kernel", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}}));
  EXPECT_EQ(unpool[0].second, (Dims{1, 2, 6, 6}));
}

TEST(IndexingShapes, ErrorsNameTheProblem) {
  expect_error(
      [] {
        infer(kLayerTopK, {{kF32, {3, 4}, {}}, {kI64, {1}, i64s({1}, {5})}}, {}, 2);
      },
      "must lie in [0, 4]");
  expect_error(
      [] {
        infer(kLayerTopK, {{kF32, {3, 4}, {}}, {kI64, {1}, {}}}, {}, 2);
      },
      "must be known when shapes are inferred");
  expect_error(
      [] {
        infer(kLayerArgReduce, {{DataType::kBool, {3}, {}}}, attrs_of({{"op", std::string("max")}}));
      },
      "bool");
  expect_error(
      [] {
        infer(kLayerArgReduce, {{kF32, {3}, {}}}, attrs_of({{"op", std::string("mean")}}));
      },
      "allowed values");
  expect_error([] { infer(kLayerCumSum, {{kF32, {3, 4}, {}}, {kI64, {}, i64s({}, {2})}}, {}); }, "out of range");
  expect_error([] { infer(kLayerCumSum, {{kF32, {3, 4}, {}}, {kF32, {}, {}}}, {}); }, "int32 or int64");
  expect_error([] { infer(kLayerTrilu, {{kF32, {4}, {}}}, {}); }, "rank >= 2");
  expect_error(
      [] {
        infer(kLayerOneHot, {{kI64, {2}, {}}, {kI64, {}, i64s({}, {3})}, {kF32, {3}, {}}}, {});
      },
      "[off_value, on_value]");
  expect_error(
      [] {
        infer(kLayerReverseSequence, {{kF32, {4, 3}, {}}, {kI64, {4}, {}}}, attrs_of({{"batch_axis", int64_t{1}}}));
      },
      "one length per batch entry");
  expect_error(
      [] {
        infer(kLayerMaxUnpool, {{kF32, {1, 2, 3, 3}, {}}, {kI64, {1, 2, 3, 2}, {}}},
              attrs_of({{"kernel", std::vector<int64_t>{2, 2}}}));
      },
      "dims of x");
}

// ---- reference kernels by hand ------------------------------------------------------------------------

TEST(IndexingReference, ArgReduceTiesAndOneHot) {
  const HostTensor x = f32s({2, 4}, {1, 3, 3, 0, 5, 5, 5, 5});
  auto arg = [&](const char* op, int64_t last) {
    return values_of<int64_t>(run_reference(kLayerArgReduce, {given(x)},
                                            attrs_of({{"op", std::string(op)},
                                                      {"axis", int64_t{1}},
                                                      {"keep_dims", int64_t{0}},
                                                      {"select_last_index", last}}))[0]);
  };
  EXPECT_EQ(arg("max", 0), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(arg("max", 1), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(arg("min", 0), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(arg("min", 1), (std::vector<int64_t>{3, 3}));
  const HostTensor mask =
      run_reference(kLayerArgReduce, {given(x)},
                    attrs_of({{"op", std::string("max")}, {"axis", int64_t{1}}, {"one_hot", int64_t{1}}}))[0];
  EXPECT_EQ(values_of<float>(mask), (std::vector<float>{0, 1, 0, 0, 1, 0, 0, 0}));
}

TEST(IndexingReference, TopKKeepsLowerIndexFirstOnTies) {
  const auto out =
      run_reference(kLayerTopK, {given(f32s({1, 6}, {2, 7, 2, 7, 1, 2})), given(i64s({1}, {4}), true)}, {}, 2);
  EXPECT_EQ(values_of<float>(out[0]), (std::vector<float>{7, 7, 2, 2}));
  EXPECT_EQ(values_of<int64_t>(out[1]), (std::vector<int64_t>{1, 3, 0, 2}));
  const auto low = run_reference(kLayerTopK, {given(f32s({1, 6}, {2, 7, 2, 7, 1, 2})), given(i64s({1}, {3}), true)},
                                 attrs_of({{"largest", int64_t{0}}}), 2);
  EXPECT_EQ(values_of<int64_t>(low[1]), (std::vector<int64_t>{4, 0, 2}));
}

TEST(IndexingReference, CumSumTriluOneHotReverseUnpoolByHand) {
  const HostTensor x = i64s({4}, {1, 2, 3, 4});
  auto cum = [&](int64_t exclusive, int64_t reverse) {
    return values_of<int64_t>(run_reference(kLayerCumSum, {given(x), given(i64s({}, {0}))},
                                            attrs_of({{"exclusive", exclusive}, {"reverse", reverse}}))[0]);
  };
  EXPECT_EQ(cum(0, 0), (std::vector<int64_t>{1, 3, 6, 10}));
  EXPECT_EQ(cum(1, 0), (std::vector<int64_t>{0, 1, 3, 6}));
  EXPECT_EQ(cum(0, 1), (std::vector<int64_t>{10, 9, 7, 4}));
  EXPECT_EQ(cum(1, 1), (std::vector<int64_t>{9, 7, 4, 0}));

  const HostTensor m = f32s({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values_of<float>(
                run_reference(kLayerTrilu, {given(m), given(i64s({}, {1}))}, attrs_of({{"upper", int64_t{1}}}))[0]),
            (std::vector<float>{0, 2, 3, 0, 0, 6}));
  EXPECT_EQ(values_of<float>(run_reference(kLayerTrilu, {given(m)}, attrs_of({{"upper", int64_t{0}}}))[0]),
            (std::vector<float>{1, 0, 0, 4, 5, 0}));

  const auto hot =
      run_reference(kLayerOneHot, {given(i64s({3}, {0, -1, 3})), given(i64s({}, {3}), true), given(f32s({2}, {-1, 9}))},
                    attrs_of({{"axis", int64_t{0}}}))[0];
  EXPECT_EQ(hot.dims(), (Dims{3, 3}));
  EXPECT_EQ(values_of<float>(hot), (std::vector<float>{9, -1, -1, -1, -1, -1, -1, 9, -1}));  // 3 is out of range

  const auto rev =
      run_reference(kLayerReverseSequence, {given(f32s({2, 3}, {1, 2, 3, 4, 5, 6})), given(i64s({2}, {2, 3}))},
                    attrs_of({{"batch_axis", int64_t{0}}, {"time_axis", int64_t{1}}}))[0];
  EXPECT_EQ(values_of<float>(rev), (std::vector<float>{2, 1, 3, 6, 5, 4}));

  const auto unpool =
      run_reference(kLayerMaxUnpool, {given(f32s({1, 1, 1, 2}, {7, 8})), given(i64s({1, 1, 1, 2}, {2, 1}))},
                    attrs_of({{"kernel", std::vector<int64_t>{1, 2}}, {"strides", std::vector<int64_t>{1, 2}}}))[0];
  EXPECT_EQ(values_of<float>(unpool), (std::vector<float>{0, 8, 7, 0}));
  EXPECT_THROW(
      run_reference(kLayerMaxUnpool, {given(f32s({1, 1, 1, 2}, {7, 8})), given(i64s({1, 1, 1, 2}, {2, 4}))},
                    attrs_of({{"kernel", std::vector<int64_t>{1, 2}}, {"strides", std::vector<int64_t>{1, 2}}})),
      Error);
}

}  // namespace
}  // namespace kiln
