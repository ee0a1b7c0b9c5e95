// Tests of the RNN layer (ONNX RNN, GRU, LSTM): shape rules and their messages, the reference
// against a hand-computed one-step RNN and the ONNX backend conformance tests. The ONNX models
// against ONNX Runtime's outputs (tests/data/rnn, generate.py there: every direction,
// sequence_lens, initial states, peepholes, clip, input_forget, linear_before_reset, explicit
// activations with alpha/beta, partial outputs; batch-first models checked against ONNX
// Runtime's run of the transposed layout-0 model) are cases of the op table (tests/op_table.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "tests/ort_model_case.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

using test::ortcase::infer_error;
using test::ortcase::infer_outputs;
constexpr DataType kF32 = DataType::kFloat32;

Attributes rnn_attrs(const std::string& cell, int64_t hidden, const std::string& direction,
                     const std::vector<std::string>& acts, int64_t layout = 0) {
  Attributes a;
  a.set("cell", cell);
  a.set("hidden_size", hidden);
  a.set("direction", direction);
  a.set("activations", acts);
  a.set("activation_alpha", std::vector<double>(acts.size(), 0.0));
  a.set("activation_beta", std::vector<double>(acts.size(), 0.0));
  a.set("layout", layout);
  return a;
}

TEST(RnnShapes, OutputsFollowLayoutAndDirection) {
  auto r =
      infer_outputs(kLayerRNN, {{kF32, {5, 3, 4}}, {kF32, {2, 24, 4}}, {kF32, {2, 24, 6}}},
                    rnn_attrs("lstm", 6, "bidirectional", {"sigmoid", "tanh", "tanh", "sigmoid", "tanh", "tanh"}), 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].second, (Dims{5, 2, 3, 6}));
  EXPECT_EQ(r[1].second, (Dims{2, 3, 6}));
  EXPECT_EQ(r[2].second, (Dims{2, 3, 6}));
  r = infer_outputs(kLayerRNN, {{kF32, {3, 5, 4}}, {kF32, {1, 18, 4}}, {kF32, {1, 18, 6}}},
                    rnn_attrs("gru", 6, "forward", {"sigmoid", "tanh"}, 1), 2);
  EXPECT_EQ(r[0].second, (Dims{3, 5, 1, 6}));
  EXPECT_EQ(r[1].second, (Dims{3, 1, 6}));
}

TEST(RnnShapes, ErrorsNameTheRule) {
  EXPECT_NE(infer_error(kLayerRNN, {{kF32, {5, 3, 4}}, {kF32, {1, 12, 4}}, {kF32, {1, 18, 6}}},
                        rnn_attrs("gru", 6, "forward", {"sigmoid", "tanh"}))
                .find("W has dims 1x12x4, expected 1x18x4"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerRNN, {{kF32, {5, 3, 4}}, {kF32, {1, 6, 4}}, {kF32, {1, 6, 6}}},
                        rnn_attrs("rnn", 6, "forward", {"tanh", "tanh"}))
                .find("must list 1 names"),
            std::string::npos);
  EXPECT_NE(
      infer_error(kLayerRNN, {{kF32, {5, 3, 4}}, {kF32, {1, 6, 4}}, {kF32, {1, 6, 6}}},
                  rnn_attrs("rnn", 6, "sideways", {"tanh"}))
          .find("attribute 'direction' is \"sideways\"; allowed values: \"forward\", \"reverse\", \"bidirectional\""),
      std::string::npos);
  EXPECT_NE(infer_error(kLayerRNN, {{kF32, {5, 3, 4}}, {kF32, {1, 6, 4}}, {kF32, {1, 6, 6}}},
                        rnn_attrs("rnn", 6, "forward", {"swish"}))
                .find("attribute 'activations' names \"swish\", not an ONNX RNN activation"),
            std::string::npos);
  EXPECT_NE(infer_error(kLayerRNN, {{kF32, {5, 3, 4}}, {kF32, {1, 6, 4}}, {kF32, {1, 6, 6}}},
                        rnn_attrs("rnn", 6, "forward", {"tanh"}), 3)
                .find("1 to 2 outputs"),
            std::string::npos);
}

// The hand-computed two-step RNN is in the op table, tests/data/rnn/cases.json (rnn_hand).

class RnnConformance : public ::testing::TestWithParam<const char*> {};
TEST_P(RnnConformance, MatchesTheOnnxBackendTest) { test::ortcase::check_node_test(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Node, RnnConformance,
                         ::testing::Values("test_rnn_seq_length", "test_simple_rnn_batchwise",
                                           "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias",
                                           "test_gru_batchwise", "test_gru_defaults", "test_gru_seq_length",
                                           "test_gru_with_initial_bias", "test_lstm_batchwise", "test_lstm_defaults",
                                           "test_lstm_with_initial_bias", "test_lstm_with_peepholes"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
