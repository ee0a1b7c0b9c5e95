// The GPU suite's RNN tests (CI compiles them; the CUDA ones skip without a CUDA device): every
// model of tests/data/rnn (RNN / GRU / LSTM cases whose CPU reference ops_rnn_test.cpp checks
// against ONNX Runtime) becomes an op-harness case, the importer's RNN layer with the stored
// inputs (X a network input, the rest constants, as an importer makes initializers), and runs
// through every CUDA kernel of the layer type in fp32, fp16 and fp64 against the CPU reference.
// A few larger random cases add what the ONNX models are too small to reach: input and hidden
// sizes above a warp's 32 lanes, batch-first layout with sequence lengths, every option at once.
// The models are the rnn family of the op table (tests/op_table.h), lifted to their one RNN
// layer; the table's CPU runner checks that layer against ONNX Runtime's stored outputs, so that
// the GPU comparison runs the intended layer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "op_harness.h"
#include "tests/op_table.h"

namespace kiln {
namespace {

constexpr DataType kF32 = DataType::kFloat32;

// The case with its float32 inputs as float64 (same values), run by the reference in double.
test::OpCase as_float64(test::OpCase c) {
  for (auto& s : c.inputs) {
    if (s.omitted || s.type != kF32) continue;
    s.type = DataType::kFloat64;
    if (s.value.empty()) continue;
    HostTensor d(DataType::kFloat64, s.value.dims());
    for (int64_t i = 0; i < d.count(); ++i) d.as<double>()[i] = s.value.as<float>()[i];
    s.value = d;
  }
  return c;
}

// Runs the case on every CUDA kernel of RNN in fp32, fp16 and fp64; each must take it and pass.
void check_on_cuda(const test::OpCase& c) {
  std::string why;
  if (!test::cuda_usable(&why)) GTEST_SKIP() << why;
  const test::OpCase c64 = as_float64(c);
  for (const char* type : {"fp32", "fp16", "fp64"}) {
    const std::string t = type;
    const auto results = t == "fp16"   ? test::run_op_case_fp16(c, DeviceType::kCUDA)
                         : t == "fp64" ? test::run_op_case(c64, DeviceType::kCUDA)
                                       : test::run_op_case(c, DeviceType::kCUDA);
    ASSERT_FALSE(results.empty()) << c.name << " " << t << ": no CUDA kernel for RNN";
    for (const auto& r : results) {
      EXPECT_EQ(r.outcome, test::Outcome::kPassed)
          << c.name << " " << t << " " << r.tactic << ": "
          << (r.outcome == test::Outcome::kUnsupported ? "declined by supports()" : r.message);
    }
  }
}

class CudaRnnModel : public ::testing::TestWithParam<test::TableCase> {};

// The model's RNN layer (the op table's lift(); the table's CPU runner checks it against ONNX
// Runtime's outputs).
TEST_P(CudaRnnModel, CudaMatchesCpuReference) {
  const auto lc = test::lift(GetParam());
  ASSERT_TRUE(lc.has_value()) << GetParam().id() << ": the model does not import as one RNN layer";
  ASSERT_EQ(lc->op.layer_type, kLayerRNN);
  test::OpCase c = lc->op;
  c.name = GetParam().id();
  check_on_cuda(c);
}

std::vector<test::TableCase> rnn_cases() {
  try {
    return test::load_op_table("rnn");
  } catch (const std::exception&) {
    return {};  // TheRnnDataIsThere says so
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaRnnModel, ::testing::ValuesIn(rnn_cases()),
                         [](const ::testing::TestParamInfo<test::TableCase>& info) { return info.param.test_name(); });

TEST(CudaRnnData, TheRnnDataIsThere) { EXPECT_GE(test::load_op_table("rnn").size(), 20u); }

// ---- larger random cases --------------------------------------------------------------------

struct Shape {
  std::string cell;
  int64_t seq, batch, input, hidden;
  std::string direction;
  int64_t layout;
};

int64_t gates_of(const std::string& cell) { return cell == "gru" ? 3 : cell == "lstm" ? 4 : 1; }

test::InputSpec random_input(const Dims& dims, double scale) {
  test::InputSpec s;
  s.type = kF32;
  s.dims = dims;
  s.constant = true;
  s.low = -scale;
  s.high = scale;
  return s;
}

// X, W, R, B, sequence_lens (when lens is not empty), initial_h, and for lstm initial_c and P.
test::OpCase random_case(const std::string& name, const Shape& sh, const std::vector<std::string>& acts,
                         const std::vector<int32_t>& lens, const std::vector<std::pair<std::string, int64_t>>& ints,
                         double clip = 0) {
  const int64_t dirs = sh.direction == "bidirectional" ? 2 : 1, g = gates_of(sh.cell), h = sh.hidden;
  test::OpCase c;
  c.name = name;
  c.layer_type = kLayerRNN;
  c.num_outputs = sh.cell == "lstm" ? 3 : 2;
  c.attrs.set("cell", sh.cell);
  c.attrs.set("hidden_size", h);
  c.attrs.set("direction", sh.direction);
  c.attrs.set("activations", acts);
  c.attrs.set("activation_alpha", std::vector<double>(acts.size(), 0.3));
  c.attrs.set("activation_beta", std::vector<double>(acts.size(), 0.4));
  c.attrs.set("layout", sh.layout);
  c.attrs.set("clip", clip);
  for (const auto& [k, v] : ints) c.attrs.set(k, v);
  const Dims x = sh.layout == 1 ? Dims{sh.batch, sh.seq, sh.input} : Dims{sh.seq, sh.batch, sh.input};
  const Dims state = sh.layout == 1 ? Dims{sh.batch, dirs, h} : Dims{dirs, sh.batch, h};
  test::InputSpec xs = random_input(x, 1.0);
  xs.constant = false;
  c.inputs.push_back(xs);
  // Weights scaled so that the gates stay off saturation for these sizes.
  c.inputs.push_back(random_input(Dims{dirs, g * h, sh.input}, 1.5 / static_cast<double>(sh.input)));
  c.inputs.push_back(random_input(Dims{dirs, g * h, h}, 1.5 / static_cast<double>(h)));
  c.inputs.push_back(random_input(Dims{dirs, 2 * g * h}, 0.5));
  test::InputSpec l;
  if (lens.empty()) {
    l.omitted = true;
  } else {
    l.type = DataType::kInt32;
    l.dims = Dims{sh.batch};
    l.value = HostTensor::from_vector(DataType::kInt32, l.dims, lens);
    l.constant = true;
  }
  c.inputs.push_back(l);
  c.inputs.push_back(random_input(state, 1.0));
  if (sh.cell == "lstm") {
    c.inputs.push_back(random_input(state, 1.0));
    c.inputs.push_back(random_input(Dims{dirs, 3 * h}, 0.5));
  }
  return c;
}

std::vector<test::OpCase> random_cases() {
  return {
      random_case("lstm_bidirectional_batch_first_lens", {"lstm", 7, 3, 45, 70, "bidirectional", 1},
                  {"sigmoid", "tanh", "tanh", "hard_sigmoid", "elu", "softsign"}, {7, 0, 4}, {}),
      random_case("lstm_reverse_input_forget_clip", {"lstm", 6, 2, 33, 40, "reverse", 0}, {"sigmoid", "tanh", "tanh"},
                  {3, 6}, {{"input_forget", 1}}, 0.9),
      random_case("gru_bidirectional_lens", {"gru", 8, 4, 64, 37, "bidirectional", 0},
                  {"sigmoid", "tanh", "sigmoid", "scaled_tanh"}, {8, 5, 1, 0}, {{"linear_before_reset", 0}}),
      random_case("gru_linear_before_reset_batch_first", {"gru", 5, 2, 40, 65, "forward", 1}, {"sigmoid", "tanh"}, {},
                  {{"linear_before_reset", 1}}, 1.5),
      random_case("rnn_reverse_batch_first_lens", {"rnn", 9, 3, 50, 33, "reverse", 1}, {"tanh"}, {2, 9, 5}, {}),
      random_case("rnn_bidirectional", {"rnn", 4, 2, 31, 96, "bidirectional", 0}, {"softplus", "leaky_relu"}, {}, {}),
  };
}

class CudaRnnRandom : public ::testing::TestWithParam<test::OpCase> {};

// On the CPU: the reference kernel runs the case, in float32 and float64 (every option it uses
// is valid), and the two agree.
TEST_P(CudaRnnRandom, ReferenceRunsTheCase) {
  for (const auto& r : test::run_op_case(GetParam())) {
    EXPECT_EQ(r.outcome, test::Outcome::kPassed) << r.tactic << ": " << r.message;
  }
  const auto f32 = test::reference_outputs(GetParam());
  const auto f64 = test::reference_outputs(as_float64(GetParam()));
  ASSERT_EQ(f32.size(), f64.size());
  for (size_t k = 0; k < f32.size(); ++k) {
    HostTensor narrowed(kF32, f64[k].dims());
    for (int64_t i = 0; i < narrowed.count(); ++i) narrowed.as<float>()[i] = static_cast<float>(f64[k].as<double>()[i]);
    std::string message;
    EXPECT_TRUE(test::compare_tensors(f32[k], narrowed, 1e-4, 1e-5, nullptr, &message))
        << "output " << k << ": " << message;
  }
}

TEST_P(CudaRnnRandom, CudaMatchesCpuReference) { check_on_cuda(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaRnnRandom, ::testing::ValuesIn(random_cases()),
                         [](const ::testing::TestParamInfo<test::OpCase>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
