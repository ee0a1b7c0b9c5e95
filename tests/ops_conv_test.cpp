// Tests of the Convolution, Deconvolution and Pooling layer types: shape inference (sizes,
// ceil_mode, global, and the errors for bad shapes/attributes) and the CPU reference kernels,
// checked against hand-computed tiny cases, in fp16, channels-last and with several threads. The
// conv family's op cases (ONNX Runtime outputs from tests/data/conv/generate.py, oneDNN's
// awkward shapes) are in the op table, tests/data/conv/cases.json, run on every backend
// (tests/op_table.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
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

namespace kiln {
namespace {

// ---- helpers --------------------------------------------------------------------------------

struct Array {
  Dims dims;
  std::vector<float> values;
};

// A one-layer network whose inputs are network inputs (null entries: omitted optional inputs).
struct OneLayer {
  Network network;
  Layer* layer = nullptr;

  OneLayer(const std::string& type, const std::vector<std::optional<Dims>>& input_dims, Attributes attrs,
           DataType dtype = DataType::kFloat32) {
    std::vector<Tensor*> inputs;
    for (size_t i = 0; i < input_dims.size(); ++i) {
      inputs.push_back(input_dims[i] ? network.add_input("in" + std::to_string(i), dtype, *input_dims[i]) : nullptr);
    }
    layer = network.add_layer(type, inputs, 1, std::move(attrs), "layer");
  }

  // Output (type, dims) from shape inference; throws kiln::Error like the builder would.
  std::pair<DataType, Dims> infer() const {
    std::vector<TensorState> states(static_cast<size_t>(layer->num_inputs()));
    std::vector<const TensorState*> ptrs;
    for (int i = 0; i < layer->num_inputs(); ++i) {
      const Tensor* t = layer->input(i);
      if (!t) {
        ptrs.push_back(nullptr);
        continue;
      }
      states[static_cast<size_t>(i)].type = t->type();
      states[static_cast<size_t>(i)].dims = t->dims();
      ptrs.push_back(&states[static_cast<size_t>(i)]);
    }
    return infer_layer(*layer, ptrs).at(0);
  }
};

Dims infer_dims(const std::string& type, const std::vector<std::optional<Dims>>& inputs, const Attributes& attrs) {
  OneLayer one(type, inputs, attrs);
  return one.infer().second;
}

// Runs the CPU reference kernel of a one-layer network on the given inputs (an input with no
// values is omitted); the output dims come from shape inference. T is the element type.
template <typename T>
Array run_reference_typed(const std::string& type, const std::vector<Array>& inputs, const Attributes& attrs,
                          DataType dtype, int num_threads, TensorFormat format = TensorFormat::kLinear) {
  std::vector<std::optional<Dims>> dims;
  for (const Array& a : inputs) dims.push_back(a.values.empty() ? std::nullopt : std::optional<Dims>(a.dims));
  OneLayer one(type, dims, attrs, dtype);
  const Dims out_dims = one.infer().second;

  const KernelEntry* entry = KernelRegistry::instance().find(DeviceType::kCPU, type, "reference");
  if (!entry) throw std::runtime_error("no CPU reference kernel for " + type);
  std::vector<std::vector<T>> buffers;
  std::vector<TensorDesc> in_descs;
  KernelContext ctx;
  ctx.layer = one.layer;
  ctx.num_threads = num_threads;
  buffers.reserve(inputs.size() + 1);
  for (const Array& a : inputs) {
    buffers.emplace_back(a.values.begin(), a.values.end());  // converts float -> T
    TensorDesc d;
    d.type = dtype;
    d.dims = a.dims;
    d.present = !a.values.empty();
    TensorView v;
    v.type = dtype;
    v.dims = a.dims;
    // Activations (x, residual) in `format`; weights and bias stay plain.
    const size_t index = ctx.inputs.size();
    d.format = v.format = (index == 0 || index == 3) ? format : TensorFormat::kLinear;
    v.data = a.values.empty() ? nullptr : buffers.back().data();
    in_descs.push_back(d);
    ctx.inputs.push_back(v);
  }
  if (entry->supports && !entry->supports(*one.layer, in_descs)) throw std::runtime_error("kernel rejects the case");
  std::vector<T>& out = buffers.emplace_back(static_cast<size_t>(out_dims.volume()), static_cast<T>(99.0f));
  TensorDesc out_desc;
  out_desc.type = dtype;
  out_desc.dims = out_dims;
  out_desc.format = format;
  ctx.outputs.push_back(TensorView{dtype, out_dims, format, out.data()});

  auto kernel = entry->create(*one.layer);
  kernel->prepare(*one.layer, in_descs, {out_desc}, num_threads);
  EXPECT_EQ(kernel->workspace_size(), 0u);
  kernel->execute(ctx);
  Array result{out_dims, {}};
  for (const T& v : out) result.values.push_back(static_cast<float>(v));
  return result;
}

Array run_reference(const std::string& type, const std::vector<Array>& inputs, const Attributes& attrs,
                    int num_threads = 1) {
  return run_reference_typed<float>(type, inputs, attrs, DataType::kFloat32, num_threads);
}

void expect_near(const Array& got, const Array& want, float rel, float abs, const std::string& what) {
  ASSERT_EQ(got.dims, want.dims) << what;
  ASSERT_EQ(got.values.size(), want.values.size()) << what;
  for (size_t i = 0; i < got.values.size(); ++i) {
    ASSERT_NEAR(got.values[i], want.values[i], abs + rel * std::fabs(want.values[i])) << what << " at flat index " << i;
  }
}

Array iota(const Dims& dims, float start = 1.0f) {
  Array a{dims, std::vector<float>(static_cast<size_t>(dims.volume()))};
  for (size_t i = 0; i < a.values.size(); ++i) a.values[i] = start + static_cast<float>(i);
  return a;
}

Array filled(const Dims& dims, float value) {
  return {dims, std::vector<float>(static_cast<size_t>(dims.volume()), value)};
}

Array none() { return {}; }

Attributes make_attrs(std::initializer_list<std::pair<const std::string, AttrValue>> values) {
  Attributes a;
  for (const auto& [k, v] : values) a.set(k, v);
  return a;
}

using Ints = std::vector<int64_t>;

// Expects shape inference to fail with a message containing `needle`.
void expect_infer_error(const std::string& type, const std::vector<std::optional<Dims>>& inputs,
                        const Attributes& attrs, const std::string& needle) {
  try {
    infer_dims(type, inputs, attrs);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer"), std::string::npos) << "message should name the layer: " << e.what();
  }
}

// ---- schemas ------------------------------------------------------------------------------

TEST(OpsConvSchema, Registered) {
  for (const char* t : {kLayerConvolution, kLayerDeconvolution, kLayerPooling}) {
    const OpSchema* s = OpSchemaRegistry::instance().find(t);
    ASSERT_NE(s, nullptr) << t;
    EXPECT_NE(s->find_attr("strides"), nullptr);
    EXPECT_NE(s->find_attr("pads"), nullptr);
    EXPECT_NE(s->find_attr("dilations"), nullptr);
    ASSERT_TRUE(KernelRegistry::instance().find(DeviceType::kCPU, t, "reference")) << t;
  }
  const OpSchema* conv = OpSchemaRegistry::instance().find(kLayerConvolution);
  EXPECT_EQ(conv->min_inputs, 2);
  EXPECT_EQ(conv->max_inputs, 4);
  for (const char* a : {"group", "activation", "activation_alpha", "activation_beta"})
    EXPECT_NE(conv->find_attr(a), nullptr) << a;
  const OpSchema* deconv = OpSchemaRegistry::instance().find(kLayerDeconvolution);
  EXPECT_EQ(deconv->max_inputs, 3);
  EXPECT_NE(deconv->find_attr("output_padding"), nullptr);
  const OpSchema* pool = OpSchemaRegistry::instance().find(kLayerPooling);
  for (const char* a : {"mode", "kernel", "ceil_mode", "count_include_pad", "global"})
    EXPECT_NE(pool->find_attr(a), nullptr) << a;
}

// ---- shape inference ----------------------------------------------------------------------

TEST(OpsConvInfer, ConvolutionSizes) {
  // out = floor((D + pb + pe - d*(k-1) - 1) / s) + 1
  EXPECT_EQ(infer_dims("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}}, {}), (Dims{1, 4, 3, 3}));
  EXPECT_EQ(
      infer_dims(
          "Convolution", {Dims{2, 4, 9, 8}, Dims{6, 2, 3, 3}, Dims{6}},
          make_attrs(
              {{"group", int64_t{2}}, {"strides", Ints{2, 1}}, {"dilations", Ints{2, 1}}, {"pads", Ints{1, 0, 2, 1}}})),
      (Dims{2, 6, 4, 7}));  // H: (9+3-5)/2+1 = 4, W: (8+1-3)/1+1 = 7
  EXPECT_EQ(infer_dims("Convolution", {Dims{2, 3, 13}, Dims{4, 3, 3}}, make_attrs({{"strides", Ints{2}}})),
            (Dims{2, 4, 6}));
  EXPECT_EQ(infer_dims("Convolution", {Dims{1, 2, 4, 5, 6}, Dims{8, 1, 2, 3, 3}},
                       make_attrs({{"group", int64_t{2}}, {"pads", Ints{0, 1, 1, 0, 1, 1}}})),
            (Dims{1, 8, 3, 5, 6}));
  // Residual (output-shaped) with an omitted bias.
  EXPECT_EQ(infer_dims("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}, std::nullopt, Dims{1, 4, 3, 3}}, {}),
            (Dims{1, 4, 3, 3}));
}

TEST(OpsConvInfer, OutputTypeIsInputType) {
  OneLayer one("Convolution", {Dims{1, 2, 4, 4}, Dims{2, 2, 1, 1}}, {}, DataType::kFloat16);
  EXPECT_EQ(one.infer().first, DataType::kFloat16);
  OneLayer pool("Pooling", {Dims{1, 2, 4, 4}}, make_attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}}),
                DataType::kFloat16);
  EXPECT_EQ(pool.infer().first, DataType::kFloat16);
}

TEST(OpsConvInfer, ConvolutionErrors) {
  expect_infer_error("Convolution", {Dims{1, 4, 5, 5}, Dims{4, 3, 3, 3}}, {}, "channels");
  expect_infer_error("Convolution", {Dims{1, 4, 5, 5}, Dims{4, 1, 3, 3}}, make_attrs({{"group", int64_t{2}}}), "group");
  expect_infer_error("Convolution", {Dims{1, 4, 5, 5}, Dims{3, 2, 3, 3}}, make_attrs({{"group", int64_t{2}}}),
                     "divisible");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3}}, {}, "rank");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}}, make_attrs({{"strides", Ints{1, 1, 1}}}),
                     "strides");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}}, make_attrs({{"pads", Ints{1, 1}}}), "pads");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}}, make_attrs({{"dilations", Ints{1}}}),
                     "dilations");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}}, make_attrs({{"strides", Ints{0, 1}}}),
                     "strides");
  expect_infer_error("Convolution", {Dims{1, 3, 2, 5}, Dims{4, 3, 3, 3}}, {}, "non-positive");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 2, 2}}, make_attrs({{"dilations", Ints{5, 1}}}),
                     "non-positive");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}, Dims{3}}, {}, "bias");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}, Dims{4}, Dims{1, 4, 5, 5}}, {}, "residual");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5, 5, 5}, Dims{4, 3, 3, 3, 3, 3}}, {}, "rank");
  expect_infer_error("Convolution", {Dims{1, 3, 5, 5}, Dims{4, 3, 3, 3}},
                     make_attrs({{"activation", std::string("not_an_activation")}}), "activation");
}

TEST(OpsConvInfer, DeconvolutionSizes) {
  // out = (in-1)*s - pb - pe + d*(k-1) + op + 1
  EXPECT_EQ(
      infer_dims("Deconvolution", {Dims{2, 3, 4, 5}, Dims{3, 2, 3, 3}},
                 make_attrs({{"strides", Ints{2, 2}}, {"output_padding", Ints{1, 0}}, {"pads", Ints{1, 0, 0, 1}}})),
      (Dims{2, 2, 9, 10}));  // H: 6-1+2+1+1 = 9, W: 8-1+2+0+1 = 10
  EXPECT_EQ(infer_dims("Deconvolution", {Dims{1, 4, 4, 4}, Dims{4, 3, 3, 2}, Dims{6}},
                       make_attrs({{"group", int64_t{2}}, {"dilations", Ints{2, 1}}})),
            (Dims{1, 6, 8, 5}));
  EXPECT_EQ(infer_dims("Deconvolution", {Dims{1, 2, 6}, Dims{2, 3, 4}}, make_attrs({{"strides", Ints{3}}})),
            (Dims{1, 3, 19}));
  expect_infer_error("Deconvolution", {Dims{1, 4, 4, 4}, Dims{3, 3, 3, 3}}, {}, "channels");
  expect_infer_error("Deconvolution", {Dims{1, 4, 4, 4}, Dims{4, 3, 3, 3}, Dims{4}}, {}, "bias");
  expect_infer_error("Deconvolution", {Dims{1, 2, 1, 1}, Dims{2, 3, 1, 1}}, make_attrs({{"pads", Ints{1, 0, 0, 0}}}),
                     "non-positive");
  expect_infer_error("Deconvolution", {Dims{1, 2, 3, 3}, Dims{2, 3, 1, 1}}, make_attrs({{"output_padding", Ints{1}}}),
                     "output_padding");
}

TEST(OpsConvInfer, PoolingSizes) {
  const auto pool = [](const Dims& x, Attributes a) {
    if (!a.has("mode")) a.set("mode", std::string("max"));
    return infer_dims("Pooling", {x}, a);
  };
  EXPECT_EQ(pool(Dims{1, 2, 8, 7}, make_attrs({{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}})), (Dims{1, 2, 3, 3}));
  // ceil_mode rounds up: H (8+1-3)/2 = 3 -> 4 windows; W (7+1-3)/2 = 2.5 -> 4 windows (the last starts at 6 < 7).
  EXPECT_EQ(pool(Dims{2, 3, 8, 7}, make_attrs({{"kernel", Ints{3, 3}},
                                               {"strides", Ints{2, 2}},
                                               {"pads", Ints{1, 0, 0, 1}},
                                               {"ceil_mode", int64_t{1}}})),
            (Dims{2, 3, 4, 4}));
  // ceil_mode would give ceil((5+2-2)/2)+1 = 4 windows, but the 4th starts at 6-1 = 5 >= 5, inside the
  // right padding only: dropped.
  EXPECT_EQ(pool(Dims{1, 2, 5, 5}, make_attrs({{"kernel", Ints{2, 2}},
                                               {"strides", Ints{2, 2}},
                                               {"pads", Ints{1, 1, 1, 1}},
                                               {"ceil_mode", int64_t{1}}})),
            (Dims{1, 2, 3, 3}));
  EXPECT_EQ(pool(Dims{1, 2, 9, 9}, make_attrs({{"kernel", Ints{3, 2}}, {"dilations", Ints{2, 2}}})),
            (Dims{1, 2, 5, 7}));
  EXPECT_EQ(pool(Dims{2, 3, 11}, make_attrs({{"kernel", Ints{3}}, {"strides", Ints{2}}})), (Dims{2, 3, 5}));
  EXPECT_EQ(pool(Dims{2, 3, 5, 6}, make_attrs({{"global", int64_t{1}}, {"mode", std::string("average")}})),
            (Dims{2, 3, 1, 1}));
  EXPECT_EQ(pool(Dims{1, 2, 3, 4, 2}, make_attrs({{"global", int64_t{1}}})), (Dims{1, 2, 1, 1, 1}));

  expect_infer_error("Pooling", {Dims{1, 2, 5, 5}}, make_attrs({{"mode", std::string("max")}}), "kernel");
  expect_infer_error("Pooling", {Dims{1, 2, 5, 5}}, make_attrs({{"mode", std::string("min")}, {"kernel", Ints{2, 2}}}),
                     "mode");
  expect_infer_error("Pooling", {Dims{1, 2, 5, 5}},
                     make_attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"strides", Ints{2}}}),
                     "strides");
  expect_infer_error("Pooling", {Dims{1, 2, 2, 5}}, make_attrs({{"mode", std::string("max")}, {"kernel", Ints{3, 3}}}),
                     "non-positive");
  expect_infer_error("Pooling", {Dims{2, 5}}, make_attrs({{"mode", std::string("max")}, {"global", int64_t{1}}}),
                     "rank");
}

// ---- hand-computed kernel cases -----------------------------------------------------------

// auto_pad is resolved by conv_geometry / pool_geometry (src/ir), which shape inference and the
// kernels share: a layer with auto_pad infers the same dims and computes the same values as one
// with the explicit pads that auto_pad stands for.
TEST(OpsConvKernel, AutoPadMatchesExplicitPads) {
  const Array x = iota({1, 2, 7, 8}, -20.0f);
  const Array w = iota({3, 2, 3, 3}, -9.0f);
  const Array b = iota({3}, 0.25f);
  // SAME_UPPER, strides 2: H 7 -> 4 (pads 1/1), W 8 -> 4 (pads 0/1).
  EXPECT_EQ(infer_dims("Convolution", {Dims{1, 2, 7, 8}, Dims{3, 2, 3, 3}},
                       make_attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}})),
            (Dims{1, 3, 4, 4}));
  expect_near(
      run_reference("Convolution", {x, w, b},
                    make_attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}})),
      run_reference("Convolution", {x, w, b}, make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 1}}})), 0.0f,
      0.0f, "conv SAME_UPPER");
  expect_near(
      run_reference("Convolution", {x, w, b},
                    make_attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}})),
      run_reference("Convolution", {x, w, b}, make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 0}}})), 0.0f,
      0.0f, "conv SAME_LOWER");
  expect_near(run_reference("Convolution", {x, w, b},
                            make_attrs({{"pads", Ints{5, 5, 5, 5}}, {"auto_pad", std::string("VALID")}})),
              run_reference("Convolution", {x, w, b}, {}), 0.0f, 0.0f, "conv VALID ignores pads");
  // Deconvolution SAME: out = in * stride (W: 8 * 2 = 16; total pad 3 - 2 = 1, at the end for UPPER).
  const Array wt = iota({2, 3, 3, 3}, -4.0f);
  expect_near(
      run_reference("Deconvolution", {x, wt},
                    make_attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}})),
      run_reference("Deconvolution", {x, wt}, make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{0, 0, 1, 1}}})), 0.0f,
      0.0f, "deconv SAME_UPPER");
  // Pooling SAME_LOWER, kernel 2, strides 2: H 7 -> 4 (total 1, at the beginning), W 8 -> 4 (none).
  const Array px = iota({1, 2, 7, 8}, -20.0f);
  for (const char* mode : {"max", "average"}) {
    expect_near(run_reference("Pooling", {px},
                              make_attrs({{"mode", std::string(mode)},
                                          {"kernel", Ints{2, 2}},
                                          {"strides", Ints{2, 2}},
                                          {"auto_pad", std::string("SAME_LOWER")}})),
                run_reference("Pooling", {px},
                              make_attrs({{"mode", std::string(mode)},
                                          {"kernel", Ints{2, 2}},
                                          {"strides", Ints{2, 2}},
                                          {"pads", Ints{1, 0, 0, 0}}})),
                0.0f, 0.0f, std::string("pool SAME_LOWER ") + mode);
  }
}

TEST(OpsConvKernel, ConvolutionHand) {
  // x = [[1 2 3] [4 5 6] [7 8 9]], 2x2 ones kernel, bias 0.5: window sums + 0.5.
  Array y = run_reference("Convolution", {iota({1, 1, 3, 3}), filled({1, 1, 2, 2}, 1.0f), filled({1}, 0.5f)}, {});
  expect_near(y, {Dims{1, 1, 2, 2}, {12.5f, 16.5f, 24.5f, 28.5f}}, 0, 0, "2x2 ones");

  // 3x3 ones on a 3x3 ones input with pads 1: the count of in-bounds taps.
  y = run_reference("Convolution", {filled({1, 1, 3, 3}, 1.0f), filled({1, 1, 3, 3}, 1.0f)},
                    make_attrs({{"pads", Ints{1, 1, 1, 1}}}));
  expect_near(y, {Dims{1, 1, 3, 3}, {4, 6, 4, 6, 9, 6, 4, 6, 4}}, 0, 0, "padded ones");

  // Asymmetric pads (top 1, left 0, bottom 0, right 2), kernel [[1 0] [0 -1]], stride 2 on iota(3x4):
  // padded rows -1..2, cols 0..5; y[i][j] = x[2i-1][2j] - x[2i][2j+1].
  y = run_reference("Convolution", {iota({1, 1, 3, 4}), Array{Dims{1, 1, 2, 2}, {1, 0, 0, -1}}},
                    make_attrs({{"pads", Ints{1, 0, 0, 2}}, {"strides", Ints{2, 2}}}));
  // rows i=0: x[-1]=pad, x[0]; i=1: x[1], x[2]. cols j=0: 0,1; j=1: 2,3; j=2: 4(pad),5(pad).
  expect_near(y, {Dims{1, 1, 2, 3}, {-2, -4, 0, 5 - 10, 7 - 12, 0}}, 0, 0, "asymmetric pads");

  // Depthwise (group 2): each channel scaled by its own 1x1 weight; batch 2.
  Array x = iota({2, 2, 1, 2});  // n0: c0 [1 2], c1 [3 4]; n1: c0 [5 6], c1 [7 8]
  y = run_reference("Convolution", {x, Array{Dims{2, 1, 1, 1}, {2, -3}}, Array{Dims{2}, {1, 0}}},
                    make_attrs({{"group", int64_t{2}}}));
  expect_near(y, {Dims{2, 2, 1, 2}, {3, 5, -9, -12, 11, 13, -21, -24}}, 0, 0, "depthwise");

  // 1-D, dilation 2: y[i] = x[i] + x[i+2] (kernel [1 1]).
  y = run_reference("Convolution", {iota({1, 1, 5}), filled({1, 1, 2}, 1.0f)}, make_attrs({{"dilations", Ints{2}}}));
  expect_near(y, {Dims{1, 1, 3}, {4, 6, 8}}, 0, 0, "1-D dilation");

  // 3-D: a 2x2x2 ones kernel over iota(2x2x2) sums everything: 36.
  y = run_reference("Convolution", {iota({1, 1, 2, 2, 2}), filled({1, 1, 2, 2, 2}, 1.0f)}, {});
  expect_near(y, {Dims{1, 1, 1, 1, 1}, {36}}, 0, 0, "3-D");
}

TEST(OpsConvKernel, ConvolutionResidualAndPostOp) {
  // y = relu(-x + b + r) with a 1x1 kernel of -1.
  Array x{Dims{1, 1, 2, 2}, {1, 2, 3, 4}};
  Array r{Dims{1, 1, 2, 2}, {0, 5, 1, 10}};
  Attributes relu = make_attrs({{"activation", std::string("relu")}});
  Array y = run_reference("Convolution", {x, filled({1, 1, 1, 1}, -1.0f), filled({1}, 0.5f), r}, relu);
  expect_near(y, {Dims{1, 1, 2, 2}, {0, 3.5f, 0, 6.5f}}, 0, 0, "residual + relu");
  // Residual without bias.
  y = run_reference("Convolution", {x, filled({1, 1, 1, 1}, -1.0f), none(), r}, {});
  expect_near(y, {Dims{1, 1, 2, 2}, {-1, 3, -2, 6}}, 0, 0, "residual, no bias");
  // Clip post-op with alpha/beta as min/max.
  y = run_reference(
      "Convolution", {x, filled({1, 1, 1, 1}, 1.0f)},
      make_attrs({{"activation", std::string("clip")}, {"activation_alpha", 1.5}, {"activation_beta", 3.0}}));
  expect_near(y, {Dims{1, 1, 2, 2}, {1.5f, 2, 3, 3}}, 0, 0, "clip");
}

TEST(OpsConvKernel, DeconvolutionHand) {
  // Stride 1, 2x2 ones: each input spreads over a 2x2 block; overlaps add.
  Array x{Dims{1, 1, 2, 2}, {1, 2, 3, 4}};
  Array y = run_reference("Deconvolution", {x, filled({1, 1, 2, 2}, 1.0f)}, {});
  expect_near(y, {Dims{1, 1, 3, 3}, {1, 3, 2, 4, 10, 6, 3, 7, 4}}, 0, 0, "stride 1");
  // Stride 2, output_padding 1 (one extra row/col of bias only), bias 0.25.
  y = run_reference("Deconvolution", {x, filled({1, 1, 2, 2}, 1.0f), filled({1}, 0.25f)},
                    make_attrs({{"strides", Ints{2, 2}}, {"output_padding", Ints{1, 1}}}));
  Array want{Dims{1, 1, 5, 5}, std::vector<float>(25, 0.25f)};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j)
      want.values[static_cast<size_t>(i * 5 + j)] += x.values[static_cast<size_t>((i / 2) * 2 + j / 2)];
  }
  expect_near(y, want, 0, 0, "stride 2 + output_padding");
  // Pads crop the full output: pads 1 on every side of the stride-1 result above keeps its centre.
  y = run_reference("Deconvolution", {x, filled({1, 1, 2, 2}, 1.0f)}, make_attrs({{"pads", Ints{1, 1, 1, 1}}}));
  expect_near(y, {Dims{1, 1, 1, 1}, {10}}, 0, 0, "pads");
  // Groups: 2 input channels, group 2, w [2, 1, 1, 1] = [2, 3]: channel c scaled by w[c]; relu post-op.
  y = run_reference("Deconvolution", {Array{Dims{1, 2, 1, 2}, {1, -2, -3, 4}}, Array{Dims{2, 1, 1, 1}, {2, 3}}},
                    make_attrs({{"group", int64_t{2}}, {"activation", std::string("relu")}}));
  expect_near(y, {Dims{1, 2, 1, 2}, {2, 0, 0, 12}}, 0, 0, "groups + relu");
  // 1-D with dilation 2: w [1 1] puts x[i] at i and i+2.
  y = run_reference("Deconvolution", {Array{Dims{1, 1, 3}, {1, 2, 3}}, filled({1, 1, 2}, 1.0f)},
                    make_attrs({{"dilations", Ints{2}}}));
  expect_near(y, {Dims{1, 1, 5}, {1, 2, 4, 2, 3}}, 0, 0, "1-D dilation");
}

TEST(OpsConvKernel, PoolingHand) {
  const Array x = iota({1, 1, 4, 4}, 0.0f);  // 0..15
  Array y = run_reference("Pooling", {x},
                          make_attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  expect_near(y, {Dims{1, 1, 2, 2}, {5, 7, 13, 15}}, 0, 0, "max 2x2/2");
  y = run_reference("Pooling", {x},
                    make_attrs({{"mode", std::string("average")}, {"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  expect_near(y, {Dims{1, 1, 2, 2}, {2.5f, 4.5f, 10.5f, 12.5f}}, 0, 0, "avg 2x2/2");

  // Negative values with padding: padding must not win a max.
  y = run_reference("Pooling", {filled({1, 1, 2, 2}, -3.0f)},
                    make_attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  expect_near(y, {Dims{1, 1, 3, 3}, std::vector<float>(9, -3.0f)}, 0, 0, "max ignores pads");

  // 3x3 average with pads 1 over ones: exclude pad -> 1 everywhere; include pad -> in-bounds/9.
  const Attributes avg =
      make_attrs({{"mode", std::string("average")}, {"kernel", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}});
  y = run_reference("Pooling", {filled({1, 1, 3, 3}, 1.0f)}, avg);
  expect_near(y, {Dims{1, 1, 3, 3}, std::vector<float>(9, 1.0f)}, 1e-6f, 0, "avg exclude pad");
  Attributes avg_incl = avg;
  avg_incl.set("count_include_pad", int64_t{1});
  y = run_reference("Pooling", {filled({1, 1, 3, 3}, 1.0f)}, avg_incl);
  expect_near(y, {Dims{1, 1, 3, 3}, {4 / 9.f, 6 / 9.f, 4 / 9.f, 6 / 9.f, 1, 6 / 9.f, 4 / 9.f, 6 / 9.f, 4 / 9.f}}, 1e-6f,
              0, "avg include pad");

  // 1-D, ceil_mode, include pad: x = [1 2 3 4 5], k 2, s 2, pads [0, 0]: ceil gives 3 windows, the
  // last [4, 5) hangs past the end with no end padding, so it is clipped to 1 tap: 5/1.
  y = run_reference("Pooling", {iota({1, 1, 5})},
                    make_attrs({{"mode", std::string("average")},
                                {"kernel", Ints{2}},
                                {"strides", Ints{2}},
                                {"ceil_mode", int64_t{1}},
                                {"count_include_pad", int64_t{1}}}));
  expect_near(y, {Dims{1, 1, 3}, {1.5f, 3.5f, 5.0f}}, 1e-6f, 0, "ceil clip");

  // Global average / max over 2x3, batch 2 x 2 channels.
  const Array g = iota({2, 2, 2, 3});
  y = run_reference("Pooling", {g}, make_attrs({{"mode", std::string("average")}, {"global", int64_t{1}}}));
  expect_near(y, {Dims{2, 2, 1, 1}, {3.5f, 9.5f, 15.5f, 21.5f}}, 1e-6f, 0, "global avg");
  y = run_reference("Pooling", {g}, make_attrs({{"mode", std::string("max")}, {"global", int64_t{1}}}));
  expect_near(y, {Dims{2, 2, 1, 1}, {6, 12, 18, 24}}, 0, 0, "global max");
}

// ---- other element types and threading ------------------------------------------------------

// Deterministic pseudo-random values in [-1, 1).
Array random_array(const Dims& dims, uint32_t seed) {
  Array a{dims, std::vector<float>(static_cast<size_t>(dims.volume()))};
  for (float& v : a.values) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return a;
}

// Rounds every value to float16.
Array to_half_values(Array a) {
  for (float& v : a.values) v = static_cast<float>(half(v));
  return a;
}

TEST(OpsConvKernel, Float16MatchesFloat32) {
  const Array x = to_half_values(random_array({2, 4, 7, 6}, 1));
  const Array w = to_half_values(random_array({6, 2, 3, 3}, 2));
  const Array b = to_half_values(random_array({6}, 3));
  const Attributes conv = make_attrs({{"group", int64_t{2}}, {"pads", Ints{1, 0, 1, 2}}, {"strides", Ints{1, 2}}});
  const Array want = run_reference("Convolution", {x, w, b}, conv);
  const Array got = run_reference_typed<half>("Convolution", {x, w, b}, conv, DataType::kFloat16, 1);
  expect_near(got, want, 1e-3f, 1e-3f, "conv fp16");

  for (const char* mode : {"max", "average"}) {
    const Attributes pool = make_attrs({{"mode", std::string(mode)},
                                        {"kernel", Ints{3, 2}},
                                        {"strides", Ints{2, 1}},
                                        {"pads", Ints{1, 1, 1, 0}},
                                        {"ceil_mode", int64_t{1}}});
    const Array p_want = run_reference("Pooling", {x}, pool);
    const Array p_got = run_reference_typed<half>("Pooling", {x}, pool, DataType::kFloat16, 1);
    // Max selects an exact input; the average rounds once to float16.
    expect_near(p_got, p_want, std::string(mode) == "max" ? 0.0f : 1e-3f, std::string(mode) == "max" ? 0.0f : 1e-4f,
                std::string("pool fp16 ") + mode);
  }
}

// NCHW <-> NHWC-style reordering of a [N, C, spatial...] array's values (dims unchanged).
Array reorder(const Array& a, bool to_channels_last) {
  const int64_t n = a.dims[0], c = a.dims[1], v = a.dims.volume() / (n * c);
  Array r{a.dims, std::vector<float>(a.values.size())};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      for (int64_t s = 0; s < v; ++s) {
        const auto linear = static_cast<size_t>((i * c + j) * v + s), last = static_cast<size_t>((i * v + s) * c + j);
        if (to_channels_last)
          r.values[last] = a.values[linear];
        else
          r.values[linear] = a.values[last];
      }
    }
  }
  return r;
}

TEST(OpsConvKernel, ChannelsLastMatchesLinear) {
  const Array x = random_array({2, 4, 5, 6}, 11), w = random_array({6, 2, 3, 2}, 12), b = random_array({6}, 13);
  const Attributes conv = make_attrs({{"group", int64_t{2}},
                                      {"pads", Ints{1, 0, 0, 1}},
                                      {"strides", Ints{2, 1}},
                                      {"activation", std::string("relu")}});
  const Array want = run_reference("Convolution", {x, w, b}, conv);
  const Array r = random_array(want.dims, 14);
  const Array want_r = run_reference("Convolution", {x, w, b, r}, conv);
  const Array got = run_reference_typed<float>("Convolution", {reorder(x, true), w, b}, conv, DataType::kFloat32, 1,
                                               TensorFormat::kChannelsLast);
  expect_near(reorder(got, false), want, 0, 0, "conv channels-last");
  const Array got_r = run_reference_typed<float>("Convolution", {reorder(x, true), w, b, reorder(r, true)}, conv,
                                                 DataType::kFloat32, 1, TensorFormat::kChannelsLast);
  expect_near(reorder(got_r, false), want_r, 0, 0, "conv + residual channels-last");

  const Array dw = random_array({4, 3, 2, 3}, 15);
  const Attributes deconv =
      make_attrs({{"group", int64_t{2}}, {"strides", Ints{2, 2}}, {"output_padding", Ints{1, 0}}});
  const Array want_d = run_reference("Deconvolution", {x, dw}, deconv);
  const Array got_d = run_reference_typed<float>("Deconvolution", {reorder(x, true), dw}, deconv, DataType::kFloat32, 1,
                                                 TensorFormat::kChannelsLast);
  expect_near(reorder(got_d, false), want_d, 0, 0, "deconv channels-last");

  const Array x3 = random_array({2, 3, 4, 5, 3}, 16);
  for (const char* mode : {"max", "average"}) {
    const Attributes pool = make_attrs({{"mode", std::string(mode)},
                                        {"kernel", Ints{2, 3, 2}},
                                        {"pads", Ints{1, 1, 0, 0, 1, 1}},
                                        {"count_include_pad", int64_t{1}}});
    const Array want_p = run_reference("Pooling", {x3}, pool);
    const Array got_p = run_reference_typed<float>("Pooling", {reorder(x3, true)}, pool, DataType::kFloat32, 1,
                                                   TensorFormat::kChannelsLast);
    expect_near(reorder(got_p, false), want_p, 0, 0, std::string("pool channels-last ") + mode);
  }
}

TEST(OpsConvKernel, MaxPoolInt8) {
  Array x{Dims{1, 1, 2, 3}, {-128, 5, -7, 127, -1, 0}};
  const Attributes pool = make_attrs({{"mode", std::string("max")}, {"kernel", Ints{1, 2}}});
  const Array got = run_reference_typed<int8_t>("Pooling", {x}, pool, DataType::kInt8, 1);
  expect_near(got, {Dims{1, 1, 2, 2}, {5, 5, 127, 0}}, 0, 0, "int8 max");
}

TEST(OpsConvKernel, ThreadCountDoesNotChangeResults) {
  const Array x = random_array({3, 4, 9, 7}, 7);
  const Array w = random_array({4, 4, 3, 3}, 8);
  const Array dw = random_array({4, 4, 3, 3}, 9);
  const Attributes conv = make_attrs({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 1}}});
  EXPECT_EQ(run_reference("Convolution", {x, w}, conv, 1).values, run_reference("Convolution", {x, w}, conv, 4).values);
  EXPECT_EQ(run_reference("Deconvolution", {x, dw}, conv, 1).values,
            run_reference("Deconvolution", {x, dw}, conv, 3).values);
  const Attributes pool = make_attrs({{"mode", std::string("average")}, {"kernel", Ints{2, 2}}});
  EXPECT_EQ(run_reference("Pooling", {x}, pool, 1).values, run_reference("Pooling", {x}, pool, 2).values);
}

}  // namespace
}  // namespace kiln
