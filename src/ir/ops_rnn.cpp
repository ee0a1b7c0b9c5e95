// Schema and shape inference of the RNN layer: ONNX RNN, GRU and LSTM (opsets 7-22) as one
// layer type whose `cell` attribute picks the recurrence. Inputs are ONNX's, in ONNX's order:
// X, W, R, B, sequence_lens, initial_h, initial_c (lstm), P (lstm peepholes); outputs Y, Y_h and
// Y_c (lstm). `activations` holds per-direction activation names in ONNX order with explicit
// `activation_alpha` / `activation_beta` per activation (the importer resolves ONNX's
// consume-in-order rule and the defaults). The equations are in src/backends/cpu/rnn_cpu.cpp.
#include <string>
#include <vector>

#include "src/core/text.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/rnn_params.h"

namespace kiln {
namespace {

void check_dims(const ShapeContext& ctx, int i, const char* what, const Dims& expected) {
  if (!ctx.has_input(i)) return;
  ctx.check(ctx.input_dims(i) == expected,
            std::string(what) + " has dims " + ctx.input_dims(i).to_string() + ", expected " + expected.to_string());
}

void infer_rnn(ShapeContext& ctx) {
  const RnnParams& p = params_of<RnnParams>(ctx.layer());  // the attribute rules (rnn_params.cpp)
  const int64_t dirs = p.directions();
  const int64_t hidden = p.hidden;
  ctx.check(ctx.num_outputs() >= 1 && ctx.num_outputs() <= p.max_outputs(),
            "a " + std::string(p.cell_name()) + " layer has 1 to " + std::to_string(p.max_outputs()) +
                " outputs, this one has " + std::to_string(ctx.num_outputs()));
  ctx.check(p.cell == RNNCell::kLstm || (!ctx.has_input(6) && !ctx.has_input(7)),
            "initial_c and P are inputs of lstm only");

  const DataType t = ctx.input_type(0);
  ctx.check(is_floating_point(t), std::string("X must be floating-point, got ") + to_string(t));
  for (int i : {1, 2, 3, 5, 6, 7}) {
    if (!ctx.has_input(i)) continue;
    ctx.check(ctx.input_type(i) == t, "input " + std::to_string(i) + " has type " + to_string(ctx.input_type(i)) +
                                          " but X has " + to_string(t));
  }
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() == 3,
            "X " + x.to_string() + " must be 3-D ([seq, batch, input], or [batch, seq, input] with layout 1)");
  const int64_t seq = p.batch_first ? x[1] : x[0];
  const int64_t batch = p.batch_first ? x[0] : x[1];
  const int64_t input = x[2];
  const int64_t g = p.gates();
  check_dims(ctx, 1, "W", Dims{dirs, g * hidden, input});
  check_dims(ctx, 2, "R", Dims{dirs, g * hidden, hidden});
  check_dims(ctx, 3, "B", Dims{dirs, 2 * g * hidden});
  check_dims(ctx, 4, "sequence_lens", Dims{batch});
  if (ctx.has_input(4)) {
    const DataType st = ctx.input_type(4);
    ctx.check(st == DataType::kInt32 || st == DataType::kInt64,
              std::string("sequence_lens must be int32 or int64, got ") + to_string(st));
  }
  const Dims state = p.batch_first ? Dims{batch, dirs, hidden} : Dims{dirs, batch, hidden};
  check_dims(ctx, 5, "initial_h", state);
  check_dims(ctx, 6, "initial_c", state);
  check_dims(ctx, 7, "P", Dims{dirs, 3 * hidden});
  ctx.set_output(0, t, p.batch_first ? Dims{batch, seq, dirs, hidden} : Dims{seq, dirs, batch, hidden});
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, t, state);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerRNN,
    3,
    8,
    -1,
    {{"cell", A::kString, std::string(), true, "rnn, gru or lstm"},
     {"hidden_size", A::kInt, int64_t{0}, true, "hidden units"},
     {"direction", A::kString, std::string("forward"), false, "forward, reverse or bidirectional"},
     {"activations", A::kStrings, std::vector<std::string>{}, true,
      "per direction: f (rnn); f, g (gru); f, g, h (lstm)"},
     {"activation_alpha", A::kFloats, std::vector<double>{}, false, "one per activation"},
     {"activation_beta", A::kFloats, std::vector<double>{}, false, "one per activation"},
     {"clip", A::kFloat, 0.0, false, "clip gate pre-activations to [-clip, clip] (0: none)"},
     {"linear_before_reset", A::kInt, int64_t{0}, false, "gru: apply R_h before the reset gate"},
     {"input_forget", A::kInt, int64_t{0}, false, "lstm: couple the forget gate to the input gate"},
     {"layout", A::kInt, int64_t{0}, false, "0: [seq, batch, ...]; 1: [batch, seq, ...]"}},
    {},
    infer_rnn,
    "ONNX RNN / GRU / LSTM: X, W, R, B, sequence_lens, initial_h, initial_c, P (optional after R) -> Y, Y_h, Y_c."}
                     .with_params<RnnParams>());

}  // namespace kiln
