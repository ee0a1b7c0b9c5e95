// CUDA graphs in execution contexts (on by default): a context runs the first inference at new
// shapes without a graph (the warm-up), then captures once per (shapes, I/O addresses) and
// replays, giving the plain run's results. A capture that fails (a plugin that synchronizes the
// device inside enqueue, tests/broken_plugins/) is ended and its error state cleared, and the
// same call runs without a graph: the results stay right, other contexts on the thread capture
// again, and an explicit set_graph_capture(true) reports the failure but leaves the context
// usable. A plugin doing capture-unsafe set-up on first use at each shape (LazyCudaAffine)
// never breaks a capture, thanks to the warm-up. Rotating buffer sets replay cached graphs, or
// update one in place when the cache holds one graph. Skips without a CUDA device.
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

// x -> plugin (y = alpha x + beta) -> relu -> y, on CUDA; with `dynamic`, x's batch ranges 1..4.
std::shared_ptr<Engine> build_engine(const std::string& plugin_name, bool dynamic = false) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, dynamic ? Dims{kDynamic, 3, 17, 5} : kShape);
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
  if (dynamic) {
    OptimizationProfile p;
    p.set_dimensions("x", Dims{1, 3, 17, 5}, Dims{2, 3, 17, 5}, Dims{4, 3, 17, 5});
    config.profiles.push_back(p);
  }
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), plugin_name);
}

struct Io {
  HostTensor x{DataType::kFloat32, kShape}, y{DataType::kFloat32, kShape};
  void* x_dev = nullptr;
  void* y_dev = nullptr;
};

// Runs the context on x = scale * (i mod 23 - 11) and checks y = relu(alpha x + beta).
void run_and_check(ExecutionContext& ctx, Backend& backend, Io& io, float scale, const std::string& what,
                   int64_t batch = kShape[0]) {
  io.x = HostTensor(DataType::kFloat32, Dims{batch, 3, 17, 5});
  io.y = HostTensor(DataType::kFloat32, Dims{batch, 3, 17, 5});
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
  const size_t largest = 4 * 3 * 17 * 5 * sizeof(float);  // batch 4, the dynamic engine's max
  io.x_dev = mem.alloc(largest);
  io.y_dev = mem.alloc(largest);
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
  run_and_check(*ctx, backend, io, 1.0f, "first run (the warm-up, no graph)");
  EXPECT_EQ(ctx->stats().plain_inferences, 1u);
  EXPECT_EQ(ctx->stats().graph_captures, 0u);
  run_and_check(*ctx, backend, io, -0.5f, "second run (captures)");
  run_and_check(*ctx, backend, io, 0.25f, "third run (replays with new input values)");
  EXPECT_EQ(ctx->stats().graph_captures, 1u);
  EXPECT_EQ(ctx->stats().graph_replays, 2u);
  // New addresses: one new capture, then replays; the old addresses' graph stays cached.
  Io io2 = bind_io(*ctx, mem);
  run_and_check(*ctx, backend, io2, 2.0f, "after new addresses");
  run_and_check(*ctx, backend, io2, 2.5f, "new addresses again");
  ctx->set_tensor_address("x", io.x_dev);
  ctx->set_tensor_address("y", io.y_dev);
  run_and_check(*ctx, backend, io, -3.0f, "back to the first addresses");
  EXPECT_EQ(ctx->stats().graph_captures, 2u) << "rotating two buffer sets captures each once";
  EXPECT_EQ(ctx->stats().graph_replays, 5u);
  ctx->set_graph_capture(false);
  EXPECT_FALSE(ctx->graph_capture());
  run_and_check(*ctx, backend, io, 3.0f, "graphs off");
  EXPECT_EQ(ctx->stats().graph_replays, 5u);
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
  run_and_check(*ctx, backend, io, 1.0f, "first run (the warm-up, no capture yet)");
  EXPECT_TRUE(ctx->graph_capture());
  run_and_check(*ctx, backend, io, -1.0f, "second run (the capture fails; the same call runs without a graph)");
  EXPECT_EQ(ctx->stats().graph_capture_failures, 1u);
  EXPECT_FALSE(ctx->graph_capture()) << "a failed automatic capture turns graphs off for these shapes";
  run_and_check(*ctx, backend, io, -2.0f, "third run (plain)");
  run_and_check(*ctx, backend, io, 0.5f, "fourth run (plain)");
  EXPECT_EQ(ctx->stats().graph_capture_failures, 1u) << "no capture is tried again";
  EXPECT_EQ(ctx->stats().plain_inferences, 4u);

  // The failed capture left no error state behind: a good engine on this thread captures.
  auto good = build_engine("GoodCudaAffine");
  ASSERT_TRUE(good);
  auto other = good->create_execution_context();
  Io io_good = bind_io(*other, mem);
  for (int i = 0; i < 3; ++i) run_and_check(*other, backend, io_good, 1.0f + i, "good engine after the failure");
  EXPECT_EQ(other->stats().graph_captures, 1u);
  EXPECT_EQ(other->stats().graph_capture_failures, 0u);

  auto strict = engine->create_execution_context();
  strict->set_graph_capture(true);
  strict->set_tensor_address("x", io.x_dev);
  strict->set_tensor_address("y", io.y_dev);
  run_and_check(*strict, backend, io, 1.0f, "explicit graphs: the warm-up runs plain");
  try {
    strict->execute();
    ADD_FAILURE() << "an explicit graph request must report the failed capture";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("still usable"), std::string::npos) << e.what();
  }
  strict->set_graph_capture(false);
  run_and_check(*strict, backend, io, -4.0f, "the context stays usable after the failure");
}

TEST(CudaGraphAuto, LazySetUpAtEachShapeHappensInTheWarmUpNotTheCapture) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  auto engine = build_engine("LazyCudaAffine", true);
  ASSERT_TRUE(engine);
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  ctx->set_input_shape("x", Dims{4, 3, 17, 5});
  Io io = bind_io(*ctx, mem);  // sized for the largest batch
  for (int round = 0; round < 3; ++round) {
    for (int64_t batch : {1, 4, 2}) {
      ctx->set_input_shape("x", Dims{batch, 3, 17, 5});
      run_and_check(*ctx, backend, io, 0.5f + round, "round " + std::to_string(round), batch);
    }
  }
  const ContextStats st = ctx->stats();
  EXPECT_EQ(st.graph_capture_failures, 0u) << "lazy set-up ran inside a capture";
  EXPECT_EQ(st.shape_plans_built, 3u);
  EXPECT_EQ(st.plain_inferences, 3u) << "one warm-up per shape";
  EXPECT_EQ(st.graph_captures, 3u);
  EXPECT_EQ(st.graph_replays, 6u);
}

TEST(CudaGraphAuto, OneGraphCacheSlotUpdatesTheGraphForNewAddresses) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  auto engine = build_engine("GoodCudaAffine");
  ASSERT_TRUE(engine);
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  ctx->set_graph_cache_size(1);
  Io a = bind_io(*ctx, mem);
  Io b = bind_io(*ctx, mem);
  for (int i = 0; i < 6; ++i) {
    Io& io = i % 2 ? b : a;
    ctx->set_tensor_address("x", io.x_dev);
    ctx->set_tensor_address("y", io.y_dev);
    run_and_check(*ctx, backend, io, 0.25f * (i + 1), "call " + std::to_string(i));
  }
  const ContextStats st = ctx->stats();
  EXPECT_EQ(st.graph_captures, 5u) << "every call after the warm-up captures (one slot, two address sets)";
  EXPECT_EQ(st.graph_instantiations, 1u) << "later captures update the one graph in place";
  EXPECT_EQ(st.graph_updates, 4u);
  EXPECT_EQ(st.graph_capture_failures, 0u);
}

}  // namespace
}  // namespace kiln
