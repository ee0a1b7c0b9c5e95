// Schema and shape inference of the RNN layer: ONNX RNN, GRU and LSTM (opsets 7-22) as one
// layer type whose `cell` attribute picks the recurrence. Inputs are ONNX's, in ONNX's order:
// X, W, R, B, sequence_lens, initial_h, initial_c (lstm), P (lstm peepholes); outputs Y, Y_h and
// Y_c (lstm). `activations` holds per-direction activation names in ONNX order with explicit
// `activation_alpha` / `activation_beta` per activation (the importer resolves ONNX's
// consume-in-order rule and the defaults). The equations are in src/backends/cpu/rnn_cpu.cpp.
#include <string>
#include <vector>

#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

struct CellInfo {
  const char* name;
  int gates;
  int activations;  // per direction
  int max_outputs;
};

constexpr CellInfo kCells[] = {{"rnn", 1, 1, 2}, {"gru", 3, 2, 2}, {"lstm", 4, 3, 3}};

const std::vector<std::string> kActivations = {"relu",  "tanh",     "sigmoid",  "affine",       "leaky_relu", "thresholded_relu",
                                               "scaled_tanh", "hard_sigmoid", "elu", "softsign", "softplus"};

void check_dims(const ShapeContext& ctx, int i, const char* what, const Dims& expected) {
  if (!ctx.has_input(i)) return;
  ctx.check(ctx.input_dims(i) == expected, std::string(what) + " has dims " + ctx.input_dims(i).to_string() +
                                               ", expected " + expected.to_string());
}

void infer_rnn(ShapeContext& ctx) {
  const Layer& layer = ctx.layer();
  const std::string cell = attr_string(layer, "cell");
  const CellInfo* info = nullptr;
  for (const auto& c : kCells) {
    if (cell == c.name) info = &c;
  }
  ctx.check(info != nullptr, "unknown cell " + quote(cell) + " (valid: rnn, gru, lstm)");
  const std::string direction = attr_string(layer, "direction");
  ctx.check(direction == "forward" || direction == "reverse" || direction == "bidirectional",
            "unknown direction " + quote(direction) + " (valid: forward, reverse, bidirectional)");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t hidden = attr_int(layer, "hidden_size");
  ctx.check(hidden >= 1, "hidden_size must be >= 1, got " + std::to_string(hidden));
  // The weight extents below are up to 8 * hidden_size (LSTM's B).
  (void)checked_extent(ctx, __int128{hidden} * 8, "8 * hidden_size " + std::to_string(hidden));
  const int64_t layout = attr_int(layer, "layout");
  ctx.check(layout == 0 || layout == 1, "layout must be 0 or 1");
  ctx.check(ctx.num_outputs() >= 1 && ctx.num_outputs() <= info->max_outputs,
            "a " + cell + " layer has 1 to " + std::to_string(info->max_outputs) + " outputs, this one has " +
                std::to_string(ctx.num_outputs()));
  ctx.check(cell == "lstm" || (!ctx.has_input(6) && !ctx.has_input(7)), "initial_c and P are inputs of lstm only");

  const auto acts = layer.attrs().get_strings("activations");
  const auto alpha = attr_floats(layer, "activation_alpha");
  const auto beta = attr_floats(layer, "activation_beta");
  ctx.check(acts.size() == static_cast<size_t>(info->activations * dirs),
            "activations must list " + std::to_string(info->activations * dirs) + " names (" +
                std::to_string(info->activations) + " per direction), got " + std::to_string(acts.size()));
  ctx.check(alpha.size() == acts.size() && beta.size() == acts.size(),
            "activation_alpha and activation_beta must have one value per activation");
  for (const auto& a : acts) {
    bool known = false;
    for (const auto& k : kActivations) known |= a == k;
    ctx.check(known, "unknown activation " + quote(a));
  }

  const DataType t = ctx.input_type(0);
  ctx.check(is_floating_point(t), std::string("X must be floating-point, got ") + to_string(t));
  for (int i : {1, 2, 3, 5, 6, 7}) {
    if (!ctx.has_input(i)) continue;
    ctx.check(ctx.input_type(i) == t, "input " + std::to_string(i) + " has type " + to_string(ctx.input_type(i)) +
                                          " but X has " + to_string(t));
  }
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() == 3, "X " + x.to_string() + " must be 3-D ([seq, batch, input], or [batch, seq, input] with layout 1)");
  const int64_t seq = layout == 0 ? x[0] : x[1];
  const int64_t batch = layout == 0 ? x[1] : x[0];
  const int64_t input = x[2];
  const int64_t g = info->gates;
  check_dims(ctx, 1, "W", Dims{dirs, g * hidden, input});
  check_dims(ctx, 2, "R", Dims{dirs, g * hidden, hidden});
  check_dims(ctx, 3, "B", Dims{dirs, 2 * g * hidden});
  check_dims(ctx, 4, "sequence_lens", Dims{batch});
  if (ctx.has_input(4)) {
    const DataType st = ctx.input_type(4);
    ctx.check(st == DataType::kInt32 || st == DataType::kInt64,
              std::string("sequence_lens must be int32 or int64, got ") + to_string(st));
  }
  const Dims state = layout == 0 ? Dims{dirs, batch, hidden} : Dims{batch, dirs, hidden};
  check_dims(ctx, 5, "initial_h", state);
  check_dims(ctx, 6, "initial_c", state);
  check_dims(ctx, 7, "P", Dims{dirs, 3 * hidden});
  ctx.set_output(0, t, layout == 0 ? Dims{seq, dirs, batch, hidden} : Dims{batch, seq, dirs, hidden});
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, t, state);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerRNN, 3, 8, -1,
    {{"cell", A::kString, std::string(), true, "rnn, gru or lstm"},
     {"hidden_size", A::kInt, int64_t{0}, true, "hidden units"},
     {"direction", A::kString, std::string("forward"), false, "forward, reverse or bidirectional"},
     {"activations", A::kStrings, std::vector<std::string>{}, true, "per direction: f (rnn); f, g (gru); f, g, h (lstm)"},
     {"activation_alpha", A::kFloats, std::vector<double>{}, false, "one per activation"},
     {"activation_beta", A::kFloats, std::vector<double>{}, false, "one per activation"},
     {"clip", A::kFloat, 0.0, false, "clip gate pre-activations to [-clip, clip] (0: none)"},
     {"linear_before_reset", A::kInt, int64_t{0}, false, "gru: apply R_h before the reset gate"},
     {"input_forget", A::kInt, int64_t{0}, false, "lstm: couple the forget gate to the input gate"},
     {"layout", A::kInt, int64_t{0}, false, "0: [seq, batch, ...]; 1: [batch, seq, ...]"}},
    {},
    infer_rnn,
    "ONNX RNN / GRU / LSTM: X, W, R, B, sequence_lens, initial_h, initial_c, P (optional after R) -> Y, Y_h, Y_c."});

}  // namespace kiln
