// Tests of network outputs that are also read inside the network: a constant (or constant-folded
// tensor) marked as an output and consumed by a layer must reach that layer with its value, not
// through the caller's output buffer, which the runtime fills only at the end of the inference
// (found by `kiln debug layers`, which marks every tensor as an output). On the CPU in CI, and
// on CUDA where a device is usable.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "src/backends/backend.h"

namespace kiln {
namespace {

// y = x + c, with the constant c also an output.
std::unique_ptr<Network> constant_output_network(const HostTensor& c) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{4});
  Layer* k = net->add_constant(c, "c");
  Layer* add = net->add_elementwise(x, k->output(0), ElementWiseOp::kSum);
  add->output(0)->set_name("y");
  net->mark_output(add->output(0));
  net->mark_output(k->output(0));
  return net;
}

void check(DeviceType device) {
  HostTensor c(DataType::kFloat32, Dims{4});
  HostTensor x(DataType::kFloat32, Dims{4});
  for (int i = 0; i < 4; ++i) {
    c.as<float>()[i] = 10.0f * static_cast<float>(i + 1);
    x.as<float>()[i] = 0.5f * static_cast<float>(i);
  }
  auto net = constant_output_network(c);
  BuilderConfig config;
  config.device = device;
  const auto bytes = Builder().build_serialized(*net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "constant output");
  auto ctx = engine->create_execution_context();
  HostTensor y(DataType::kFloat32, Dims{4}), c_out(DataType::kFloat32, Dims{4});
  std::vector<void*> device_buffers;
  Backend* backend = device == DeviceType::kCPU ? nullptr : &get_backend(device);
  auto bind = [&](const char* name, HostTensor& t, bool upload) {
    if (!backend) {
      ctx->set_tensor_address(name, t.data());
      return;
    }
    device_buffers.push_back(backend->allocate(t.nbytes()));
    if (upload) backend->copy_host_to_device(device_buffers.back(), t.data(), t.nbytes(), nullptr);
    ctx->set_tensor_address(name, device_buffers.back());
  };
  bind("x", x, true);
  bind("y", y, false);
  bind("c", c_out, false);
  // The caller's output buffers start as garbage: the layer must not read them.
  for (int i = 0; i < 4; ++i) c_out.as<float>()[i] = -1000.0f;
  ctx->execute();
  ctx->execute();
  if (backend) {
    backend->copy_device_to_host(y.data(), device_buffers[1], y.nbytes(), nullptr);
    backend->copy_device_to_host(c_out.data(), device_buffers[2], c_out.nbytes(), nullptr);
    for (void* p : device_buffers) backend->release(p);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(y.as<float>()[i], x.as<float>()[i] + c.as<float>()[i]) << "element " << i;
    EXPECT_EQ(c_out.as<float>()[i], c.as<float>()[i]) << "element " << i;
  }
}

TEST(RuntimeOutputs, ConstantOutputReadByALayerCpu) { check(DeviceType::kCPU); }

TEST(RuntimeOutputs, ConstantOutputReadByALayerCuda) {
  std::string why;
  if (!test::cuda_usable(&why)) GTEST_SKIP() << why;
  check(DeviceType::kCUDA);
}

}  // namespace
}  // namespace kiln
