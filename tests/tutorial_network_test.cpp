// The tutorial network, built by hand through the C++ API: 3x3 convolution (32 maps) ->
// BatchNorm written as a Scale layer -> ReLU -> 2x2 max pool -> fully connected. Runs it on
// the CPU (optimized and unoptimized builds) and checks it against an independent computation
// written here with plain loops. Also the engine round trip, determinism and dynamic batch.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr int kC = 3, kH = 12, kW = 10, kM = 32, kOut = 10;

struct TutorialWeights {
  std::vector<float> conv_w, conv_b, gamma, beta, mean, var, fc_w, fc_b;
  TutorialWeights() {
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0.f, 0.3f);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    conv_w.resize(kM * kC * 9);
    for (auto& v : conv_w) v = n(rng);
    conv_b.resize(kM);
    for (auto& v : conv_b) v = n(rng);
    for (int i = 0; i < kM; ++i) {
      gamma.push_back(u(rng));
      beta.push_back(n(rng));
      mean.push_back(n(rng));
      var.push_back(u(rng));
    }
    fc_w.resize(kOut * kM * (kH / 2) * (kW / 2));
    for (auto& v : fc_w) v = n(rng) * 0.1f;
    fc_b.resize(kOut);
    for (auto& v : fc_b) v = n(rng);
  }
};

// Independent computation, straight from the definitions (double accumulation).
std::vector<float> tutorial_expected(const TutorialWeights& w, const std::vector<float>& x, int batch) {
  std::vector<float> out(static_cast<size_t>(batch) * kOut);
  const int ph = kH / 2, pw = kW / 2;
  for (int n = 0; n < batch; ++n) {
    std::vector<double> act(static_cast<size_t>(kM) * kH * kW);
    for (int m = 0; m < kM; ++m) {
      const double s = w.gamma[m] / std::sqrt(w.var[m] + 1e-5);
      for (int y = 0; y < kH; ++y) {
        for (int xx = 0; xx < kW; ++xx) {
          double acc = w.conv_b[m];
          for (int c = 0; c < kC; ++c) {
            for (int ky = 0; ky < 3; ++ky) {
              for (int kx = 0; kx < 3; ++kx) {
                const int iy = y + ky - 1, ix = xx + kx - 1;  // pad 1
                if (iy < 0 || iy >= kH || ix < 0 || ix >= kW) continue;
                acc += w.conv_w[((m * kC + c) * 3 + ky) * 3 + kx] * x[((n * kC + c) * kH + iy) * kW + ix];
              }
            }
          }
          const double bn = (acc - w.mean[m]) * s + w.beta[m];
          act[(m * kH + y) * kW + xx] = bn > 0 ? bn : 0;
        }
      }
    }
    std::vector<double> pooled(static_cast<size_t>(kM) * ph * pw);
    for (int m = 0; m < kM; ++m) {
      for (int y = 0; y < ph; ++y) {
        for (int xx = 0; xx < pw; ++xx) {
          double mx = -1e30;
          for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) mx = std::max(mx, act[(m * kH + 2 * y + dy) * kW + 2 * xx + dx]);
          }
          pooled[(m * ph + y) * pw + xx] = mx;
        }
      }
    }
    for (int o = 0; o < kOut; ++o) {
      double acc = w.fc_b[o];
      for (size_t k = 0; k < pooled.size(); ++k) acc += w.fc_w[o * pooled.size() + k] * pooled[k];
      out[static_cast<size_t>(n) * kOut + o] = static_cast<float>(acc);
    }
  }
  return out;
}

std::unique_ptr<Network> make_tutorial(const TutorialWeights& w) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("image", DataType::kFloat32, Dims{kDynamic, kC, kH, kW});
  ConvolutionDesc cd;
  cd.num_output_maps = kM;
  cd.kernel = {3, 3};
  cd.pads_begin = {1, 1};
  cd.pads_end = {1, 1};
  Layer* conv = net->add_convolution(x, cd, HostTensor::from_vector(DataType::kFloat32, Dims{kM, kC, 3, 3}, w.conv_w),
                                     HostTensor::from_vector(DataType::kFloat32, Dims{kM}, w.conv_b));
  conv->set_name("conv1");
  // BatchNorm by hand: y = x*s + (beta - mean*s), s = gamma/sqrt(var+eps).
  std::vector<float> scale(kM), shift(kM);
  for (int m = 0; m < kM; ++m) {
    scale[m] = static_cast<float>(w.gamma[m] / std::sqrt(w.var[m] + 1e-5));
    shift[m] = w.beta[m] - w.mean[m] * scale[m];
  }
  Layer* bn =
      net->add_scale(conv->output(0), ScaleMode::kChannel, HostTensor::from_vector(DataType::kFloat32, Dims{kM}, shift),
                     HostTensor::from_vector(DataType::kFloat32, Dims{kM}, scale), HostTensor{});
  bn->set_name("bn1");
  Layer* relu = net->add_activation(bn->output(0), ActivationType::kRelu);
  PoolingDesc pd;
  pd.kernel = {2, 2};
  pd.strides = {2, 2};
  Layer* pool = net->add_pooling(relu->output(0), pd);
  Layer* fc = net->add_fully_connected(
      pool->output(0), kOut, HostTensor::from_vector(DataType::kFloat32, Dims{kOut, kM * (kH / 2) * (kW / 2)}, w.fc_w),
      HostTensor::from_vector(DataType::kFloat32, Dims{kOut}, w.fc_b));
  fc->output(0)->set_name("scores");
  net->mark_output(fc->output(0));
  return net;
}

std::vector<float> run_engine(Engine& engine, const std::vector<float>& x, int batch, int threads = 0) {
  auto ctx = engine.create_execution_context();
  if (threads) ctx->set_num_threads(threads);
  ctx->set_input_shape("image", Dims{batch, kC, kH, kW});
  EXPECT_EQ(ctx->tensor_shape("scores"), (Dims{batch, kOut}));
  std::vector<float> out(static_cast<size_t>(batch) * kOut, std::nanf(""));
  ctx->set_tensor_address("image", const_cast<float*>(x.data()));
  ctx->set_tensor_address("scores", out.data());
  ctx->execute();
  return out;
}

std::vector<float> random_input(int batch, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(batch) * kC * kH * kW);
  for (auto& v : x) v = u(rng);
  return x;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
  }
}

BuilderConfig tutorial_config(bool optimize) {
  BuilderConfig config;
  config.disable_optimizations = !optimize;
  OptimizationProfile p;
  p.set_dimensions("image", Dims{1, kC, kH, kW}, Dims{4, kC, kH, kW}, Dims{8, kC, kH, kW});
  config.profiles.push_back(p);
  return config;
}

TEST(TutorialNetwork, MatchesIndependentComputationOptimizedAndNot) {
  TutorialWeights w;
  auto net = make_tutorial(w);
  for (bool optimize : {false, true}) {
    BuildReport report;
    const auto bytes = Builder().build_serialized(*net, tutorial_config(optimize), &report);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    for (int batch : {1, 3, 8}) {
      const auto x = random_input(batch, 100 + batch);
      expect_close(run_engine(*engine, x, batch), tutorial_expected(w, x, batch));
    }
    if (optimize) {
      EXPECT_LT(report.layers_after, report.layers_before) << "the Scale (BatchNorm) should fold into the convolution";
    }
  }
}

TEST(TutorialNetwork, BuildsAreDeterministic) {
  TutorialWeights w;
  auto net = make_tutorial(w);
  // Kernels chosen by measurement may differ between two builds on a busy machine (its 3-channel
  // convolution has two CPU kernels to time: the stem kernel and oneDNN's): the bytes are compared
  // with the priority order, as two builds sharing a timing cache would choose alike.
  BuilderConfig config = tutorial_config(true);
  config.time_tactics = false;
  const auto a = Builder().build_serialized(*net, config);
  const auto b = Builder().build_serialized(*make_tutorial(w), config);
  EXPECT_EQ(a, b);
}

TEST(TutorialNetwork, OutOfProfileShapeIsAClearError) {
  TutorialWeights w;
  const auto bytes = Builder().build_serialized(*make_tutorial(w), tutorial_config(true));
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  try {
    ctx->set_input_shape("image", Dims{9, kC, kH, kW});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("image"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max 8x3x12x10"), std::string::npos) << msg;
  }
  EXPECT_THROW(ctx->set_input_shape("image", Dims{2, kC, kH + 1, kW}), Error);
  EXPECT_THROW(ctx->set_input_shape("nope", Dims{2, kC, kH, kW}), Error);
}

TEST(TutorialNetwork, MissingTensorAddressIsAClearError) {
  TutorialWeights w;
  const auto bytes = Builder().build_serialized(*make_tutorial(w), tutorial_config(true));
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  ctx->set_input_shape("image", Dims{1, kC, kH, kW});
  try {
    ctx->execute();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("image"), std::string::npos) << e.what();
  }
}

TEST(TutorialNetwork, ContextsRunConcurrentlyFromThreads) {
  TutorialWeights w;
  const auto bytes = Builder().build_serialized(*make_tutorial(w), tutorial_config(true));
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  std::vector<std::vector<float>> results(4), expected(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    const int batch = t + 1;
    const auto x = random_input(batch, 500 + t);
    expected[t] = tutorial_expected(w, x, batch);
    threads.emplace_back([&, t, batch, x] {
      for (int rep = 0; rep < 3; ++rep) results[t] = run_engine(*engine, x, batch, 1);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) expect_close(results[t], expected[t]);
}

TEST(TutorialNetwork, DescribeShowsFusedLayersAndMemoryPlan) {
  TutorialWeights w;
  const auto bytes = Builder().build_serialized(*make_tutorial(w), tutorial_config(true));
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  const std::string text = engine->describe();
  EXPECT_NE(text.find("conv1"), std::string::npos) << text;
  EXPECT_NE(text.find("+relu"), std::string::npos) << text;
  EXPECT_NE(text.find("activation memory"), std::string::npos) << text;
  EXPECT_GT(engine->activation_peak_bytes(0), 0u);
}

}  // namespace
}  // namespace kiln
