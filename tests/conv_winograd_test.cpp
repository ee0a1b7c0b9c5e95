// The "onednn_winograd" CPU tactic of Convolution (src/backends/cpu/conv_onednn.cpp): oneDNN's
// Winograd F(2x2, 3x3) for 3x3, stride 1, ungrouped, undilated convolutions with at least 32 input
// channels on images of at least 14x14, against the reference kernel (the op harness: guard bytes, NaN checks, the
// reference as oracle), with bias, padding or none, a fused ReLU and a residual sum. The op table's convolution cases
// are smaller than 14x14, so they do not reach this tactic. Skips where oneDNN has no Winograd kernel for the CPU (it
// has one for AVX-512 only).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/network.h"
#include "src/backends/kernel.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

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
    test::OpCase c;
    c.name = "winograd_c" + std::to_string(k.c) + "_m" + std::to_string(k.m) + "_" + std::to_string(k.hw) +
             (k.pad ? "_pad" : "") + (k.relu ? "_relu" : "") + (k.residual ? "_residual" : "");
    c.layer_type = kLayerConvolution;
    test::InputSpec x, w, b, r;
    x.dims = Dims{1, k.c, k.hw, k.hw};
    w.dims = Dims{k.m, k.c, 3, 3};
    w.constant = true;
    w.low = -0.3;
    w.high = 0.3;
    b.dims = Dims{k.m};
    b.constant = true;
    c.inputs = {x, w, b};
    if (k.residual) {
      r.dims = Dims{1, k.m, out, out};
      c.inputs.push_back(r);
    }
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
