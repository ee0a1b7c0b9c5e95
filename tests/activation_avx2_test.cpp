// The AVX2 activations of kiln's own CPU kernels (src/backends/cpu/activation_avx2.h): the "avx2"
// Activation tactic, the convolutions' fused epilogues and the pass oneDNN's convolutions leave to
// kiln (cpu::activate_avx2). SiLU and sigmoid come from a fitted exp polynomial and a division:
// here they are swept over [-100, 100] against double-precision formulas (relative error under
// 4e-7 where the exact result's magnitude is at least 1e-30; below -87, where the input is
// clamped, the error stays under |x| x 1.7e-38), at the clamp's edges and beyond, with NaN and
// infinities, on lengths that are not multiples of 8, in place and on 1-3 threads. GELU (one range
// of erfc) is swept over [-20, 20].
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "src/backends/cpu/activation_avx2.h"

namespace kiln {
namespace {

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

double reference(ActivationType kind, double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return kind == ActivationType::kSilu ? x * s : s;
}

std::vector<float> apply(ActivationType kind, const std::vector<float>& x, int threads) {
  std::vector<float> y(x.size(), -1.0f);
  EXPECT_TRUE(
      cpu::activate_avx2(PostOp{true, kind, 0.f, 0.f}, x.data(), y.data(), static_cast<int64_t>(x.size()), threads));
  return y;
}

TEST(ActivationAvx2, SiluAndSigmoidMatchDoublePrecisionAcrossTheRange) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  std::vector<float> x;
  for (double v = -100.0; v <= 100.0; v += 0.00173) x.push_back(static_cast<float>(v));
  // The clamp's edges, the float32 limits and values around zero.
  for (float v : {-88.5f, -88.0f, -87.5f,  -87.0f,   -86.9f, 86.9f, 87.0f,  87.5f,   88.0f,   88.5f,
                  1e30f,  -1e30f, FLT_MAX, -FLT_MAX, 0.0f,   -0.0f, 1e-30f, -1e-30f, FLT_MIN, -FLT_MIN}) {
    x.push_back(v);
  }
  x.push_back(0.5f);  // an odd length: the masked tail
  for (ActivationType kind : {ActivationType::kSilu, ActivationType::kSigmoid}) {
    const std::string name = kind == ActivationType::kSilu ? "silu" : "sigmoid";
    const std::vector<float> y = apply(kind, x, 2);
    double worst = 0;
    float worst_at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = reference(kind, x[i]);
      ASSERT_TRUE(std::isfinite(y[i])) << name << "(" << x[i] << ") = " << y[i];
      if (std::fabs(want) >= 1e-30) {
        const double rel = std::fabs(y[i] - want) / std::fabs(want);
        if (rel > worst) worst = rel, worst_at = x[i];
      } else {
        // Exact magnitudes under 1e-30 (x below about -65): the input clamped at -87 leaves
        // sigmoid(-87) = 1.6e-38, and |x| times it for SiLU.
        EXPECT_LE(std::fabs(y[i] - want), std::fabs(static_cast<double>(x[i])) * 1.7e-38 + 1.2e-38)
            << name << "(" << x[i] << ")";
      }
    }
    EXPECT_LT(worst, 4e-7) << name << ": largest relative error " << worst << " at x = " << worst_at;
  }
}

TEST(ActivationAvx2, NanStaysNanAndInfinitiesSaturate) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, inf, -inf, 1.0f, nan, -nan, 2.0f, 3.0f, nan};
  const std::vector<float> silu = apply(ActivationType::kSilu, x, 1);
  const std::vector<float> sig = apply(ActivationType::kSigmoid, x, 1);
  for (size_t i : {0u, 4u, 5u, 8u}) {
    EXPECT_TRUE(std::isnan(silu[i])) << "silu at " << i;
    EXPECT_TRUE(std::isnan(sig[i])) << "sigmoid at " << i;
  }
  EXPECT_EQ(silu[1], inf);
  EXPECT_EQ(sig[1], 1.0f);
  EXPECT_GE(sig[2], 0.0f);
  EXPECT_LE(sig[2], 1.7e-38f);  // sigmoid(-87), where the input is clamped
  // silu(-inf): the division gives -inf where x * sigmoid(x) gives NaN; neither is finite.
  EXPECT_FALSE(std::isfinite(silu[2]));
}

TEST(ActivationAvx2, InPlaceOnAnyLengthAndThreadCount) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  for (int64_t n : {1, 7, 8, 9, 63, 1000, 4097}) {
    for (int threads : {1, 2, 3}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37 % 101) - 50) * 0.11f;
      const std::vector<float> want = apply(ActivationType::kSilu, x, 1);
      std::vector<float> y = x;
      ASSERT_TRUE(cpu::activate_avx2(PostOp{true, ActivationType::kSilu, 0.f, 0.f}, y.data(), y.data(), n, threads));
      EXPECT_EQ(y, want) << "n " << n << ", " << threads << " threads";
    }
  }
}

TEST(ActivationAvx2, OnlySiluAndSigmoidAreLeftToKilnAfterOneDnn) {
  const bool avx2 = has_avx2();
  EXPECT_EQ(cpu::activation_after_onednn(PostOp{true, ActivationType::kSilu, 0.f, 0.f}), avx2);
  EXPECT_EQ(cpu::activation_after_onednn(PostOp{true, ActivationType::kSigmoid, 0.f, 0.f}), avx2);
  EXPECT_FALSE(cpu::activation_after_onednn(PostOp{true, ActivationType::kRelu, 0.f, 0.f}));
  EXPECT_FALSE(cpu::activation_after_onednn(PostOp{true, ActivationType::kGeluErf, 0.f, 0.f}));
  EXPECT_FALSE(cpu::activation_after_onednn(PostOp{false, ActivationType::kSilu, 0.f, 0.f}));
  // What activate_avx2() does not compute, it declines without writing.
  std::vector<float> x = {1.0f, 2.0f}, y = {7.0f, 7.0f};
  EXPECT_FALSE(cpu::activate_avx2(PostOp{true, ActivationType::kMish, 0.f, 0.f}, x.data(), y.data(), 2, 1));
  EXPECT_EQ(y, (std::vector<float>{7.0f, 7.0f}));
}

// GELU (erf form) in one range of erfc: against 0.5 x erfc(-x / sqrt 2) in double precision over
// [-20, 20] in steps of 2e-5 (and the float32 limits), within 3e-8 absolute + 3e-7 relative: 3x
// tighter than the element-wise tolerance (1e-7 + 1e-6), where the erf-based loop it replaced
// lost all relative accuracy below x = -5 (1 + erf(x / sqrt 2) cancels there).
TEST(ActivationAvx2, GeluMatchesDoublePrecisionAcrossTheRange) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  std::vector<float> x;
  for (int i = -1000000; i <= 1000000; ++i) x.push_back(static_cast<float>(i * 2e-5));
  for (float v : {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e-30f, -1e-30f, FLT_MIN, -FLT_MIN, -12.7f, -12.8f, -13.0f}) {
    x.push_back(v);
  }
  x.push_back(0.25f);  // an odd length: the masked tail
  const std::vector<float> y = apply(ActivationType::kGeluErf, x, 2);
  double worst = 0;
  float worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], want = 0.5 * v * std::erfc(-v * 0.70710678118654752);
    ASSERT_TRUE(std::isfinite(y[i])) << "gelu(" << x[i] << ") = " << y[i];
    const double score = std::fabs(y[i] - want) / (3e-8 + 3e-7 * std::fabs(want));
    if (score > worst) worst = score, worst_at = x[i];
  }
  EXPECT_LT(worst, 1.0) << "gelu: the largest error is " << worst << " x (3e-8 + 3e-7 |gelu|), at x = " << worst_at;
  // Relative accuracy in the negative tail, where gelu(x) is tiny: x = -5 and -8.
  for (float v : {-5.0f, -8.0f}) {
    float out = 0;
    ASSERT_TRUE(cpu::activate_avx2(PostOp{true, ActivationType::kGeluErf, 0.f, 0.f}, &v, &out, 1, 1));
    const double want = 0.5 * v * std::erfc(-v * 0.70710678118654752);
    EXPECT_LT(std::fabs(out - want) / std::fabs(want), 1e-5) << "gelu(" << v << ") = " << out << ", want " << want;
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special = apply(ActivationType::kGeluErf, {nan, inf, -inf, 0.0f, -0.0f, 100.0f}, 1);
  EXPECT_TRUE(std::isnan(special[0]));
  EXPECT_EQ(special[1], inf);
  EXPECT_TRUE(std::isnan(special[2])) << "gelu(-inf) is -inf * 0 by the definition";
  EXPECT_EQ(special[3], 0.0f);
  EXPECT_EQ(special[4], 0.0f);
  EXPECT_EQ(special[5], 100.0f);
}

}  // namespace
}  // namespace kiln
