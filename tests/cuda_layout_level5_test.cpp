// Builder optimization level 5 on CUDA (src/builder/passes/layout.cpp): every region of layers
// that could run channels-last is timed both ways on the GPU (linear, and channels-last with the
// Reformats it needs) with the kernels the builder would choose, and the faster way is kept;
// level 3 decides by the rule without timing. The float16 engine then computes what the CPU's
// float32 one does. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "op_harness.h"

namespace kiln {
namespace {

using test::cuda_usable;
using test::DeviceTensors;

HostTensor random_f32(const Dims& dims, uint64_t seed, double scale) {
  return test::random_tensor(DataType::kFloat32, dims, seed, -scale, scale);
}

Tensor* conv(Network& net, Tensor* x, int64_t in, int64_t out, int64_t k, bool relu, uint32_t seed) {
  ConvolutionDesc d;
  d.num_output_maps = out;
  d.kernel = {k, k};
  d.pads_begin = d.pads_end = {k / 2, k / 2};
  const float bound = std::sqrt(3.0f / static_cast<float>(in * k * k));  // keeps the magnitudes
  Tensor* y =
      net.add_convolution(x, d, random_f32(Dims{out, in, k, k}, seed, bound), random_f32(Dims{out}, seed + 1, 0.1f))
          ->output(0);
  return relu ? net.add_activation(y, ActivationType::kRelu)->output(0) : y;
}

// A residual block between two convolutions and a pooling: one region of five convolutions.
std::unique_ptr<Network> block_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{2, 16, 24, 24});
  Tensor* s = conv(*net, x, 16, 32, 3, true, 1);
  Tensor* t = conv(*net, s, 32, 16, 1, true, 3);
  t = conv(*net, t, 16, 16, 3, true, 5);
  t = conv(*net, t, 16, 32, 1, false, 7);
  t = net->add_activation(net->add_elementwise(t, s, ElementWiseOp::kSum)->output(0), ActivationType::kRelu)->output(0);
  PoolingDesc p;
  p.kernel = {2, 2};
  p.strides = {2, 2};
  t = net->add_pooling(t, p)->output(0);
  Tensor* y = conv(*net, t, 32, 64, 3, true, 9);
  y->set_name("y");
  net->mark_output(y);
  return net;
}

// One small convolution whose output leaves to two outputs: the rule keeps it linear (one
// convolution, two reformats); the timing decides on its own.
std::unique_ptr<Network> lone_conv_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{1, 8, 17, 19});
  Tensor* y = conv(*net, x, 8, 8, 1, false, 11);
  Tensor* z = net->add_activation(y, ActivationType::kSigmoid)->output(0);
  y->set_name("y");
  z->set_name("z");
  net->mark_output(y);
  net->mark_output(z);
  return net;
}

struct Region {
  std::string around;
  double linear = 0, channels_last = 0;
  int reformats = -1;
};

// The timed regions of the pass log, and whether each one's decision line says channels-last.
std::vector<Region> timed_regions(const BuildReport& r, std::vector<bool>* chose_channels_last) {
  std::vector<Region> regions;
  for (const std::string& line : r.pass_log) {
    const size_t at = line.find("level 5 timed the region");
    if (at == std::string::npos) continue;
    Region g;
    const size_t q1 = line.find('\'', at), q2 = line.find('\'', q1 + 1);
    EXPECT_NE(q2, std::string::npos) << line;
    if (q2 == std::string::npos) continue;
    g.around = line.substr(q1 + 1, q2 - q1 - 1);
    const size_t numbers = line.find(": linear ", q2);
    EXPECT_NE(numbers, std::string::npos) << "a region not timed both ways: " << line;
    if (numbers == std::string::npos) continue;
    EXPECT_EQ(std::sscanf(line.c_str() + numbers, ": linear %lf ms, channels-last %lf ms with %d reformats", &g.linear,
                          &g.channels_last, &g.reformats),
              3)
        << line;
    regions.push_back(g);
  }
  for (const Region& g : regions) {
    int decisions = 0;
    bool cl = false;
    for (const std::string& line : r.pass_log) {
      if (line.find("around '" + g.around + "'") == std::string::npos ||
          line.find("level 5 timed") != std::string::npos)
        continue;
      if (line.find("run channels-last") != std::string::npos) {
        cl = true;
        ++decisions;
      } else if (line.find("stays linear") != std::string::npos) {
        ++decisions;
      }
    }
    EXPECT_EQ(decisions, 1) << "region around " << g.around << ": " << ::testing::PrintToString(r.pass_log);
    chose_channels_last->push_back(cl);
  }
  return regions;
}

std::vector<HostTensor> run_engine(const std::vector<uint8_t>& bytes, DeviceType device, const HostTensor& x,
                                   const std::vector<std::string>& outputs) {
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "layout_level5");
  auto ctx = engine->create_execution_context();
  std::vector<HostTensor> outs;
  for (const std::string& name : outputs) outs.emplace_back(DataType::kFloat32, ctx->tensor_shape(name));
  if (device == DeviceType::kCPU) {
    ctx->set_tensor_address("x", const_cast<void*>(x.data()));
    for (size_t i = 0; i < outputs.size(); ++i) ctx->set_tensor_address(outputs[i], outs[i].data());
    ctx->execute();
    return outs;
  }
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  ctx->set_tensor_address("x", mem.upload(x));
  std::vector<void*> dev;
  for (size_t i = 0; i < outputs.size(); ++i) {
    dev.push_back(mem.alloc(outs[i].nbytes()));
    ctx->set_tensor_address(outputs[i], dev.back());
  }
  ctx->execute();
  for (size_t i = 0; i < outputs.size(); ++i)
    backend.copy_device_to_host(outs[i].data(), dev[i], outs[i].nbytes(), nullptr);
  return outs;
}

// Largest |a - b| over the largest |b|: float16 through a few layers stays near 1e-3.
double range_error(const HostTensor& a, const HostTensor& b) {
  double err = 0, range = 0;
  for (int64_t i = 0; i < b.count(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a.as<float>()[i] - b.as<float>()[i])));
    range = std::max(range, static_cast<double>(std::fabs(b.as<float>()[i])));
  }
  return err / std::max(range, 1e-6);
}

TEST(CudaLayoutLevel5, TimesEachRegionOnTheGpuAndKeepsTheFaster) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  struct Case {
    const char* name;
    std::unique_ptr<Network> (*make)();
    Dims x;
    std::vector<std::string> outputs;
  };
  const Case cases[] = {{"block", block_net, Dims{2, 16, 24, 24}, {"y"}},
                        {"lone convolution", lone_conv_net, Dims{1, 8, 17, 19}, {"y", "z"}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const HostTensor x = random_f32(c.x, 5, 2.0f);
    BuilderConfig cpu;
    cpu.device = DeviceType::kCPU;
    cpu.num_threads = 1;
    const auto reference = run_engine(Builder().build_serialized(*c.make(), cpu), DeviceType::kCPU, x, c.outputs);
    for (int level : {3, 5}) {
      SCOPED_TRACE("level " + std::to_string(level));
      BuilderConfig config;
      config.device = DeviceType::kCUDA;
      config.fp16 = true;
      config.optimization_level = level;
      BuildReport report;
      const auto bytes = Builder().build_serialized(*c.make(), config, &report);
      std::vector<bool> chose;
      const std::vector<Region> regions = timed_regions(report, &chose);
      if (level == 3) {
        EXPECT_TRUE(regions.empty()) << "level 3 timed a region: " << ::testing::PrintToString(report.pass_log);
        EXPECT_EQ(report.level5_layers_differing, -1);
      } else {
        // Level 5's whole-engine check ran on the GPU (-1: it could not run).
        ASSERT_GE(report.level5_layers_differing, 0);
        std::printf(
            "  %s: level 5 check: %d layer(s) differ from level 3's choice; whole engine %.4f ms with level "
            "5's, %.4f ms with level 3's: %s\n",
            c.name, report.level5_layers_differing, report.level5_engine_ms, report.level3_engine_ms,
            report.level3_kernels_kept ? "level 3's kept" : "level 5's kept");
        if (report.level5_layers_differing > 0) {
          EXPECT_GT(report.level5_engine_ms, 0.0);
          EXPECT_GT(report.level3_engine_ms, 0.0);
          EXPECT_EQ(report.level3_kernels_kept, report.level3_engine_ms < report.level5_engine_ms);
        }
        ASSERT_FALSE(regions.empty()) << ::testing::PrintToString(report.pass_log);
        for (size_t i = 0; i < regions.size(); ++i) {
          const Region& g = regions[i];
          std::printf("  %s: region around '%s' linear %.4f ms, channels-last %.4f ms (%d reformats): %s\n", c.name,
                      g.around.c_str(), g.linear, g.channels_last, g.reformats, chose[i] ? "channels-last" : "linear");
          EXPECT_GT(g.linear, 0.0);
          EXPECT_GT(g.channels_last, 0.0);
          EXPECT_GT(g.reformats, 0);
          if (g.linear != g.channels_last) {  // else a tie in print: either way
            EXPECT_EQ(chose[i], g.channels_last < g.linear);
          }
        }
      }
      const auto outs = run_engine(bytes, DeviceType::kCUDA, x, c.outputs);
      for (size_t i = 0; i < outs.size(); ++i) {
        const double err = range_error(outs[i], reference[i]);
        EXPECT_LE(err, 4e-3) << c.outputs[i] << ": the float16 engine against the CPU's float32 one";
      }
    }
  }
}

}  // namespace
}  // namespace kiln
