// The builder's timed choice between float16 and float32 for a plugin that accepts both, on CUDA
// (src/builder/passes/precision.cpp, plugin_type): with --fp16 the built-in TemperatureSwish,
// whose CUDA kernel takes either, is timed both ways (its kernel plus the cast in front that the
// float16 variant needs), the choice is logged, recorded in the timing cache (a rebuild with the
// cache times nothing and chooses the same) and the engine computes the right values in the type
// chosen. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "src/core/half.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::cuda_usable;
using test::DeviceTensors;

constexpr float kTemperature = 1.75f;
const Dims kShape{4, 3, 67, 61};  // odd sizes: the kernels' scalar tails run too

struct Built {
  std::vector<uint8_t> bytes;
  BuildReport report;
};

Built build(const std::string& timing_cache) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, kShape);
  const PluginCreator* creator = PluginRegistry::instance().find("TemperatureSwish");
  EXPECT_NE(creator, nullptr);
  PluginFieldCollection fields;
  fields.add(PluginField::float32("temperature", {kTemperature}));
  auto plugin = creator->create("tswish", PluginRegistry::instance().resolve_fields(*creator, fields, "test"));
  Layer* layer = add_plugin(net, {x}, *plugin, "tswish");
  layer->output(0)->set_name("y");
  net.mark_output(layer->output(0));
  BuilderConfig config;
  config.device = DeviceType::kCUDA;
  config.fp16 = true;
  config.time_tactics = true;
  config.timing_cache_path = timing_cache;
  Built b;
  b.bytes = Builder().build_serialized(net, config, &b.report);
  return b;
}

// "float16" or "float32": the type the pass log says the plugin runs in, after "timed against";
// `cached`: whether the log says the choice came from the timing cache.
std::string logged_choice(const BuildReport& r, bool* cached) {
  for (const std::string& line : r.pass_log) {
    if (line.find("plugin layer 'tswish' runs in ") == std::string::npos) continue;
    EXPECT_NE(line.find("timed against"), std::string::npos) << line;
    *cached = line.find("from the timing cache") != std::string::npos;
    return line.find("runs in float16") != std::string::npos ? "float16" : "float32";
  }
  ADD_FAILURE() << "no timed choice for the plugin in the pass log: " << ::testing::PrintToString(r.pass_log);
  return "";
}

TEST(PluginFormatChoiceCuda, TimedBetweenFloat16AndFloat32CachedAndCorrect) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  const fs::path cache = fs::temp_directory_path() / ("kiln_plugin_choice_" + std::to_string(::getpid()) + ".cache");
  fs::remove(cache);

  bool cached = true;
  const Built first = build(cache.string());
  const std::string chosen = logged_choice(first.report, &cached);
  EXPECT_FALSE(cached) << "the first build has no cache to read";
  ASSERT_TRUE(fs::exists(cache)) << "the timing cache file was not written";
  std::ifstream f(cache);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("variant:plugin_precision|"), std::string::npos) << "no plugin type choice in the cache:\n"
                                                                       << text;
  EXPECT_NE(text.find("\t" + chosen), std::string::npos) << text;

  // A rebuild with the cache chooses the same without timing the plugin again.
  const Built second = build(cache.string());
  EXPECT_EQ(logged_choice(second.report, &cached), chosen);
  EXPECT_TRUE(cached) << "the rebuild timed the plugin again instead of reading the cache";
  fs::remove(cache);

  // The engine computes y = x * sigmoid(t x), in float16 when the plugin runs in float16.
  HostTensor x(DataType::kFloat32, kShape);
  for (int64_t i = 0; i < x.count(); ++i) x.as<float>()[i] = static_cast<float>(std::sin(0.37 * i) * 6.0);
  auto engine = Runtime().deserialize(first.bytes.data(), first.bytes.size(), "plugin_choice");
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  ctx->set_tensor_address("x", mem.upload(x));
  HostTensor y(DataType::kFloat32, kShape);
  void* y_dev = mem.alloc(y.nbytes());
  ctx->set_tensor_address("y", y_dev);
  ctx->execute();
  backend.copy_device_to_host(y.data(), y_dev, y.nbytes(), nullptr);
  const double tol = chosen == "float16" ? 2e-3 : 1e-5;
  double max_rel = 0;
  for (int64_t i = 0; i < x.count(); ++i) {
    const double v = chosen == "float16" ? half_bits_to_float(float_to_half_bits(x.as<float>()[i])) : x.as<float>()[i];
    const double ref = v / (1.0 + std::exp(-kTemperature * v));
    max_rel = std::max(max_rel, std::fabs(y.as<float>()[i] - ref) / std::max(std::fabs(ref), 1e-3));
  }
  EXPECT_LE(max_rel, tol) << "plugin run in " << chosen;
}

}  // namespace
}  // namespace kiln
