// Tests of the builder's fp16 precision pass and the layout (channels-last) pass.
// Precision: on the CPU the reference kernels take fp16, so an fp16 build of conv -> relu ->
// pool -> conv must keep fp32 inputs/outputs, run the layers in fp16 with casts only at the
// edges, store the weights as fp16 and match the fp32 engine within fp16 accuracy; a layer whose
// precision is pinned to fp32 stays fp32 with casts around it. Layout: the pass, asked for a
// CUDA engine (the CUDA kernels' supports() run on any machine of a CUDA build), makes a chain of
// fp16 convolutions channels-last with Reformat layers only at the chain's ends and leaves fp32
// networks linear.
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <random>

#include "kiln/kiln.h"
#include "src/backends/kernel.h"
#include "src/builder/passes/passes.h"
#include "src/core/half.h"

namespace kiln {
namespace {

HostTensor random(DataType type, const Dims& dims, uint32_t seed, float scale = 0.5f) {
  HostTensor t(DataType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.count(); ++i) t.as<float>()[i] = u(rng);
  if (type == DataType::kFloat32) return t;
  HostTensor h(DataType::kFloat16, dims);
  for (int64_t i = 0; i < t.count(); ++i) h.as<half>()[i] = half(t.as<float>()[i]);
  return h;
}

// conv3x3(8->16) -> relu -> maxpool 2x2 -> conv1x1(16->4), input [1, 8, 12, 12].
std::unique_ptr<Network> small_cnn(DataType type, Layer** relu_out = nullptr) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", type, Dims{1, 8, 12, 12});
  ConvolutionDesc c1;
  c1.num_output_maps = 16;
  c1.kernel = {3, 3};
  c1.pads_begin = {1, 1};
  c1.pads_end = {1, 1};
  Layer* conv1 = net->add_convolution(x, c1, random(type, Dims{16, 8, 3, 3}, 1), random(type, Dims{16}, 2));
  Layer* relu = net->add_activation(conv1->output(0), ActivationType::kRelu);
  if (relu_out) *relu_out = relu;
  PoolingDesc p;
  p.kernel = {2, 2};
  p.strides = {2, 2};
  Layer* pool = net->add_pooling(relu->output(0), p);
  ConvolutionDesc c2;
  c2.num_output_maps = 4;
  c2.kernel = {1, 1};
  Layer* conv2 =
      net->add_convolution(pool->output(0), c2, random(type, Dims{4, 16, 1, 1}, 3), random(type, Dims{4}, 4));
  conv2->output(0)->set_name("y");
  net->mark_output(conv2->output(0));
  return net;
}

HostTensor run(const std::vector<uint8_t>& bytes, const HostTensor& x) {
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  HostTensor y(engine->io_tensor("y").type, ctx->tensor_shape("y"));
  ctx->set_tensor_address("x", const_cast<void*>(x.data()));
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  return y;
}

TEST(PrecisionPass, Fp16BuildKeepsIoTypesAndMatchesFp32) {
  auto net = small_cnn(DataType::kFloat32);
  BuilderConfig fp32;
  fp32.disabled_passes = {"activation_fusion"};  // keep layers separate so every one is checked
  BuilderConfig fp16 = fp32;
  fp16.fp16 = true;
  BuildReport report;
  const auto b32 = Builder().build_serialized(*net, fp32);
  const auto b16 = Builder().build_serialized(*net, fp16, &report);
  auto engine = Runtime().deserialize(b16.data(), b16.size());
  EXPECT_EQ(engine->io_tensor("x").type, DataType::kFloat32);
  EXPECT_EQ(engine->io_tensor("y").type, DataType::kFloat32);
  const std::string text = engine->describe();
  // One cast in, one cast out, every compute layer in fp16.
  size_t casts = 0;
  for (size_t at = text.find(": Cast"); at != std::string::npos; at = text.find(": Cast", at + 1)) ++casts;
  EXPECT_EQ(casts, 2u) << text;
  for (const char* layer : {"Convolution", "Activation", "Pooling"}) {
    const size_t at = text.find(std::string(": ") + layer);
    ASSERT_NE(at, std::string::npos) << text;
    const size_t out = text.find("out: ", at);
    EXPECT_NE(text.substr(out, text.find('\n', out) - out).find("float16"), std::string::npos)
        << layer << " should run in float16:\n"
        << text;
  }
  bool weights_fp16 = false;
  for (const auto& line : report.pass_log)
    weights_fp16 = weights_fp16 || line.find("stored as float16") != std::string::npos;
  EXPECT_TRUE(weights_fp16);
  const HostTensor x = random(DataType::kFloat32, Dims{1, 8, 12, 12}, 9, 1.0f);
  const HostTensor y32 = run(b32, x), y16 = run(b16, x);
  ASSERT_EQ(y16.type(), DataType::kFloat32);
  double maxref = 0, maxerr = 0;
  for (int64_t i = 0; i < y32.count(); ++i) {
    maxref = std::max(maxref, static_cast<double>(std::fabs(y32.as<float>()[i])));
    maxerr = std::max(maxerr, static_cast<double>(std::fabs(y32.as<float>()[i] - y16.as<float>()[i])));
  }
  EXPECT_GT(maxerr, 0.0) << "the fp16 engine gave bit-identical results: did it run in fp16?";
  EXPECT_LT(maxerr, 1e-2 * std::max(1.0, maxref));
}

TEST(PrecisionPass, PinnedFp32LayerGetsCastsAround) {
  Layer* relu = nullptr;
  auto net = small_cnn(DataType::kFloat32, &relu);
  relu->set_precision(DataType::kFloat32);
  BuilderConfig config;
  config.fp16 = true;
  config.disabled_passes = {"activation_fusion"};
  const auto bytes = Builder().build_serialized(*net, config);
  const std::string text = Runtime().deserialize(bytes.data(), bytes.size())->describe();
  size_t casts = 0;
  for (size_t at = text.find(": Cast"); at != std::string::npos; at = text.find(": Cast", at + 1)) ++casts;
  EXPECT_EQ(casts, 4u) << "input, around the pinned relu (2), output:\n" << text;
  const size_t at = text.find(": Activation");
  const size_t out = text.find("out: ", at);
  EXPECT_NE(text.substr(out, text.find('\n', out) - out).find("float32"), std::string::npos) << text;
}

// A float32 constant beyond float16's range (an attention mask of float32's lowest value) is
// clamped to +-65504 when stored as float16, not rounded to infinity; the build log says so.
TEST(PrecisionPass, Fp16ConstantsBeyondRangeAreClampedNotInfinite) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{4});
  HostTensor mask(DataType::kFloat32, Dims{4});
  const float lowest = std::numeric_limits<float>::lowest();
  const float values[4] = {lowest, -1e5f, 7e4f, 2.5f};
  for (int i = 0; i < 4; ++i) mask.as<float>()[i] = values[i];
  Layer* c = net->add_constant(mask, "mask");
  Layer* add = net->add_elementwise(x, c->output(0), ElementWiseOp::kSum);
  add->output(0)->set_name("y");
  net->mark_output(add->output(0));
  BuilderConfig config;
  config.fp16 = true;
  BuildReport report;
  const auto bytes = Builder().build_serialized(*net, config, &report);
  bool logged = false;
  for (const auto& line : report.pass_log) {
    logged = logged || line.find("3 value(s) beyond float16's range clamped to +-65504") != std::string::npos;
  }
  EXPECT_TRUE(logged);
  HostTensor in(DataType::kFloat32, Dims{4});
  for (int i = 0; i < 4; ++i) in.as<float>()[i] = 1.0f;
  const HostTensor y = run(bytes, in);
  ASSERT_EQ(y.type(), DataType::kFloat32);
  // -65504 + 1 and 65504 + 1 round back to +-65504 in float16; 2.5 + 1 is exact.
  EXPECT_EQ(y.as<float>()[0], -65504.0f);
  EXPECT_EQ(y.as<float>()[1], -65504.0f);
  EXPECT_EQ(y.as<float>()[2], 65504.0f);
  EXPECT_EQ(y.as<float>()[3], 3.5f);
}

TEST(PrecisionPass, NoOpWithoutFp16) {
  auto net = small_cnn(DataType::kFloat32);
  BuilderConfig config;
  std::vector<std::string> log;
  PassContext ctx{config, {}, &log};
  EXPECT_EQ(pass_fp16_precision(*net, ctx), 0);
}

bool cuda_kernels_compiled() { return !KernelRegistry::instance().find(DeviceType::kCUDA, kLayerConvolution).empty(); }

int count_type(const Network& net, const std::string& type) {
  int n = 0;
  for (int i = 0; i < net.num_layers(); ++i) n += net.layer(i)->type() == type;
  return n;
}

TEST(LayoutPass, Fp16ConvChainRunsChannelsLastWithReformatsAtTheEnds) {
  if (!cuda_kernels_compiled()) GTEST_SKIP() << "kiln was built without the CUDA backend";
  auto net = small_cnn(DataType::kFloat16);
  BuilderConfig config;
  config.device = DeviceType::kCUDA;
  std::vector<std::string> log;
  PassContext ctx{config, {{{"x", Dims{1, 8, 12, 12}}}}, &log};
  EXPECT_GT(pass_layout(*net, ctx), 0);
  net->validate();
  EXPECT_EQ(count_type(*net, kLayerReformat), 2) << "one in, one out";
  for (int i = 0; i < net->num_layers(); ++i) {
    const Layer* l = net->layer(i);
    if (l->type() == kLayerConvolution || l->type() == kLayerActivation || l->type() == kLayerPooling) {
      EXPECT_EQ(l->input(0)->format(), TensorFormat::kChannelsLast) << l->name();
      EXPECT_EQ(l->output(0)->format(), TensorFormat::kChannelsLast) << l->name();
    }
  }
  ASSERT_NE(net->find_tensor("y"), nullptr);
  EXPECT_TRUE(net->find_tensor("y")->is_network_output());
  EXPECT_EQ(net->find_tensor("y")->format(), TensorFormat::kLinear);
  EXPECT_EQ(net->find_tensor("y")->producer()->type(), kLayerReformat);
}

TEST(LayoutPass, Fp32NetworksAndCpuEnginesStayLinear) {
  if (!cuda_kernels_compiled()) GTEST_SKIP() << "kiln was built without the CUDA backend";
  for (DeviceType device : {DeviceType::kCUDA, DeviceType::kCPU}) {
    auto net = small_cnn(device == DeviceType::kCUDA ? DataType::kFloat32 : DataType::kFloat16);
    BuilderConfig config;
    config.device = device;
    PassContext ctx{config, {{{"x", Dims{1, 8, 12, 12}}}}, nullptr};
    EXPECT_EQ(pass_layout(*net, ctx), 0);
    EXPECT_EQ(count_type(*net, kLayerReformat), 0);
  }
}

}  // namespace
}  // namespace kiln
