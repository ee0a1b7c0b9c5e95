// Host checks of the math GELU's CUDA kernels run (gelu_approx.h, the same functions the device
// compiles) against double precision: float32 erf over ~4 million points of [-20, 20] plus a dense
// sweep of the tail, float16 erf and tanh over every float16 value. The device's approximate
// reciprocal and 2^x (MUFU.RCP / MUFU.EX2) are bounded by running every check also with both
// results pushed 2 ulp up and down. The float32 results are also held to the CPU kernel with the
// tolerance the GPU test uses (unary_cuda_test_util.h: 1e-5 relative, floor 1e-36).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "plugins/gelu/gelu.h"
#include "plugins/gelu/gelu_approx.h"
#include "src/core/half.h"

namespace kiln::plugins {
namespace {

using gelu_math::DeviceOps;

float nudge(float v, int ulps) {
  for (; ulps > 0; --ulps) v = std::nextafter(v, INFINITY);
  for (; ulps < 0; ++ulps) v = std::nextafter(v, -INFINITY);
  return v;
}

// DeviceOps with the reciprocal and 2^x off by R and E ulp.
template <int R, int E>
struct PerturbedOps : DeviceOps {
  static float rcp(float d) { return nudge(DeviceOps::rcp(d), R); }
  static float exp2(float x) { return nudge(DeviceOps::exp2(x), E); }
};

// Exact GELU(x) and Phi(-|x|) in double.
double gelu_exact(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

std::vector<float> float32_points() {
  std::vector<float> xs;
  const int n = 3 << 19;  // ~1.6 million over [-20, 20]
  for (int i = 0; i <= n; ++i) xs.push_back(static_cast<float>(-20.0 + 40.0 * i / n));
  for (int i = 0; i <= (1 << 19); ++i) xs.push_back(static_cast<float>(-14.0 + 6.0 * i / (1 << 19)));  // the tail
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 5e-4f, -5e-4f, 1e4f, -1e4f, 3e38f, -3e38f})
    xs.push_back(v);
  return xs;
}

struct Errors {
  double max_rel_same_z = 0;  // vs double at the same rounded z, where the result is normal
  double max_abs_scaled = 0;  // |y - GELU(x)| / max(1, |GELU(x)|), GELU exact in double
  double worst_x = 0;
};

template <typename Ops>
Errors float32_errors(const std::vector<float>& xs) {
  Errors e;
  for (float x : xs) {
    const float y = gelu_math::gelu_erf_f32<Ops>(x);
    const float z = std::fmaf(std::fabs(x), gelu_math::kSqrtHalf, 0.0f);
    const double q = 0.5 * std::erfc(static_cast<double>(z));
    const double ref_same_z = static_cast<double>(x) * (x >= 0 ? 1.0 - q : q);
    if (std::fabs(ref_same_z) > 1e-37) {
      const double rel = std::fabs(y - ref_same_z) / std::fabs(ref_same_z);
      if (rel > e.max_rel_same_z) {
        e.max_rel_same_z = rel;
        e.worst_x = x;
      }
    }
    const double exact = gelu_exact(x);
    e.max_abs_scaled = std::max(e.max_abs_scaled, std::fabs(y - exact) / std::max(1.0, std::fabs(exact)));
  }
  return e;
}

template <typename Ops>
void expect_float32_accurate(const std::vector<float>& xs, const std::string& what, double rel_bound) {
  const Errors e = float32_errors<Ops>(xs);
  SCOPED_TRACE(what);
  // 2.3e-7 fit + ~2 ulp of rounding in the polynomial and the products; 2-ulp reciprocal and
  // 2^x add up to ~5e-7 more.
  EXPECT_LE(e.max_rel_same_z, rel_bound) << "worst at x = " << e.worst_x;
  EXPECT_LE(e.max_abs_scaled, 1e-6);
  std::printf("GELU-erf float32 (%s): max rel err %.3g (x = %.9g), max abs err (scaled by max(1,|y|)) %.3g\n",
              what.c_str(), e.max_rel_same_z, e.worst_x, e.max_abs_scaled);
}

TEST(GeluApprox, Float32ErfMatchesDoublePrecision) {
  const std::vector<float> xs = float32_points();
  expect_float32_accurate<DeviceOps>(xs, "correctly rounded rcp/ex2", 8e-7);
  expect_float32_accurate<PerturbedOps<2, 2>>(xs, "rcp +2 ulp, ex2 +2 ulp", 1.5e-6);
  expect_float32_accurate<PerturbedOps<-2, -2>>(xs, "rcp -2 ulp, ex2 -2 ulp", 1.5e-6);
  expect_float32_accurate<PerturbedOps<2, -2>>(xs, "rcp +2 ulp, ex2 -2 ulp", 1.5e-6);
  expect_float32_accurate<PerturbedOps<-2, 2>>(xs, "rcp -2 ulp, ex2 +2 ulp", 1.5e-6);
}

// The GPU test's criterion against the CPU kernel (1e-5 relative, 1e-36 floor), here with the
// worst-case perturbed device operations.
TEST(GeluApprox, Float32ErfWithinGpuTestToleranceOfCpuKernel) {
  const std::vector<float> xs = float32_points();
  std::vector<float> cpu(xs.size());
  gelu_cpu(xs.data(), cpu.data(), static_cast<int64_t>(xs.size()), GeluApproximation::kErf, 2);
  int64_t failures = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    for (float y :
         {gelu_math::gelu_erf_f32<PerturbedOps<2, 2>>(xs[i]), gelu_math::gelu_erf_f32<PerturbedOps<-2, -2>>(xs[i])}) {
      if (!(std::fabs(static_cast<double>(y) - cpu[i]) <= 1e-5 * std::fabs(cpu[i]) + 1e-36)) {
        if (++failures <= 5) ADD_FAILURE() << "x = " << xs[i] << ": " << y << " vs CPU " << cpu[i];
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(GeluApprox, Float32ErfSpecialValues) {
  EXPECT_EQ(gelu_math::gelu_erf_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(gelu_math::gelu_erf_f32(-INFINITY)));  // -inf * 0, like the CPU kernel
  EXPECT_TRUE(std::isnan(gelu_math::gelu_erf_f32(NAN)));
  EXPECT_EQ(gelu_math::gelu_erf_f32(0.0f), 0.0f);
  EXPECT_EQ(gelu_math::gelu_erf_f32(-30.0f), 0.0f);  // true value -30 * 4.9e-199: below float
}

// Every finite float16 value x (as the kernel sees it, widened to float): the float result
// before the store's rounding is within `rel` of the double reference, or within 3e-8 (half
// of float16's smallest subnormal) where the reference is that small.
template <typename F>
void expect_all_float16(F f, double (*reference)(double), double rel, const std::string& what) {
  double worst = 0, worst_x = 0;
  int64_t failures = 0;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float x = half_bits_to_float(static_cast<uint16_t>(bits));
    if (!std::isfinite(x)) continue;
    const double ref = reference(x);
    const double y = f(x);
    const double err = std::fabs(y - ref);
    if (std::fabs(ref) > 6e-5) {
      if (err / std::fabs(ref) > worst) {
        worst = err / std::fabs(ref);
        worst_x = x;
      }
    }
    if (!(err <= rel * std::fabs(ref) + 3e-8)) {
      if (++failures <= 5) ADD_FAILURE() << what << ": x = " << x << ": " << y << " vs " << ref;
    }
  }
  EXPECT_EQ(failures, 0) << what;
  std::printf("%s: max rel err %.3g at x = %g (float16 rounding: 4.9e-4)\n", what.c_str(), worst, worst_x);
}

double gelu_tanh_exact(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x >= 0 ? 0.5 * x * (1.0 + std::tanh(u)) : 0.5 * x * std::exp(u) / std::cosh(u);
}

TEST(GeluApprox, Float16ErfAndTanhOverEveryFloat16Value) {
  expect_all_float16([](float x) { return gelu_math::gelu_erf_f16<DeviceOps>(x); }, gelu_exact, 8e-5,
                     "GELU-erf float16");
  expect_all_float16([](float x) { return gelu_math::gelu_erf_f16<PerturbedOps<2, 2>>(x); }, gelu_exact, 1e-4,
                     "GELU-erf float16, rcp/ex2 +2 ulp");
  expect_all_float16([](float x) { return gelu_math::gelu_erf_f16<PerturbedOps<-2, -2>>(x); }, gelu_exact, 1e-4,
                     "GELU-erf float16, rcp/ex2 -2 ulp");
  expect_all_float16([](float x) { return gelu_math::gelu_tanh_f16<DeviceOps>(x); }, gelu_tanh_exact, 5e-6,
                     "GELU-tanh float16");
  expect_all_float16([](float x) { return gelu_math::gelu_tanh_f16<PerturbedOps<2, 2>>(x); }, gelu_tanh_exact, 5e-6,
                     "GELU-tanh float16, rcp/ex2 +2 ulp");
  expect_all_float16([](float x) { return gelu_math::gelu_tanh_f16<PerturbedOps<-2, -2>>(x); }, gelu_tanh_exact, 5e-6,
                     "GELU-tanh float16, rcp/ex2 -2 ulp");
}

}  // namespace
}  // namespace kiln::plugins
