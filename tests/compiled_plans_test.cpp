// Compiled plans carried in engine files (BuilderConfig::embed_compiled_plans, the KSTATE section,
// src/backends/prepared_state.h), with a CPU kernel registered here that exports a state per
// input shape and records whether prepare() found it: the builder stores the chosen kernels'
// states at every profile point; loading an engine with Runtime::set_allow_compiled_plans makes
// them findable for its lifetime (shared between engines with equal keys), loading it without
// does not and says how to opt in; KILN_COMPILED_PLANS=0 hides them; embed_compiled_plans off
// stores none; a damaged or misordered KSTATE section is rejected naming the state. The cuDNN
// plans themselves are tested on a GPU (CudaConvGraph.EnginesCarryCompiledPlansThatLoadWithoutBuilding).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "log_capture.h"
#include "scoped_env.h"
#include "src/backends/kernel.h"
#include "src/backends/prepared_state.h"
#include "src/engine/engine_format.h"

namespace kiln {
namespace {

using test::ScopedEnv;

constexpr const char* kProbeTactic = "test_prepared_state_probe";
std::atomic<int> g_prepares{0};
std::atomic<int> g_found{0};

std::string probe_key(const Dims& dims) { return std::string("test_probe|") + dims.to_string(); }
std::string probe_text(const Dims& dims) { return "the state of " + dims.to_string(); }

// The reference ReLU, plus a state per input shape: "the state of nx8" under "test_probe|nx8".
class StateProbe : public Kernel {
 public:
  explicit StateProbe(const Layer& layer)
      : inner_(KernelRegistry::instance().find(DeviceType::kCPU, kLayerActivation, "reference")->create(layer)) {}
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int threads) override {
    inner_->prepare(layer, in, out, threads);
    dims_ = in[0].dims;
    ++g_prepares;
    const auto state = find_prepared_state(probe_key(dims_));
    const std::string expected = probe_text(dims_);
    if (state && std::string(state->begin(), state->end()) == expected) ++g_found;
  }
  void execute(const KernelContext& ctx) override { inner_->execute(ctx); }
  std::vector<PreparedState> prepared_states() const override {
    const std::string text = probe_text(dims_);
    return {PreparedState{probe_key(dims_), std::make_shared<const std::vector<uint8_t>>(text.begin(), text.end())}};
  }

 private:
  std::unique_ptr<Kernel> inner_;
  Dims dims_;
};

const bool kProbeRegistered = [] {
  KernelEntry e;
  e.device = DeviceType::kCPU;
  e.layer_type = kLayerActivation;
  e.tactic = kProbeTactic;
  e.priority = 1000000;
  e.exports_prepared_state = true;
  e.supports = [](const Layer& l, const std::vector<TensorDesc>&) { return l.name().rfind("kstate_probe", 0) == 0; };
  e.create = [](const Layer& l) { return std::make_unique<StateProbe>(l); };
  KernelRegistry::instance().add(e);
  return true;
}();

// x [n, c] -> ReLU "kstate_probe_relu" -> y; the profile: n in 1..4 (opt 2), c = 8 unless given.
std::vector<uint8_t> probe_engine(bool embed, BuildReport* report = nullptr, bool every_batch = false,
                                  const Dims& mn = Dims{1, 8}, const Dims& opt = Dims{2, 8},
                                  const Dims& mx = Dims{4, 8}) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{kDynamic, kDynamic});
  Layer* relu = net->add_activation(x, ActivationType::kRelu);
  relu->set_name("kstate_probe_relu");
  relu->output(0)->set_name("y");
  net->mark_output(relu->output(0));
  BuilderConfig config;  // CPU
  config.embed_compiled_plans = embed;
  config.compiled_plans_every_batch = every_batch;
  OptimizationProfile p;
  p.set_dimensions("x", mn, opt, mx);
  config.profiles.push_back(p);
  return Builder().build_serialized(*net, config, report);
}

// Runtime::deserialize with the opt-in for compiled plans.
std::shared_ptr<Engine> load_trusted(const std::vector<uint8_t>& bytes, const std::string& name) {
  Runtime runtime;
  runtime.set_allow_compiled_plans(true);
  return runtime.deserialize(bytes.data(), bytes.size(), name);
}

std::vector<float> run_at(Engine& engine, int64_t n) {
  auto ctx = engine.create_execution_context();
  ctx->set_input_shape("x", Dims{n, 8});
  std::vector<float> x(static_cast<size_t>(n * 8)), y(x.size(), -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 10.0f;
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], std::max(0.0f, x[i])) << "element " << i;
  return y;
}

std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    (void)engine_deserialize(bytes.data(), bytes.size(), "kstate.engine");
  } catch (const EngineFormatError& e) {
    return e.what();
  }
  return "";
}

void fix_checksum(std::vector<uint8_t>& b) {
  const uint64_t sum = engine_checksum(b.data() + 64, b.size() - 64);
  for (int i = 0; i < 8; ++i) b[40 + static_cast<size_t>(i)] = static_cast<uint8_t>(sum >> (8 * i));
}

size_t find_text(const std::vector<uint8_t>& b, const std::string& text) {
  const auto it = std::search(b.begin(), b.end(), text.begin(), text.end());
  return it == b.end() ? std::string::npos : static_cast<size_t>(it - b.begin());
}

TEST(CompiledPlans, TheBuilderStoresEachProfilePointsStateAndLoadingMakesThemFindable) {
  ASSERT_TRUE(kProbeRegistered);
  BuildReport report;
  const auto bytes = probe_engine(true, &report);
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "kstate.engine");
  EXPECT_EQ(data.tactics.at("kstate_probe_relu"), kProbeTactic);
  // opt 2x8, min 1x8, max 4x8: one state each, sorted by key.
  ASSERT_EQ(data.prepared_states.size(), 3u);
  const std::vector<Dims> points{Dims{1, 8}, Dims{2, 8}, Dims{4, 8}};
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(data.prepared_states[i].key, probe_key(points[i]));
    const auto& b = *data.prepared_states[i].bytes;
    EXPECT_EQ(std::string(b.begin(), b.end()), probe_text(points[i]));
  }
  EXPECT_EQ(report.compiled_plans, 3);
  EXPECT_EQ(report.compiled_plan_bytes, 3 * probe_text(Dims{1, 8}).size());
  ASSERT_TRUE(data.build_info.count("compiled_plans"));
  EXPECT_EQ(data.build_info.at("compiled_plans").rfind("3 (", 0), 0u) << data.build_info.at("compiled_plans");
  // Deterministic: the same network builds the same bytes.
  EXPECT_EQ(probe_engine(true), bytes);

  EXPECT_EQ(find_prepared_state(probe_key(Dims{2, 8})), nullptr) << "nothing held before an engine is loaded";
  const size_t before = prepared_state_count();
  {
    auto engine = load_trusted(bytes, "kstate.engine");
    EXPECT_EQ(prepared_state_count(), before + 3);
    for (const Dims& d : points) EXPECT_NE(find_prepared_state(probe_key(d)), nullptr) << d.to_string();
    g_prepares = 0;
    g_found = 0;
    (void)run_at(*engine, 2);
    (void)run_at(*engine, 4);
    EXPECT_GE(g_prepares.load(), 2);
    EXPECT_EQ(g_found.load(), g_prepares.load()) << "every prepare() found its shape's state";
    g_prepares = 0;
    g_found = 0;
    (void)run_at(*engine, 3);  // not a profile point: no state
    EXPECT_GE(g_prepares.load(), 1);
    EXPECT_EQ(g_found.load(), 0);
    {
      ScopedEnv off("KILN_COMPILED_PLANS", "0");
      EXPECT_EQ(find_prepared_state(probe_key(Dims{2, 8})), nullptr) << "KILN_COMPILED_PLANS=0 hides them";
      g_prepares = 0;
      g_found = 0;
      (void)run_at(*engine, 2);
      EXPECT_EQ(g_found.load(), 0);
    }
  }
  EXPECT_EQ(find_prepared_state(probe_key(Dims{2, 8})), nullptr) << "released with the engine";
  EXPECT_EQ(prepared_state_count(), before);
}

std::vector<std::string> state_keys(const std::vector<uint8_t>& bytes) {
  std::vector<std::string> keys;
  for (const PreparedState& s : engine_deserialize(bytes.data(), bytes.size(), "kstate.engine").prepared_states) {
    keys.push_back(s.key);
  }
  return keys;
}

TEST(CompiledPlans, EveryBatchStoresEachBatchSizeOfABatchOnlyProfile) {
  ASSERT_TRUE(kProbeRegistered);
  BuildReport report;
  const auto every = probe_engine(true, &report, true);
  EXPECT_EQ(state_keys(every), (std::vector<std::string>{probe_key(Dims{1, 8}), probe_key(Dims{2, 8}),
                                                         probe_key(Dims{3, 8}), probe_key(Dims{4, 8})}));
  EXPECT_EQ(report.compiled_plans, 4);
  // A profile that varies in another dimension keeps its three points.
  const auto wide = probe_engine(true, nullptr, true, Dims{1, 4}, Dims{2, 6}, Dims{4, 8});
  EXPECT_EQ(state_keys(wide),
            (std::vector<std::string>{probe_key(Dims{1, 4}), probe_key(Dims{2, 6}), probe_key(Dims{4, 8})}));
  // Loading it, a context at batch 3 finds its state.
  auto engine = load_trusted(every, "kstate.engine");
  g_prepares = 0;
  g_found = 0;
  (void)run_at(*engine, 3);
  EXPECT_GE(g_prepares.load(), 1);
  EXPECT_EQ(g_found.load(), g_prepares.load());
}

TEST(CompiledPlans, WithoutTheOptInTheyAreNotLoadedAndAnInfoLineSaysHowTo) {
  ASSERT_TRUE(kProbeRegistered);
  const auto bytes = probe_engine(true);
  const size_t before = prepared_state_count();
  test::LogCapture info(Severity::kInfo, "untrusted.engine");
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "untrusted.engine");
  EXPECT_EQ(prepared_state_count(), before);
  EXPECT_EQ(find_prepared_state(probe_key(Dims{2, 8})), nullptr);
  g_prepares = 0;
  g_found = 0;
  (void)run_at(*engine, 2);  // runs, with the plans built
  EXPECT_GE(g_prepares.load(), 1);
  EXPECT_EQ(g_found.load(), 0);
  const std::vector<std::string> lines = info.take();
  ASSERT_EQ(lines.size(), 1u);
  for (const char* must :
       {"3 compiled plan(s)", "not loaded", "--allow-compiled-plans", "Runtime::set_allow_compiled_plans(true)"}) {
    EXPECT_NE(lines[0].find(must), std::string::npos) << must << " in: " << lines[0];
  }
}

TEST(CompiledPlans, EnginesWithEqualKeysShareTheirStates) {
  ASSERT_TRUE(kProbeRegistered);
  const auto bytes = probe_engine(true);
  auto a = load_trusted(bytes, "a.engine");
  const std::vector<uint8_t>* first = find_prepared_state(probe_key(Dims{1, 8})).get();
  ASSERT_NE(first, nullptr);
  auto b = load_trusted(bytes, "b.engine");
  EXPECT_EQ(find_prepared_state(probe_key(Dims{1, 8})).get(), first) << "one copy for both engines";
  a.reset();
  EXPECT_EQ(find_prepared_state(probe_key(Dims{1, 8})).get(), first) << "still held by the second engine";
  b.reset();
  EXPECT_EQ(find_prepared_state(probe_key(Dims{1, 8})), nullptr);
}

TEST(CompiledPlans, OffStoresNoneAndTheFileHasNoKstateSection) {
  ASSERT_TRUE(kProbeRegistered);
  BuildReport report;
  const auto bytes = probe_engine(false, &report);
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "kstate.engine");
  EXPECT_TRUE(data.prepared_states.empty());
  EXPECT_EQ(report.compiled_plans, 0);
  EXPECT_FALSE(data.build_info.count("compiled_plans"));
  EXPECT_EQ(find_text(bytes, "KSTATE"), std::string::npos);
  EXPECT_NE(find_text(probe_engine(true), "KSTATE"), std::string::npos);
  // CPU engines of kernels that export nothing carry nothing either.
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{2, 8});
  Layer* relu = net->add_activation(x, ActivationType::kRelu);
  relu->output(0)->set_name("y");
  net->mark_output(relu->output(0));
  const auto plain = Builder().build_serialized(*net, BuilderConfig{});
  EXPECT_TRUE(engine_deserialize(plain.data(), plain.size(), "plain").prepared_states.empty());
}

TEST(CompiledPlans, ADamagedOrMisorderedStateIsRejectedByName) {
  ASSERT_TRUE(kProbeRegistered);
  const auto good = probe_engine(true);
  ASSERT_EQ(load_error(good), "");
  // One byte of the 2x8 state changed, the file's own checksum made right again: the state's
  // checksum catches it.
  auto damaged = good;
  const size_t at = find_text(damaged, probe_text(Dims{2, 8}));
  ASSERT_NE(at, std::string::npos);
  damaged[at] ^= 0x20;
  fix_checksum(damaged);
  const std::string err = load_error(damaged);
  EXPECT_NE(err.find("KSTATE"), std::string::npos) << err;
  EXPECT_NE(err.find("test_probe|2x8"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("--no-compiled-plans"), std::string::npos) << err;
  // Keys out of order: swap the first two keys' batch digits (1x8 <-> 2x8).
  auto swapped = good;
  const size_t k1 = find_text(swapped, probe_key(Dims{1, 8}));
  const size_t k2 = find_text(swapped, probe_key(Dims{2, 8}));
  ASSERT_NE(k1, std::string::npos);
  ASSERT_NE(k2, std::string::npos);
  std::swap(swapped[k1 + 11], swapped[k2 + 11]);  // the digit after "test_probe|"
  fix_checksum(swapped);
  const std::string order = load_error(swapped);
  EXPECT_NE(order.find("out of order or repeated"), std::string::npos) << order;
}

}  // namespace
}  // namespace kiln
