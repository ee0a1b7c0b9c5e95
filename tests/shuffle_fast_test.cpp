// Tests of the CPU "fast" Shuffle as one transpose (compose_shuffle in data_cpu.cpp), its
// channels-last input, the shuffle_merge pass and the layout pass feeding a Shuffle a
// channels-last convolution output without a Reformat. The reference kernel (ShuffleRef, which
// follows the definition coordinate by coordinate) is the oracle; movers must match it bit for
// bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "op_harness.h"
#include "src/backends/kernel.h"
#include "src/builder/passes/passes.h"
#include "src/ir/shape_inference.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;

// NCHW... data stored channels-last (N, spatial..., C).
HostTensor to_channels_last(const HostTensor& t) {
  const Dims& d = t.dims();
  const int64_t n = d[0], c = d[1], s = d.volume() / (n * c);
  HostTensor r(t.type(), d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) r.as<float>()[(i * s + k) * c + j] = t.as<float>()[(i * c + j) * s + k];
  return r;
}

struct Case {
  Dims in;
  Ints first, reshape, second;
  std::string text() const {
    auto list = [](const Ints& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
      return s + "]";
    };
    return in.to_string() + " first " + list(first) + " reshape " + list(reshape) + " second " + list(second);
  }
};

struct Ran {
  HostTensor y;
  size_t workspace = 0;  // 0: the kernel moved the data in one transpose (or none)
};

// Runs the `tactic` kernel of a one-Shuffle network on x (given in `format`).
Ran run_kernel(const Case& c, const HostTensor& x, TensorFormat format, const std::string& tactic, int threads) {
  Network net;
  Tensor* in = net.add_input("x", DataType::kFloat32, c.in);
  Layer* layer = net.add_shuffle(in, c.first, c.reshape, c.second);
  TensorState xs;
  xs.dims = c.in;
  const Dims out = infer_layer(*layer, {&xs}).at(0).second;
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerShuffle, tactic);
  if (!e) throw Error("no CPU Shuffle tactic " + tactic);
  const std::vector<TensorDesc> descs{TensorDesc{DataType::kFloat32, c.in, format, true, nullptr}};
  if (e->supports && !e->supports(*layer, descs)) throw Error(tactic + " declines " + c.text());
  auto kernel = e->create(*layer);
  kernel->prepare(*layer, descs, {TensorDesc{DataType::kFloat32, out, TensorFormat::kLinear, true, nullptr}}, threads);
  Ran r;
  r.y = HostTensor(DataType::kFloat32, out);
  std::vector<uint8_t> ws(kernel->workspace_size());
  r.workspace = ws.size();
  KernelContext ctx;
  ctx.layer = layer;
  ctx.num_threads = threads;
  ctx.inputs.push_back(TensorView{DataType::kFloat32, c.in, format, const_cast<void*>(x.data())});
  ctx.outputs.push_back(TensorView{DataType::kFloat32, out, TensorFormat::kLinear, r.y.data()});
  ctx.workspace = ws.empty() ? nullptr : ws.data();
  ctx.workspace_size = ws.size();
  kernel->execute(ctx);
  return r;
}

void expect_bit_equal(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(want.nbytes())), 0) << what;
}

// A random factorization of `volume` into `rank` extents.
Ints factor(int64_t volume, int rank, std::mt19937& rng) {
  Ints dims(static_cast<size_t>(rank), 1);
  std::vector<int64_t> primes;
  for (int64_t v = volume, p = 2; v > 1;) {
    if (v % p == 0) {
      primes.push_back(p);
      v /= p;
    } else {
      ++p;
    }
  }
  for (int64_t p : primes) dims[rng() % dims.size()] *= p;
  return dims;
}

Ints random_perm(int rank, std::mt19937& rng) {
  Ints p(static_cast<size_t>(rank));
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

TEST(ShuffleFast, RandomTransposeReshapeTransposeMatchTheReferenceInBothInputFormats) {
  std::mt19937 rng(11);
  int composed = 0, two_steps = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 3 + static_cast<int>(rng() % 3);
    Dims in;
    for (int k = 0; k < rank; ++k) in.push_back(1 + static_cast<int64_t>(rng() % 6));
    Case c;
    c.in = in;
    if (rng() % 4) c.first = random_perm(rank, rng);
    const int out_rank = 2 + static_cast<int>(rng() % 4);
    if (rng() % 5) c.reshape = factor(in.volume(), out_rank, rng);
    const int after = c.reshape.empty() ? rank : out_rank;
    if (rng() % 4) c.second = random_perm(after, rng);
    const HostTensor x = test::random_tensor(DataType::kFloat32, in, 100 + trial, -1.0, 1.0);
    const HostTensor want = run_kernel(c, x, TensorFormat::kLinear, "reference", 1).y;
    for (int threads : {1, 2}) {
      const Ran linear = run_kernel(c, x, TensorFormat::kLinear, "fast", threads);
      expect_bit_equal(linear.y, want, "linear input, " + c.text());
      (linear.workspace ? two_steps : composed) += threads == 1;
      const Ran nhwc = run_kernel(c, to_channels_last(x), TensorFormat::kChannelsLast, "fast", threads);
      expect_bit_equal(nhwc.y, want, "channels-last input, " + c.text());
    }
  }
  // Most random pairs compose into one transpose; some (e.g. 6x4 -> 4x6 with both transposes
  // moving data) cannot, and take the two-step path with a workspace.
  EXPECT_GT(composed, 150);
  EXPECT_GT(two_steps, 0);
}

// The shapes that take the 8 x 8 register transpose (4-byte elements, both transposed extents of
// 8 or more; with and without remainders past a multiple of 8 and past the 32-element tiles) and
// the whole-run copies counted run by run: attention's shuffles in bert_tiny at batch 8
// (Q and V [8, 16, 128] -> [8, 2, 16, 64], K -> [8, 2, 64, 16], the context back to [8, 16, 128]).
TEST(ShuffleFast, AttentionShufflesAndLargeTransposesMatchTheReference) {
  const std::vector<Case> cases = {
      {Dims{8, 16, 128}, {}, {8, 16, 2, 64}, {0, 2, 1, 3}},
      {Dims{8, 16, 128}, {}, {8, 16, 2, 64}, {0, 2, 3, 1}},
      {Dims{8, 2, 16, 64}, {0, 2, 1, 3}, {8, 16, 128}, {}},
      {Dims{37, 41}, {1, 0}, {}, {}},
      {Dims{3, 19, 13}, {0, 2, 1}, {}, {}},
      {Dims{2, 8, 8}, {0, 2, 1}, {}, {}},
      {Dims{70, 3, 33}, {2, 1, 0}, {}, {}},
      {Dims{5, 9, 17, 3}, {3, 2, 0, 1}, {}, {}},
      {Dims{4, 3, 5, 7, 2}, {4, 0, 3, 1, 2}, {}, {}},
  };
  for (const Case& c : cases) {
    const HostTensor x = test::random_tensor(DataType::kFloat32, c.in, 7, -1.0, 1.0);
    const HostTensor want = run_kernel(c, x, TensorFormat::kLinear, "reference", 1).y;
    for (int threads : {1, 2, 3}) {
      expect_bit_equal(run_kernel(c, x, TensorFormat::kLinear, "fast", threads).y, want,
                       c.text() + ", " + std::to_string(threads) + " threads");
    }
  }
}

TEST(ShuffleFast, YoloHeadFromChannelsLastIsOneTransposeWithoutWorkspace) {
  // [1, 255, 40, 40] -> reshape [1, 3, 85, 40, 40] -> transpose (0, 1, 3, 4, 2), input stored
  // as NHWC: one transpose of 85-float runs.
  Case c{Dims{1, 255, 8, 8}, {}, {1, 3, 85, 8, 8}, {0, 1, 3, 4, 2}};
  const HostTensor x = test::random_tensor(DataType::kFloat32, c.in, 5, -1.0, 1.0);
  const HostTensor want = run_kernel(c, x, TensorFormat::kLinear, "reference", 1).y;
  const Ran r = run_kernel(c, to_channels_last(x), TensorFormat::kChannelsLast, "fast", 2);
  EXPECT_EQ(r.workspace, 0u);
  expect_bit_equal(r.y, want, c.text());
  // The reference kernel reads linear memory only and says so.
  Network net;
  Layer* l = net.add_shuffle(net.add_input("x", DataType::kFloat32, c.in), c.first, c.reshape, c.second);
  const KernelEntry* ref = KernelRegistry::instance().find(DeviceType::kCPU, kLayerShuffle, "reference");
  ASSERT_NE(ref, nullptr);
  EXPECT_FALSE(ref->supports(*l, {TensorDesc{DataType::kFloat32, c.in, TensorFormat::kChannelsLast, true, nullptr}}));
}

// ---- the pass and the layout pass --------------------------------------------------------------

std::vector<std::string> layer_types(const Network& net) {
  std::vector<std::string> t;
  for (int i = 0; i < net.num_layers(); ++i) t.push_back(net.layer(i)->type());
  return t;
}

TEST(ShuffleMerge, ReshapeThenTransposeBecomeOneShuffleWithTheSameResult) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 12, 5});
  Tensor* r = net.add_shuffle(x, {}, {2, 3, 4, 5}, {})->output(0);
  Layer* t = net.add_shuffle(r, {0, 2, 3, 1}, {}, {});
  t->output(0)->set_name("y");
  net.mark_output(t->output(0));
  // Not merged: a Shuffle whose output another layer also reads.
  Tensor* x2 = net.add_input("x2", DataType::kFloat32, Dims{4, 6});
  Tensor* r2 = net.add_shuffle(x2, {}, {2, 12}, {})->output(0);
  Layer* t2 = net.add_shuffle(r2, {1, 0}, {}, {});
  t2->output(0)->set_name("y2");
  net.mark_output(t2->output(0));
  Layer* relu = net.add_activation(r2, ActivationType::kRelu);
  relu->output(0)->set_name("z2");
  net.mark_output(relu->output(0));

  auto merged = net.clone();
  BuilderConfig config;
  std::vector<std::string> log;
  PassContext ctx{config, {}, &log};
  EXPECT_EQ(pass_shuffle_merge(*merged, ctx), 1);
  merged->validate();
  const auto types = layer_types(*merged);
  EXPECT_EQ(std::count(types.begin(), types.end(), std::string(kLayerShuffle)), 3);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("merged into"), std::string::npos) << log[0];

  // CUDA builds are left alone for now.
  BuilderConfig cuda;
  cuda.device = DeviceType::kCUDA;
  PassContext cuda_ctx{cuda, {}, nullptr};
  auto untouched = net.clone();
  EXPECT_EQ(pass_shuffle_merge(*untouched, cuda_ctx), 0);

  // Same outputs as the unmerged network, built without the optimizer.
  const HostTensor xv = test::random_tensor(DataType::kFloat32, Dims{2, 12, 5}, 1, -1.0, 1.0);
  const HostTensor x2v = test::random_tensor(DataType::kFloat32, Dims{4, 6}, 2, -1.0, 1.0);
  std::vector<std::vector<float>> results;
  for (const Network* n : {&net, merged.get()}) {
    BuilderConfig c;
    c.disable_optimizations = true;
    const auto bytes = Builder().build_serialized(*n, c);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto context = engine->create_execution_context();
    context->set_tensor_address("x", const_cast<void*>(xv.data()));
    context->set_tensor_address("x2", const_cast<void*>(x2v.data()));
    std::vector<float> y(120), y2(24), z2(24);
    context->set_tensor_address("y", y.data());
    context->set_tensor_address("y2", y2.data());
    context->set_tensor_address(relu->output(0)->name(), z2.data());
    context->execute();
    y.insert(y.end(), y2.begin(), y2.end());
    y.insert(y.end(), z2.begin(), z2.end());
    results.push_back(y);
  }
  EXPECT_EQ(results[0], results[1]);
  // y[n, b, c, a] = x[n, a, b*5 + c] viewed as [2, 3, 4, 5]: spot-check one element.
  const float* xs = xv.as<float>();
  EXPECT_EQ(results[1][((1 * 4 + 2) * 5 + 3) * 3 + 1], xs[(1 * 12 + 1 * 4 + 2) * 5 + 3]);
}

// A YOLO head: a convolution (channels-last on the CPU) -> Reshape -> Transpose -> output. The
// optimized engine reads the convolution's NHWC output in its one Shuffle: no Reformat back to
// NCHW, one Shuffle, and the same result as the engine built without the layout pass.
TEST(ShuffleMerge, YoloHeadReadsTheChannelsLastConvolutionOutputDirectly) {
  Network net;
  Tensor* x = net.add_input("images", DataType::kFloat32, Dims{1, 8, 10, 10});
  ConvolutionDesc d;
  d.num_output_maps = 3 * 7;
  d.kernel = {1, 1};
  const HostTensor w = test::random_tensor(DataType::kFloat32, Dims{21, 8, 1, 1}, 3, -1.0, 1.0);
  const HostTensor b = test::random_tensor(DataType::kFloat32, Dims{21}, 4, -1.0, 1.0);
  Tensor* c1 = net.add_activation(net.add_convolution(x, d, w, b)->output(0), ActivationType::kRelu)->output(0);
  const HostTensor w2 = test::random_tensor(DataType::kFloat32, Dims{21, 21, 1, 1}, 6, -1.0, 1.0);
  Tensor* c2 = net.add_convolution(c1, d, w2)->output(0);
  Tensor* r = net.add_shuffle(c2, {}, {1, 3, 7, 10, 10}, {})->output(0);
  Layer* t = net.add_shuffle(r, {0, 1, 3, 4, 2}, {}, {});
  t->output(0)->set_name("detections");
  net.mark_output(t->output(0));
  const HostTensor xv = test::random_tensor(DataType::kFloat32, Dims{1, 8, 10, 10}, 9, -1.0, 1.0);

  std::vector<std::vector<float>> results;
  for (bool layout : {true, false}) {
    BuilderConfig config;
    config.num_threads = 1;
    if (!layout) config.disabled_passes = {"layout"};
    BuildReport report;
    const auto bytes = Builder().build_serialized(net, config, &report);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ctx = engine->create_execution_context();
    ctx->set_profiling(true);
    std::vector<float> y(3 * 10 * 10 * 7, -1.f);
    ctx->set_tensor_address("images", const_cast<void*>(xv.data()));
    ctx->set_tensor_address("detections", y.data());
    ctx->execute();
    results.push_back(y);
    const std::string profile = ctx->profile_report();
    std::string log;
    for (const auto& line : report.pass_log) log += line + "\n";
    if (layout) {
      EXPECT_NE(log.find("reads channels-last"), std::string::npos) << log;
      EXPECT_EQ(profile.find(".nchw"), std::string::npos) << "a Reformat back to NCHW remains:\n" << profile;
      size_t shuffles = 0;
      for (size_t at = profile.find("[Shuffle"); at != std::string::npos; at = profile.find("[Shuffle", at + 1))
        ++shuffles;
      EXPECT_EQ(shuffles, 1u) << profile;
    }
  }
  EXPECT_EQ(results[0].size(), results[1].size());
  double worst = 0;
  for (size_t i = 0; i < results[0].size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(results[0][i] - results[1][i])));
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace kiln
