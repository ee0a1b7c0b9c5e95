// Builder optimization levels, the workspace limit and build time (issue 18), on the CPU: there
// the builder times plugin implementations on the host, so a plugin with several implementations
// (one slow, one needing a large workspace) makes every part visible: level 0 times nothing,
// levels time fewer or more runs, a slow implementation is stopped early, repeated identical
// layers are timed once per build, the workspace limit leaves implementations (and kernels) out
// and fails naming the layer when none fits, progress reaches the logger, and engines built at
// every level compute the same results.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/kernel.h"
#include "engine/engine_format.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "plugin_test_util.h"

namespace kiln {
namespace {

constexpr const char* kNamespace = "kiln_builder_levels_test";

// y = 2x + 1, in three ways: "medium" (sleeps 0.2 ms, 64 KiB workspace), "slow" (sleeps 2 ms,
// 16 bytes of workspace) and "big" (no sleep, 1 MiB of workspace). Counts its runs per tactic.
class ThreeWays : public Plugin {
 public:
  std::string type() const override { return "ThreeWays"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32 &&
           io[static_cast<size_t>(pos)].format == TensorFormat::kLinear;
  }
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>&,
                                   const std::vector<PluginTensorDesc>&) const override {
    return {"medium", "slow", "big"};
  }
  void set_tactic(const std::string& name) override { tactic_ = name; }
  size_t workspace_size(const std::vector<PluginTensorDesc>&, const std::vector<PluginTensorDesc>&) const override {
    if (tactic_ == "medium") return 64 << 10;
    if (tactic_ == "slow") return 16;
    if (tactic_ == "big") return 1 << 20;
    return 0;
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void* workspace, const PluginExecContext& exec) override {
    if (tactic_.empty()) return exec.fail("set_tactic was not called");
    if (workspace_size({}, {}) && !workspace) return exec.fail("no workspace");
    if (tactic_ == "medium") std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (tactic_ == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(2));
    count(tactic_);
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    for (int64_t i = 0; i < in[0].dims.volume(); ++i) y[i] = 2.0f * x[i] + 1.0f;
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<ThreeWays>(*this); }
  PluginFieldCollection fields() const override { return {}; }

  static void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    runs_.clear();
  }
  static int runs(const std::string& tactic) {
    std::lock_guard<std::mutex> lock(mutex_);
    return runs_[tactic];
  }
  static int total_runs() {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (const auto& [t, c] : runs_) n += c;
    return n;
  }

 private:
  static void count(const std::string& tactic) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++runs_[tactic];
  }
  std::string tactic_;
  static inline std::mutex mutex_;
  static inline std::map<std::string, int> runs_;
};

// One implementation, 2 MiB of workspace, y = x.
class Hungry : public Plugin {
 public:
  std::string type() const override { return "Hungry"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32;
  }
  size_t workspace_size(const std::vector<PluginTensorDesc>&, const std::vector<PluginTensorDesc>&) const override {
    return 2 << 20;
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext&) override {
    std::copy_n(static_cast<const float*>(inputs[0]), in[0].dims.volume(), static_cast<float*>(outputs[0]));
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<Hungry>(*this); }
  PluginFieldCollection fields() const override { return {}; }
};

// Two implementations of y = x: "quick" and "glacial" (50 ms a run), for a build that takes a while.
class Glacial : public Plugin {
 public:
  std::string type() const override { return "Glacial"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32;
  }
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>&,
                                   const std::vector<PluginTensorDesc>&) const override {
    return {"quick", "glacial"};
  }
  void set_tactic(const std::string& name) override { tactic_ = name; }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext&) override {
    if (tactic_ == "glacial") std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::copy_n(static_cast<const float*>(inputs[0]), in[0].dims.volume(), static_cast<float*>(outputs[0]));
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<Glacial>(*this); }
  PluginFieldCollection fields() const override { return {}; }

 private:
  std::string tactic_;
};

using ThreeWaysCreator = test::FieldlessCreator<ThreeWays>;
using HungryCreator = test::FieldlessCreator<Hungry>;
using GlacialCreator = test::FieldlessCreator<Glacial>;
KILN_REGISTER_PLUGIN(ThreeWaysCreator);
KILN_REGISTER_PLUGIN(HungryCreator);
KILN_REGISTER_PLUGIN(GlacialCreator);

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// x [4,8] -> `repeats` ThreeWays layers in a chain (identical configurations) -> Relu -> y;
// with `other_repeats`, a second input z [2,8] through as many more (another configuration).
std::unique_ptr<Network> chain(int repeats, int other_repeats = 0) {
  auto net = std::make_unique<Network>();
  Tensor* t = net->add_input("x", DataType::kFloat32, Dims{4, 8});
  for (int i = 0; i < repeats; ++i) t = add_plugin(*net, {t}, ThreeWays(), "three_" + std::to_string(i))->output(0);
  t = net->add_activation(t, ActivationType::kRelu)->output(0);
  t->set_name("y");
  net->mark_output(t);
  if (other_repeats) {
    Tensor* z = net->add_input("z", DataType::kFloat32, Dims{2, 8});
    for (int i = 0; i < other_repeats; ++i)
      z = add_plugin(*net, {z}, ThreeWays(), "other_" + std::to_string(i))->output(0);
    z->set_name("w");
    net->mark_output(z);
  }
  return net;
}

BuilderConfig config_at(int level) {
  BuilderConfig config;  // CPU
  config.optimization_level = level;
  return config;
}

std::string tactic_of(const std::vector<uint8_t>& bytes, const std::string& layer) {
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "levels test");
  const Layer* l = data.network->find_layer(layer);
  return l ? l->attrs().get_string("plugin_tactic", "") : std::string("(no layer ") + layer + ")";
}

std::vector<float> run(const std::vector<uint8_t>& bytes, const std::vector<float>& x) {
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "levels test");
  auto ctx = engine->create_execution_context();
  std::vector<float> y(x.size(), -1.0f);
  ctx->set_tensor_address("x", const_cast<float*>(x.data()));
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  return y;
}

TEST(BuilderLevels, OutOfRangeLevelsFailNamingTheRange) {
  auto net = chain(1);
  for (int level : {-1, 6, 42}) {
    const std::string err = error_of([&] { (void)Builder().build_serialized(*net, config_at(level)); });
    EXPECT_NE(err.find("optimization_level is " + std::to_string(level)), std::string::npos) << err;
    EXPECT_NE(err.find("0..5"), std::string::npos) << err;
  }
  for (int level = 0; level <= 5; ++level) {
    BuildReport report;
    EXPECT_NO_THROW((void)Builder().build_serialized(*net, config_at(level), &report)) << "level " << level;
    EXPECT_EQ(report.optimization_level, level);
  }
}

// tune_for_streams: 1..64, recorded in the engine; on the CPU it changes no choice (host timing
// of plugin implementations has no streams to share), so the same implementations are chosen
// and timed the same number of times. The CUDA side: CudaTunedStreams.* (GPU suite).
TEST(BuilderLevels, TuneForStreamsIsValidatedRecordedAndChangesNothingOnTheCpu) {
  auto net = chain(2);
  for (int n : {0, -3, 65}) {
    BuilderConfig config = config_at(3);
    config.tune_for_streams = n;
    const std::string err = error_of([&] { (void)Builder().build_serialized(*net, config); });
    EXPECT_NE(err.find("tune_for_streams is " + std::to_string(n)), std::string::npos) << err;
    EXPECT_NE(err.find("1..64"), std::string::npos) << err;
  }
  ThreeWays::reset();
  BuildReport plain;
  const auto one = Builder().build_serialized(*net, config_at(3), &plain);
  BuilderConfig config = config_at(3);
  config.tune_for_streams = 4;
  BuildReport tuned;
  const auto four = Builder().build_serialized(*net, config, &tuned);
  EXPECT_EQ(tuned.tactics_timed, plain.tactics_timed);
  EXPECT_EQ(tactic_of(four, "three_0"), tactic_of(one, "three_0"));
  EXPECT_EQ(engine_deserialize(four.data(), four.size(), "tuned").build_info.at("tuned_for_streams"), "4");
  EXPECT_EQ(engine_deserialize(one.data(), one.size(), "plain").build_info.count("tuned_for_streams"), 0u);
}

TEST(BuilderLevels, LevelZeroAndNoTimingTimeNothingAndTakeTheFirstImplementation) {
  auto net = chain(3);
  for (bool no_timing : {false, true}) {
    SCOPED_TRACE(no_timing ? "time_tactics = false at level 3" : "level 0");
    BuilderConfig config = config_at(no_timing ? 3 : 0);
    config.time_tactics = !no_timing;
    ThreeWays::reset();
    BuildReport report;
    const auto bytes = Builder().build_serialized(*net, config, &report);
    EXPECT_EQ(ThreeWays::total_runs(), 0) << "the build ran the plugin";
    EXPECT_EQ(report.layers_timed, 0);
    EXPECT_EQ(report.tactics_timed, 0);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(tactic_of(bytes, "three_" + std::to_string(i)), "medium");
    // The engine runs: every plugin object was told its implementation.
    const std::vector<float> y = run(bytes, std::vector<float>(32, 1.0f));
    EXPECT_EQ(y, std::vector<float>(32, 15.0f));  // ((1*2+1)*2+1)*2+1
  }
}

// A kernel offered at level 0 only (KernelEntry::max_optimization_level 0, as CUDA's
// cudnn_graph_precompiled): it outranks every CPU activation kernel for layers named
// "level0_probe*" and runs the reference kernel, counting its runs.
constexpr const char* kLevelZeroTactic = "test_level0_only";
std::atomic<int> g_level_zero_runs{0};

class LevelZeroActivation : public Kernel {
 public:
  explicit LevelZeroActivation(const Layer& layer)
      : inner_(KernelRegistry::instance().find(DeviceType::kCPU, kLayerActivation, "reference")->create(layer)) {}
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int threads) override {
    inner_->prepare(layer, in, out, threads);
  }
  void execute(const KernelContext& ctx) override {
    ++g_level_zero_runs;
    inner_->execute(ctx);
  }

 private:
  std::unique_ptr<Kernel> inner_;
};

const bool kLevelZeroRegistered = [] {
  KernelEntry e;
  e.device = DeviceType::kCPU;
  e.layer_type = kLayerActivation;
  e.tactic = kLevelZeroTactic;
  e.priority = 1000000;
  e.max_optimization_level = 0;
  e.supports = [](const Layer& l, const std::vector<TensorDesc>&) { return l.name().rfind("level0_probe", 0) == 0; };
  e.create = [](const Layer& l) { return std::make_unique<LevelZeroActivation>(l); };
  KernelRegistry::instance().add(e);
  return true;
}();

TEST(BuilderLevels, AKernelOfferedAtLevelZeroOnlyIsTakenThereAndWithoutTimingOnly) {
  ASSERT_TRUE(kLevelZeroRegistered);
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{4, 8});
  Layer* relu = net->add_activation(x, ActivationType::kRelu);
  relu->set_name("level0_probe_relu");
  relu->output(0)->set_name("y");
  net->mark_output(relu->output(0));
  std::vector<float> input(32);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i) - 15.5f;
  for (int level = 0; level <= 5; ++level) {
    SCOPED_TRACE("level " + std::to_string(level));
    const auto bytes = Builder().build_serialized(*net, config_at(level));
    const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "levels test");
    const std::string tactic = data.tactics.at("level0_probe_relu");
    if (level == 0) {
      EXPECT_EQ(tactic, kLevelZeroTactic);
    } else {
      EXPECT_NE(tactic, kLevelZeroTactic);
    }
    // The engine loads (the kernel is found by its name, whatever the level) and runs it.
    g_level_zero_runs = 0;
    const std::vector<float> y = run(bytes, input);
    EXPECT_EQ(g_level_zero_runs.load(), level == 0 ? 1 : 0);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], std::max(0.0f, input[i])) << "element " << i;
  }
  // time_tactics = false makes level 0's choice whatever the level says.
  BuilderConfig untimed = config_at(5);
  untimed.time_tactics = false;
  const auto bytes = Builder().build_serialized(*net, untimed);
  EXPECT_EQ(engine_deserialize(bytes.data(), bytes.size(), "levels test").tactics.at("level0_probe_relu"),
            kLevelZeroTactic);
}

TEST(BuilderLevels, IdenticalLayersAreTimedOncePerBuild) {
  auto net = chain(5, 2);
  ThreeWays::reset();
  BuildReport report;
  const auto bytes = Builder().build_serialized(*net, config_at(3), &report);
  EXPECT_EQ(report.layers_timed, 2) << "two configurations: x [4,8] and z [2,8]";
  EXPECT_EQ(report.layers_reused, 5) << "4 repeats of the first configuration, 1 of the second";
  EXPECT_EQ(report.tactics_timed, 6) << "3 implementations x 2 configurations";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(tactic_of(bytes, "three_" + std::to_string(i)), "big");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(tactic_of(bytes, "other_" + std::to_string(i)), "big");
  // Without reuse, "slow" would have run in each of the 7 layers (2 runs each, stopped early).
  EXPECT_LE(ThreeWays::runs("slow"), 2 * 2) << "slow ran " << ThreeWays::runs("slow") << " times";
}

TEST(BuilderLevels, AClearlySlowerImplementationIsStoppedEarlyBelowLevel5) {
  auto net = chain(1);
  // Level 3: median of 3 measurements; "slow" (2 ms) is over twice the early-stop bound (1.25x
  // "medium"'s 0.2 ms) after its single sizing run, so it is not measured at all: warm-up + that run.
  ThreeWays::reset();
  BuildReport report;
  (void)Builder().build_serialized(*net, config_at(3), &report);
  EXPECT_EQ(report.tactics_stopped_early, 1);
  EXPECT_EQ(ThreeWays::runs("slow"), 1 + 1);
  // Level 5: no early stop, median of 5 measurements; a run of "slow" is the whole 2 ms target, so
  // each measurement is one run. Then level 5's check chooses as level 3 would (warm-up and the
  // sizing run again); both choose "big", so no engine is timed whole.
  ThreeWays::reset();
  BuildReport full;
  (void)Builder().build_serialized(*net, config_at(5), &full);
  EXPECT_EQ(full.tactics_stopped_early, 0);
  EXPECT_EQ(full.level5_layers_differing, 0);
  EXPECT_EQ(ThreeWays::runs("slow"), 1 + 1 + 5 + (1 + 1));
  EXPECT_GT(ThreeWays::runs("big"), ThreeWays::runs("slow")) << "the fast one runs more per measurement";
}

TEST(BuilderLevels, LowLevelsTimeFewerImplementations) {
  auto net = chain(1);
  ThreeWays::reset();
  BuildReport report;
  const auto bytes = Builder().build_serialized(*net, config_at(1), &report);
  EXPECT_EQ(report.tactics_timed, 2) << "level 1 times the 2 first implementations";
  EXPECT_EQ(ThreeWays::runs("big"), 0);
  EXPECT_EQ(tactic_of(bytes, "three_0"), "medium");
  ThreeWays::reset();
  (void)Builder().build_serialized(*net, config_at(2), &report);
  EXPECT_EQ(report.tactics_timed, 3);
  EXPECT_GT(ThreeWays::runs("big"), 0);
}

TEST(BuilderLevels, EnginesBuiltAtEveryLevelComputeTheSame) {
  auto net = chain(4);
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0f;
  const std::vector<float> ref = run(Builder().build_serialized(*net, config_at(3)), x);
  for (int level = 0; level <= 5; ++level) {
    const std::vector<float> y = run(Builder().build_serialized(*net, config_at(level)), x);
    ASSERT_EQ(y.size(), ref.size());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-5) << "level " << level << " element " << i;
  }
  EXPECT_NEAR(ref[3], std::max(0.0f, x[3] * 16.0f + 15.0f), 1e-4);
}

TEST(BuilderLevels, TheWorkspaceLimitLeavesOutImplementationsThatNeedMore) {
  auto net = chain(2);
  // No limit: "big" (no sleep) wins; the engine records its 1 MiB workspace.
  BuildReport report;
  auto bytes = Builder().build_serialized(*net, config_at(3), &report);
  EXPECT_EQ(tactic_of(bytes, "three_0"), "big");
  EXPECT_EQ(report.workspace_bytes, 1u << 20);
  EXPECT_EQ(report.tactics_over_workspace, 0);
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "levels test");
  EXPECT_EQ(data.build_info.at("workspace_bytes"), std::to_string(1 << 20));
  // 100 KiB: "big" is not considered, "medium" wins over "slow".
  BuilderConfig limited = config_at(3);
  limited.workspace_limit = 100 << 10;
  bytes = Builder().build_serialized(*net, limited, &report);
  EXPECT_EQ(tactic_of(bytes, "three_0"), "medium");
  EXPECT_EQ(tactic_of(bytes, "three_1"), "medium");
  EXPECT_EQ(report.workspace_bytes, 64u << 10);
  EXPECT_EQ(report.tactics_over_workspace, 2) << "big, in each of the two layers";
  EXPECT_EQ(engine_deserialize(bytes.data(), bytes.size(), "t").build_info.at("workspace_limit_bytes"),
            std::to_string(100 << 10));
  // Level 0 takes the first implementation within the limit.
  BuilderConfig level0 = config_at(0);
  level0.workspace_limit = 1024;
  bytes = Builder().build_serialized(*net, level0, &report);
  EXPECT_EQ(tactic_of(bytes, "three_0"), "slow");
  EXPECT_EQ(run(bytes, std::vector<float>(32, 0.0f)), std::vector<float>(32, 3.0f));
}

TEST(BuilderLevels, WhenNothingFitsTheErrorNamesTheLayerAndTheSmallestWorkspace) {
  auto net = chain(2);
  BuilderConfig config = config_at(3);
  config.workspace_limit = 8;
  std::string err = error_of([&] { (void)Builder().build_serialized(*net, config); });
  EXPECT_NE(err.find("'three_0'"), std::string::npos) << err;
  EXPECT_NE(err.find("limit of 8 bytes"), std::string::npos) << err;
  EXPECT_NE(err.find("'slow', needs 16 bytes"), std::string::npos) << err;
  EXPECT_NE(err.find("--workspace-limit"), std::string::npos) << err;

  // A plugin without implementations to choose from: its one kernel is over the limit.
  Network hungry;
  Tensor* x = hungry.add_input("x", DataType::kFloat32, Dims{4, 8});
  Layer* l = add_plugin(hungry, {x}, Hungry(), "hungry_layer");
  hungry.mark_output(l->output(0));
  config.workspace_limit = 1 << 20;
  err = error_of([&] { (void)Builder().build_serialized(hungry, config); });
  EXPECT_NE(err.find("'hungry_layer'"), std::string::npos) << err;
  EXPECT_NE(err.find("needs " + std::to_string(2 << 20) + " bytes"), std::string::npos) << err;
  config.workspace_limit = 2 << 20;
  BuildReport report;
  EXPECT_NO_THROW((void)Builder().build_serialized(hungry, config, &report));
  EXPECT_EQ(report.workspace_bytes, 2u << 20);
}

class CaptureInfo : public Logger {
 public:
  void log(Severity severity, const std::string& message) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (severity == Severity::kInfo) lines.push_back(message);
  }
  std::mutex mutex_;
  std::vector<std::string> lines;
};

TEST(BuilderLevels, ALongBuildReportsProgressThroughTheLogger) {
  // 8 configurations (batch 1..8), each timing "glacial" for 7 runs of 50 ms at level 5 (warm-up,
  // the sizing run, 5 measurements of one run): about 2.8 s, so at least one progress line (every 1.5 s at most).
  Network net;
  for (int b = 1; b <= 8; ++b) {
    Tensor* x = net.add_input("x" + std::to_string(b), DataType::kFloat32, Dims{b, 8});
    net.mark_output(add_plugin(net, {x}, Glacial(), "glacial_" + std::to_string(b))->output(0));
  }
  CaptureInfo capture;
  set_logger(&capture);
  BuildReport report;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)Builder().build_serialized(net, config_at(5), &report);
  } catch (...) {
    set_logger(nullptr);
    throw;
  }
  set_logger(nullptr);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(report.layers_timed, 8);
  std::vector<std::string> progress;
  for (const auto& line : capture.lines) {
    if (line.find("timing plugin implementations: layer ") != std::string::npos) progress.push_back(line);
  }
  ASSERT_GE(progress.size(), 1u) << "no progress line in a " << seconds << " s build";
  EXPECT_LE(progress.size(), static_cast<size_t>(seconds / 1.5) + 1) << "more than one line per 1.5 s";
  EXPECT_NE(progress.front().find(" of 8 ("), std::string::npos) << progress.front();
  EXPECT_NE(progress.front().find("s left"), std::string::npos) << progress.front();
}

TEST(BuilderLevels, AnUnknownPassNameFailsListingTheValidNames) {
  auto net = chain(1);
  BuilderConfig config = config_at(3);
  config.disabled_passes = {"no_such_pass"};
  const std::string err = error_of([&] { (void)Builder().build_serialized(*net, config); });
  EXPECT_NE(err.find("'no_such_pass'"), std::string::npos) << err;
  for (const std::string& name : builder_pass_names()) EXPECT_NE(err.find(name), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
