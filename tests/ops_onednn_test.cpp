// Tests of the oneDNN CPU tactics (src/backends/cpu/*_onednn.cpp): Convolution, Deconvolution,
// Pooling, MatrixMultiply and Gemm. Their cases against the reference oracle on awkward shapes
// (odd sizes, batch 3, groups, depthwise, dilations, strides, asymmetric pads, every fused
// activation, residual, 1-D/3-D, ceil_mode, count_include_pad, batch broadcast, transposes, and
// what the tactic must decline) are in the op table (tests/data/conv and tests/data/math
// cases.json, "require"/"decline" "cpu:onednn"), run by OpTable.OnednnMatchesReference
// (tests/ops_table_test.cpp) and on every other backend. Here: the registration, a few tiny
// cases checked against numbers computed by hand, independent of the reference, and direct runs
// for what the harness does not cover (channels-last tensors, re-preparing for other shapes,
// in-place residual).
// Only built into the test binary's checks when oneDNN is (KILN_HAVE_ONEDNN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "op_harness.h"
#include "src/backends/kernel.h"
#include "src/ir/shape_inference.h"

#ifdef KILN_HAVE_ONEDNN

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;

Attributes make_attrs(std::initializer_list<std::pair<const std::string, AttrValue>> values) {
  Attributes a;
  for (const auto& [k, v] : values) a.set(k, v);
  return a;
}

// Absolute tolerance for sums of `terms` products of values up to ~2 in magnitude: float32
// accumulation in another order differs by about eps * sqrt(terms) * magnitude.
double sum_atol(int64_t terms) { return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(terms))) * 2.0; }

TEST(OnednnRegistry, TacticsRegisteredWithPriorityAboveReference) {
  for (const char* type : {kLayerConvolution, kLayerDeconvolution, kLayerPooling, kLayerMatrixMultiply, kLayerGemm}) {
    const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, type, "onednn");
    ASSERT_NE(e, nullptr) << type;
    EXPECT_EQ(e->priority, 100) << type;
    // onednn is chosen before the reference; only a narrower specialist may rank above it:
    // Pooling's direct NCHW max-pool "fast" tactic, Convolution's "onednn_winograd" (3x3,
    // stride 1, ungrouped, at least 32 input channels, images of at least 14x14) and kiln's own
    // "winograd_avx2" (3x3, stride 1, ungrouped, channels-last, AVX2) and "igemm_avx2" (kernels
    // larger than 1x1, ungrouped, at least 32 input channels, channels-last, AVX2), the stem kernels
    // "nchw_direct_avx512" and "nchw_direct_avx2" (a linear input of at most 4 channels, a
    // channels-last output, ungrouped, undilated) and "pointwise_packed" (1x1 over at most 64
    // pixels, constant weights), Gemm's "gemv" (1-4 rows
    // against constant weights) and MatrixMultiply's "packed_avx512" and "packed_avx2" (a constant
    // 2-D b; AVX-512F, AVX2), whose supports() are stricter.
    const auto all = KernelRegistry::instance().find(DeviceType::kCPU, type);
    ASSERT_FALSE(all.empty());
    size_t onednn_at = all.size(), reference_at = all.size();
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i]->tactic == "onednn") onednn_at = i;
      if (all[i]->tactic == "reference") reference_at = i;
    }
    EXPECT_LT(onednn_at, reference_at) << type;
    if (std::string(type) == kLayerConvolution) {
      ASSERT_GE(all.size(), 9u);
      EXPECT_EQ(all[0]->tactic, "onednn_winograd") << type;
      EXPECT_EQ(all[1]->tactic, "pointwise_packed") << type;
      EXPECT_EQ(all[2]->tactic, "nchw_direct_avx512") << type;
      EXPECT_EQ(all[3]->tactic, "nchw_direct_avx2") << type;
      EXPECT_EQ(all[4]->tactic, "winograd_avx2") << type;
      EXPECT_EQ(all[5]->tactic, "igemm_avx2") << type;
      EXPECT_EQ(all[6]->tactic, "onednn") << type;
      // Below oneDNN: the 1x1 products and the depthwise kernels for builds without it (their
      // supports() declines where oneDNN is built in).
      ASSERT_GE(all.size(), 9u);
      EXPECT_EQ(all[7]->tactic, "pointwise_gemm_avx512") << type;
      EXPECT_EQ(all[8]->tactic, "pointwise_gemm_avx2") << type;
      ASSERT_GE(all.size(), 11u);
      EXPECT_EQ(all[9]->tactic, "depthwise_avx512") << type;
      EXPECT_EQ(all[10]->tactic, "depthwise_avx2") << type;
    } else if (std::string(type) == kLayerGemm) {
      ASSERT_GE(all.size(), 2u);
      EXPECT_EQ(all[0]->tactic, "gemv") << type;
      EXPECT_EQ(all[1]->tactic, "onednn") << type;
    } else if (std::string(type) == kLayerMatrixMultiply) {
      ASSERT_GE(all.size(), 3u);
      EXPECT_EQ(all[0]->tactic, "packed_avx512") << type;
      EXPECT_EQ(all[1]->tactic, "packed_avx2") << type;
      EXPECT_EQ(all[2]->tactic, "onednn") << type;
      // Below oneDNN, timed against it: the products of two activations.
      ASSERT_GE(all.size(), 5u);
      EXPECT_EQ(all[3]->tactic, "batched_avx512") << type;
      EXPECT_EQ(all[4]->tactic, "batched_avx2") << type;
    } else if (std::string(type) != kLayerPooling) {
      EXPECT_EQ(all.front()->tactic, "onednn") << type;
    }
  }
}

// ---- direct runs (channels-last, re-prepare, hand-computed cases) -----------------------------

// A one-layer network; constants where `constant[i]`, network inputs elsewhere.
struct Direct {
  Network network;
  Layer* layer = nullptr;
  std::vector<HostTensor> values;
  std::vector<bool> constant;

  Direct(const std::string& type, std::vector<HostTensor> inputs, std::vector<bool> is_constant, Attributes attrs)
      : values(std::move(inputs)), constant(std::move(is_constant)) {
    std::vector<Tensor*> ins;
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].empty()) {
        ins.push_back(nullptr);
      } else if (constant[i]) {
        ins.push_back(network.add_constant(values[i], "c" + std::to_string(i))->output(0));
      } else {
        ins.push_back(network.add_input("in" + std::to_string(i), values[i].type(), values[i].dims()));
      }
    }
    layer = network.add_layer(type, ins, 1, std::move(attrs), "op");
  }

  Dims infer_out(const std::vector<HostTensor>& vals) const {
    std::vector<TensorState> states(vals.size());
    std::vector<const TensorState*> ptrs;
    for (size_t i = 0; i < vals.size(); ++i) {
      if (vals[i].empty()) {
        ptrs.push_back(nullptr);
        continue;
      }
      states[i].type = vals[i].type();
      states[i].dims = vals[i].dims();
      if (constant[i]) states[i].value = std::make_shared<HostTensor>(vals[i]);
      ptrs.push_back(&states[i]);
    }
    return infer_layer(*layer, ptrs).at(0).second;
  }
};

// Layouts of x (input 0), the residual (input 3) and y; other inputs are always kLinear.
struct Formats {
  TensorFormat x = TensorFormat::kLinear, residual = TensorFormat::kLinear, y = TensorFormat::kLinear;
  static Formats all(TensorFormat f) { return {f, f, f}; }
};

// Prepares and runs `kernel` (already created) on vals, laid out by the caller as `formats` says.
HostTensor run_prepared(Kernel& kernel, const Direct& d, const std::vector<HostTensor>& vals, const Dims& out_dims,
                        Formats formats, int threads, const HostTensor* y_init = nullptr) {
  std::vector<TensorDesc> descs;
  KernelContext ctx;
  ctx.layer = d.layer;
  ctx.num_threads = threads;
  for (size_t i = 0; i < vals.size(); ++i) {
    TensorDesc desc;
    TensorView v;
    if (vals[i].empty()) {
      desc.present = false;
    } else {
      desc.dims = v.dims = vals[i].dims();
      desc.format = v.format = i == 0 ? formats.x : i == 3 ? formats.residual : TensorFormat::kLinear;
      if (d.constant[i]) desc.value = &vals[i];
      v.data = const_cast<void*>(vals[i].data());
    }
    descs.push_back(desc);
    ctx.inputs.push_back(v);
  }
  HostTensor y = y_init ? *y_init : HostTensor(DataType::kFloat32, out_dims);
  ctx.outputs.push_back(TensorView{DataType::kFloat32, out_dims, formats.y, y.data()});
  kernel.prepare(*d.layer, descs, {TensorDesc{DataType::kFloat32, out_dims, formats.y, true, nullptr}}, threads);
  std::vector<uint8_t> ws(kernel.workspace_size());
  ctx.workspace = ws.empty() ? nullptr : ws.data();
  ctx.workspace_size = ws.size();
  kernel.execute(ctx);
  return y;
}

HostTensor run_tactic(const Direct& d, const std::vector<HostTensor>& vals, const std::string& tactic,
                      Formats formats = {}, int threads = 2) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, d.layer->type(), tactic);
  if (!e) throw Error("no " + tactic + " kernel for " + d.layer->type());
  auto kernel = e->create(*d.layer);
  return run_prepared(*kernel, d, vals, d.infer_out(vals), formats, threads);
}

HostTensor tensor(const Dims& dims, std::vector<float> v) {
  return HostTensor::from_vector(DataType::kFloat32, dims, v);
}

void expect_close(const HostTensor& got, const HostTensor& want, double atol, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  std::string msg;
  test::ErrorStats stats;
  EXPECT_TRUE(test::compare_tensors(got, want, 1e-4, atol, &stats, &msg)) << what << ": " << msg;
}

// NCHW... <-> NHWC... (C moved innermost / back).
HostTensor to_channels_last(const HostTensor& t) {
  const Dims& d = t.dims();
  const int64_t n = d[0], c = d[1], s = d.volume() / (n * c);
  HostTensor r(DataType::kFloat32, d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) r.as<float>()[(i * s + k) * c + j] = t.as<float>()[(i * c + j) * s + k];
  return r;
}
HostTensor from_channels_last(const HostTensor& t) {
  const Dims& d = t.dims();
  const int64_t n = d[0], c = d[1], s = d.volume() / (n * c);
  HostTensor r(DataType::kFloat32, d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) r.as<float>()[(i * c + j) * s + k] = t.as<float>()[(i * s + k) * c + j];
  return r;
}

TEST(OnednnConv, HandComputedSmallCase) {
  // x = 1..9 in a 3x3 plane, w = 2x2 of ones, bias 0.5, pads 0: each output is a 2x2 window sum.
  std::vector<float> xv(9);
  for (int i = 0; i < 9; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  Direct d(kLayerConvolution, {tensor({1, 1, 3, 3}, xv), tensor({1, 1, 2, 2}, {1, 1, 1, 1}), tensor({1}, {0.5f})},
           {false, true, true}, make_attrs({}));
  const HostTensor y = run_tactic(d, d.values, "onednn");
  expect_close(y, tensor({1, 1, 2, 2}, {12.5f, 16.5f, 24.5f, 28.5f}), 1e-5, "2x2 window sums");

  // Same with stride 2, pads 1 on every side and a residual + relu: windows at (-1,-1), (-1,1),
  // (1,-1), (1,1) see {1}, {2,3}, {4,7}, {5,6,8,9}.
  Direct r(kLayerConvolution,
           {tensor({1, 1, 3, 3}, xv), tensor({1, 1, 2, 2}, {1, 1, 1, 1}), HostTensor(),
            tensor({1, 1, 2, 2}, {-2.f, -10.f, 0.f, 1.f})},
           {false, true, false, false},
           make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"activation", std::string("relu")}}));
  const HostTensor y2 = run_tactic(r, r.values, "onednn");
  expect_close(y2, tensor({1, 1, 2, 2}, {0.f, 0.f, 11.f, 29.f}), 1e-5, "strided, padded, residual, relu");
}

TEST(OnednnConv, HandComputedGroupedDepthwise) {
  // Two channels, depthwise 1x1 weights 2 and -3: y = x scaled per channel.
  Direct d(kLayerConvolution,
           {tensor({1, 2, 1, 2}, {1, 2, 3, 4}), tensor({2, 1, 1, 1}, {2.f, -3.f}), tensor({2}, {1.f, 0.f})},
           {false, true, true}, make_attrs({{"group", int64_t{2}}}));
  expect_close(run_tactic(d, d.values, "onednn"), tensor({1, 2, 1, 2}, {3.f, 5.f, -9.f, -12.f}), 1e-6, "depthwise");
}

TEST(OnednnDeconv, HandComputedSmallCase) {
  // x = [1, 2] (1-D), w = [1, 10, 100], stride 2: full output 1*w at 0, 2*w at 2 -> [1,10,102,20,200].
  Direct d(kLayerDeconvolution, {tensor({1, 1, 2}, {1, 2}), tensor({1, 1, 3}, {1, 10, 100})}, {false, true},
           make_attrs({{"strides", Ints{2}}}));
  expect_close(run_tactic(d, d.values, "onednn"), tensor({1, 1, 5}, {1, 10, 102, 20, 200}), 1e-4, "deconv 1-D");
  // pads [1, 0] crop the first element; output_padding 1 appends one zero.
  Direct p(kLayerDeconvolution, {tensor({1, 1, 2}, {1, 2}), tensor({1, 1, 3}, {1, 10, 100})}, {false, true},
           make_attrs({{"strides", Ints{2}}, {"pads", Ints{1, 0}}, {"output_padding", Ints{1}}}));
  expect_close(run_tactic(p, p.values, "onednn"), tensor({1, 1, 5}, {10, 102, 20, 200, 0}), 1e-4,
               "deconv pads + output_padding");
}

TEST(OnednnPooling, HandComputedSmallCase) {
  std::vector<float> xv(16);
  for (int i = 0; i < 16; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  // 4x4 plane 0..15, 2x2 windows stride 2.
  Direct mx(kLayerPooling, {tensor({1, 1, 4, 4}, xv)}, {false},
            make_attrs({{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  expect_close(run_tactic(mx, mx.values, "onednn"), tensor({1, 1, 2, 2}, {5, 7, 13, 15}), 0, "max");
  // 3x3 windows stride 2 with pad 1 at the begin: exclude-pad averages of the in-bounds taps.
  Direct av(kLayerPooling, {tensor({1, 1, 4, 4}, xv)}, {false},
            make_attrs({{"mode", std::string("average")},
                        {"kernel", Ints{3, 3}},
                        {"strides", Ints{2, 2}},
                        {"pads", Ints{1, 1, 0, 0}}}));
  // windows rows {0,1} x cols {0,1} -> (0+1+4+5)/4; rows {0,1} x cols {1,2,3} -> (1+2+3+5+6+7)/6; ...
  expect_close(run_tactic(av, av.values, "onednn"), tensor({1, 1, 2, 2}, {2.5f, 4.0f, 8.5f, 10.0f}), 1e-5,
               "average exclude pad");
  // count_include_pad: the window sums 10, 24, 51, 90 divided by 9 (taps inside the padded extent).
  Direct ai(kLayerPooling, {tensor({1, 1, 4, 4}, xv)}, {false},
            make_attrs({{"mode", std::string("average")},
                        {"kernel", Ints{3, 3}},
                        {"strides", Ints{2, 2}},
                        {"pads", Ints{1, 1, 0, 0}},
                        {"count_include_pad", int64_t{1}}}));
  expect_close(run_tactic(ai, ai.values, "onednn"), tensor({1, 1, 2, 2}, {10.f / 9, 24.f / 9, 51.f / 9, 10.f}), 1e-5,
               "average include pad");
}

TEST(OnednnMatmul, HandComputedSmallCase) {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]]; batch of 2 on a with b broadcast.
  Direct d(kLayerMatrixMultiply, {tensor({2, 2, 2}, {1, 2, 3, 4, 1, 0, 0, 1}), tensor({2, 2}, {5, 6, 7, 8})},
           {false, false}, make_attrs({}));
  expect_close(run_tactic(d, d.values, "onednn"), tensor({2, 2, 2}, {19, 22, 43, 50, 5, 6, 7, 8}), 1e-5, "matmul");
  // transpose_b: b^T = [[5,7],[6,8]].
  Direct t(kLayerMatrixMultiply, {tensor({2, 2}, {1, 2, 3, 4}), tensor({2, 2}, {5, 6, 7, 8})}, {false, true},
           make_attrs({{"transpose_b", int64_t{1}}}));
  expect_close(run_tactic(t, t.values, "onednn"), tensor({2, 2}, {17, 23, 39, 53}), 1e-5, "matmul transpose_b");
}

TEST(OnednnGemm, HandComputedAlphaBeta) {
  // y = relu(0.5 * A B + 2 * C), A = [[1,2],[3,4]], B = [[1,0],[0,-1]], C = [1, -10] (row broadcast).
  Direct d(kLayerGemm, {tensor({2, 2}, {1, 2, 3, 4}), tensor({2, 2}, {1, 0, 0, -1}), tensor({2}, {1, -10})},
           {false, true, false}, make_attrs({{"alpha", 0.5}, {"beta", 2.0}, {"activation", std::string("relu")}}));
  // AB = [[1,-2],[3,-4]] -> 0.5AB + 2C = [[2.5,-21],[3.5,-22]] -> relu.
  expect_close(run_tactic(d, d.values, "onednn"), tensor({2, 2}, {2.5f, 0.f, 3.5f, 0.f}), 1e-5, "gemm alpha/beta");
  // trans_a, C as bias (alpha = beta = 1): A^T = [[1,3],[2,4]]; A^T B = [[1,-3],[2,-4]]; + C [M,1] = [[1],[2]].
  Direct b(kLayerGemm, {tensor({2, 2}, {1, 2, 3, 4}), tensor({2, 2}, {1, 0, 0, -1}), tensor({2, 1}, {1, 2})},
           {false, true, true}, make_attrs({{"trans_a", int64_t{1}}}));
  expect_close(run_tactic(b, b.values, "onednn"), tensor({2, 2}, {2, -2, 4, -2}), 1e-5, "gemm trans_a + bias");
}

// ---- Convolution: channels-last and re-preparing ------------------------------------------------

// Channels-last tensors (also mixed with linear ones); compare with the reference on NCHW data.
TEST(OnednnConv, ChannelsLastMatchesReference) {
  Direct d(
      kLayerConvolution,
      {test::random_tensor(DataType::kFloat32, {2, 16, 11, 10}, 1),
       test::random_tensor(DataType::kFloat32, {24, 16, 3, 3}, 2, -0.5, 0.5),
       test::random_tensor(DataType::kFloat32, {24}, 3), test::random_tensor(DataType::kFloat32, {2, 24, 6, 5}, 4)},
      {false, true, true, false},
      make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 0}}, {"activation", std::string("gelu_erf")}}));
  const HostTensor want = run_tactic(d, d.values, "reference");
  const auto cl = TensorFormat::kChannelsLast, lin = TensorFormat::kLinear;
  for (const Formats f :
       {Formats::all(cl), Formats{lin, cl, cl}, Formats{cl, lin, lin}, Formats{lin, lin, cl}, Formats{cl, cl, lin}}) {
    std::vector<HostTensor> vals = d.values;
    if (f.x == cl) vals[0] = to_channels_last(d.values[0]);
    if (f.residual == cl) vals[3] = to_channels_last(d.values[3]);
    HostTensor got = run_tactic(d, vals, "onednn", f);
    if (f.y == cl) got = from_channels_last(got);
    expect_close(got, want, sum_atol(16 * 9),
                 std::string("conv formats x/residual/y ") + to_string(f.x) + "/" + to_string(f.residual) + "/" +
                     to_string(f.y));
  }
}

// A kernel re-prepared for other shapes (cached plans) stays right; the residual may alias y.
TEST(OnednnConv, RepreparedForOtherShapesAndInPlaceResidual) {
  const HostTensor w = test::random_tensor(DataType::kFloat32, {8, 4, 3, 3}, 5, -0.5, 0.5);
  const HostTensor b = test::random_tensor(DataType::kFloat32, {8}, 6);
  Direct d(kLayerConvolution, {test::random_tensor(DataType::kFloat32, {1, 4, 9, 9}, 7), w, b}, {false, true, true},
           make_attrs({{"pads", Ints{1, 1, 1, 1}}, {"activation", std::string("tanh")}}));
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "onednn");
  ASSERT_NE(e, nullptr);
  auto kernel = e->create(*d.layer);
  for (const Dims& x : {Dims{1, 4, 9, 9}, Dims{3, 4, 13, 7}, Dims{1, 4, 9, 9}, Dims{2, 4, 5, 16}}) {
    std::vector<HostTensor> vals = {test::random_tensor(DataType::kFloat32, x, static_cast<uint64_t>(x.volume())), w,
                                    b};
    const Dims out = d.infer_out(vals);
    const HostTensor want = run_tactic(d, vals, "reference");
    const HostTensor got = run_prepared(*kernel, d, vals, out, Formats{}, 1);
    expect_close(got, want, sum_atol(36), "re-prepared for x " + x.to_string());
  }
  // Residual aliasing the output (in-place accumulate).
  Direct r(kLayerConvolution,
           {test::random_tensor(DataType::kFloat32, {2, 4, 9, 9}, 8), w, b,
            test::random_tensor(DataType::kFloat32, {2, 8, 9, 9}, 9)},
           {false, true, true, false}, make_attrs({{"pads", Ints{1, 1, 1, 1}}}));
  const HostTensor want = run_tactic(r, r.values, "reference");
  HostTensor y = r.values[3].clone();
  std::vector<HostTensor> vals = r.values;
  vals[3] = y;  // shares y's storage
  auto k2 = e->create(*r.layer);
  const HostTensor got = run_prepared(*k2, r, vals, want.dims(), Formats{}, 2, &y);
  expect_close(got, want, sum_atol(36), "in-place residual");
}

// SiLU and sigmoid: on AVX2 machines oneDNN runs the convolution (and the residual sum) and kiln
// applies the activation to the output after it (cpu::activation_after_onednn); elsewhere they are
// oneDNN post-ops. Either way the result is the reference's, with the residual in y's own memory
// too, in both layouts, and for a deconvolution.
TEST(OnednnConv, SiluAndSigmoidAfterThePrimitiveMatchTheReference) {
  for (const std::string act : {"silu", "sigmoid"}) {
    Direct d(kLayerConvolution,
             {test::random_tensor(DataType::kFloat32, {2, 16, 12, 9}, 11, -3, 3),
              test::random_tensor(DataType::kFloat32, {20, 16, 1, 1}, 12, -0.5, 0.5),
              test::random_tensor(DataType::kFloat32, {20}, 13),
              test::random_tensor(DataType::kFloat32, {2, 20, 12, 9}, 14)},
             {false, true, true, false}, make_attrs({{"activation", act}}));
    const HostTensor want = run_tactic(d, d.values, "reference");
    const auto cl = TensorFormat::kChannelsLast;
    for (const Formats f : {Formats{}, Formats::all(cl)}) {
      std::vector<HostTensor> vals = d.values;
      if (f.x == cl) vals[0] = to_channels_last(d.values[0]), vals[3] = to_channels_last(d.values[3]);
      HostTensor got = run_tactic(d, vals, "onednn", f, 3);
      if (f.y == cl) got = from_channels_last(got);
      expect_close(got, want, sum_atol(16), act + " conv, " + to_string(f.x));
    }
    // The residual in y's memory (the planner's in-place output): the sum, then the activation.
    const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "onednn");
    ASSERT_NE(e, nullptr);
    auto kernel = e->create(*d.layer);
    HostTensor y = d.values[3].clone();
    std::vector<HostTensor> vals = d.values;
    vals[3] = y;
    expect_close(run_prepared(*kernel, d, vals, want.dims(), Formats{}, 2, &y), want, sum_atol(16),
                 act + " conv, residual in y");

    Direct t(kLayerDeconvolution,
             {test::random_tensor(DataType::kFloat32, {1, 6, 5, 5}, 15, -2, 2),
              test::random_tensor(DataType::kFloat32, {6, 4, 3, 3}, 16, -0.5, 0.5),
              test::random_tensor(DataType::kFloat32, {4}, 17)},
             {false, true, true}, make_attrs({{"strides", Ints{2, 2}}, {"activation", act}}));
    expect_close(run_tactic(t, t.values, "onednn"), run_tactic(t, t.values, "reference"), sum_atol(6 * 9),
                 act + " deconv");
  }
}

// ---- Deconvolution --------------------------------------------------------------------------

TEST(OnednnDeconv, ChannelsLastMatchesReference) {
  Direct d(kLayerDeconvolution,
           {test::random_tensor(DataType::kFloat32, {2, 16, 7, 6}, 21),
            test::random_tensor(DataType::kFloat32, {16, 12, 3, 3}, 22, -0.5, 0.5),
            test::random_tensor(DataType::kFloat32, {24}, 23)},
           {false, true, true},
           make_attrs({{"strides", Ints{2, 2}},
                       {"pads", Ints{1, 0, 0, 1}},
                       {"group", int64_t{2}},
                       {"output_padding", Ints{1, 1}},
                       {"activation", std::string("elu")},
                       {"activation_alpha", 0.5}}));
  const HostTensor want = run_tactic(d, d.values, "reference");
  const auto cl = TensorFormat::kChannelsLast, lin = TensorFormat::kLinear;
  const HostTensor got =
      run_tactic(d, {to_channels_last(d.values[0]), d.values[1], d.values[2]}, "onednn", Formats::all(cl));
  expect_close(from_channels_last(got), want, sum_atol(8 * 9), "channels-last deconv");
  const HostTensor mixed = run_tactic(d, d.values, "onednn", Formats{lin, lin, cl});
  expect_close(from_channels_last(mixed), want, sum_atol(8 * 9), "linear x, channels-last y deconv");
}

// ---- Pooling --------------------------------------------------------------------------------

TEST(OnednnPooling, ChannelsLastMatchesReference) {
  Direct d(kLayerPooling, {test::random_tensor(DataType::kFloat32, {2, 13, 9, 10}, 11)}, {false},
           make_attrs({{"mode", std::string("average")},
                       {"kernel", Ints{3, 3}},
                       {"strides", Ints{2, 2}},
                       {"pads", Ints{1, 0, 1, 1}}}));
  const HostTensor want = run_tactic(d, d.values, "reference");
  const auto cl = TensorFormat::kChannelsLast, lin = TensorFormat::kLinear;
  const HostTensor got = run_tactic(d, {to_channels_last(d.values[0])}, "onednn", Formats::all(cl));
  expect_close(from_channels_last(got), want, 1e-5, "channels-last pooling");
  const HostTensor mixed = run_tactic(d, {d.values[0]}, "onednn", Formats{lin, lin, cl});
  expect_close(from_channels_last(mixed), want, 1e-5, "linear x, channels-last y pooling");
  const HostTensor mixed2 = run_tactic(d, {to_channels_last(d.values[0])}, "onednn", Formats{cl, lin, lin});
  expect_close(mixed2, want, 1e-5, "channels-last x, linear y pooling");
}

}  // namespace
}  // namespace kiln

#endif  // KILN_HAVE_ONEDNN
