// Activation fusion, in three steps whose order matters:
//  1. SiLU: ElementWise prod(x, Activation sigmoid(x)) -> Activation silu(x) (exporters write
//     SiLU that way), so that step 3 can then put the silu on the convolution before it.
//  2. Residual: Convolution -> ElementWise sum(conv_out, other), with conv_out read only by the
//     sum and both operands of identical dims at every shape point (no broadcasting) ->
//     Convolution with `other` as its residual input (input 3). Done before step 3 because the
//     convolution computes act(conv + bias + residual): an activation after the sum may move onto
//     the convolution only once the sum is inside it, and a convolution that already has an
//     activation cannot take a residual.
//  3. Post-op: Convolution / Deconvolution / Gemm whose output is read only by an Activation ->
//     the activation becomes the layer's `activation`/`activation_alpha`/`activation_beta`.
// The fused layer's output takes over the name of the removed layer's output.
#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/core/text.h"

namespace kiln {
namespace {

bool is_activation(const Layer* layer, const char* kind = nullptr) {
  return layer && layer->type() == kLayerActivation && layer->num_inputs() >= 1 && layer->input(0) &&
         (!kind || layer->attrs().get_string("kind") == kind);
}

bool has_post_op(const Layer* layer) { return !layer->attrs().get_string("activation", "").empty(); }

bool has_residual(const Layer* layer) { return layer->num_inputs() > 3 && layer->input(3); }

// Step 1. Returns the number of rewrites.
int fuse_silu(Network& network, PassContext& ctx) {
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* mul : editor.snapshot()) {
    if (editor.removed(mul) || mul->type() != kLayerElementWise || mul->attrs().get_string("op") != "prod") continue;
    if (mul->num_inputs() != 2 || !mul->input(0) || !mul->input(1)) continue;
    Layer* sigmoid = nullptr;
    Tensor* x = nullptr;
    for (int side = 0; side < 2 && !sigmoid; ++side) {
      Tensor* s = mul->input(side);
      Tensor* other = mul->input(1 - side);
      Layer* producer = s->producer();
      if (is_activation(producer, "sigmoid") && producer->input(0) == other && passes::sole_consumer(s) == mul) {
        sigmoid = producer;
        x = other;
      }
    }
    if (!sigmoid) continue;
    const std::string mul_name = mul->name(), sigmoid_name = sigmoid->name();
    Layer* silu = network.add_activation(x, ActivationType::kSilu);
    if (mul->has_precision()) silu->set_precision(mul->precision());
    editor.take_over(mul->output(0), silu->output(0));
    editor.remove_layer(mul);
    editor.remove_layer(sigmoid);
    silu->set_name(network.find_layer(mul_name) ? network.unique_name(mul_name) : mul_name);
    passes::log_change(ctx, "activation_fusion: replaced " + quote(sigmoid_name) + " * x ('" + mul_name +
                                "') by silu " + quote(silu->name()));
    ++changes;
  }
  return changes;
}

// Step 2.
int fuse_residual(Network& network, PassContext& ctx) {
  const passes::ShapeTable table(network, ctx);
  if (table.num_points() == 0) return 0;
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* conv : editor.snapshot()) {
    if (editor.removed(conv) || conv->type() != kLayerConvolution || conv->num_inputs() < 2) continue;
    if (has_post_op(conv) || has_residual(conv)) continue;
    Tensor* out = conv->output(0);
    Layer* sum = passes::sole_consumer(out);
    if (!sum || sum->type() != kLayerElementWise || sum->attrs().get_string("op") != "sum") continue;
    if (sum->num_inputs() != 2 || !sum->input(0) || !sum->input(1)) continue;
    Tensor* other = sum->input(0) == out ? sum->input(1) : sum->input(0);
    if (other == out) continue;
    if (!table.same_dims(out, other) || !table.same_dims(out, sum->output(0))) continue;
    if (!table.has_type(out, DataType::kFloat32) || !table.has_type(other, DataType::kFloat32)) continue;
    if (conv->num_inputs() == 2) conv->set_input(2, nullptr);
    conv->set_input(3, other);
    const std::string sum_name = sum->name();
    editor.take_over(sum->output(0), out);
    editor.remove_layer(sum);
    passes::log_change(ctx,
                       "activation_fusion: fused residual sum " + quote(sum_name) + " into " + quote(conv->name()));
    ++changes;
  }
  return changes;
}

// Step 3.
int fuse_post_ops(Network& network, PassContext& ctx) {
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* layer : editor.snapshot()) {
    if (editor.removed(layer)) continue;
    const std::string& type = layer->type();
    if (type != kLayerConvolution && type != kLayerDeconvolution && type != kLayerGemm) continue;
    if (has_post_op(layer) || layer->num_outputs() != 1) continue;
    Tensor* out = layer->output(0);
    Layer* act = passes::sole_consumer(out);
    if (!is_activation(act) || act->input(0) != out) continue;
    const std::string kind = act->attrs().get_string("kind");
    layer->attrs().set("activation", kind);
    layer->attrs().set("activation_alpha", act->attrs().get_float("alpha", 0.0));
    layer->attrs().set("activation_beta", act->attrs().get_float("beta", 0.0));
    const std::string act_name = act->name();
    editor.take_over(act->output(0), out);
    editor.remove_layer(act);
    passes::log_change(ctx,
                       "activation_fusion: fused " + quote(act_name) + " (" + kind + ") into " + quote(layer->name()));
    ++changes;
  }
  return changes;
}

}  // namespace

int pass_activation_fusion(Network& network, PassContext& ctx) {
  int changes = fuse_silu(network, ctx);
  if (changes > 0) network.sort_topologically();
  const int residual = fuse_residual(network, ctx);
  if (residual > 0) network.sort_topologically();
  changes += residual;
  changes += fuse_post_ops(network, ctx);
  return changes;
}

}  // namespace kiln
