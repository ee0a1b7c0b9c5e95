// The "onednn_winograd" CPU tactic of Convolution (src/backends/cpu/conv_onednn.cpp): oneDNN's
// Winograd F(2x2, 3x3) for 3x3, stride 1, ungrouped, undilated convolutions with at least 32 input
// channels on images of at least 14x14, against the reference kernel (the op harness: guard bytes, NaN checks, the
// reference as oracle), with bias, padding or none, a fused ReLU and a residual sum. The op table's convolution cases
// are smaller than 14x14, so they do not reach this tactic. Skips where oneDNN has no Winograd kernel for the CPU (it
// has one for AVX-512 only).
//
// kiln's own channels-last CPU convolutions, "winograd_avx2" (src/backends/cpu/conv_winograd_cpu.cpp,
// F(4x4, 3x3)) and "igemm_avx2" (src/backends/cpu/conv_igemm_cpu.cpp, an indirect GEMM for any
// kernel size, stride and dilation), are run directly on channels-last tensors against the
// reference kernel on linear ones: odd channel counts and sizes, pads, strides, dilations,
// batches, bias, residual (also in the output's own memory), every activation they compute,
// non-constant weights, 1-3 threads, more than one block, guard bytes around the output and the
// workspace, and a second instance sharing the prepared weights. The stem kernels
// "nchw_direct_avx2" and "nchw_direct_avx512" (src/backends/cpu/conv_nchw_direct_cpu.cpp) run the
// same way with the input linear (NCHW) and the output channels-last, and "pointwise_packed"
// (src/backends/cpu/matmul_avx2.cpp: 1x1 convolutions over at most 64 pixels as a packed
// product) on channels-last tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "src/backends/kernel.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

// A kh x kw convolution case of x to k channels with an [oh, ow] output: weights in [-0.3, 0.3]
// (constant), a constant bias unless `bias` is false, a residual input when `residual`.
test::OpCase conv_case(const std::string& name, const Dims& x, int64_t k, int64_t oh, int64_t ow, bool bias,
                       bool residual, int64_t kh = 3, int64_t kw = 3) {
  test::OpCase c;
  c.name = name;
  c.layer_type = kLayerConvolution;
  test::InputSpec xs, w, b, r;
  xs.dims = x;
  w.dims = Dims{k, x[1], kh, kw};
  w.constant = true;
  w.low = -0.3;
  w.high = 0.3;
  b.dims = Dims{k};
  b.constant = true;
  b.omitted = !bias;
  r.dims = Dims{x[0], k, oh, ow};
  c.inputs = {xs, w, b};
  if (residual) c.inputs.push_back(r);
  return c;
}

struct WinogradCase {
  int c, m, hw;
  bool pad, relu, residual;
};

TEST(ConvWinograd, MatchesTheReferenceKernel) {
  if (!KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "onednn_winograd")) {
    GTEST_SKIP() << "kiln was built without oneDNN";
  }
  const std::vector<WinogradCase> cases = {
      {32, 32, 14, true, false, false}, {64, 64, 28, true, true, false}, {32, 16, 16, false, false, false},
      {64, 64, 28, true, true, true},   {48, 24, 20, true, false, true},
  };
  int ran = 0;
  for (const WinogradCase& k : cases) {
    const int out = k.pad ? k.hw : k.hw - 2;
    test::OpCase c =
        conv_case("winograd_c" + std::to_string(k.c) + "_m" + std::to_string(k.m) + "_" + std::to_string(k.hw) +
                      (k.pad ? "_pad" : "") + (k.relu ? "_relu" : "") + (k.residual ? "_residual" : ""),
                  Dims{1, k.c, k.hw, k.hw}, k.m, out, out, true, k.residual);
    if (k.pad) c.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    if (k.relu) c.attrs.set("activation", std::string("relu"));
    c.rtol = 1e-4;
    c.atol = 1e-4;
    const auto results =
        test::run_op_case(c, DeviceType::kCPU, [](const std::string& t) { return t == "onednn_winograd"; });
    for (const test::KernelResult& res : results) {
      if (res.tactic != "onednn_winograd") continue;
      EXPECT_NE(res.outcome, test::Outcome::kFailed) << c.name << ": " << res.message;
      if (res.outcome == test::Outcome::kPassed) {
        ++ran;
        // Winograd's transforms round more than a direct sum: outputs here reach ~5, errors stay
        // under 2e-4 absolute (about 3e-5 of the output range; the direct kernel's are ~1e-6).
        EXPECT_LT(res.stats.max_abs, 2e-4) << c.name;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "oneDNN has no Winograd convolution for this CPU (it needs AVX-512)";
  EXPECT_EQ(ran, static_cast<int>(cases.size())) << "oneDNN declined Winograd for some cases it ran for others";
}

TEST(ConvWinograd, DeclinesWhatItDoesNotCover) {
  if (!KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "onednn_winograd")) {
    GTEST_SKIP() << "kiln was built without oneDNN";
  }
  struct Other {
    std::string name;
    Dims x, w;
    Attributes attrs;
  };
  Attributes stride2, group2;
  stride2.set("strides", std::vector<int64_t>{2, 2});
  group2.set("group", int64_t{2});
  const std::vector<Other> others = {
      {"7x7_image", Dims{1, 64, 7, 7}, Dims{64, 64, 3, 3}, {}},
      {"stride_2", Dims{1, 16, 28, 28}, Dims{16, 16, 3, 3}, stride2},
      {"grouped", Dims{1, 16, 28, 28}, Dims{16, 8, 3, 3}, group2},
      {"1x1_kernel", Dims{1, 16, 28, 28}, Dims{16, 16, 1, 1}, {}},
      {"16_input_channels", Dims{1, 16, 28, 28}, Dims{32, 16, 3, 3}, {}},
  };
  for (const Other& o : others) {
    test::OpCase c;
    c.name = o.name;
    c.layer_type = kLayerConvolution;
    test::InputSpec x, w;
    x.dims = o.x;
    w.dims = o.w;
    w.constant = true;
    c.inputs = {x, w};
    c.attrs = o.attrs;
    const auto results =
        test::run_op_case(c, DeviceType::kCPU, [](const std::string& t) { return t == "onednn_winograd"; });
    for (const test::KernelResult& res : results) {
      if (res.tactic == "onednn_winograd") {
        EXPECT_EQ(res.outcome, test::Outcome::kUnsupported) << o.name;
      }
    }
  }
}

}  // namespace
}  // namespace kiln

// ---- kiln's own channels-last kernels: "winograd_avx2" (F(4x4, 3x3), conv_winograd_cpu.cpp) and
// "igemm_avx2" (indirect GEMM, conv_igemm_cpu.cpp) ----

namespace kiln {
namespace {

struct WinoCase {
  std::string name;
  int64_t n, c, k, h, w;
  std::vector<int64_t> pads;  // ONNX order: top, left, bottom, right
  bool bias = true, residual = false, constant_weights = true;
  std::string activation;  // empty: none
  float alpha = 0, beta = 0;
  int threads = 2;
  // Kernel size, strides and dilations (igemm_avx2's cases; winograd_avx2 takes 3x3, 1, 1 only).
  int64_t kh = 3, kw = 3;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1};
  bool in_place = false;      // the residual in the output's memory (the planner's in-place residual)
  bool linear_input = false;  // x stays linear (NCHW): the nchw_direct tactics
  int64_t group = 1;          // c: depthwise (the depthwise tactic)
};

// Runs the case through the tactic on channels-last tensors (with guard bytes around the output
// and the workspace) and compares with the reference kernel on linear ones.
void check_channels_last_case(const std::string& tactic, const WinoCase& k) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, tactic);
  ASSERT_NE(e, nullptr);
  const int64_t oh = (k.h + k.pads[0] + k.pads[2] - k.dilations[0] * (k.kh - 1) - 1) / k.strides[0] + 1;
  const int64_t ow = (k.w + k.pads[1] + k.pads[3] - k.dilations[1] * (k.kw - 1) - 1) / k.strides[1] + 1;
  test::OpCase c = conv_case(k.name, Dims{k.n, k.c, k.h, k.w}, k.k, oh, ow, k.bias, k.residual, k.kh, k.kw);
  if (k.group != 1) {
    c.inputs[1].dims = Dims{k.k, k.c / k.group, k.kh, k.kw};
    c.attrs.set("group", k.group);
  }
  const Dims x_dims = c.inputs[0].dims, w_dims = c.inputs[1].dims, b_dims = c.inputs[2].dims, r_dims{k.n, k.k, oh, ow};
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].omitted) {
      c.inputs[i].value =
          test::random_tensor(DataType::kFloat32, c.inputs[i].dims, 1000 + i, c.inputs[i].low, c.inputs[i].high);
    }
  }
  c.attrs.set("pads", k.pads);
  c.attrs.set("strides", k.strides);
  c.attrs.set("dilations", k.dilations);
  if (!k.activation.empty()) {
    c.attrs.set("activation", k.activation);
    c.attrs.set("activation_alpha", static_cast<double>(k.alpha));
    c.attrs.set("activation_beta", static_cast<double>(k.beta));
  }
  const std::vector<HostTensor> expected = test::reference_outputs(c);
  ASSERT_EQ(expected.size(), 1u);

  Network net;
  std::vector<Tensor*> ins;
  ins.push_back(net.add_input("x", DataType::kFloat32, x_dims));
  ins.push_back(net.add_constant(c.inputs[1].value, "w")->output(0));
  ins.push_back(k.bias ? net.add_constant(c.inputs[2].value, "b")->output(0) : nullptr);
  if (k.residual) ins.push_back(net.add_input("r", DataType::kFloat32, r_dims));
  Layer* layer = net.add_layer(kLayerConvolution, ins, 1, c.attrs, "conv");
  layer->output(0)->set_format(TensorFormat::kChannelsLast);

  const TensorFormat x_format = k.linear_input ? TensorFormat::kLinear : TensorFormat::kChannelsLast;
  const HostTensor x_last = k.linear_input ? c.inputs[0].value : test::convert_format(c.inputs[0].value, true);
  const HostTensor r_last = k.residual ? test::convert_format(c.inputs[3].value, true) : HostTensor();
  std::vector<TensorDesc> descs = {TensorDesc{DataType::kFloat32, x_dims, x_format, true, nullptr},
                                   TensorDesc{DataType::kFloat32, w_dims, TensorFormat::kLinear, true,
                                              k.constant_weights ? &c.inputs[1].value : nullptr},
                                   TensorDesc{DataType::kFloat32, b_dims, TensorFormat::kLinear, k.bias, nullptr}};
  if (k.residual) descs.push_back(TensorDesc{DataType::kFloat32, r_dims, TensorFormat::kChannelsLast, true, nullptr});
  // The kernel computes every case; supports() also weighs speed (ChoosesWhereItIsFaster below), so
  // it is not asked here.
  auto kernel = e->create(*layer);
  const Dims y_dims{k.n, k.k, oh, ow};
  kernel->prepare(*layer, descs, {TensorDesc{DataType::kFloat32, y_dims, TensorFormat::kChannelsLast, true, nullptr}},
                  k.threads);
  // Another instance (another shape's plan) shares the weights and computes the same.
  auto second = kernel->another_instance();
  ASSERT_NE(second, nullptr);
  second->prepare(*layer, descs, {TensorDesc{DataType::kFloat32, y_dims, TensorFormat::kChannelsLast, true, nullptr}},
                  1);

  constexpr size_t kGuard = 64;
  // Guard and fill bytes: as float32 3.4e38, so that any use of an unwritten byte shows.
  constexpr unsigned char kFill = 0x7F;
  for (Kernel* run : {kernel.get(), second.get()}) {
    const size_t ws = run->workspace_size();
    std::vector<unsigned char> ws_buf(ws + 2 * kGuard, kFill);
    std::vector<float> y_buf(static_cast<size_t>(y_dims.volume()) + 2 * kGuard / sizeof(float));
    std::memset(y_buf.data(), kFill, y_buf.size() * sizeof(float));
    float* y = y_buf.data() + kGuard / sizeof(float);
    const size_t y_bytes = static_cast<size_t>(y_dims.volume()) * sizeof(float);
    if (k.in_place) std::memcpy(y, r_last.data(), y_bytes);  // the residual where the output goes
    KernelContext ctx;
    ctx.layer = layer;
    ctx.num_threads = k.threads;
    ctx.workspace = ws ? ws_buf.data() + kGuard : nullptr;
    ctx.workspace_size = ws;
    ctx.inputs.push_back(TensorView{DataType::kFloat32, x_dims, x_format, const_cast<void*>(x_last.data())});
    ctx.inputs.push_back(
        TensorView{DataType::kFloat32, w_dims, TensorFormat::kLinear, const_cast<void*>(c.inputs[1].value.data())});
    ctx.inputs.push_back(TensorView{DataType::kFloat32, b_dims, TensorFormat::kLinear,
                                    k.bias ? const_cast<void*>(c.inputs[2].value.data()) : nullptr});
    if (k.residual) {
      ctx.inputs.push_back(TensorView{DataType::kFloat32, r_dims, TensorFormat::kChannelsLast,
                                      k.in_place ? static_cast<void*>(y) : const_cast<void*>(r_last.data())});
    }
    ctx.outputs.push_back(TensorView{DataType::kFloat32, y_dims, TensorFormat::kChannelsLast, y});
    run->execute(ctx);
    for (size_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(ws_buf[i], kFill) << k.name << ": workspace underrun";
      ASSERT_EQ(ws_buf[kGuard + ws + i], kFill) << k.name << ": workspace overrun";
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>(y_buf.data());
    for (size_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(bytes[i], kFill) << k.name << ": output underrun";
      ASSERT_EQ(bytes[kGuard + y_bytes + i], kFill) << k.name << ": output overrun";
    }
    HostTensor got_last = HostTensor::from_bytes(DataType::kFloat32, y_dims, y, y_bytes);
    const HostTensor got = test::convert_format(got_last, false);
    test::ErrorStats stats;
    std::string message;
    // Winograd's transforms round more than a direct sum (see the onednn_winograd case above);
    // outputs here reach ~10.
    EXPECT_TRUE(test::compare_tensors(got, expected[0], 1e-4, 2e-4, &stats, &message)) << k.name << ": " << message;
  }
}

// Cases both kernels run: every activation, weights that are not constant, 1 and 3 threads.
std::vector<WinoCase> common_cases() {
  const std::vector<int64_t> same{1, 1, 1, 1};
  return {
      {"silu", 1, 24, 40, 20, 20, same, true, false, true, "silu"},
      {"sigmoid", 1, 16, 16, 12, 12, same, true, false, true, "sigmoid"},
      {"clip", 1, 16, 16, 12, 12, same, true, false, true, "clip", -0.5f, 0.75f},
      {"hard_sigmoid", 1, 16, 16, 12, 12, same, false, false, true, "hard_sigmoid", 0.2f, 0.5f},
      {"hard_swish", 1, 16, 16, 12, 12, same, true, true, true, "hard_swish"},
      {"weights_not_constant", 2, 16, 32, 14, 14, same, true, true, false, "relu"},
      {"one_thread", 1, 32, 32, 15, 17, same, true, false, true, "relu", 0, 0, 1},
      {"three_threads", 2, 32, 32, 15, 17, same, true, false, true, "relu", 0, 0, 3},
  };
}

TEST(ConvWinogradAvx2, MatchesTheReferenceKernel) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<int64_t> same{1, 1, 1, 1}, none{0, 0, 0, 0};
  std::vector<WinoCase> cases = {
      {"resnet_like", 1, 64, 64, 28, 28, same, true, false, true, "relu"},
      {"residual_relu", 1, 32, 48, 16, 16, same, true, true, true, "relu"},
      // Channel counts that are not multiples of 8 / 16, sizes that are not multiples of 4.
      {"odd_channels", 2, 13, 21, 11, 9, same, true, false, true, ""},
      {"three_channels_no_pad", 1, 3, 5, 10, 7, none, false, false, true, ""},
      {"asymmetric_pads", 1, 16, 24, 13, 13, {0, 1, 2, 1}, true, false, true, "leaky_relu", 0.1f},
      {"one_pixel", 3, 8, 16, 1, 1, same, true, true, true, ""},
      // 196 tiles of 36 KiB transformed data each in blocks of U's 2.4 MB: 64 + 64 + 64 + 4 tiles.
      {"four_blocks", 1, 128, 128, 56, 56, same, true, true, true, "relu"},
      // 400 tiles of 4.5 KiB in blocks of 768 KiB: 166 + 166 + 68.
      {"three_small_blocks", 1, 16, 16, 80, 80, same, true, false, true, "silu"},
  };
  for (const WinoCase& k : common_cases()) cases.push_back(k);
  for (const WinoCase& k : cases) {
    SCOPED_TRACE(k.name);
    check_channels_last_case("winograd_avx2", k);
  }
}

TEST(ConvIgemmAvx2, MatchesTheReferenceKernel) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<int64_t> same{1, 1, 1, 1}, none{0, 0, 0, 0}, two{2, 2};
  std::vector<WinoCase> cases = {
      {"stride_2", 1, 64, 128, 28, 28, same, true, false, true, "relu"},
      // Channel counts that are not multiples of 8 / 16, odd sizes, a batch.
      {"stride_2_odd", 2, 13, 21, 11, 9, same, true, false, true, ""},
      {"no_pad_no_bias", 1, 5, 7, 10, 7, none, false, false, true, ""},
      {"asymmetric_pads", 1, 16, 24, 13, 13, {0, 1, 2, 1}, true, false, true, "leaky_relu", 0.1f},
      {"pads_wider_than_the_kernel", 1, 8, 16, 5, 4, {3, 3, 3, 3}, true, false, true, ""},
      {"narrower_than_the_kernel", 2, 8, 16, 2, 2, same, true, false, true, ""},
      {"one_pixel", 3, 8, 16, 1, 1, same, true, true, true, ""},
      // 3,136 pixels in blocks of 384: nine blocks, the last partial; 40 output channels: a
      // partial panel.
      {"nine_blocks", 1, 64, 40, 56, 56, same, true, true, true, "relu"},
      // 49 pixels, one block: its 6 panels are shared among the threads.
      {"panel_groups", 1, 256, 96, 7, 7, same, true, true, true, "relu"},
  };
  WinoCase stem{"stem_6x6_stride_2", 1, 3, 16, 32, 32, {2, 2, 2, 2}, true, false, true, "silu"};
  stem.kh = stem.kw = 6;
  stem.strides = two;
  WinoCase resnet_stem{"stem_7x7_stride_2", 2, 3, 24, 23, 19, {3, 3, 3, 3}, true, false, true, "relu"};
  resnet_stem.kh = resnet_stem.kw = 7;
  resnet_stem.strides = two;
  WinoCase dilated{"dilated_5x3", 1, 8, 20, 17, 15, {4, 2, 4, 2}, true, false, true, ""};  // one row per tap
  dilated.kh = 5;
  dilated.dilations = two;
  WinoCase strided_dilated{"strided_dilated", 1, 12, 18, 19, 16, {2, 1, 2, 1}, true, true, true, "relu"};
  strided_dilated.strides = {2, 1};
  strided_dilated.dilations = {2, 1};
  WinoCase in_place{"residual_in_the_output", 1, 32, 48, 16, 16, same, true, true, true, "relu"};
  in_place.in_place = true;
  WinoCase in_place_partial{"residual_in_the_output_partial_panel", 2, 40, 20, 9, 11, same, true, true, true, ""};
  in_place_partial.in_place = true;
  in_place_partial.strides = two;
  // 1x1 layers (taken in builds without oneDNN): ResNet-50's last layer of a block with the
  // residual, and its stride-2 downsampling layer.
  WinoCase pointwise_residual{"pointwise_residual", 1, 64, 72, 14, 13, none, true, true, true, "relu"};
  pointwise_residual.kh = pointwise_residual.kw = 1;
  WinoCase pointwise_stride_2{"pointwise_stride_2", 2, 48, 40, 15, 14, none, true, false, true, ""};
  pointwise_stride_2.kh = pointwise_stride_2.kw = 1;
  pointwise_stride_2.strides = two;
  cases.insert(cases.end(), {stem, resnet_stem, dilated, strided_dilated, in_place, in_place_partial,
                             pointwise_residual, pointwise_stride_2});
  for (const WinoCase& k : common_cases()) cases.push_back(k);
  for (WinoCase& k : cases) {
    if (k.name.rfind("stride_2", 0) == 0) k.strides = two;
    SCOPED_TRACE(k.name);
    check_channels_last_case("igemm_avx2", k);
  }
}

// The stems the nchw_direct tactics are for, and the edges of their loops: kernel rows wholly in
// the padding, columns over both edges, images narrower than the kernel, the register blocks'
// remainders (6 pixels for AVX2, 12 for AVX-512), partial panels of output channels.
std::vector<WinoCase> nchw_direct_cases() {
  const std::vector<int64_t> none{0, 0, 0, 0};
  std::vector<WinoCase> cases;
  const auto add = [&](WinoCase k, int64_t kernel, int64_t stride) {
    k.kh = k.kw = kernel;
    k.strides = {stride, stride};
    k.linear_input = true;
    cases.push_back(k);
  };
  add({"mobilenet_stem", 2, 3, 16, 32, 30, {1, 1, 1, 1}, true, false, true, "hard_swish"}, 3, 2);
  add({"squeezenet_stem", 1, 3, 64, 31, 29, none, true, false, true, "relu"}, 3, 2);
  // AVX-512 runs four full panels at a time: two groups of four, and four and a partial one.
  add({"eight_panels", 1, 3, 128, 19, 23, {1, 1, 1, 1}, true, false, true, "relu"}, 3, 2);
  add({"four_panels_and_a_partial", 2, 3, 72, 14, 31, {2, 3, 1, 0}, false, false, true, "silu"}, 5, 2);
  add({"resnet_stem_partial_panel", 1, 3, 24, 29, 37, {3, 3, 3, 3}, true, false, true, "relu"}, 7, 2);
  add({"tinyyolo_stem", 1, 3, 16, 40, 44, {2, 2, 2, 2}, true, false, true, "silu"}, 6, 2);
  add({"stride_1_one_channel", 1, 1, 8, 9, 50, {1, 1, 1, 1}, false, false, true, ""}, 3, 1);
  add({"stride_3_four_channels", 2, 4, 40, 17, 26, {1, 2, 0, 1}, true, false, true, "leaky_relu", 0.1f}, 5, 3);
  add({"pads_wider_than_the_kernel", 1, 3, 16, 5, 4, {4, 4, 4, 4}, true, false, true, "clip", -0.5f, 0.75f}, 3, 2);
  add({"narrower_than_the_kernel", 1, 2, 16, 3, 2, {2, 2, 2, 2}, true, false, true, "sigmoid"}, 5, 1);
  add({"weights_not_constant", 2, 3, 32, 16, 27, {1, 1, 1, 1}, true, false, false, "relu"}, 3, 2);
  add({"one_thread", 1, 3, 16, 20, 61, {1, 1, 1, 1}, true, false, true, "hard_sigmoid", 0.2f, 0.5f}, 3, 2);
  add({"three_threads", 3, 3, 48, 21, 23, {1, 1, 1, 1}, true, false, true, "gelu_erf"}, 3, 2);
  cases[cases.size() - 2].threads = 1;
  cases.back().threads = 3;
  return cases;
}

TEST(ConvNchwDirect, MatchesTheReferenceKernel) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  for (const char* tactic : {"nchw_direct_avx2", "nchw_direct_avx512"}) {
    if (std::string(tactic) == "nchw_direct_avx512" && !__builtin_cpu_supports("avx512f")) continue;
    for (const WinoCase& k : nchw_direct_cases()) {
      SCOPED_TRACE(std::string(tactic) + " " + k.name);
      check_channels_last_case(tactic, k);
    }
  }
}

// supports() of the nchw_direct tactic for a 3x3 stride-2 convolution of x [1, c, 32, 32] to 16
// channels: x in `x_format`, the output in `y_format`, with the given extra attributes and inputs.
bool nchw_direct_takes(const std::string& tactic, int64_t c, TensorFormat x_format, TensorFormat y_format,
                       const Attributes& extra = {}, bool residual = false, int64_t group = 1) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, tactic);
  if (!e) return false;
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, c, 32, 32});
  const HostTensor wv = test::random_tensor(DataType::kFloat32, Dims{16, c / group, 3, 3}, 1, -1, 1);
  std::vector<Tensor*> ins{x, net.add_constant(wv, "w")->output(0), nullptr};
  if (residual) ins.push_back(net.add_input("r", DataType::kFloat32, Dims{1, 16, 16, 16}));
  Attributes attrs = extra;
  attrs.set("strides", std::vector<int64_t>{2, 2});
  attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  if (group != 1) attrs.set("group", group);
  Layer* layer = net.add_layer(kLayerConvolution, ins, 1, attrs, "conv");
  layer->output(0)->set_format(y_format);
  std::vector<TensorDesc> descs = {TensorDesc{DataType::kFloat32, x->dims(), x_format, true, nullptr},
                                   TensorDesc{DataType::kFloat32, wv.dims(), TensorFormat::kLinear, true, &wv},
                                   TensorDesc{DataType::kFloat32, Dims{16}, TensorFormat::kLinear, false, nullptr}};
  if (residual) {
    descs.push_back(TensorDesc{DataType::kFloat32, Dims{1, 16, 16, 16}, TensorFormat::kChannelsLast, true, nullptr});
  }
  return e->supports(*layer, descs);
}

TEST(ConvNchwDirect, TakesStemsAndDeclinesTheRest) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  const TensorFormat lin = TensorFormat::kLinear, last = TensorFormat::kChannelsLast;
  Attributes dilated;
  dilated.set("dilations", std::vector<int64_t>{2, 2});
  EXPECT_TRUE(nchw_direct_takes("nchw_direct_avx2", 3, lin, last));
  EXPECT_TRUE(nchw_direct_takes("nchw_direct_avx2", 4, lin, last));
  EXPECT_FALSE(nchw_direct_takes("nchw_direct_avx2", 5, lin, last)) << "more channels: a Reformat and NHWC kernels";
  EXPECT_FALSE(nchw_direct_takes("nchw_direct_avx2", 3, last, last)) << "the input must be linear";
  EXPECT_FALSE(nchw_direct_takes("nchw_direct_avx2", 3, lin, lin)) << "the output must be channels-last";
  EXPECT_FALSE(nchw_direct_takes("nchw_direct_avx2", 3, lin, last, dilated));
  EXPECT_FALSE(nchw_direct_takes("nchw_direct_avx2", 3, lin, last, {}, true)) << "no residual input";
  EXPECT_FALSE(nchw_direct_takes("nchw_direct_avx2", 4, lin, last, {}, false, 2)) << "grouped";
  EXPECT_EQ(nchw_direct_takes("nchw_direct_avx512", 3, lin, last), __builtin_cpu_supports("avx512f") != 0);
}

TEST(ConvPointwisePacked, MatchesTheReferenceKernel) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<int64_t> none{0, 0, 0, 0};
  std::vector<WinoCase> cases = {
      // MobileNetV3's squeeze-excitation layers: [N, C, 1, 1] -> K.
      {"se_fc1", 1, 16, 8, 1, 1, none, true, false, true, "relu"},
      {"se_fc2_partial_panel", 1, 8, 20, 1, 1, none, true, false, true, "hard_sigmoid", 1.0f / 6, 0.5f},
      {"se_batch_8", 8, 576, 144, 1, 1, none, true, false, true, "relu"},  // 663,552 products: 2 threads
      {"no_bias", 3, 40, 33, 1, 1, none, false, false, true, ""},
      // 64 pixels (the most it takes) of an 8x8 image, channels-last; 1 and 3 threads.
      {"image_8x8", 1, 24, 48, 8, 8, none, true, false, true, "silu"},
      {"image_8x8_one_thread", 1, 24, 48, 8, 8, none, true, false, true, "hard_swish"},
      {"image_4x4_three_threads", 4, 96, 64, 4, 4, none, true, false, true, "gelu_erf"},
  };
  cases[5].threads = 1;
  cases[6].threads = 3;
  for (WinoCase& k : cases) {
    k.kh = k.kw = 1;
    SCOPED_TRACE(k.name);
    check_channels_last_case("pointwise_packed", k);
  }
}

TEST(ConvPointwisePacked, TakesSmall1x1ConvolutionsOnly) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "pointwise_packed");
  ASSERT_NE(e, nullptr);
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  struct Probe {
    std::string name;
    Dims x, w;
    Attributes attrs;
    TensorFormat format;
    bool constant, residual, want;
  };
  const TensorFormat lin = TensorFormat::kLinear, last = TensorFormat::kChannelsLast;
  Attributes stride2, pad1, group2;
  stride2.set("strides", std::vector<int64_t>{2, 2});
  pad1.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  group2.set("group", int64_t{2});
  const std::vector<Probe> probes = {
      {"se_fc_linear_1x1_image", Dims{8, 64, 1, 1}, Dims{16, 64, 1, 1}, {}, lin, true, false, true},
      {"64_pixels_channels_last", Dims{1, 16, 8, 8}, Dims{16, 16, 1, 1}, {}, last, true, false, true},
      {"65_pixels", Dims{1, 16, 5, 13}, Dims{16, 16, 1, 1}, {}, last, true, false, false},
      {"linear_image_of_4_pixels", Dims{1, 16, 2, 2}, Dims{16, 16, 1, 1}, {}, lin, true, false, false},
      {"3x3_kernel", Dims{1, 16, 4, 4}, Dims{16, 16, 3, 3}, pad1, last, true, false, false},
      {"stride_2", Dims{1, 16, 4, 4}, Dims{16, 16, 1, 1}, stride2, last, true, false, false},
      {"padded", Dims{1, 16, 4, 4}, Dims{16, 16, 1, 1}, pad1, last, true, false, false},
      {"grouped", Dims{1, 16, 4, 4}, Dims{16, 8, 1, 1}, group2, last, true, false, false},
      {"weights_not_constant", Dims{1, 16, 1, 1}, Dims{16, 16, 1, 1}, {}, lin, false, false, false},
      {"residual", Dims{1, 16, 1, 1}, Dims{16, 16, 1, 1}, {}, lin, true, true, false},
  };
  for (const Probe& pr : probes) {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, pr.x);
    const HostTensor wv = test::random_tensor(DataType::kFloat32, pr.w, 3, -1, 1);
    std::vector<Tensor*> ins{x, net.add_constant(wv, "w")->output(0), nullptr};
    const Dims y_dims{pr.x[0], pr.w[0], pr.x[2], pr.x[3]};
    if (pr.residual) ins.push_back(net.add_input("r", DataType::kFloat32, y_dims));
    Layer* layer = net.add_layer(kLayerConvolution, ins, 1, pr.attrs, "conv");
    layer->output(0)->set_format(pr.format);
    std::vector<TensorDesc> descs = {
        TensorDesc{DataType::kFloat32, pr.x, pr.format, true, nullptr},
        TensorDesc{DataType::kFloat32, pr.w, TensorFormat::kLinear, true, pr.constant ? &wv : nullptr},
        TensorDesc{DataType::kFloat32, Dims{pr.w[0]}, TensorFormat::kLinear, false, nullptr}};
    if (pr.residual) descs.push_back(TensorDesc{DataType::kFloat32, y_dims, pr.format, true, nullptr});
    EXPECT_EQ(e->supports(*layer, descs), pr.want) << pr.name;
  }
}

TEST(ConvPointwiseGemm, MatchesTheReferenceKernel) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<int64_t> none{0, 0, 0, 0};
  std::vector<WinoCase> cases = {
      // SqueezeNet's squeeze layer, smaller: 2 x 13 x 13 = 338 pixels (not a multiple of the
      // 8-row block or the 48-row chunk), 64 -> 16 channels.
      {"squeeze_64_16", 2, 64, 16, 13, 13, none, true, false, true, "relu"},
      // Panels two at a time and one left over (255 = 15 full panels + 15 columns).
      {"detection_64_255", 1, 64, 255, 9, 10, none, true, false, true, ""},
      {"few_input_channels", 1, 3, 40, 11, 7, none, false, false, true, "silu"},
      {"one_output_channel", 3, 24, 1, 5, 9, none, true, false, true, "sigmoid"},
      {"wide_input_512", 1, 512, 48, 6, 12, none, true, false, true, "hard_swish"},
      {"one_thread", 2, 32, 32, 16, 16, none, true, false, true, "gelu_erf"},
      {"three_threads", 3, 40, 36, 10, 11, none, true, false, true, "leaky_relu", 0.1f},
  };
  cases[5].threads = 1;
  cases[6].threads = 3;
  for (const char* tactic : {"pointwise_gemm_avx2", "pointwise_gemm_avx512"}) {
    if (std::string(tactic) == "pointwise_gemm_avx512" && !__builtin_cpu_supports("avx512f")) continue;
    for (WinoCase k : cases) {
      k.kh = k.kw = 1;
      SCOPED_TRACE(std::string(tactic) + " " + k.name);
      check_channels_last_case(tactic, k);
    }
  }
}

TEST(ConvDepthwise, MatchesTheReferenceKernel) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<int64_t> same{1, 1, 1, 1}, two{2, 2}, pad2{2, 2, 2, 2};
  // MobileNetV3-small's: 3x3 and 5x5, stride 1 and 2, 16-576 channels; channel counts that leave
  // a masked tail (13, 72 = 2 x 32 + 8, 100 = 3 x 32 + 4).
  std::vector<WinoCase> cases = {
      {"3x3_stride_2_16", 1, 16, 16, 56, 56, same, true, false, true, "relu"},
      {"3x3_stride_1_72", 2, 72, 72, 14, 13, same, true, false, true, "hard_swish"},
      {"5x5_stride_2_96", 1, 96, 96, 14, 14, pad2, true, false, true, "hard_swish"},
      {"5x5_stride_1_100", 1, 100, 100, 7, 9, pad2, false, false, true, ""},
      {"tail_13_asymmetric", 3, 13, 13, 9, 6, {0, 1, 2, 0}, true, false, true, "leaky_relu", 0.1f},
      {"dilated", 1, 40, 40, 11, 12, pad2, true, false, true, "silu"},
      {"one_thread", 1, 576, 576, 7, 7, pad2, true, false, true, "hard_sigmoid", 0.2f, 0.5f},
      {"three_threads", 2, 24, 24, 10, 10, same, true, false, true, "sigmoid"},
      // depthwise_avx512's column blocks of 4: rows narrower than a block, of exactly one, one
      // interior block between edge blocks; kernel widths it does not unroll (7, 1, 3x5).
      {"narrow_3_wide", 2, 32, 32, 5, 3, same, true, false, true, "relu"},
      {"exactly_4_wide", 1, 48, 48, 6, 4, same, false, false, true, ""},
      {"7x7_kernel", 1, 20, 20, 12, 15, {3, 3, 3, 3}, true, false, true, "relu"},
      {"1x1_kernel", 1, 40, 40, 5, 9, {0, 0, 0, 0}, true, false, true, ""},
      {"3x5_kernel_stride_2", 1, 17, 17, 13, 17, {1, 2, 1, 2}, true, false, true, "hard_swish"},
  };
  cases[0].strides = two;
  cases[2].strides = two;
  cases[2].kh = cases[2].kw = 5;
  cases[3].kh = cases[3].kw = 5;
  cases[5].dilations = two;
  cases[6].kh = cases[6].kw = 5;
  cases[6].threads = 1;
  cases[7].threads = 3;
  cases[10].kh = cases[10].kw = 7;
  cases[11].kh = cases[11].kw = 1;
  cases[12].kh = 3;
  cases[12].kw = 5;
  cases[12].strides = two;
  for (const char* tactic : {"depthwise_avx2", "depthwise_avx512"}) {
    if (std::string(tactic) == "depthwise_avx512" && !__builtin_cpu_supports("avx512f")) continue;
    for (WinoCase k : cases) {
      k.group = k.c;
      SCOPED_TRACE(std::string(tactic) + " " + k.name);
      check_channels_last_case(tactic, k);
    }
  }
}

TEST(ConvDepthwise, TakesDepthwiseLayersWhereOneDnnIsNotBuiltIn) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
#if KILN_HAVE_ONEDNN
  const bool without_onednn = false;
#else
  const bool without_onednn = true;
#endif
  for (const char* tactic : {"depthwise_avx2", "depthwise_avx512"}) {
    SCOPED_TRACE(tactic);
    const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, tactic);
    ASSERT_NE(e, nullptr);
    const bool here = std::string(tactic) == "depthwise_avx2" || __builtin_cpu_supports("avx512f");
    // x [n, 16, 20, 20] -> 16 channels (`group` groups), 3x3 pad 1, channels-last unless `format`.
    const auto probe = [&](int64_t n, int64_t group, TensorFormat format = TensorFormat::kChannelsLast) {
      Network net;
      Tensor* x = net.add_input("x", DataType::kFloat32, Dims{n, 16, 20, 20});
      const HostTensor wv = test::random_tensor(DataType::kFloat32, Dims{16, 16 / group, 3, 3}, 5);
      Attributes attrs;
      attrs.set("group", group);
      attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
      Layer* layer = net.add_layer(kLayerConvolution, {x, net.add_constant(wv, "w")->output(0)}, 1, attrs, "conv");
      layer->output(0)->set_format(format);
      return e->supports(*layer, {TensorDesc{DataType::kFloat32, x->dims(), format, true, nullptr},
                                  TensorDesc{DataType::kFloat32, wv.dims(), TensorFormat::kLinear, true, &wv}});
    };
    EXPECT_EQ(probe(1, 16), without_onednn && here) << "depthwise";
    EXPECT_EQ(probe(kDynamic, 16), without_onednn && here) << "depthwise, dynamic batch";
    EXPECT_FALSE(probe(1, 4)) << "4 channels per group";
    EXPECT_FALSE(probe(1, 1)) << "ungrouped";
    EXPECT_FALSE(probe(1, 16, TensorFormat::kLinear)) << "linear memory";
  }
}

TEST(ConvWinogradAvx2, ComputesWithTheResidualInTheOutput) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  WinoCase k{"residual_in_the_output", 1, 32, 40, 16, 16, {1, 1, 1, 1}, true, true, true, "relu"};
  k.in_place = true;
  check_channels_last_case("winograd_avx2", k);
}

// supports() of `tactic` for a kernel x kernel, pad kernel / 2 convolution of x [n, c, hw, hw] to k
// channels with `stride`, channels-last.
bool takes(const std::string& tactic, int64_t n, int64_t c, int64_t k, int64_t hw, int64_t kernel = 3,
           int64_t stride = 1) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, tactic);
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{n, c, hw, hw});
  Tensor* w = net.add_constant(test::random_tensor(DataType::kFloat32, Dims{k, c, kernel, kernel}, 7), "w")->output(0);
  Attributes attrs;
  attrs.set("pads", std::vector<int64_t>(4, kernel / 2));
  attrs.set("strides", std::vector<int64_t>{stride, stride});
  Layer* layer = net.add_layer(kLayerConvolution, {x, w}, 1, attrs, "conv");
  layer->output(0)->set_format(TensorFormat::kChannelsLast);
  return e->supports(
      *layer, {TensorDesc{DataType::kFloat32, Dims{n, c, hw, hw}, TensorFormat::kChannelsLast, true, nullptr},
               TensorDesc{DataType::kFloat32, Dims{k, c, kernel, kernel}, TensorFormat::kLinear, true, nullptr}});
}

bool winograd_takes(int64_t n, int64_t c, int64_t k, int64_t hw) { return takes("winograd_avx2", n, c, k, hw); }

// supports() of a pointwise_gemm tactic for a 1x1 convolution of x [n, c, hw, hw] to k channels
// with `stride`, channels-last, constant weights.
bool pointwise_gemm_takes(const std::string& tactic, int64_t n, int64_t c, int64_t k, int64_t hw, int64_t stride = 1) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, tactic);
  if (!e) return false;
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{n, c, hw, hw});
  const HostTensor wv = test::random_tensor(DataType::kFloat32, Dims{k, c, 1, 1}, 7);
  Attributes attrs;
  attrs.set("strides", std::vector<int64_t>{stride, stride});
  Layer* layer = net.add_layer(kLayerConvolution, {x, net.add_constant(wv, "w")->output(0)}, 1, attrs, "conv");
  layer->output(0)->set_format(TensorFormat::kChannelsLast);
  return e->supports(*layer, {TensorDesc{DataType::kFloat32, x->dims(), TensorFormat::kChannelsLast, true, nullptr},
                              TensorDesc{DataType::kFloat32, wv.dims(), TensorFormat::kLinear, true, &wv}});
}

TEST(ConvPointwiseGemm, TakesLarge1x1ConvolutionsWhereOneDnnIsNotBuiltIn) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
#if KILN_HAVE_ONEDNN
  const bool without_onednn = false;
#else
  const bool without_onednn = true;
#endif
  const std::string avx2 = "pointwise_gemm_avx2";
  EXPECT_EQ(pointwise_gemm_takes(avx2, 8, 128, 16, 55), without_onednn) << "SqueezeNet's squeeze layer";
  EXPECT_EQ(pointwise_gemm_takes(avx2, 1, 64, 255, 40), without_onednn) << "a detection layer";
  EXPECT_EQ(pointwise_gemm_takes(avx2, kDynamic, 64, 32, 20), without_onednn) << "a dynamic batch";
  EXPECT_FALSE(pointwise_gemm_takes(avx2, 1, 16, 16, 8)) << "64 pixels: pointwise_packed's";
  EXPECT_FALSE(pointwise_gemm_takes(avx2, 1, 64, 64, 20, 2)) << "stride 2";
  EXPECT_EQ(pointwise_gemm_takes("pointwise_gemm_avx512", 8, 128, 16, 55),
            without_onednn && __builtin_cpu_supports("avx512f"));
}

TEST(ConvIgemmAvx2, ChoosesWhereItIsFaster) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  // Taken: stride-2 3x3 layers with 32 input channels or more (ResNet-50's, TinyYolo's), 3x3
  // layers on 7x7 images (which winograd_avx2 declines at batch 1).
  EXPECT_TRUE(takes("igemm_avx2", 1, 128, 128, 56, 3, 2));
  EXPECT_TRUE(takes("igemm_avx2", 8, 512, 512, 14, 3, 2));
  EXPECT_TRUE(takes("igemm_avx2", 1, 32, 64, 80, 3, 2));
  EXPECT_TRUE(takes("igemm_avx2", 1, 512, 512, 7));
  // Declined where oneDNN is built in (taken otherwise, the alternative being the reference
  // kernel): fewer than 32 input channels (the stems, 16-channel layers), 1x1 kernels.
#if KILN_HAVE_ONEDNN
  const bool without_onednn = false;
#else
  const bool without_onednn = true;
#endif
  EXPECT_EQ(takes("igemm_avx2", 1, 3, 64, 224, 7, 2), without_onednn);
  EXPECT_EQ(takes("igemm_avx2", 1, 16, 32, 160, 3, 2), without_onednn);
  EXPECT_EQ(takes("igemm_avx2", 1, 256, 64, 56, 1), without_onednn);
  EXPECT_EQ(takes("igemm_avx2", 1, 256, 512, 56, 1, 2), without_onednn);
}

TEST(ConvWinogradAvx2, ChoosesWhereItIsFaster) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  // Taken: ResNet-50's 56x56, 28x28 and 14x14 layers, TinyYolo's 10x10 ones, SqueezeNet's 32 -> 128.
  EXPECT_TRUE(winograd_takes(1, 64, 64, 56));
  EXPECT_TRUE(winograd_takes(1, 128, 128, 28));
  EXPECT_TRUE(winograd_takes(1, 256, 256, 14));
  EXPECT_TRUE(winograd_takes(1, 128, 128, 10));
  EXPECT_TRUE(winograd_takes(1, 32, 128, 27));
  // Declined: 7x7 images (4 tiles) at batch 1, but not at batch 4 (16 tiles); 16 -> 16 channels;
  // 16 input channels (SqueezeNet's 16 -> 64).
  EXPECT_FALSE(winograd_takes(1, 512, 512, 7));
  EXPECT_TRUE(winograd_takes(4, 512, 512, 7));
  EXPECT_FALSE(winograd_takes(1, 16, 16, 80));
  EXPECT_FALSE(winograd_takes(8, 16, 64, 55));
}

// A convolution a tactic must decline.
struct Other {
  std::string name;
  Dims x, w;
  Attributes attrs;
  TensorFormat format = TensorFormat::kChannelsLast;
};

void expect_declines(const KernelEntry* e, const std::vector<Other>& others) {
  for (const Other& o : others) {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, o.x);
    Tensor* w = net.add_constant(test::random_tensor(DataType::kFloat32, o.w, 7), "w")->output(0);
    Layer* layer = net.add_layer(kLayerConvolution, {x, w}, 1, o.attrs, "conv");
    layer->output(0)->set_format(o.format);
    const std::vector<TensorDesc> descs = {TensorDesc{DataType::kFloat32, o.x, o.format, true, nullptr},
                                           TensorDesc{DataType::kFloat32, o.w, TensorFormat::kLinear, true, nullptr}};
    EXPECT_FALSE(e->supports(*layer, descs)) << o.name;
  }
}

TEST(ConvWinogradAvx2, DeclinesWhatItDoesNotCover) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "winograd_avx2");
  ASSERT_NE(e, nullptr);
  Attributes stride2, group2, dilated, mish;
  stride2.set("strides", std::vector<int64_t>{2, 2});
  group2.set("group", int64_t{2});
  dilated.set("dilations", std::vector<int64_t>{2, 2});
  mish.set("activation", std::string("mish"));
  const std::vector<Other> others = {
      {"stride_2", Dims{1, 16, 28, 28}, Dims{16, 16, 3, 3}, stride2},
      {"grouped", Dims{1, 16, 28, 28}, Dims{16, 8, 3, 3}, group2},
      {"dilated", Dims{1, 16, 28, 28}, Dims{16, 16, 3, 3}, dilated},
      {"1x1_kernel", Dims{1, 16, 28, 28}, Dims{16, 16, 1, 1}, {}},
      {"5x5_kernel", Dims{1, 16, 28, 28}, Dims{16, 16, 5, 5}, {}},
      {"3-D", Dims{1, 16, 8, 8, 8}, Dims{16, 16, 3, 3, 3}, {}},
      {"activation_without_a_vector_form", Dims{1, 16, 28, 28}, Dims{16, 16, 3, 3}, mish},
      {"linear_memory", Dims{1, 16, 28, 28}, Dims{16, 16, 3, 3}, {}, TensorFormat::kLinear},
  };
  expect_declines(e, others);
}

TEST(ConvIgemmAvx2, DeclinesWhatItDoesNotCover) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "igemm_avx2");
  ASSERT_NE(e, nullptr);
  Attributes group2, mish;
  group2.set("group", int64_t{2});
  mish.set("activation", std::string("mish"));
  std::vector<Other> others = {
      {"grouped", Dims{1, 64, 28, 28}, Dims{64, 32, 3, 3}, group2},
      {"3-D", Dims{1, 32, 8, 8, 8}, Dims{32, 32, 3, 3, 3}, {}},
      {"activation_without_a_vector_form", Dims{1, 32, 28, 28}, Dims{32, 32, 3, 3}, mish},
      {"linear_memory", Dims{1, 32, 28, 28}, Dims{32, 32, 3, 3}, {}, TensorFormat::kLinear},
      {"33_kernel_rows", Dims{1, 32, 40, 8}, Dims{32, 32, 33, 1}, {}},
  };
#if KILN_HAVE_ONEDNN  // oneDNN's kernels are faster there; without oneDNN this kernel takes them
  others.push_back({"1x1_kernel", Dims{1, 64, 28, 28}, Dims{64, 64, 1, 1}, {}});
  others.push_back({"16_input_channels", Dims{1, 16, 28, 28}, Dims{32, 16, 3, 3}, {}});
#endif
  expect_declines(e, others);
}

}  // namespace
}  // namespace kiln
