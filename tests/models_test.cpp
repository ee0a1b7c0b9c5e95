// Model tests for the foundation and plugin issues on the CPU: the shared exporter models
// (../shared/models, skipped when absent) built with a dynamic-batch profile 1/4/8 and run at
// batch 4 against the reference, engines reloaded in a fresh process through the `kiln`
// command, tinyyolo_tswish through the plugin fallback, and a hand-built network with the
// TemperatureSwish plugin serialized and re-run in a fresh process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "op_harness.h"
#include "src/core/tensor_io.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

std::string models_dir() {
  if (const char* d = std::getenv("KILN_TEST_MODELS_DIR")) return d;
  return std::string(KILN_SOURCE_DIR) + "/../shared/models";
}

std::string model_path(const std::string& name) { return models_dir() + "/" + name; }

// The tolerance: |a-b| <= 1e-3*|b| + 1e-5*max(1, max|b|).
void expect_matches_reference(const float* got, const HostTensor& ref, const std::string& what) {
  double maxb = 0;
  for (int64_t i = 0; i < ref.count(); ++i) maxb = std::max(maxb, std::fabs(static_cast<double>(ref.as<float>()[i])));
  const double atol = 1e-5 * std::max(1.0, maxb);
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < ref.count(); ++i) {
    const double b = ref.as<float>()[i], a = got[i];
    const double d = std::fabs(a - b);
    if (!(d <= 1e-3 * std::fabs(b) + atol)) ++bad;
    worst = std::max(worst, d / std::max(std::fabs(b), 1e-3));
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.count() << " elements out of tolerance (worst rel " << worst
                    << ")";
}

std::unique_ptr<Network> parse(const std::string& path) {
  auto net = std::make_unique<Network>();
  OnnxParser(*net).parse_file(path);
  return net;
}

// Builds with min/opt/max batch 1/4/8 and runs batch 4 (the reference input repeated 4 times);
// every batch item must match the reference.
void run_batch4(const std::string& name) {
  const std::string dir = model_path(name);
  if (!fs::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  auto net = parse(dir + "/model.onnx");
  ASSERT_EQ(net->num_inputs(), 1);
  const HostTensor in1 = load_tensor_pb(dir + "/test_data_set_0/input_0.pb");
  const HostTensor ref = load_tensor_pb(dir + "/test_data_set_0/output_0.pb");
  Dims d1 = in1.dims(), d4 = in1.dims(), d8 = in1.dims();
  d4[0] = 4;
  d8[0] = 8;
  BuilderConfig config;
  OptimizationProfile p;
  p.set_dimensions(net->input(0)->name(), d1, d4, d8);
  config.profiles.push_back(p);
  const auto bytes = Builder().build_serialized(*net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  HostTensor in4(in1.type(), d4);
  for (int b = 0; b < 4; ++b) std::memcpy(in4.as<uint8_t>() + b * in1.nbytes(), in1.data(), in1.nbytes());
  ctx->set_input_shape(net->input(0)->name(), d4);
  const std::string out = net->output(0)->name();
  Dims od = ref.dims();
  od[0] = 4;
  ASSERT_EQ(ctx->tensor_shape(out), od);
  HostTensor out4(DataType::kFloat32, od);
  ctx->set_tensor_address(net->input(0)->name(), in4.data());
  ctx->set_tensor_address(out, out4.data());
  ctx->execute();
  for (int b = 0; b < 4; ++b) {
    expect_matches_reference(out4.as<float>() + b * ref.count(), ref, name + " batch item " + std::to_string(b));
  }
  // The same context at batch 1 after batch 4 (re-planned memory).
  ctx->set_input_shape(net->input(0)->name(), d1);
  HostTensor out1(DataType::kFloat32, ref.dims());
  ctx->set_tensor_address(net->input(0)->name(), const_cast<void*>(in1.data()));
  ctx->set_tensor_address(out, out1.data());
  ctx->execute();
  expect_matches_reference(out1.as<float>(), ref, name + " batch 1");
}

TEST(Models, SqueezeNetDynamicBatch) { run_batch4("squeezenet1_1"); }
TEST(Models, TinyYoloSiluDynamicBatch) { run_batch4("tinyyolo_silu"); }
TEST(Models, TinyYoloTemperatureSwishThroughPluginFallback) { run_batch4("tinyyolo_tswish"); }

int run_cli(const std::string& args) {
  const std::string cmd = std::string(KILN_CLI_PATH) + " " + args + " > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// `kiln build` then `kiln run --engine` in separate processes: the engine file loads in a fresh
// process and matches the reference (run --compare-dir exits non-zero on a mismatch).
void build_and_run_in_fresh_process(const std::string& name) {
  const std::string dir = model_path(name);
  if (!fs::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  const fs::path tmp = fs::temp_directory_path() / ("kiln_models_test_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string engine = (tmp / "model.kiln").string();
  auto net = parse(dir + "/model.onnx");
  const std::string in = net->input(0)->name();
  const HostTensor in1 = load_tensor_pb(dir + "/test_data_set_0/input_0.pb");
  Dims d8 = in1.dims();
  d8[0] = 8;
  ASSERT_EQ(run_cli("build --onnx " + dir + "/model.onnx --save-engine " + engine + " --min-shapes " + in + ":" +
                    in1.dims().to_string() + " --opt-shapes " + in + ":" + in1.dims().to_string() + " --max-shapes " +
                    in + ":" + d8.to_string()),
            0);
  EXPECT_EQ(run_cli("run --engine " + engine + " --inputs-dir " + dir + "/test_data_set_0 --compare-dir " + dir +
                    "/test_data_set_0 --output-dir " + (tmp / "out").string()),
            0);
  fs::remove_all(tmp);
}

TEST(Models, SqueezeNetEngineReloadsInFreshProcess) { build_and_run_in_fresh_process("squeezenet1_1"); }
TEST(Models, TinyYoloSiluEngineReloadsInFreshProcess) { build_and_run_in_fresh_process("tinyyolo_silu"); }
TEST(Models, TinyYoloTemperatureSwishEngineReloadsInFreshProcess) { build_and_run_in_fresh_process("tinyyolo_tswish"); }

// convolution -> scale -> TemperatureSwish plugin, by hand; independent expected values.
TEST(Models, HandBuiltNetworkWithTemperatureSwishPluginRoundTrips) {
  const PluginCreator* creator = PluginRegistry::instance().find("TemperatureSwish");
  ASSERT_NE(creator, nullptr) << "the built-in TemperatureSwish plugin is not registered";
  constexpr int C = 2, M = 3, H = 5, W = 7;
  const float t = 0.75f;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(M * C), b(M), sc(M), sh(M), x(2 * C * H * W);
  for (auto* v : {&w, &b, &sc, &sh, &x}) {
    for (auto& e : *v) e = u(rng);
  }
  Network net;
  Tensor* in = net.add_input("x", DataType::kFloat32, Dims{kDynamic, C, H, W});
  ConvolutionDesc cd;
  cd.num_output_maps = M;
  cd.kernel = {1, 1};
  Layer* conv = net.add_convolution(in, cd, HostTensor::from_vector(DataType::kFloat32, Dims{M, C, 1, 1}, w),
                                    HostTensor::from_vector(DataType::kFloat32, Dims{M}, b));
  Layer* scale =
      net.add_scale(conv->output(0), ScaleMode::kChannel, HostTensor::from_vector(DataType::kFloat32, Dims{M}, sh),
                    HostTensor::from_vector(DataType::kFloat32, Dims{M}, sc), HostTensor{});
  PluginFieldCollection fields;
  fields.add(PluginField::float32("temperature", {t}));
  auto plugin = creator->create("tswish", fields);
  Layer* act = add_plugin(net, {scale->output(0)}, *plugin, "tswish");
  act->output(0)->set_name("y");
  net.mark_output(act->output(0));

  std::vector<float> expected(2 * M * H * W);
  for (int n = 0; n < 2; ++n) {
    for (int m = 0; m < M; ++m) {
      for (int p = 0; p < H * W; ++p) {
        double v = b[m];
        for (int c = 0; c < C; ++c) v += w[m * C + c] * x[(n * C + c) * H * W + p];
        v = v * sc[m] + sh[m];
        expected[(n * M + m) * H * W + p] = static_cast<float>(v / (1.0 + std::exp(-t * v)));
      }
    }
  }
  BuilderConfig config;
  OptimizationProfile prof;
  prof.set_dimensions("x", Dims{1, C, H, W}, Dims{2, C, H, W}, Dims{4, C, H, W});
  config.profiles.push_back(prof);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  ctx->set_input_shape("x", Dims{2, C, H, W});
  std::vector<float> y(expected.size());
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(y[i], expected[i], 1e-5 * std::max(1.f, std::fabs(expected[i]))) << i;

  // Serialize to a file, run again in a fresh process, compare.
  const fs::path tmp = fs::temp_directory_path() / ("kiln_tswish_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  {
    std::ofstream f(tmp / "net.kiln", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  save_npy((tmp / "x.npy").string(), HostTensor::from_vector(DataType::kFloat32, Dims{2, C, H, W}, x));
  save_npy((tmp / "expected.npy").string(), HostTensor::from_vector(DataType::kFloat32, Dims{2, M, H, W}, expected));
  ASSERT_EQ(run_cli("run --engine " + (tmp / "net.kiln").string() + " --input x=" + (tmp / "x.npy").string() +
                    " --output-dir " + (tmp / "out").string()),
            0);
  const HostTensor y2 = load_npy((tmp / "out" / "y.npy").string());
  ASSERT_EQ(y2.dims(), (Dims{2, M, H, W}));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y2.as<float>()[i], y[i]) << i;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace kiln
