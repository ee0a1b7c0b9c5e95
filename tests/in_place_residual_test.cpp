// In-place kernel outputs (KernelEntry::in_place_input). A CPU convolution that adds a residual
// input writes its output over the residual's buffer when nothing later reads the residual, so
// the residual is never copied. Checked end to end on a ResNet-like block built through the
// public API: the planner's verbose decision names the layer, the results equal the same network
// built without the residual fusion (a separate Add), across batch sizes of a dynamic profile;
// where a later layer still reads the residual, the output gets its own buffer (and the reason
// is logged) and the results stay right. Activations ("avx2") write over their input, except
// next to an elided reshape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "src/backends/kernel.h"
#include "tests/log_capture.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

constexpr int64_t kC = 32;

// conv b's kernel size and the image size, which pick its CPU kernel (on an AVX2 machine).
struct Shape {
  int64_t kernel_b, hw;
  std::string tactic;
};

// Collects the planner's verbose in-place messages; take() gives those since the last call, one per line.
class InPlaceLog {
 public:
  std::string take() {
    std::string text;
    for (const std::string& m : capture_.take()) text += m + "\n";
    return text;
  }

 private:
  test::LogCapture capture_{Severity::kVerbose, "in-place outputs sharing"};
};

HostTensor weights(int64_t k, int64_t c, int64_t kernel, uint64_t seed) {
  return test::random_tensor(DataType::kFloat32, Dims{k, c, kernel, kernel}, seed, -0.2, 0.2);
}

// x -> conv a (3x3, relu) -> conv m (3x3, relu) -> conv b (3x3) -> relu(b + a) -> conv y (1x1): a
// ResNet block, whose residual a is last read by the fused conv b. With `a_read_later`, a
// 1x1 convolution of a after that (y2 = y + conv(a)), so the residual lives on.
std::shared_ptr<Engine> block(const Shape& shape, bool fuse, bool a_read_later) {
  const int64_t hw = shape.hw;
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, kC, hw, hw});
  ConvolutionDesc same;
  same.num_output_maps = kC;
  same.kernel = {3, 3};
  same.pads_begin = same.pads_end = {1, 1};
  Layer* ca = net.add_convolution(x, same, weights(kC, kC, 3, 1), test::random_tensor(DataType::kFloat32, Dims{kC}, 2));
  ca->set_name("conv_a");
  Tensor* a = net.add_activation(ca->output(0), ActivationType::kRelu)->output(0);
  Layer* cm = net.add_convolution(a, same, weights(kC, kC, 3, 7), test::random_tensor(DataType::kFloat32, Dims{kC}, 8));
  Tensor* m = net.add_activation(cm->output(0), ActivationType::kRelu)->output(0);
  ConvolutionDesc b_desc = same;
  b_desc.kernel = {shape.kernel_b, shape.kernel_b};
  b_desc.pads_begin = b_desc.pads_end = {shape.kernel_b / 2, shape.kernel_b / 2};
  Layer* cb = net.add_convolution(m, b_desc, weights(kC, kC, shape.kernel_b, 3),
                                  test::random_tensor(DataType::kFloat32, Dims{kC}, 4));
  cb->set_name("conv_b");
  Tensor* sum = net.add_elementwise(cb->output(0), a, ElementWiseOp::kSum)->output(0);
  Tensor* r = net.add_activation(sum, ActivationType::kRelu)->output(0);
  ConvolutionDesc pointwise;
  pointwise.num_output_maps = 16;
  pointwise.kernel = {1, 1};
  Layer* cy = net.add_convolution(r, pointwise, weights(16, kC, 1, 5));
  cy->output(0)->set_name("y");
  net.mark_output(cy->output(0));
  if (a_read_later) {
    Layer* c2 = net.add_convolution(a, pointwise, weights(16, kC, 1, 6));
    Tensor* y2 = net.add_elementwise(cy->output(0), c2->output(0), ElementWiseOp::kSum)->output(0);
    y2->set_name("y2");
    net.mark_output(y2);
  }
  BuilderConfig config;
  config.num_threads = 2;
  config.time_tactics = false;  // the priority order: the kernels shapes() names (timing may differ)
  if (!fuse) config.disabled_passes = {"activation_fusion"};
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, kC, hw, hw}, Dims{2, kC, hw, hw}, Dims{4, kC, hw, hw});
  config.profiles = {p};
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), "residual block");
}

std::vector<float> run(Engine& engine, int64_t batch, const std::string& output) {
  const int64_t kHW = engine.io_tensor("x").dims[2];
  auto ctx = engine.create_execution_context();
  const HostTensor x = test::random_tensor(DataType::kFloat32, Dims{batch, kC, kHW, kHW}, 100 + batch);
  ctx->set_input_shape("x", x.dims());
  ctx->set_tensor_address("x", const_cast<void*>(x.data()));
  std::vector<std::vector<float>> outs;
  for (const TensorInfo& info : engine.io_tensors()) {
    const std::string& name = info.name;
    if (name == "x") continue;
    outs.emplace_back(static_cast<size_t>(ctx->tensor_shape(name).volume()), std::nanf(""));
    ctx->set_tensor_address(name, outs.back().data());
    if (name == output) std::swap(outs.front(), outs.back());
  }
  ctx->execute();
  return outs.front();
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << what << ", element " << i;
  }
}

// The kernels conv b gets: kiln's Winograd (3x3 on 14x14; oneDNN's with AVX-512), oneDNN's 1x1, kiln's indirect GEMM
// (3x3 on 7x7 images, too few tiles for Winograd at the profile's batch 2).
std::vector<Shape> shapes() {
  std::vector<Shape> r;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    // oneDNN's Winograd (priority above kiln's) where it has a kernel: AVX-512 machines.
    const bool onednn_winograd =
        __builtin_cpu_supports("avx512f") &&
        KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "onednn_winograd");
    r.push_back({3, 14, onednn_winograd ? "onednn_winograd" : "winograd_avx2"});
    r.push_back({3, 7, "igemm_avx2"});
  }
  // Builds without oneDNN (the sanitizer build) run the reference kernel, which writes no output
  // over an input.
  if (KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "onednn")) r.push_back({1, 14, "onednn"});
  if (r.empty()) ADD_FAILURE() << "no CPU convolution kernel that writes over its residual here";
  return r;
}

// Whether conv b runs `tactic`.
void expect_kernel(const Engine& engine, const std::string& tactic) {
  const std::string d = engine.describe();
  const size_t at = d.find("conv_b : Convolution");
  ASSERT_NE(at, std::string::npos) << d;
  EXPECT_NE(d.substr(at, d.find('\n', at) - at).find("kernel=" + tactic), std::string::npos) << d;
}

TEST(InPlaceResidual, TheConvolutionWritesOverItsResidual) {
  InPlaceLog log;
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE("conv b " + std::to_string(shape.kernel_b) + "x" + std::to_string(shape.kernel_b) + " on " +
                 std::to_string(shape.hw) + "x" + std::to_string(shape.hw));
    auto fused = block(shape, true, false);
    auto separate = block(shape, false, false);
    expect_kernel(*fused, shape.tactic);
    for (int64_t batch : {1, 3, 4}) {
      (void)log.take();
      const std::vector<float> got = run(*fused, batch, "y");
      const std::string decided = log.take();
      EXPECT_NE(decided.find("sharing their input's memory: 'conv_b' output 0"), std::string::npos) << decided;
      expect_close(got, run(*separate, batch, "y"), "batch " + std::to_string(batch));
    }
  }
}

TEST(InPlaceResidual, AResidualReadLaterKeepsItsBuffer) {
  InPlaceLog log;
  for (const Shape& shape : shapes()) {
    auto fused = block(shape, true, true);
    auto separate = block(shape, false, true);
    (void)log.take();
    const std::vector<float> got = run(*fused, 2, "y2");
    const std::string decided = log.take();
    EXPECT_NE(decided.find("with their own buffer: 'conv_b' output 0 (input"), std::string::npos) << decided;
    EXPECT_NE(decided.find("is read by a later layer"), std::string::npos) << decided;
    expect_close(got, run(*separate, 2, "y2"), "y2");
  }
}

// Activations write over their input too ("avx2" tactic), except where the input or the output
// shares its memory with an elided reshape: x -> relu a -> sigmoid b -> hard swish c -> reshape r
// -> SiLU y. b takes a's buffer; c does not take b's (c is the reshape's input, and the reshape's
// elision comes first).
TEST(InPlaceResidual, ActivationsWriteOverTheirInputExceptNextToAnElidedReshape) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 8, 6});
  Layer* la = net.add_activation(x, ActivationType::kRelu);
  la->set_name("a");
  Layer* lb = net.add_activation(la->output(0), ActivationType::kSigmoid);
  lb->set_name("b");
  Layer* lc = net.add_activation(lb->output(0), ActivationType::kHardSwish);
  lc->set_name("c");
  Layer* lr = net.add_shuffle(lc->output(0), {}, {2, 48}, {});
  lr->set_name("r");
  Layer* ly = net.add_activation(lr->output(0), ActivationType::kSilu);
  ly->output(0)->set_name("y");
  net.mark_output(ly->output(0));
  BuilderConfig config;
  config.disabled_passes = {"elementwise_fusion"};  // keep the activations as layers of their own
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "activations");
  InPlaceLog log;
  auto ctx = engine->create_execution_context();
  std::vector<float> in(96), out(96, std::nanf(""));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.5f;
  ctx->set_tensor_address("x", in.data());
  ctx->set_tensor_address("y", out.data());
  ctx->execute();
  const std::string decided = log.take();
  EXPECT_NE(decided.find("sharing their input's memory: 'b' output 0"), std::string::npos) << decided;
  EXPECT_NE(decided.find("'c' output 0 ('"), std::string::npos) << decided;
  EXPECT_NE(decided.find("shares its memory with an elided reshape"), std::string::npos) << decided;
  for (size_t i = 0; i < in.size(); ++i) {
    const double a = std::max(0.0, static_cast<double>(in[i]));
    const double b = 1.0 / (1.0 + std::exp(-a));
    const double c = b * std::min(1.0, std::max(0.0, b / 6.0 + 0.5));
    const double y = c / (1.0 + std::exp(-c));
    ASSERT_NEAR(out[i], y, 1e-6) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln
