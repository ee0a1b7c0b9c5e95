// Tests of the data-movement layer types (Constant, Shuffle, Concatenation, Split, Slice,
// Gather, Resize, Padding, Shape, Fill, Expand, Tile): shape inference (reshape placeholders,
// squeeze/unsqueeze/flatten, slice clamping and negative steps, uneven split, ... and the error
// messages), the CPU reference kernels against hand-computed cases, every data type through the
// movers, and the "fast" tactics against the reference on awkward shapes. The data family's op
// cases (ONNX Runtime outputs from tests/data/data/gen_cases.py, the harness cases of the fast
// tactics) are in the op table, tests/data/data/cases.json, run on every backend
// (tests/op_table.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/backends/kernel.h"
#include "src/core/half.h"
#include "src/ir/op_schema.h"
#include "src/ir/shape_inference.h"

namespace kiln {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

// ---- helpers --------------------------------------------------------------------------------------

HostTensor i64s(const std::vector<int64_t>& v) {
  return HostTensor::from_vector(DataType::kInt64, Dims{static_cast<int64_t>(v.size())}, v);
}
HostTensor i32s(const std::vector<int32_t>& v) {
  return HostTensor::from_vector(DataType::kInt32, Dims{static_cast<int64_t>(v.size())}, v);
}
HostTensor f32s(const Dims& dims, const std::vector<float>& v) {
  return HostTensor::from_vector(DataType::kFloat32, dims, v);
}
HostTensor iota_f32(const Dims& dims) {
  std::vector<float> v(static_cast<size_t>(dims.volume()));
  std::iota(v.begin(), v.end(), 0.0f);
  return f32s(dims, v);
}
template <typename T>
HostTensor scalar(DataType type, T v) {
  return HostTensor::from_vector(type, Dims{}, std::vector<T>{v});
}

std::vector<double> values(const HostTensor& t) {
  if (t.type() == DataType::kFloat16) {
    std::vector<double> r;
    for (int64_t i = 0; i < t.count(); ++i) r.push_back(static_cast<float>(t.as<half>()[i]));
    return r;
  }
  return t.to_double();
}

// An input of a test layer: dims and type, and its value when inference may see it.
struct In {
  DataType type = DataType::kFloat32;
  Dims dims;
  HostTensor value;  // empty: unknown to inference
  bool omitted = false;
};
In dims_only(const Dims& d, DataType t = DataType::kFloat32) { return In{t, d, {}, false}; }
In known(const HostTensor& v) { return In{v.type(), v.dims(), v, false}; }
In omitted() { return In{DataType::kFloat32, Dims{}, {}, true}; }

// One layer in a network whose inputs are network inputs (for inference).
struct OneLayer {
  Network net;
  Layer* layer = nullptr;
  std::vector<TensorState> states;

  OneLayer(const std::string& type, const std::vector<In>& ins, Attributes attrs, int outputs = 1) {
    std::vector<Tensor*> tensors;
    for (size_t i = 0; i < ins.size(); ++i) {
      tensors.push_back(ins[i].omitted ? nullptr : net.add_input("in" + std::to_string(i), ins[i].type, ins[i].dims));
      TensorState s;
      s.type = ins[i].type;
      s.dims = ins[i].dims;
      if (!ins[i].value.empty()) s.value = std::make_shared<HostTensor>(ins[i].value);
      states.push_back(s);
    }
    layer = net.add_layer(type, tensors, outputs, std::move(attrs), "L");
  }
  std::vector<std::pair<DataType, Dims>> infer() {
    std::vector<const TensorState*> ptrs;
    for (size_t i = 0; i < states.size(); ++i) ptrs.push_back(layer->input(static_cast<int>(i)) ? &states[i] : nullptr);
    return infer_layer(*layer, ptrs);
  }
};

Dims infer1(const std::string& type, const std::vector<In>& ins, Attributes attrs = {}) {
  OneLayer l(type, ins, std::move(attrs));
  return l.infer().at(0).second;
}

// The inference error message (empty when inference succeeds).
std::string infer_error(const std::string& type, const std::vector<In>& ins, Attributes attrs = {}, int outputs = 1) {
  OneLayer l(type, ins, std::move(attrs), outputs);
  try {
    l.infer();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The error creating the layer throws (empty when it succeeds): attribute values are decoded and
// checked when a layer is created (src/ir/op_params.h).
std::string create_error(const std::string& type, const std::vector<In>& ins, Attributes attrs = {}, int outputs = 1) {
  try {
    OneLayer l(type, ins, std::move(attrs), outputs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Attributes attrs_of(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// Runs one layer on the CPU with the given tactic: inference (every input's value visible),
// then prepare / execute on buffers of our own.
std::vector<HostTensor> run(const std::string& type, const std::vector<HostTensor>& inputs, Attributes attrs,
                            int outputs = 1, const std::string& tactic = "reference", int threads = 1) {
  std::vector<In> ins;
  for (const auto& t : inputs) ins.push_back(t.empty() ? omitted() : known(t));
  OneLayer l(type, ins, std::move(attrs), outputs);
  const auto shapes = l.infer();
  const KernelEntry* entry = KernelRegistry::instance().find(DeviceType::kCPU, type, tactic);
  if (!entry) throw std::runtime_error("no CPU kernel " + type + "/" + tactic);
  std::vector<TensorDesc> in_desc, out_desc;
  KernelContext ctx;
  ctx.layer = l.layer;
  ctx.num_threads = threads;
  for (const auto& t : inputs) {
    TensorDesc d;
    TensorView v;
    if (t.empty()) {
      d.present = false;
    } else {
      d.type = v.type = t.type();
      d.dims = v.dims = t.dims();
      d.value = &t;
      v.data = const_cast<void*>(t.data());
    }
    in_desc.push_back(d);
    ctx.inputs.push_back(v);
  }
  if (entry->supports && !entry->supports(*l.layer, in_desc))
    throw std::runtime_error(tactic + " does not support this");
  std::vector<HostTensor> outs;
  for (const auto& [t, d] : shapes) outs.emplace_back(t, d);
  for (auto& o : outs) {
    out_desc.push_back(TensorDesc{o.type(), o.dims(), TensorFormat::kLinear, true, nullptr});
    ctx.outputs.push_back(TensorView{o.type(), o.dims(), TensorFormat::kLinear, o.data()});
  }
  auto kernel = entry->create(*l.layer);
  kernel->prepare(*l.layer, in_desc, out_desc, threads);
  std::vector<uint8_t> ws(kernel->workspace_size());
  ctx.workspace = ws.empty() ? nullptr : ws.data();
  ctx.workspace_size = ws.size();
  kernel->execute(ctx);
  return outs;
}

HostTensor run1(const std::string& type, const std::vector<HostTensor>& inputs, Attributes attrs = {}) {
  return run(type, inputs, std::move(attrs)).at(0);
}

void expect_values(const HostTensor& t, const Dims& dims, const std::vector<double>& want) {
  EXPECT_EQ(t.dims(), dims);
  EXPECT_EQ(values(t), want);
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.type() == b.type() && a.dims() == b.dims() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// ---- shape inference: Shuffle ---------------------------------------------------------------

Attributes reshape(const std::vector<int64_t>& dims, int64_t zero_is_placeholder = 1) {
  return attrs_of(
      {{"reshape_mode", std::string("dims")}, {"reshape", dims}, {"zero_is_placeholder", zero_is_placeholder}});
}

TEST(DataShapeInference, ReshapeZeroAndMinusOne) {
  const In x = dims_only({2, 3, 4});
  EXPECT_EQ(infer1(kLayerShuffle, {x}, reshape({0, -1})), (Dims{2, 12}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, reshape({-1})), (Dims{24}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, reshape({4, 0, -1})), (Dims{4, 3, 2}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, reshape({0, 0, 0})), (Dims{2, 3, 4}));
  EXPECT_EQ(infer1(kLayerShuffle, {dims_only({1, 1})}, reshape({})), Dims{});  // to a scalar
  // zero_is_placeholder = 0: a literal 0 extent, only possible for an empty tensor.
  EXPECT_EQ(infer1(kLayerShuffle, {dims_only({0, 3})}, reshape({3, 0, 5}, 0)), (Dims{3, 0, 5}));
  EXPECT_NE(infer_error(kLayerShuffle, {x}, reshape({0, -1}, 0)).find("is impossible"), std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {dims_only({1, 3, 4})}, reshape({5, -1}))
                .find("reshape of 1x3x4 (12 elements) to 5x? is impossible"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {x}, reshape({5, 5})).find("is impossible"), std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {x}, reshape({-1, -1})).find("at most one"), std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {x}, reshape({0, 0, 0, 0})).find("rank"), std::string::npos);
  // The error names the layer.
  EXPECT_NE(infer_error(kLayerShuffle, {x}, reshape({7})).find("layer 'L' (Shuffle)"), std::string::npos);
}

TEST(DataShapeInference, ReshapeFromShapeInput) {
  const In x = dims_only({2, 3, 4});
  EXPECT_EQ(infer1(kLayerShuffle, {x, known(i32s({4, -1}))}, attrs_of({{"reshape_mode", std::string("dims")}})),
            (Dims{4, 6}));
  EXPECT_EQ(infer1(kLayerShuffle, {x, known(i64s({0, 12}))}, attrs_of({{"reshape_mode", std::string("dims")}})),
            (Dims{2, 12}));
  // A shape tensor whose value inference cannot see.
  EXPECT_NE(infer_error(kLayerShuffle, {x, dims_only({2}, DataType::kInt64)},
                        attrs_of({{"reshape_mode", std::string("dims")}}))
                .find("must be known"),
            std::string::npos);
  // A shape input with reshape_mode none is a contradiction, not silently ignored.
  EXPECT_NE(infer_error(kLayerShuffle, {x, known(i64s({24}))}).find("reshape_mode"), std::string::npos);
}

TEST(DataShapeInference, SqueezeUnsqueeze) {
  const In x = dims_only({1, 3, 1, 4});
  const auto squeeze = [](std::vector<int64_t> axes) {
    return attrs_of({{"reshape_mode", std::string("squeeze")}, {"axes", axes}});
  };
  EXPECT_EQ(infer1(kLayerShuffle, {x}, squeeze({})), (Dims{3, 4}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, squeeze({-2})), (Dims{1, 3, 4}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, squeeze({0, 2})), (Dims{3, 4}));
  EXPECT_EQ(infer1(kLayerShuffle, {dims_only({1, 1})}, squeeze({})), Dims{});
  EXPECT_NE(infer_error(kLayerShuffle, {x}, squeeze({1})).find("has extent 3, not 1"), std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {x}, squeeze({4})).find("out of range"), std::string::npos);

  const auto unsqueeze = [](std::vector<int64_t> axes) {
    return attrs_of({{"reshape_mode", std::string("unsqueeze")}, {"axes", axes}});
  };
  const In y = dims_only({3, 4});
  EXPECT_EQ(infer1(kLayerShuffle, {y}, unsqueeze({0, -1})), (Dims{1, 3, 4, 1}));
  EXPECT_EQ(infer1(kLayerShuffle, {y}, unsqueeze({1, 3})), (Dims{3, 1, 4, 1}));
  EXPECT_EQ(infer1(kLayerShuffle, {dims_only({})}, unsqueeze({0})), (Dims{1}));
  EXPECT_NE(infer_error(kLayerShuffle, {y}, unsqueeze({1, 1})).find("twice"), std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {y}, unsqueeze({})).find("axes"), std::string::npos);
}

TEST(DataShapeInference, Flatten) {
  const In x = dims_only({2, 3, 4});
  const auto flatten = [](int64_t axis) {
    return attrs_of({{"reshape_mode", std::string("flatten")}, {"axis", axis}});
  };
  EXPECT_EQ(infer1(kLayerShuffle, {x}, flatten(0)), (Dims{1, 24}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, flatten(1)), (Dims{2, 12}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, flatten(2)), (Dims{6, 4}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, flatten(3)), (Dims{24, 1}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, flatten(-1)), (Dims{6, 4}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, attrs_of({{"reshape_mode", std::string("flatten")}})), (Dims{2, 12}));  // axis=1
  EXPECT_NE(infer_error(kLayerShuffle, {x}, flatten(4)).find("out of range"), std::string::npos);
}

TEST(DataShapeInference, TransposesAroundReshape) {
  const In x = dims_only({2, 3, 4, 5});
  // [2,3,4,5] -(0,2,3,1)-> [2,4,5,3] -flatten(2)-> [8,15] -(1,0)-> [15,8]
  EXPECT_EQ(infer1(kLayerShuffle, {x},
                   attrs_of({{"first_transpose", std::vector<int64_t>{0, 2, 3, 1}},
                             {"reshape_mode", std::string("flatten")},
                             {"axis", int64_t{2}},
                             {"second_transpose", std::vector<int64_t>{1, 0}}})),
            (Dims{15, 8}));
  EXPECT_EQ(infer1(kLayerShuffle, {x}, attrs_of({{"first_transpose", std::vector<int64_t>{3, 2, 1, 0}}})),
            (Dims{5, 4, 3, 2}));
  EXPECT_NE(infer_error(kLayerShuffle, {x}, attrs_of({{"first_transpose", std::vector<int64_t>{0, 1, 1, 2}}}))
                .find("not a permutation"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerShuffle, {x}, attrs_of({{"second_transpose", std::vector<int64_t>{1, 0}}})).find("rank"),
            std::string::npos);
  const std::string bogus = create_error(kLayerShuffle, {x}, attrs_of({{"reshape_mode", std::string("bogus")}}));
  EXPECT_NE(bogus.find("attribute 'reshape_mode' is \"bogus\""), std::string::npos) << bogus;
}

// ---- shape inference: the others --------------------------------------------------------------

TEST(DataShapeInference, ConcatenationAndSplit) {
  const Attributes axis1 = attrs_of({{"axis", int64_t{1}}});
  EXPECT_EQ(infer1(kLayerConcatenation, {dims_only({2, 1, 3}), dims_only({2, 4, 3}), dims_only({2, 2, 3})}, axis1),
            (Dims{2, 7, 3}));
  EXPECT_EQ(
      infer1(kLayerConcatenation, {dims_only({2, 1, 3}), dims_only({2, 1, 5})}, attrs_of({{"axis", int64_t{-1}}})),
      (Dims{2, 1, 8}));
  const std::string e =
      infer_error(kLayerConcatenation, {dims_only({2, 1, 3}), dims_only({2, 4, 3}), dims_only({2, 4, 5})}, axis1);
  EXPECT_NE(e.find("concatenation axis 1: input 2 has dims 2x4x5, expected 2x?x3"), std::string::npos) << e;
  EXPECT_NE(
      infer_error(kLayerConcatenation, {dims_only({2, 1}), dims_only({2, 1}, DataType::kInt32)}, axis1).find("Cast"),
      std::string::npos);
  EXPECT_NE(create_error(kLayerConcatenation, {dims_only({2, 1})}, {}).find("attribute 'axis' is required"),
            std::string::npos)
      << "axis is required";

  OneLayer uneven(kLayerSplit, {dims_only({2, 7, 3})}, axis1, 3);  // ONNX-18: ceil(7/3) = 3, 3, 1
  const auto u = uneven.infer();
  EXPECT_EQ(u[0].second, (Dims{2, 3, 3}));
  EXPECT_EQ(u[1].second, (Dims{2, 3, 3}));
  EXPECT_EQ(u[2].second, (Dims{2, 1, 3}));
  OneLayer even(kLayerSplit, {dims_only({6, 2})}, {}, 2);
  EXPECT_EQ(even.infer()[1].second, (Dims{3, 2}));
  OneLayer by_attr(kLayerSplit, {dims_only({2, 7})},
                   attrs_of({{"axis", int64_t{-1}}, {"split", std::vector<int64_t>{2, 5}}}), 2);
  EXPECT_EQ(by_attr.infer()[1].second, (Dims{2, 5}));
  OneLayer by_input(kLayerSplit, {dims_only({2, 7}), known(i32s({6, 0, 1}))}, axis1, 3);
  const auto bi = by_input.infer();
  EXPECT_EQ(bi[0].second, (Dims{2, 6}));
  EXPECT_EQ(bi[1].second, (Dims{2, 0}));
  EXPECT_NE(infer_error(kLayerSplit, {dims_only({2, 7}), known(i64s({3, 3}))}, axis1, 2).find("sum to 6"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerSplit, {dims_only({2, 7}), known(i64s({3, 4}))}, axis1, 3).find("3 outputs"),
            std::string::npos);
}

Dims slice_dims(const Dims& x, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes,
                std::vector<int64_t> steps) {
  return infer1(kLayerSlice,
                {dims_only(x), known(i64s(starts)), known(i64s(ends)), axes.empty() ? omitted() : known(i64s(axes)),
                 steps.empty() ? omitted() : known(i64s(steps))});
}

TEST(DataShapeInference, SliceClampingAndNegativeSteps) {
  const Dims x{10, 20, 5};
  EXPECT_EQ(slice_dims(x, {1, 2}, {4, 6}, {}, {}), (Dims{3, 4, 5}));
  EXPECT_EQ(slice_dims(x, {-100}, {kI64Max}, {0}, {}), (Dims{10, 20, 5}));
  EXPECT_EQ(slice_dims(x, {100}, {200}, {1}, {}), (Dims{10, 0, 5}));
  EXPECT_EQ(slice_dims(x, {-1}, {kI64Min}, {0}, {-1}), (Dims{10, 20, 5}));  // full reversal
  EXPECT_EQ(slice_dims(x, {8}, {1}, {0}, {-3}), (Dims{3, 20, 5}));          // 8, 5, 2
  EXPECT_EQ(slice_dims(x, {100}, {-100}, {-1}, {-2}), (Dims{10, 20, 3}));   // 4, 2, 0
  EXPECT_EQ(slice_dims(x, {0, 1}, {20, 5}, {-2, 2}, {3, 2}), (Dims{10, 7, 2}));
  EXPECT_EQ(slice_dims(x, {3}, {3}, {0}, {}), (Dims{0, 20, 5}));
  EXPECT_EQ(slice_dims(x, {2}, {8}, {0}, {-1}), (Dims{0, 20, 5}));
  // int32 shape inputs.
  EXPECT_EQ(infer1(kLayerSlice, {dims_only(x), known(i32s({-3})), known(i32s({std::numeric_limits<int32_t>::max()})),
                                 known(i32s({1}))}),
            (Dims{10, 3, 5}));
  EXPECT_NE(
      infer_error(kLayerSlice, {dims_only(x), known(i64s({0})), known(i64s({1})), known(i64s({0})), known(i64s({0}))})
          .find("step"),
      std::string::npos);
  EXPECT_NE(infer_error(kLayerSlice, {dims_only(x), known(i64s({0, 0})), known(i64s({1, 1})), known(i64s({0, -3}))})
                .find("twice"),
            std::string::npos);
}

TEST(DataShapeInference, Gather) {
  const In data = dims_only({4, 5, 3});
  EXPECT_EQ(infer1(kLayerGather, {data, dims_only({2, 6}, DataType::kInt64)}, attrs_of({{"axis", int64_t{1}}})),
            (Dims{4, 2, 6, 3}));
  EXPECT_EQ(infer1(kLayerGather, {data, dims_only({}, DataType::kInt32)}, attrs_of({{"axis", int64_t{-1}}})),
            (Dims{4, 5}));
  EXPECT_EQ(infer1(kLayerGather, {data, dims_only({4, 9, 2}, DataType::kInt64)},
                   attrs_of({{"mode", std::string("elements")}, {"axis", int64_t{1}}})),
            (Dims{4, 9, 2}));
  EXPECT_EQ(
      infer1(kLayerGather, {data, dims_only({2, 2, 2}, DataType::kInt64)}, attrs_of({{"mode", std::string("nd")}})),
      (Dims{2, 2, 3}));
  EXPECT_EQ(infer1(kLayerGather, {data, dims_only({4, 2, 1}, DataType::kInt64)},
                   attrs_of({{"mode", std::string("nd")}, {"batch_dims", int64_t{1}}})),
            (Dims{4, 2, 3}));
  EXPECT_NE(infer_error(kLayerGather, {data, dims_only({2}, DataType::kFloat32)}).find("int32 or int64"),
            std::string::npos);
  EXPECT_NE(
      infer_error(kLayerGather, {data, dims_only({2, 4}, DataType::kInt64)}, attrs_of({{"mode", std::string("nd")}}))
          .find("last indices dim"),
      std::string::npos);
}

Dims resize_dims(const Dims& x, const HostTensor& scales, const HostTensor& sizes,
                 const std::string& mode = "nearest") {
  return infer1(kLayerResize,
                {dims_only(x), scales.empty() ? omitted() : known(scales), sizes.empty() ? omitted() : known(sizes)},
                attrs_of({{"mode", mode}}));
}

TEST(DataShapeInference, Resize) {
  const HostTensor scales = f32s({4}, {1, 1, 2, 1.5f});
  EXPECT_EQ(resize_dims({1, 3, 5, 7}, scales, {}), (Dims{1, 3, 10, 10}));  // floor(7 * 1.5)
  EXPECT_EQ(resize_dims({1, 3, 5, 7}, f32s({4}, {1, 1, 0.5f, 0.3f}), {}), (Dims{1, 3, 2, 2}));
  EXPECT_EQ(resize_dims({1, 3, 5, 7}, {}, i64s({1, 3, 9, 4}), "linear"), (Dims{1, 3, 9, 4}));
  // Exporters write an empty scales tensor next to sizes.
  EXPECT_EQ(resize_dims({1, 3, 5, 7}, f32s({0}, {}), i64s({2, 3, 9, 4})), (Dims{2, 3, 9, 4}));
  const In x = dims_only({1, 3, 5, 7});
  EXPECT_NE(infer_error(kLayerResize, {x, known(scales), known(i64s({1, 3, 9, 4}))}).find("not both"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerResize, {x}).find("needs scales"), std::string::npos);
  EXPECT_NE(infer_error(kLayerResize, {x, known(f32s({2}, {2, 2}))}).find("rank"), std::string::npos);
  EXPECT_NE(infer_error(kLayerResize, {dims_only({1, 3}, DataType::kInt32), known(f32s({2}, {1, 2}))},
                        attrs_of({{"mode", std::string("linear")}}))
                .find("floating-point"),
            std::string::npos);
  // Attribute values are checked when the layer is created (ResizeParams).
  try {
    OneLayer l(kLayerResize, {x, known(scales)},
               attrs_of({{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}));
    ADD_FAILURE() << "tf_crop_and_resize was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("roi"), std::string::npos) << e.what();
  }
}

TEST(DataShapeInference, PaddingShapeFillExpandTileConstant) {
  EXPECT_EQ(infer1(kLayerPadding, {dims_only({2, 3}), known(i64s({1, -1, 2, 0}))}), (Dims{5, 2}));
  EXPECT_NE(infer_error(kLayerPadding, {dims_only({2, 3}), known(i64s({1, -2, 0, -2}))}).find("below zero"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerPadding, {dims_only({2, 3}), known(i64s({1, 1}))}).find("2 * rank"), std::string::npos);
  EXPECT_NE(create_error(kLayerPadding, {dims_only({2, 3}), known(i64s({0, 0, 0, 0}))},
                         attrs_of({{"mode", std::string("mirror")}}))
                .find("attribute 'mode' is \"mirror\""),
            std::string::npos);

  OneLayer shape(kLayerShape, {dims_only({2, 3, 4, 5})}, attrs_of({{"start", int64_t{1}}, {"end", int64_t{-1}}}));
  EXPECT_EQ(shape.infer()[0], (std::pair<DataType, Dims>{DataType::kInt64, Dims{2}}));
  EXPECT_EQ(infer1(kLayerShape, {dims_only({2, 3, 4, 5})}, attrs_of({{"start", int64_t{-10}}})), (Dims{4}));
  EXPECT_EQ(infer1(kLayerShape, {dims_only({2, 3})}, attrs_of({{"start", int64_t{3}}})), (Dims{0}));

  Attributes fill_int = attrs_of({{"mode", std::string("constant")}, {"value", scalar<int64_t>(DataType::kInt64, 7)}});
  OneLayer fill(kLayerFill, {known(i64s({2, 3}))}, fill_int);
  EXPECT_EQ(fill.infer()[0], (std::pair<DataType, Dims>{DataType::kInt64, Dims{2, 3}}));
  OneLayer fill_default(kLayerFill, {known(i64s({4}))}, attrs_of({{"mode", std::string("constant")}}));
  EXPECT_EQ(fill_default.infer()[0], (std::pair<DataType, Dims>{DataType::kFloat32, Dims{4}}));
  const auto range = [](auto start, auto limit, auto delta, DataType t) {
    return infer1(kLayerFill, {known(scalar(t, start)), known(scalar(t, limit)), known(scalar(t, delta))},
                  attrs_of({{"mode", std::string("range")}}));
  };
  EXPECT_EQ(range(1.0f, 2.0f, 0.3f, DataType::kFloat32), (Dims{4}));                     // ceil(3.33)
  EXPECT_EQ(range(int64_t{10}, int64_t{-3}, int64_t{-4}, DataType::kInt64), (Dims{4}));  // 10 6 2 -2
  EXPECT_EQ(range(int32_t{0}, int32_t{9}, int32_t{3}, DataType::kInt32), (Dims{3}));
  EXPECT_EQ(range(int64_t{5}, int64_t{5}, int64_t{1}, DataType::kInt64), (Dims{0}));
  EXPECT_EQ(range(int64_t{5}, int64_t{1}, int64_t{1}, DataType::kInt64), (Dims{0}));
  EXPECT_EQ(range(2.0, -1.0, -1.5, DataType::kFloat64), (Dims{2}));

  EXPECT_EQ(infer1(kLayerExpand, {dims_only({3, 1}), known(i64s({2, 1, 4}))}), (Dims{2, 3, 4}));
  EXPECT_EQ(infer1(kLayerExpand, {dims_only({1, 4}), known(i64s({3, 1}))}), (Dims{3, 4}));
  EXPECT_EQ(infer1(kLayerExpand, {dims_only({2, 3, 4}), known(i64s({1}))}), (Dims{2, 3, 4}));
  EXPECT_NE(infer_error(kLayerExpand, {dims_only({2, 3}), known(i64s({4}))}).find("broadcast"), std::string::npos);

  EXPECT_EQ(infer1(kLayerTile, {dims_only({2, 3}), known(i64s({2, 3}))}), (Dims{4, 9}));
  EXPECT_NE(infer_error(kLayerTile, {dims_only({2, 3}), known(i64s({2}))}).find("one value per axis"),
            std::string::npos);

  OneLayer constant(kLayerConstant, {}, attrs_of({{"value", HostTensor(DataType::kUInt8, Dims{3, 2})}}));
  EXPECT_EQ(constant.infer()[0], (std::pair<DataType, Dims>{DataType::kUInt8, Dims{3, 2}}));
}

// ---- reference kernels: hand-computed cases ---------------------------------------------------

TEST(DataReference, HandComputed) {
  const HostTensor m = iota_f32({2, 3});  // [[0 1 2] [3 4 5]]
  expect_values(run1(kLayerShuffle, {m}, attrs_of({{"first_transpose", std::vector<int64_t>{1, 0}}})), {3, 2},
                {0, 3, 1, 4, 2, 5});
  // transpose: [[0 3] [1 4] [2 5]]; as 2x3: [[0 3 1] [4 2 5]]; transposed: [[0 4] [3 2] [1 5]].
  expect_values(run1(kLayerShuffle, {m},
                     attrs_of({{"first_transpose", std::vector<int64_t>{1, 0}},
                               {"reshape_mode", std::string("dims")},
                               {"reshape", std::vector<int64_t>{2, 3}},
                               {"second_transpose", std::vector<int64_t>{1, 0}}})),
                {3, 2}, {0, 4, 3, 2, 1, 5});
  expect_values(run1(kLayerConcatenation, {f32s({2}, {1, 2}), f32s({3}, {3, 4, 5})}, attrs_of({{"axis", int64_t{0}}})),
                {5}, {1, 2, 3, 4, 5});
  expect_values(run1(kLayerConcatenation, {m, f32s({2, 1}, {9, 8})}, attrs_of({{"axis", int64_t{1}}})), {2, 4},
                {0, 1, 2, 9, 3, 4, 5, 8});
  const auto parts = run(kLayerSplit, {m}, attrs_of({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{1, 2}}}), 2);
  expect_values(parts[0], {2, 1}, {0, 3});
  expect_values(parts[1], {2, 2}, {1, 2, 4, 5});
  const HostTensor ten = iota_f32({10});
  expect_values(run1(kLayerSlice, {ten, i64s({-2}), i64s({kI64Min}), HostTensor{}, i64s({-3})}), {3}, {8, 5, 2});
  expect_values(run1(kLayerSlice, {m, i32s({1, 5}), i32s({-5, 0}), i32s({0, 1}), i32s({-1, -1})}), {2, 2},
                {5, 4, 2, 1});
  expect_values(run1(kLayerGather, {f32s({3}, {10, 20, 30}), i64s({-1, 0, 1})}), {3}, {30, 10, 20});
  expect_values(run1(kLayerGather, {m, i32s({-1})}, attrs_of({{"axis", int64_t{1}}})), {2, 1}, {2, 5});
  expect_values(
      run1(kLayerGather, {m, HostTensor::from_vector(DataType::kInt64, Dims{2, 2}, std::vector<int64_t>{2, -3, 0, 1})},
           attrs_of({{"mode", std::string("elements")}, {"axis", int64_t{1}}})),
      {2, 2}, {2, 0, 3, 4});
  expect_values(
      run1(kLayerGather, {m, HostTensor::from_vector(DataType::kInt64, Dims{2, 2}, std::vector<int64_t>{1, -1, 0, 1})},
           attrs_of({{"mode", std::string("nd")}})),
      {2}, {5, 1});
  expect_values(run1(kLayerShape, {HostTensor(DataType::kInt8, Dims{2, 3, 4})}, attrs_of({{"start", int64_t{1}}})), {2},
                {3, 4});
  expect_values(run1(kLayerFill, {i64s({2, 2})},
                     attrs_of({{"mode", std::string("constant")}, {"value", scalar<int32_t>(DataType::kInt32, -7)}})),
                {2, 2}, {-7, -7, -7, -7});
  expect_values(run1(kLayerFill, {i64s({3})}, attrs_of({{"mode", std::string("constant")}})), {3}, {0, 0, 0});
  expect_values(run1(kLayerFill,
                     {scalar<int64_t>(DataType::kInt64, 10), scalar<int64_t>(DataType::kInt64, -3),
                      scalar<int64_t>(DataType::kInt64, -4)},
                     attrs_of({{"mode", std::string("range")}})),
                {4}, {10, 6, 2, -2});
  expect_values(
      run1(kLayerFill,
           {scalar(DataType::kFloat64, 1.0), scalar(DataType::kFloat64, 2.0), scalar(DataType::kFloat64, 0.25)},
           attrs_of({{"mode", std::string("range")}})),
      {4}, {1, 1.25, 1.5, 1.75});
  expect_values(run1(kLayerConstant, {}, attrs_of({{"value", m}})), {2, 3}, {0, 1, 2, 3, 4, 5});
  const HostTensor row = f32s({3}, {1, 2, 3});
  expect_values(run1(kLayerPadding, {row, i64s({2, 2})}, attrs_of({{"mode", std::string("reflect")}})), {7},
                {3, 2, 1, 2, 3, 2, 1});
  expect_values(run1(kLayerPadding, {row, i64s({2, 1})}, attrs_of({{"mode", std::string("edge")}})), {6},
                {1, 1, 1, 2, 3, 3});
  expect_values(run1(kLayerPadding, {row, i64s({2, 1})}, attrs_of({{"mode", std::string("wrap")}})), {6},
                {2, 3, 1, 2, 3, 1});
  expect_values(run1(kLayerPadding, {row, i64s({-1, 2}), scalar(DataType::kFloat32, 9.0f)}), {4}, {2, 3, 9, 9});
  // Negative pads crop before reflecting: [2 3] reflected by 2 on the right -> 2 3 2 3.
  expect_values(run1(kLayerPadding, {row, i64s({-1, 2})}, attrs_of({{"mode", std::string("reflect")}})), {4},
                {2, 3, 2, 3});
  expect_values(run1(kLayerTile, {f32s({2}, {1, 2}), i64s({3})}), {6}, {1, 2, 1, 2, 1, 2});
  expect_values(run1(kLayerExpand, {f32s({2, 1}, {1, 2}), i64s({2, 3})}), {2, 3}, {1, 1, 1, 2, 2, 2});
  expect_values(run1(kLayerExpand, {f32s({1, 3}, {1, 2, 3}), i64s({2, 1})}), {2, 3}, {1, 2, 3, 1, 2, 3});
  // Nearest 2x, asymmetric + floor: every element doubled along both axes.
  expect_values(run1(kLayerResize, {f32s({1, 2}, {1, 2}), f32s({2}, {2, 2})},
                     attrs_of({{"coordinate_transformation_mode", std::string("asymmetric")},
                               {"nearest_mode", std::string("floor")}})),
                {2, 4}, {1, 1, 2, 2, 1, 1, 2, 2});
  // Linear, align_corners 2 -> 3: the midpoint.
  expect_values(run1(kLayerResize, {f32s({2}, {1, 2}), HostTensor{}, i64s({3})},
                     attrs_of({{"mode", std::string("linear")},
                               {"coordinate_transformation_mode", std::string("align_corners")}})),
                {3}, {1, 1.5, 2});
}

TEST(DataReference, OutOfRangeIndicesThrowNamingIndexAndBound) {
  const HostTensor m = iota_f32({2, 3});
  try {
    run1(kLayerGather, {m, i64s({0, 3})}, attrs_of({{"axis", int64_t{1}}}));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("index 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("extent 3"), std::string::npos) << msg;
  }
  EXPECT_THROW(run1(kLayerGather, {m, i64s({-3})}), Error);
  EXPECT_NO_THROW(run1(kLayerGather, {m, i64s({-2})}));
  EXPECT_THROW(run1(kLayerGather, {m, HostTensor::from_vector(DataType::kInt32, Dims{1, 1}, std::vector<int32_t>{5})},
                    attrs_of({{"mode", std::string("elements")}, {"axis", int64_t{1}}})),
               Error);
  EXPECT_THROW(
      run1(kLayerGather, {m, HostTensor::from_vector(DataType::kInt64, Dims{1, 2}, std::vector<int64_t>{-3, 0})},
           attrs_of({{"mode", std::string("nd")}})),
      Error);
}

// ---- every data type through the movers ------------------------------------------------------

HostTensor convert(const HostTensor& src, DataType to) {
  HostTensor out(to, src.dims());
  const auto v = src.to_double();
  for (int64_t i = 0; i < src.count(); ++i) {
    const double x = v[static_cast<size_t>(i)];
    switch (to) {
      case DataType::kFloat32:
        out.as<float>()[i] = static_cast<float>(x);
        break;
      case DataType::kFloat16:
        out.as<half>()[i] = half(static_cast<float>(x));
        break;
      case DataType::kFloat64:
        out.as<double>()[i] = x;
        break;
      case DataType::kInt8:
        out.as<int8_t>()[i] = static_cast<int8_t>(x);
        break;
      case DataType::kUInt8:
        out.as<uint8_t>()[i] = static_cast<uint8_t>(x);
        break;
      case DataType::kInt32:
        out.as<int32_t>()[i] = static_cast<int32_t>(x);
        break;
      case DataType::kInt64:
        out.as<int64_t>()[i] = static_cast<int64_t>(x);
        break;
      case DataType::kBool:
        out.as<bool>()[i] = x != 0;
        break;
      case DataType::kInt16:
        out.as<int16_t>()[i] = static_cast<int16_t>(x);
        break;
      case DataType::kUInt16:
        out.as<uint16_t>()[i] = static_cast<uint16_t>(x);
        break;
      case DataType::kUInt32:
        out.as<uint32_t>()[i] = static_cast<uint32_t>(x);
        break;
      case DataType::kUInt64:
        out.as<uint64_t>()[i] = static_cast<uint64_t>(x);
        break;
      case DataType::kString:
        break;  // not a numeric reference
    }
  }
  return out;
}

TEST(DataReference, MoversHandleEveryType) {
  // Distinct small values (0/1 pattern for bool); each type's result must equal the float32
  // result converted to that type.
  struct Mover {
    const char* type;
    std::vector<HostTensor> extra;  // inputs after x; the first entry may be the other concat part
    Attributes attrs;
    bool pad_value = false;
  };
  const std::vector<Mover> movers = {
      {kLayerShuffle, {}, attrs_of({{"first_transpose", std::vector<int64_t>{2, 0, 1}}})},
      {kLayerSlice, {i64s({-1, 0}), i64s({kI64Min, 3}), i64s({1, 2}), i64s({-2, 2})}, {}},
      {kLayerGather, {i64s({2, -1, 0})}, attrs_of({{"axis", int64_t{1}}})},
      {kLayerPadding, {i64s({1, 0, 2, 0, 1, 1})}, attrs_of({{"mode", std::string("reflect")}})},
      {kLayerPadding, {i64s({1, 0, -1, 0, 1, 1})}, {}, true},
      {kLayerTile, {i64s({2, 1, 2})}, {}},
      {kLayerExpand, {i64s({2, 1, 1, 1})}, {}},
      {kLayerResize, {f32s({3}, {1, 2, 1.5f})}, {}},
      {kLayerConcatenation, {}, attrs_of({{"axis", int64_t{2}}})},
  };
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kUInt8,
                            DataType::kInt32,   DataType::kInt64,   DataType::kBool, DataType::kFloat64};
  HostTensor base(DataType::kFloat32, Dims{2, 3, 4});
  for (int64_t i = 0; i < base.count(); ++i) base.as<float>()[i] = static_cast<float>((i * 7) % 23);
  for (const auto& m : movers) {
    SCOPED_TRACE(m.type);
    for (DataType t : types) {
      SCOPED_TRACE(to_string(t));
      HostTensor x = base;
      if (t == DataType::kBool) {
        x = base.clone();
        for (int64_t i = 0; i < x.count(); ++i) x.as<float>()[i] = static_cast<float>(i % 3 == 1);
      }
      std::vector<HostTensor> ref_in{x}, typed_in{convert(x, t)};
      if (std::string(m.type) == kLayerConcatenation) {
        ref_in.push_back(x);
        typed_in.push_back(convert(x, t));
      }
      for (const auto& e : m.extra) {
        ref_in.push_back(e);
        typed_in.push_back(e);
      }
      if (m.pad_value) {
        ref_in.push_back(scalar(DataType::kFloat32, 1.0f));
        typed_in.push_back(convert(scalar(DataType::kFloat32, 1.0f), t));
      }
      const HostTensor want = convert(run1(m.type, ref_in, m.attrs), t);
      const HostTensor got = run1(m.type, typed_in, m.attrs);
      EXPECT_TRUE(same_bytes(got, want));
    }
  }
  for (DataType t : types) {  // Fill constant of every type
    const HostTensor v = convert(scalar(DataType::kFloat32, 1.0f), t);
    const HostTensor got =
        run1(kLayerFill, {i64s({2, 3})}, attrs_of({{"mode", std::string("constant")}, {"value", v}}));
    EXPECT_EQ(got.type(), t);
    EXPECT_EQ(values(got), std::vector<double>(6, 1.0));
  }
}

// ---- "fast" tactics against the reference ----------------------------------------------------

HostTensor pattern(DataType t, const Dims& d, uint32_t seed) {
  HostTensor x(t, d);
  auto* p = static_cast<uint8_t*>(x.data());
  uint32_t s = seed;
  for (size_t i = 0; i < x.nbytes(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<uint8_t>(s >> 24);
  }
  if (t == DataType::kBool) {
    for (size_t i = 0; i < x.nbytes(); ++i) p[i] &= 1;
  }
  if (t == DataType::kFloat32) {  // keep them finite
    for (int64_t i = 0; i < x.count(); ++i)
      x.as<float>()[i] = static_cast<float>(static_cast<int32_t>(i * 2654435761u) % 1000) / 7;
  }
  return x;
}

void expect_fast_equals_reference(const std::string& type, const std::vector<HostTensor>& inputs,
                                  const Attributes& attrs) {
  const HostTensor ref = run(type, inputs, attrs).at(0);
  for (int threads : {1, 2, 3}) {
    const HostTensor fast = run(type, inputs, attrs, 1, "fast", threads).at(0);
    EXPECT_TRUE(same_bytes(fast, ref)) << "threads " << threads;
  }
}

// The fast tactics' cases on odd shapes (every 4-D transpose in three element widths, reshapes,
// empty tensors, concatenation on every axis, nearest resizes) are in the op table
// (tests/data/data/cases.json, "require": ["cpu:fast"], exact), run by the harness with two
// threads; here a few of them with bit patterns and 1, 2 and 3 threads.
TEST(DataFast, ThreadCountsGiveTheReferenceBits) {
  expect_fast_equals_reference(kLayerShuffle, {pattern(DataType::kFloat32, {3, 5, 7, 13}, 1)},
                               attrs_of({{"first_transpose", std::vector<int64_t>{3, 1, 0, 2}}}));
  expect_fast_equals_reference(kLayerShuffle, {pattern(DataType::kFloat16, {1, 3, 1, 5, 2}, 2)},
                               attrs_of({{"first_transpose", std::vector<int64_t>{4, 2, 0, 3, 1}}}));
  expect_fast_equals_reference(kLayerShuffle, {pattern(DataType::kFloat32, {1, 255, 13, 11}, 8)},  // YOLO head
                               attrs_of({{"reshape_mode", std::string("dims")},
                                         {"reshape", std::vector<int64_t>{1, 3, 85, 13, 11}},
                                         {"second_transpose", std::vector<int64_t>{0, 1, 3, 4, 2}}}));
  expect_fast_equals_reference(kLayerConcatenation,
                               {pattern(DataType::kInt8, {2, 3, 5, 7}, 3), pattern(DataType::kInt8, {2, 1, 5, 7}, 1)},
                               attrs_of({{"axis", int64_t{1}}}));
  expect_fast_equals_reference(kLayerResize, {pattern(DataType::kFloat32, {2, 3, 13, 7}, 9), f32s({4}, {1, 1, 2, 2})},
                               attrs_of({{"coordinate_transformation_mode", std::string("asymmetric")},
                                         {"nearest_mode", std::string("floor")}}));
}

TEST(DataReference, HostEvaluatedShapeArithmetic) {
  // The exporters' pattern: Reshape(x, Concat(Gather(Shape(x), 0), [-1])), inferred for concrete
  // input dims; Gather and Concat run on the host through the reference kernels.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 3, 4});
  Tensor* shape = net.add_shape(x)->output(0);
  Tensor* batch = net.add_gather(shape, net.add_constant(i64s({0}))->output(0), 0)->output(0);
  Tensor* minus_one = net.add_constant(i64s({-1}))->output(0);
  Tensor* target = net.add_concatenation({batch, minus_one}, 0)->output(0);
  Tensor* y = net.add_shuffle_dynamic(x, target)->output(0);
  net.mark_output(y);
  const auto states = infer_shapes(net, {{"x", Dims{5, 3, 4}}});
  EXPECT_EQ(states.at(y).dims, (Dims{5, 12}));
  ASSERT_TRUE(states.at(target).value);
  EXPECT_EQ(states.at(target).value->to_int64(), (std::vector<int64_t>{5, -1}));
}

}  // namespace
}  // namespace kiln
