// The parameters of the RNN layer (ONNX RNN, GRU and LSTM as one layer type whose `cell` picks the
// recurrence): decoded and validated once from a layer's attributes (RnnParams::decode, through
// the schema's with_params), read by shape inference (ops_rnn.cpp) and by the CPU and CUDA
// kernels (rnn_cpu.cpp, rnn_cuda.cu). The cell and direction are the public RNNCell and
// RNNDirection of include/kiln/network.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/network.h"

namespace kiln {

// An activation the RNN layer takes (kiln's name: ONNX's in lower case with words split by '_',
// e.g. "leaky_relu" for LeakyRelu), whether it reads alpha and beta, and ONNX Runtime's defaults.
struct RnnActivation {
  const char* name;
  bool uses_alpha, uses_beta;
  double alpha, beta;
};
// Every activation the RNN layer takes (the importer and RnnParams::decode read this one list).
const std::vector<RnnActivation>& rnn_activations();

struct RnnParams {
  RNNCell cell = RNNCell::kLstm;
  RNNDirection direction = RNNDirection::kForward;
  int64_t hidden = 0;                // hidden_size, >= 1
  bool batch_first = false;          // layout 1: [batch, seq, ...]
  bool linear_before_reset = false;  // gru
  bool input_forget = false;         // lstm
  double clip = 0.0;                 // clip gate pre-activations to [-clip, clip] when > 0
  // Per direction, in ONNX order (f; f, g; f, g, h), each with its alpha and beta (attributes
  // activation_alpha / activation_beta; both left empty: each activation's default from
  // rnn_activations()); names from rnn_activations().
  std::vector<std::string> activations;
  std::vector<double> alpha, beta;

  int gates() const { return cell == RNNCell::kGru ? 3 : cell == RNNCell::kLstm ? 4 : 1; }
  int activations_per_direction() const { return cell == RNNCell::kGru ? 2 : cell == RNNCell::kLstm ? 3 : 1; }
  int64_t directions() const { return direction == RNNDirection::kBidirectional ? 2 : 1; }
  bool reverse_only() const { return direction == RNNDirection::kReverse; }
  int max_outputs() const { return cell == RNNCell::kLstm ? 3 : 2; }
  const char* cell_name() const { return cell == RNNCell::kGru ? "gru" : cell == RNNCell::kLstm ? "lstm" : "rnn"; }

  // Throws kiln::Error naming the layer and the attribute: an unknown cell, direction or
  // activation, hidden_size < 1 (or 8 * hidden_size overflowing), layout not 0/1, or activation
  // lists of the wrong length.
  static RnnParams decode(const Layer& layer);
};

}  // namespace kiln
