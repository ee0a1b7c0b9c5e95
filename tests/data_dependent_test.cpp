// Data-dependent output sizes: NonZero (a built-in layer), the layers after it whose shapes follow
// the count (including one that needs more memory than the upper-bound plan gave it), a plugin
// that declares a size tensor, folding of a NonZero of a constant, and the CUDA-graph refusal.
// Each network runs on every usable device (the CPU always; CUDA on a GPU machine) several times
// in one context with different counts, against results computed here from the inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/plugin.h"
#include "kiln/runtime.h"
#include "src/backends/backend.h"
#include "tests/data_dependent_io.h"

namespace kiln {
namespace {

using test::build;
using test::Io;
using test::usable_devices;

HostTensor float_tensor(const Dims& dims, const std::vector<float>& v) {
  HostTensor t(DataType::kFloat32, dims);
  std::copy(v.begin(), v.end(), t.as<float>());
  return t;
}

// Values with about `zero_share` of them exactly zero (and some -0.0, which NonZero treats as zero).
std::vector<float> sparse_values(int64_t n, double zero_share, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_real_distribution<double> p(0.0, 1.0);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = p(rng) < zero_share ? (p(rng) < 0.5 ? 0.0f : -0.0f) : u(rng);
  return v;
}

TEST(DataDependent, NonZeroCoordinatesFollowEachInput) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 7});
  Layer* nz = net.add_layer(kLayerNonZero, {x}, 2, {}, "nz");
  nz->output(0)->set_name("coords");
  net.mark_output(nz->output(0));
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1, 7}, Dims{3, 7}, Dims{4, 7});
  std::mt19937 rng(7);
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = build(net, device, &profile);
    EXPECT_EQ(engine->io_tensor("coords").dims, (Dims{2, kDynamic}));
    auto ctx = engine->create_execution_context();
    for (int round = 0; round < 6; ++round) {
      const int64_t rows = 1 + round % 4;
      const double share = round == 0 ? 1.0 : round == 1 ? 0.0 : 0.2 * round;
      const auto v = sparse_values(rows * 7, share, rng);
      Io io(*engine, *ctx);
      io.input("x", float_tensor(Dims{rows, 7}, v));
      EXPECT_EQ(ctx->max_tensor_shape("coords"), (Dims{2, rows * 7}));
      io.output("coords");
      ctx->execute();
      std::vector<int64_t> r, c;
      for (int64_t i = 0; i < rows * 7; ++i) {
        if (v[static_cast<size_t>(i)] != 0.0f) {
          r.push_back(i / 7);
          c.push_back(i % 7);
        }
      }
      const auto count = static_cast<int64_t>(r.size());
      const HostTensor out = io.read("coords");
      ASSERT_EQ(out.dims(), (Dims{2, count})) << "round " << round;
      for (int64_t k = 0; k < count; ++k) {
        EXPECT_EQ(out.as<int64_t>()[k], r[static_cast<size_t>(k)]) << "row of non-zero " << k;
        EXPECT_EQ(out.as<int64_t>()[count + k], c[static_cast<size_t>(k)]) << "column of non-zero " << k;
      }
    }
  }
}

// x [n] -> NonZero -> [1, count] -> reshape [count] -> Gather(x) (the non-zero values), and a
// branch whose size *grows* as the count shrinks: ones(n - count) summed. At the upper bound
// (count = n) that tensor is empty, so the plan gives it no memory; the runtime must give it
// its own buffer once the count is known.
TEST(DataDependent, LaterShapesFollowTheCountAndMayOutgrowThePlan) {
  constexpr int64_t kN = 5000;  // > the host-evaluation limit, so the ones tensor is computed by a kernel
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kN});
  Tensor* coords = net.add_layer(kLayerNonZero, {x}, 2, {}, "nz")->output(0);
  Tensor* positions = net.add_shuffle(coords, {}, {-1}, {})->output(0);
  Tensor* values = net.add_gather(x, positions, 0)->output(0);
  values->set_name("values");
  net.mark_output(values);
  HostTensor n_value(DataType::kInt64, Dims{1});
  n_value.as<int64_t>()[0] = kN;
  Tensor* n = net.add_constant(n_value, "n")->output(0);
  Tensor* count = net.add_shape(positions)->output(0);
  Tensor* zeros = net.add_elementwise(n, count, ElementWiseOp::kSub)->output(0);
  Attributes fill;
  fill.set("mode", std::string("constant"));
  HostTensor one(DataType::kFloat32, Dims{1});
  one.as<float>()[0] = 1.0f;
  fill.set("value", one);
  Tensor* ones = net.add_layer(kLayerFill, {zeros}, 1, std::move(fill), "ones")->output(0);
  Tensor* total = net.add_reduce(ones, ReduceOp::kSum, {}, false)->output(0);
  total->set_name("zeros_counted");
  net.mark_output(total);
  std::mt19937 rng(11);
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = build(net, device);
    auto ctx = engine->create_execution_context();
    for (double share : {0.5, 0.0, 0.9, 1.0, 0.1}) {
      const auto v = sparse_values(kN, share, rng);
      Io io(*engine, *ctx);
      io.input("x", float_tensor(Dims{kN}, v));
      io.output("values");
      io.output("zeros_counted");
      ctx->execute();
      std::vector<float> expected;
      for (float f : v) {
        if (f != 0.0f) expected.push_back(f);
      }
      const HostTensor got = io.read("values");
      ASSERT_EQ(got.dims(), (Dims{static_cast<int64_t>(expected.size())})) << "zero share " << share;
      for (size_t k = 0; k < expected.size(); ++k) ASSERT_EQ(got.as<float>()[k], expected[k]) << k;
      const HostTensor zc = io.read("zeros_counted");
      EXPECT_EQ(zc.as<float>()[0], static_cast<float>(kN - static_cast<int64_t>(expected.size())));
    }
  }
}

TEST(DataDependent, NonZeroOfAConstantIsFoldedWithExactDims) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{3});
  Tensor* c = net.add_constant(float_tensor(Dims{2, 3}, {0, 1, 0, 2, 0, 3}), "c")->output(0);
  Tensor* coords = net.add_layer(kLayerNonZero, {c}, 2, {}, "nz")->output(0);
  Tensor* as_float = net.add_cast(coords, DataType::kFloat32)->output(0);
  Tensor* y = net.add_elementwise(as_float, x, ElementWiseOp::kSum)->output(0);
  y->set_name("y");
  net.mark_output(y);
  auto engine = build(net, DeviceType::kCPU);
  EXPECT_EQ(engine->io_tensor("y").dims, (Dims{2, 3}));
  auto ctx = engine->create_execution_context();
  Io io(*engine, *ctx);
  io.input("x", float_tensor(Dims{3}, {10, 20, 30}));
  io.output("y");
  ctx->execute();
  const HostTensor out = io.read("y");
  const std::vector<float> expected{10, 21, 31, 11, 20, 32};  // rows {0,1,1}, columns {1,0,2}
  ASSERT_EQ(out.dims(), (Dims{2, 3}));
  for (size_t k = 0; k < expected.size(); ++k) EXPECT_EQ(out.as<float>()[k], expected[k]) << k;
}

// A plugin with a data-dependent output: the positive elements of x, compactly, and their count
// in its size output (output 1).
class KeepPositive : public Plugin {
 public:
  std::string type() const override { return "Kiln_Test_KeepPositive"; }
  int num_outputs() const override { return 2; }
  std::vector<DataType> output_types(const std::vector<DataType>&) const override {
    return {DataType::kFloat32, DataType::kInt64};
  }
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    (void)inputs;
    if (index == 1) return DimsExprs{};
    return DimsExprs{{exprs.size_tensor(1, upper_bound_)}};
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int, int) const override {
    return io[static_cast<size_t>(pos)].format == TensorFormat::kLinear &&
           io[static_cast<size_t>(pos)].type == (pos == 2 ? DataType::kInt64 : DataType::kFloat32);
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void*, const PluginExecContext&) override {
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    int64_t count = 0;
    for (int64_t i = 0; i < in[0].dims.volume(); ++i) {
      if (x[i] <= 0) continue;
      if (count < upper_bound_) y[count] = x[i];  // never past the buffer, even when the bound is wrong
      ++count;
    }
    *static_cast<int64_t*>(outputs[1]) = count;
    return 0;
  }
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<KeepPositive>(*this); }
  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::int64("upper_bound", {upper_bound_}));
    return f;
  }
  int64_t upper_bound_ = 0;
};

class KeepPositiveCreator : public PluginCreator {
 public:
  std::string name() const override { return "Kiln_Test_KeepPositive"; }
  std::vector<PluginFieldSpec> field_schema() const override {
    PluginFieldSpec s;
    s.name = "upper_bound";
    s.type = PluginFieldType::kInt64;
    s.required = true;
    return {s};
  }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection& fields) const override {
    auto p = std::make_unique<KeepPositive>();
    p->upper_bound_ = fields.get_int64("upper_bound");
    return p;
  }
};

TEST(DataDependent, PluginSizeTensorGivesLaterLayersTheActualDims) {
  if (!PluginRegistry::instance().find("Kiln_Test_KeepPositive")) {
    PluginRegistry::instance().register_creator(std::make_unique<KeepPositiveCreator>());
  }
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{64});
  KeepPositive plugin;
  plugin.upper_bound_ = 64;
  Tensor* kept = add_plugin(net, {x}, plugin, "keep")->output(0);
  Tensor* y = net.add_unary(kept, UnaryOp::kNeg)->output(0);
  y->set_name("y");
  net.mark_output(y);
  BuilderConfig config;
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "keep_positive");  // a round trip
  EXPECT_EQ(engine->io_tensor("y").dims, (Dims{kDynamic}));
  auto ctx = engine->create_execution_context();
  std::mt19937 rng(3);
  for (int round = 0; round < 4; ++round) {
    std::vector<float> v(64);
    std::uniform_real_distribution<float> u(-1.0f, round == 3 ? -0.5f : 1.0f);  // round 3: none positive
    for (auto& f : v) f = u(rng);
    Io io(*engine, *ctx);
    io.input("x", float_tensor(Dims{64}, v));
    io.output("y");
    ctx->execute();
    std::vector<float> expected;
    for (float f : v) {
      if (f > 0) expected.push_back(-f);
    }
    const HostTensor got = io.read("y");
    ASSERT_EQ(got.dims(), (Dims{static_cast<int64_t>(expected.size())}));
    for (size_t k = 0; k < expected.size(); ++k) EXPECT_EQ(got.as<float>()[k], expected[k]);
  }
}

TEST(DataDependent, SizeBeyondTheDeclaredBoundIsAClearError) {
  if (!PluginRegistry::instance().find("Kiln_Test_KeepPositive")) {
    PluginRegistry::instance().register_creator(std::make_unique<KeepPositiveCreator>());
  }
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{16});
  KeepPositive plugin;
  plugin.upper_bound_ = 4;  // wrong: up to 16 elements can be positive
  Tensor* kept = add_plugin(net, {x}, plugin, "keep")->output(0);
  Tensor* y = net.add_unary(kept, UnaryOp::kNeg)->output(0);
  y->set_name("y");
  net.mark_output(y);
  auto engine = build(net, DeviceType::kCPU);
  auto ctx = engine->create_execution_context();
  Io io(*engine, *ctx);
  std::vector<float> v(16, -1.0f);
  for (int i = 0; i < 4; ++i) v[static_cast<size_t>(i)] = 1.0f;
  v[4] = 1.0f;  // 5 positives, bound 4
  io.input("x", float_tensor(Dims{16}, v));
  io.output("y");
  try {
    ctx->execute();
    FAIL() << "a size above the upper bound must fail";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("keep"), std::string::npos) << msg;
    EXPECT_NE(msg.find("outside [0, 4]"), std::string::npos) << msg;
  }
}

TEST(DataDependent, CudaGraphCaptureIsRefusedWithTheLayerName) {
  const auto devices = usable_devices();
  if (std::find(devices.begin(), devices.end(), DeviceType::kCUDA) == devices.end()) {
    GTEST_SKIP() << "no usable CUDA device";
  }
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{8});
  Layer* nz = net.add_layer(kLayerNonZero, {x}, 2, {}, "find_nonzero");
  nz->output(0)->set_name("coords");
  net.mark_output(nz->output(0));
  auto engine = build(net, DeviceType::kCUDA);
  auto ctx = engine->create_execution_context();
  Io io(*engine, *ctx);
  io.input("x", float_tensor(Dims{8}, {0, 1, 0, 1, 0, 1, 0, 1}));
  io.output("coords");
  ctx->set_graph_capture(true);
  try {
    ctx->enqueue(nullptr);
    FAIL() << "graph capture of a data-dependent engine must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("find_nonzero"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
