// Element-wise fusion: a maximal group of element-wise layers, connected through tensors that
// each have exactly one reader, becomes one FusedElementWise layer that computes the group per
// element with a register program. This saves a pass over memory per fused layer (e.g. BERT's
// GELU: div, erf, add, mul, mul -> one layer).
//
// The program (attribute `program`, full grammar in src/ir/ops_fused.h) is one instruction per
// string in SSA register form: r0..r{n-1} are the layer's inputs, instruction k defines r{n+k},
// and the last register is the output. Instructions: `const <v>`, `act <kind> r<x> <alpha>
// <beta>`, `unary <op> r<x>`, `binary <op> r<a> r<b>`, `scale r<x> <scale> <shift> <power>`.
// The GELU above, on input r0, becomes
//   const 1.4142135, binary div r0 r1, unary erf r2, const 1, binary sum r3 r4,
//   binary prod r0 r5, const 0.5, binary prod r6 r7
// A register form rather than a stack form because a group is a tree whose external inputs may
// be read several times (x * sigmoid(x), the GELU's x), which registers express without copies.
//
// Fusible layers, float32 only:
//  - Activation (any kind), Unary (float-valued ops), Scale in "uniform" mode with constant
//    single-element scale/shift/power;
//  - ElementWise sum/sub/prod/div/pow/max/min whose operands each either have the output's dims
//    at every shape point or are single-element constants (these become `const` instructions).
// A tensor joins a producer to its reader when the producer has one output, that output has one
// reading layer and is not a network output, and both layers are fusible; each connected group
// is a tree rooted at the layer whose output leaves it. Groups of one layer are left alone. The
// group's external tensors (deduplicated, in order of first use) become the new layer's inputs;
// the new layer's output keeps the root's output name.
//
// A group holds at most kMaxGroupLayers layers (long chains become several fused layers, each
// program of bounded length), and the walk over a group is iterative with set lookups, so a
// chain of 100,000 activations neither overflows the stack nor costs quadratic time.
#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/ir/op_schema.h"
#include "src/ir/ops_fused.h"
#include "src/core/text.h"

namespace kiln {
namespace {

constexpr size_t kMaxGroupLayers = 256;

// A single-element float32 constant's value, or false.
bool scalar_constant(const Tensor* t, double* value) {
  const std::vector<float> values = passes::constant_floats(t);
  if (values.size() != 1) return false;
  *value = values[0];
  return true;
}

class ElementWiseFusion {
 public:
  ElementWiseFusion(Network& network, PassContext& ctx) : network_(network), ctx_(ctx), table_(network, ctx) {}

  int run() {
    if (table_.num_points() == 0) return 0;
    const std::vector<Layer*> order = network_.topological_order();
    for (size_t i = 0; i < order.size(); ++i) {
      position_[order[i]] = static_cast<int>(i);
      fusible_[order[i]] = is_fusible(order[i]);
    }
    passes::GraphEditor editor(network_);
    int changes = 0;
    for (Layer* first_root : order) {
      if (editor.removed(first_root) || !fusible_[first_root] || merges_into_consumer(first_root)) continue;
      // A group cut at kMaxGroupLayers leaves producers that merged into it: once it is fused
      // they feed the fused layer (not fusible here), so each roots a group of its own.
      std::vector<Layer*> roots{first_root};
      while (!roots.empty()) {
        Layer* root = roots.back();
        roots.pop_back();
        std::vector<Layer*> group, left_out;
        collect(root, group, left_out);
        if (group.size() < 2) continue;
        std::sort(group.begin(), group.end(), [&](Layer* a, Layer* b) { return position_[a] < position_[b]; });
        fuse(editor, group, root);
        ++changes;
        roots.insert(roots.end(), left_out.begin(), left_out.end());
      }
    }
    if (changes > 0) network_.sort_topologically();
    return changes;
  }

 private:
  bool is_float(const Tensor* t) const { return table_.has_type(t, DataType::kFloat32); }

  bool is_fusible(const Layer* layer) const {
    if (layer->num_outputs() != 1 || !is_float(layer->output(0))) return false;
    if (layer->has_precision() && layer->precision() != DataType::kFloat32) return false;
    const std::string& type = layer->type();
    const OpSchema* schema = OpSchemaRegistry::instance().find(type);
    if (!schema || !schema->traits.elementwise_fusible) return false;
    const Tensor* out = layer->output(0);
    if (type == kLayerActivation || type == kLayerUnary) {
      if (layer->num_inputs() != 1 || !is_float(layer->input(0)) || !table_.same_dims(layer->input(0), out))
        return false;
      return type == kLayerActivation || fused_unary_supported(parse_unary_op(layer->attrs().get_string("op")));
    }
    if (type == kLayerScale) {
      if (attr_string(*layer, "mode") != "uniform" || !layer->input(0) || !is_float(layer->input(0))) return false;
      if (!table_.same_dims(layer->input(0), out) || layer->num_inputs() > 4) return false;
      double v = 0.0;
      for (int i = 1; i < layer->num_inputs(); ++i) {
        if (layer->input(i) && !scalar_constant(layer->input(i), &v)) return false;
      }
      return true;
    }
    if (type == kLayerElementWise) {
      if (layer->num_inputs() != 2 || !layer->input(0) || !layer->input(1)) return false;
      if (!fused_binary_supported(parse_elementwise_op(layer->attrs().get_string("op")))) return false;
      if (layer->attrs().get_int("fmod", 0) != 0) return false;
      int full = 0;
      for (int i = 0; i < 2; ++i) {
        double v = 0.0;
        if (scalar_constant(layer->input(i), &v)) continue;
        if (!is_float(layer->input(i)) || !table_.same_dims(layer->input(i), out)) return false;
        ++full;
      }
      return full > 0;
    }
    return false;
  }

  // The layer reading `producer`'s output when the two may be fused, else null.
  Layer* fusible_consumer(const Layer* producer) {
    if (!fusible_[producer]) return nullptr;
    Layer* consumer = passes::sole_consumer(producer->output(0));
    return consumer && fusible_[consumer] ? consumer : nullptr;
  }
  bool merges_into_consumer(const Layer* layer) { return fusible_consumer(layer) != nullptr; }

  // The tree of layers that merge into `root`, `root` included (depth first, inputs in order),
  // up to kMaxGroupLayers; the producers that would have come next go to `left_out`.
  void collect(Layer* root, std::vector<Layer*>& group, std::vector<Layer*>& left_out) {
    std::unordered_set<const Layer*> seen;
    std::vector<Layer*> stack{root};
    while (!stack.empty()) {
      Layer* layer = stack.back();
      stack.pop_back();
      if (!seen.insert(layer).second) continue;
      if (group.size() == kMaxGroupLayers) {
        left_out.push_back(layer);
        continue;
      }
      group.push_back(layer);
      for (int i = layer->num_inputs() - 1; i >= 0; --i) {
        const Tensor* in = layer->input(i);
        Layer* producer = in ? in->producer() : nullptr;
        if (producer && fusible_.count(producer) && fusible_consumer(producer) == layer) stack.push_back(producer);
      }
    }
  }

  void fuse(passes::GraphEditor& editor, const std::vector<Layer*>& group, Layer* root) {
    const std::unordered_set<const Layer*> members(group.begin(), group.end());
    auto in_group = [&](const Tensor* t) { return t && t->producer() && members.count(t->producer()); };
    // Operands that are not registers: single-element constants of ElementWise layers (they become
    // `const` instructions; is_fusible guarantees the other operand is full-sized) and the
    // scale/shift/power of Scale layers (numbers in the `scale` instruction).
    auto immediate = [&](const Layer* layer, int i, double* value) {
      if (layer->type() == kLayerElementWise) return scalar_constant(layer->input(i), value);
      return layer->type() == kLayerScale && i > 0;
    };
    // External inputs, in order of first use.
    std::vector<Tensor*> inputs;
    for (const Layer* layer : group) {
      for (int i = 0; i < layer->num_inputs(); ++i) {
        Tensor* t = layer->input(i);
        double v = 0.0;
        if (!t || in_group(t) || immediate(layer, i, &v)) continue;
        if (std::find(inputs.begin(), inputs.end(), t) == inputs.end()) inputs.push_back(t);
      }
    }
    std::unordered_map<const Tensor*, int> reg_of;  // tensor -> register
    for (size_t i = 0; i < inputs.size(); ++i) reg_of.emplace(inputs[i], static_cast<int>(i));
    std::vector<std::string> program;
    auto next_reg = [&] { return static_cast<int>(inputs.size() + program.size()); };
    auto reg = [&](const Tensor* t) {
      const auto it = reg_of.find(t);
      if (it == reg_of.end())
        throw Error("elementwise_fusion: internal error: no register for tensor " + quote(t->name()));
      return it->second;
    };
    auto operand = [&](const Layer* layer, int i) {
      double v = 0.0;
      if (immediate(layer, i, &v)) {
        program.push_back(fused_const(v));
        return next_reg() - 1;
      }
      return reg(layer->input(i));
    };

    std::string names;
    for (const Layer* layer : group) {
      names += (names.empty() ? "'" : ", '") + layer->name() + "'";
      const std::string& type = layer->type();
      if (type == kLayerActivation) {
        const int x = reg(layer->input(0));
        program.push_back(fused_activation(parse_activation_type(layer->attrs().get_string("kind")), x,
                                           attr_float(*layer, "alpha"), attr_float(*layer, "beta")));
      } else if (type == kLayerUnary) {
        program.push_back(fused_unary(parse_unary_op(layer->attrs().get_string("op")), reg(layer->input(0))));
      } else if (type == kLayerScale) {
        double term[4] = {0.0, 1.0, 0.0, 1.0};  // x, scale, shift, power
        for (int i = 1; i < layer->num_inputs(); ++i) {
          if (layer->input(i)) scalar_constant(layer->input(i), &term[i]);
        }
        program.push_back(fused_scale(reg(layer->input(0)), term[1], term[2], term[3]));
      } else {  // ElementWise
        const int a = operand(layer, 0);
        const int b = operand(layer, 1);
        program.push_back(fused_binary(parse_elementwise_op(layer->attrs().get_string("op")), a, b));
      }
      reg_of.emplace(layer->output(0), next_reg() - 1);
    }

    Attributes attrs;
    attrs.set("program", program);
    Layer* fused = network_.add_layer(kLayerFusedElementWise, inputs, 1, std::move(attrs),
                                      network_.unique_name(root->name() + "_fused"));
    const std::string fused_name = fused->name();
    // A member pinned to float32 (Layer::set_precision, --layer-precisions) pins the fused layer.
    for (const Layer* layer : group) {
      if (layer->has_precision()) fused->set_precision(DataType::kFloat32);
    }
    // Constant operands may be orphaned by the removal; collect them while the group is alive.
    std::vector<Tensor*> constants;
    for (const Layer* layer : group) {
      for (int i = 0; i < layer->num_inputs(); ++i) {
        if (passes::is_constant(layer->input(i))) constants.push_back(layer->input(i));
      }
    }
    editor.take_over(root->output(0), fused->output(0));
    for (auto it = group.rbegin(); it != group.rend(); ++it) {
      // Forget the removed layers, so that a new layer at a recycled address starts unknown.
      fusible_.erase(*it);
      position_.erase(*it);
      editor.remove_layer(*it);
    }
    editor.drop_unused_constants(constants);
    passes::log_change(ctx_, "elementwise_fusion: fused " + std::to_string(group.size()) + " layers (" + names +
                                 ") into " + quote(fused_name));
  }

  Network& network_;
  PassContext& ctx_;
  passes::ShapeTable table_;
  std::map<const Layer*, int> position_;  // lookups only
  std::map<const Layer*, bool> fusible_;  // lookups only
};

}  // namespace

int pass_elementwise_fusion(Network& network, PassContext& ctx) { return ElementWiseFusion(network, ctx).run(); }

}  // namespace kiln
