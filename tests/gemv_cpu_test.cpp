// Tests of the CPU "gemv" tactic of Gemm (src/backends/cpu/gemv_cpu.cpp): 1-9 rows against
// constant weights, against the reference Gemm kernel (transposes, bias shapes, fused
// activations, odd K and N, 1 and 2 threads); what it declines; and an engine whose classifier
// head takes it and matches the unoptimized build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "op_harness.h"
#include "src/backends/kernel.h"
#include "src/ir/shape_inference.h"

namespace kiln {
namespace {

struct GemmCase {
  int64_t M, K, N;
  bool trans_a, trans_b;
  int bias;  // 0: none, 1: [N], 2: [1, N]
  std::string activation;
  std::string text() const {
    return "M" + std::to_string(M) + " K" + std::to_string(K) + " N" + std::to_string(N) + (trans_a ? " tA" : "") +
           (trans_b ? " tB" : "") + " bias" + std::to_string(bias) + " " + activation;
  }
};

struct Built {
  Network net;
  Layer* layer = nullptr;
  HostTensor a, b, c;
};

void build(const GemmCase& g, Built& out, double alpha = 1.0, double beta = 1.0) {
  const Dims a_dims = g.trans_a ? Dims{g.K, g.M} : Dims{g.M, g.K};
  const Dims b_dims = g.trans_b ? Dims{g.N, g.K} : Dims{g.K, g.N};
  out.a = test::random_tensor(DataType::kFloat32, a_dims, 1 + g.K, -1.0, 1.0);
  out.b = test::random_tensor(DataType::kFloat32, b_dims, 2 + g.N, -1.0, 1.0);
  Tensor* a = out.net.add_input("a", DataType::kFloat32, a_dims);
  Tensor* b = out.net.add_constant(out.b, "w")->output(0);
  Tensor* c = nullptr;
  if (g.bias) {
    out.c = test::random_tensor(DataType::kFloat32, g.bias == 1 ? Dims{g.N} : Dims{1, g.N}, 3, -1.0, 1.0);
    c = out.net.add_constant(out.c, "bias")->output(0);
  }
  out.layer = out.net.add_gemm(a, b, c, alpha, beta, g.trans_a, g.trans_b);
  if (!g.activation.empty()) {
    out.layer->attrs().set("activation", g.activation);
    out.layer->attrs().set("activation_alpha", 0.1);
    out.layer->attrs().set("activation_beta", 0.0);
  }
}

std::vector<TensorDesc> descs(const Built& b) {
  std::vector<TensorDesc> d{TensorDesc{DataType::kFloat32, b.a.dims(), TensorFormat::kLinear, true, nullptr},
                            TensorDesc{DataType::kFloat32, b.b.dims(), TensorFormat::kLinear, true, &b.b}};
  if (!b.c.empty()) d.push_back(TensorDesc{DataType::kFloat32, b.c.dims(), TensorFormat::kLinear, true, &b.c});
  return d;
}

// `ask`: check that the tactic takes the layer first (gemv computes more than 4 rows in every
// build but takes them only where oneDNN is not built in).
HostTensor run_tactic(const Built& b, const std::string& tactic, int threads, bool ask = true) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerGemm, tactic);
  if (!e) throw Error("no CPU Gemm tactic " + tactic);
  const auto d = descs(b);
  if (ask && e->supports && !e->supports(*b.layer, d)) throw Error(tactic + " declines the layer");
  std::vector<TensorState> states(d.size());
  std::vector<const TensorState*> ptrs;
  for (size_t i = 0; i < d.size(); ++i) {
    states[i].dims = d[i].dims;
    if (d[i].value) states[i].value = std::make_shared<HostTensor>(*d[i].value);
    ptrs.push_back(&states[i]);
  }
  const Dims out = infer_layer(*b.layer, ptrs).at(0).second;
  auto kernel = e->create(*b.layer);
  kernel->prepare(*b.layer, d, {TensorDesc{DataType::kFloat32, out, TensorFormat::kLinear, true, nullptr}}, threads);
  HostTensor y(DataType::kFloat32, out);
  std::vector<uint8_t> ws(kernel->workspace_size());
  KernelContext ctx;
  ctx.layer = b.layer;
  ctx.num_threads = threads;
  const HostTensor* values[3] = {&b.a, &b.b, &b.c};
  for (size_t i = 0; i < d.size(); ++i) {
    ctx.inputs.push_back(
        TensorView{DataType::kFloat32, d[i].dims, TensorFormat::kLinear, const_cast<void*>(values[i]->data())});
  }
  ctx.outputs.push_back(TensorView{DataType::kFloat32, out, TensorFormat::kLinear, y.data()});
  ctx.workspace = ws.empty() ? nullptr : ws.data();
  ctx.workspace_size = ws.size();
  kernel->execute(ctx);
  return y;
}

TEST(GemvCpu, MatchesTheReferenceGemm) {
  int cases = 0;
  // 5 and 9 rows: passes of 4 over the weights (taken in builds without oneDNN).
  for (int64_t M : {1, 2, 3, 4, 5, 9}) {
    for (int64_t K : {1, 15, 16, 33, 576}) {
      for (int64_t N : {1, 7, 100}) {
        for (int variant = 0; variant < 4; ++variant) {
          const GemmCase g{M,
                           K,
                           N,
                           (variant & 1) != 0,
                           (variant & 2) != 0,
                           static_cast<int>((M + K + variant) % 3),
                           variant == 3   ? "hard_swish"
                           : variant == 1 ? "leaky_relu"
                                          : ""};
          Built b;
          build(g, b);
          const HostTensor want = run_tactic(b, "reference", 1);
          for (int threads : {1, 2}) {
            const HostTensor got = run_tactic(b, "gemv", threads, M <= 4);
            std::string msg;
            // Sums of K products of values in [-1, 1] in another order.
            const double atol = 1e-6 * std::max<double>(1.0, std::sqrt(static_cast<double>(K))) * 4;
            EXPECT_TRUE(test::compare_tensors(got, want, 1e-5, atol, nullptr, &msg)) << g.text() << ": " << msg;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 360);
}

TEST(GemvCpu, DeclinesWhatItDoesNotCover) {
  const KernelEntry* e = KernelRegistry::instance().find(DeviceType::kCPU, kLayerGemm, "gemv");
  ASSERT_NE(e, nullptr);
  auto declines = [&](const GemmCase& g, double alpha, double beta, bool constant_b, const std::string& why) {
    Built b;
    build(g, b, alpha, beta);
    auto d = descs(b);
    if (!constant_b) d[1].value = nullptr;
    EXPECT_FALSE(e->supports(*b.layer, d)) << why;
  };
#if KILN_HAVE_ONEDNN  // without oneDNN it takes any number of rows
  declines({5, 16, 8, false, false, 1, ""}, 1.0, 1.0, true, "5 rows");
#endif
  declines({1, 16, 8, false, false, 1, ""}, 2.0, 1.0, true, "alpha 2");
  declines({1, 16, 8, false, false, 1, ""}, 1.0, 0.5, true, "beta 0.5 with a bias");
  declines({1, 16, 8, false, false, 0, ""}, 1.0, 1.0, false, "weights that are not constant");
  // C shaped like the output (not a per-column bias).
  Built full;
  build({2, 16, 8, false, false, 0, ""}, full);
  auto d = descs(full);
  const HostTensor c = test::random_tensor(DataType::kFloat32, Dims{2, 8}, 4, -1.0, 1.0);
  d.push_back(TensorDesc{DataType::kFloat32, c.dims(), TensorFormat::kLinear, true, &c});
  EXPECT_FALSE(e->supports(*full.layer, d)) << "C of the output's shape";
  // What it covers, for contrast.
  Built ok;
  build({4, 16, 8, true, true, 2, "relu"}, ok);
  EXPECT_TRUE(e->supports(*ok.layer, descs(ok)));
}

// A classifier head (global pool output [N, 576] -> Gemm 1024 + hard-swish -> Gemm 10): at
// batch 2 the optimized engine runs both products on "gemv" and matches the unoptimized engine.
TEST(GemvCpu, ClassifierHeadTakesItAndMatchesTheUnoptimizedEngine) {
  Network net;
  Tensor* x = net.add_input("features", DataType::kFloat32, Dims{2, 576});
  const HostTensor w1 = test::random_tensor(DataType::kFloat32, Dims{1024, 576}, 7, -0.1, 0.1);
  const HostTensor b1 = test::random_tensor(DataType::kFloat32, Dims{1024}, 8, -0.1, 0.1);
  const HostTensor w2 = test::random_tensor(DataType::kFloat32, Dims{10, 1024}, 9, -0.1, 0.1);
  Layer* g1 = net.add_gemm(x, net.add_constant(w1)->output(0), net.add_constant(b1)->output(0), 1.0, 1.0, false, true);
  Tensor* h = net.add_activation(g1->output(0), ActivationType::kHardSwish)->output(0);
  Layer* g2 = net.add_gemm(h, net.add_constant(w2)->output(0), nullptr, 1.0, 1.0, false, true);
  g2->output(0)->set_name("logits");
  net.mark_output(g2->output(0));
  const HostTensor xv = test::random_tensor(DataType::kFloat32, Dims{2, 576}, 10, -1.0, 1.0);
  std::vector<HostTensor> results;
  for (bool optimize : {true, false}) {
    BuilderConfig config;
    config.num_threads = 2;
    config.time_tactics = false;  // the priority order, where gemv comes first (timing may pick oneDNN)
    config.disable_optimizations = !optimize;
    const auto bytes = Builder().build_serialized(net, config);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ctx = engine->create_execution_context();
    ctx->set_profiling(true);
    results.emplace_back(DataType::kFloat32, Dims{2, 10});
    ctx->set_tensor_address("features", const_cast<void*>(xv.data()));
    ctx->set_tensor_address("logits", results.back().data());
    ctx->execute();
    if (optimize) {
      const std::string report = ctx->profile_report();
      size_t gemv = 0;
      for (size_t at = report.find("gemv"); at != std::string::npos; at = report.find("gemv", at + 1)) ++gemv;
      EXPECT_EQ(gemv, 2u) << report;
    }
  }
  std::string msg;
  EXPECT_TRUE(test::compare_tensors(results[0], results[1], 1e-4, 1e-5, nullptr, &msg)) << msg;
}

}  // namespace
}  // namespace kiln
