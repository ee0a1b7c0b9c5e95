// The plugin-authoring features on CUDA engines (the CPU side is tests/plugin_authoring_test.cpp):
// a shape input (ExprBuilder::input_value) feeding output dims in an engine with a dynamic
// profile, run with CUDA graphs at several shapes; plugin tactics timed on the device by the
// builder, the fastest stored in the engine and given to the context's plugin object; and
// PluginExecContext::fail reaching the error from a CUDA enqueue. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/engine_format.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "plugin_test_util.h"

#ifdef KILN_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace kiln {
namespace {

#ifdef KILN_TEST_CUDA
constexpr const char* kNamespace = "kiln_authoring_cuda_test";

// Copies `bytes` from `src` to `dst` `times` times on the plugin's stream (device work whose
// duration grows with `times`, for the tactic test).
int device_copy(const PluginExecContext& exec, void* dst, const void* src, size_t bytes, int times = 1) {
  if (exec.device != DeviceType::kCUDA) return exec.fail("this test plugin runs on CUDA only");
  for (int i = 0; i < times; ++i) {
    const cudaError_t err =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(exec.stream));
    if (err != cudaSuccess) return exec.fail(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(err));
  }
  return 0;
}

template <class P>
using Creator = test::FieldlessCreator<P>;

// y = x's elements with the dims that input 1's host value holds (a shape input).
class CudaReshapeTo : public Plugin {
 public:
  std::string type() const override { return "CudaReshapeTo"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>&, ExprBuilder& exprs) const override {
    return DimsExprs{{exprs.input_value(1, 0), exprs.input_value(1, 1)}};
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == (pos == 1 ? DataType::kInt64 : DataType::kFloat32);
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>& out,
              const void* const* inputs, void* const* outputs, void*, const PluginExecContext& exec) override {
    if (in[0].dims.volume() != out[0].dims.volume()) return exec.fail("the target shape has another element count");
    return device_copy(exec, outputs[0], inputs[0], static_cast<size_t>(in[0].dims.volume()) * sizeof(float));
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<CudaReshapeTo>(); }
  PluginFieldCollection fields() const override { return {}; }
};
using CudaReshapeToCreator = Creator<CudaReshapeTo>;
KILN_REGISTER_PLUGIN(CudaReshapeToCreator);

// Two implementations: "slow" copies 400 times, "fast" once; the builder must keep "fast".
class CudaTwoWays : public Plugin {
 public:
  std::string type() const override { return "CudaTwoWays"; }
  std::string plugin_namespace() const override { return kNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& in) const override { return {in.at(0)}; }
  DimsExprs output_dims(int, const std::vector<DimsExprs>& in, ExprBuilder&) const override { return in.at(0); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].type == DataType::kFloat32 &&
           io[static_cast<size_t>(pos)].format == TensorFormat::kLinear;
  }
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>&,
                                   const std::vector<PluginTensorDesc>&) const override {
    return {"slow", "fast"};
  }
  void set_tactic(const std::string& name) override {
    tactic_ = name;
    if (name == "fast") fast_set_.fetch_add(1);
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext& exec) override {
    if (tactic_.empty()) return exec.fail("set_tactic was not called");
    if (tactic_ == "slow") slow_runs_.fetch_add(1);
    return device_copy(exec, outputs[0], inputs[0], static_cast<size_t>(in[0].dims.volume()) * sizeof(float),
                       tactic_ == "slow" ? 400 : 1);
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<CudaTwoWays>(*this); }
  PluginFieldCollection fields() const override { return {}; }
  static inline std::atomic<int> fast_set_{0}, slow_runs_{0};

 private:
  std::string tactic_;
};
using CudaTwoWaysCreator = Creator<CudaTwoWays>;
KILN_REGISTER_PLUGIN(CudaTwoWaysCreator);

// Fails every enqueue with a message.
class CudaFailing : public CudaTwoWays {
 public:
  std::string type() const override { return "CudaFailing"; }
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>&,
                                   const std::vector<PluginTensorDesc>&) const override {
    return {};
  }
  int enqueue(const std::vector<PluginTensorDesc>&, const std::vector<PluginTensorDesc>&, const void* const*,
              void* const*, void*, const PluginExecContext& exec) override {
    return exec.fail("the indices must be sorted (test message)", 3);
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<CudaFailing>(); }
};
using CudaFailingCreator = Creator<CudaFailing>;
KILN_REGISTER_PLUGIN(CudaFailingCreator);

// y = x, output 0 may reuse input 0; records whether kiln passed one address for both.
class CudaCopyInPlace : public CudaTwoWays {
 public:
  std::string type() const override { return "CudaCopyInPlace"; }
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>&,
                                   const std::vector<PluginTensorDesc>&) const override {
    return {};
  }
  int aliased_input(int) const override { return 0; }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext& exec) override {
    (inputs[0] == outputs[0] ? same_ : different_).fetch_add(1);
    if (inputs[0] == outputs[0]) return 0;
    return device_copy(exec, outputs[0], inputs[0], static_cast<size_t>(in[0].dims.volume()) * sizeof(float));
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<CudaCopyInPlace>(); }
  static inline std::atomic<int> same_{0}, different_{0};
};
using CudaCopyInPlaceCreator = Creator<CudaCopyInPlace>;
KILN_REGISTER_PLUGIN(CudaCopyInPlaceCreator);

std::shared_ptr<Engine> build_cuda(Network& net, const OptimizationProfile* profile, bool time_tactics,
                                   std::vector<uint8_t>* bytes_out = nullptr) {
  BuilderConfig config;
  config.device = DeviceType::kCUDA;
  config.time_tactics = time_tactics;
  if (profile) config.profiles.push_back(*profile);
  const auto bytes = Builder().build_serialized(net, config);
  if (bytes_out) *bytes_out = bytes;
  return Runtime().deserialize(bytes.data(), bytes.size(), "authoring cuda test");
}
#endif

#define SKIP_WITHOUT_CUDA()                            \
  do {                                                 \
    std::string why;                                   \
    if (!test::cuda_usable(&why)) GTEST_SKIP() << why; \
  } while (0)

TEST(CudaPluginAuthoring, ShapeInputsFeedOutputDimsWithGraphsAtEachShape) {
  SKIP_WITHOUT_CUDA();
#ifdef KILN_TEST_CUDA
  // x [N, 6] -> target = [2 * Shape(x)[0], 3] -> y [2N, 3], on CUDA.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 6});
  Tensor* shape = net.add_shape(x)->output(0);
  Tensor* zero = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {0}), "zero")->output(0);
  Tensor* n = net.add_gather(shape, zero, 0)->output(0);
  Tensor* two = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {2}), "two")->output(0);
  Tensor* rows = net.add_elementwise(n, two, ElementWiseOp::kProd)->output(0);
  Tensor* three =
      net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {3}), "three")->output(0);
  Tensor* target = net.add_concatenation({rows, three}, 0)->output(0);
  Layer* l = add_plugin(net, {x, target}, CudaReshapeTo(), "reshape_to");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 6}, Dims{2, 6}, Dims{4, 6});
  auto engine = build_cuda(net, &p, false);
  Backend& backend = get_backend(DeviceType::kCUDA);
  test::DeviceTensors mem(backend);
  void* x_dev = mem.alloc(4 * 6 * sizeof(float));
  void* y_dev = mem.alloc(4 * 6 * sizeof(float));
  auto ctx = engine->create_execution_context();
  ctx->set_tensor_address("x", x_dev);
  ctx->set_tensor_address("y", y_dev);
  for (int round = 0; round < 3; ++round) {  // round 0: warm-up runs; later rounds capture and replay
    for (int64_t batch : {1, 3, 2, 4}) {
      std::vector<float> in(static_cast<size_t>(batch * 6)), out(in.size(), -1.0f);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f + static_cast<float>(round);
      ctx->set_input_shape("x", Dims{batch, 6});
      ASSERT_EQ(ctx->tensor_shape("y"), (Dims{2 * batch, 3})) << "batch " << batch;
      backend.copy_host_to_device(x_dev, in.data(), in.size() * sizeof(float), nullptr);
      ctx->execute();
      backend.copy_device_to_host(out.data(), y_dev, out.size() * sizeof(float), nullptr);
      ASSERT_EQ(out, in) << "round " << round << ", batch " << batch;
    }
  }
  EXPECT_GT(ctx->stats().graph_replays, 0u) << "the CUDA engine never replayed a graph";
#endif
}

TEST(CudaPluginAuthoring, TheBuilderTimesTacticsOnTheDeviceAndKeepsTheFastest) {
  SKIP_WITHOUT_CUDA();
#ifdef KILN_TEST_CUDA
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{256, 1024});
  Layer* l = add_plugin(net, {x}, CudaTwoWays(), "two_ways");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  std::vector<uint8_t> bytes;
  auto engine = build_cuda(net, nullptr, true, &bytes);
  const EngineData data = engine_deserialize(bytes.data(), bytes.size(), "two ways");
  const Layer* stored = data.network->find_layer("two_ways");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->attrs().get_string("plugin_tactic", ""), "fast") << "the engine keeps the fastest implementation";
  Backend& backend = get_backend(DeviceType::kCUDA);
  test::DeviceTensors mem(backend);
  HostTensor in(DataType::kFloat32, Dims{256, 1024});
  for (int64_t i = 0; i < in.count(); ++i) in.as<float>()[i] = static_cast<float>(i % 1000) * 0.25f;
  void* x_dev = mem.upload(in);
  void* y_dev = mem.alloc(in.nbytes());
  auto ctx = engine->create_execution_context();
  ctx->set_tensor_address("x", x_dev);
  ctx->set_tensor_address("y", y_dev);
  CudaTwoWays::fast_set_ = 0;
  CudaTwoWays::slow_runs_ = 0;
  for (int i = 0; i < 5; ++i) ctx->execute();
  HostTensor out(DataType::kFloat32, in.dims());
  backend.copy_device_to_host(out.data(), y_dev, out.nbytes(), nullptr);
  for (int64_t i = 0; i < in.count(); ++i) ASSERT_EQ(out.as<float>()[i], in.as<float>()[i]) << "element " << i;
  EXPECT_GE(CudaTwoWays::fast_set_.load(), 1) << "the context's plugin object was not told the fast tactic";
  EXPECT_EQ(CudaTwoWays::slow_runs_.load(), 0) << "the slow tactic ran in the engine";
#endif
}

TEST(CudaPluginAuthoring, AFailingEnqueuesMessageNamesTheLayer) {
  SKIP_WITHOUT_CUDA();
#ifdef KILN_TEST_CUDA
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{4, 8});
  Layer* l = add_plugin(net, {x}, CudaFailing(), "sorted_lookup");
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  auto engine = build_cuda(net, nullptr, false);
  Backend& backend = get_backend(DeviceType::kCUDA);
  test::DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  ctx->set_tensor_address("x", mem.alloc(128));
  ctx->set_tensor_address("y", mem.alloc(128));
  for (int i = 0; i < 2; ++i) {  // the warm-up call, then the call that would capture
    std::string err;
    try {
      ctx->execute();
    } catch (const std::exception& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("sorted_lookup"), std::string::npos) << "call " << i << ": " << err;
    EXPECT_NE(err.find("the indices must be sorted"), std::string::npos) << "call " << i << ": " << err;
  }
#endif
}

TEST(CudaPluginAuthoring, InPlaceOutputsShareTheirInputsDeviceMemory) {
  SKIP_WITHOUT_CUDA();
#ifdef KILN_TEST_CUDA
  // x -> relu -> copy-in-place -> relu -> y: the plugin's input dies at the plugin.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{4, 256});
  Tensor* a = net.add_activation(x, ActivationType::kRelu)->output(0);
  Tensor* b = add_plugin(net, {a}, CudaCopyInPlace(), "copy")->output(0);
  Tensor* y = net.add_unary(b, UnaryOp::kNeg)->output(0);
  y->set_name("y");
  net.mark_output(y);
  auto engine = build_cuda(net, nullptr, false);
  Backend& backend = get_backend(DeviceType::kCUDA);
  test::DeviceTensors mem(backend);
  HostTensor in(DataType::kFloat32, Dims{4, 256});
  for (int64_t i = 0; i < in.count(); ++i) in.as<float>()[i] = static_cast<float>(i % 9) - 4.0f;
  void* x_dev = mem.upload(in);
  void* y_dev = mem.alloc(in.nbytes());
  auto ctx = engine->create_execution_context();
  ctx->set_tensor_address("x", x_dev);
  ctx->set_tensor_address("y", y_dev);
  CudaCopyInPlace::same_ = 0;
  CudaCopyInPlace::different_ = 0;
  for (int i = 0; i < 3; ++i) ctx->execute();  // plain, capture, replay
  HostTensor out(DataType::kFloat32, in.dims());
  backend.copy_device_to_host(out.data(), y_dev, out.nbytes(), nullptr);
  for (int64_t i = 0; i < in.count(); ++i) ASSERT_EQ(out.as<float>()[i], -std::max(in.as<float>()[i], 0.0f)) << i;
  EXPECT_GE(CudaCopyInPlace::same_.load(), 1);
  EXPECT_EQ(CudaCopyInPlace::different_.load(), 0);
#endif
}

}  // namespace
}  // namespace kiln
