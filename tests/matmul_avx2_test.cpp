// "packed_avx2" and "packed_avx512", kiln's own MatrixMultiply with a constant b packed once
// (src/backends/cpu/matmul_avx2.cpp; each where the processor has it), against the reference kernel through the op
// harness (guard bytes around the output and the workspace, NaN checks, two runs compared): rows that are not a
// multiple of the register block's 6 or of a work chunk's 48, columns that are not a multiple of a
// panel's 16 (one column, 15, 17, 255), K from 1 to 1,000, leading batch dims folded into the rows,
// b transposed, a 1-D a; and what it declines (a non-constant b, a transposed a, a batched b, K
// above its bound). Its kernel object re-prepared for other row counts reuses the packed b. The
// bias and activation CPU builds fuse into the product (activation_fusion) against the reference
// kernel, and through the builder: a bert-style layer (MatMul, bias Add, GELU written out) becomes
// one layer whose results match double precision. "batched_avx2" and "batched_avx512" (products
// of two activations, b packed per call) against the reference kernel the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "src/backends/kernel.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx512() { return has_avx2() && __builtin_cpu_supports("avx512f"); }

// The tactics this processor runs: packed_avx2, and packed_avx512 (the same panels, an 8 x 32
// register block) with AVX-512F.
std::vector<std::string> tactics() {
  std::vector<std::string> t;
  if (has_avx2()) t.push_back("packed_avx2");
  if (has_avx512()) t.push_back("packed_avx512");
  return t;
}

test::OpCase matmul_case(const std::string& name, const Dims& a, const Dims& b, bool b_constant,
                         bool transpose_b = false, bool transpose_a = false) {
  test::OpCase c;
  c.name = name;
  c.layer_type = kLayerMatrixMultiply;
  test::InputSpec as, bs;
  as.dims = a;
  bs.dims = b;
  bs.constant = b_constant;
  bs.low = -0.5;
  bs.high = 0.5;
  c.inputs = {as, bs};
  if (transpose_b) c.attrs.set("transpose_b", int64_t{1});
  if (transpose_a) c.attrs.set("transpose_a", int64_t{1});
  c.rtol = 1e-4;
  c.atol = 1e-4;
  return c;
}

test::Outcome outcome_of(const test::OpCase& c, const std::string& tactic, std::string* message) {
  const auto results = test::run_op_case(c, DeviceType::kCPU, [&](const std::string& t) { return t == tactic; });
  for (const test::KernelResult& r : results) {
    if (r.tactic != tactic) continue;
    *message = r.message;
    return r.outcome;
  }
  *message = "not run";
  return test::Outcome::kUnsupported;
}

// A product's name, a and b dims, and whether b is transposed.
struct ProductCase {
  std::string name;
  Dims a, b;
  bool transpose_b;
};

void expect_passes(const test::OpCase& c, const std::string& tactic) {
  std::string message;
  EXPECT_EQ(outcome_of(c, tactic, &message), test::Outcome::kPassed) << tactic << ", " << c.name << ": " << message;
}

// `c` with a constant bias of n values as its third input and `activation` (none where empty).
test::OpCase with_bias(test::OpCase c, int64_t n, const std::string& activation) {
  test::InputSpec bias;
  bias.dims = Dims{n};
  bias.constant = true;
  c.inputs.push_back(bias);
  if (!activation.empty()) c.attrs.set("activation", activation);
  return c;
}

// `c` (a product whose output has dims `out`) with a residual of those dims as its fourth input
// (the bias omitted where `c` has none).
test::OpCase with_residual(test::OpCase c, const Dims& out) {
  if (c.inputs.size() < 3) {
    test::InputSpec none;
    none.omitted = true;
    c.inputs.push_back(none);
  }
  test::InputSpec residual;
  residual.dims = out;
  c.inputs.push_back(residual);
  c.name += "_residual";
  return c;
}

void expect_declined(const test::OpCase& c, const std::string& tactic) {
  std::string message;
  EXPECT_EQ(outcome_of(c, tactic, &message), test::Outcome::kUnsupported) << tactic << ", " << c.name;
}

TEST(MatmulPackedAvx2, MatchesTheReferenceKernel) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<ProductCase> cases = {
      {"bert_intermediate", Dims{8, 16, 128}, Dims{128, 512}, false},
      {"bert_output", Dims{8, 16, 512}, Dims{512, 128}, false},
      {"one_row", Dims{1, 64}, Dims{64, 40}, false},
      {"one_column", Dims{13, 7}, Dims{7, 1}, false},
      {"rows_5_cols_15", Dims{5, 33}, Dims{33, 15}, false},
      {"rows_49_cols_17", Dims{49, 20}, Dims{20, 17}, false},
      {"rows_100_cols_255", Dims{100, 64}, Dims{64, 255}, false},
      {"k_1", Dims{7, 1}, Dims{1, 9}, false},
      {"k_1000", Dims{12, 1000}, Dims{1000, 24}, false},
      {"batched_a", Dims{2, 3, 5, 24}, Dims{24, 31}, false},
      {"transposed_b", Dims{3, 10, 24}, Dims{40, 24}, true},
      {"vector_a", Dims{24}, Dims{24, 19}, false},
  };
  for (const std::string& tactic : tactics()) {
    for (const ProductCase& k : cases) {
      expect_passes(matmul_case(k.name, k.a, k.b, true, k.transpose_b), tactic);
    }
  }
}

TEST(MatmulPackedAvx2, DeclinesWhatItDoesNotCover) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  for (const std::string& tactic : tactics()) {
    expect_declined(matmul_case("b_not_constant", Dims{8, 16}, Dims{16, 8}, false), tactic);
    expect_declined(matmul_case("a_transposed", Dims{16, 8}, Dims{16, 8}, true, false, true), tactic);
    expect_declined(matmul_case("batched_b", Dims{2, 8, 16}, Dims{2, 16, 8}, true), tactic);
    expect_declined(matmul_case("k_above_4096", Dims{2, 4097}, Dims{4097, 3}, true), tactic);
  }
}

TEST(MatmulPackedAvx2, BiasAndActivationMatchTheReference) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  struct Case {
    std::string name;
    Dims a, b;
    std::string activation;
  };
  const std::vector<Case> cases = {
      {"bias_only", Dims{8, 16, 128}, Dims{128, 40}, ""},
      {"bias_gelu", Dims{8, 16, 128}, Dims{128, 512}, "gelu_erf"},
      {"bias_relu_rows_49_cols_17", Dims{49, 20}, Dims{20, 17}, "relu"},
      {"bias_silu_one_column", Dims{13, 7}, Dims{7, 1}, "silu"},
      {"bias_sigmoid_cols_255", Dims{3, 11, 64}, Dims{64, 255}, "sigmoid"},
      {"bias_gelu_rows_12_nine_panels", Dims{12, 33}, Dims{33, 140}, "gelu_erf"},
  };
  for (const std::string& tactic : tactics()) {
    for (const Case& k : cases) {
      expect_passes(with_bias(matmul_case(k.name, k.a, k.b, true), k.b[1], k.activation), tactic);
    }
  }
  // The residual (activation_fusion's step 2c), added before the activation, with and without a
  // bias, on full and partial panels and several row chunks.
  for (const std::string& tactic : tactics()) {
    expect_passes(
        with_residual(matmul_case("attention_output", Dims{8, 16, 128}, Dims{128, 128}, true), Dims{8, 16, 128}),
        tactic);
    expect_passes(with_residual(with_bias(matmul_case("bert_output", Dims{8, 16, 512}, Dims{512, 128}, true), 128, ""),
                                Dims{8, 16, 128}),
                  tactic);
    expect_passes(with_residual(with_bias(matmul_case("relu_cols_17", Dims{49, 20}, Dims{20, 17}, true), 17, "relu"),
                                Dims{49, 17}),
                  tactic);
  }
  // An activation activation_avx2.h does not compute: declined (the builder then leaves the
  // layers unfused).
  for (const std::string& tactic : tactics()) {
    expect_declined(with_bias(matmul_case("bias_mish", Dims{4, 8}, Dims{8, 16}, true), 16, "mish"), tactic);
  }
}

// "batched_avx512" / "batched_avx2": products of two activations (attention's Q . K^T and P . V),
// each batch matrix's b packed per call into the workspace, against the reference kernel: bert's
// attention shapes, broadcast batch dims, a 2-D b that is not a constant, rows, columns and K off
// the register blocks' multiples, enough work for both of the harness's threads (several chunks
// of one matrix on a thread, one packing), and the fused bias and activation.
std::vector<std::string> batched_tactics() {
  std::vector<std::string> t;
  if (has_avx2()) t.push_back("batched_avx2");
  if (has_avx512()) t.push_back("batched_avx512");
  return t;
}

TEST(MatmulBatched, MatchesTheReferenceKernel) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  const std::vector<ProductCase> cases = {
      {"attention_scores", Dims{8, 2, 16, 64}, Dims{8, 2, 16, 64}, true},
      {"attention_values", Dims{8, 2, 16, 16}, Dims{8, 2, 16, 64}, false},
      {"broadcast_batch", Dims{2, 1, 5, 24}, Dims{3, 24, 7}, false},
      {"broadcast_a_matrix", Dims{5, 24}, Dims{3, 24, 17}, false},
      {"b_matrix_not_constant", Dims{4, 9, 24}, Dims{24, 33}, false},
      {"transposed_cols_1", Dims{3, 13, 7}, Dims{3, 1, 7}, true},
      {"cols_15_rows_49", Dims{2, 49, 20}, Dims{2, 20, 15}, false},
      {"k_1", Dims{3, 7, 1}, Dims{3, 1, 9}, false},
      {"k_1000", Dims{2, 12, 1000}, Dims{2, 24, 1000}, true},
      {"two_threads_many_chunks", Dims{4, 3, 100, 40}, Dims{4, 3, 40, 33}, false},
      {"two_threads_transposed", Dims{6, 50, 64}, Dims{6, 70, 64}, true},
  };
  for (const std::string& tactic : batched_tactics()) {
    for (const ProductCase& k : cases) {
      expect_passes(matmul_case(k.name, k.a, k.b, false, k.transpose_b), tactic);
    }
    // The fused bias and activation (activation_fusion), on the tile the product just wrote.
    expect_passes(with_bias(matmul_case("bias_gelu", Dims{3, 2, 10, 24}, Dims{3, 2, 24, 40}, false), 40, "gelu_erf"),
                  tactic);
    // The residual: each batch matrix's own, with a broadcast a.
    expect_passes(with_residual(matmul_case("broadcast", Dims{5, 24}, Dims{3, 24, 17}, false), Dims{3, 5, 17}), tactic);
    expect_passes(
        with_residual(with_bias(matmul_case("bias_silu", Dims{3, 2, 10, 24}, Dims{3, 2, 24, 40}, false), 40, "silu"),
                      Dims{3, 2, 10, 40}),
        tactic);
  }
}

TEST(MatmulBatched, DeclinesWhatItDoesNotCover) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  for (const std::string& tactic : batched_tactics()) {
    // A constant 2-D b is packed_avx2's (packed once, not per call).
    expect_declined(matmul_case("b_constant_matrix", Dims{8, 16}, Dims{16, 8}, true), tactic);
    expect_declined(matmul_case("a_transposed", Dims{2, 16, 8}, Dims{2, 16, 8}, false, false, true), tactic);
    expect_declined(matmul_case("vector_b", Dims{2, 3, 8}, Dims{8}, false), tactic);
    expect_declined(matmul_case("k_above_4096", Dims{2, 2, 4097}, Dims{2, 4097, 3}, false), tactic);
  }
}

// A CPU engine of `net` (input x [batch, 5, k]) for batch 1 to 8, on 2 threads, kernels by priority.
std::shared_ptr<Engine> build_batched(const Network& net, int64_t k, const std::string& name) {
  BuilderConfig config;
  config.num_threads = 2;
  config.time_tactics = false;  // the priority order: the packed tactic (timing may pick oneDNN)
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 5, k}, Dims{4, 5, k}, Dims{8, 5, k});
  config.profiles = {p};
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), name);
}

// Runs `engine` (x [batch, 5, k] -> y [batch, 5, n]) at batch 1, 7 and 3 on one context (each
// shape prepares the kernel again) and checks every y[row, column] against want(x's row, column),
// computed in double precision.
void expect_batches(Engine& engine, int64_t k, int64_t n, uint64_t seed,
                    const std::function<double(const float*, int64_t)>& want) {
  auto ctx = engine.create_execution_context();
  for (int64_t batch : {1, 7, 3}) {
    const HostTensor in =
        test::random_tensor(DataType::kFloat32, Dims{batch, 5, k}, seed + static_cast<uint64_t>(batch));
    std::vector<float> out(static_cast<size_t>(batch * 5 * n), std::nanf(""));
    ctx->set_input_shape("x", in.dims());
    ctx->set_tensor_address("x", const_cast<void*>(in.data()));
    ctx->set_tensor_address("y", out.data());
    ctx->execute();
    for (int64_t r = 0; r < batch * 5; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        const double w = want(in.as<float>() + r * k, c);
        ASSERT_NEAR(out[static_cast<size_t>(r * n + c)], w, 1e-4 * (1 + std::fabs(w)))
            << "batch " << batch << ", row " << r << ", column " << c;
      }
    }
  }
}

// A bert-style pair of fully connected layers as exporters write them (MatMul, an Add of the
// bias, GELU as Div, Erf, Add, Mul, Mul, then the next MatMul and its bias Add) on a dynamic batch:
// a CPU build makes them two MatrixMultiply layers, the first with the bias and gelu_erf, the
// second with its bias (it reads the first's fused output: bert_tiny's output/dense bias stayed an
// Add of its own before session 29), run by this tactic, and the results at batch 1, 7 and 3 match
// double precision.
TEST(MatmulPackedAvx2, ABertLayerBecomesOneProductWithBiasAndGelu) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  constexpr int64_t kK = 48, kN = 72, kN2 = 24;
  const HostTensor w = test::random_tensor(DataType::kFloat32, Dims{kK, kN}, 5, -0.5, 0.5);
  const HostTensor bias = test::random_tensor(DataType::kFloat32, Dims{kN}, 6, -1.0, 1.0);
  const HostTensor w2 = test::random_tensor(DataType::kFloat32, Dims{kN, kN2}, 7, -0.5, 0.5);
  const HostTensor bias2 = test::random_tensor(DataType::kFloat32, Dims{kN2}, 8, -1.0, 1.0);
  Network net;
  auto scalar = [&](float v) {
    return net.add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{v}))->output(0);
  };
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 5, kK});
  Tensor* mm = net.add_matrix_multiply(x, false, net.add_constant(w, "w")->output(0), false)->output(0);
  Tensor* h = net.add_elementwise(net.add_constant(bias, "bias")->output(0), mm, ElementWiseOp::kSum)->output(0);
  Tensor* d = net.add_elementwise(h, scalar(1.4142135f), ElementWiseOp::kDiv)->output(0);
  Tensor* e = net.add_unary(d, UnaryOp::kErf)->output(0);
  Tensor* one_plus = net.add_elementwise(e, scalar(1.0f), ElementWiseOp::kSum)->output(0);
  Tensor* xs = net.add_elementwise(h, one_plus, ElementWiseOp::kProd)->output(0);
  Tensor* g = net.add_elementwise(xs, scalar(0.5f), ElementWiseOp::kProd)->output(0);
  Tensor* mm2 = net.add_matrix_multiply(g, false, net.add_constant(w2, "w2")->output(0), false)->output(0);
  Tensor* y = net.add_elementwise(net.add_constant(bias2, "bias2")->output(0), mm2, ElementWiseOp::kSum)->output(0);
  y->set_name("y");
  net.mark_output(y);
  auto engine = build_batched(net, kK, "bert layer");
  const std::string described = engine->describe();
  EXPECT_NE(described.find("layers (2, in execution order)"), std::string::npos) << described;
  EXPECT_NE(described.find(": MatrixMultiply+gelu_erf kernel=" + tactics().back()), std::string::npos) << described;
  EXPECT_NE(described.find(": MatrixMultiply kernel=" + tactics().back()), std::string::npos) << described;
  const float* wa = w.as<float>();
  const float* ba = bias.as<float>();
  const float* w2a = w2.as<float>();
  const float* b2a = bias2.as<float>();
  expect_batches(*engine, kK, kN2, 20, [&](const float* x, int64_t c) {
    double v2 = b2a[c];
    for (int64_t j = 0; j < kN; ++j) {
      double v = ba[j];
      for (int64_t k = 0; k < kK; ++k) v += static_cast<double>(x[k]) * wa[k * kN + j];
      v2 += 0.5 * v * std::erfc(-v / std::sqrt(2.0)) * w2a[j * kN2 + c];
    }
    return v2;
  });
}

// A transformer's attention output as exporters write it: MatMul, the bias Add, the residual Add
// of the layer's input: a CPU build makes the three one MatrixMultiply (bias and residual in the
// epilogue, activation_fusion's steps 2b and 2c). A second product's sum with a [1, 5, K]
// constant, which broadcasts over the batch, is no residual and stays a layer of its own (its
// product is not fused: the constant is no [K] bias either). Results at batch 1, 7 and 3 against
// double precision.
TEST(MatmulPackedAvx2, AResidualSumAfterAProductIsFusedIntoIt) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  constexpr int64_t kK = 40, kRows = 5;
  const HostTensor w = test::random_tensor(DataType::kFloat32, Dims{kK, kK}, 15, -0.5, 0.5);
  const HostTensor bias = test::random_tensor(DataType::kFloat32, Dims{kK}, 16, -1.0, 1.0);
  const HostTensor plane = test::random_tensor(DataType::kFloat32, Dims{1, kRows, kK}, 17, -1.0, 1.0);
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, kRows, kK});
  Tensor* mm = net.add_matrix_multiply(x, false, net.add_constant(w, "w")->output(0), false)->output(0);
  Tensor* h = net.add_elementwise(mm, net.add_constant(bias, "bias")->output(0), ElementWiseOp::kSum)->output(0);
  Tensor* r = net.add_elementwise(x, h, ElementWiseOp::kSum)->output(0);
  Tensor* mm2 = net.add_matrix_multiply(r, false, net.add_constant(w, "w2")->output(0), false)->output(0);
  Tensor* y = net.add_elementwise(mm2, net.add_constant(plane, "plane")->output(0), ElementWiseOp::kSum)->output(0);
  y->set_name("y");
  net.mark_output(y);
  auto engine = build_batched(net, kK, "attention output");
  const std::string described = engine->describe();
  EXPECT_NE(described.find("layers (3, in execution order)"), std::string::npos) << described;
  EXPECT_NE(described.find("in: x ?x5x40, w 40x40, bias 40, x ?x5x40"), std::string::npos) << described;
  const float* wa = w.as<float>();
  const float* ba = bias.as<float>();
  const float* pa = plane.as<float>();
  auto ctx = engine->create_execution_context();
  for (int64_t batch : {1, 7, 3}) {
    const HostTensor in = test::random_tensor(DataType::kFloat32, Dims{batch, kRows, kK}, 30 + batch);
    std::vector<float> out(static_cast<size_t>(batch * kRows * kK), std::nanf(""));
    ctx->set_input_shape("x", in.dims());
    ctx->set_tensor_address("x", const_cast<void*>(in.data()));
    ctx->set_tensor_address("y", out.data());
    ctx->execute();
    for (int64_t row = 0; row < batch * kRows; ++row) {
      const float* xr = in.as<float>() + row * kK;
      std::vector<double> rr(static_cast<size_t>(kK));
      for (int64_t c = 0; c < kK; ++c) {
        double v = static_cast<double>(ba[c]) + xr[c];
        for (int64_t k = 0; k < kK; ++k) v += static_cast<double>(xr[k]) * wa[k * kK + c];
        rr[static_cast<size_t>(c)] = v;
      }
      for (int64_t c = 0; c < kK; ++c) {
        double want = pa[(row % kRows) * kK + c];
        for (int64_t k = 0; k < kK; ++k) want += rr[static_cast<size_t>(k)] * wa[k * kK + c];
        ASSERT_NEAR(out[static_cast<size_t>(row * kK + c)], want, 1e-4 * (1 + std::fabs(want)))
            << "batch " << batch << ", row " << row << ", column " << c;
      }
    }
  }
}

// Through the public API: a fully connected layer on a dynamic batch, built once, run at batch 1, 7
// and 3 (each shape prepares the kernel again, with the packed b kept); the engine picks this
// tactic and its results match a double-precision product.
TEST(MatmulPackedAvx2, ADynamicBatchReusesThePackedWeights) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  constexpr int64_t kK = 96, kN = 40;
  const HostTensor w = test::random_tensor(DataType::kFloat32, Dims{kK, kN}, 3, -0.5, 0.5);
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 5, kK});
  Tensor* b = net.add_constant(w, "w")->output(0);
  Tensor* y = net.add_matrix_multiply(x, false, b, false)->output(0);
  y->set_name("y");
  net.mark_output(y);
  auto engine = build_batched(net, kK, "fully connected");
  EXPECT_NE(engine->describe().find("kernel=" + tactics().back()), std::string::npos) << engine->describe();
  const float* wa = w.as<float>();
  expect_batches(*engine, kK, kN, 10, [&](const float* x, int64_t c) {
    double v = 0;
    for (int64_t k = 0; k < kK; ++k) v += static_cast<double>(x[k]) * wa[k * kN + c];
    return v;
  });
}

}  // namespace
}  // namespace kiln
