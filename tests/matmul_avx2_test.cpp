// "packed_avx2", kiln's own MatrixMultiply with a constant b packed once
// (src/backends/cpu/matmul_avx2.cpp), against the reference kernel through the op harness (guard
// bytes around the output and the workspace, NaN checks, two runs compared): rows that are not a
// multiple of the register block's 6 or of a work chunk's 48, columns that are not a multiple of a
// panel's 16 (one column, 15, 17, 255), K from 1 to 1,000, leading batch dims folded into the rows,
// b transposed, a 1-D a; and what it declines (a non-constant b, a transposed a, a batched b, K
// above its bound). Its kernel object re-prepared for other row counts reuses the packed b.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "src/backends/kernel.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

constexpr const char* kTactic = "packed_avx2";

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

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

test::Outcome outcome_of(const test::OpCase& c, std::string* message) {
  const auto results = test::run_op_case(c, DeviceType::kCPU, [](const std::string& t) { return t == kTactic; });
  for (const test::KernelResult& r : results) {
    if (r.tactic != kTactic) continue;
    *message = r.message;
    return r.outcome;
  }
  *message = "not run";
  return test::Outcome::kUnsupported;
}

TEST(MatmulPackedAvx2, MatchesTheReferenceKernel) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  struct Case {
    std::string name;
    Dims a, b;
    bool transpose_b;
  };
  const std::vector<Case> cases = {
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
  for (const Case& k : cases) {
    std::string message;
    EXPECT_EQ(outcome_of(matmul_case(k.name, k.a, k.b, true, k.transpose_b), &message), test::Outcome::kPassed)
        << k.name << ": " << message;
  }
}

TEST(MatmulPackedAvx2, DeclinesWhatItDoesNotCover) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2 + FMA here";
  std::string message;
  EXPECT_EQ(outcome_of(matmul_case("b_not_constant", Dims{8, 16}, Dims{16, 8}, false), &message),
            test::Outcome::kUnsupported);
  EXPECT_EQ(outcome_of(matmul_case("a_transposed", Dims{16, 8}, Dims{16, 8}, true, false, true), &message),
            test::Outcome::kUnsupported);
  EXPECT_EQ(outcome_of(matmul_case("batched_b", Dims{2, 8, 16}, Dims{2, 16, 8}, true), &message),
            test::Outcome::kUnsupported);
  EXPECT_EQ(outcome_of(matmul_case("k_above_4096", Dims{2, 4097}, Dims{4097, 3}, true), &message),
            test::Outcome::kUnsupported);
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
  BuilderConfig config;
  config.num_threads = 2;
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 5, kK}, Dims{4, 5, kK}, Dims{8, 5, kK});
  config.profiles = {p};
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "fully connected");
  EXPECT_NE(engine->describe().find(kTactic), std::string::npos) << engine->describe();
  auto ctx = engine->create_execution_context();
  for (int64_t batch : {1, 7, 3}) {
    const HostTensor in =
        test::random_tensor(DataType::kFloat32, Dims{batch, 5, kK}, 10 + static_cast<uint64_t>(batch));
    std::vector<float> out(static_cast<size_t>(batch * 5 * kN), std::nanf(""));
    ctx->set_input_shape("x", in.dims());
    ctx->set_tensor_address("x", const_cast<void*>(in.data()));
    ctx->set_tensor_address("y", out.data());
    ctx->execute();
    const float* xa = in.as<float>();
    const float* wa = w.as<float>();
    for (int64_t r = 0; r < batch * 5; ++r) {
      for (int64_t c = 0; c < kN; ++c) {
        double want = 0;
        for (int64_t k = 0; k < kK; ++k) want += static_cast<double>(xa[r * kK + k]) * wa[k * kN + c];
        ASSERT_NEAR(out[static_cast<size_t>(r * kN + c)], want, 1e-4 * (1 + std::fabs(want)))
            << "batch " << batch << ", row " << r << ", column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
