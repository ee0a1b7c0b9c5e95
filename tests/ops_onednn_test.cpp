// Tests of the oneDNN CPU tactics (src/backends/cpu/*_onednn.cpp): Convolution, Deconvolution,
// Pooling, MatrixMultiply and Gemm. Most cases go through the op harness, which runs the
// "onednn" tactic against the reference oracle on awkward shapes (odd sizes, batch 3, groups,
// depthwise, dilations, strides, asymmetric pads, every fused activation, residual, 1-D/3-D,
// ceil_mode, count_include_pad, batch broadcast, transposes) with guard bytes around outputs and
// workspace. A few tiny cases are checked against numbers computed here by hand, independent of
// the reference; others drive the kernel directly for what the harness does not cover
// (channels-last tensors, re-preparing for other shapes, in-place residual).
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

using test::InputSpec;
using test::OpCase;
using test::Outcome;
using Ints = std::vector<int64_t>;

Attributes make_attrs(std::initializer_list<std::pair<const std::string, AttrValue>> values) {
  Attributes a;
  for (const auto& [k, v] : values) a.set(k, v);
  return a;
}

InputSpec data(const Dims& dims) {
  InputSpec s;
  s.dims = dims;
  return s;
}
InputSpec weights(const Dims& dims) {
  InputSpec s = data(dims);
  s.constant = true;
  s.low = -0.5;
  s.high = 0.5;
  return s;
}
InputSpec omitted() {
  InputSpec s;
  s.omitted = true;
  return s;
}

// Absolute tolerance for sums of `terms` products of values up to ~2 in magnitude: float32
// accumulation in another order differs by about eps * sqrt(terms) * magnitude.
double sum_atol(int64_t terms) { return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(terms))) * 2.0; }

const test::KernelResult* find_result(const std::vector<test::KernelResult>& results, const std::string& tactic) {
  for (const auto& r : results) {
    if (r.tactic == tactic) return &r;
  }
  return nullptr;
}

// The onednn tactic must accept the case and match the reference.
void expect_onednn_matches(const OpCase& c) {
  const auto results = test::run_op_case(c);
  const auto* ref = find_result(results, "reference");
  ASSERT_NE(ref, nullptr) << c.name;
  ASSERT_EQ(ref->outcome, Outcome::kPassed) << c.name << ": reference: " << ref->message;
  const auto* r = find_result(results, "onednn");
  ASSERT_NE(r, nullptr) << c.name << ": no onednn kernel registered for " << c.layer_type;
  EXPECT_EQ(r->outcome, Outcome::kPassed) << c.name << ": " << r->message << " (max abs err " << r->stats.max_abs
                                          << ", max rel err " << r->stats.max_rel << ")";
}

// The onednn tactic must decline the case (so the reference runs).
void expect_onednn_declines(const OpCase& c) {
  const auto results = test::run_op_case(c);
  const auto* r = find_result(results, "onednn");
  ASSERT_NE(r, nullptr) << c.name;
  EXPECT_EQ(r->outcome, Outcome::kUnsupported) << c.name << ": " << r->message;
}

TEST(OnednnRegistry, TacticsRegisteredWithPriorityAboveReference) {
  for (const char* type : {kLayerConvolution, kLayerDeconvolution, kLayerPooling, kLayerMatrixMultiply, kLayerGemm}) {
    const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, type, "onednn");
    ASSERT_NE(e, nullptr) << type;
    EXPECT_EQ(e->priority, 100) << type;
    // onednn is chosen before the reference; only a narrower specialist (Pooling's direct NCHW
    // max-pool "fast" tactic, whose supports() is stricter) may rank above it.
    const auto all = KernelRegistry::instance().find(DeviceType::kCPU, type);
    ASSERT_FALSE(all.empty());
    size_t onednn_at = all.size(), reference_at = all.size();
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i]->tactic == "onednn") onednn_at = i;
      if (all[i]->tactic == "reference") reference_at = i;
    }
    EXPECT_LT(onednn_at, reference_at) << type;
    if (std::string(type) != kLayerPooling) {
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

HostTensor tensor(const Dims& dims, std::vector<float> v) { return HostTensor::from_vector(DataType::kFloat32, dims, v); }

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
            make_attrs({{"mode", std::string("average")}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                        {"pads", Ints{1, 1, 0, 0}}}));
  // windows rows {0,1} x cols {0,1} -> (0+1+4+5)/4; rows {0,1} x cols {1,2,3} -> (1+2+3+5+6+7)/6; ...
  expect_close(run_tactic(av, av.values, "onednn"), tensor({1, 1, 2, 2}, {2.5f, 4.0f, 8.5f, 10.0f}), 1e-5,
               "average exclude pad");
  // count_include_pad: the window sums 10, 24, 51, 90 divided by 9 (taps inside the padded extent).
  Direct ai(kLayerPooling, {tensor({1, 1, 4, 4}, xv)}, {false},
            make_attrs({{"mode", std::string("average")}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                        {"pads", Ints{1, 1, 0, 0}}, {"count_include_pad", int64_t{1}}}));
  expect_close(run_tactic(ai, ai.values, "onednn"), tensor({1, 1, 2, 2}, {10.f / 9, 24.f / 9, 51.f / 9, 10.f}),
               1e-5, "average include pad");
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
           {false, true, false},
           make_attrs({{"alpha", 0.5}, {"beta", 2.0}, {"activation", std::string("relu")}}));
  // AB = [[1,-2],[3,-4]] -> 0.5AB + 2C = [[2.5,-21],[3.5,-22]] -> relu.
  expect_close(run_tactic(d, d.values, "onednn"), tensor({2, 2}, {2.5f, 0.f, 3.5f, 0.f}), 1e-5, "gemm alpha/beta");
  // trans_a, C as bias (alpha = beta = 1): A^T = [[1,3],[2,4]]; A^T B = [[1,-3],[2,-4]]; + C [M,1] = [[1],[2]].
  Direct b(kLayerGemm, {tensor({2, 2}, {1, 2, 3, 4}), tensor({2, 2}, {1, 0, 0, -1}), tensor({2, 1}, {1, 2})},
           {false, true, true}, make_attrs({{"trans_a", int64_t{1}}}));
  expect_close(run_tactic(b, b.values, "onednn"), tensor({2, 2}, {2, -2, 4, -2}), 1e-5, "gemm trans_a + bias");
}

// ---- Convolution against the reference ------------------------------------------------------

OpCase conv_case(const std::string& name, const Dims& x, const Dims& w, Attributes attrs, bool bias = true) {
  OpCase c;
  c.name = name;
  c.layer_type = kLayerConvolution;
  c.inputs = {data(x), weights(w)};
  if (bias) c.inputs.push_back(weights({w[0]}));
  c.attrs = std::move(attrs);
  c.atol = sum_atol(w.volume() / w[0]);
  return c;
}

TEST(OnednnConv, MatchesReferenceOnAwkwardShapes) {
  expect_onednn_matches(conv_case("conv_3x3_batch3_odd", {3, 5, 13, 13}, {7, 5, 3, 3}, make_attrs({{"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(conv_case("conv_wide_channels", {1, 64, 14, 14}, {64, 64, 3, 3},
                                  make_attrs({{"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(conv_case("conv_13_channels_1x1", {2, 13, 13, 13}, {19, 13, 1, 1}, make_attrs({}), false));
  expect_onednn_matches(conv_case("conv_stride2_asym_pads", {3, 6, 13, 12}, {8, 6, 3, 3},
                                  make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{0, 1, 2, 1}}})));
  expect_onednn_matches(conv_case("conv_dilated", {2, 4, 13, 11}, {5, 4, 3, 3},
                                  make_attrs({{"dilations", Ints{2, 3}}, {"pads", Ints{2, 1, 1, 3}}})));
  expect_onednn_matches(conv_case("conv_groups", {2, 6, 9, 9}, {9, 2, 3, 3},
                                  make_attrs({{"group", int64_t{3}}, {"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(conv_case("conv_depthwise_s2", {3, 8, 13, 13}, {8, 1, 3, 3},
                                  make_attrs({{"group", int64_t{8}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(conv_case("conv_depthwise_wide", {1, 32, 15, 15}, {32, 1, 5, 5},
                                  make_attrs({{"group", int64_t{32}}, {"pads", Ints{2, 2, 2, 2}}})));
  expect_onednn_matches(conv_case("conv_depthwise_multiplier", {2, 8, 11, 11}, {16, 1, 3, 3},
                                  make_attrs({{"group", int64_t{8}}})));
  expect_onednn_matches(conv_case("conv_1d", {3, 5, 127}, {4, 5, 5},
                                  make_attrs({{"strides", Ints{2}}, {"pads", Ints{2, 1}}, {"dilations", Ints{2}}})));
  expect_onednn_matches(conv_case("conv_3d", {2, 3, 7, 8, 9}, {4, 3, 3, 3, 3},
                                  make_attrs({{"strides", Ints{1, 2, 1}}, {"pads", Ints{1, 1, 1, 1, 0, 1}}})));
  expect_onednn_matches(conv_case("conv_3d_grouped", {1, 4, 5, 6, 7}, {6, 2, 1, 3, 3},
                                  make_attrs({{"group", int64_t{2}}, {"pads", Ints{0, 1, 1, 0, 1, 1}}})));
  expect_onednn_matches(conv_case("conv_7x7_s2_first_layer", {1, 3, 37, 37}, {16, 3, 7, 7},
                                  make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{3, 3, 3, 3}}})));
}

TEST(OnednnConv, NonConstantWeights) {
  OpCase c = conv_case("conv_runtime_weights", {2, 16, 9, 9}, {24, 16, 3, 3}, make_attrs({{"pads", Ints{1, 1, 1, 1}}}));
  c.inputs[1].constant = false;
  c.inputs[2].constant = false;
  expect_onednn_matches(c);
  OpCase g = conv_case("conv_runtime_weights_groups", {2, 16, 9, 9}, {16, 4, 3, 3},
                       make_attrs({{"group", int64_t{4}}, {"strides", Ints{2, 2}}}));
  g.inputs[1].constant = false;
  expect_onednn_matches(g);
}

TEST(OnednnConv, Residual) {
  OpCase c = conv_case("conv_residual", {3, 16, 13, 13}, {16, 16, 3, 3}, make_attrs({{"pads", Ints{1, 1, 1, 1}}}));
  c.inputs.push_back(data({3, 16, 13, 13}));
  expect_onednn_matches(c);
  OpCase r = conv_case("conv_residual_relu_no_bias", {2, 8, 13, 13}, {12, 8, 3, 3},
                       make_attrs({{"strides", Ints{2, 2}}, {"activation", std::string("relu")}}), false);
  r.inputs.push_back(omitted());
  r.inputs.push_back(data({2, 12, 6, 6}));
  expect_onednn_matches(r);
  OpCase s = conv_case("conv_residual_silu_1x1", {1, 64, 7, 7}, {32, 64, 1, 1},
                       make_attrs({{"activation", std::string("silu")}}));
  s.inputs.push_back(data({1, 32, 7, 7}));
  expect_onednn_matches(s);
}

struct ActCase {
  const char* kind;
  double alpha, beta;
  bool supported;
};

const std::vector<ActCase>& activation_cases() {
  static const std::vector<ActCase> cases = {
      {"relu", 0, 0, true},        {"sigmoid", 0, 0, true},       {"tanh", 0, 0, true},
      {"leaky_relu", 0.1, 0, true}, {"elu", 0.7, 0, true},          {"selu", 1.67326, 1.0507, true},
      {"softplus", 0, 0, true},    {"clip", -0.5, 1.5, true},     {"hard_sigmoid", 0.2, 0.5, true},
      {"hard_swish", 0, 0, true},  {"silu", 0, 0, true},          {"swish", 1.7, 0, true},
      {"gelu_erf", 0, 0, true},    {"gelu_tanh", 0, 0, true},     {"mish", 0, 0, true},
      {"celu", 0.8, 0, true},      {"celu", -0.8, 0, false},      {"softsign", 0, 0, false},
      {"thresholded_relu", 0.3, 0, false},
  };
  return cases;
}

TEST(OnednnConv, EveryFusedActivation) {
  for (const ActCase& a : activation_cases()) {
    for (bool residual : {false, true}) {
      OpCase c = conv_case(std::string("conv_act_") + a.kind + (residual ? "_residual" : "") + (a.alpha < 0 ? "_neg" : ""),
                           {2, 8, 9, 9}, {16, 8, 3, 3},
                           make_attrs({{"pads", Ints{1, 1, 1, 1}},
                                       {"activation", std::string(a.kind)},
                                       {"activation_alpha", a.alpha},
                                       {"activation_beta", a.beta}}));
      if (residual) c.inputs.push_back(data({2, 16, 9, 9}));
      if (a.supported) {
        expect_onednn_matches(c);
      } else {
        expect_onednn_declines(c);
      }
    }
  }
}

TEST(OnednnConv, DeclinesWhatItCannotRun) {
  OpCase c = conv_case("conv_fp16", {1, 4, 5, 5}, {4, 4, 3, 3}, make_attrs({}));
  for (auto& in : c.inputs) in.type = DataType::kFloat16;
  c.rtol = 1e-2;
  c.atol = 1e-2;
  expect_onednn_declines(c);
}

// Channels-last tensors (also mixed with linear ones); compare with the reference on NCHW data.
TEST(OnednnConv, ChannelsLastMatchesReference) {
  Direct d(kLayerConvolution,
           {test::random_tensor(DataType::kFloat32, {2, 16, 11, 10}, 1),
            test::random_tensor(DataType::kFloat32, {24, 16, 3, 3}, 2, -0.5, 0.5),
            test::random_tensor(DataType::kFloat32, {24}, 3), test::random_tensor(DataType::kFloat32, {2, 24, 6, 5}, 4)},
           {false, true, true, false},
           make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 0}}, {"activation", std::string("gelu_erf")}}));
  const HostTensor want = run_tactic(d, d.values, "reference");
  const auto cl = TensorFormat::kChannelsLast, lin = TensorFormat::kLinear;
  for (const Formats f : {Formats::all(cl), Formats{lin, cl, cl}, Formats{cl, lin, lin}, Formats{lin, lin, cl},
                          Formats{cl, cl, lin}}) {
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
    std::vector<HostTensor> vals = {test::random_tensor(DataType::kFloat32, x, static_cast<uint64_t>(x.volume())), w, b};
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

// ---- Deconvolution --------------------------------------------------------------------------

OpCase deconv_case(const std::string& name, const Dims& x, const Dims& w, int64_t group, Attributes attrs,
                   bool bias = true) {
  OpCase c;
  c.name = name;
  c.layer_type = kLayerDeconvolution;
  c.inputs = {data(x), weights(w)};
  if (bias) c.inputs.push_back(weights({w[1] * group}));
  attrs.set("group", group);
  c.attrs = std::move(attrs);
  c.atol = sum_atol(w.volume() / w[1]);
  return c;
}

TEST(OnednnDeconv, MatchesReferenceOnAwkwardShapes) {
  expect_onednn_matches(deconv_case("deconv_s2_outpad", {3, 4, 7, 7}, {4, 3, 3, 3}, 1,
                                    make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
                                                {"output_padding", Ints{1, 1}}})));
  expect_onednn_matches(deconv_case("deconv_groups", {2, 4, 5, 6}, {4, 3, 3, 3}, 2,
                                    make_attrs({{"strides", Ints{2, 1}}, {"pads", Ints{0, 1, 1, 0}}})));
  expect_onednn_matches(deconv_case("deconv_depthwise", {1, 8, 7, 7}, {8, 1, 4, 4}, 8,
                                    make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(deconv_case("deconv_dilated_asym", {2, 3, 6, 5}, {3, 5, 3, 2}, 1,
                                    make_attrs({{"dilations", Ints{2, 3}}, {"pads", Ints{2, 0, 1, 1}}})));
  expect_onednn_matches(deconv_case("deconv_outpad_beyond_pad", {1, 4, 5, 5}, {4, 6, 3, 3}, 1,
                                    make_attrs({{"strides", Ints{3, 3}}, {"output_padding", Ints{2, 1}}}), false));
  expect_onednn_matches(deconv_case("deconv_1d", {3, 5, 13}, {5, 4, 5}, 1,
                                    make_attrs({{"strides", Ints{2}}, {"pads", Ints{1, 2}}})));
  expect_onednn_matches(deconv_case("deconv_3d", {1, 4, 4, 5, 3}, {4, 2, 3, 3, 2}, 1,
                                    make_attrs({{"strides", Ints{2, 1, 2}}, {"pads", Ints{1, 0, 0, 0, 1, 1}}})));
  expect_onednn_matches(deconv_case("deconv_relu_wide", {1, 32, 9, 9}, {32, 16, 2, 2}, 1,
                                    make_attrs({{"strides", Ints{2, 2}}, {"activation", std::string("leaky_relu")},
                                                {"activation_alpha", 0.2}})));
  OpCase rt = deconv_case("deconv_runtime_weights", {2, 6, 5, 5}, {6, 4, 3, 3}, 2,
                          make_attrs({{"strides", Ints{2, 2}}}));
  rt.inputs[1].constant = false;
  expect_onednn_matches(rt);
}

TEST(OnednnDeconv, ChannelsLastMatchesReference) {
  Direct d(kLayerDeconvolution,
           {test::random_tensor(DataType::kFloat32, {2, 16, 7, 6}, 21),
            test::random_tensor(DataType::kFloat32, {16, 12, 3, 3}, 22, -0.5, 0.5),
            test::random_tensor(DataType::kFloat32, {24}, 23)},
           {false, true, true},
           make_attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}, {"group", int64_t{2}},
                       {"output_padding", Ints{1, 1}}, {"activation", std::string("elu")}, {"activation_alpha", 0.5}}));
  const HostTensor want = run_tactic(d, d.values, "reference");
  const auto cl = TensorFormat::kChannelsLast, lin = TensorFormat::kLinear;
  const HostTensor got = run_tactic(d, {to_channels_last(d.values[0]), d.values[1], d.values[2]}, "onednn",
                                    Formats::all(cl));
  expect_close(from_channels_last(got), want, sum_atol(8 * 9), "channels-last deconv");
  const HostTensor mixed = run_tactic(d, d.values, "onednn", Formats{lin, lin, cl});
  expect_close(from_channels_last(mixed), want, sum_atol(8 * 9), "linear x, channels-last y deconv");
}

TEST(OnednnDeconv, EveryFusedActivation) {
  for (const ActCase& a : activation_cases()) {
    OpCase c = deconv_case(std::string("deconv_act_") + a.kind + (a.alpha < 0 ? "_neg" : ""), {2, 6, 5, 5},
                           {6, 5, 3, 3}, 1,
                           make_attrs({{"strides", Ints{2, 2}}, {"activation", std::string(a.kind)},
                                       {"activation_alpha", a.alpha}, {"activation_beta", a.beta}}));
    if (a.supported) {
      expect_onednn_matches(c);
    } else {
      expect_onednn_declines(c);
    }
  }
}

// ---- Pooling --------------------------------------------------------------------------------

OpCase pool_case(const std::string& name, const Dims& x, Attributes attrs) {
  OpCase c;
  c.name = name;
  c.layer_type = kLayerPooling;
  c.inputs = {data(x)};
  c.attrs = std::move(attrs);
  return c;
}

TEST(OnednnPooling, MatchesReferenceOnAwkwardShapes) {
  const auto max = std::string("max"), avg = std::string("average");
  expect_onednn_matches(pool_case("max_3x3_s2_p1", {3, 5, 13, 13},
                                  make_attrs({{"mode", max}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(pool_case("max_ceil_overhang", {2, 3, 14, 14},
                                  make_attrs({{"mode", max}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"ceil_mode", int64_t{1}}})));
  expect_onednn_matches(pool_case("max_ceil_pads", {2, 3, 13, 12},
                                  make_attrs({{"mode", max}, {"kernel", Ints{3, 2}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 0, 0, 1}}, {"ceil_mode", int64_t{1}}})));
  expect_onednn_matches(pool_case("max_dilated", {2, 3, 13, 13},
                                  make_attrs({{"mode", max}, {"kernel", Ints{3, 3}}, {"dilations", Ints{2, 2}},
                                              {"pads", Ints{1, 2, 2, 1}}})));
  expect_onednn_matches(pool_case("avg_exclude_pad_asym", {3, 5, 13, 11},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{0, 1, 2, 1}}})));
  expect_onednn_matches(pool_case("avg_include_pad", {3, 5, 13, 11},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}}})));
  expect_onednn_matches(pool_case("avg_exclude_ceil", {2, 4, 14, 13},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}})));
  expect_onednn_matches(pool_case("avg_include_ceil_no_pads", {2, 4, 14, 13},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}})));
  expect_onednn_matches(pool_case("avg_include_ceil_no_overhang", {2, 4, 13, 13},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}},
                                              {"count_include_pad", int64_t{1}}})));
  expect_onednn_matches(pool_case("avg_dilated", {2, 3, 13, 13},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{2, 3}}, {"dilations", Ints{3, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}})));
  expect_onednn_matches(pool_case("global_avg", {3, 7, 13, 11}, make_attrs({{"mode", avg}, {"global", int64_t{1}}})));
  expect_onednn_matches(pool_case("global_max", {3, 7, 13, 11}, make_attrs({{"mode", max}, {"global", int64_t{1}}})));
  expect_onednn_matches(pool_case("max_1d", {3, 5, 127},
                                  make_attrs({{"mode", max}, {"kernel", Ints{4}}, {"strides", Ints{3}}, {"pads", Ints{1, 2}}})));
  expect_onednn_matches(pool_case("avg_3d", {2, 3, 7, 8, 9},
                                  make_attrs({{"mode", avg}, {"kernel", Ints{2, 3, 3}}, {"strides", Ints{2, 2, 1}},
                                              {"pads", Ints{0, 1, 1, 1, 1, 0}}})));
  expect_onednn_matches(pool_case("max_resnet_stem", {1, 64, 56, 56},
                                  make_attrs({{"mode", max}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}})));
}

TEST(OnednnPooling, DeclinesIncludePadDivisorOnnxClips) {
  // count_include_pad with pads and a ceil window past the end padding: ONNX clips the divisor
  // there, oneDNN would divide by the full window.
  expect_onednn_declines(pool_case("avg_include_ceil_overhang", {2, 4, 14, 14},
                                   make_attrs({{"mode", std::string("average")}, {"kernel", Ints{3, 3}},
                                               {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
                                               {"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}})));
}

TEST(OnednnPooling, ChannelsLastMatchesReference) {
  Direct d(kLayerPooling, {test::random_tensor(DataType::kFloat32, {2, 13, 9, 10}, 11)}, {false},
           make_attrs({{"mode", std::string("average")}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}},
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

// ---- MatrixMultiply -------------------------------------------------------------------------

OpCase matmul_case(const std::string& name, const Dims& a, const Dims& b, bool ta = false, bool tb = false,
                   bool b_constant = false) {
  OpCase c;
  c.name = name;
  c.layer_type = kLayerMatrixMultiply;
  c.inputs = {data(a), data(b)};
  c.inputs[1].constant = b_constant;
  c.attrs = make_attrs({{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}});
  const int64_t k = a.rank() == 1 ? a[0] : (ta ? a[a.rank() - 2] : a[a.rank() - 1]);
  c.atol = 2 * sum_atol(k);
  return c;
}

TEST(OnednnMatmul, MatchesReferenceOnAwkwardShapes) {
  expect_onednn_matches(matmul_case("mm_2d_odd", {13, 127}, {127, 17}));
  expect_onednn_matches(matmul_case("mm_batch_fold", {3, 13, 17}, {17, 11}));
  expect_onednn_matches(matmul_case("mm_batch_fold_const_b", {3, 13, 17}, {17, 11}, false, false, true));
  expect_onednn_matches(matmul_case("mm_batch", {3, 13, 17}, {3, 17, 5}));
  expect_onednn_matches(matmul_case("mm_batch_broadcast_both", {2, 1, 5, 7}, {3, 7, 4}));
  expect_onednn_matches(matmul_case("mm_broadcast_a", {5, 7}, {3, 7, 4}));
  expect_onednn_matches(matmul_case("mm_transpose_a", {3, 7, 5}, {7, 4}, true, false));
  expect_onednn_matches(matmul_case("mm_transpose_b", {3, 5, 7}, {3, 4, 7}, false, true));
  expect_onednn_matches(matmul_case("mm_transpose_both_broadcast", {2, 1, 7, 5}, {1, 3, 4, 7}, true, true));
  expect_onednn_matches(matmul_case("mm_transpose_b_const", {3, 13, 17}, {11, 17}, false, true, true));
  expect_onednn_matches(matmul_case("mm_const_b_batched", {3, 13, 17}, {3, 17, 11}, false, false, true));
  expect_onednn_matches(matmul_case("mm_vec_mat", {7}, {3, 7, 4}));
  expect_onednn_matches(matmul_case("mm_mat_vec", {3, 5, 7}, {7}));
  expect_onednn_matches(matmul_case("mm_vec_vec", {127}, {127}));
  expect_onednn_matches(matmul_case("mm_rank5", {2, 1, 3, 4, 6}, {1, 2, 1, 6, 5}));
}

// ---- Gemm -----------------------------------------------------------------------------------

OpCase gemm_case(const std::string& name, int64_t m, int64_t k, int64_t n, bool ta, bool tb, std::optional<Dims> c_dims,
                 double alpha = 1.0, double beta = 1.0, const std::string& act = "", bool b_constant = true) {
  OpCase c;
  c.name = name;
  c.layer_type = kLayerGemm;
  c.inputs = {data(ta ? Dims{k, m} : Dims{m, k}), weights(tb ? Dims{n, k} : Dims{k, n})};
  c.inputs[1].constant = b_constant;
  if (c_dims) c.inputs.push_back(weights(*c_dims));
  c.attrs = make_attrs({{"alpha", alpha}, {"beta", beta}, {"trans_a", int64_t{ta}}, {"trans_b", int64_t{tb}}});
  if (!act.empty()) c.attrs.set("activation", act);
  c.atol = sum_atol(k) * std::max(1.0, std::fabs(alpha));
  return c;
}

TEST(OnednnGemm, MatchesReferenceOnAwkwardShapes) {
  expect_onednn_matches(gemm_case("gemm_plain", 13, 127, 17, false, false, std::nullopt));
  expect_onednn_matches(gemm_case("gemm_fc_bias_row", 1, 127, 13, false, true, Dims{13}));
  expect_onednn_matches(gemm_case("gemm_fc_batch3_relu", 3, 64, 127, false, true, Dims{1, 127}, 1.0, 1.0, "relu"));
  expect_onednn_matches(gemm_case("gemm_bias_col", 13, 17, 11, true, false, Dims{13, 1}));
  expect_onednn_matches(gemm_case("gemm_bias_full", 13, 17, 11, true, true, Dims{13, 11}));
  expect_onednn_matches(gemm_case("gemm_bias_scalar", 13, 17, 11, false, false, Dims{}));
  expect_onednn_matches(gemm_case("gemm_alpha_beta_row", 13, 17, 11, false, true, Dims{11}, 0.5, 2.0));
  expect_onednn_matches(gemm_case("gemm_alpha_beta_col", 13, 17, 11, true, false, Dims{13, 1}, -1.5, 0.25, "tanh"));
  expect_onednn_matches(gemm_case("gemm_alpha_only", 13, 17, 11, true, true, std::nullopt, 3.0, 1.0, "gelu_tanh"));
  expect_onednn_matches(gemm_case("gemm_beta_zero_ignores_c", 5, 7, 3, false, false, Dims{5, 3}, 1.0, 0.0));
  expect_onednn_matches(gemm_case("gemm_runtime_b", 13, 17, 11, true, true, Dims{1, 11}, 1.0, 1.0, "", false));
  expect_onednn_matches(gemm_case("gemm_runtime_b_alpha", 13, 17, 11, false, false, Dims{13, 11}, 2.0, 3.0, "", false));
}

TEST(OnednnGemm, EveryFusedActivation) {
  for (const ActCase& a : activation_cases()) {
    OpCase c = gemm_case(std::string("gemm_act_") + a.kind + (a.alpha < 0 ? "_neg" : ""), 7, 31, 13, false, true,
                         Dims{13});
    c.attrs.set("activation", std::string(a.kind));
    c.attrs.set("activation_alpha", a.alpha);
    c.attrs.set("activation_beta", a.beta);
    if (a.supported) {
      expect_onednn_matches(c);
    } else {
      expect_onednn_declines(c);
    }
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_HAVE_ONEDNN
