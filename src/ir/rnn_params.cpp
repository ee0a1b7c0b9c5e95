// RnnParams::decode: the RNN layer's attribute rules in one place (see rnn_params.h).
#include "src/ir/rnn_params.h"

#include <limits>

#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

const RnnActivation* find_activation(const std::string& name) {
  for (const RnnActivation& a : rnn_activations()) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

}  // namespace

const std::vector<RnnActivation>& rnn_activations() {
  static const std::vector<RnnActivation> kList = {
      {"relu", false, false, 0, 0},          {"tanh", false, false, 0, 0},
      {"sigmoid", false, false, 0, 0},       {"affine", true, true, 1.0, 0.0},
      {"leaky_relu", true, false, 0.01, 0},  {"thresholded_relu", true, false, 1.0, 0},
      {"scaled_tanh", true, true, 1.0, 1.0}, {"hard_sigmoid", true, true, 0.2, 0.5},
      {"elu", true, false, 1.0, 0},          {"softsign", false, false, 0, 0},
      {"softplus", false, false, 0, 0},
  };
  return kList;
}

RnnParams RnnParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  RnnParams p;
  p.cell = r.get_enum<RNNCell>("cell", {{"rnn", RNNCell::kRnn}, {"gru", RNNCell::kGru}, {"lstm", RNNCell::kLstm}});
  p.direction = r.get_enum<RNNDirection>("direction", {{"forward", RNNDirection::kForward},
                                                       {"reverse", RNNDirection::kReverse},
                                                       {"bidirectional", RNNDirection::kBidirectional}});
  // The weight extents are up to 8 * hidden_size (LSTM's B).
  p.hidden = r.int_in("hidden_size", 1, std::numeric_limits<int64_t>::max() / 8);
  p.batch_first = r.int_in("layout", 0, 1) == 1;
  p.linear_before_reset = r.get_bool("linear_before_reset");
  p.input_forget = r.get_bool("input_forget");
  p.clip = r.get_float("clip");
  p.activations = r.get_strings("activations");
  p.alpha = attr_floats(layer, "activation_alpha");
  p.beta = attr_floats(layer, "activation_beta");
  const size_t want = static_cast<size_t>(p.activations_per_direction() * p.directions());
  if (p.activations.size() != want) {
    r.fail("activations", "must list " + std::to_string(want) + " names (" +
                              std::to_string(p.activations_per_direction()) + " per direction of a " +
                              std::string(p.cell_name()) + " layer, " + std::to_string(p.directions()) +
                              " direction(s)), got " + std::to_string(p.activations.size()));
  }
  for (const std::string& a : p.activations) {
    if (!find_activation(a)) r.fail("activations", "names \"" + a + "\", not an ONNX RNN activation");
  }
  if (p.alpha.empty() && p.beta.empty()) {  // the defaults (RNNDesc leaves them out)
    for (const std::string& a : p.activations) {
      p.alpha.push_back(find_activation(a)->alpha);
      p.beta.push_back(find_activation(a)->beta);
    }
  }
  if (p.alpha.size() != want || p.beta.size() != want) {
    r.fail("activation_alpha", "and activation_beta must have one value per activation (" + std::to_string(want) +
                                   "), or both be empty for the defaults");
  }
  return p;
}

}  // namespace kiln
