// The vectorized activations of kiln's own CPU kernels (src/backends/cpu/activation_formulas.h, in
// AVX2 and AVX-512 registers): the "avx2" and "avx512" Activation tactics, the kernels' fused
// epilogues and the pass oneDNN's convolutions leave to kiln (cpu::activate_simd). Every test runs
// for both widths (cpu::activate_avx2, cpu::activate_avx512; a width the processor lacks is
// skipped), and the two must agree bit for bit. SiLU and sigmoid come from a fitted exp polynomial and a division:
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
bool has_avx512() { return has_avx2() && __builtin_cpu_supports("avx512f"); }

using ActivateFn = bool (*)(const PostOp&, const float*, float*, int64_t, int);

struct Width {
  const char* name;
  ActivateFn fn;
  bool (*available)();
};

const Width kWidths[] = {{"avx2", cpu::activate_avx2, has_avx2}, {"avx512", cpu::activate_avx512, has_avx512}};

class ActivationVector : public ::testing::TestWithParam<Width> {
 protected:
  void SetUp() override {
    if (!GetParam().available()) GTEST_SKIP() << "no " << GetParam().name << " here";
  }
  ActivateFn fn() const { return GetParam().fn; }
};

INSTANTIATE_TEST_SUITE_P(Widths, ActivationVector, ::testing::ValuesIn(kWidths),
                         [](const ::testing::TestParamInfo<Width>& info) { return std::string(info.param.name); });

double reference(ActivationType kind, double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return kind == ActivationType::kSilu ? x * s : s;
}

std::vector<float> apply(ActivateFn fn, ActivationType kind, const std::vector<float>& x, int threads) {
  std::vector<float> y(x.size(), -1.0f);
  EXPECT_TRUE(fn(PostOp{true, kind, 0.f, 0.f}, x.data(), y.data(), static_cast<int64_t>(x.size()), threads));
  return y;
}

TEST_P(ActivationVector, SiluAndSigmoidMatchDoublePrecisionAcrossTheRange) {
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
    const std::vector<float> y = apply(fn(), kind, x, 2);
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

TEST_P(ActivationVector, NanStaysNanAndInfinitiesSaturate) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, inf, -inf, 1.0f, nan, -nan, 2.0f, 3.0f, nan};
  const std::vector<float> silu = apply(fn(), ActivationType::kSilu, x, 1);
  const std::vector<float> sig = apply(fn(), ActivationType::kSigmoid, x, 1);
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

TEST_P(ActivationVector, InPlaceOnAnyLengthAndThreadCount) {
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 63, 1000, 4097}) {
    for (int threads : {1, 2, 3}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37 % 101) - 50) * 0.11f;
      const std::vector<float> want = apply(fn(), ActivationType::kSilu, x, 1);
      std::vector<float> y = x;
      ASSERT_TRUE(fn()(PostOp{true, ActivationType::kSilu, 0.f, 0.f}, y.data(), y.data(), n, threads));
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
  // What the loops do not compute, they decline without writing; so does a width the processor
  // lacks.
  std::vector<float> x = {1.0f, 2.0f}, y = {7.0f, 7.0f};
  for (ActivateFn fn : {cpu::activate_avx2, cpu::activate_avx512, cpu::activate_simd}) {
    EXPECT_FALSE(fn(PostOp{true, ActivationType::kMish, 0.f, 0.f}, x.data(), y.data(), 2, 1));
  }
  EXPECT_EQ(cpu::activate_avx512(PostOp{true, ActivationType::kSilu, 0.f, 0.f}, x.data(), y.data(), 2, 1),
            has_avx512());
  if (!has_avx512()) {
    EXPECT_EQ(y, (std::vector<float>{7.0f, 7.0f}));
  }
  y = {7.0f, 7.0f};
  EXPECT_EQ(cpu::activate_simd(PostOp{true, ActivationType::kSilu, 0.f, 0.f}, x.data(), y.data(), 2, 1), has_avx2());
}

// Both widths compute the same operations per lane, so they agree bit for bit on every kind,
// including the leaky ReLU's and clip's parameters and the masked tails (lengths that are not
// multiples of 8 or 16).
TEST(ActivationAvx2, TheTwoWidthsAgreeBitForBit) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512F here";
  std::vector<float> x;
  for (double v = -30.0; v <= 30.0; v += 0.0137) x.push_back(static_cast<float>(v));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {nan, inf, -inf, 0.0f, -0.0f, 1e-40f, -1e-40f, 200.0f, -200.0f}) x.push_back(v);
  for (size_t n : {x.size(), x.size() - 1, size_t{5}, size_t{13}}) {
    for (ActivationType kind : {ActivationType::kRelu, ActivationType::kLeakyRelu, ActivationType::kClip,
                                ActivationType::kSilu, ActivationType::kSigmoid, ActivationType::kHardSigmoid,
                                ActivationType::kHardSwish, ActivationType::kGeluErf}) {
      const PostOp post{true, kind, kind == ActivationType::kClip ? -1.5f : 0.2f,
                        kind == ActivationType::kClip ? 2.5f : 0.5f};
      std::vector<float> y8(n, -1.0f), y16(n, -2.0f);
      ASSERT_TRUE(cpu::activate_avx2(post, x.data(), y8.data(), static_cast<int64_t>(n), 1));
      ASSERT_TRUE(cpu::activate_avx512(post, x.data(), y16.data(), static_cast<int64_t>(n), 2));
      for (size_t i = 0; i < n; ++i) {
        const uint32_t a = __builtin_bit_cast(uint32_t, y8[i]), b = __builtin_bit_cast(uint32_t, y16[i]);
        ASSERT_EQ(a, b) << "kind " << static_cast<int>(kind) << ", x = " << x[i] << ": " << y8[i] << " against "
                        << y16[i] << " (length " << n << ")";
      }
    }
  }
}

// GELU (erf form) in one range of erfc: against 0.5 x erfc(-x / sqrt 2) in double precision over
// [-20, 20] in steps of 2e-5 (and the float32 limits), within 3e-8 absolute + 3e-7 relative: 3x
// tighter than the element-wise tolerance (1e-7 + 1e-6), where the erf-based loop it replaced
// lost all relative accuracy below x = -5 (1 + erf(x / sqrt 2) cancels there).
TEST_P(ActivationVector, GeluMatchesDoublePrecisionAcrossTheRange) {
  std::vector<float> x;
  for (int i = -1000000; i <= 1000000; ++i) x.push_back(static_cast<float>(i * 2e-5));
  for (float v : {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e-30f, -1e-30f, FLT_MIN, -FLT_MIN, -12.7f, -12.8f, -13.0f}) {
    x.push_back(v);
  }
  x.push_back(0.25f);  // an odd length: the masked tail
  const std::vector<float> y = apply(fn(), ActivationType::kGeluErf, x, 2);
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
    ASSERT_TRUE(fn()(PostOp{true, ActivationType::kGeluErf, 0.f, 0.f}, &v, &out, 1, 1));
    const double want = 0.5 * v * std::erfc(-v * 0.70710678118654752);
    EXPECT_LT(std::fabs(out - want) / std::fabs(want), 1e-5) << "gelu(" << v << ") = " << out << ", want " << want;
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special = apply(fn(), ActivationType::kGeluErf, {nan, inf, -inf, 0.0f, -0.0f, 100.0f}, 1);
  EXPECT_TRUE(std::isnan(special[0]));
  EXPECT_EQ(special[1], inf);
  EXPECT_TRUE(std::isnan(special[2])) << "gelu(-inf) is -inf * 0 by the definition";
  EXPECT_EQ(special[3], 0.0f);
  EXPECT_EQ(special[4], 0.0f);
  EXPECT_EQ(special[5], 100.0f);
}

}  // namespace
}  // namespace kiln
