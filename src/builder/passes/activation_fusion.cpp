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
// CPU builds also (session 22; bert_tiny's fully connected layers):
//  1b. GELU written out as exporters write it, 0.5 * x * (1 + erf(x / sqrt 2)) in either
//     multiplication order (x / sqrt 2 or x * (1 / sqrt 2)), with every intermediate read only
//     by the next layer -> Activation gelu_erf(x): one pass instead of five.
//  2b. Bias: MatrixMultiply -> ElementWise sum with a constant float32 whose elements run along
//     the product's last dim ([N], [1, N], ...; the sum's output of the product's dims) ->
//     MatrixMultiply with that bias as input 2, and an Activation reading only the result ->
//     its `activation`. Done only where a kernel other than the reference takes the fused layer
//     at every shape point (packed_avx2: constant b; batched_avx2: b an activation; AVX2), so
//     nothing falls back to the slow reference product.
//  2c. Residual: MatrixMultiply without an activation (its bias fused or not) -> ElementWise sum
//     with a float32 tensor of the product's dims at every shape point, the product read only by
//     the sum -> MatrixMultiply with that tensor as input 3, added in the kernel's epilogue
//     (transformers' attention and feed-forward outputs before their LayerNorm: one pass over
//     the activations fewer), where a fast kernel takes the fused layer, as in 2b.
// The fused layer's output takes over the name of the removed layer's output.
#include <cmath>
#include <map>
#include <vector>

#include "src/backends/kernel.h"
#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/builder/tactic_selection.h"
#include "src/core/text.h"
#include "src/plan/kernel_config.h"

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

// Step 1b helpers. The single-element float32 constant `t` holds `want` (to 1e-6, relative).
bool scalar_is(const Tensor* t, double want) {
  const std::vector<float> v = passes::constant_floats(t);
  return v.size() == 1 && std::fabs(v[0] - want) <= 1e-6 * std::fabs(want);
}

Layer* producer_if(const Tensor* t, const char* type, const char* op) {
  Layer* p = t ? t->producer() : nullptr;
  if (!p || p->type() != type || p->attrs().get_string("op") != op || p->num_outputs() != 1) return nullptr;
  return p;
}

// The two inputs of a two-input layer as (operand that is not `c`-valued, `c`-valued scalar), or false.
bool split_scalar(const Layer* l, double c, Tensor** other) {
  if (l->num_inputs() != 2 || !l->input(0) || !l->input(1)) return false;
  for (int side = 0; side < 2; ++side) {
    if (scalar_is(l->input(side), c)) {
      *other = l->input(1 - side);
      return true;
    }
  }
  return false;
}

bool scale_is_sqrt2(const Tensor* t) { return scalar_is(t, 1.4142135623730951); }

// When `t` is 1 + erf(x / sqrt 2) (or x * (1 / sqrt 2)), each step read only by the next, x and
// the layers computing it (sum, erf, scaling); else null.
Tensor* one_plus_erf(Tensor* t, std::vector<Layer*>* chain) {
  Layer* sum = producer_if(t, kLayerElementWise, "sum");
  Tensor* e = nullptr;
  if (!sum || !split_scalar(sum, 1.0, &e)) return nullptr;
  Layer* erf = producer_if(e, kLayerUnary, "erf");
  if (!erf || passes::sole_consumer(e) != sum || !erf->input(0)) return nullptr;
  Tensor* d = erf->input(0);
  if (passes::sole_consumer(d) != erf) return nullptr;
  Tensor* x = nullptr;
  Layer* scale = producer_if(d, kLayerElementWise, "div");
  if (scale) {
    if (scale->num_inputs() != 2 || !scale->input(0) || !scale_is_sqrt2(scale->input(1))) return nullptr;
    x = scale->input(0);
  } else {
    scale = producer_if(d, kLayerElementWise, "prod");
    if (!scale || !split_scalar(scale, 0.7071067811865476, &x)) return nullptr;
  }
  *chain = {sum, erf, scale};
  return x;
}

// Step 1b (CPU builds). Returns the number of rewrites.
int fuse_gelu(Network& network, PassContext& ctx) {
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* top : editor.snapshot()) {
    if (editor.removed(top) || top->type() != kLayerElementWise || top->attrs().get_string("op") != "prod") continue;
    if (top->num_inputs() != 2 || !top->input(0) || !top->input(1) || top->num_outputs() != 1) continue;
    Tensor* x = nullptr;
    std::vector<Layer*> chain;
    for (int side = 0; side < 2 && !x; ++side) {
      Tensor* u = top->input(side);
      Tensor* v = top->input(1 - side);
      Layer* inner = producer_if(u, kLayerElementWise, "prod");
      if (!inner || passes::sole_consumer(u) != top || inner->num_inputs() != 2) continue;
      // (x * (1 + erf)) * 0.5
      if (scalar_is(v, 0.5)) {
        for (int k = 0; k < 2 && !x; ++k) {
          Tensor* w = inner->input(k);
          if (passes::sole_consumer(w) != inner) continue;
          Tensor* y = one_plus_erf(w, &chain);
          if (y && inner->input(1 - k) == y) x = y;
        }
      }
      // (x * 0.5) * (1 + erf)
      Tensor* half_of = nullptr;
      if (!x && split_scalar(inner, 0.5, &half_of) && passes::sole_consumer(v) == top) {
        Tensor* y = one_plus_erf(v, &chain);
        if (y && y == half_of) x = y;
      }
      if (x) chain.push_back(inner);
    }
    if (!x) continue;
    const std::string top_name = top->name();
    Layer* gelu = network.add_activation(x, ActivationType::kGeluErf);
    if (top->has_precision()) gelu->set_precision(top->precision());
    // The scalars (0.5, 1, sqrt 2), dropped once nothing reads them; only constants are kept
    // here (other tensors go with the layers that produce and read them).
    chain.push_back(top);
    std::vector<Tensor*> constants;
    for (Layer* l : chain) {
      for (int i = 0; i < l->num_inputs(); ++i) {
        if (passes::is_constant(l->input(i))) constants.push_back(l->input(i));
      }
    }
    chain.pop_back();
    editor.take_over(top->output(0), gelu->output(0));
    editor.remove_layer(top);
    for (Layer* l : chain) editor.remove_layer(l);
    editor.drop_unused_constants(constants);
    gelu->set_name(network.find_layer(top_name) ? network.unique_name(top_name) : top_name);
    passes::log_change(ctx, "activation_fusion: replaced the GELU ending in " + quote(top_name) + " by gelu_erf " +
                                quote(gelu->name()));
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

// Step 2b helpers. Whether a CPU kernel other than the reference (and not left out through
// KILN_DISABLE_TACTICS) takes `layer` at every shape point of `table`.
// `made`: the states, per shape point, of tensors made after the table (a fused product's output,
// which replaces the tensor it computes and has its states).
using MadeStates = std::map<const Tensor*, std::vector<TensorState>>;
bool fast_cpu_kernel_takes(const Layer& layer, const passes::ShapeTable& table, const MadeStates& made) {
  for (int point = 0; point < table.num_points(); ++point) {
    // The states of the layer's inputs: the table's, or for a constant made after it (a bias
    // reshaped to [N]) its value, through a non-owning pointer (the aliasing constructor).
    TensorStates states;
    for (int i = 0; i < layer.num_inputs(); ++i) {
      const Tensor* t = layer.input(i);
      if (!t) continue;
      if (const TensorState* st = table.state(point, t)) {
        states[t] = *st;
      } else if (const auto it = made.find(t); it != made.end()) {
        states[t] = it->second[static_cast<size_t>(point)];
      } else if (const HostTensor* constant = passes::constant_value(t)) {
        states[t] =
            TensorState{constant->type(), constant->dims(),
                        std::shared_ptr<HostTensor>(std::shared_ptr<HostTensor>(), const_cast<HostTensor*>(constant))};
      } else {
        return false;
      }
    }
    const std::vector<TensorDesc> descs = input_descs(layer, states);
    bool taken = false;
    for (const KernelEntry* e : KernelRegistry::instance().find(DeviceType::kCPU, layer.type())) {
      if (e->priority > 0 && !tactic_disabled(e->tactic) && (!e->supports || e->supports(layer, descs))) {
        taken = true;
        break;
      }
    }
    if (!taken) return false;
  }
  return table.num_points() > 0;
}

// The constant float32 `t` as a bias for a product with `n` columns: its elements along the last
// dim only ([n], [1, n], [1, 1, n], ...); else empty.
std::vector<float> row_bias(const Tensor* t, int64_t n) {
  const HostTensor* value = passes::constant_value(t);
  if (!value || value->type() != DataType::kFloat32 || value->count() != n || n < 1) return {};
  const Dims& d = value->dims();
  if (d.rank() < 1 || d[d.rank() - 1] != n) return {};
  return passes::constant_floats(t);
}

// Step 2b (CPU builds). Returns the number of rewrites.
int fuse_matmul_bias(Network& network, PassContext& ctx) {
  const passes::ShapeTable table(network, ctx);
  if (table.num_points() == 0) return 0;
  passes::GraphEditor editor(network);
  int changes = 0;
  // A product fused here may feed the next one (a GELU layer into the next fully connected one):
  // its new output tensor keeps the states of the tensor it replaces.
  MadeStates made;
  for (Layer* mm : editor.snapshot()) {
    if (editor.removed(mm) || mm->type() != kLayerMatrixMultiply || mm->num_inputs() != 2) continue;
    if (has_post_op(mm) || mm->num_outputs() != 1 || !mm->input(0) || !mm->input(1)) continue;
    Tensor* out = mm->output(0);
    const TensorState* first = table.state(0, out);
    if (!first || first->dims.rank() < 2 || !table.has_type(out, DataType::kFloat32)) continue;
    const int64_t n = first->dims[first->dims.rank() - 1];
    Layer* sum = passes::sole_consumer(out);
    if (!sum || sum->type() != kLayerElementWise || sum->attrs().get_string("op") != "sum") continue;
    if (sum->num_inputs() != 2 || !sum->input(0) || !sum->input(1) || sum->input(0) == sum->input(1)) continue;
    Tensor* bias_t = sum->input(0) == out ? sum->input(1) : sum->input(0);
    const std::vector<float> bias = row_bias(bias_t, n);
    if (bias.empty() || !table.same_dims(out, sum->output(0))) continue;
    // An activation reading only the sum comes along where the kernel computes it.
    Layer* act = passes::sole_consumer(sum->output(0));
    if (act && !(is_activation(act) && act->input(0) == sum->output(0))) act = nullptr;
    // The bias as [N]: the constant itself when it is already 1-D.
    const bool one_d = passes::constant_value(bias_t)->dims().rank() == 1;
    Tensor* bias_1d =
        one_d ? bias_t
              : editor.add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{n}, bias), bias_t->name() + "_1d");
    // The fused layer, tried with the activation and then without it: kept where a fast kernel
    // takes it.
    Layer* fused = nullptr;
    for (int with_act = act ? 1 : 0; with_act >= 0 && !fused; --with_act) {
      Attributes attrs = mm->attrs();
      if (with_act) {
        attrs.set("activation", act->attrs().get_string("kind"));
        attrs.set("activation_alpha", act->attrs().get_float("alpha", 0.0));
        attrs.set("activation_beta", act->attrs().get_float("beta", 0.0));
      }
      Layer* trial = network.add_layer(kLayerMatrixMultiply, {mm->input(0), mm->input(1), bias_1d}, 1, std::move(attrs),
                                       network.unique_name(mm->name() + "_bias"));
      if (fast_cpu_kernel_takes(*trial, table, made)) {
        fused = trial;
        if (!with_act) act = nullptr;
      } else {
        editor.remove_layer(trial);
      }
    }
    if (!fused) {
      if (!one_d) editor.drop_unused_constants({bias_1d});
      continue;
    }
    if (mm->has_precision()) fused->set_precision(mm->precision());
    const std::string mm_name = mm->name(), sum_name = sum->name();
    std::string what = "bias " + quote(sum_name);
    Tensor* last = sum->output(0);
    if (act) {
      what += " and " + quote(act->name()) + " (" + act->attrs().get_string("kind") + ")";
      last = act->output(0);
    }
    std::vector<TensorState> last_states;
    for (int point = 0; point < table.num_points(); ++point) {
      const TensorState* st = table.state(point, last);
      if (!st) break;
      last_states.push_back(*st);
    }
    if (static_cast<int>(last_states.size()) == table.num_points()) made[fused->output(0)] = std::move(last_states);
    editor.take_over(last, fused->output(0));
    if (act) editor.remove_layer(act);
    editor.remove_layer(sum);
    editor.remove_layer(mm);
    editor.drop_unused_constants({bias_t});
    fused->set_name(mm_name);
    passes::log_change(ctx, "activation_fusion: fused " + what + " into " + quote(mm_name));
    ++changes;
  }
  return changes;
}

// Step 2c (CPU builds). Returns the number of rewrites.
int fuse_matmul_residual(Network& network, PassContext& ctx) {
  const passes::ShapeTable table(network, ctx);
  if (table.num_points() == 0) return 0;
  passes::GraphEditor editor(network);
  int changes = 0;
  const MadeStates none;
  for (Layer* mm : editor.snapshot()) {
    if (editor.removed(mm) || mm->type() != kLayerMatrixMultiply || mm->num_inputs() > 3) continue;
    if (has_post_op(mm) || mm->num_outputs() != 1 || !mm->input(0) || !mm->input(1)) continue;
    Tensor* out = mm->output(0);
    Layer* sum = passes::sole_consumer(out);
    if (!sum || sum->type() != kLayerElementWise || sum->attrs().get_string("op") != "sum") continue;
    if (sum->num_inputs() != 2 || !sum->input(0) || !sum->input(1) || sum->input(0) == sum->input(1)) continue;
    Tensor* other = sum->input(0) == out ? sum->input(1) : sum->input(0);
    if (!table.same_dims(out, other) || !table.same_dims(out, sum->output(0))) continue;
    if (!table.has_type(out, DataType::kFloat32) || !table.has_type(other, DataType::kFloat32)) continue;
    Tensor* bias = mm->num_inputs() > 2 ? mm->input(2) : nullptr;
    Layer* fused = network.add_layer(kLayerMatrixMultiply, {mm->input(0), mm->input(1), bias, other}, 1, mm->attrs(),
                                     network.unique_name(mm->name() + "_residual"));
    if (!fast_cpu_kernel_takes(*fused, table, none)) {
      editor.remove_layer(fused);
      continue;
    }
    if (mm->has_precision()) fused->set_precision(mm->precision());
    const std::string mm_name = mm->name(), sum_name = sum->name();
    editor.take_over(sum->output(0), fused->output(0));
    editor.remove_layer(sum);
    editor.remove_layer(mm);
    fused->set_name(mm_name);
    passes::log_change(ctx, "activation_fusion: fused residual sum " + quote(sum_name) + " into " + quote(mm_name));
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
  const bool cpu = ctx.config.device == DeviceType::kCPU;
  int changes = fuse_silu(network, ctx);
  if (cpu) changes += fuse_gelu(network, ctx);
  if (changes > 0) network.sort_topologically();
  const int residual = fuse_residual(network, ctx);
  if (residual > 0) network.sort_topologically();
  changes += residual;
  if (cpu) {
    const int bias = fuse_matmul_bias(network, ctx);
    if (bias > 0) network.sort_topologically();
    changes += bias;
    const int matmul_residual = fuse_matmul_residual(network, ctx);
    if (matmul_residual > 0) network.sort_topologically();
    changes += matmul_residual;
  }
  changes += fuse_post_ops(network, ctx);
  return changes;
}

}  // namespace kiln
