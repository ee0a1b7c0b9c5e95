// The vectorized exp of non-positive values and the softmax row of the CPU kernels
// (src/backends/cpu/vector_exp.h) against double precision, and the SoftMax "rows" tactic against
// the reference tactic on the shapes attention uses (short and long rows, -inf and large-negative
// masks, log-softmax), so a fast path that drifts from the oracle fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "src/backends/cpu/vector_exp.h"
#include "kiln/network.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

TEST(VectorExp, NonPositiveWithinAFewUlpEverywhere) {
  std::vector<float> x;
  for (int i = 0; i <= 2000000; ++i) x.push_back(-87.0f * static_cast<float>(i) / 2000000.0f);
  for (int i = 0; i <= 20000; ++i) x.push_back(-static_cast<float>(std::pow(10.0, -38.0 + 38.0 * i / 20000.0)));
  std::vector<float> y(x.size());
  cpu::exp_nonpositive_block(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double rel = std::fabs(static_cast<double>(y[i]) - want) / want;
    worst = std::max(worst, rel);
    ASSERT_LE(rel, 4e-7) << "exp(" << x[i] << ") = " << y[i] << ", want " << want;
  }
  EXPECT_LT(worst, 4e-7);
}

TEST(VectorExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{0.0f, -0.0f, -inf, std::numeric_limits<float>::quiet_NaN(), -87.4f, -1000.0f, -1e30f};
  std::vector<float> y(x.size());
  cpu::exp_nonpositive_block(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(y[4], 0.0f) << "below float32's smallest normal: flushed to 0";
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[6], 0.0f);
}

// Softmax of one row in double, as the reference tactic computes it.
std::vector<double> softmax_double(const std::vector<float>& x, bool log) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : x) m = std::max(m, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(v - m);
  std::vector<double> y;
  for (float v : x) y.push_back(log ? (v - m) - std::log(s) : std::exp(v - m) / s);
  return y;
}

TEST(VectorExp, SoftmaxRowMatchesDoublePrecision) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t n : {1, 2, 7, 8, 9, 16, 31, 64, 100, 128, 1000, 4099}) {
    for (int masked = 0; masked < 3; ++masked) {
      for (bool log : {false, true}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = normal(rng);
        // Attention masks: a tail of -inf (masked = 1) or of -3.4e38 / -10000 (masked = 2).
        for (int64_t j = n / 2 + 1; j < n && masked; ++j) {
          x[static_cast<size_t>(j)] =
              masked == 1 ? -std::numeric_limits<float>::infinity() : (j % 2 ? -3.4e38f : -1e4f);
        }
        std::vector<float> y(x.size());
        cpu::softmax_row(x.data(), y.data(), n, log);
        const std::vector<double> want = softmax_double(x, log);
        for (size_t j = 0; j < x.size(); ++j) {
          if (std::isinf(want[j])) {
            ASSERT_EQ(y[j], static_cast<float>(want[j])) << "n " << n << " j " << j;
            continue;
          }
          ASSERT_NEAR(y[j], want[j], 1e-6 + 1e-5 * std::fabs(want[j]))
              << "n " << n << " masked " << masked << " log " << log << " j " << j;
        }
      }
    }
  }
}

TEST(VectorExp, SoftmaxRowOfOnlyMinusInfinityIsNaNAsTheReference) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x(12, -inf);
  std::vector<float> y(x.size());
  for (bool log : {false, true}) {
    cpu::softmax_row(x.data(), y.data(), 12, log);
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << "log " << log;
  }
}

// The "rows" tactic against the reference tactic (the op harness: guard bytes, NaN checks, the
// reference as oracle) on attention's shapes: [N, heads, S, S] over the last axis, with -inf
// masks, and log-softmax.
TEST(SoftMaxRows, MatchesTheReferenceTactic) {
  for (const Dims& dims : {Dims{8, 2, 16, 16}, Dims{1, 4, 7, 129}, Dims{3, 1000}, Dims{5}}) {
    for (int64_t log : {0, 1}) {
      std::mt19937 rng(11);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> x(static_cast<size_t>(dims.volume()));
      for (size_t i = 0; i < x.size(); ++i) x[i] = i % 5 == 4 ? -std::numeric_limits<float>::infinity() : normal(rng);
      test::OpCase c;
      c.name = "softmax_rows_" + dims.to_string() + (log ? "_log" : "");
      c.layer_type = kLayerSoftMax;
      test::InputSpec in;
      in.dims = dims;
      in.value = HostTensor::from_vector(DataType::kFloat32, dims, x);
      c.inputs = {in};
      c.attrs.set("axis", int64_t{-1});
      c.attrs.set("log", log);
      c.rtol = 1e-5;
      c.atol = 1e-6;
      const auto results = test::run_op_case(c, DeviceType::kCPU, [](const std::string& t) { return t == "rows"; });
      bool ran = false;
      for (const test::KernelResult& r : results) {
        if (r.tactic != "rows") continue;
        ran = true;
        EXPECT_EQ(r.outcome, test::Outcome::kPassed) << c.name << ": " << r.message;
      }
      EXPECT_TRUE(ran) << c.name << ": the rows tactic did not run";
    }
  }
}

}  // namespace
}  // namespace kiln
