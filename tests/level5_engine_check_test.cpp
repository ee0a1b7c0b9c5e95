// Builder optimization level 5's whole-engine check (src/builder/builder.cpp, check_against_level3;
// src/builder/engine_check.cpp): a kernel timed alone can look faster than it is inside the
// engine (on the GPU: its data in cache when timed alone, not in the network), so level 5 also
// chooses the kernels as level 3 would and, where the two differ, times both engines whole and
// keeps the faster. Two test kernels join the CPU convolutions of layers named "check_probe*":
// both write the bias alone when the input is all zeros (what a kernel timed alone is given:
// they win every timing against the real kernels), and otherwise run the best real kernel, late by
// what the test sets. "level 5" is a level-5-only candidate; "level 0" a candidate at every level,
// slower than "level 5" on zeros by a quarter of the real kernel's time (at least 30 us): a margin
// that scales with the build (0.1 ms kernels in release builds, tens of ms for the reference
// kernel in the sanitizer build, where a fixed 30 us margin was lost in the noise of the timing).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "cpu_engine_run.h"
#include "log_capture.h"
#include "op_harness.h"
#include "src/backends/kernel.h"
#include "src/engine/engine_format.h"

namespace kiln {
namespace {

constexpr const char* kLevel5Tactic = "test_check_level5";
constexpr const char* kLevel0Tactic = "test_check_level0";

bool is_probe(const Layer& layer) { return layer.name().rfind("check_probe", 0) == 0; }

// What each test kernel adds when the input is not all zeros (ms); a negative value turns the
// kernel off (supports() declines).
std::atomic<int> g_level5_late_ms{0};
std::atomic<int> g_level0_late_ms{-1};
// How long the "level 0" kernel spins on zeros (us); set from the real kernel's time.
std::atomic<int> g_level0_zero_spin_us{30};

bool probe_supports(const Layer& layer, const std::vector<TensorDesc>& in, const std::atomic<int>& late) {
  if (late.load() < 0 || !is_probe(layer) || in.size() < 3 || !in[2].present) return false;
  for (const TensorDesc& d : in) {
    if (d.present && (d.type != DataType::kFloat32 || d.format != TensorFormat::kLinear)) return false;
  }
  return layer.output(0)->format() == TensorFormat::kLinear;
}

class ZeroAwareConv : public Kernel {
 public:
  ZeroAwareConv(const std::atomic<int>& late, const std::atomic<int>* zero_spin_us)
      : late_(late), zero_spin_us_(zero_spin_us) {}
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int threads) override {
    for (const KernelEntry* e : KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution)) {
      // The best real kernel: oneDNN's or kiln's own, or the reference kernel in builds with none
      // for this layer (the sanitizer build has no oneDNN and no NCHW kernel of this size).
      if (e->tactic.rfind("test_", 0) == 0 || (e->supports && !e->supports(layer, in))) continue;
      inner_ = e->create(layer);
      inner_->prepare(layer, in, out, threads);
      return;
    }
    throw Error("test kernel: no real CPU kernel takes '" + layer.name() + "'");
  }
  size_t workspace_size() const override { return inner_ ? inner_->workspace_size() : 0; }
  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs[0];
    const float* xs = static_cast<const float*>(x.data);
    const bool zeros = std::all_of(xs, xs + x.dims.volume(), [](float v) { return v == 0.0f; });
    if (!zeros) {
      std::this_thread::sleep_for(std::chrono::milliseconds(late_.load()));
      inner_->execute(ctx);
      return;
    }
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(zero_spin_us_ ? zero_spin_us_->load() : 0);
    while (std::chrono::steady_clock::now() < until) {}
    // A convolution of zeros is its bias: NCHW, one value per output channel.
    const TensorView& y = ctx.outputs[0];
    const float* bias = static_cast<const float*>(ctx.inputs[2].data);
    const int64_t n = y.dims[0], k = y.dims[1], pixels = y.dims.volume() / (n * k);
    float* out = static_cast<float*>(y.data);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t c = 0; c < k; ++c) std::fill_n(out + (b * k + c) * pixels, pixels, bias[c]);
    }
  }

 private:
  const std::atomic<int>& late_;
  const std::atomic<int>* zero_spin_us_;
  std::unique_ptr<Kernel> inner_;
};

const bool kRegistered = [] {
  // Priorities 2 and 1: after every real kernel and before the reference kernel (0), which the
  // CPU's timing leaves out where another kernel takes the layer.
  KernelEntry level5;
  level5.device = DeviceType::kCPU;
  level5.layer_type = kLayerConvolution;
  level5.tactic = kLevel5Tactic;
  level5.priority = 2;
  level5.min_optimization_level = 5;
  level5.supports = [](const Layer& l, const std::vector<TensorDesc>& in) {
    return probe_supports(l, in, g_level5_late_ms);
  };
  level5.create = [](const Layer&) { return std::make_unique<ZeroAwareConv>(g_level5_late_ms, nullptr); };
  KernelRegistry::instance().add(level5);
  KernelEntry level0 = level5;
  level0.tactic = kLevel0Tactic;
  level0.priority = 1;
  level0.min_optimization_level = 0;
  level0.supports = [](const Layer& l, const std::vector<TensorDesc>& in) {
    return probe_supports(l, in, g_level0_late_ms);
  };
  // Slower alone than the level-5 one on zeros, still faster than a real kernel.
  level0.create = [](const Layer&) {
    return std::make_unique<ZeroAwareConv>(g_level0_late_ms, &g_level0_zero_spin_us);
  };
  KernelRegistry::instance().add(level0);
  return true;
}();

std::unique_ptr<Network> probe_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, 32, 28, 28});
  ConvolutionDesc d;
  d.num_output_maps = 32;
  d.kernel = {3, 3};
  d.pads_begin = d.pads_end = {1, 1};
  Layer* conv = net->add_convolution(x, d, test::random_tensor(DataType::kFloat32, Dims{32, 32, 3, 3}, 3, -0.1, 0.1),
                                     test::random_tensor(DataType::kFloat32, Dims{32}, 4, -0.1, 0.1));
  conv->set_name("check_probe_conv");
  conv->output(0)->set_name("y");
  net->mark_output(conv->output(0));
  return net;
}

struct Built {
  std::vector<uint8_t> bytes;
  BuildReport report;
  std::vector<std::string> info;
  std::string tactic, check;
};

Built build(int level, int level5_late_ms, int level0_late_ms) {
  g_level5_late_ms = level5_late_ms;
  g_level0_late_ms = level0_late_ms;
  test::LogCapture capture(Severity::kInfo, "level 5");
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  config.num_threads = 1;
  config.optimization_level = level;
  config.disabled_passes = {"layout"};  // the test kernels take linear memory only
  Built b;
  auto net = probe_net();
  b.bytes = Builder().build_serialized(*net, config, &b.report);
  b.info = capture.take();
  const EngineData data = engine_deserialize(b.bytes.data(), b.bytes.size(), "level 5 check");
  b.tactic = data.tactics.at("check_probe_conv");
  const auto it = data.build_info.find("level5_check");
  if (it != data.build_info.end()) b.check = it->second;
  return b;
}

// The best real kernel's time on the probe (ms): level 3's engine with both test kernels off, the
// fastest of 5 runs after a warm-up; measured once per process.
double real_kernel_ms() {
  static const double ms = [] {
    const Built b = build(3, -1, -1);
    auto engine = Runtime().deserialize(b.bytes.data(), b.bytes.size(), "level 5 check");
    auto ctx = engine->create_execution_context();
    const HostTensor x = test::random_tensor(DataType::kFloat32, Dims{1, 32, 28, 28}, 9, -2.0, 2.0);
    HostTensor y(DataType::kFloat32, ctx->tensor_shape("y"));
    ctx->set_tensor_address("x", const_cast<void*>(x.data()));
    ctx->set_tensor_address("y", y.data());
    ctx->execute();
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      ctx->execute();
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  }();
  return ms;
}

// Sets the "level 0" kernel's margin on zeros to a quarter of the real kernel's time (at least 30
// us) and returns how late a test kernel runs inside the engine: twice the real kernel's time, at
// least 30 ms.
int scale_margins() {
  const double real = real_kernel_ms();
  g_level0_zero_spin_us = std::max(30, static_cast<int>(real * 250.0));
  return std::max(30, static_cast<int>(std::ceil(2.0 * real)));
}

void expect_same_results(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const HostTensor x = test::random_tensor(DataType::kFloat32, Dims{1, 32, 28, 28}, 9, -2.0, 2.0);
  test::expect_close(test::run_x_to_y(a, x, "level 5 check"), test::run_x_to_y(b, x, "level 5 check"));
}

// The level-5-only kernel wins its timing (zeros) but runs late inside the engine: the engine
// keeps level 3's kernel, and says so.
TEST(Level5EngineCheck, KeepsLevel3sKernelsWhereTheWholeEngineIsFasterWithThem) {
  ASSERT_TRUE(kRegistered);
  const int late = scale_margins();
  const Built l5 = build(5, late, -1);
  EXPECT_EQ(l5.report.level5_layers_differing, 1);
  EXPECT_TRUE(l5.report.level3_kernels_kept);
  EXPECT_GT(l5.report.level5_engine_ms, l5.report.level3_engine_ms + late * 2 / 3.0)
      << l5.report.level5_engine_ms << " against " << l5.report.level3_engine_ms;
  EXPECT_NE(l5.tactic, kLevel5Tactic) << "the engine kept the kernel that is slow in it";
  EXPECT_NE(l5.check.find("level 3's kept"), std::string::npos) << l5.check;
  EXPECT_GT(l5.report.level5_check_seconds, 0.0);
  EXPECT_TRUE(std::any_of(l5.info.begin(), l5.info.end(), [](const std::string& s) {
    return s.find("level 3's kept") != std::string::npos;
  })) << ::testing::PrintToString(l5.info);
  // Level 3 itself: neither the check nor the level-5-only kernel.
  const Built l3 = build(3, late, -1);
  EXPECT_EQ(l3.report.level5_layers_differing, -1);
  EXPECT_EQ(l3.tactic, l5.tactic);
  EXPECT_TRUE(l3.check.empty()) << l3.check;
  expect_same_results(l5.bytes, l3.bytes);
}

// Level 3's choice (the every-level test kernel, which wins its timing) runs late inside the
// engine, level 5's (the level-5-only one, faster still alone) does not: level 5's kept.
TEST(Level5EngineCheck, KeepsLevel5sKernelsWhereTheyAreFasterWhole) {
  ASSERT_TRUE(kRegistered);
  const int late = scale_margins();
  const Built l3 = build(3, 0, late);
  EXPECT_EQ(l3.tactic, kLevel0Tactic) << "level 3 took the every-level test kernel";
  const Built l5 = build(5, 0, late);
  EXPECT_EQ(l5.tactic, kLevel5Tactic) << "level 5 took the level-5-only test kernel";
  EXPECT_EQ(l5.report.level5_layers_differing, 1);
  EXPECT_FALSE(l5.report.level3_kernels_kept);
  EXPECT_GT(l5.report.level3_engine_ms, l5.report.level5_engine_ms + late * 2 / 3.0)
      << l5.report.level3_engine_ms << " against " << l5.report.level5_engine_ms;
  EXPECT_NE(l5.check.find("level 5's kept"), std::string::npos) << l5.check;
  expect_same_results(l5.bytes, l3.bytes);
}

// Where level 3 would choose the same kernels, nothing is timed whole and the engine says so.
TEST(Level5EngineCheck, SameChoicesAreNotTimedAgainWhole) {
  ASSERT_TRUE(kRegistered);
  const Built l5 = build(5, -1, 0);  // only the every-level test kernel: it wins at both levels
  EXPECT_EQ(l5.tactic, kLevel0Tactic);
  EXPECT_EQ(l5.report.level5_layers_differing, 0);
  EXPECT_EQ(l5.report.level5_engine_ms, 0.0);
  EXPECT_EQ(l5.report.level3_engine_ms, 0.0);
  EXPECT_NE(l5.check.find("same kernels"), std::string::npos) << l5.check;
  g_level0_late_ms = -1;
}

}  // namespace
}  // namespace kiln
