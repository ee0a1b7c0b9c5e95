// Tests of reshape elision (src/plan/execution_plan.h, ActivationPlanOptions::reshape_elision): a
// Shuffle that only reshapes a linear activation gives its output the input's memory and runs no
// kernel. Checked on the plans (offsets, reasons, and an independent overlap check that derives
// lifetimes from the graph, treating an elided reshape's output as its input's bytes) and end to
// end on the CPU: hand-computed results, bit equality with elision off, the profile's "elided".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <unordered_map>

#include "kiln/kiln.h"
#include "src/core/tensor_io.h"
#include "src/ir/shape_inference.h"
#include "src/plan/execution_plan.h"

namespace kiln {
namespace {

constexpr int kC = 3, kH = 8, kW = 8;

Tensor* named(Layer* l, const std::string& name) {
  l->set_name(name);
  l->output(0)->set_name(name);
  return l->output(0);
}

// x -> a = relu(x) -> r = reshape [1, 192] -> rr = reshape [3, 64] -> s = sigmoid(rr)
//   -> r2 = reshape s [1, 3, 8, 8] -> z = a * r2 (output): a is read again after its reshapes, so
//   its memory (shared with r and rr) must live until z; r -> rr is a chain.
std::unique_ptr<Network> chain_network(bool r_is_output = false) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, kH, kW});
  Tensor* a = named(net->add_activation(x, ActivationType::kRelu), "a");
  Tensor* r = named(net->add_shuffle(a, {}, {1, kC * kH * kW}, {}), "r");
  Tensor* rr = named(net->add_shuffle(r, {}, {kC, kH * kW}, {}), "rr");
  Tensor* s = named(net->add_activation(rr, ActivationType::kSigmoid), "s");
  Tensor* r2 = named(net->add_shuffle(s, {}, {1, kC, kH, kW}, {}), "r2");
  Tensor* z = named(net->add_elementwise(a, r2, ElementWiseOp::kProd), "z");
  net->mark_output(z);
  if (r_is_output) net->mark_output(r);
  return net;
}

struct Planned {
  std::vector<Layer*> steps;
  TensorStates states;
  ActivationPlan plan;
  int step_of(const std::string& layer) const {
    for (size_t s = 0; s < steps.size(); ++s) {
      if (steps[s]->name() == layer) return static_cast<int>(s);
    }
    return -1;
  }
  const ConcatDecision* decision(const std::string& layer) const {
    for (const auto& d : plan.reshapes) {
      if (d.step == step_of(layer)) return &d;
    }
    return nullptr;
  }
  uint64_t offset(const Network& net, const std::string& t) const { return plan.offsets.at(net.find_tensor(t)); }
};

uint64_t bytes_of(const TensorStates& states, const Tensor* t) {
  const TensorState& st = states.at(t);
  return static_cast<uint64_t>(st.dims.volume()) * data_type_size(st.type);
}

// Lifetimes from the graph; an elided reshape's output must sit exactly on its input, and the two
// count as one buffer alive from the first's producer to the last reader of either (any other
// tensor alive then must not share its bytes). Returns the first problem found.
std::string check_plan(const Planned& p) {
  std::unordered_map<const Layer*, int> index;
  for (size_t s = 0; s < p.steps.size(); ++s) index[p.steps[s]] = static_cast<int>(s);
  std::unordered_map<const Tensor*, const Tensor*> root;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (!p.plan.elided[s]) continue;
    const Layer* l = p.steps[s];
    if (l->type() != kLayerShuffle) return "step " + l->name() + " is elided but no reshape";
    const Tensor* in = l->input(0);
    if (p.plan.offsets.at(l->output(0)) != p.plan.offsets.at(in)) return "'" + l->name() + "' is not on its input";
    root[l->output(0)] = root.count(in) ? root.at(in) : in;
  }
  struct Life {
    int first = 1 << 30, last = -1;
    uint64_t begin = 0, end = 0;
  };
  std::unordered_map<const Tensor*, Life> lives;  // per buffer (root tensor)
  for (const auto& [t, off] : p.plan.offsets) {
    const Tensor* r = root.count(t) ? root.at(t) : t;
    Life& life = lives[r];
    const int first = index.at(t->producer());
    int last = first;
    for (const Layer* c : t->consumers()) last = std::max(last, index.at(c));
    life.first = std::min(life.first, first);
    life.last = std::max(life.last, last);
    life.begin = off;
    life.end = std::max(life.end, off + bytes_of(p.states, t));
  }
  for (auto i = lives.begin(); i != lives.end(); ++i) {
    for (auto j = std::next(i); j != lives.end(); ++j) {
      const Life& a = i->second;
      const Life& b = j->second;
      if (a.first > b.last || b.first > a.last || a.begin == a.end || b.begin == b.end) continue;
      if (a.begin < b.end && b.begin < a.end)
        return "'" + i->first->name() + "' and '" + j->first->name() + "' overlap";
    }
  }
  return "";
}

Planned plan_for(const Network& net, bool elision = true) {
  Planned p;
  p.steps = execution_steps(net);
  p.states = infer_shapes(net, {{"x", Dims{1, kC, kH, kW}}});
  ActivationPlanOptions options;
  options.reshape_elision = elision;
  p.plan = plan_activations(net, p.steps, p.states, options);
  EXPECT_EQ(check_plan(p), "");
  return p;
}

std::shared_ptr<Engine> build(const Network& net) {
  BuilderConfig config;
  config.num_threads = 1;
  config.disabled_passes.push_back("layout");
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size());
}

std::vector<float> random_input(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> x(static_cast<size_t>(kC) * kH * kW);
  for (auto& v : x) v = u(rng);
  return x;
}

std::vector<float> run(ExecutionContext& ctx, const std::vector<float>& x) {
  ctx.set_input_shape("x", Dims{1, kC, kH, kW});
  ctx.set_tensor_address("x", const_cast<float*>(x.data()));
  std::vector<float> z(x.size(), std::nanf(""));
  ctx.set_tensor_address("z", z.data());
  ctx.execute();
  return z;
}

TEST(ReshapeElision, PlanPutsReshapesOnTheirInputsAndKeepsTheInputAlive) {
  auto net = chain_network();
  const Planned on = plan_for(*net);
  for (const char* name : {"r", "rr", "r2"}) {
    ASSERT_NE(on.decision(name), nullptr) << name;
    EXPECT_TRUE(on.decision(name)->elided) << name << ": " << on.decision(name)->reason;
    EXPECT_TRUE(on.plan.elided[static_cast<size_t>(on.step_of(name))]) << name;
  }
  EXPECT_EQ(on.offset(*net, "r"), on.offset(*net, "a"));
  EXPECT_EQ(on.offset(*net, "rr"), on.offset(*net, "a"));
  EXPECT_EQ(on.offset(*net, "r2"), on.offset(*net, "s"));
  // a (read by z at the end) and s are alive together, so they cannot share bytes.
  EXPECT_NE(on.offset(*net, "a"), on.offset(*net, "s"));
  const Planned off = plan_for(*net, false);
  EXPECT_TRUE(off.plan.reshapes.empty());
  EXPECT_LT(on.plan.peak, off.plan.peak);
}

TEST(ReshapeElision, RunsGiveTheHandResultAndTheCopyingRunBitForBit) {
  auto net = chain_network();
  auto engine = build(*net);
  auto ctx = engine->create_execution_context();
  ctx->set_profiling(true);
  const auto x = random_input(3);
  const auto elided = run(*ctx, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = std::max(0.0, static_cast<double>(x[i]));
    ASSERT_NEAR(elided[i], a / (1.0 + std::exp(-a)), 1e-6) << "z[" << i << "]";
  }
  const std::string report = ctx->profile_report();
  for (const char* name : {"r [Shuffle, elided]", "rr [Shuffle, elided]", "r2 [Shuffle, elided]"}) {
    EXPECT_NE(report.find(name), std::string::npos) << name << "\n" << report;
  }
  ctx->set_concat_elision(false);  // the one switch for copy elision
  const auto copied = run(*ctx, x);
  ASSERT_EQ(elided.size(), copied.size());
  EXPECT_EQ(std::memcmp(elided.data(), copied.data(), elided.size() * sizeof(float)), 0);
  EXPECT_EQ(ctx->profile_report().find("r [Shuffle, elided]"), std::string::npos) << "elision off still elides";
}

TEST(ReshapeElision, ANetworkOutputOrANetworkInputIsNotElided) {
  auto net = chain_network(/*r_is_output=*/true);
  const Planned p = plan_for(*net);
  ASSERT_NE(p.decision("r"), nullptr);
  EXPECT_FALSE(p.decision("r")->elided);
  EXPECT_EQ(p.decision("r")->reason, "output 'r' is a network output");
  EXPECT_EQ(p.decision("rr")->reason, "input 'r' is not an arena activation (a network input or constant)");
  EXPECT_TRUE(p.decision("r2")->elided) << p.decision("r2")->reason;

  auto net2 = std::make_unique<Network>();
  Tensor* x = net2->add_input("x", DataType::kFloat32, Dims{1, kC, kH, kW});
  Tensor* r = named(net2->add_shuffle(x, {}, {1, kC * kH * kW}, {}), "r");
  net2->mark_output(named(net2->add_activation(r, ActivationType::kRelu), "z"));
  const Planned p2 = plan_for(*net2);
  ASSERT_NE(p2.decision("r"), nullptr);
  EXPECT_EQ(p2.decision("r")->reason, "input 'x' is not an arena activation (a network input or constant)");

  // With r as an output too, the engine still computes z and r right.
  auto engine = build(*net);
  auto ctx = engine->create_execution_context();
  const auto xs = random_input(4);
  std::vector<float> rv(xs.size(), std::nanf(""));
  ctx->set_tensor_address("r", rv.data());
  const auto z = run(*ctx, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double a = std::max(0.0, static_cast<double>(xs[i]));
    ASSERT_NEAR(z[i], a / (1.0 + std::exp(-a)), 1e-6);
    ASSERT_EQ(rv[i], static_cast<float>(a));
  }
}

TEST(ReshapeElision, TransposesAreNotReshapes) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, kH, kW});
  Tensor* a = named(net->add_activation(x, ActivationType::kRelu), "a");
  Tensor* t = named(net->add_shuffle(a, {0, 2, 3, 1}, {}, {}), "t");
  Tensor* i = named(net->add_shuffle(t, {0, 1, 2, 3}, {1, kH * kW * kC}, {}), "i");  // identity transpose
  net->mark_output(named(net->add_activation(i, ActivationType::kRelu), "z"));
  const Planned p = plan_for(*net);
  EXPECT_EQ(p.decision("t"), nullptr) << "a transpose is not a reshape";
  EXPECT_FALSE(p.plan.elided[static_cast<size_t>(p.step_of("t"))]);
  ASSERT_NE(p.decision("i"), nullptr);
  EXPECT_TRUE(p.decision("i")->elided) << p.decision("i")->reason;
}

// The context's arena covers the plans with copy elision at the profile's shapes, not only the
// profile plan (which elides nothing): aliasing lengthens lifetimes, and TinyYolo's elided plan
// needs more bytes than its profile plan. Before, every shape plan of such a network fell back
// to the profile plan, silently dropping every elision. The TinyYolo detector (channels-last
// convolutions, its head's reshapes on linear tensors) elides its head's reshapes and matches
// the exporter's reference.
TEST(ReshapeElision, TheArenaCoversTheElidedPlanSoTinyYoloElidesItsHeadReshapes) {
  const char* env = std::getenv("KILN_TEST_MODELS_DIR");
  const std::string dir =
      std::string(env ? env : std::string(KILN_SOURCE_DIR) + "/../shared/models") + "/tinyyolo_silu";
  if (!std::filesystem::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  Network net;
  OnnxParser(net).parse_file(dir + "/model.onnx");
  const HostTensor in = load_tensor_pb(dir + "/test_data_set_0/input_0.pb");
  const HostTensor ref = load_tensor_pb(dir + "/test_data_set_0/output_0.pb");
  BuilderConfig config;
  config.num_threads = 1;
  OptimizationProfile profile;
  profile.set_dimensions(net.input(0)->name(), in.dims(), in.dims(), in.dims());
  config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());

  auto ctx = engine->create_execution_context();
  ctx->set_profiling(true);
  std::vector<float> out(static_cast<size_t>(ref.count()), std::nanf(""));
  ctx->set_tensor_address(net.input(0)->name(), const_cast<void*>(in.data()));
  ctx->set_tensor_address(net.output(0)->name(), out.data());
  ctx->execute();
  const std::string report = ctx->profile_report();
  int elided = 0;
  for (size_t at = report.find("[Shuffle, elided]"); at != std::string::npos;
       at = report.find("[Shuffle, elided]", at + 1)) {
    ++elided;
  }
  EXPECT_GE(elided, 3) << "the head's reshapes run as copies: the plan fell back to the profile plan\n" << report;
  double maxb = 1;
  for (int64_t i = 0; i < ref.count(); ++i) maxb = std::max(maxb, std::fabs(static_cast<double>(ref.as<float>()[i])));
  for (int64_t i = 0; i < ref.count(); ++i) {
    const double b = ref.as<float>()[i];
    ASSERT_NEAR(out[static_cast<size_t>(i)], b, 1e-3 * std::fabs(b) + 1e-5 * maxb) << "detections[" << i << "]";
  }
}

}  // namespace
}  // namespace kiln
