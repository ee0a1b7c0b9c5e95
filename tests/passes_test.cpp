// Tests of the builder's graph passes (src/builder/passes) and of the FusedElementWise layer
// they create. Each pass test builds a small network with the public Network API, runs the pass
// on a clone, checks that the structure changed as intended, and then checks that the rewritten
// network computes the same outputs as the original: both are built WITHOUT the optimizer
// (BuilderConfig::disable_optimizations) and run on the same random inputs, so the comparison
// judges the pass alone. The last tests run the whole pipeline through the Builder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/runtime.h"
#include "op_harness.h"
#include "src/builder/passes/passes.h"
#include "src/core/tensor_io.h"
#include "src/ir/ops_fused.h"

namespace kiln {
namespace {

using PassFn = int (*)(Network&, PassContext&);
using Inputs = std::map<std::string, HostTensor>;
using ShapePoints = std::vector<std::map<std::string, Dims>>;

HostTensor rand_f(const Dims& dims, uint64_t seed, double low = -1.0, double high = 1.0) {
  return test::random_tensor(DataType::kFloat32, dims, seed, low, high);
}
HostTensor floats(const Dims& dims, const std::vector<float>& v) {
  return HostTensor::from_vector(DataType::kFloat32, dims, v);
}
HostTensor ints(const Dims& dims, const std::vector<int64_t>& v) {
  return HostTensor::from_vector(DataType::kInt64, dims, v);
}
Tensor* constant(Network& net, const HostTensor& value) { return net.add_constant(value)->output(0); }

int count_layers(const Network& net, const std::string& type) {
  int n = 0;
  for (int i = 0; i < net.num_layers(); ++i) n += net.layer(i)->type() == type ? 1 : 0;
  return n;
}
Layer* only_layer(const Network& net, const std::string& type) {
  Layer* found = nullptr;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i)->type() == type) {
      EXPECT_EQ(found, nullptr) << "more than one " << type << " layer";
      found = net.layer(i);
    }
  }
  EXPECT_NE(found, nullptr) << "no " << type << " layer";
  return found;
}
std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// Builds and runs a network; returns its outputs in network-output order.
std::vector<HostTensor> run_network(const Network& net, bool optimize, const Inputs& inputs,
                                    const std::vector<OptimizationProfile>& profiles = {},
                                    BuildReport* report = nullptr, int threads = 1) {
  BuilderConfig config;
  config.disable_optimizations = !optimize;
  config.profiles = profiles;
  config.num_threads = threads;
  const std::vector<uint8_t> bytes = Builder().build_serialized(net, config, report);
  std::shared_ptr<Engine> engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  for (const auto& [name, value] : inputs) {
    if (engine->io_tensor(name).dims.is_dynamic()) ctx->set_input_shape(name, value.dims());
    ctx->set_tensor_address(name, const_cast<void*>(value.data()));
  }
  std::vector<HostTensor> outputs;
  for (int i = 0; i < net.num_outputs(); ++i) {
    const std::string& name = net.output(i)->name();
    outputs.emplace_back(engine->io_tensor(name).type, ctx->tensor_shape(name));
    ctx->set_tensor_address(name, outputs.back().data());
  }
  ctx->execute();
  return outputs;
}

void expect_close(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected, double rtol = 1e-4,
                  double atol = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_EQ(actual[i].dims(), expected[i].dims()) << "output " << i;
    std::string message;
    EXPECT_TRUE(test::compare_tensors(actual[i], expected[i], rtol, atol, nullptr, &message))
        << "output " << i << ": " << message;
  }
}

// Checks that `after` (a rewritten clone) computes what `before` computes and keeps the outputs' names.
void expect_same_function(const Network& before, const Network& after, const Inputs& inputs,
                          const std::vector<OptimizationProfile>& profiles = {}) {
  ASSERT_EQ(before.num_outputs(), after.num_outputs());
  for (int i = 0; i < before.num_outputs(); ++i) EXPECT_EQ(before.output(i)->name(), after.output(i)->name());
  expect_close(run_network(after, false, inputs, profiles), run_network(before, false, inputs, profiles));
}

struct PassResult {
  std::unique_ptr<Network> net;
  std::vector<std::string> log;
  int changes = 0;
};

// Runs passes, in order, on a clone of `net`.
PassResult run_passes(const Network& net, const std::vector<PassFn>& passes, const ShapePoints& points = {}) {
  PassResult r;
  r.net = net.clone();
  BuilderConfig config;
  PassContext ctx{config, points, &r.log};
  for (PassFn pass : passes) r.changes += pass(*r.net, ctx);
  r.net->validate();
  return r;
}

ConvolutionDesc conv_desc(int64_t maps, int64_t k, int64_t pad) {
  ConvolutionDesc d;
  d.num_output_maps = maps;
  d.kernel = {k, k};
  d.pads_begin = {pad, pad};
  d.pads_end = {pad, pad};
  return d;
}

// ---- constant folding -----------------------------------------------------------------------

TEST(ConstantFolding, FoldsLayersWhoseInputsAreAllConstants) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {3, 2});
  Tensor* a = constant(net, rand_f({2, 3}, 1));
  Tensor* at = net.add_shuffle(a, {1, 0}, {}, {})->output(0);
  Tensor* s = net.add_elementwise(at, constant(net, rand_f({3, 2}, 2)), ElementWiseOp::kSum)->output(0);
  net.mark_output(net.add_elementwise(x, s, ElementWiseOp::kProd)->output(0));

  PassResult r = run_passes(net, {pass_constant_folding});
  EXPECT_EQ(r.changes, 2) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerShuffle), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 1);
  EXPECT_EQ(count_layers(*r.net, kLayerConstant), 1);  // the inputs of the folded layers are gone
  ASSERT_EQ(r.log.size(), 2u);
  EXPECT_NE(r.log[0].find("constant_folding: folded"), std::string::npos) << r.log[0];
  expect_same_function(net, *r.net, {{"x", rand_f({3, 2}, 3)}});
}

TEST(ConstantFolding, KeepsTheNameOfAFoldedNetworkOutput) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {4});
  Tensor* e = net.add_unary(constant(net, rand_f({4}, 4)), UnaryOp::kExp)->output(0);
  e->set_name("exp_out");
  net.mark_output(e);
  net.mark_output(net.add_activation(x, ActivationType::kRelu)->output(0));

  PassResult r = run_passes(net, {pass_constant_folding});
  EXPECT_EQ(r.changes, 1);
  Tensor* out = r.net->find_tensor("exp_out");
  ASSERT_NE(out, nullptr);
  EXPECT_TRUE(out->is_network_output());
  ASSERT_NE(out->producer(), nullptr);
  EXPECT_EQ(out->producer()->type(), kLayerConstant);
  EXPECT_EQ(count_layers(*r.net, kLayerUnary), 0);
  expect_same_function(net, *r.net, {{"x", rand_f({4}, 5)}});
}

// The exporters' flatten: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])).
Tensor* exporter_flatten(Network& net, Tensor* x) {
  Tensor* shape = net.add_shape(x)->output(0);
  Tensor* n = net.add_gather(shape, constant(net, ints({}, {0})), 0)->output(0);
  Attributes unsq;
  unsq.set("reshape_mode", std::string("unsqueeze"));
  unsq.set("axes", std::vector<int64_t>{0});
  Tensor* n1 = net.add_layer(kLayerShuffle, {n}, 1, unsq)->output(0);
  Tensor* dims = net.add_concatenation({n1, constant(net, ints({1}, {-1}))}, 0)->output(0);
  return net.add_shuffle_dynamic(x, dims)->output(0);
}

TEST(ConstantFolding, StaticModelsLoseTheirShapeArithmetic) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {2, 3, 4, 5});
  Tensor* flat = exporter_flatten(net, net.add_activation(x, ActivationType::kRelu)->output(0));
  net.mark_output(net.add_activation(flat, ActivationType::kTanh)->output(0));
  const ShapePoints points = {{{"x", Dims{2, 3, 4, 5}}}};

  PassResult r = run_passes(net, {pass_constant_folding, pass_dead_layer_elimination}, points);
  EXPECT_GT(r.changes, 0);
  EXPECT_EQ(count_layers(*r.net, kLayerShape), 0) << to_text(*r.net);
  EXPECT_EQ(count_layers(*r.net, kLayerGather), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerConcatenation), 0);
  Layer* reshape = only_layer(*r.net, kLayerShuffle);
  ASSERT_NE(reshape, nullptr);
  ASSERT_EQ(reshape->num_inputs(), 2);
  ASSERT_NE(reshape->input(1)->producer(), nullptr);
  EXPECT_EQ(reshape->input(1)->producer()->type(), kLayerConstant);
  expect_same_function(net, *r.net, {{"x", rand_f({2, 3, 4, 5}, 6)}});
}

TEST(ConstantFolding, DynamicBatchKeepsOnlyTheBatchDependentPart) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {kDynamic, 3, 4, 5});
  Tensor* shape = net.add_shape(x)->output(0);
  Tensor* n = net.add_gather(shape, constant(net, ints({1}, {0})), 0)->output(0);           // [N]
  Tensor* rest = net.add_gather(shape, constant(net, ints({3}, {1, 2, 3})), 0)->output(0);  // [3, 4, 5]
  Tensor* volume = net.add_reduce(rest, ReduceOp::kProd, {0}, true)->output(0);             // [60]
  Tensor* dims = net.add_concatenation({n, volume}, 0)->output(0);
  net.mark_output(net.add_shuffle_dynamic(x, dims)->output(0));
  OptimizationProfile profile;
  profile.set_dimensions("x", {1, 3, 4, 5}, {2, 3, 4, 5}, {4, 3, 4, 5});
  const ShapePoints points = {{{"x", Dims{2, 3, 4, 5}}}, {{"x", Dims{1, 3, 4, 5}}}, {{"x", Dims{4, 3, 4, 5}}}};

  PassResult r = run_passes(net, {pass_constant_folding, pass_dead_layer_elimination}, points);
  EXPECT_EQ(count_layers(*r.net, kLayerShape), 1) << to_text(*r.net);
  EXPECT_EQ(count_layers(*r.net, kLayerGather), 1);  // the batch
  EXPECT_EQ(count_layers(*r.net, kLayerReduce), 0);  // 3*4*5 is the same at every point
  EXPECT_EQ(count_layers(*r.net, kLayerConcatenation), 1);
  expect_same_function(net, *r.net, {{"x", rand_f({3, 3, 4, 5}, 7)}}, {profile});
}

TEST(ConstantFolding, LeavesOutputsOver64MiBAlone) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1});
  Tensor* big =
      net.add_layer(kLayerExpand, {constant(net, floats({1}, {1.0f})), constant(net, ints({2}, {4097, 4096}))}, 1)
          ->output(0);
  Tensor* total = net.add_reduce(big, ReduceOp::kSum, {}, false)->output(0);
  net.mark_output(net.add_elementwise(x, total, ElementWiseOp::kSum)->output(0));

  PassResult r = run_passes(net, {pass_constant_folding});
  EXPECT_EQ(count_layers(*r.net, kLayerExpand), 1);
  EXPECT_EQ(count_layers(*r.net, kLayerReduce), 1);
  EXPECT_EQ(r.changes, 0) << joined(r.log);
}

// ---- dead-layer elimination -----------------------------------------------------------------

TEST(DeadLayerElimination, RemovesDeadBranchesAndBypassesIdentities) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {2, 3});
  Tensor* a = net.add_activation(x, ActivationType::kRelu)->output(0);
  Tensor* dead = net.add_unary(a, UnaryOp::kExp)->output(0);
  net.add_unary(dead, UnaryOp::kNeg);
  Tensor* b = net.add_activation(net.add_identity(a)->output(0), ActivationType::kSigmoid)->output(0);
  Tensor* out = net.add_identity(b)->output(0);
  out->set_name("out");
  net.mark_output(out);
  Tensor* copy = net.add_identity(x)->output(0);  // a network input copied to an output: kept
  copy->set_name("x_copy");
  net.mark_output(copy);

  PassResult r = run_passes(net, {pass_dead_layer_elimination});
  EXPECT_EQ(r.changes, 4) << joined(r.log);  // two identities bypassed, exp and neg removed
  EXPECT_EQ(count_layers(*r.net, kLayerUnary), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerIdentity), 1);
  EXPECT_EQ(count_layers(*r.net, kLayerActivation), 2);
  ASSERT_NE(r.net->find_tensor("out"), nullptr);
  EXPECT_EQ(r.net->find_tensor("out")->producer()->type(), kLayerActivation);
  EXPECT_EQ(r.net->find_tensor(dead->name()), nullptr);  // unused tensors are gone too
  ASSERT_NE(r.net->find_tensor(a->name()), nullptr);     // a bypassed identity's input keeps its name
  EXPECT_EQ(r.net->find_tensor(a->name())->producer()->type(), kLayerActivation);
  expect_same_function(net, *r.net, {{"x", rand_f({2, 3}, 8)}});
}

// ---- Conv + BN folding ----------------------------------------------------------------------

TEST(ConvBnFolding, FoldsAChannelScale) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {2, 3, 8, 8});
  Layer* conv = net.add_convolution(x, conv_desc(4, 3, 1), rand_f({4, 3, 3, 3}, 9), rand_f({4}, 10));
  Layer* bn = net.add_scale(conv->output(0), ScaleMode::kChannel, rand_f({4}, 11), rand_f({4}, 12, 0.5, 2.0),
                            floats({4}, {1, 1, 1, 1}));
  net.mark_output(bn->output(0));

  PassResult r = run_passes(net, {pass_conv_bn_folding});
  EXPECT_EQ(r.changes, 1);
  EXPECT_EQ(count_layers(*r.net, kLayerScale), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerConstant), 2);  // new weights and bias; old ones dropped
  Layer* folded = only_layer(*r.net, kLayerConvolution);
  ASSERT_NE(folded, nullptr);
  EXPECT_EQ(folded->output(0)->name(), bn->output(0)->name());
  ASSERT_EQ(r.log.size(), 1u);
  EXPECT_EQ(r.log[0], "conv_bn_folding: folded '" + bn->name() + "' into '" + conv->name() + "'");
  expect_same_function(net, *r.net, {{"x", rand_f({2, 3, 8, 8}, 13)}});
}

TEST(ConvBnFolding, FoldsPerChannelConstantArithmetic) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1, 3, 7, 7});
  Tensor* c = net.add_convolution(x, conv_desc(4, 3, 0), rand_f({4, 3, 3, 3}, 14))->output(0);  // no bias
  c = net.add_elementwise(c, constant(net, rand_f({4, 1, 1}, 15)), ElementWiseOp::kProd)->output(0);
  c = net.add_elementwise(constant(net, rand_f({1, 4, 1, 1}, 16)), c, ElementWiseOp::kSum)->output(0);
  c = net.add_elementwise(c, constant(net, floats({}, {0.25f})), ElementWiseOp::kSub)->output(0);
  c = net.add_elementwise(c, constant(net, rand_f({4, 1, 1}, 17, 0.5, 2.0)), ElementWiseOp::kDiv)->output(0);
  net.mark_output(c);

  PassResult r = run_passes(net, {pass_conv_bn_folding});
  EXPECT_EQ(r.changes, 4) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 0);
  EXPECT_EQ(r.net->num_layers(), 3);  // conv, weights, bias
  expect_same_function(net, *r.net, {{"x", rand_f({1, 3, 7, 7}, 18)}});
}

TEST(ConvBnFolding, LeavesWhatItCannotFold) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1, 2, 5, 5});
  // Power 2 is not affine.
  Tensor* c1 = net.add_convolution(x, conv_desc(2, 1, 0), rand_f({2, 2, 1, 1}, 19))->output(0);
  net.mark_output(net.add_scale(c1, ScaleMode::kChannel, {}, rand_f({2}, 20), floats({2}, {2, 2}))->output(0));
  // The conv output is read twice.
  Tensor* c2 = net.add_convolution(x, conv_desc(2, 1, 0), rand_f({2, 2, 1, 1}, 21))->output(0);
  net.mark_output(net.add_scale(c2, ScaleMode::kChannel, rand_f({2}, 22), {}, {})->output(0));
  net.mark_output(net.add_activation(c2, ActivationType::kRelu)->output(0));
  // Per-element, not per-channel.
  Tensor* c3 = net.add_convolution(x, conv_desc(2, 1, 0), rand_f({2, 2, 1, 1}, 23))->output(0);
  net.mark_output(net.add_elementwise(c3, constant(net, rand_f({2, 5, 5}, 24)), ElementWiseOp::kProd)->output(0));
  // Not after a convolution's output channel axis (channel_axis 2).
  Tensor* c4 = net.add_convolution(x, conv_desc(5, 1, 0), rand_f({5, 2, 1, 1}, 25))->output(0);
  net.mark_output(net.add_scale(c4, ScaleMode::kChannel, rand_f({5}, 26), {}, {}, 2)->output(0));

  PassResult r = run_passes(net, {pass_conv_bn_folding});
  EXPECT_EQ(r.changes, 0) << joined(r.log);
  expect_same_function(net, *r.net, {{"x", rand_f({1, 2, 5, 5}, 27)}});
}

// ---- activation fusion ----------------------------------------------------------------------

TEST(ActivationFusion, PutsActivationsOnConvDeconvAndGemm) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1, 3, 6, 6});
  Layer* conv = net.add_convolution(x, conv_desc(4, 3, 1), rand_f({4, 3, 3, 3}, 28), rand_f({4}, 29));
  net.mark_output(net.add_activation(conv->output(0), ActivationType::kRelu)->output(0));
  ConvolutionDesc dd = conv_desc(2, 2, 0);
  dd.strides = {2, 2};
  Layer* deconv = net.add_deconvolution(x, dd, rand_f({3, 2, 2, 2}, 30));
  net.mark_output(net.add_activation(deconv->output(0), ActivationType::kSigmoid)->output(0));
  Tensor* a = net.add_input("a", DataType::kFloat32, {2, 5});
  Layer* gemm = net.add_layer(kLayerGemm, {a, constant(net, rand_f({5, 3}, 31)), constant(net, rand_f({3}, 32))}, 1);
  net.mark_output(net.add_activation(gemm->output(0), ActivationType::kLeakyRelu, 0.1)->output(0));

  PassResult r = run_passes(net, {pass_activation_fusion});
  EXPECT_EQ(r.changes, 3) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerActivation), 0);
  Layer* c = r.net->find_layer(conv->name());
  Layer* d = r.net->find_layer(deconv->name());
  Layer* g = r.net->find_layer(gemm->name());
  ASSERT_TRUE(c && d && g);
  EXPECT_EQ(c->attrs().get_string("activation"), "relu");
  EXPECT_EQ(d->attrs().get_string("activation"), "sigmoid");
  EXPECT_EQ(g->attrs().get_string("activation"), "leaky_relu");
  EXPECT_DOUBLE_EQ(g->attrs().get_float("activation_alpha"), 0.1);
  expect_same_function(net, *r.net, {{"x", rand_f({1, 3, 6, 6}, 33)}, {"a", rand_f({2, 5}, 34)}});
}

TEST(ActivationFusion, SiluPatternBecomesAConvPostOp) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1, 3, 6, 6});
  Tensor* c = net.add_convolution(x, conv_desc(4, 3, 1), rand_f({4, 3, 3, 3}, 35), rand_f({4}, 36))->output(0);
  Tensor* s = net.add_activation(c, ActivationType::kSigmoid)->output(0);
  net.mark_output(net.add_elementwise(s, c, ElementWiseOp::kProd)->output(0));  // sigmoid(x) * x order
  // A SiLU that does not follow a convolution stays an Activation layer.
  Tensor* y = net.add_input("y", DataType::kFloat32, {5, 7});
  Tensor* sy = net.add_activation(y, ActivationType::kSigmoid)->output(0);
  net.mark_output(net.add_elementwise(y, sy, ElementWiseOp::kProd)->output(0));

  PassResult r = run_passes(net, {pass_activation_fusion});
  EXPECT_EQ(r.changes, 3) << joined(r.log);  // two silu rewrites, one post-op
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 0);
  Layer* act = only_layer(*r.net, kLayerActivation);
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(act->attrs().get_string("kind"), "silu");
  EXPECT_EQ(act->input(0)->name(), "y");
  EXPECT_EQ(only_layer(*r.net, kLayerConvolution)->attrs().get_string("activation"), "silu");
  expect_same_function(net, *r.net, {{"x", rand_f({1, 3, 6, 6}, 37, -4, 4)}, {"y", rand_f({5, 7}, 38, -4, 4)}});
}

TEST(ActivationFusion, ResidualSumThenReluGoIntoTheConv) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {2, 4, 6, 6});
  Layer* conv = net.add_convolution(x, conv_desc(4, 3, 1), rand_f({4, 4, 3, 3}, 39), rand_f({4}, 40));
  Tensor* sum = net.add_elementwise(x, conv->output(0), ElementWiseOp::kSum)->output(0);
  net.mark_output(net.add_activation(sum, ActivationType::kRelu)->output(0));

  PassResult r = run_passes(net, {pass_activation_fusion});
  EXPECT_EQ(r.changes, 2) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerActivation), 0);
  Layer* c = r.net->find_layer(conv->name());
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->num_inputs(), 4);
  EXPECT_EQ(c->input(3)->name(), "x");
  EXPECT_EQ(c->attrs().get_string("activation"), "relu");
  expect_same_function(net, *r.net, {{"x", rand_f({2, 4, 6, 6}, 41)}});
}

TEST(ActivationFusion, NoResidualAcrossAnActivationOrABroadcast) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1, 4, 6, 6});
  Tensor* b = net.add_input("b", DataType::kFloat32, {1, 4, 1, 1});
  // relu before the sum: the relu goes onto the conv, the sum stays.
  Tensor* c1 = net.add_convolution(x, conv_desc(4, 3, 1), rand_f({4, 4, 3, 3}, 42))->output(0);
  Tensor* r1 = net.add_activation(c1, ActivationType::kRelu)->output(0);
  net.mark_output(net.add_elementwise(r1, x, ElementWiseOp::kSum)->output(0));
  // The other operand broadcasts: not a residual.
  Tensor* c2 = net.add_convolution(x, conv_desc(4, 1, 0), rand_f({4, 4, 1, 1}, 43))->output(0);
  net.mark_output(net.add_elementwise(c2, b, ElementWiseOp::kSum)->output(0));

  PassResult r = run_passes(net, {pass_activation_fusion});
  EXPECT_EQ(r.changes, 1) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 2);
  for (int i = 0; i < r.net->num_layers(); ++i) {
    const Layer* l = r.net->layer(i);
    if (l->type() == kLayerConvolution) {
      EXPECT_TRUE(l->num_inputs() < 4 || !l->input(3)) << l->name();
    }
  }
  expect_same_function(net, *r.net, {{"x", rand_f({1, 4, 6, 6}, 44)}, {"b", rand_f({1, 4, 1, 1}, 45)}});
}

// GELU as exporters write it, 0.5 * x * (1 + erf(x / sqrt 2)) or (x * 0.5) * (1 + erf(x * 0.7071)).
Tensor* gelu_written_out(Network& net, Tensor* x, bool half_first) {
  if (half_first) {
    Tensor* d = net.add_elementwise(x, constant(net, floats({}, {0.70710678f})), ElementWiseOp::kProd)->output(0);
    Tensor* e = net.add_unary(d, UnaryOp::kErf)->output(0);
    Tensor* s = net.add_elementwise(constant(net, floats({1}, {1.0f})), e, ElementWiseOp::kSum)->output(0);
    Tensor* h = net.add_elementwise(x, constant(net, floats({}, {0.5f})), ElementWiseOp::kProd)->output(0);
    return net.add_elementwise(h, s, ElementWiseOp::kProd)->output(0);
  }
  Tensor* d = net.add_elementwise(x, constant(net, floats({}, {1.4142135f})), ElementWiseOp::kDiv)->output(0);
  Tensor* e = net.add_unary(d, UnaryOp::kErf)->output(0);
  Tensor* s = net.add_elementwise(e, constant(net, floats({}, {1.0f})), ElementWiseOp::kSum)->output(0);
  Tensor* m = net.add_elementwise(x, s, ElementWiseOp::kProd)->output(0);
  return net.add_elementwise(m, constant(net, floats({}, {0.5f})), ElementWiseOp::kProd)->output(0);
}

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

// CPU builds: GELU written out becomes one gelu_erf Activation; a MatMul with a constant b, its
// bias Add and the activation after it become one MatrixMultiply (bias input 2, `activation`),
// where packed_avx2 takes it; a product of two activations too, where batched_avx2 takes it
// (before that kernel it kept its Add: the reference would have been slower than the unfused
// layers).
TEST(ActivationFusion, CpuBuildsFuseGeluAndMatMulBias) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here: nothing would take the fused product";
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {2, 5, 24});
  Tensor* mm = net.add_matrix_multiply(x, false, constant(net, rand_f({24, 40}, 50)), false)->output(0);
  Tensor* h = net.add_elementwise(mm, constant(net, rand_f({40}, 51)), ElementWiseOp::kSum)->output(0);
  net.mark_output(gelu_written_out(net, h, false));
  // Bias as [1, 1, 40] and ReLU.
  Tensor* mm2 = net.add_matrix_multiply(x, false, constant(net, rand_f({24, 40}, 52)), false)->output(0);
  Tensor* h2 = net.add_elementwise(constant(net, rand_f({1, 1, 40}, 53)), mm2, ElementWiseOp::kSum)->output(0);
  net.mark_output(net.add_activation(h2, ActivationType::kRelu)->output(0));
  // GELU on its own (the other multiplication order).
  Tensor* y = net.add_input("y", DataType::kFloat32, {3, 7});
  net.mark_output(gelu_written_out(net, y, true));
  // b not constant: batched_avx2's.
  Tensor* b = net.add_input("b", DataType::kFloat32, {24, 8});
  Tensor* mm3 = net.add_matrix_multiply(x, false, b, false)->output(0);
  net.mark_output(net.add_elementwise(mm3, constant(net, rand_f({8}, 54)), ElementWiseOp::kSum)->output(0));

  PassResult r = run_passes(net, {pass_activation_fusion});
  EXPECT_EQ(r.changes, 5) << joined(r.log);  // two GELUs, three bias fusions
  EXPECT_EQ(count_layers(*r.net, kLayerUnary), 0) << to_text(*r.net);
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 0) << to_text(*r.net);
  EXPECT_EQ(count_layers(*r.net, kLayerMatrixMultiply), 3);
  int with_bias = 0;
  std::vector<std::string> activations;
  for (int i = 0; i < r.net->num_layers(); ++i) {
    const Layer* l = r.net->layer(i);
    if (l->type() == kLayerMatrixMultiply && l->num_inputs() == 3) {
      ++with_bias;
      EXPECT_EQ(l->input(2)->dims(), Dims({l->input(1)->name() == "b" ? 8 : 40})) << l->name();
      activations.push_back(l->attrs().get_string("activation"));
    }
    if (l->type() == kLayerActivation) {
      EXPECT_EQ(l->attrs().get_string("kind"), "gelu_erf");
    }
  }
  EXPECT_EQ(with_bias, 3);
  std::sort(activations.begin(), activations.end());
  EXPECT_EQ(activations, (std::vector<std::string>{"", "gelu_erf", "relu"}));
  EXPECT_EQ(count_layers(*r.net, kLayerActivation), 1);  // y's GELU
  expect_same_function(
      net, *r.net,
      {{"x", rand_f({2, 5, 24}, 55, -2, 2)}, {"y", rand_f({3, 7}, 56, -4, 4)}, {"b", rand_f({24, 8}, 57)}});

  // A CUDA build leaves all of it to the CUDA kernels (cuBLASLt's epilogues, FusedElementWise).
  BuilderConfig cuda;
  cuda.device = DeviceType::kCUDA;
  auto clone = net.clone();
  std::vector<std::string> log;
  PassContext ctx{cuda, {}, &log};
  EXPECT_EQ(pass_activation_fusion(*clone, ctx), 0) << joined(log);
}

// ---- element-wise fusion --------------------------------------------------------------------

TEST(ElementWiseFusion, FusesAChainWithScalarConstants) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {2, 3, 5});
  Tensor* y = net.add_input("y", DataType::kFloat32, {2, 3, 5});
  Tensor* t = net.add_activation(x, ActivationType::kSigmoid)->output(0);
  t = net.add_elementwise(t, constant(net, floats({1}, {2.0f})), ElementWiseOp::kProd)->output(0);
  t = net.add_elementwise(y, t, ElementWiseOp::kSub)->output(0);
  t = net.add_unary(t, UnaryOp::kTanh)->output(0);
  t->set_name("out");
  net.mark_output(t);

  PassResult r = run_passes(net, {pass_elementwise_fusion});
  EXPECT_EQ(r.changes, 1);
  ASSERT_EQ(r.net->num_layers(), 1) << to_text(*r.net);
  Layer* fused = r.net->layer(0);
  EXPECT_EQ(fused->type(), kLayerFusedElementWise);
  ASSERT_EQ(fused->num_inputs(), 2);
  EXPECT_EQ(fused->input(0)->name(), "x");
  EXPECT_EQ(fused->input(1)->name(), "y");
  EXPECT_EQ(fused->output(0)->name(), "out");
  const FusedProgram program = parse_fused_program(fused->attrs().get_strings("program"), 2, "test");
  ASSERT_EQ(program.instrs.size(), 5u);  // act, const, binary, binary, unary
  EXPECT_EQ(program.instrs[1].code, FusedOpCode::kConst);
  EXPECT_EQ(program.instrs[1].p0, 2.0);
  expect_same_function(net, *r.net, {{"x", rand_f({2, 3, 5}, 46)}, {"y", rand_f({2, 3, 5}, 47)}});
}

TEST(ElementWiseFusion, FusesTheErfGelu) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {4, 33});
  Tensor* t = net.add_elementwise(x, constant(net, floats({}, {1.4142135f})), ElementWiseOp::kDiv)->output(0);
  t = net.add_unary(t, UnaryOp::kErf)->output(0);
  t = net.add_elementwise(t, constant(net, floats({}, {1.0f})), ElementWiseOp::kSum)->output(0);
  t = net.add_elementwise(x, t, ElementWiseOp::kProd)->output(0);
  t = net.add_elementwise(t, constant(net, floats({}, {0.5f})), ElementWiseOp::kProd)->output(0);
  net.mark_output(t);

  PassResult r = run_passes(net, {pass_elementwise_fusion});
  EXPECT_EQ(r.changes, 1);
  ASSERT_EQ(r.net->num_layers(), 1) << to_text(*r.net);
  EXPECT_EQ(r.net->layer(0)->num_inputs(), 1);
  ASSERT_EQ(r.log.size(), 1u);
  EXPECT_NE(r.log[0].find("elementwise_fusion: fused 5 layers"), std::string::npos) << r.log[0];
  const Inputs inputs = {{"x", rand_f({4, 33}, 48, -3, 3)}};
  const std::vector<HostTensor> got = run_network(*r.net, false, inputs);
  HostTensor expected(DataType::kFloat32, {4, 33});
  const float* xv = inputs.at("x").as<float>();
  for (int64_t i = 0; i < expected.count(); ++i) {
    expected.as<float>()[i] = static_cast<float>(0.5 * xv[i] * (1.0 + std::erf(xv[i] / std::sqrt(2.0))));
  }
  expect_close(got, {expected});
  expect_same_function(net, *r.net, inputs);
}

TEST(ElementWiseFusion, StopsAtSharedTensorsBroadcastsAndNonFloats) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {1, 4, 3, 3});
  // exp's output has two readers: no chain through it.
  Tensor* e = net.add_unary(x, UnaryOp::kExp)->output(0);
  net.mark_output(net.add_unary(e, UnaryOp::kNeg)->output(0));
  net.mark_output(net.add_unary(e, UnaryOp::kAbs)->output(0));
  // A per-channel constant broadcasts: not element-wise.
  Tensor* r = net.add_activation(x, ActivationType::kRelu)->output(0);
  Tensor* b = net.add_elementwise(r, constant(net, rand_f({4, 1, 1}, 49)), ElementWiseOp::kSum)->output(0);
  net.mark_output(net.add_activation(b, ActivationType::kSigmoid)->output(0));
  // A network output in the middle ends the chain.
  Tensor* t = net.add_activation(x, ActivationType::kTanh)->output(0);
  net.mark_output(t);
  net.mark_output(net.add_unary(t, UnaryOp::kSin)->output(0));
  // Comparisons are not float-valued.
  Tensor* cmp = net.add_elementwise(x, constant(net, floats({1}, {0.0f})), ElementWiseOp::kGreater)->output(0);
  net.mark_output(net.add_cast(cmp, DataType::kFloat32)->output(0));

  PassResult res = run_passes(net, {pass_elementwise_fusion});
  EXPECT_EQ(res.changes, 0) << joined(res.log);
  EXPECT_EQ(count_layers(*res.net, kLayerFusedElementWise), 0);
}

TEST(ElementWiseFusion, FusesUniformScaleAndDiamonds) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {3, 50});
  Tensor* r = net.add_activation(x, ActivationType::kRelu)->output(0);
  Tensor* s =
      net.add_scale(r, ScaleMode::kUniform, floats({1}, {1.0f}), floats({1}, {2.0f}), floats({1}, {2.0f}))->output(0);
  Tensor* n = net.add_unary(s, UnaryOp::kNeg)->output(0);
  // Two branches from x that meet again: both are single-reader chains into the max.
  Tensor* a = net.add_activation(x, ActivationType::kElu, 0.7)->output(0);
  net.mark_output(net.add_elementwise(n, a, ElementWiseOp::kMax)->output(0));

  PassResult res = run_passes(net, {pass_elementwise_fusion});
  EXPECT_EQ(res.changes, 1) << joined(res.log);
  ASSERT_EQ(res.net->num_layers(), 1) << to_text(*res.net);
  EXPECT_EQ(res.net->layer(0)->num_inputs(), 1);  // x, deduplicated
  expect_same_function(net, *res.net, {{"x", rand_f({3, 50}, 50, -2, 2)}});
}

// ---- the FusedElementWise layer itself -------------------------------------------------------

TEST(FusedElementWise, KernelMatchesIndependentMath) {
  for (const Dims& dims : {Dims{3, 7, 11}, Dims{2, 100003}}) {  // the second spans several blocks and threads
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, dims);
    Tensor* y = net.add_input("y", DataType::kFloat32, dims);
    Tensor* z = net.add_input("z", DataType::kFloat32, {1});
    Attributes attrs;
    attrs.set("program", std::vector<std::string>{"act relu r0 0 0", "binary prod r3 r1", "const 3", "binary sum r4 r5",
                                                  "binary max r6 r2", "scale r7 0.5 -1 1", "unary abs r8",
                                                  "act leaky_relu r9 0.25 0"});
    net.mark_output(net.add_layer(kLayerFusedElementWise, {x, y, z}, 1, attrs)->output(0));
    const Inputs inputs = {{"x", rand_f(dims, 51, -4, 4)}, {"y", rand_f(dims, 52, -4, 4)}, {"z", floats({1}, {2.5f})}};
    const std::vector<HostTensor> got = run_network(net, false, inputs, {}, nullptr, 2);
    HostTensor expected(DataType::kFloat32, dims);
    const float* xv = inputs.at("x").as<float>();
    const float* yv = inputs.at("y").as<float>();
    for (int64_t i = 0; i < expected.count(); ++i) {
      const double relu = std::max(0.0, static_cast<double>(xv[i]));
      expected.as<float>()[i] = static_cast<float>(std::fabs(0.5 * std::max(relu * yv[i] + 3.0, 2.5) - 1.0));
    }
    expect_close(got, {expected}, 1e-5, 1e-6);
  }
}

TEST(FusedElementWise, RejectsBadPrograms) {
  const std::vector<std::vector<std::string>> bad = {
      {},                      // empty
      {"binary prod r0 r5"},   // register not yet defined
      {"unary not r0"},        // bool-valued
      {"binary equal r0 r0"},  // bool-valued
      {"frobnicate r0"},       // unknown
      {"const x"},             // not a number
      {"act nosuch r0 0 0"},   // unknown activation
      {"scale r0 1 2"},        // missing power
  };
  for (const auto& program : bad) {
    EXPECT_THROW(parse_fused_program(program, 1, "test"), Error) << (program.empty() ? "" : program[0]);
  }
  // Round trip of the writers.
  const std::vector<std::string> good = {fused_const(0.1), fused_activation(ActivationType::kSelu, 1, 1.67326, 1.0507),
                                         fused_binary(ElementWiseOp::kPow, 0, 2), fused_scale(3, -0.5, 1e-7, 2),
                                         fused_unary(UnaryOp::kRound, 4)};
  const FusedProgram p = parse_fused_program(good, 1, "test");
  ASSERT_EQ(p.instrs.size(), 5u);
  EXPECT_EQ(p.instrs[0].p0, 0.1);
  EXPECT_EQ(p.instrs[1].p0, 1.67326);
  EXPECT_EQ(p.instrs[3].p1, 1e-7);
  EXPECT_EQ(p.instrs[3].a, 3);

  // A layer's program is parsed when the layer is created (its typed params): a bad one fails there.
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {4});
  Attributes attrs;
  attrs.set("program", std::vector<std::string>{"binary sum r0 r1"});
  EXPECT_THROW(net.add_layer(kLayerFusedElementWise, {x}, 1, attrs), Error);
  EXPECT_EQ(net.num_layers(), 0);
}

// ---- concatenation + convolution split (CPU) ------------------------------------------------

// A fire module (SqueezeNet): two expand convolutions of x, concatenated along the channels and
// read by a small convolution. `maps`: that convolution's output channels.
std::unique_ptr<Network> fire_network(int64_t maps, int64_t kernel = 1, int64_t stride = 1,
                                      const Dims& x_dims = {2, 8, 10, 10}) {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, x_dims);
  const int64_t c = x_dims[1];
  Tensor* a = net->add_convolution(x, conv_desc(16, 1, 0), rand_f({16, c, 1, 1}, 301), rand_f({16}, 302))->output(0);
  a = net->add_activation(a, ActivationType::kRelu)->output(0);
  Tensor* b = net->add_convolution(x, conv_desc(48, 3, 1), rand_f({48, c, 3, 3}, 303), rand_f({48}, 304))->output(0);
  b = net->add_activation(b, ActivationType::kRelu)->output(0);
  Tensor* cat = net->add_concatenation({a, b}, 1)->output(0);
  ConvolutionDesc d = conv_desc(maps, kernel, kernel / 2);
  d.strides = {stride, stride};
  Layer* squeeze = net->add_convolution(cat, d, rand_f({maps, 64, kernel, kernel}, 305), rand_f({maps}, 306));
  squeeze->set_name("squeeze");
  Tensor* y = net->add_activation(squeeze->output(0), ActivationType::kRelu)->output(0);
  y->set_name("y");
  net->mark_output(y);
  return net;
}

TEST(ConcatConvSplit, ASmallConvolutionReadsTheConcatenatedTensorsDirectly) {
  // As in the pipeline: after activation fusion (the ReLUs are post-ops by then).
  const auto net = fire_network(8);
  PassResult r = run_passes(*net, {pass_activation_fusion, pass_concat_conv_split});
  EXPECT_EQ(r.changes, 4) << joined(r.log);  // 3 ReLUs fused, 1 split
  EXPECT_NE(joined(r.log).find("concat_conv_split: 'squeeze' reads the 2 inputs of"), std::string::npos)
      << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerConcatenation), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerConvolution), 4);
  EXPECT_EQ(count_layers(*r.net, kLayerElementWise), 0);
  EXPECT_EQ(count_layers(*r.net, kLayerActivation), 0);
  const Layer* first = r.net->find_layer("squeeze.part0");
  const Layer* last = r.net->find_layer("squeeze.part1");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(last, nullptr);
  // The weights are the two column blocks of the original (16 and 48 input channels); the first
  // takes the bias, the last the previous one's output as its residual and the ReLU.
  EXPECT_EQ(first->input(1)->producer()->attrs().get_tensor("value").dims(), (Dims{8, 16, 1, 1}));
  EXPECT_EQ(last->input(1)->producer()->attrs().get_tensor("value").dims(), (Dims{8, 48, 1, 1}));
  EXPECT_TRUE(first->num_inputs() > 2 && first->input(2));
  EXPECT_TRUE(first->num_inputs() < 4 || !first->input(3));
  EXPECT_EQ(first->attrs().get_string("activation", ""), "");
  ASSERT_EQ(last->num_inputs(), 4);
  EXPECT_EQ(last->input(2), nullptr);
  EXPECT_EQ(last->input(3), first->output(0));
  EXPECT_EQ(last->attrs().get_string("activation"), "relu");
  EXPECT_EQ(last->output(0)->name(), "y");
  expect_same_function(*net, *r.net, {{"x", rand_f({2, 8, 10, 10}, 307)}});
}

// The convolution already has a residual input and an activation: the first piece takes the
// residual, the last the activation.
TEST(ConcatConvSplit, AnExistingResidualGoesToTheFirstPiece) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {3, 8, 6, 6});
  Tensor* skip = net.add_input("skip", DataType::kFloat32, {3, 4, 6, 6});
  Tensor* a = net.add_convolution(x, conv_desc(24, 1, 0), rand_f({24, 8, 1, 1}, 310))->output(0);
  Tensor* b = net.add_convolution(x, conv_desc(24, 3, 1), rand_f({24, 8, 3, 3}, 311))->output(0);
  Tensor* c = net.add_convolution(x, conv_desc(24, 1, 0), rand_f({24, 8, 1, 1}, 312))->output(0);
  Tensor* cat = net.add_concatenation({a, b, c}, 1)->output(0);
  Tensor* y = net.add_convolution(cat, conv_desc(4, 1, 0), rand_f({4, 72, 1, 1}, 313), rand_f({4}, 314))->output(0);
  y = net.add_elementwise(y, skip, ElementWiseOp::kSum)->output(0);
  y = net.add_activation(y, ActivationType::kLeakyRelu, 0.2)->output(0);
  net.mark_output(y);
  PassResult r = run_passes(net, {pass_activation_fusion, pass_concat_conv_split});
  EXPECT_EQ(count_layers(*r.net, kLayerConcatenation), 0) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerConvolution), 6);
  int with_activation = 0;
  for (int i = 0; i < r.net->num_layers(); ++i) {
    const Layer* l = r.net->layer(i);
    if (l->type() == kLayerConvolution && !l->attrs().get_string("activation", "").empty()) ++with_activation;
  }
  EXPECT_EQ(with_activation, 1);
  const Layer* first = nullptr;
  for (int i = 0; i < r.net->num_layers(); ++i) {
    if (r.net->layer(i)->name().find(".part0") != std::string::npos) first = r.net->layer(i);
  }
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(first->num_inputs(), 4);
  EXPECT_EQ(first->input(3)->name(), "skip");
  expect_same_function(net, *r.net, {{"x", rand_f({3, 8, 6, 6}, 315)}, {"skip", rand_f({3, 4, 6, 6}, 316)}});
}

// SqueezeNet's fire modules 4 and 7: the concatenation feeds a 3x3 stride-2 max pool and then
// the next module's squeeze convolution. The concatenation moves below the pool (which runs once
// per piece), and the squeeze convolution then reads the pooled pieces.
TEST(ConcatConvSplit, AConcatenationMovesBelowAPoolingLayer) {
  for (bool average : {false, true}) {
    auto net = fire_network(8);
    Layer* squeeze = net->find_layer("squeeze");
    Tensor* cat = squeeze->input(0);
    PoolingDesc d;
    d.type = average ? PoolingType::kAverage : PoolingType::kMax;
    d.kernel = {3, 3};
    d.strides = {2, 2};
    d.ceil_mode = true;
    Layer* pool = net->add_pooling(cat, d);
    pool->set_name("pool");
    squeeze->set_input(0, pool->output(0));
    PassResult r = run_passes(*net, {pass_activation_fusion, pass_concat_conv_split});
    const std::string log = joined(r.log);
    EXPECT_NE(log.find("'pool' pools the 2 inputs of"), std::string::npos) << log;
    EXPECT_NE(log.find("'squeeze' reads the 2 inputs of"), std::string::npos) << log;
    EXPECT_EQ(count_layers(*r.net, kLayerConcatenation), 0) << log;
    EXPECT_EQ(count_layers(*r.net, kLayerPooling), 2);
    EXPECT_NE(r.net->find_layer("pool.part0"), nullptr);
    EXPECT_NE(r.net->find_layer("pool.part1"), nullptr);
    expect_same_function(*net, *r.net, {{"x", rand_f({2, 8, 10, 10}, 317 + (average ? 1u : 0u))}});
  }
  // A second reader of the pooled input: the concatenation stays where it is.
  auto net = fire_network(8);
  Layer* squeeze = net->find_layer("squeeze");
  Tensor* cat = squeeze->input(0);
  PoolingDesc d;
  d.kernel = {2, 2};
  d.strides = {2, 2};
  squeeze->set_input(0, net->add_pooling(cat, d)->output(0));
  net->mark_output(net->add_activation(cat, ActivationType::kSigmoid)->output(0));
  PassResult r = run_passes(*net, {pass_concat_conv_split});
  EXPECT_EQ(r.log.size(), 0u) << joined(r.log);
  EXPECT_EQ(count_layers(*r.net, kLayerConcatenation), 1);
}

// Three pieces, a 3x3 stride-2 consumer and a dynamic batch; the whole builder pipeline (the
// channels-last region included) against the same build without the pass.
TEST(ConcatConvSplit, ThreePiecesAStridedWindowAndADynamicBatchThroughTheBuilder) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, {kDynamic, 8, 12, 12});
  std::vector<Tensor*> pieces;
  uint64_t seed = 320;
  for (int64_t maps : {4, 12, 16}) {
    Tensor* t = net.add_convolution(x, conv_desc(maps, 3, 1), rand_f({maps, 8, 3, 3}, seed), rand_f({maps}, seed + 1))
                    ->output(0);
    seed += 2;
    pieces.push_back(net.add_activation(t, ActivationType::kRelu)->output(0));
  }
  Tensor* cat = net.add_concatenation(pieces, -3)->output(0);
  ConvolutionDesc d = conv_desc(3, 3, 1);
  d.strides = {2, 2};
  Tensor* y = net.add_convolution(cat, d, rand_f({3, 32, 3, 3}, 330), rand_f({3}, 331))->output(0);
  y = net.add_activation(y, ActivationType::kLeakyRelu, 0.1)->output(0);
  y->set_name("y");
  net.mark_output(y);
  OptimizationProfile profile;
  profile.set_dimensions("x", {1, 8, 12, 12}, {2, 8, 12, 12}, {4, 8, 12, 12});
  for (int64_t batch : {1, 3, 4}) {
    const Inputs inputs = {{"x", rand_f({batch, 8, 12, 12}, 332 + static_cast<uint64_t>(batch))}};
    BuildReport with;
    const auto got = run_network(net, true, inputs, {profile}, &with);
    EXPECT_NE(joined(with.pass_log).find("concat_conv_split: "), std::string::npos) << joined(with.pass_log);
    EXPECT_NE(joined(with.pass_log).find("run channels-last"), std::string::npos) << joined(with.pass_log);
    expect_close(got, run_network(net, false, inputs, {profile}));
  }
  // The pass off by name: the concatenation stays.
  BuilderConfig config;
  config.profiles = {profile};
  config.disabled_passes = {"concat_conv_split"};
  BuildReport without;
  Builder().build_serialized(net, config, &without);
  EXPECT_EQ(joined(without.pass_log).find("concat_conv_split: "), std::string::npos) << joined(without.pass_log);
}

// Random fire-like networks through the whole builder, with the pass and without it (and with
// the layout pass on or off, so both the channels-last and the linear several-image cases are
// split): 2-4 pieces of random widths made by 1x1 or 3x3 convolutions, sometimes a pooling layer
// after the concatenation, a consumer with a random window, stride, padding, bias, activation
// and width (narrow enough to split or not), batch 1-3.
TEST(ConcatConvSplit, RandomNetworksComputeWhatTheUnsplitOnesDo) {
  std::mt19937 rng(2027);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int split_builds = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t batch = pick(1, 3), c = pick(1, 6), hw = pick(5, 11);
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, {batch, c, hw, hw});
    std::vector<Tensor*> pieces;
    int64_t total = 0;
    const int n = pick(2, 4);
    for (int j = 0; j < n; ++j) {
      const int64_t width = pick(1, 24), k = pick(0, 1) ? 3 : 1;
      const uint64_t seed = 400 + static_cast<uint64_t>(trial * 10 + j);
      Tensor* t = net.add_convolution(x, conv_desc(width, k, k / 2), rand_f({width, c, k, k}, seed))->output(0);
      pieces.push_back(net.add_activation(t, ActivationType::kRelu)->output(0));
      total += width;
    }
    Tensor* cat = net.add_concatenation(pieces, 1)->output(0);
    int64_t size = hw;
    if (pick(0, 2) == 0) {
      PoolingDesc d;
      d.type = pick(0, 1) ? PoolingType::kMax : PoolingType::kAverage;
      d.kernel = {2, 2};
      d.strides = {2, 2};
      cat = net.add_pooling(cat, d)->output(0);
      size = hw / 2;
    }
    const int64_t maps = pick(1, 12), k = std::min<int64_t>(pick(0, 1) ? 3 : 1, size);
    ConvolutionDesc d = conv_desc(maps, k, pick(0, 1) ? k / 2 : 0);
    d.strides = {pick(1, 2), pick(1, 2)};
    const bool bias = pick(0, 1) == 1;
    Tensor* y = net.add_convolution(cat, d, rand_f({maps, total, k, k}, 480 + static_cast<uint64_t>(trial)),
                                    bias ? rand_f({maps}, 490 + static_cast<uint64_t>(trial)) : HostTensor())
                    ->output(0);
    if (pick(0, 1)) y = net.add_activation(y, ActivationType::kLeakyRelu, 0.1)->output(0);
    y->set_name("y");
    net.mark_output(y);
    const HostTensor input = rand_f({batch, c, hw, hw}, 500 + static_cast<uint64_t>(trial));
    for (bool layout : {true, false}) {
      std::vector<HostTensor> outs;
      for (bool split : {true, false}) {
        BuilderConfig config;
        config.num_threads = 2;
        config.time_tactics = false;  // the highest-priority kernels: a quicker build, the same passes
        if (!layout) config.disabled_passes.push_back("layout");
        if (!split) config.disabled_passes.push_back("concat_conv_split");
        BuildReport report;
        const auto bytes = Builder().build_serialized(net, config, &report);
        if (split && joined(report.pass_log).find("concat_conv_split: ") != std::string::npos) ++split_builds;
        auto engine = Runtime().deserialize(bytes.data(), bytes.size());
        auto ctx = engine->create_execution_context();
        outs.emplace_back(DataType::kFloat32, ctx->tensor_shape("y"));
        ctx->set_tensor_address("x", const_cast<void*>(input.data()));
        ctx->set_tensor_address("y", outs.back().data());
        ctx->execute();
      }
      SCOPED_TRACE("trial " + std::to_string(trial) + (layout ? ", layout on" : ", layout off"));
      expect_close({outs[0]}, {outs[1]}, 1e-4, 1e-5);
    }
  }
  // Enough of the draws are split for the comparison to mean something.
  EXPECT_GE(split_builds, 12);
}

TEST(ConcatConvSplit, LeavesWhatItShouldNotSplit) {
  // One image in linear memory: the planner elides that concatenation, nothing to save. In
  // channels-last memory it is a copy.
  {
    auto one = fire_network(8, 1, 1, {1, 8, 10, 10});
    EXPECT_EQ(run_passes(*one, {pass_concat_conv_split}).changes, 0);
    Layer* squeeze = one->find_layer("squeeze");
    Layer* concat = squeeze->input(0)->producer();
    for (Tensor* t : {concat->input(0), concat->input(1), concat->output(0), squeeze->output(0)}) {
      t->set_format(TensorFormat::kChannelsLast);
    }
    PassResult r = run_passes(*one, {pass_concat_conv_split});
    EXPECT_EQ(r.changes, 1) << joined(r.log);
    const Layer* last = r.net->find_layer("squeeze.part1");
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(last->output(0)->format(), TensorFormat::kChannelsLast);
    EXPECT_EQ(r.net->find_layer("squeeze.part0")->output(0)->format(), TensorFormat::kChannelsLast);
  }
  // The output is as large as the input: the partial sums would move more than the concatenation.
  EXPECT_EQ(run_passes(*fire_network(64), {pass_concat_conv_split}).changes, 0);
  // 24 of 64 channels: the partial sums would move 3/8 of the concatenation's bytes, over 1/4.
  EXPECT_EQ(run_passes(*fire_network(24), {pass_concat_conv_split}).changes, 0);
  // A stride-2 window makes the output 4x smaller: 24 channels then pass.
  EXPECT_EQ(run_passes(*fire_network(24, 3, 2), {pass_concat_conv_split}).changes, 1);
  {
    // The concatenated tensor has a second reader.
    auto net = fire_network(8);
    Tensor* cat = net->find_layer("squeeze")->input(0);
    net->mark_output(net->add_activation(cat, ActivationType::kSigmoid)->output(0));
    EXPECT_EQ(run_passes(*net, {pass_concat_conv_split}).changes, 0);
  }
  {
    // Grouped, along another axis, or over a constant piece.
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, {1, 32, 6, 6});
    Tensor* x2 = net.add_input("x2", DataType::kFloat32, {1, 32, 6, 6});
    Tensor* channels = net.add_concatenation({x, x2}, 1)->output(0);
    ConvolutionDesc grouped = conv_desc(4, 1, 0);
    grouped.groups = 2;
    net.mark_output(net.add_convolution(channels, grouped, rand_f({4, 32, 1, 1}, 340))->output(0));
    Tensor* rows = net.add_concatenation({x, x2}, 2)->output(0);
    net.mark_output(net.add_convolution(rows, conv_desc(4, 1, 0), rand_f({4, 32, 1, 1}, 341))->output(0));
    Tensor* with_constant = net.add_concatenation({x, constant(net, rand_f({1, 32, 6, 6}, 342))}, 1)->output(0);
    net.mark_output(net.add_convolution(with_constant, conv_desc(4, 1, 0), rand_f({4, 64, 1, 1}, 343))->output(0));
    PassResult r = run_passes(net, {pass_concat_conv_split});
    EXPECT_EQ(r.changes, 0) << joined(r.log);
  }
  {
    // CUDA builds: not measured there, so not done.
    Network net;
    auto fire = fire_network(8);
    BuilderConfig config;
    config.device = DeviceType::kCUDA;
    std::vector<std::string> log;
    PassContext ctx{config, {}, &log};
    EXPECT_EQ(pass_concat_conv_split(*fire, ctx), 0);
  }
}

// ---- the whole pipeline ---------------------------------------------------------------------

// conv+BN+SiLU, a residual block, an exporter flatten with dynamic batch, a matmul and a GELU.
std::unique_ptr<Network> make_mixed_network() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, {kDynamic, 3, 8, 8});
  Tensor* c1 = net->add_convolution(x, conv_desc(8, 3, 1), rand_f({8, 3, 3, 3}, 60), rand_f({8}, 61))->output(0);
  c1 = net->add_scale(c1, ScaleMode::kChannel, rand_f({8}, 62), rand_f({8}, 63, 0.5, 1.5), {})->output(0);
  Tensor* s1 = net->add_activation(c1, ActivationType::kSigmoid)->output(0);
  Tensor* h = net->add_elementwise(c1, s1, ElementWiseOp::kProd)->output(0);
  Tensor* c2 = net->add_convolution(h, conv_desc(8, 3, 1), rand_f({8, 8, 3, 3}, 64, -0.3, 0.3))->output(0);
  c2 = net->add_elementwise(c2, constant(*net, rand_f({1, 8, 1, 1}, 65)), ElementWiseOp::kSum)->output(0);
  Tensor* res = net->add_elementwise(c2, h, ElementWiseOp::kSum)->output(0);
  Tensor* r = net->add_activation(res, ActivationType::kRelu)->output(0);
  Tensor* flat = exporter_flatten(*net, r);  // [N, 512]
  Tensor* w = net->add_shuffle(constant(*net, rand_f({16, 512}, 66, -0.1, 0.1)), {1, 0}, {}, {})->output(0);
  Tensor* m = net->add_matrix_multiply(flat, false, w, false)->output(0);
  Tensor* t = net->add_elementwise(m, constant(*net, floats({}, {1.4142135f})), ElementWiseOp::kDiv)->output(0);
  t = net->add_unary(t, UnaryOp::kErf)->output(0);
  t = net->add_elementwise(t, constant(*net, floats({}, {1.0f})), ElementWiseOp::kSum)->output(0);
  t = net->add_elementwise(m, t, ElementWiseOp::kProd)->output(0);
  t = net->add_elementwise(t, constant(*net, floats({}, {0.5f})), ElementWiseOp::kProd)->output(0);
  t->set_name("y");
  net->mark_output(t);
  return net;
}

OptimizationProfile mixed_profile() {
  OptimizationProfile p;
  p.set_dimensions("x", {1, 3, 8, 8}, {2, 3, 8, 8}, {4, 3, 8, 8});
  return p;
}

TEST(PassPipeline, OptimizedEngineMatchesUnoptimized) {
  const auto net = make_mixed_network();
  for (int64_t batch : {1, 3, 4}) {
    const Inputs inputs = {{"x", rand_f({batch, 3, 8, 8}, 67 + static_cast<uint64_t>(batch))}};
    BuildReport optimized, plain;
    const auto got = run_network(*net, true, inputs, {mixed_profile()}, &optimized);
    const auto want = run_network(*net, false, inputs, {mixed_profile()}, &plain);
    expect_close(got, want);
    EXPECT_FALSE(optimized.pass_log.empty());
    EXPECT_TRUE(plain.pass_log.empty());
    EXPECT_LT(optimized.layers_after, plain.layers_after);
  }
}

TEST(PassPipeline, PassesGiveTheExpectedGraphAndAreDeterministic) {
  const auto net = make_mixed_network();
  const ShapePoints points = {{{"x", Dims{2, 3, 8, 8}}}, {{"x", Dims{1, 3, 8, 8}}}, {{"x", Dims{4, 3, 8, 8}}}};
  const std::vector<PassFn> all = {pass_constant_folding,  pass_dead_layer_elimination, pass_conv_bn_folding,
                                   pass_activation_fusion, pass_elementwise_fusion,     pass_dead_layer_elimination};
  PassResult a = run_passes(*net, all, points);
  PassResult b = run_passes(*net, all, points);
  EXPECT_EQ(to_text(*a.net), to_text(*b.net));
  EXPECT_EQ(a.log, b.log);
  // Two convolutions: the first with BN folded and silu fused, the second with its bias add
  // folded, the residual and the relu fused.
  int convs = 0;
  for (int i = 0; i < a.net->num_layers(); ++i) {
    const Layer* l = a.net->layer(i);
    if (l->type() != kLayerConvolution) continue;
    ++convs;
    const bool residual = l->num_inputs() > 3 && l->input(3);
    EXPECT_EQ(l->attrs().get_string("activation"), residual ? "relu" : "silu") << l->name();
  }
  EXPECT_EQ(convs, 2);
  EXPECT_EQ(count_layers(*a.net, kLayerScale), 0);
  // The GELU written out: one gelu_erf Activation (CPU builds; activation_fusion).
  const Layer* gelu = only_layer(*a.net, kLayerActivation);
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gelu->attrs().get_string("kind"), "gelu_erf");
  EXPECT_EQ(count_layers(*a.net, kLayerFusedElementWise), 0);
  EXPECT_EQ(count_layers(*a.net, kLayerElementWise), 0);
  EXPECT_EQ(count_layers(*a.net, kLayerShape), 1);  // the batch is dynamic
  EXPECT_EQ(count_layers(*a.net, kLayerMatrixMultiply), 1);
  expect_same_function(*net, *a.net, {{"x", rand_f({3, 3, 8, 8}, 70)}}, {mixed_profile()});
}

// The exporter's SiLU (Sigmoid + Mul after each conv) in a real model becomes a conv post-op.
TEST(PassPipeline, TinyYoloSiluConvsGetSiluPostOps) {
  const std::string path = "/work/shared/models/tinyyolo_silu/model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not present";
  Network net;
  OnnxParser(net).parse_file(path);
  int sigmoids_before = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    sigmoids_before += l->type() == kLayerActivation && l->attrs().get_string("kind") == "sigmoid";
  }
  std::map<std::string, Dims> point;
  for (int i = 0; i < net.num_inputs(); ++i) {
    Dims d = net.input(i)->dims();
    for (int k = 0; k < d.rank(); ++k) d[k] = d[k] == kDynamic ? 1 : d[k];
    point[net.input(i)->name()] = d;
  }
  PassResult r = run_passes(net,
                            {pass_constant_folding, pass_dead_layer_elimination, pass_conv_bn_folding,
                             pass_activation_fusion, pass_elementwise_fusion, pass_dead_layer_elimination},
                            {point});
  int silu_convs = 0;
  for (int i = 0; i < r.net->num_layers(); ++i) {
    const Layer* l = r.net->layer(i);
    silu_convs += l->type() == kLayerConvolution && l->attrs().get_string("activation", "") == "silu";
  }
  EXPECT_EQ(silu_convs, 57) << joined(r.log);
  EXPECT_LT(r.net->num_layers(), net.num_layers());
  // The decode head keeps its sigmoid (not followed by a mul of its own input).
  EXPECT_GT(sigmoids_before, 57);
}

// Whole models through the optimizer: the optimized engine must match the unoptimized one and the
// exporter's reference output. The dynamic axes get a profile from 1 to the test input's extent,
// so that the batch-dependent shape arithmetic has to survive constant folding.
void check_model(const std::string& model) {
  const std::string dir = "/work/shared/models/" + model;
  if (!std::filesystem::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  // Import coverage is the importer's tests' business; here only the passes are judged.
  const auto unsupported = OnnxParser::check_file(dir + "/model.onnx");
  if (!unsupported.empty()) {
    GTEST_SKIP() << model << ": the importer cannot import " << unsupported.size() << " node(s), e.g. "
                 << unsupported[0].op_type;
  }
  Network net;
  OnnxParser(net).parse_file(dir + "/model.onnx");
  Inputs inputs;
  OptimizationProfile profile;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Tensor* in = net.input(i);
    const HostTensor value = load_tensor_pb(dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb");
    inputs[in->name()] = value;
    Dims min = value.dims();
    for (int k = 0; k < min.rank(); ++k) min[k] = in->dims()[k] == kDynamic ? 1 : min[k];
    profile.set_dimensions(in->name(), min, value.dims(), value.dims());
  }
  BuildReport optimized, plain;
  const auto got = run_network(net, true, inputs, {profile}, &optimized, 2);
  const auto want = run_network(net, false, inputs, {profile}, &plain, 2);
  EXPECT_LT(optimized.layers_after, plain.layers_after) << joined(optimized.pass_log);
  expect_close(got, want, 1e-4, 1e-5);
  const HostTensor reference = load_tensor_pb(dir + "/test_data_set_0/output_0.pb");
  expect_close({got[0]}, {reference}, 1e-3, 1e-4);
}

TEST(PassPipeline, SqueezeNetMatchesUnoptimizedAndReference) { check_model("squeezenet1_1"); }
TEST(PassPipeline, TinyYoloSiluMatchesUnoptimizedAndReference) { check_model("tinyyolo_silu"); }
TEST(PassPipeline, BertTinyMatchesUnoptimizedAndReference) { check_model("bert_tiny"); }

}  // namespace
}  // namespace kiln
