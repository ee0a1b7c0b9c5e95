// Test helpers shared by the element-wise built-in plugins' tests (plugins/<name>/<name>_test.cpp
// and <name>_cuda_test.cpp): deterministic inputs, running a plugin through enqueue on the CPU,
// comparing outputs with an independent double-precision reference, and creating plugins the
// way kiln does (registry -> resolve_fields -> create).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "kiln/types.h"

namespace kiln::plugins::testing {

// Sizes every kernel must handle: one element, odd sizes around vector widths, and a large odd
// size split over threads with a ragged last chunk.
inline const std::vector<int64_t> kOddSizes = {1, 13, 127, 1000003};

// n deterministic values: first a fixed list of interesting points (0, -0, tiny, +-1, +-20, ...),
// then uniform in [lo, hi] from a 64-bit LCG (no dependence on the standard library's
// distributions, so every platform tests the same values).
inline std::vector<float> make_inputs(int64_t n, uint64_t seed = 1, float lo = -20.0f, float hi = 20.0f) {
  static const float kFixed[] = {0.0f,  -0.0f, 1e-30f, -1e-30f, 1e-3f, -1e-3f, 0.5f,   -0.5f,  1.0f,
                                 -1.0f, 2.5f,  -2.5f,  5.0f,    -5.0f, 10.0f,  -10.0f, 19.99f, -19.99f};
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<size_t>(i) < std::size(kFixed)) {
      v[static_cast<size_t>(i)] = std::min(hi, std::max(lo, kFixed[i]));
      continue;
    }
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) * 0x1.0p-53;  // [0, 1)
    v[static_cast<size_t>(i)] = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

// Runs `plugin` on the CPU over one float32 tensor of `dims` (linear): y = plugin(x).
// Returns enqueue's code.
inline int run_cpu(Plugin& plugin, const Dims& dims, const float* x, float* y, int num_threads = 1) {
  PluginTensorDesc desc;
  desc.type = DataType::kFloat32;
  desc.format = TensorFormat::kLinear;
  desc.dims = dims;
  const void* inputs[] = {x};
  void* outputs[] = {y};
  PluginExecContext exec;
  exec.device = DeviceType::kCPU;
  exec.num_threads = num_threads;
  return plugin.enqueue({desc}, {desc}, inputs, outputs, nullptr, exec);
}

// Runs `plugin` on the CPU over x (as a rank-1 tensor) and returns y.
inline std::vector<float> run_cpu(Plugin& plugin, const std::vector<float>& x, int num_threads = 1) {
  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  const int rc = run_cpu(plugin, Dims{static_cast<int64_t>(x.size())}, x.data(), y.data(), num_threads);
  EXPECT_EQ(rc, 0) << plugin.type() << " enqueue failed";
  return y;
}

// The largest allowed |y - ref| for an input x and its reference value ref.
using Tolerance = std::function<double(float x, double ref)>;

// Relative tolerance `rtol` plus an absolute floor below the normal float range (results under
// FLT_MIN are subnormal and carry fewer significant bits).
inline Tolerance relative_tolerance(double rtol, double atol = 1.2e-38) {
  return [=](float, double ref) { return rtol * std::fabs(ref) + atol; };
}

// Checks y[i] against expected(i) for all i; reports the count and the first few failures.
template <typename Expected>
::testing::AssertionResult matches_expected(const float* x, const float* y, int64_t n, const Expected& expected,
                                            const Tolerance& tol) {
  int64_t failures = 0;
  std::string report;
  for (int64_t i = 0; i < n; ++i) {
    const double r = expected(i);
    const double got = static_cast<double>(y[i]);
    const bool ok = (std::isnan(r) && std::isnan(got)) || (std::isinf(r) && got == r) ||
                    (std::isfinite(r) && std::fabs(got - r) <= tol(x[i], r));
    if (!ok) {
      if (failures < 8) {
        char line[200];
        std::snprintf(line, sizeof(line), "\n  [%lld] x=%.9g y=%.9g expected=%.9g rel=%.3g", static_cast<long long>(i),
                      static_cast<double>(x[i]), got, r, std::fabs(got - r) / std::fabs(r));
        report += line;
      }
      ++failures;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << n << " elements differ:" << report;
}

// Checks y[i] against ref(x[i]) for all i.
inline ::testing::AssertionResult matches_reference(const float* x, const float* y, int64_t n,
                                                    const std::function<double(double)>& ref, const Tolerance& tol) {
  return matches_expected(
      x, y, n, [&](int64_t i) { return ref(static_cast<double>(x[i])); }, tol);
}

inline ::testing::AssertionResult matches_reference(const std::vector<float>& x, const std::vector<float>& y,
                                                    const std::function<double(double)>& ref, const Tolerance& tol) {
  if (x.size() != y.size()) return ::testing::AssertionFailure() << "size " << y.size() << " != " << x.size();
  return matches_reference(x.data(), y.data(), static_cast<int64_t>(x.size()), ref, tol);
}

// The registered creator `name` (version "1", namespace ""); fails the test when absent.
inline const PluginCreator* registered_creator(const std::string& name) {
  const PluginCreator* creator = PluginRegistry::instance().find(name, "1", "");
  EXPECT_NE(creator, nullptr) << "plugin '" << name << "' is not registered";
  return creator;
}

// Creates plugin `name` as kiln does: registry lookup, fields checked and defaults filled by
// resolve_fields, then the creator. Throws what they throw.
inline std::unique_ptr<Plugin> create_registered(const std::string& name, const PluginFieldCollection& fields,
                                                 const std::string& layer_name = "test_layer") {
  const PluginCreator* creator = PluginRegistry::instance().find(name, "1", "");
  if (creator == nullptr) throw std::runtime_error("plugin '" + name + "' is not registered");
  const PluginFieldCollection resolved =
      PluginRegistry::instance().resolve_fields(*creator, fields, "layer '" + layer_name + "'");
  return creator->create(layer_name, resolved);
}

// Dims of rank 1..5 with a batch > 1 and some size-1 extents.
inline const std::vector<Dims>& rank_cases() {
  static const std::vector<Dims> cases = {Dims{17}, Dims{3, 11}, Dims{2, 1, 13}, Dims{2, 3, 5, 7}, Dims{3, 2, 1, 4, 5}};
  return cases;
}

// ---- the standard CPU checks, against a double-precision reference --------------------------

using Reference = std::function<double(double)>;

// Odd sizes (1, 13, 127, 1000003), the large one on 1 and 3 threads (ragged chunks).
inline void check_odd_sizes(Plugin& plugin, const Reference& ref, const Tolerance& tol) {
  for (const int64_t n : kOddSizes) {
    const std::vector<float> x = make_inputs(n, static_cast<uint64_t>(n));
    for (const int threads : n > 1000 ? std::vector<int>{1, 3} : std::vector<int>{1}) {
      EXPECT_TRUE(matches_reference(x, run_cpu(plugin, x, threads), ref, tol))
          << plugin.type() << " n=" << n << " threads=" << threads;
    }
  }
}

// Ranks 1..5 with batch > 1: the kernel covers every element of the tensor, nothing more.
inline void check_ranks(Plugin& plugin, const Reference& ref, const Tolerance& tol) {
  for (const Dims& dims : rank_cases()) {
    const int64_t n = dims.volume();
    const std::vector<float> x = make_inputs(n, 7);
    std::vector<float> y(static_cast<size_t>(n) + 4, -12345.0f);  // guard elements after the output
    ASSERT_EQ(run_cpu(plugin, dims, x.data(), y.data(), 2), 0) << dims.to_string();
    EXPECT_TRUE(matches_reference(x.data(), y.data(), n, ref, tol)) << plugin.type() << " dims " << dims.to_string();
    for (size_t i = static_cast<size_t>(n); i < y.size(); ++i) EXPECT_EQ(y[i], -12345.0f) << "guard overwritten";
  }
}

// Input and output one float past an aligned address (alone or together), and in place.
inline void check_misaligned_and_in_place(Plugin& plugin, const Reference& ref, const Tolerance& tol) {
  const int64_t n = 1000;
  const std::vector<float> x = make_inputs(n, 3);
  for (const auto& [in_offset, out_offset] : {std::pair{1, 1}, std::pair{1, 0}, std::pair{0, 3}}) {
    std::vector<float> in(static_cast<size_t>(n) + 4), out(static_cast<size_t>(n) + 4);
    std::copy(x.begin(), x.end(), in.begin() + in_offset);
    ASSERT_EQ(run_cpu(plugin, Dims{n}, in.data() + in_offset, out.data() + out_offset, 1), 0);
    EXPECT_TRUE(matches_reference(x.data(), out.data() + out_offset, n, ref, tol))
        << plugin.type() << " input offset " << in_offset << ", output offset " << out_offset << " floats";
  }
  std::vector<float> buffer = x;
  ASSERT_EQ(run_cpu(plugin, Dims{n}, buffer.data(), buffer.data(), 2), 0);
  EXPECT_TRUE(matches_reference(x, buffer, ref, tol)) << plugin.type() << " in place";
}

// Identity checks every built-in plugin must pass: registered under `name`, version "1",
// namespace "", one output of the input's type and dims (symbolic dims stay symbolic).
inline void check_identity(const std::string& name) {
  const PluginCreator* creator = registered_creator(name);
  ASSERT_NE(creator, nullptr);
  EXPECT_EQ(creator->name(), name);
  EXPECT_EQ(creator->version(), "1");
  EXPECT_EQ(creator->plugin_namespace(), "");
  const std::unique_ptr<Plugin> plugin = create_registered(name, {});
  EXPECT_EQ(plugin->type(), name);
  EXPECT_EQ(plugin->version(), "1");
  EXPECT_EQ(plugin->plugin_namespace(), "");
  EXPECT_EQ(plugin->num_outputs(), 1);
  EXPECT_EQ(plugin->output_types({DataType::kFloat16}), std::vector<DataType>{DataType::kFloat16});
  EXPECT_EQ(plugin->output_types({DataType::kFloat32}), std::vector<DataType>{DataType::kFloat32});

  ExprBuilder exprs;
  DimsExprs in;
  for (int axis = 0; axis < 4; ++axis) in.d.push_back(exprs.input_dim(0, axis));
  const DimsExprs out = plugin->output_dims(0, {in}, exprs);
  ASSERT_EQ(out.rank(), 4);
  const Dims concrete{2, 3, 5, 7};
  for (int axis = 0; axis < 4; ++axis) {
    EXPECT_EQ(out.d[static_cast<size_t>(axis)]->to_string(), in.d[static_cast<size_t>(axis)]->to_string());
    EXPECT_EQ(out.d[static_cast<size_t>(axis)]->evaluate({concrete}), concrete[axis]);
  }
  const std::unique_ptr<Plugin> copy = plugin->clone();
  EXPECT_EQ(copy->type(), name);
}

// The fields of a collection that holds one float32 scalar.
inline PluginFieldCollection one_float32_field(const std::string& name, float value) {
  PluginFieldCollection c;
  c.add(PluginField::float32(name, {value}));
  return c;
}

}  // namespace kiln::plugins::testing
