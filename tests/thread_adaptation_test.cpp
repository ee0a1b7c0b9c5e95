// Thread adaptation of CPU contexts (src/engine/thread_adaptation.h): the decision rules on
// synthetic timings (windows, thresholds, halving, restoring, the back-off after a restore that
// did not hold), then a real context under real contention (busy threads on every core): it
// halves its threads, its results stay the same as a context fixed at the reduced count, and it
// goes back once the cores are free.
//
// The rest of the suite runs with KILN_CPU_THREAD_ADAPTATION=0 (tests/CMakeLists.txt), so that
// tests running side by side on CI's two cores keep their thread counts; these tests turn it on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "src/engine/thread_adaptation.h"
#include "scoped_env.h"

namespace kiln {
namespace {

using Change = ThreadAdaptation::Change;
constexpr int64_t kMs = 1'000'000;

ThreadAdaptation enabled_adaptation() {
  ThreadAdaptation a;
  a.set_enabled(true);
  return a;
}

TEST(ThreadAdaptation, QuietInferencesKeepTheConfiguredCount) {
  ThreadAdaptation a = enabled_adaptation();
  int64_t now = 0;
  for (int i = 0; i < 1000; ++i) {
    now += 5 * kMs;
    EXPECT_EQ(a.record(4, 5 * kMs, 5 * kMs * 95 / 100, now), Change::kNone);
  }
  EXPECT_EQ(a.threads(4), 4);
  EXPECT_EQ(a.reductions(), 0u);
}

TEST(ThreadAdaptation, ContentionHalvesOnlyAfterAFullWindow) {
  ThreadAdaptation a = enabled_adaptation();
  // 3 ms inferences at a 50% share: the first six (18 ms) are under the 20 ms window.
  int64_t now = 0;
  for (int i = 0; i < 6; ++i) {
    now += 3 * kMs;
    EXPECT_EQ(a.record(2, 3 * kMs, 3 * kMs / 2, now), Change::kNone) << i;
    EXPECT_EQ(a.threads(2), 2);
  }
  now += 3 * kMs;
  EXPECT_EQ(a.record(2, 3 * kMs, 3 * kMs / 2, now), Change::kReduced);
  EXPECT_EQ(a.threads(2), 1);
  EXPECT_EQ(a.reductions(), 1u);
  // At 1 thread there is nothing to halve, however shared the cores are.
  for (int i = 0; i < 100; ++i) {
    now += 30 * kMs;
    EXPECT_EQ(a.record(2, 30 * kMs, 30 * kMs / 3, now), Change::kNone);
  }
  EXPECT_EQ(a.threads(2), 1);
}

TEST(ThreadAdaptation, OneLongInferenceIsAWindowOfItsOwn) {
  ThreadAdaptation a = enabled_adaptation();
  EXPECT_EQ(a.record(2, 577 * kMs, 200 * kMs, 577 * kMs), Change::kReduced);  // ResNet-50 under contention
  EXPECT_EQ(a.threads(2), 1);
}

TEST(ThreadAdaptation, TheThresholdsAreSeventyAndNinetyPercent) {
  {
    ThreadAdaptation a = enabled_adaptation();
    EXPECT_EQ(a.record(2, 100 * kMs, 71 * kMs, 100 * kMs), Change::kNone);
    EXPECT_EQ(a.record(2, 100 * kMs, 69 * kMs, 200 * kMs), Change::kReduced);
    // Reduced: 89% is not quiet enough, 91% is.
    EXPECT_EQ(a.record(2, 100 * kMs, 89 * kMs, 300 * kMs), Change::kNone);
    EXPECT_EQ(a.threads(2), 1);
    EXPECT_EQ(a.record(2, 100 * kMs, 91 * kMs, 400 * kMs), Change::kRestored);
    EXPECT_EQ(a.threads(2), 2);
    EXPECT_EQ(a.restorations(), 1u);
  }
}

TEST(ThreadAdaptation, ManyThreadsHalveStepByStepAndComeBackStepByStep) {
  ThreadAdaptation a = enabled_adaptation();
  int64_t now = 0;
  std::vector<int> counts;
  for (int i = 0; i < 5; ++i) {
    now += 50 * kMs;
    a.record(16, 50 * kMs, 10 * kMs, now);
    counts.push_back(a.threads(16));
  }
  EXPECT_EQ(counts, (std::vector<int>{8, 4, 2, 1, 1}));
  counts.clear();
  for (int i = 0; i < 5; ++i) {
    now += 50 * kMs;
    a.record(16, 50 * kMs, 50 * kMs, now);
    counts.push_back(a.threads(16));
  }
  EXPECT_EQ(counts, (std::vector<int>{2, 4, 8, 16, 16}));
}

TEST(ThreadAdaptation, ARestoreThatDoesNotHoldMakesTheNextOneWaitLonger) {
  ThreadAdaptation a = enabled_adaptation();
  int64_t now = 0;
  const auto run = [&](int64_t wall, double share) {
    now += wall;
    return a.record(2, wall, static_cast<int64_t>(static_cast<double>(wall) * share), now);
  };
  ASSERT_EQ(run(20 * kMs, 0.5), Change::kReduced);
  ASSERT_EQ(run(20 * kMs, 1.0), Change::kRestored);  // quiet for one window
  ASSERT_EQ(run(20 * kMs, 0.5), Change::kReduced);   // contended again 20 ms later
  // Now a restore needs 40 ms of quiet inference time.
  EXPECT_EQ(run(20 * kMs, 1.0), Change::kNone);
  EXPECT_EQ(run(20 * kMs, 1.0), Change::kRestored);
  ASSERT_EQ(run(20 * kMs, 0.5), Change::kReduced);  // and again: 80 ms
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(20 * kMs, 1.0), Change::kNone) << i;
  EXPECT_EQ(run(20 * kMs, 1.0), Change::kRestored);
  // Quiet at the full count for over a second: back to one window.
  for (int i = 0; i < 60; ++i) EXPECT_EQ(run(20 * kMs, 1.0), Change::kNone);
  ASSERT_EQ(run(20 * kMs, 0.5), Change::kReduced);
  EXPECT_EQ(run(20 * kMs, 1.0), Change::kRestored);
  // A contended window at the reduced count starts the quiet spell over.
  ThreadAdaptation b = enabled_adaptation();
  EXPECT_EQ(b.record(2, 20 * kMs, 10 * kMs, 20 * kMs), Change::kReduced);
  EXPECT_EQ(b.record(2, 20 * kMs, 10 * kMs, 40 * kMs), Change::kNone);
  EXPECT_EQ(b.record(2, 20 * kMs, 20 * kMs, 60 * kMs), Change::kRestored);
}

TEST(ThreadAdaptation, OffOrOneThreadNeverChanges) {
  ThreadAdaptation a = enabled_adaptation();
  EXPECT_EQ(a.record(1, 100 * kMs, 10 * kMs, 100 * kMs), Change::kNone);
  EXPECT_EQ(a.threads(1), 1);
  a.set_enabled(false);
  EXPECT_EQ(a.record(4, 100 * kMs, 10 * kMs, 200 * kMs), Change::kNone);
  EXPECT_EQ(a.threads(4), 4);
  // Turning it on again starts from the configured count.
  ThreadAdaptation b = enabled_adaptation();
  ASSERT_EQ(b.record(4, 100 * kMs, 10 * kMs, 100 * kMs), Change::kReduced);
  b.set_enabled(true);
  EXPECT_EQ(b.threads(4), 4);
}

TEST(ThreadAdaptation, TheEnvironmentSetsTheDefault) {
  const char* old = std::getenv("KILN_CPU_THREAD_ADAPTATION");
  const std::string saved = old ? old : "";
  for (const char* off : {"0", "off", "false"}) {
    setenv("KILN_CPU_THREAD_ADAPTATION", off, 1);
    EXPECT_FALSE(ThreadAdaptation().enabled()) << off;
  }
  setenv("KILN_CPU_THREAD_ADAPTATION", "1", 1);
  EXPECT_TRUE(ThreadAdaptation().enabled());
  unsetenv("KILN_CPU_THREAD_ADAPTATION");
  EXPECT_TRUE(ThreadAdaptation().enabled());
  if (old) setenv("KILN_CPU_THREAD_ADAPTATION", saved.c_str(), 1);
}

TEST(ThreadAdaptation, APassiveOpenMPWaitPolicyTurnsItOffUnlessAskedFor) {
  std::string why;
  EXPECT_TRUE(ThreadAdaptation::default_enabled(nullptr, nullptr, &why));
  EXPECT_EQ(why, "");
  for (const char* passive : {"passive", "PASSIVE", " Passive\n"}) {
    EXPECT_FALSE(ThreadAdaptation::default_enabled(nullptr, passive, &why)) << passive;
    EXPECT_NE(why.find("OMP_WAIT_POLICY is passive"), std::string::npos) << why;
    EXPECT_NE(why.find("KILN_CPU_THREAD_ADAPTATION=1"), std::string::npos) << why;  // says how to force it
  }
  for (const char* other : {"active", "ACTIVE", "", "passiveish"}) {
    EXPECT_TRUE(ThreadAdaptation::default_enabled(nullptr, other, &why)) << other;
    EXPECT_EQ(why, "") << other;
  }
  // KILN_CPU_THREAD_ADAPTATION decides where it is set, whatever the wait policy.
  EXPECT_TRUE(ThreadAdaptation::default_enabled("1", "passive", &why));
  EXPECT_FALSE(ThreadAdaptation::default_enabled("0", "active", &why));
  EXPECT_NE(why.find("KILN_CPU_THREAD_ADAPTATION is 0"), std::string::npos) << why;
  EXPECT_FALSE(ThreadAdaptation::default_enabled(" OFF ", nullptr));
  EXPECT_TRUE(ThreadAdaptation::default_enabled("on", nullptr));
}

TEST(ThreadAdaptation, TheThreadClockCountsOnlyThisThreadsTime) {
  const int64_t c0 = ThreadAdaptation::thread_cpu_ns();
  ASSERT_GE(c0, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // asleep: no CPU time
  const int64_t c1 = ThreadAdaptation::thread_cpu_ns();
  EXPECT_LT(c1 - c0, 10 * kMs);
  // Working: the clock advances (however busy the machine: other tests may share the cores, so
  // work until it has advanced 20 ms, within 10 s).
  const auto t0 = std::chrono::steady_clock::now();
  volatile double x = 0;
  while (ThreadAdaptation::thread_cpu_ns() - c1 < 20 * kMs &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    for (int i = 0; i < 10000; ++i) x = x + 1.0;
  }
  EXPECT_GE(ThreadAdaptation::thread_cpu_ns() - c1, 20 * kMs);
}

// ---- a real context under real contention --------------------------------------------------

// Four 3x3 convolutions with ReLU: x -> y; with `nonzero`, also nz = NonZero(y), an output
// whose size the inference reads from its data.
std::shared_ptr<Engine> conv_engine(int threads, bool nonzero = false) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 32, 56, 56});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  Tensor* t = x;
  for (int i = 0; i < 4; ++i) {
    ConvolutionDesc d;
    d.num_output_maps = 32;
    d.kernel = {3, 3};
    d.pads_begin = {1, 1};
    d.pads_end = {1, 1};
    std::vector<float> w(32 * 32 * 9), b(32);
    for (float& v : w) v = u(rng);
    for (float& v : b) v = u(rng);
    Layer* l = net.add_convolution(t, d, HostTensor::from_vector(DataType::kFloat32, Dims{32, 32, 3, 3}, w),
                                   HostTensor::from_vector(DataType::kFloat32, Dims{32}, b));
    t = net.add_activation(l->output(0), ActivationType::kRelu)->output(0);
  }
  t->set_name("y");
  net.mark_output(t);
  if (nonzero) {
    Tensor* nz = net.add_non_zero(t)->output(0);
    nz->set_name("nz");
    net.mark_output(nz);
  }
  BuilderConfig config;
  config.num_threads = threads;
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size());
}

// Threads that keep every core busy until stopped (more of them than cores, like a neighbour's
// spinning thread pool).
class Spinners {
 public:
  Spinners() {
    const unsigned n = 2 * std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        volatile uint64_t k = 0;
        while (!stop_.load(std::memory_order_relaxed)) k = k + 1;
      });
    }
  }
  ~Spinners() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST(ThreadAdaptation, AContextUnderContentionHalvesItsThreadsAndComesBackWhenTheCoresAreFree) {
  auto engine = conv_engine(2);
  auto ctx = engine->create_execution_context();
  ctx->set_thread_adaptation(true);
  ASSERT_TRUE(ctx->thread_adaptation());
  ASSERT_EQ(ctx->num_threads(), 2);
  std::vector<float> x(32 * 56 * 56), y(32 * 56 * 56), y1(32 * 56 * 56);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : x) v = u(rng);
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("y", y.data());
  ctx->execute();  // the first inference at a shape is not measured (one-time work)
  {
    Spinners busy;
    const auto t0 = std::chrono::steady_clock::now();
    while (ctx->stats().thread_reductions == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
      ctx->execute();
    }
    ASSERT_EQ(ctx->stats().thread_reductions, 1u) << "2 threads never halved with every core busy";
    EXPECT_EQ(ctx->num_threads(), 1);
    ctx->execute();  // at 1 thread: its own plan
  }
  // Same bits as a context fixed at 1 thread.
  auto fixed = engine->create_execution_context();
  fixed->set_thread_adaptation(false);
  fixed->set_num_threads(1);
  fixed->set_tensor_address("x", x.data());
  fixed->set_tensor_address("y", y1.data());
  fixed->execute();
  EXPECT_EQ(y, y1) << "the reduced context's output differs from a 1-thread context's";
  // Cores free again: back to 2 within a few windows (allowing for a busy CI machine).
  const auto t0 = std::chrono::steady_clock::now();
  while (ctx->stats().thread_restorations == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    ctx->execute();
  }
  EXPECT_EQ(ctx->stats().thread_restorations, 1u) << "never went back to 2 threads after the cores were freed";
  EXPECT_EQ(ctx->num_threads(), 2);
  const ContextStats st = ctx->stats();
  EXPECT_EQ(st.shape_plans_built, 2u) << "one plan per thread count";
}

// The inference during which the count changes ran in the old count's plan: the output shapes
// it read from its data are reported after it (the new count's plan, used from the next
// inference on, holds only their upper bounds). Was: the size of nz read as its upper bound
// after that inference, whose callers then took the zeros past the real coordinates as data.
TEST(ThreadAdaptation, DataDependentOutputShapesSurviveACountChange) {
  auto engine = conv_engine(2, true);
  auto ctx = engine->create_execution_context();
  ctx->set_thread_adaptation(true);
  const Dims bound = ctx->max_tensor_shape("nz");
  ASSERT_EQ(bound, (Dims{4, 32 * 56 * 56}));
  std::vector<float> x(32 * 56 * 56), y(32 * 56 * 56);
  std::vector<int64_t> nz(static_cast<size_t>(bound.volume()));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  ctx->set_tensor_address("y", y.data());
  ctx->set_tensor_address("nz", nz.data());
  int inferences = 0;
  const auto infer_and_check = [&] {
    for (float& v : x) v = u(rng);
    ctx->set_tensor_address("x", x.data());
    ctx->execute();
    ++inferences;
    const int64_t count = std::count_if(y.begin(), y.end(), [](float v) { return v != 0.f; });
    ASSERT_GT(count, 0);
    ASSERT_LT(count, bound[1]);
    ASSERT_EQ(ctx->tensor_shape("nz").to_string(), (Dims{4, count}).to_string())
        << "after inference " << inferences << " (reductions " << ctx->stats().thread_reductions << ")";
  };
  infer_and_check();
  {
    Spinners busy;
    const auto t0 = std::chrono::steady_clock::now();
    while (ctx->stats().thread_reductions == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
      infer_and_check();
      if (HasFatalFailure()) return;
    }
    ASSERT_EQ(ctx->stats().thread_reductions, 1u) << "2 threads never halved with every core busy";
    infer_and_check();  // the first at 1 thread
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (ctx->stats().thread_restorations == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    infer_and_check();
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(ctx->stats().thread_restorations, 1u) << "never went back to 2 threads after the cores were freed";
  infer_and_check();
}

TEST(ThreadAdaptation, FixedContextsKeepTheirCountUnderContention) {
  auto engine = conv_engine(2);
  auto ctx = engine->create_execution_context();
  ctx->set_thread_adaptation(false);
  std::vector<float> x(32 * 56 * 56, 0.5f), y(32 * 56 * 56);
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("y", y.data());
  Spinners busy;
  for (int i = 0; i < 5; ++i) ctx->execute();
  EXPECT_EQ(ctx->num_threads(), 2);
  EXPECT_EQ(ctx->stats().thread_reductions, 0u);
}

TEST(ThreadAdaptation, AContextStartsWithoutItUnderAPassiveWaitPolicy) {
  auto engine = conv_engine(2);
  {
    test::ScopedEnv no_override("KILN_CPU_THREAD_ADAPTATION", nullptr);
    test::ScopedEnv passive("OMP_WAIT_POLICY", "passive");
    auto ctx = engine->create_execution_context();
    EXPECT_FALSE(ctx->thread_adaptation());
    EXPECT_EQ(ctx->num_threads(), 2);
    ctx->set_thread_adaptation(true);  // the application's word still counts
    EXPECT_TRUE(ctx->thread_adaptation());
  }
  {
    test::ScopedEnv no_override("KILN_CPU_THREAD_ADAPTATION", nullptr);
    test::ScopedEnv active("OMP_WAIT_POLICY", "active");
    EXPECT_TRUE(engine->create_execution_context()->thread_adaptation());
  }
}

}  // namespace
}  // namespace kiln
