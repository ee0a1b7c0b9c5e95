// Automatic CUDA graphs (ExecutionContext::graph_capture, on by default for CUDA contexts): a
// context replays a captured graph without being asked and gives the plain run's results; a
// plugin that breaks capture (cudaDeviceSynchronize inside enqueue, tests/broken_plugins/) makes
// the automatic mode fall back to plain launches with correct results, while an explicit
// set_graph_capture(true) reports the failure. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"

namespace kiln {
namespace {

using test::cuda_usable;
using test::DeviceTensors;

constexpr float kAlpha = 1.5f, kBeta = -0.25f;
const Dims kShape{2, 3, 17, 5};

// x -> plugin (y = alpha x + beta) -> relu -> y, on CUDA.
std::shared_ptr<Engine> build_engine(const std::string& plugin_name) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, kShape);
  const PluginCreator* creator = PluginRegistry::instance().find(plugin_name, "1", "kiln_test");
  if (!creator) {
    ADD_FAILURE() << plugin_name << " is not registered (tests/broken_plugins/broken_cuda.cu)";
    return nullptr;
  }
  PluginFieldCollection fields;
  fields.add(PluginField::float32("alpha", {kAlpha}));
  fields.add(PluginField::float32("beta", {kBeta}));
  auto plugin = creator->create("affine", PluginRegistry::instance().resolve_fields(*creator, fields, "test"));
  Layer* affine = add_plugin(net, {x}, *plugin, "affine");
  Layer* relu = net.add_activation(affine->output(0), ActivationType::kRelu);
  relu->output(0)->set_name("y");
  net.mark_output(relu->output(0));
  BuilderConfig config;
  config.device = DeviceType::kCUDA;
  config.time_tactics = false;
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), plugin_name);
}

struct Io {
  HostTensor x{DataType::kFloat32, kShape}, y{DataType::kFloat32, kShape};
  void* x_dev = nullptr;
  void* y_dev = nullptr;
};

// Runs the context on x = scale * (i mod 23 - 11) and checks y = relu(alpha x + beta).
void run_and_check(ExecutionContext& ctx, Backend& backend, Io& io, float scale, const std::string& what) {
  for (int64_t i = 0; i < io.x.count(); ++i) io.x.as<float>()[i] = scale * static_cast<float>(i % 23 - 11);
  backend.copy_host_to_device(io.x_dev, io.x.data(), io.x.nbytes(), nullptr);
  ctx.execute();
  backend.copy_device_to_host(io.y.data(), io.y_dev, io.y.nbytes(), nullptr);
  for (int64_t i = 0; i < io.y.count(); ++i) {
    const float expected = std::max(0.0f, kAlpha * io.x.as<float>()[i] + kBeta);
    ASSERT_FLOAT_EQ(io.y.as<float>()[i], expected) << what << ", element " << i;
  }
}

// Device buffers for x and y, bound to `ctx`.
Io bind_io(ExecutionContext& ctx, DeviceTensors& mem) {
  Io io;
  io.x_dev = mem.alloc(io.x.nbytes());
  io.y_dev = mem.alloc(io.y.nbytes());
  ctx.set_tensor_address("x", io.x_dev);
  ctx.set_tensor_address("y", io.y_dev);
  return io;
}

TEST(CudaGraphAuto, ContextsReplayGraphsByDefaultWithThePlainResults) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  auto engine = build_engine("GoodCudaAffine");
  ASSERT_TRUE(engine);
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  EXPECT_TRUE(ctx->graph_capture()) << "CUDA contexts use graphs by default";
  Io io = bind_io(*ctx, mem);
  run_and_check(*ctx, backend, io, 1.0f, "first run (captures)");
  run_and_check(*ctx, backend, io, -0.5f, "second run (replays with new input values)");
  // New addresses: a new capture, still right.
  Io io2 = bind_io(*ctx, mem);
  run_and_check(*ctx, backend, io2, 2.0f, "after new addresses");
  ctx->set_graph_capture(false);
  EXPECT_FALSE(ctx->graph_capture());
  run_and_check(*ctx, backend, io2, 3.0f, "graphs off");
}

TEST(CudaGraphAuto, CaptureBreakingPluginFallsBackToPlainLaunches) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  auto engine = build_engine("BrokenDeviceSync");
  ASSERT_TRUE(engine);
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  Io io = bind_io(*ctx, mem);
  run_and_check(*ctx, backend, io, 1.0f, "first run (the capture fails)");
  EXPECT_FALSE(ctx->graph_capture()) << "a failed automatic capture must turn graphs off";
  run_and_check(*ctx, backend, io, -2.0f, "second run (plain)");

  auto strict = engine->create_execution_context();
  strict->set_graph_capture(true);
  strict->set_tensor_address("x", io.x_dev);
  strict->set_tensor_address("y", io.y_dev);
  EXPECT_THROW(strict->execute(), Error) << "an explicit graph request must report the failed capture";
}

}  // namespace
}  // namespace kiln
