// Invalid data that only the device sees: a Gather whose indices are an engine input (so the
// builder and prepare() cannot check them) with an index out of range. The CUDA kernel writes 0
// for that element and sets the layer's device error flag; execute() must then fail naming the
// layer, the next valid inference must succeed (the flags are reset per inference), and after
// enqueue the caller's check_device_errors() reports it. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using test::cuda_usable;
using test::DeviceTensors;

TEST(CudaDeviceErrors, GatherIndexOutOfRangeFailsNamingTheLayer) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  Network net;
  Tensor* data = net.add_input("data", DataType::kFloat32, Dims{5, 4});
  Tensor* idx = net.add_input("idx", DataType::kInt64, Dims{3});
  Layer* gather = net.add_gather(data, idx, 0);
  gather->set_name("pick_rows");
  gather->output(0)->set_name("y");
  net.mark_output(gather->output(0));
  BuilderConfig config;
  config.device = DeviceType::kCUDA;
  config.time_tactics = false;
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "gather");
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  std::vector<float> x(20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 1.0f;
  void* x_dev = mem.upload(HostTensor::from_vector(DataType::kFloat32, Dims{5, 4}, x));
  void* i_dev = mem.alloc(3 * sizeof(int64_t));
  void* y_dev = mem.alloc(12 * sizeof(float));
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "with CUDA graphs" : "without CUDA graphs");
    auto ctx = engine->create_execution_context();
    ctx->set_graph_capture(graphs);
    ctx->set_tensor_address("data", x_dev);
    ctx->set_tensor_address("idx", i_dev);
    ctx->set_tensor_address("y", y_dev);
    auto run = [&](std::vector<int64_t> indices) {
      backend.copy_host_to_device(i_dev, indices.data(), indices.size() * sizeof(int64_t), nullptr);
      ctx->execute();
      std::vector<float> y(12);
      backend.copy_device_to_host(y.data(), y_dev, y.size() * sizeof(float), nullptr);
      return y;
    };
    std::vector<float> y = run({4, 0, -1});
    EXPECT_EQ(y[0], 17.0f);  // row 4
    EXPECT_EQ(y[4], 1.0f);   // row 0
    EXPECT_EQ(y[8], 17.0f);  // row -1 = 4
    try {
      run({1, 7, 2});
      ADD_FAILURE() << "an out-of-range index computed on the device must fail the inference";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("pick_rows"), std::string::npos) << msg;
      EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    }
    y = run({2, 3, 1});  // valid again: the flags were reset
    EXPECT_EQ(y[0], 9.0f);
    EXPECT_EQ(y[4], 13.0f);

    // enqueue: the caller checks after the stream completes.
    const std::vector<int64_t> bad = {0, 0, 5};
    backend.copy_host_to_device(i_dev, bad.data(), bad.size() * sizeof(int64_t), nullptr);
    void* stream = backend.create_stream();
    ctx->enqueue(stream);
    backend.synchronize(stream);
    EXPECT_THROW(ctx->check_device_errors(), Error);
    backend.destroy_stream(stream);
  }
}

}  // namespace
}  // namespace kiln
