// Tests of channels-last (NHWC) execution on the CPU. The layout pass makes float32
// convolution regions channels-last on the CPU too (oneDNN's NHWC convolutions need no reorders
// around them), so the CPU kernels that join such regions run channels-last tensors:
//   * Reformat "fast" (tiled transpose) and "onednn" (float32) against index math written out
//     (test::convert_format, tests/op_harness_util.cpp), every element width, ranks 3-5, odd sizes, 1 and 2 threads;
//   * Concatenation "fast" on channels-last inputs against the linear concatenation, and
//     Pooling "fast" (2-D max) on channels-last tensors against the reference;
//   * the supports() of the element-wise kernels decline operands whose format differs from the
//     output's, and the Scale/Concatenation kernels decline what they cannot index;
//   * the pass on small CPU networks (conv/relu/pool/concat/add): channels-last inside, Reformat
//     layers only at the edges, outputs linear, and the engine's outputs equal those of the same
//     network built with the layout pass disabled, also where a layer broadcasts at another
//     point of a dynamic profile; a network without float32 convolutions stays linear; a stem
//     convolution reads the network's NCHW input itself (no Reformat before it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "kiln/kiln.h"
#include "src/backends/kernel.h"
#include "src/builder/passes/passes.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

HostTensor random_bytes(DataType type, const Dims& dims, uint32_t seed) {
  HostTensor t(type, dims);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.dims() == b.dims() && a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Runs a function-style CPU kernel (no prepare state, no workspace) on host tensors.
void run_kernel(const std::string& type, const std::string& tactic, const Layer& layer,
                const std::vector<std::pair<const HostTensor*, TensorFormat>>& ins, HostTensor* out,
                TensorFormat out_format, int threads) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, type, tactic);
  ASSERT_NE(e, nullptr) << type << " " << tactic;
  auto kernel = e->create(layer);
  KernelContext ctx;
  ctx.layer = &layer;
  ctx.num_threads = threads;
  std::vector<TensorDesc> descs;
  for (const auto& [t, f] : ins) {
    ctx.inputs.push_back(TensorView{t->type(), t->dims(), f, const_cast<void*>(t->data())});
    descs.push_back(TensorDesc{t->type(), t->dims(), f, true, nullptr});
  }
  ctx.outputs.push_back(TensorView{out->type(), out->dims(), out_format, out->data()});
  kernel->prepare(layer, descs, {TensorDesc{out->type(), out->dims(), out_format, true, nullptr}}, threads);
  ASSERT_EQ(kernel->workspace_size(), 0u);
  kernel->execute(ctx);
}

TEST(CpuChannelsLast, ReformatFastMatchesIndexMath) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 1, 1});
  const Layer* layer = net.add_layer(kLayerReformat, {x}, 1, {}, "r");
  const std::vector<Dims> shapes = {{1, 3, 224, 224}, {2, 13, 17, 19}, {1, 64, 7, 7}, {3, 5, 11},
                                    {1, 17, 3, 5, 7}, {2, 1, 4, 4},    {2, 8, 1, 1},  {1, 33, 1, 1, 1}};
  uint32_t seed = 1;
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kInt64}) {
    for (const Dims& dims : shapes) {
      for (int threads : {1, 2}) {
        const HostTensor lin = random_bytes(type, dims, seed++);
        const HostTensor last = test::convert_format(lin, true);
        // "onednn" (float32 only) exists where kiln was built with oneDNN.
        std::vector<std::string> tactics = {"fast"};
        if (type == DataType::kFloat32 && KernelRegistry::instance().find(DeviceType::kCPU, kLayerReformat, "onednn")) {
          tactics.push_back("onednn");
        }
        for (const std::string& tactic : tactics) {
          HostTensor got(type, dims);
          run_kernel(kLayerReformat, tactic, *layer, {{&lin, TensorFormat::kLinear}}, &got, TensorFormat::kChannelsLast,
                     threads);
          EXPECT_TRUE(same_bytes(got, last))
              << tactic << " to channels-last " << dims.to_string() << " " << to_string(type);
          HostTensor back(type, dims);
          run_kernel(kLayerReformat, tactic, *layer, {{&last, TensorFormat::kChannelsLast}}, &back,
                     TensorFormat::kLinear, threads);
          EXPECT_TRUE(same_bytes(back, lin)) << tactic << " to linear " << dims.to_string() << " " << to_string(type);
        }
        // The reference agrees too (it is the oracle of the CUDA reformat as well).
        HostTensor ref(type, dims);
        run_kernel(kLayerReformat, "reference", *layer, {{&lin, TensorFormat::kLinear}}, &ref,
                   TensorFormat::kChannelsLast, threads);
        EXPECT_TRUE(same_bytes(ref, last)) << "reference " << dims.to_string();
      }
    }
  }
}

TEST(CpuChannelsLast, ConcatFastChannelsLastMatchesLinear) {
  // Concatenate along every axis of a 4-D and a 5-D tensor; channels-last inputs and output.
  struct Case {
    std::vector<Dims> parts;
    int64_t axis;
  };
  const std::vector<Case> cases = {
      {{{2, 3, 5, 7}, {2, 4, 5, 7}, {2, 1, 5, 7}}, 1},
      {{{2, 3, 5, 7}, {2, 3, 5, 7}}, -3},
      {{{2, 3, 5, 7}, {2, 3, 2, 7}}, 2},
      {{{2, 3, 5, 7}, {2, 3, 5, 1}}, 3},
      {{{1, 3, 5, 7}, {2, 3, 5, 7}}, 0},
      {{{1, 16, 55, 55}, {1, 48, 55, 55}}, 1},
      {{{1, 2, 3, 4, 5}, {1, 3, 3, 4, 5}}, 1},
      {{{1, 2, 3, 4, 5}, {1, 2, 3, 6, 5}}, 3},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    Network net;
    std::vector<Tensor*> ins;
    std::vector<HostTensor> lin, last;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      ins.push_back(net.add_input("x" + std::to_string(i), DataType::kFloat32, c.parts[i]));
      lin.push_back(test::random_tensor(DataType::kFloat32, c.parts[i], seed++));
      last.push_back(test::convert_format(lin.back(), true));
    }
    Layer* layer = net.add_concatenation(ins, c.axis);
    Dims out_dims = c.parts[0];
    const int axis = static_cast<int>(c.axis < 0 ? c.axis + out_dims.rank() : c.axis);
    out_dims[axis] = 0;
    for (const Dims& d : c.parts) out_dims[axis] += d[axis];

    std::vector<std::pair<const HostTensor*, TensorFormat>> lin_in, last_in;
    for (size_t i = 0; i < lin.size(); ++i) {
      lin_in.push_back({&lin[i], TensorFormat::kLinear});
      last_in.push_back({&last[i], TensorFormat::kChannelsLast});
    }
    HostTensor want(DataType::kFloat32, out_dims), got(DataType::kFloat32, out_dims);
    run_kernel(kLayerConcatenation, "reference", *layer, lin_in, &want, TensorFormat::kLinear, 2);
    layer->output(0)->set_format(TensorFormat::kChannelsLast);
    run_kernel(kLayerConcatenation, "fast", *layer, last_in, &got, TensorFormat::kChannelsLast, 2);
    EXPECT_TRUE(same_bytes(test::convert_format(got, false), want)) << "axis " << c.axis << " " << out_dims.to_string();
  }
}

TEST(CpuChannelsLast, GlobalAveragePoolFastMatchesReference) {
  // MobileNetV3's squeeze-excitation pools (96 channels of 14x14: one block of 64 and a partial
  // one) and its classifier's (576 of 7x7), odd sizes, a batch, 3-D and 1-D spatial extents; both
  // formats, 1 and 2 threads. Sums in another order: compared to a relative 1e-5.
  const std::vector<Dims> shapes = {{1, 96, 14, 14}, {1, 576, 7, 7},  {3, 13, 5, 9},
                                    {2, 130, 1, 1},  {2, 7, 3, 4, 5}, {4, 70, 33}};
  uint32_t seed = 500;
  for (const Dims& xd : shapes) {
    for (bool last : {true, false}) {
      for (int threads : {1, 2}) {
        if (last && xd.rank() < 3) continue;
        SCOPED_TRACE(xd.to_string() + (last ? " channels-last" : " linear") + " threads " + std::to_string(threads));
        Network net;
        Tensor* x = net.add_input("x", DataType::kFloat32, xd);
        PoolingDesc d;
        d.type = PoolingType::kAverage;
        d.global = true;
        Layer* pool = net.add_pooling(x, d);
        Dims yd = xd;
        for (int i = 2; i < yd.rank(); ++i) yd[i] = 1;
        const HostTensor lin = test::random_tensor(DataType::kFloat32, xd, seed++);
        const TensorFormat f = last ? TensorFormat::kChannelsLast : TensorFormat::kLinear;
        const HostTensor in = last ? test::convert_format(lin, true) : lin;
        HostTensor want(DataType::kFloat32, yd), got(DataType::kFloat32, yd);
        pool->output(0)->set_format(f);
        run_kernel(kLayerPooling, "reference", *pool, {{&in, f}}, &want, f, threads);
        run_kernel(kLayerPooling, "fast", *pool, {{&in, f}}, &got, f, threads);
        for (int64_t i = 0; i < want.count(); ++i) {
          const float w = want.as<float>()[i], g = got.as<float>()[i];
          ASSERT_NEAR(g, w, 1e-5f * std::max(1.0f, std::fabs(w))) << "element " << i;
        }
      }
    }
  }
}

TEST(CpuChannelsLast, MaxPoolFastChannelsLastMatchesReference) {
  // 3x3/2 ceil mode (SqueezeNet), 5x5/1 pad 2 (YOLO's SPPF), 2x2/2 with a begin pad; a NaN.
  // Channels a multiple of 8 take the register-blocked AVX2 loop (blocks of 32, then of 8: 40 is
  // one of each, 256 eight of 32); the others the vectorized loop.
  struct Case {
    Dims x;
    int64_t k, s, pad;
    bool ceil;
  };
  const std::vector<Case> cases = {{{1, 64, 111, 111}, 3, 2, 0, true}, {{2, 13, 11, 9}, 5, 1, 2, false},
                                   {{1, 17, 7, 8}, 2, 2, 1, false},    {{1, 3, 12, 12}, 3, 2, 0, true},
                                   {{1, 40, 9, 10}, 3, 2, 1, false},   {{2, 256, 13, 13}, 3, 2, 0, true},
                                   {{1, 8, 6, 6}, 5, 1, 2, false}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, c.x);
    PoolingDesc d;
    d.kernel = {c.k, c.k};
    d.strides = {c.s, c.s};
    d.pads_begin = {c.pad, c.pad};
    d.pads_end = {c.pad, c.pad};
    d.ceil_mode = c.ceil;
    Layer* pool = net.add_pooling(x, d);
    Dims y_dims = c.x;
    for (int i = 2; i < 4; ++i) {
      const int64_t span = c.x[i] + 2 * c.pad - c.k;
      y_dims[i] = (c.ceil ? (span + c.s - 1) / c.s : span / c.s) + 1;
    }
    HostTensor lin = test::random_tensor(DataType::kFloat32, c.x, seed++);
    lin.as<float>()[lin.count() / 3] = std::numeric_limits<float>::quiet_NaN();
    const HostTensor last = test::convert_format(lin, true);
    HostTensor want(DataType::kFloat32, y_dims), got(DataType::kFloat32, y_dims);
    pool->output(0)->set_format(TensorFormat::kChannelsLast);
    run_kernel(kLayerPooling, "reference", *pool, {{&last, TensorFormat::kChannelsLast}}, &want,
               TensorFormat::kChannelsLast, 2);
    run_kernel(kLayerPooling, "fast", *pool, {{&last, TensorFormat::kChannelsLast}}, &got, TensorFormat::kChannelsLast,
               2);
    int nans = 0;
    for (int64_t i = 0; i < want.count(); ++i) nans += std::isnan(want.as<float>()[i]);
    EXPECT_GT(nans, 0) << "the NaN reaches some window";
    EXPECT_TRUE(same_bytes(got, want)) << c.x.to_string() << " k" << c.k << " s" << c.s;
  }
}

TEST(CpuChannelsLast, ResizeNearestFastChannelsLastMatchesReference) {
  // 2x (YOLO's upsampling), a fractional up- and downscale, a batch and channel resize (the
  // per-channel gather), asymmetric coordinates with floor.
  struct Case {
    Dims x;
    std::vector<float> scales;
    std::string transform, rounding;
  };
  const std::vector<Case> cases = {
      {{1, 16, 7, 9}, {1, 1, 2, 2}, "asymmetric", "floor"},
      {{2, 5, 6, 7}, {1, 1, 1.5f, 0.6f}, "half_pixel", "round_prefer_floor"},
      {{1, 3, 4, 4}, {2, 2, 1, 1}, "half_pixel", "round_prefer_ceil"},
      {{2, 64, 10, 10}, {1, 1, 2, 2}, "half_pixel", "round_prefer_floor"},
  };
  uint32_t seed = 500;
  for (const Case& c : cases) {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, c.x);
    const HostTensor scales = HostTensor::from_vector(DataType::kFloat32, Dims{4}, c.scales);
    ResizeDesc d;
    d.coordinate_transformation_mode = c.transform;
    d.nearest_mode = c.rounding;
    Layer* resize = net.add_resize(x, net.add_constant(scales)->output(0), nullptr, d);
    Dims y_dims = c.x;
    for (int i = 0; i < 4; ++i) {
      y_dims[i] = static_cast<int64_t>(std::floor(static_cast<double>(c.x[i]) * c.scales[static_cast<size_t>(i)]));
    }
    const HostTensor lin = test::random_tensor(DataType::kFloat32, c.x, seed++);
    const HostTensor last = test::convert_format(lin, true);
    HostTensor want(DataType::kFloat32, y_dims), got(DataType::kFloat32, y_dims);
    run_kernel(kLayerResize, "reference", *resize, {{&lin, TensorFormat::kLinear}, {&scales, TensorFormat::kLinear}},
               &want, TensorFormat::kLinear, 2);
    const KernelEntry* fast = KernelRegistry::instance().find(DeviceType::kCPU, kLayerResize, "fast");
    ASSERT_NE(fast, nullptr);
    const std::vector<TensorDesc> descs = {
        TensorDesc{DataType::kFloat32, c.x, TensorFormat::kChannelsLast, true, nullptr},
        TensorDesc{DataType::kFloat32, Dims{4}, TensorFormat::kLinear, true, &scales}};
    EXPECT_FALSE(fast->supports(*resize, descs)) << "one format in and out";
    resize->output(0)->set_format(TensorFormat::kChannelsLast);
    EXPECT_TRUE(fast->supports(*resize, descs));
    run_kernel(kLayerResize, "fast", *resize, {{&last, TensorFormat::kChannelsLast}, {&scales, TensorFormat::kLinear}},
               &got, TensorFormat::kChannelsLast, 2);
    EXPECT_TRUE(same_bytes(test::convert_format(want, true), got)) << c.x.to_string() << " -> " << y_dims.to_string();
  }
}

// supports() of `tactic` for `layer` with input formats `fmts` and the layer's output in `out`.
bool supports_with(const std::string& tactic, Layer& layer, const std::vector<TensorFormat>& fmts, TensorFormat out) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, layer.type(), tactic);
  EXPECT_NE(e, nullptr) << layer.type() << " " << tactic;
  if (!e || !e->supports) return false;
  std::vector<TensorDesc> descs;
  for (int i = 0; i < layer.num_inputs(); ++i) {
    const Tensor* t = layer.input(i);
    descs.push_back(TensorDesc{t->type(), t->dims(), fmts[static_cast<size_t>(i)], true, nullptr});
  }
  layer.output(0)->set_format(out);
  const bool ok = e->supports(layer, descs);
  layer.output(0)->set_format(TensorFormat::kLinear);
  return ok;
}

TEST(CpuChannelsLast, KernelsDeclineFormatsTheyCannotIndex) {
  const auto lin = TensorFormat::kLinear, cl = TensorFormat::kChannelsLast;
  Network net;
  Tensor* a = net.add_input("a", DataType::kFloat32, Dims{1, 4, 5, 5});
  Tensor* b = net.add_input("b", DataType::kFloat32, Dims{1, 4, 5, 5});
  Tensor* s = net.add_input("s", DataType::kFloat32, Dims{1, 1, 1, 1});
  Tensor* bias = net.add_input("bias", DataType::kFloat32, Dims{1, 4, 1, 1});
  Layer* add = net.add_elementwise(a, b, ElementWiseOp::kSum);
  EXPECT_TRUE(supports_with("vectorized", *add, {cl, cl}, cl));
  EXPECT_TRUE(supports_with("vectorized", *add, {lin, lin}, lin));
  EXPECT_FALSE(supports_with("vectorized", *add, {cl, lin}, cl));
  EXPECT_FALSE(supports_with("vectorized", *add, {cl, cl}, lin));
  Layer* add_scalar = net.add_elementwise(a, s, ElementWiseOp::kProd);
  EXPECT_TRUE(supports_with("vectorized", *add_scalar, {cl, lin}, cl)) << "a single element has no layout";
  // A per-channel operand ([1, C, 1, 1]) reads the same memory in either format; the full-size
  // operand must still be in the output's format.
  Layer* add_bias = net.add_elementwise(a, bias, ElementWiseOp::kSum);
  EXPECT_TRUE(supports_with("vectorized", *add_bias, {cl, lin}, cl)) << "per-channel broadcast";
  EXPECT_TRUE(supports_with("vectorized", *add_bias, {cl, cl}, cl));
  EXPECT_TRUE(supports_with("vectorized", *add_bias, {lin, lin}, lin));
  EXPECT_FALSE(supports_with("vectorized", *add_bias, {lin, lin}, cl));
  EXPECT_FALSE(supports_with("vectorized", *add_bias, {cl, lin}, lin));
  Layer* scale_first = net.add_elementwise(bias, a, ElementWiseOp::kDiv);
  EXPECT_TRUE(supports_with("vectorized", *scale_first, {cl, cl}, cl)) << "per-channel operand first";
  EXPECT_FALSE(supports_with("vectorized", *scale_first, {cl, lin}, cl));
  Tensor* row = net.add_input("row", DataType::kFloat32, Dims{1, 1, 1, 5});
  Layer* add_row = net.add_elementwise(a, row, ElementWiseOp::kSum);
  EXPECT_FALSE(supports_with("vectorized", *add_row, {cl, lin}, cl)) << "a broadcast along W is not per-channel";
  EXPECT_FALSE(supports_with("vectorized", *add_row, {cl, cl}, cl));

  Layer* relu = net.add_activation(a, ActivationType::kRelu);
  EXPECT_TRUE(supports_with("vectorized", *relu, {cl}, cl));
  EXPECT_FALSE(supports_with("vectorized", *relu, {cl}, lin));

  Layer* cat = net.add_concatenation({a, b}, 1);
  EXPECT_TRUE(supports_with("fast", *cat, {cl, cl}, cl));
  EXPECT_FALSE(supports_with("fast", *cat, {cl, lin}, cl));
  EXPECT_FALSE(supports_with("fast", *cat, {cl, cl}, lin));
  EXPECT_FALSE(supports_with("reference", *cat, {cl, cl}, cl));

  Layer* scale = net.add_layer(kLayerScale, {a, bias}, 1, Attributes{}, "scale");
  scale->attrs().set("mode", std::string("channel"));
  EXPECT_TRUE(supports_with("vectorized", *scale, {lin, lin}, lin));
  EXPECT_FALSE(supports_with("vectorized", *scale, {cl, lin}, cl)) << "channel terms index linear memory";
}

HostTensor random_f32(const Dims& dims, uint32_t seed, float scale = 0.5f) {
  HostTensor t(DataType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.count(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

TEST(CpuChannelsLast, PerChannelElementWiseMatchesReferenceInBothFormats) {
  // y = op(full, per_channel) and op(per_channel, full), the per-channel operand [1 or N, C, 1, ...]
  // (squeeze-excitation's scale, a per-channel bias), against the reference kernel on linear
  // tensors: the vectorized kernel on linear and on channels-last tensors (full converted, the
  // per-channel operand as is), 1 and 2 threads, odd sizes, ranks 3-5, a size that splits into
  // several chunks per thread. One float operation per element: the results are bit-identical.
  const auto lin = TensorFormat::kLinear, cl = TensorFormat::kChannelsLast;
  struct Shapes {
    Dims full, small;
  };
  const std::vector<Shapes> shapes = {{{2, 13, 7, 9}, {1, 13, 1, 1}}, {{2, 13, 7, 9}, {2, 13, 1, 1}},
                                      {{2, 13, 5, 5}, {13, 1, 1}},    {{1, 13, 3, 4, 5}, {1, 13, 1, 1, 1}},
                                      {{3, 5, 11}, {3, 5, 1}},        {{1, 127, 57, 57}, {1, 127, 1, 1}}};
  uint32_t seed = 100;
  for (const auto& sh : shapes) {
    for (ElementWiseOp op :
         {ElementWiseOp::kSum, ElementWiseOp::kSub, ElementWiseOp::kProd, ElementWiseOp::kDiv, ElementWiseOp::kMax}) {
      for (bool small_first : {false, true}) {
        Network net;
        const HostTensor full = random_f32(sh.full, ++seed, 3.0f);
        HostTensor small = random_f32(sh.small, ++seed, 3.0f);
        for (int64_t i = 0; i < small.count(); ++i) small.as<float>()[i] += small.as<float>()[i] >= 0 ? 0.5f : -0.5f;
        Tensor* tf = net.add_input("full", DataType::kFloat32, sh.full);
        Tensor* ts = net.add_input("small", DataType::kFloat32, sh.small);
        Layer* l = small_first ? net.add_elementwise(ts, tf, op) : net.add_elementwise(tf, ts, op);
        const std::string what = sh.full.to_string() + " " + to_string(op) + " " + sh.small.to_string() +
                                 (small_first ? " (per-channel first)" : "");
        auto ins = [&](const HostTensor& f, TensorFormat ff) {
          std::vector<std::pair<const HostTensor*, TensorFormat>> v = {{&f, ff}, {&small, lin}};
          if (small_first) std::swap(v[0], v[1]);
          return v;
        };
        HostTensor want(DataType::kFloat32, sh.full);
        run_kernel(kLayerElementWise, "reference", *l, ins(full, lin), &want, lin, 1);
        EXPECT_TRUE(supports_with("vectorized", *l, {lin, lin}, lin)) << what;
        for (int threads : {1, 2}) {
          HostTensor got(DataType::kFloat32, sh.full);
          run_kernel(kLayerElementWise, "vectorized", *l, ins(full, lin), &got, lin, threads);
          EXPECT_TRUE(same_bytes(got, want)) << what << ", linear, " << threads << " thread(s)";
          const HostTensor full_cl = test::convert_format(full, true);
          EXPECT_TRUE(supports_with("vectorized", *l, small_first ? std::vector{lin, cl} : std::vector{cl, lin}, cl))
              << what;
          HostTensor got_cl(DataType::kFloat32, sh.full);
          run_kernel(kLayerElementWise, "vectorized", *l, ins(full_cl, cl), &got_cl, cl, threads);
          EXPECT_TRUE(same_bytes(test::convert_format(got_cl, false), want))
              << what << ", channels-last, " << threads << " thread(s)";
        }
      }
    }
  }
}

Tensor* conv(Network& net, Tensor* x, int64_t in, int64_t out, int64_t k, uint32_t seed) {
  ConvolutionDesc d;
  d.num_output_maps = out;
  d.kernel = {k, k};
  d.pads_begin = {k / 2, k / 2};
  d.pads_end = {k / 2, k / 2};
  Layer* l = net.add_convolution(x, d, random_f32(Dims{out, in, k, k}, seed), random_f32(Dims{out}, seed + 1));
  return net.add_activation(l->output(0), ActivationType::kRelu)->output(0);
}

// A SqueezeNet fire module and a residual add on [1, 8, 13, 13]:
// conv3x3(8->8) -> maxpool 3x3/2 -> squeeze 1x1 (8->4) -> {expand 1x1 (4->8), expand 3x3 (4->8)}
// -> concat (16) -> conv1x1 (16->16) + concat -> global average pool -> flatten -> y [1, 16].
std::unique_ptr<Network> fire_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, 8, 13, 13});
  Tensor* t = conv(*net, x, 8, 8, 3, 1);
  PoolingDesc p;
  p.kernel = {3, 3};
  p.strides = {2, 2};
  t = net->add_pooling(t, p)->output(0);
  Tensor* sq = conv(*net, t, 8, 4, 1, 3);
  Tensor* cat = net->add_concatenation({conv(*net, sq, 4, 8, 1, 5), conv(*net, sq, 4, 8, 3, 7)}, 1)->output(0);
  Tensor* sum = net->add_elementwise(conv(*net, cat, 16, 16, 1, 9), cat, ElementWiseOp::kSum)->output(0);
  PoolingDesc g;
  g.type = PoolingType::kAverage;
  g.kernel = {6, 6};
  Tensor* pooled = net->add_pooling(sum, g)->output(0);
  Layer* flat = net->add_layer(kLayerShuffle, {pooled}, 1, Attributes{}, "flatten");
  flat->attrs().set("reshape_mode", std::string("dims"));
  flat->attrs().set("reshape", std::vector<int64_t>{1, 16});
  flat->output(0)->set_name("y");
  net->mark_output(flat->output(0));
  // A second output straight from the channels-last region.
  sum->set_name("features");
  net->mark_output(sum);
  return net;
}

int count_type(const Network& net, const std::string& type) {
  int n = 0;
  for (int i = 0; i < net.num_layers(); ++i) n += net.layer(i)->type() == type;
  return n;
}

std::vector<HostTensor> run_engine(const Network& net, const BuilderConfig& config, const HostTensor& x) {
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  std::vector<HostTensor> outs;
  for (const char* name : {"y", "features"}) outs.emplace_back(engine->io_tensor(name).type, ctx->tensor_shape(name));
  ctx->set_tensor_address("x", const_cast<void*>(x.data()));
  ctx->set_tensor_address("y", outs[0].data());
  ctx->set_tensor_address("features", outs[1].data());
  ctx->execute();
  return outs;
}

TEST(CpuChannelsLast, LayoutPassMakesCpuConvRegionsChannelsLast) {
  auto net = fire_net();
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  std::vector<std::string> log;
  PassContext ctx{config, {{{"x", Dims{1, 8, 13, 13}}}}, &log};
  EXPECT_GT(pass_layout(*net, ctx), 0);
  net->validate();
  // In: x. Out: the "features" output. The flatten (a Shuffle) reads the pooled channels-last
  // tensor itself: its "fast" kernel starts from the stored order, so no Reformat is needed.
  EXPECT_EQ(count_type(*net, kLayerReformat), 2);
  bool flatten_reads_nhwc = false;
  for (int i = 0; i < net->num_layers(); ++i) {
    const Layer* l = net->layer(i);
    if (l->type() == kLayerShuffle && l->input(0)->format() == TensorFormat::kChannelsLast) {
      flatten_reads_nhwc = true;
      EXPECT_EQ(l->output(0)->format(), TensorFormat::kLinear) << l->name();
    }
  }
  EXPECT_TRUE(flatten_reads_nhwc);
  std::string all;
  for (const auto& line : log) all += line + "\n";
  EXPECT_NE(all.find("reads channels-last"), std::string::npos) << all;
  for (int i = 0; i < net->num_layers(); ++i) {
    const Layer* l = net->layer(i);
    const std::string& type = l->type();
    if (type == kLayerConvolution || type == kLayerActivation || type == kLayerPooling || type == kLayerConcatenation ||
        type == kLayerElementWise) {
      EXPECT_EQ(l->input(0)->format(), TensorFormat::kChannelsLast) << l->name();
      EXPECT_EQ(l->output(0)->format(), TensorFormat::kChannelsLast) << l->name();
    }
  }
  for (const char* name : {"y", "features"}) {
    ASSERT_NE(net->find_tensor(name), nullptr) << name;
    EXPECT_TRUE(net->find_tensor(name)->is_network_output());
    EXPECT_EQ(net->find_tensor(name)->format(), TensorFormat::kLinear) << name;
  }
}

TEST(CpuChannelsLast, ChannelsLastEngineMatchesLinearEngine) {
  auto net = fire_net();
  const HostTensor x = random_f32(Dims{1, 8, 13, 13}, 42, 2.0f);
  for (int threads : {1, 2}) {
    BuilderConfig config;
    config.device = DeviceType::kCPU;
    config.num_threads = threads;
    const auto got = run_engine(*net, config, x);
    config.disabled_passes = {"layout"};
    const auto want = run_engine(*net, config, x);
    for (size_t i = 0; i < got.size(); ++i) {
      std::string msg;
      test::ErrorStats stats;
      EXPECT_TRUE(test::compare_tensors(got[i], want[i], 1e-4, 1e-5, &stats, &msg)) << "output " << i << ": " << msg;
    }
  }
}

// Runs the CPU layout pass on `net` (input x [1, 8, 13, 13], output y): reformats only at the
// network's edges (x in, y out), and every `type` layer reads its input `input` and writes its
// output channels-last. Returns the number of `type` layers.
int expect_one_region(Network& net, const std::string& type, int input) {
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  PassContext ctx{config, {{{"x", Dims{1, 8, 13, 13}}}}, nullptr};
  EXPECT_GT(pass_layout(net, ctx), 0);
  net.validate();
  EXPECT_EQ(count_type(net, kLayerReformat), 2) << "x in, y out";
  int found = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    if (l->type() != type) continue;
    ++found;
    EXPECT_EQ(l->input(input)->format(), TensorFormat::kChannelsLast) << l->name();
    EXPECT_EQ(l->output(0)->format(), TensorFormat::kChannelsLast) << l->name();
  }
  return found;
}

// The CPU engine of `net` (input x, output y) on 2 threads computes the same y with the layout pass
// as without it.
void expect_layout_keeps_results(const Network& net, const HostTensor& x) {
  std::vector<HostTensor> outs;
  for (bool layout : {true, false}) {
    BuilderConfig c;
    c.device = DeviceType::kCPU;
    c.num_threads = 2;
    if (!layout) c.disabled_passes = {"layout"};
    const auto bytes = Builder().build_serialized(net, c);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ectx = engine->create_execution_context();
    HostTensor out(DataType::kFloat32, ectx->tensor_shape("y"));
    ectx->set_tensor_address("x", const_cast<void*>(x.data()));
    ectx->set_tensor_address("y", out.data());
    ectx->execute();
    outs.push_back(out);
  }
  std::string msg;
  test::ErrorStats stats;
  EXPECT_TRUE(test::compare_tensors(outs[0], outs[1], 1e-4, 1e-5, &stats, &msg)) << msg;
}

// MobileNetV3's squeeze-excitation on [1, 8, 13, 13]: conv3x3 (8->16) -> {global average pool ->
// conv1x1 (16->8) + relu -> conv1x1 (8->16) -> hard sigmoid} -> scale * features -> conv1x1
// (16->8) -> y.
std::unique_ptr<Network> squeeze_excitation_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, 8, 13, 13});
  Tensor* features = conv(*net, x, 8, 16, 3, 31);
  PoolingDesc g;
  g.type = PoolingType::kAverage;
  g.kernel = {13, 13};
  Tensor* pooled = net->add_pooling(features, g)->output(0);
  Tensor* squeezed = conv(*net, pooled, 16, 8, 1, 33);
  ConvolutionDesc d;
  d.num_output_maps = 16;
  d.kernel = {1, 1};
  Layer* excite = net->add_convolution(squeezed, d, random_f32(Dims{16, 8, 1, 1}, 35), random_f32(Dims{16}, 36));
  Tensor* scale = net->add_activation(excite->output(0), ActivationType::kHardSigmoid, 1.0 / 6.0, 0.5)->output(0);
  Tensor* scaled = net->add_elementwise(scale, features, ElementWiseOp::kProd)->output(0);
  Tensor* y = conv(*net, scaled, 16, 8, 1, 37);
  y->set_name("y");
  net->mark_output(y);
  return net;
}

TEST(CpuChannelsLast, SqueezeExcitationStaysInTheChannelsLastRegion) {
  // The per-channel Mul joins the region: no reformats around it, only at the network's edges.
  EXPECT_EQ(expect_one_region(*squeeze_excitation_net(), kLayerElementWise, 1), 1);

  // And the engine computes what the linear one does.
  expect_layout_keeps_results(*squeeze_excitation_net(), random_f32(Dims{1, 8, 13, 13}, 43, 2.0f));
}

// conv3x3 (8->16) -> nearest 2x upsampling -> conv3x3 (16->8) -> y: the Resize runs inside the
// channels-last region (before, it read linear memory, with a Reformat on either side).
std::unique_ptr<Network> upsample_between_convs_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, 8, 13, 13});
  const HostTensor scales = HostTensor::from_vector(DataType::kFloat32, Dims{4}, std::vector<float>{1, 1, 2, 2});
  Tensor* up = net->add_resize(conv(*net, x, 8, 16, 3, 71), net->add_constant(scales)->output(0), nullptr)->output(0);
  Tensor* y = conv(*net, up, 16, 8, 3, 73);
  y->set_name("y");
  net->mark_output(y);
  return net;
}

TEST(CpuChannelsLast, NearestUpsamplingStaysInTheChannelsLastRegion) {
  EXPECT_EQ(expect_one_region(*upsample_between_convs_net(), kLayerResize, 0), 1);

  expect_layout_keeps_results(*upsample_between_convs_net(), random_f32(Dims{1, 8, 13, 13}, 75, 2.0f));
}

// conv3x3 -> TemperatureSwish (the built-in plugin) -> conv3x3 -> Mish -> y: the element-wise
// plugins accept channels-last on the CPU, so the region runs through them (reformats only at the
// network's edges; before, each plugin sat in a linear island with a Reformat on either side,
// and in builds without oneDNN its neighbouring convolutions fell to the reference kernel).
std::unique_ptr<Network> plugin_between_convs_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, 8, 13, 13});
  auto plugin = [&](Tensor* t, const std::string& type, const PluginFieldCollection& fields) {
    const PluginCreator* creator = PluginRegistry::instance().find(type);
    EXPECT_NE(creator, nullptr) << type;
    const auto p = creator->create(type + "_layer", PluginRegistry::instance().resolve_fields(*creator, fields, type));
    return net->add_plugin({t}, *p, type + "_layer")->output(0);
  };
  PluginFieldCollection t;
  t.add(PluginField::float32("temperature", {0.7f}));
  Tensor* a = plugin(conv(*net, x, 8, 16, 3, 61), "TemperatureSwish", t);
  Tensor* y = plugin(conv(*net, a, 16, 8, 3, 63), "Mish", {});
  y->set_name("y");
  net->mark_output(y);
  return net;
}

TEST(CpuChannelsLast, ElementWisePluginsStayInTheChannelsLastRegion) {
  EXPECT_EQ(expect_one_region(*plugin_between_convs_net(), kLayerPlugin, 0), 2);

  expect_layout_keeps_results(*plugin_between_convs_net(), random_f32(Dims{1, 8, 13, 13}, 47, 2.0f));
}

TEST(CpuChannelsLast, LayerThatBroadcastsAtAnotherProfilePointStaysLinear) {
  // a [N, 8, 6, 6] + b [1, 8, 6, 6]: the same shape at the opt point N = 1, a broadcast at N = 3,
  // which the channels-last element-wise kernel cannot do; the sum must stay linear.
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{kDynamic, 8, 6, 6});
  Tensor* z = net->add_input("z", DataType::kFloat32, Dims{1, 8, 6, 6});
  Tensor* a = conv(*net, x, 8, 8, 3, 11);
  Tensor* b = conv(*net, z, 8, 8, 1, 13);
  Tensor* sum = net->add_elementwise(a, b, ElementWiseOp::kSum)->output(0);
  Tensor* y = conv(*net, sum, 8, 4, 3, 15);
  y->set_name("y");
  net->mark_output(y);
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1, 8, 6, 6}, Dims{1, 8, 6, 6}, Dims{3, 8, 6, 6});
  const HostTensor xv = random_f32(Dims{3, 8, 6, 6}, 21, 2.0f), zv = random_f32(Dims{1, 8, 6, 6}, 22, 2.0f);
  std::vector<HostTensor> outs;
  for (bool layout : {true, false}) {
    BuilderConfig config;
    config.device = DeviceType::kCPU;
    config.profiles = {profile};
    if (!layout) config.disabled_passes = {"layout"};
    const auto bytes = Builder().build_serialized(*net, config);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ctx = engine->create_execution_context();
    ctx->set_input_shape("x", xv.dims());
    HostTensor out(DataType::kFloat32, ctx->tensor_shape("y"));
    ctx->set_tensor_address("x", const_cast<void*>(xv.data()));
    ctx->set_tensor_address("z", const_cast<void*>(zv.data()));
    ctx->set_tensor_address("y", out.data());
    ctx->execute();
    outs.push_back(out);
  }
  ASSERT_EQ(outs[0].dims(), (Dims{3, 4, 6, 6}));
  std::string msg;
  test::ErrorStats stats;
  EXPECT_TRUE(test::compare_tensors(outs[0], outs[1], 1e-4, 1e-5, &stats, &msg)) << msg;
}

// A stem: x [N, 3, 21, 22] -> conv 3x3 stride 2 (3 -> 16) + relu -> conv 3x3 (16 -> 16) + relu -> y.
std::unique_ptr<Network> stem_net(const Dims& x_dims) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, x_dims);
  ConvolutionDesc d;
  d.num_output_maps = 16;
  d.kernel = {3, 3};
  d.strides = {2, 2};
  d.pads_begin = {1, 1};
  d.pads_end = {1, 1};
  Layer* stem = net->add_convolution(x, d, random_f32(Dims{16, 3, 3, 3}, 51), random_f32(Dims{16}, 52));
  Tensor* t = net->add_activation(stem->output(0), ActivationType::kRelu)->output(0);
  Tensor* y = conv(*net, t, 16, 16, 3, 53);
  y->set_name("y");
  net->mark_output(y);
  return net;
}

TEST(CpuChannelsLast, StemConvolutionReadsTheLinearInputWithoutAReformat) {
  if (!KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "nchw_direct_avx2") ||
      !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "no AVX2 + FMA here: the stem kernel declines, and a Reformat goes before the stem";
  }
  auto net = stem_net(Dims{1, 3, 21, 22});
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  std::vector<std::string> log;
  PassContext ctx{config, {{{"x", Dims{1, 3, 21, 22}}}}, &log};
  EXPECT_GT(pass_layout(*net, ctx), 0);
  net->validate();
  EXPECT_EQ(count_type(*net, kLayerReformat), 1) << "y out only";
  std::string all;
  for (const auto& line : log) all += line + "\n";
  EXPECT_NE(all.find("reads linear 'x' directly"), std::string::npos) << all;
  for (int i = 0; i < net->num_layers(); ++i) {
    const Layer* l = net->layer(i);
    if (l->type() != kLayerConvolution) continue;
    const bool stem = l->input(0)->name() == "x";
    EXPECT_EQ(l->input(0)->format(), stem ? TensorFormat::kLinear : TensorFormat::kChannelsLast) << l->name();
    EXPECT_EQ(l->output(0)->format(), TensorFormat::kChannelsLast) << l->name();
  }

  // The engine (a dynamic batch: the stem kernel prepared per shape) computes what the linear one
  // does, and runs the stem kernel where the priority order decides.
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1, 3, 21, 22}, Dims{2, 3, 21, 22}, Dims{3, 3, 21, 22});
  for (int64_t n : {2, 3, 1}) {
    const HostTensor x = random_f32(Dims{n, 3, 21, 22}, 60 + static_cast<uint32_t>(n), 2.0f);
    std::vector<HostTensor> outs;
    for (bool layout : {true, false}) {
      BuilderConfig c;
      c.device = DeviceType::kCPU;
      c.num_threads = 2;
      c.time_tactics = false;
      c.profiles = {profile};
      if (!layout) c.disabled_passes = {"layout"};
      const auto bytes = Builder().build_serialized(*stem_net(Dims{kDynamic, 3, 21, 22}), c);
      auto engine = Runtime().deserialize(bytes.data(), bytes.size());
      auto ectx = engine->create_execution_context();
      ectx->set_profiling(layout);
      ectx->set_input_shape("x", x.dims());
      HostTensor out(DataType::kFloat32, ectx->tensor_shape("y"));
      ectx->set_tensor_address("x", const_cast<void*>(x.data()));
      ectx->set_tensor_address("y", out.data());
      ectx->execute();
      if (layout) {
        const std::string report = ectx->profile_report();
        EXPECT_NE(report.find("nchw_direct_avx"), std::string::npos) << report;
        EXPECT_EQ(report.find("Reformat, "), report.rfind("Reformat, ")) << "one Reformat (y out):\n" << report;
      }
      outs.push_back(out);
    }
    std::string msg;
    test::ErrorStats stats;
    EXPECT_TRUE(test::compare_tensors(outs[0], outs[1], 1e-4, 1e-5, &stats, &msg)) << "batch " << n << ": " << msg;
  }
}

// Builder optimization level 5 on the CPU: each region is timed linear and channels-last (the
// Reformats it needs included) and the faster way is kept; the Reformats it counts are the ones
// the pass then inserts. Level 3 decides by the rule, without timing.
TEST(CpuChannelsLast, Level5TimesEachRegionBothWaysAndKeepsTheFaster) {
  struct Case {
    const char* name;
    std::unique_ptr<Network> (*make)();
    Dims x;
  };
  const Dims small{1, 8, 13, 13};
  const auto stem = [] { return stem_net(Dims{1, 3, 21, 22}); };
  const Case cases[] = {{"fire", fire_net, small},
                        {"squeeze-excitation", squeeze_excitation_net, small},
                        {"upsampling", upsample_between_convs_net, small},
                        {"stem", stem, Dims{1, 3, 21, 22}},
                        {"plugins", plugin_between_convs_net, small}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (int level : {3, 5}) {
      auto net = c.make();
      BuilderConfig config;
      config.device = DeviceType::kCPU;
      config.optimization_level = level;
      config.num_threads = 1;
      std::vector<std::string> log;
      PassContext ctx{config, {{{"x", c.x}}}, &log};
      pass_layout(*net, ctx);
      net->validate();
      std::string all;
      for (const auto& line : log) all += line + "\n";
      const size_t at = all.find("level 5 timed the region");
      if (level == 3) {
        EXPECT_EQ(at, std::string::npos) << all;
        continue;
      }
      ASSERT_NE(at, std::string::npos) << all;
      double linear = 0, channels_last = 0;
      int reformats = -1;
      const size_t numbers = all.find(": linear ", at);
      ASSERT_NE(numbers, std::string::npos) << all;
      ASSERT_EQ(std::sscanf(all.c_str() + numbers, ": linear %lf ms, channels-last %lf ms with %d reformats", &linear,
                            &channels_last, &reformats),
                3)
          << all;
      EXPECT_GT(linear, 0.0);
      EXPECT_GT(channels_last, 0.0);
      const bool chose_channels_last = all.find("run channels-last") != std::string::npos;
      if (channels_last != linear) {  // else a tie in print: either way
        EXPECT_EQ(chose_channels_last, channels_last < linear) << all;
      }
      EXPECT_EQ(all.find("stays linear") != std::string::npos, !chose_channels_last) << all;
      EXPECT_EQ(count_type(*net, kLayerReformat), chose_channels_last ? reformats : 0) << all;
    }
  }
  // The level-5 engine computes what the linear one does.
  const HostTensor x = random_f32(Dims{1, 8, 13, 13}, 81, 2.0f);
  std::vector<HostTensor> outs;
  for (bool level5 : {true, false}) {
    BuilderConfig c;
    c.device = DeviceType::kCPU;
    c.num_threads = 1;
    if (level5) c.optimization_level = 5;
    if (!level5) c.disabled_passes = {"layout"};
    auto net = squeeze_excitation_net();
    const auto bytes = Builder().build_serialized(*net, c);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ectx = engine->create_execution_context();
    outs.emplace_back(DataType::kFloat32, ectx->tensor_shape("y"));
    ectx->set_tensor_address("x", const_cast<void*>(x.data()));
    ectx->set_tensor_address("y", outs.back().data());
    ectx->execute();
  }
  std::string msg;
  test::ErrorStats stats;
  EXPECT_TRUE(test::compare_tensors(outs[0], outs[1], 1e-4, 1e-5, &stats, &msg)) << msg;
}

TEST(CpuChannelsLast, NetworksWithoutFloat32ConvolutionsStayLinear) {
  // Pooling and activations alone gain nothing from channels-last.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 8, 12, 12});
  PoolingDesc p;
  p.kernel = {2, 2};
  p.strides = {2, 2};
  Tensor* y = net.add_activation(net.add_pooling(x, p)->output(0), ActivationType::kRelu)->output(0);
  y->set_name("y");
  net.mark_output(y);
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  PassContext ctx{config, {{{"x", Dims{1, 8, 12, 12}}}}, nullptr};
  EXPECT_EQ(pass_layout(net, ctx), 0);
  EXPECT_EQ(count_type(net, kLayerReformat), 0);
}

}  // namespace
}  // namespace kiln
