// The vectorized erf of the CPU kernels (src/backends/cpu/vector_erf.h) against double-precision
// erf: within the element-wise op tolerance (1e-7 absolute + 1e-6 relative) everywhere, exact at
// the special values, and the loops that use it (GELU in FusedElementWise and the vectorized
// Activation tactic) give what the reference kernels give within that tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/network.h"
#include "src/backends/cpu/vector_erf.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

TEST(VectorErf, WithinTheElementWiseToleranceEverywhere) {
  std::vector<float> x;
  for (int i = 0; i <= 1200000; ++i) x.push_back(-6.0f + 12.0f * static_cast<float>(i) / 1200000.0f);
  for (int i = 0; i <= 20000; ++i) {  // tiny magnitudes, both signs
    const float v = static_cast<float>(std::pow(10.0, -38.0 + 38.0 * i / 20000.0));
    x.push_back(v);
    x.push_back(-v);
  }
  std::vector<float> y(x.size());
  cpu::erf_block(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst_abs = 0, worst_rel = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::erf(static_cast<double>(x[i]));
    const double err = std::fabs(static_cast<double>(y[i]) - want);
    worst_abs = std::max(worst_abs, err);
    if (want != 0) worst_rel = std::max(worst_rel, err / std::fabs(want));
    ASSERT_LE(err, 1e-7 + 1e-6 * std::fabs(want)) << "erf(" << x[i] << ") = " << y[i] << ", want " << want;
    ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << "erf(" << x[i] << ")";
  }
  EXPECT_LT(worst_abs, 2e-7);
  EXPECT_LT(worst_rel, 3e-7);
}

TEST(VectorErf, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 4.0f, 100.0f, -1e30f};
  std::vector<float> y(x.size());
  cpu::erf_block(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(y[1] == 0.0f && std::signbit(y[1])) << "erf(-0) is -0";
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], -1.0f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], 1.0f) << "erf(4) rounds to 1 in float32";
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_EQ(y[7], -1.0f);
}

TEST(VectorErf, GeluMatchesItsDefinition) {
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-10.0f + 20.0f * static_cast<float>(i) / 200000.0f);
  std::vector<float> y(x.size()), base(x.size());
  cpu::gelu_erf_block(x.data(), y.data(), static_cast<int64_t>(x.size()));  // AVX2 where the CPU has it
  cpu::gelu_erf_block_baseline(x.data(), base.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * std::erfc(-v * 0.70710678118654752);
    ASSERT_LE(std::fabs(y[i] - want), 1e-7 + 1e-6 * std::fabs(want)) << "gelu(" << x[i] << ")";
    // The baseline loop's 1 + erf(x / sqrt 2) keeps erf's absolute error (1.3e-7), times x / 2.
    ASSERT_LE(std::fabs(base[i] - want), 1e-6 + 1e-6 * std::fabs(want)) << "baseline gelu(" << x[i] << ")";
  }
}

// FusedElementWise programs that spell GELU out (as exporters write it; the CPU kernel folds them
// into one GELU pass) give 0.5 x (1 + erf(x / sqrt 2)), in every multiplication order, and a
// program that also reads an intermediate of the pattern keeps it.
TEST(VectorErf, FusedElementWiseGeluProgramsGiveGelu) {
  const double half = 0.5;
  struct Program {
    std::vector<std::string> text;
    bool plus_erf;  // the output is gelu(x) + erf(x / sqrt 2)
  };
  const std::vector<Program> programs = {
      {{"const 1.4142135623730951", "binary div r0 r1", "unary erf r2", "const 1", "binary sum r3 r4",
        "binary prod r0 r5", "const 0.5", "binary prod r6 r7"},
       false},
      {{"const 0.7071067811865476", "binary prod r1 r0", "unary erf r2", "const 1", "binary sum r4 r3", "const 0.5",
        "binary prod r0 r6", "binary prod r7 r5"},
       false},
      {{"const 1.4142135623730951", "binary div r0 r1", "unary erf r2", "const 1", "binary sum r3 r4",
        "binary prod r0 r5", "const 0.5", "binary prod r7 r6", "binary sum r8 r3"},
       true},
  };
  for (const Program& prog : programs) {
    test::OpCase c;
    c.name = "gelu_program";
    c.layer_type = kLayerFusedElementWise;
    test::InputSpec in;
    in.dims = Dims{3, 1000};
    in.low = -6.0;
    in.high = 6.0;
    c.inputs = {in};
    c.attrs.set("program", prog.text);
    const HostTensor x = test::random_tensor(DataType::kFloat32, in.dims, 1, in.low, in.high);
    c.inputs[0].value = x;
    const std::vector<HostTensor> out = test::reference_outputs(c);
    ASSERT_EQ(out.size(), 1u);
    const float* px = x.as<float>();
    const float* py = out[0].as<float>();
    for (int64_t i = 0; i < x.dims().volume(); ++i) {
      const double v = px[i];
      const double e = std::erf(v / std::sqrt(2.0));
      const double want = half * v * (1.0 + e) + (prog.plus_erf ? e : 0.0);
      ASSERT_NEAR(py[i], want, 2e-6 + 2e-6 * std::fabs(want)) << prog.text.back() << " at x = " << v;
    }
  }
}

}  // namespace
}  // namespace kiln
