// ONNX importers of RNN, GRU and LSTM (opsets 7-22; `layout` from 14), each one RNN layer
// (src/ir/ops_rnn.cpp). The importer fills in what ONNX leaves implicit: the default
// activations (rnn Tanh; gru Sigmoid, Tanh; lstm Sigmoid, Tanh, Tanh), a forward list reused for
// the reverse direction when a bidirectional node lists only one, and explicit alpha/beta per
// activation: ONNX's activation_alpha / activation_beta are consumed in order by the
// activations that take the parameter, with ONNX Runtime's defaults for the others
// (LeakyRelu 0.01, ThresholdedRelu 1, ScaledTanh 1/1, HardSigmoid 0.2/0.5, Elu 1, Affine 1/0).
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "src/core/text.h"
#include "src/ir/rnn_params.h"
#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

struct CellSpec {
  const char* op_type;
  const char* cell;
  std::vector<std::string> default_activations;  // per direction
  int max_inputs;
};

const CellSpec kCells[] = {
    {"RNN", "rnn", {"Tanh"}, 6},
    {"GRU", "gru", {"Sigmoid", "Tanh"}, 6},
    {"LSTM", "lstm", {"Sigmoid", "Tanh", "Tanh"}, 8},
};

void import_recurrent(NodeContext& ctx) {
  const CellSpec* spec = nullptr;
  for (const auto& c : kCells) {
    if (ctx.op_type() == c.op_type) spec = &c;
  }
  if (!spec) ctx.fail("no recurrent table entry (kiln bug)");
  if (!ctx.has_attr("hidden_size")) ctx.fail("attribute 'hidden_size' is required");
  const std::string direction = ctx.attr_string("direction", "forward");
  const size_t dirs = direction == "bidirectional" ? 2 : 1;
  const size_t per_dir = spec->default_activations.size();

  // Activation names: given, the forward list reused for both directions, or the defaults.
  std::vector<std::string> names;
  if (const auto* attr = ctx.find_attr("activations")) {
    for (const auto& s : attr->strings()) names.push_back(s);
  }
  if (names.empty()) {
    for (size_t d = 0; d < dirs; ++d)
      names.insert(names.end(), spec->default_activations.begin(), spec->default_activations.end());
  } else if (names.size() == per_dir && dirs == 2) {
    const auto forward = names;
    names.insert(names.end(), forward.begin(), forward.end());
  }
  if (names.size() != per_dir * dirs) {
    ctx.fail("attribute 'activations' has " + std::to_string(names.size()) + " names, expected " +
             std::to_string(per_dir * dirs));
  }
  const auto alphas = ctx.attr_floats("activation_alpha");
  const auto betas = ctx.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  std::vector<std::string> kiln_names;
  std::vector<double> alpha, beta;
  for (const auto& name : names) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const RnnActivation* info = nullptr;  // kiln's name is ONNX's in lower case with '_' between words
    for (const RnnActivation& a : rnn_activations()) {
      std::string joined = a.name;
      joined.erase(std::remove(joined.begin(), joined.end(), '_'), joined.end());
      if (lower == joined) info = &a;
    }
    if (!info) ctx.unsupported("activation " + quote(name) + " in " + ctx.op_type());
    kiln_names.emplace_back(info->name);
    alpha.push_back(info->uses_alpha && next_alpha < alphas.size() ? alphas[next_alpha++] : info->alpha);
    beta.push_back(info->uses_beta && next_beta < betas.size() ? betas[next_beta++] : info->beta);
  }

  Attributes a;
  a.set("cell", std::string(spec->cell));
  a.set("hidden_size", ctx.attr_int("hidden_size", 0));
  a.set("direction", direction);
  a.set("activations", kiln_names);
  a.set("activation_alpha", alpha);
  a.set("activation_beta", beta);
  a.set("clip", ctx.attr_float("clip", 0.0));
  a.set("layout", ctx.attr_int("layout", 0));
  if (std::string(spec->cell) == "gru") a.set("linear_before_reset", ctx.attr_int("linear_before_reset", 0));
  if (std::string(spec->cell) == "lstm") a.set("input_forget", ctx.attr_int("input_forget", 0));

  std::vector<Tensor*> inputs;
  for (int i = 0; i < std::min(ctx.num_inputs(), spec->max_inputs); ++i) inputs.push_back(ctx.input(i));
  if (ctx.num_inputs() > spec->max_inputs) ctx.fail("has more inputs than " + ctx.op_type() + " takes");
  while (!inputs.empty() && !inputs.back()) inputs.pop_back();
  if (inputs.size() < 3 || !inputs[0] || !inputs[1] || !inputs[2]) ctx.fail("inputs X, W and R are required");

  int outputs = 1;
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (ctx.has_output(i)) outputs = i + 1;
  }
  Layer* layer = ctx.add_layer(kLayerRNN, inputs, outputs, std::move(a));
  for (int i = 0; i < outputs; ++i) {
    if (ctx.has_output(i)) ctx.set_output(i, layer->output(i));
  }
}
constexpr OnnxImporterInfo kRecurrentInfo{
    .min_opset = 7, .types = "float32, float16, float64", .notes = "every ONNX activation; layout 1 from opset 14"};
KILN_REGISTER_ONNX_IMPORTER("RNN", import_recurrent, kRecurrentInfo);
KILN_REGISTER_ONNX_IMPORTER("GRU", import_recurrent, kRecurrentInfo);
KILN_REGISTER_ONNX_IMPORTER("LSTM", import_recurrent, kRecurrentInfo);

}  // namespace
}  // namespace kiln
