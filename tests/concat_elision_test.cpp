// Tests of concatenation elision (src/plan/execution_plan.h and the runtime): where the shapes
// allow it, a Concatenation's inputs are placed inside its output so that their producers write
// there and the concatenation runs no kernel. End-to-end networks on the CPU are checked
// bit-for-bit against the same engine with elision off and against hand computations (double
// accumulation, written here); the plans themselves are checked by an independent overlap check
// that derives every tensor's lifetime from the graph. Elision is observed through the verbose
// log line, the per-layer profile and plan_activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "kiln/kiln.h"
#include "tests/log_capture.h"
#include "src/core/tensor_io.h"
#include "src/plan/execution_plan.h"
#include "src/ir/shape_inference.h"

namespace kiln {
namespace {

constexpr int kC = 3;  // input channels

// ---- hand math on NCHW tensors -------------------------------------------------------------

struct Act {
  int n = 0, c = 0, h = 0, w = 0;
  std::vector<double> v;
  Act(int n_, int c_, int h_, int w_) : n(n_), c(c_), h(h_), w(w_), v(static_cast<size_t>(n_) * c_ * h_ * w_) {}
  double& at(int in, int ic, int y, int x) { return v[((static_cast<size_t>(in) * c + ic) * h + y) * w + x]; }
  double at(int in, int ic, int y, int x) const { return v[((static_cast<size_t>(in) * c + ic) * h + y) * w + x]; }
};

struct ConvWeights {
  int maps = 0, in = 0, k = 1;
  std::vector<float> w, b;
};

ConvWeights make_conv(int maps, int in, int k, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  ConvWeights cw{maps, in, k, {}, {}};
  cw.w.resize(static_cast<size_t>(maps) * in * k * k);
  for (auto& v : cw.w) v = u(rng);
  cw.b.resize(static_cast<size_t>(maps));
  for (auto& v : cw.b) v = u(rng);
  return cw;
}

// Stride 1, padding k/2 on every side (same size for odd k).
Act conv(const Act& x, const ConvWeights& cw) {
  Act y(x.n, cw.maps, x.h, x.w);
  const int p = cw.k / 2;
  for (int n = 0; n < x.n; ++n) {
    for (int m = 0; m < cw.maps; ++m) {
      for (int oy = 0; oy < x.h; ++oy) {
        for (int ox = 0; ox < x.w; ++ox) {
          double acc = cw.b[static_cast<size_t>(m)];
          for (int c = 0; c < cw.in; ++c) {
            for (int ky = 0; ky < cw.k; ++ky) {
              for (int kx = 0; kx < cw.k; ++kx) {
                const int iy = oy + ky - p, ix = ox + kx - p;
                if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                acc += cw.w[((static_cast<size_t>(m) * cw.in + c) * cw.k + ky) * cw.k + kx] * x.at(n, c, iy, ix);
              }
            }
          }
          y.at(n, m, oy, ox) = acc;
        }
      }
    }
  }
  return y;
}

Act product(const Act& a, const Act& b) {
  Act y = a;
  for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = a.v[i] * b.v[i];
  return y;
}

Act concat_channels(const std::vector<const Act*>& parts) {
  int c = 0;
  for (const Act* p : parts) c += p->c;
  const Act& f = *parts[0];
  Act y(f.n, c, f.h, f.w);
  for (int n = 0; n < f.n; ++n) {
    int base = 0;
    for (const Act* p : parts) {
      for (int ic = 0; ic < p->c; ++ic) {
        for (int yy = 0; yy < f.h; ++yy) {
          for (int xx = 0; xx < f.w; ++xx) y.at(n, base + ic, yy, xx) = p->at(n, ic, yy, xx);
        }
      }
      base += p->c;
    }
  }
  return y;
}

Act concat_batch(const Act& a, const Act& b) {
  Act y(a.n + b.n, a.c, a.h, a.w);
  std::copy(a.v.begin(), a.v.end(), y.v.begin());
  std::copy(b.v.begin(), b.v.end(), y.v.begin() + static_cast<std::ptrdiff_t>(a.v.size()));
  return y;
}

Act input_act(const std::vector<float>& x, int n, int h, int w) {
  Act a(n, kC, h, w);
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] = x[i];
  return a;
}

std::vector<float> random_input(int n, int h, int w, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * kC * h * w);
  for (auto& v : x) v = u(rng);
  return x;
}

void expect_close(const std::vector<float>& got, const Act& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.v.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want.v[i], 1e-4 * std::max(1.0, std::fabs(want.v[i]))) << what << " at " << i;
  }
}

// ---- networks --------------------------------------------------------------------------------

Tensor* add_conv(Network& net, Tensor* x, const ConvWeights& cw, const std::string& name) {
  ConvolutionDesc d;
  d.num_output_maps = cw.maps;
  d.kernel = {cw.k, cw.k};
  d.pads_begin = {cw.k / 2, cw.k / 2};
  d.pads_end = {cw.k / 2, cw.k / 2};
  Layer* l =
      net.add_convolution(x, d, HostTensor::from_vector(DataType::kFloat32, Dims{cw.maps, cw.in, cw.k, cw.k}, cw.w),
                          HostTensor::from_vector(DataType::kFloat32, Dims{cw.maps}, cw.b));
  l->set_name(name);
  l->output(0)->set_name(name);
  return l->output(0);
}

Tensor* add_concat(Network& net, const std::vector<Tensor*>& inputs, int64_t axis, const std::string& name) {
  Layer* l = net.add_concatenation(inputs, axis);
  l->set_name(name);
  l->output(0)->set_name(name);
  return l->output(0);
}

// x -> c1 = conv1x1 (4 maps), c2 = conv3x3 (4 maps), e = c1 * c2; cat = concat(c1, c2, e) on the
// channels; y = conv1x1(cat) (2 maps). At 8x8 float each input is 1024 bytes: aligned.
struct ThreeProducers {
  ConvWeights w1 = make_conv(4, kC, 1, 11), w2 = make_conv(4, kC, 3, 12), w3 = make_conv(2, 12, 1, 13);
  static constexpr int kH = 8, kW = 8;

  std::unique_ptr<Network> network(int64_t batch, bool cat_is_output = false, bool c1_is_output = false) const {
    auto net = std::make_unique<Network>();
    Tensor* x = net->add_input("x", DataType::kFloat32, Dims{batch, kC, kH, kW});
    Tensor* c1 = add_conv(*net, x, w1, "c1");
    Tensor* c2 = add_conv(*net, x, w2, "c2");
    Layer* prod = net->add_elementwise(c1, c2, ElementWiseOp::kProd);
    prod->set_name("e");
    prod->output(0)->set_name("e");
    Tensor* cat = add_concat(*net, {c1, c2, prod->output(0)}, 1, "cat");
    Tensor* y = add_conv(*net, cat, w3, "y");
    net->mark_output(y);
    if (cat_is_output) net->mark_output(cat);
    if (c1_is_output) net->mark_output(c1);
    return net;
  }

  Act cat(const Act& x) const {
    const Act c1 = conv(x, w1), c2 = conv(x, w2), e = product(c1, c2);
    return concat_channels({&c1, &c2, &e});
  }
  Act y(const Act& x) const { return conv(cat(x), w3); }
};

// `linear`: without the layout pass, which on the CPU makes regions of float32 convolutions
// channels-last; a channel concatenation is then not contiguous and cannot be elided (tested
// separately below).
std::shared_ptr<Engine> build(const Network& net, int min_batch, int max_batch, int h, int w,
                              BuildReport* report = nullptr, bool linear = true) {
  BuilderConfig config;
  config.num_threads = 1;
  if (linear) config.disabled_passes.push_back("layout");
  if (net.input(0)->dims()[0] == kDynamic) {
    OptimizationProfile p;
    p.set_dimensions("x", Dims{min_batch, kC, h, w}, Dims{min_batch, kC, h, w}, Dims{max_batch, kC, h, w});
    config.profiles.push_back(p);
  }
  const auto bytes = Builder().build_serialized(net, config, report);
  return Runtime().deserialize(bytes.data(), bytes.size());
}

// Runs one inference; returns every requested output.
std::map<std::string, std::vector<float>> run(ExecutionContext& ctx, const std::vector<float>& x, int batch, int h,
                                              int w, const std::vector<std::string>& outputs) {
  ctx.set_input_shape("x", Dims{batch, kC, h, w});
  ctx.set_tensor_address("x", const_cast<float*>(x.data()));
  std::map<std::string, std::vector<float>> result;
  for (const auto& name : outputs) {
    result[name].assign(static_cast<size_t>(ctx.tensor_shape(name).volume()), std::nanf(""));
    ctx.set_tensor_address(name, result[name].data());
  }
  ctx.execute();
  return result;
}

// Bit-for-bit equality (the same kernels on the same data, only the addresses differ).
void expect_bit_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

// ---- the verbose log -------------------------------------------------------------------------

// Captures the "activation plan for input shapes" verbose messages (tests/log_capture.h).
class CaptureLogger : public test::LogCapture {
 public:
  CaptureLogger() : LogCapture(Severity::kVerbose, "activation plan for input shapes") {}
};

// Whether the plan message lists `layer` as elided.
bool elided_in(const std::string& msg, const std::string& layer) {
  const std::string head = "no copy): ";
  const size_t begin = msg.find(head);
  if (begin == std::string::npos) return false;
  const size_t end = msg.find("; not elided: ", begin);
  return msg.substr(begin + head.size(), end == std::string::npos ? std::string::npos : end - begin - head.size())
             .find("'" + layer + "'") != std::string::npos;
}

// The reason the plan message gives for not eliding `layer` ("" if none).
std::string reason_in(const std::string& msg, const std::string& layer) {
  const size_t kept = msg.find("; not elided: ");
  if (kept == std::string::npos) return "";
  const size_t at = msg.find("'" + layer + "' (", kept);
  if (at == std::string::npos) return "";
  const size_t begin = at + layer.size() + 4;
  int depth = 1;
  for (size_t i = begin; i < msg.size(); ++i) {
    depth += msg[i] == '(' ? 1 : msg[i] == ')' ? -1 : 0;
    if (depth == 0) return msg.substr(begin, i - begin);
  }
  return "";
}

// The one plan message logged since the last call.
std::string one_plan(CaptureLogger& logger) {
  const auto plans = logger.take();
  EXPECT_EQ(plans.size(), 1u);
  return plans.empty() ? "" : plans.back();
}

// ---- an independent check of activation plans -------------------------------------------------

uint64_t bytes_of(const TensorStates& states, const Tensor* t) {
  const TensorState& st = states.at(t);
  return static_cast<uint64_t>(st.dims.volume()) * data_type_size(st.type);
}

// Lifetimes from the graph (producer step to the last consumer step); any two tensors alive at
// one step must not share bytes, except an elided concatenation's input and its output, where
// the input must lie exactly at its place in the output. Returns the first problem found.
std::string check_plan(const std::vector<Layer*>& steps, const TensorStates& states, const ActivationPlan& plan) {
  std::unordered_map<const Layer*, int> index;
  for (size_t s = 0; s < steps.size(); ++s) index[steps[s]] = static_cast<int>(s);
  struct Life {
    const Tensor* t;
    int first, last;
    uint64_t begin, end;
  };
  std::vector<Life> lives;
  for (const auto& [t, off] : plan.offsets) {
    if (off % 256 != 0) return "tensor '" + t->name() + "' is not 256-byte aligned";
    int first = index.at(t->producer()), last = first;
    for (const Layer* c : t->consumers()) last = std::max(last, index.at(c));
    lives.push_back({t, first, last, off, off + bytes_of(states, t)});
    if (off + bytes_of(states, t) > plan.peak) return "tensor '" + t->name() + "' ends past the peak";
  }
  std::unordered_map<const Tensor*, const Tensor*> inside;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (!plan.elided[s]) continue;
    const Layer* l = steps[s];
    if (l->type() != kLayerConcatenation) return "step " + l->name() + " is elided but no concatenation";
    uint64_t rel = 0;
    for (int i = 0; i < l->num_inputs(); ++i) {
      const Tensor* in = l->input(i);
      inside[in] = l->output(0);
      if (plan.offsets.at(in) != plan.offsets.at(l->output(0)) + rel) {
        return "input '" + in->name() + "' is not at byte " + std::to_string(rel) + " of '" + l->output(0)->name() +
               "'";
      }
      rel += bytes_of(states, in);
    }
  }
  for (size_t i = 0; i < lives.size(); ++i) {
    for (size_t j = i + 1; j < lives.size(); ++j) {
      const Life& a = lives[i];
      const Life& b = lives[j];
      if (a.first > b.last || b.first > a.last || a.begin == a.end || b.begin == b.end) continue;
      auto ia = inside.find(a.t), ib = inside.find(b.t);
      if ((ia != inside.end() && ia->second == b.t) || (ib != inside.end() && ib->second == a.t)) continue;
      if (a.begin < b.end && b.begin < a.end) return "'" + a.t->name() + "' and '" + b.t->name() + "' overlap";
    }
  }
  return "";
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
    for (const auto& d : plan.concats) {
      if (d.step == step_of(layer)) return &d;
    }
    return nullptr;
  }
  uint64_t offset(const Network& net, const std::string& tensor) const {
    return plan.offsets.at(net.find_tensor(tensor));
  }
};

Planned plan_for(const Network& net, const Dims& x_dims, bool elision = true, TensorStates* states_override = nullptr) {
  Planned p;
  p.steps = execution_steps(net);
  p.states = states_override ? *states_override : infer_shapes(net, {{"x", x_dims}});
  ActivationPlanOptions options;
  options.concat_elision = elision;
  p.plan = plan_activations(net, p.steps, p.states, options);
  EXPECT_EQ(check_plan(p.steps, p.states, p.plan), "");
  return p;
}

// ---- (a) producers write into the concatenation at batch 1 -----------------------------------

TEST(ConcatElision, ThreeProducersMatchTheCopyingRunBitForBit) {
  const ThreeProducers m;
  const int h = ThreeProducers::kH, w = ThreeProducers::kW;
  CaptureLogger logger;
  BuildReport report;
  auto engine = build(*m.network(1), 1, 1, h, w, &report);
  // Without elision the three 1024-byte inputs and the 3072-byte output are alive together.
  EXPECT_LT(report.activation_peak_bytes, 6144u);
  const auto x = random_input(1, h, w, 1);
  auto ctx = engine->create_execution_context();
  const auto elided = run(*ctx, x, 1, h, w, {"y"});
  const std::string msg = one_plan(logger);
  EXPECT_TRUE(elided_in(msg, "cat")) << msg;
  expect_close(elided.at("y"), m.y(input_act(x, 1, h, w)), "y (elided)");

  ctx->set_concat_elision(false);
  EXPECT_FALSE(ctx->concat_elision());
  const auto copied = run(*ctx, x, 1, h, w, {"y"});
  const std::string off = one_plan(logger);
  EXPECT_FALSE(elided_in(off, "cat")) << off;
  EXPECT_EQ(reason_in(off, "cat"), "concatenation elision is off") << off;
  expect_bit_equal(elided.at("y"), copied.at("y"), "y elided vs copied");

  // The concatenation as a network output cannot be elided; the same values come out.
  auto engine2 = build(*m.network(1, /*cat_is_output=*/true), 1, 1, h, w);
  auto ctx2 = engine2->create_execution_context();
  const auto with_cat = run(*ctx2, x, 1, h, w, {"y", "cat"});
  const std::string msg2 = one_plan(logger);
  EXPECT_NE(reason_in(msg2, "cat").find("is a network output"), std::string::npos) << msg2;
  expect_bit_equal(elided.at("y"), with_cat.at("y"), "y elided vs cat as output");
  expect_close(with_cat.at("cat"), m.cat(input_act(x, 1, h, w)), "cat");
}

TEST(ConcatElision, ProfileShowsTheElidedConcatenation) {
  const ThreeProducers m;
  const int h = ThreeProducers::kH, w = ThreeProducers::kW;
  auto engine = build(*m.network(kDynamic), 1, 2, h, w);
  auto ctx = engine->create_execution_context();
  ctx->set_profiling(true);
  const auto x1 = random_input(1, h, w, 2);
  (void)run(*ctx, x1, 1, h, w, {"y"});
  std::string report = ctx->profile_report();
  EXPECT_NE(report.find("cat [Concatenation, elided]"), std::string::npos) << report;
  // At batch 2 the concatenation copies; the profile then says in how many runs it was elided.
  const auto x2 = random_input(2, h, w, 3);
  (void)run(*ctx, x2, 2, h, w, {"y"});
  report = ctx->profile_report();
  EXPECT_NE(report.find(", elided in 1 of 2 runs]"), std::string::npos) << report;
}

TEST(ConcatElision, PlanPlacesInputsInsideTheOutputAndLowersThePeak) {
  const ThreeProducers m;
  auto net = m.network(1);
  const Planned on = plan_for(*net, Dims{1, kC, 8, 8});
  const Planned off = plan_for(*net, Dims{1, kC, 8, 8}, false);
  ASSERT_NE(on.decision("cat"), nullptr);
  EXPECT_TRUE(on.decision("cat")->elided) << on.decision("cat")->reason;
  EXPECT_TRUE(on.plan.elided[static_cast<size_t>(on.step_of("cat"))]);
  const uint64_t base = on.offset(*net, "cat");
  EXPECT_EQ(on.offset(*net, "c1"), base);
  EXPECT_EQ(on.offset(*net, "c2"), base + 1024);
  EXPECT_EQ(on.offset(*net, "e"), base + 2048);
  EXPECT_FALSE(off.decision("cat")->elided);
  EXPECT_EQ(on.plan.peak, 3072u);   // only the concatenation's buffer
  EXPECT_EQ(off.plan.peak, 6144u);  // inputs and output alive together at the concatenation
}

// ---- (b) dynamic batch: elided at batch 1, not at batch 2 ------------------------------------

TEST(ConcatElision, DynamicBatchSwitchesBackAndForthOnOneContext) {
  const ThreeProducers m;
  const int h = ThreeProducers::kH, w = ThreeProducers::kW;
  CaptureLogger logger;
  auto engine = build(*m.network(kDynamic), 1, 2, h, w);
  auto ctx = engine->create_execution_context();
  auto copying = engine->create_execution_context();
  copying->set_concat_elision(false);
  std::set<int> planned;
  for (int batch : {2, 1, 2, 1}) {
    const auto x = random_input(batch, h, w, 40u + static_cast<unsigned>(batch));
    const auto got = run(*ctx, x, batch, h, w, {"y"});
    if (!planned.insert(batch).second) {
      // Back to a batch seen before: its cached plan (elided or not) is reused, not re-planned.
      EXPECT_TRUE(logger.take().empty()) << "batch " << batch << " was planned again";
    } else {
      const std::string msg = one_plan(logger);
      if (batch == 1) {
        EXPECT_TRUE(elided_in(msg, "cat")) << msg;
      } else {
        EXPECT_FALSE(elided_in(msg, "cat")) << msg;
        EXPECT_NE(reason_in(msg, "cat").find("multiply to 2"), std::string::npos) << msg;
      }
    }
    const std::string what = "batch " + std::to_string(batch);
    expect_close(got.at("y"), m.y(input_act(x, batch, h, w)), what);
    const auto want = run(*copying, x, batch, h, w, {"y"});
    (void)logger.take();
    expect_bit_equal(got.at("y"), want.at("y"), what + " elided vs copied");
  }
  // Re-running the same shape does not re-plan.
  const auto x = random_input(1, h, w, 41);
  (void)run(*ctx, x, 1, h, w, {"y"});
  EXPECT_TRUE(logger.take().empty());

  auto net = m.network(kDynamic);
  const Planned b2 = plan_for(*net, Dims{2, kC, h, w});
  EXPECT_FALSE(b2.decision("cat")->elided);
  const Planned b1 = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_TRUE(b1.decision("cat")->elided);
}

// ---- (c) inputs with other uses, and concatenations that must copy ---------------------------

// a = conv1x1(x), b = conv3x3(x), cat = concat(a, b) on axis -3 (channels); a chain of three
// convolutions after it, then z = a * t3 reads `a` long after the concatenation: the planner
// must keep a's bytes (inside cat) alive until then.
TEST(ConcatElision, InputReadAgainAfterTheConcatenation) {
  const int h = 8, w = 8;
  const ConvWeights wa = make_conv(4, kC, 1, 21), wb = make_conv(4, kC, 3, 22), w1 = make_conv(4, 8, 1, 23),
                    w2 = make_conv(4, 4, 3, 24), w3 = make_conv(4, 4, 3, 25);
  auto make = [&] {
    auto net = std::make_unique<Network>();
    Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, h, w});
    Tensor* a = add_conv(*net, x, wa, "a");
    Tensor* b = add_conv(*net, x, wb, "b");
    Tensor* cat = add_concat(*net, {a, b}, -3, "cat");
    Tensor* t1 = add_conv(*net, cat, w1, "t1");
    Tensor* t2 = add_conv(*net, t1, w2, "t2");
    Tensor* t3 = add_conv(*net, t2, w3, "t3");
    Layer* z = net->add_elementwise(a, t3, ElementWiseOp::kProd);
    z->output(0)->set_name("z");
    net->mark_output(z->output(0));
    return net;
  };
  auto net = make();
  const Planned p = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_TRUE(p.decision("cat")->elided) << p.decision("cat")->reason;

  CaptureLogger logger;
  auto engine = build(*net, 1, 1, h, w);
  auto ctx = engine->create_execution_context();
  const auto x = random_input(1, h, w, 5);
  const auto got = run(*ctx, x, 1, h, w, {"z"});
  EXPECT_TRUE(elided_in(one_plan(logger), "cat"));
  const Act xa = input_act(x, 1, h, w);
  const Act a = conv(xa, wa), b = conv(xa, wb);
  const Act t3 = conv(conv(conv(concat_channels({&a, &b}), w1), w2), w3);
  expect_close(got.at("z"), product(a, t3), "z");
  ctx->set_concat_elision(false);
  expect_bit_equal(got.at("z"), run(*ctx, x, 1, h, w, {"z"}).at("z"), "z elided vs copied");
}

TEST(ConcatElision, InputThatIsANetworkOutputIsNotElided) {
  const ThreeProducers m;
  const int h = ThreeProducers::kH, w = ThreeProducers::kW;
  auto net = m.network(1, false, /*c1_is_output=*/true);
  const Planned p = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_FALSE(p.decision("cat")->elided);
  EXPECT_EQ(p.decision("cat")->reason, "input 'c1' is also a network output");

  CaptureLogger logger;
  auto engine = build(*net, 1, 1, h, w);
  auto ctx = engine->create_execution_context();
  const auto x = random_input(1, h, w, 6);
  const auto got = run(*ctx, x, 1, h, w, {"y", "c1"});
  EXPECT_EQ(reason_in(one_plan(logger), "cat"), "input 'c1' is also a network output");
  const Act xa = input_act(x, 1, h, w);
  expect_close(got.at("y"), m.y(xa), "y");
  expect_close(got.at("c1"), conv(xa, m.w1), "c1");
}

TEST(ConcatElision, ConcatenationOfATensorWithItselfCopies) {
  const int h = 8, w = 8;
  const ConvWeights wp = make_conv(4, kC, 3, 31), wy = make_conv(2, 8, 1, 32);
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, h, w});
  Tensor* p = add_conv(*net, x, wp, "p");
  Tensor* y = add_conv(*net, add_concat(*net, {p, p}, 1, "cat"), wy, "y");
  net->mark_output(y);
  const Planned plan = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_EQ(plan.decision("cat")->reason, "input 'p' appears more than once");

  auto engine = build(*net, 1, 1, h, w);
  auto ctx = engine->create_execution_context();
  const auto x0 = random_input(1, h, w, 7);
  const Act pa = conv(input_act(x0, 1, h, w), wp);
  expect_close(run(*ctx, x0, 1, h, w, {"y"}).at("y"), conv(concat_channels({&pa, &pa}), wy), "y");
}

// At 5x5 a 3-channel float input is 300 bytes: the second input would start unaligned.
TEST(ConcatElision, UnalignedOffsetsCopy) {
  const int h = 5, w = 5;
  const ConvWeights w1 = make_conv(3, kC, 1, 41), w2 = make_conv(3, kC, 3, 42), wy = make_conv(2, 6, 1, 43);
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, h, w});
  Tensor* p1 = add_conv(*net, x, w1, "p1");
  Tensor* p2 = add_conv(*net, x, w2, "p2");
  net->mark_output(add_conv(*net, add_concat(*net, {p1, p2}, 1, "cat"), wy, "y"));
  const Planned plan = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_EQ(plan.decision("cat")->reason, "input 'p2' would start at byte 300 of the output, not a multiple of 256");

  auto engine = build(*net, 1, 1, h, w);
  auto ctx = engine->create_execution_context();
  const auto x0 = random_input(1, h, w, 8);
  const Act xa = input_act(x0, 1, h, w);
  const Act a = conv(xa, w1), b = conv(xa, w2);
  expect_close(run(*ctx, x0, 1, h, w, {"y"}).at("y"), conv(concat_channels({&a, &b}), wy), "y");
}

TEST(ConcatElision, AxisZeroConcatenation) {
  const int h = 8, w = 8;
  const ConvWeights w1 = make_conv(4, kC, 1, 51), w2 = make_conv(4, kC, 3, 52), wy = make_conv(2, 4, 1, 53);
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, h, w});
  Tensor* p1 = add_conv(*net, x, w1, "p1");
  Tensor* p2 = add_conv(*net, x, w2, "p2");
  net->mark_output(add_conv(*net, add_concat(*net, {p1, p2}, 0, "cat"), wy, "y"));
  const Planned plan = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_TRUE(plan.decision("cat")->elided) << plan.decision("cat")->reason;
  EXPECT_EQ(plan.offset(*net, "p2"), plan.offset(*net, "cat") + 1024);

  CaptureLogger logger;
  auto engine = build(*net, 1, 1, h, w);
  auto ctx = engine->create_execution_context();
  const auto x0 = random_input(1, h, w, 9);
  const auto got = run(*ctx, x0, 1, h, w, {"y"});
  EXPECT_TRUE(elided_in(one_plan(logger), "cat"));
  const Act xa = input_act(x0, 1, h, w);
  expect_close(got.at("y"), conv(concat_batch(conv(xa, w1), conv(xa, w2)), wy), "y");
  ctx->set_concat_elision(false);
  expect_bit_equal(got.at("y"), run(*ctx, x0, 1, h, w, {"y"}).at("y"), "y elided vs copied");
}

// Channels-last (NHWC) stores the channels innermost: a channel concatenation is elided only
// when the other dims multiply to 1, a batch concatenation whenever the formats agree.
TEST(ConcatElision, ChannelsLastNeedsContiguousSlices) {
  const ThreeProducers m;
  const int h = ThreeProducers::kH, w = ThreeProducers::kW;
  auto net = m.network(1);
  for (const char* t : {"c1", "c2", "e", "cat"}) net->find_tensor(t)->set_format(TensorFormat::kChannelsLast);
  const Planned nhwc = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_EQ(nhwc.decision("cat")->reason,
            "the output dims stored outside axis 1 (1x12x8x8, channels_last) multiply to 64, so each input would be 64 "
            "separate slices");

  auto batch_net = std::make_unique<Network>();
  Tensor* x = batch_net->add_input("x", DataType::kFloat32, Dims{1, kC, h, w});
  Tensor* p1 = add_conv(*batch_net, x, m.w1, "p1");
  Tensor* p2 = add_conv(*batch_net, x, m.w2, "p2");
  Tensor* cat = add_concat(*batch_net, {p1, p2}, 0, "cat");
  batch_net->mark_output(add_conv(*batch_net, cat, make_conv(2, 4, 1, 14), "y"));
  for (Tensor* t : {p1, p2, cat}) t->set_format(TensorFormat::kChannelsLast);
  const Planned batch = plan_for(*batch_net, Dims{1, kC, h, w});
  EXPECT_TRUE(batch.decision("cat")->elided) << batch.decision("cat")->reason;
  EXPECT_EQ(batch.offset(*batch_net, "p2"), batch.offset(*batch_net, "cat") + 1024);

  // End to end with the builder's layout choice (the concatenation joins the convolutions'
  // channels-last region): whatever was elided, the values are right.
  CaptureLogger logger;
  auto engine = build(*m.network(1), 1, 1, h, w, nullptr, /*linear=*/false);
  auto ctx = engine->create_execution_context();
  const auto x0 = random_input(1, h, w, 15);
  const auto got = run(*ctx, x0, 1, h, w, {"y"});
  const std::string msg = one_plan(logger);
  EXPECT_NE(msg.find("'cat'"), std::string::npos) << msg;
  expect_close(got.at("y"), m.y(input_act(x0, 1, h, w)), "y (layout pass on)");
  ctx->set_concat_elision(false);
  expect_bit_equal(got.at("y"), run(*ctx, x0, 1, h, w, {"y"}).at("y"), "y (layout pass on) elided vs copied");
}

// SqueezeNet's fire modules end in channel concatenations of two convolutions. With linear
// memory (the CPU builder would otherwise make them channels-last) all eight are elided at
// batch 1; the output matches the exporter's reference and the copying run bit for bit.
TEST(ConcatElision, SqueezeNetLinearElidesEveryFireConcatenation) {
  const char* env = std::getenv("KILN_TEST_MODELS_DIR");
  const std::string dir =
      std::string(env ? env : std::string(KILN_SOURCE_DIR) + "/../shared/models") + "/squeezenet1_1";
  if (!std::filesystem::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  Network net;
  OnnxParser(net).parse_file(dir + "/model.onnx");
  const HostTensor in = load_tensor_pb(dir + "/test_data_set_0/input_0.pb");
  const HostTensor ref = load_tensor_pb(dir + "/test_data_set_0/output_0.pb");
  BuilderConfig config;
  config.num_threads = 1;
  config.disabled_passes.push_back("layout");
  OptimizationProfile p;
  p.set_dimensions(net.input(0)->name(), in.dims(), in.dims(), in.dims());
  config.profiles.push_back(p);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  const std::string out = net.output(0)->name();
  CaptureLogger logger;
  std::vector<std::vector<float>> results;
  for (bool elision : {true, false}) {
    auto ctx = engine->create_execution_context();
    ctx->set_concat_elision(elision);
    results.emplace_back(static_cast<size_t>(ref.count()), std::nanf(""));
    ctx->set_tensor_address(net.input(0)->name(), const_cast<void*>(in.data()));
    ctx->set_tensor_address(out, results.back().data());
    ctx->execute();
    const std::string msg = one_plan(logger);
    int concats = 0, elided = 0;
    for (size_t at = msg.find("/Concat'"); at != std::string::npos; at = msg.find("/Concat'", at + 1)) {
      const size_t open = msg.rfind('\'', at);
      ++concats;
      if (elided_in(msg, msg.substr(open + 1, at + 7 - open - 1))) ++elided;
    }
    EXPECT_EQ(concats, 8) << msg;
    EXPECT_EQ(elided, elision ? 8 : 0) << msg;
  }
  expect_bit_equal(results[0], results[1], "squeezenet elided vs copied");
  // The model tests' tolerance: |a-b| <= 1e-3*|b| + 1e-5*max(1, max|b|).
  double maxb = 1;
  for (int64_t i = 0; i < ref.count(); ++i) maxb = std::max(maxb, std::fabs(static_cast<double>(ref.as<float>()[i])));
  for (int64_t i = 0; i < ref.count(); ++i) {
    const double b = ref.as<float>()[i];
    ASSERT_NEAR(results[0][static_cast<size_t>(i)], b, 1e-3 * std::fabs(b) + 1e-5 * maxb) << "logit " << i;
  }
}

// ---- the remaining conditions, on the plan -----------------------------------------------------

TEST(ConcatElision, PlanRefusesWhatCannotBeElided) {
  const int h = 8, w = 8;
  const ConvWeights wc = make_conv(4, kC, 1, 61);
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, h, w});
  Tensor* p = add_conv(*net, x, wc, "p");
  Tensor* q = add_conv(*net, x, wc, "q");
  Tensor* r = add_conv(*net, x, wc, "r");
  Tensor* s = add_conv(*net, x, wc, "s");
  Tensor* cat1 = add_concat(*net, {p, q}, 1, "cat1");
  Tensor* cat2 = add_concat(*net, {p, r}, 1, "cat2");     // p is already inside cat1
  Tensor* cat3 = add_concat(*net, {cat1, s}, 1, "cat3");  // nesting
  std::vector<float> ones(static_cast<size_t>(4 * h * w), 1.f);
  Tensor* k = net->add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{1, 4, h, w}, ones))->output(0);
  Tensor* cat4 = add_concat(*net, {s, k}, 1, "cat4");  // a constant input
  Tensor* cat5 = add_concat(*net, {x, x}, 1, "cat5");  // network inputs
  Layer* empty = net->add_slice(r, {0}, {0}, {1});     // 1x0x8x8
  empty->output(0)->set_name("empty");
  Tensor* cat6 = add_concat(*net, {empty->output(0), r}, 1, "cat6");
  Tensor* u = add_conv(*net, x, wc, "u");
  Tensor* v = add_conv(*net, x, wc, "v");
  Tensor* cat7 = add_concat(*net, {u, v}, 1, "cat7");
  for (Tensor* t : {cat2, cat3, cat4, cat5, cat6, cat7}) {
    Layer* l = net->add_unary(t, UnaryOp::kAbs);
    l->output(0)->set_name("out_" + t->name());
    net->mark_output(l->output(0));
  }
  v->set_format(TensorFormat::kChannelsLast);

  const Planned plan = plan_for(*net, Dims{1, kC, h, w});
  EXPECT_TRUE(plan.decision("cat1")->elided) << plan.decision("cat1")->reason;
  EXPECT_EQ(plan.decision("cat2")->reason, "input 'p' is already placed inside 'cat1'");
  EXPECT_EQ(plan.decision("cat3")->reason, "input 'cat1' is the output of an elided concatenation (no nesting)");
  EXPECT_EQ(plan.decision("cat4")->reason, "input '" + k->name() + "' is not an activation written by a kernel");
  EXPECT_EQ(plan.decision("cat5")->reason, "input 'x' is a network input");
  EXPECT_EQ(plan.decision("cat6")->reason, "input 'empty' is empty");
  EXPECT_EQ(plan.decision("cat7")->reason, "input 'v' is in the channels_last format, the output in linear");

  // Data-dependent sizes anywhere: no elision (shapes change in the middle of an inference).
  TensorStates dd = infer_shapes(*net, {{"x", Dims{1, kC, h, w}}});
  dd.at(s).dd_axes = 1u << 1;
  const Planned with_dd = plan_for(*net, Dims{1, kC, h, w}, true, &dd);
  for (const auto& d : with_dd.plan.concats) EXPECT_EQ(d.reason, "the network has data-dependent sizes");
}

// Host-known concatenations (shape arithmetic) are not kernel steps: they are left alone.
TEST(ConcatElision, HostKnownConcatenationIsNotAStep) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, kC, 8, 8});
  Tensor* shape = net->add_shape(x)->output(0);
  Tensor* cat = add_concat(*net, {shape}, 0, "cat");
  Layer* y = net->add_shuffle_dynamic(x, cat);
  y->output(0)->set_name("y");
  net->mark_output(y->output(0));
  const Planned plan = plan_for(*net, Dims{1, kC, 8, 8});
  ASSERT_NE(plan.step_of("cat"), -1);
  EXPECT_EQ(plan.decision("cat"), nullptr);
  EXPECT_FALSE(plan.plan.elided[static_cast<size_t>(plan.step_of("cat"))]);
}

}  // namespace
}  // namespace kiln
