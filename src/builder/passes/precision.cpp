// fp16 precision assignment (BuilderConfig::fp16): every layer that has a kernel taking its
// float data inputs in float16 runs in float16; the others stay in float32. Casts are inserted
// only where a float tensor's type differs from what its reader runs in, float32 constants read
// by float16 layers are converted once at build time, Cast layers that produce float32 inside
// the network produce float16 instead, and network inputs and outputs keep their declared types
// (a Cast at the edge, shown by `kiln inspect`). A layer whose precision was set explicitly
// (Layer::set_precision(kFloat32)) stays in float32, and so do layer normalizations and the
// residual additions feeding them, for accuracy (find_accuracy_sensitive). Shape inputs (Reshape's shape, Resize's
// scales, ...) are never converted: they are read on the host.
//
// The decision per layer asks the device's kernel registry whether some kernel's supports()
// accepts the layer with float16 inputs, at the first shape point (every kernel must accept the
// layer at every point later in tactic selection, which re-checks). Plugins take part through
// their supports_format_combination: a plugin that accepts both float16 and float32 gets the
// faster on CUDA (timed, casts in front included) and float16, first in the preference order,
// elsewhere (plugin_type below). Formats are the layout pass's: plugins are not timed per format.
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "src/backends/kernel.h"
#include "src/builder/passes/pass_utils.h"
#include "src/builder/tactic_selection.h"
#include "src/core/half.h"
#include "src/ir/op_schema.h"
#include "src/ir/shape_inference.h"
#include "src/core/text.h"

namespace kiln {
namespace {

bool is_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16; }

// Float16 holds magnitudes up to 65504: larger finite constants are clamped to +-65504 (as
// TensorRT does with weights), not rounded to infinity, so that e.g. an attention mask of
// float32's lowest value stays finite and a fully masked softmax row does not become NaN.
// `clamped` (optional) receives the number of values clamped.
HostTensor convert_float(const HostTensor& v, DataType to, int64_t* clamped = nullptr) {
  HostTensor out(to, v.dims());
  if (to == DataType::kFloat16) {
    constexpr float kMaxHalf = 65504.0f;
    const float* src = v.as<float>();
    half* dst = out.as<half>();
    int64_t n = 0;
    for (int64_t i = 0; i < v.count(); ++i) {
      float x = src[i];
      if (std::isfinite(x) && std::fabs(x) > kMaxHalf) {
        x = std::copysign(kMaxHalf, x);
        ++n;
      }
      dst[i] = half(x);
    }
    if (clamped) *clamped = n;
  } else {
    const half* src = v.as<half>();
    float* dst = out.as<float>();
    for (int64_t i = 0; i < v.count(); ++i) dst[i] = static_cast<float>(src[i]);
  }
  return out;
}

class PrecisionAssigner {
 public:
  PrecisionAssigner(Network& net, PassContext& ctx, const TensorStates& states)
      : net_(net), ctx_(ctx), editor_(net), states_(states) {}

  int run() {
    find_accuracy_sensitive();
    std::map<std::string, DataType> declared_outputs;
    for (int i = 0; i < net_.num_outputs(); ++i) declared_outputs[net_.output(i)->name()] = type_of(net_.output(i));
    for (Layer* layer : editor_.snapshot()) {
      if (layer->type() == kLayerConstant) continue;
      visit(layer);
    }
    // Network outputs keep their declared type.
    for (const auto& [name, type] : declared_outputs) {
      Tensor* out = net_.find_tensor(name);
      if (out && is_float(type) && is_float(type_of(out)) && type_of(out) != type) restore_output(out, type);
    }
    std::vector<Tensor*> old_constants;
    for (const auto& [t, conv] : converted_constants_) old_constants.push_back(const_cast<Tensor*>(t));
    editor_.drop_unused_constants(old_constants);
    return changes_;
  }

 private:
  DataType type_of(const Tensor* t) const {
    auto it = types_.find(t);
    if (it != types_.end()) return it->second;
    auto s = states_.find(t);
    return s != states_.end() ? s->second.type : t->type();
  }
  const TensorState* state_of(const Tensor* t) const {
    auto it = states_.find(t);
    if (it != states_.end()) return &it->second;
    auto e = extra_states_.find(t);
    return e != extra_states_.end() ? &e->second : nullptr;
  }

  // The input descriptions of `layer` with the float data inputs given as `as`.
  std::vector<TensorDesc> descs_as(const Layer& layer, const std::set<int>& data_inputs, DataType as) {
    std::vector<TensorDesc> d;
    for (int i = 0; i < layer.num_inputs(); ++i) {
      TensorDesc desc;
      const Tensor* t = layer.input(i);
      if (!t) {
        desc.present = false;
      } else {
        const TensorState* s = state_of(t);
        desc.type = data_inputs.count(i) ? as : type_of(t);
        desc.dims = s ? s->dims : t->dims();
        desc.format = t->format();
        desc.value = s && s->value && s->value->type() == desc.type ? s->value.get() : nullptr;
        const HostTensor* constant = passes::constant_value(t);
        if (!desc.value && constant && data_inputs.count(i)) {
          // Kernels may look at weights in supports(): show them converted.
          preview_.push_back(std::make_unique<HostTensor>(convert_float(*constant, as)));
          desc.value = preview_.back().get();
        }
      }
      d.push_back(desc);
    }
    return d;
  }

  bool some_kernel_supports(const Layer& layer, const std::vector<TensorDesc>& descs) const {
    for (const KernelEntry* e : KernelRegistry::instance().find(ctx_.config.device, layer.type())) {
      if (!e->supports || e->supports(layer, descs)) return true;
    }
    return false;
  }

  bool host_known(const Layer& layer) const {
    if (layer.type() == kLayerPlugin) return false;
    for (int i = 0; i < layer.num_outputs(); ++i) {
      const TensorState* s = state_of(layer.output(i));
      if (!s || !s->value) return false;
    }
    return true;
  }

  void visit(Layer* layer) {
    const OpSchema* schema = OpSchemaRegistry::instance().find(layer->type());
    std::set<int> shape_inputs;
    if (schema) shape_inputs.insert(schema->shape_inputs.begin(), schema->shape_inputs.end());
    std::set<int> data_inputs;
    for (int i = 0; i < layer->num_inputs(); ++i) {
      const Tensor* t = layer->input(i);
      if (t && !shape_inputs.count(i) && is_float(type_of(t))) data_inputs.insert(i);
    }
    if (layer->type() == kLayerCast && !host_known(*layer)) {
      // A float32 Cast inside the network produces float16 instead (its readers run in fp16
      // where they can; an edge output gets its declared type back at the end).
      if (layer->attrs().get_string("to") == "float32" && !pinned_fp32(*layer)) {
        layer->attrs().set("to", std::string("float16"));
        ++changes_;
      }
    }
    if (!data_inputs.empty() && !host_known(*layer)) {
      DataType want = DataType::kFloat16;
      if (pinned_fp32(*layer) || keep_fp32_.count(layer)) {
        want = DataType::kFloat32;
      } else if (layer->type() == kLayerPlugin) {
        want = plugin_type(*layer, data_inputs);
      } else if (!some_kernel_supports(*layer, descs_as(*layer, data_inputs, DataType::kFloat16))) {
        want = DataType::kFloat32;
      }
      for (int i : data_inputs) {
        if (type_of(layer->input(i)) != want) layer->set_input(i, converted(layer->input(i), want));
      }
    }
    // Output types follow from the (possibly new) input types.
    std::vector<TensorState> in_states(static_cast<size_t>(layer->num_inputs()));
    std::vector<const TensorState*> ptrs;
    for (int i = 0; i < layer->num_inputs(); ++i) {
      const Tensor* t = layer->input(i);
      if (!t) {
        ptrs.push_back(nullptr);
        continue;
      }
      const TensorState* s = state_of(t);
      TensorState& st = in_states[static_cast<size_t>(i)];
      st.type = type_of(t);
      st.dims = s ? s->dims : t->dims();
      if (s && s->value && s->value->type() == st.type) st.value = s->value;
      ptrs.push_back(&st);
    }
    const auto outs = infer_layer(*layer, ptrs);
    for (int i = 0; i < layer->num_outputs() && i < static_cast<int>(outs.size()); ++i) {
      types_[layer->output(i)] = outs[static_cast<size_t>(i)].first;
    }
  }

  // A plugin may accept several type combinations (supports_format_combination). Its float data
  // inputs are tried as float16, then float32 (the preference order: what --fp16 asks for
  // first). With one accepted, that one; with several, on a device that times kernels (CUDA,
  // config.time_tactics) the fastest, each timed as the plugin's kernel plus the casts that
  // combination needs in front of it (casts after it are decided later, by its readers, and not
  // counted), else the first accepted. None accepted: float32, and tactic selection reports
  // that no kernel takes the layer.
  DataType plugin_type(const Layer& layer, const std::set<int>& data_inputs) {
    std::vector<DataType> accepted;
    for (DataType t : {DataType::kFloat16, DataType::kFloat32}) {
      if (some_kernel_supports(layer, descs_as(layer, data_inputs, t))) accepted.push_back(t);
    }
    if (accepted.empty()) return DataType::kFloat32;
    if (accepted.size() == 1) return accepted.front();
    if (ctx_.config.device != DeviceType::kCUDA || !builder_times_kernels(ctx_.config)) {
      passes::log_change(
          ctx_, "precision: plugin layer " + quote(layer.name()) + " accepts float16 and float32; float16 " +
                    "(first in the preference order; not timed" +
                    (ctx_.config.device != DeviceType::kCUDA ? " on " + std::string(to_string(ctx_.config.device))
                                                             : std::string(" at this optimization level")) +
                    ")");
      return accepted.front();
    }
    std::vector<std::unique_ptr<Network>> scratch;  // the casts' own networks, alive while timing
    std::vector<TimedVariant> variants;
    for (DataType t : accepted) variants.push_back(variant_as(layer, data_inputs, t, scratch));
    bool cached = false;
    const DataType chosen = accepted[choose_fastest_variant(variants, ctx_.config, "plugin_precision", &cached)];
    passes::log_change(ctx_, "precision: plugin layer " + quote(layer.name()) + " runs in " + to_string(chosen) +
                                 " (timed against " + to_string(chosen == accepted[0] ? accepted[1] : accepted[0]) +
                                 ", casts in front included" + (cached ? "; from the timing cache)" : ")"));
    return chosen;
  }

  // The plugin layer with its float data inputs in `as`, and the casts that needs in front of it
  // (constants cost nothing: they are converted at build time), for timing.
  TimedVariant variant_as(const Layer& layer, const std::set<int>& data_inputs, DataType as,
                          std::vector<std::unique_ptr<Network>>& scratch) {
    TimedVariant v;
    v.name = to_string(as);
    v.layer = &layer;
    std::vector<TensorState> in_states(static_cast<size_t>(layer.num_inputs()));
    std::vector<const TensorState*> ptrs;
    for (int i = 0; i < layer.num_inputs(); ++i) {
      const Tensor* t = layer.input(i);
      if (!t) {
        ptrs.push_back(nullptr);
        continue;
      }
      const TensorState* s = state_of(t);
      TensorState& st = in_states[static_cast<size_t>(i)];
      const bool data = data_inputs.count(i) != 0;
      st.type = data ? as : type_of(t);
      st.dims = s ? s->dims : t->dims();
      const HostTensor* constant = passes::constant_value(t);
      if (s && s->value && s->value->type() == st.type) {
        st.value = s->value;
      } else if (constant && data) {
        st.value = std::make_shared<HostTensor>(convert_float(*constant, as));
      }
      v.states[t] = st;
      ptrs.push_back(&st);
      if (data && !constant && type_of(t) != as) {
        auto net = std::make_unique<Network>();
        Tensor* x = net->add_input("x", type_of(t), st.dims);
        Layer* cast = net->add_cast(x, as);
        TensorStates cast_states;
        cast_states[x] = TensorState{type_of(t), st.dims, nullptr};
        cast_states[cast->output(0)] = TensorState{as, st.dims, nullptr};
        v.extra.emplace_back(cast, std::move(cast_states));
        scratch.push_back(std::move(net));
      }
    }
    const auto outs = infer_layer(layer, ptrs);
    for (int o = 0; o < layer.num_outputs() && o < static_cast<int>(outs.size()); ++o) {
      v.states[layer.output(o)] =
          TensorState{outs[static_cast<size_t>(o)].first, outs[static_cast<size_t>(o)].second, nullptr};
    }
    return v;
  }

  // Layer normalization and the residual additions that feed it stay in float32, as PyTorch's
  // autocast keeps layer_norm in float32: a transformer's residual stream grows to magnitudes
  // where float16's rounding (2^-11 relative) leaves errors of ~1e-2 on the small outputs of the
  // next normalization (bert_tiny: 33 of 2,048 outputs off by more than 2e-2 relative with
  // everything in float16). The whole tree of additions feeding the normalization stays in
  // float32 (BERT's embeddings: word + token type + position), and so do Gathers from constant
  // tables that feed it (embedding lookups move data and compute nothing, so float16 buys
  // nothing there but rounding: bert_tiny's embedding tables in float16 alone put 15 of its
  // 4,096 outputs out of 2e-2). The cost is a cast at each branch into and out of the stream;
  // CNNs (batch normalization folded into convolutions) have no such layers.
  void find_accuracy_sensitive() {
    int layer_norms = 0;
    for (Layer* layer : editor_.snapshot()) {
      if (accuracy_role(*layer) != AccuracyRole::kAnchor) continue;
      if (pinned_fp16(*layer)) continue;
      keep_fp32_.insert(layer);
      ++layer_norms;
      std::vector<const Tensor*> pending = {layer->input(0)};
      while (!pending.empty()) {
        const Tensor* x = pending.back();
        pending.pop_back();
        Layer* producer = x ? x->producer() : nullptr;
        if (!producer || pinned_fp16(*producer) || keep_fp32_.count(producer)) continue;
        const AccuracyRole role = accuracy_role(*producer);
        if (role != AccuracyRole::kStream && role != AccuracyRole::kLeaf) continue;
        keep_fp32_.insert(producer);
        if (role == AccuracyRole::kStream) {
          for (int i = 0; i < producer->num_inputs(); ++i) pending.push_back(producer->input(i));
        }
      }
    }
    if (!keep_fp32_.empty()) {
      passes::log_change(ctx_, "precision: " + std::to_string(layer_norms) + " layer normalization(s) and " +
                                   std::to_string(keep_fp32_.size() - static_cast<size_t>(layer_norms)) +
                                   " residual addition(s) and table lookup(s) feeding them kept in float32 for "
                                   "accuracy (Layer::set_precision(kFloat16) overrides)");
    }
  }

  // The layer's part in the float32 stream, from its schema's OpTraits.
  static AccuracyRole accuracy_role(const Layer& layer) {
    const OpSchema* schema = OpSchemaRegistry::instance().find(layer.type());
    return schema && schema->traits.accuracy_role ? schema->traits.accuracy_role(layer) : AccuracyRole::kNone;
  }

  static bool pinned_fp16(const Layer& layer) {
    return layer.has_precision() && layer.precision() == DataType::kFloat16;
  }

  static bool pinned_fp32(const Layer& layer) {
    return layer.has_precision() && layer.precision() == DataType::kFloat32;
  }

  std::set<const Layer*> keep_fp32_;

  // `t` in type `to`: a converted constant, or the output of a (shared) Cast layer.
  Tensor* converted(Tensor* t, DataType to) {
    const auto key = std::make_pair(static_cast<const Tensor*>(t), to);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Tensor* result = nullptr;
    const HostTensor* value = passes::constant_value(t);
    if (value && value->type() != to) {
      int64_t clamped = 0;
      result = editor_.add_constant(convert_float(*value, to, &clamped),
                                    t->name() + (to == DataType::kFloat16 ? ".fp16" : ".fp32"));
      converted_constants_[t] = result;
      passes::log_change(
          ctx_, "precision: constant " + quote(t->name()) + " stored as " + to_string(to) +
                    (clamped ? " (" + std::to_string(clamped) + " value(s) beyond float16's range clamped to +-65504)"
                             : std::string()));
    } else {
      Attributes a;
      a.set("to", std::string(to_string(to)));
      Layer* cast = net_.add_layer(kLayerCast, {t}, 1, a, net_.unique_name(t->name() + ".to_" + to_string(to)));
      result = cast->output(0);
      passes::log_change(ctx_, "precision: cast " + quote(t->name()) + " to " + to_string(to) + " for its " +
                                   to_string(to) + " readers");
    }
    types_[result] = to;
    if (const TensorState* s = state_of(t)) extra_states_[result] = TensorState{to, s->dims, nullptr};
    ++changes_;
    cache_[key] = result;
    return result;
  }

  // Gives network output `out` its declared type back: its producer now writes a renamed
  // internal tensor and a Cast writes the output under the original name.
  void restore_output(Tensor* out, DataType declared) {
    const std::string name = out->name();
    const DataType computed = type_of(out);
    Attributes a;
    a.set("to", std::string(to_string(declared)));
    Layer* cast = editor_.append_to_output(out, kLayerCast, a, ".to_" + std::string(to_string(declared)),
                                           "." + std::string(to_string(computed)));
    types_[cast->output(0)] = declared;
    passes::log_change(ctx_, "precision: output " + quote(name) + " computed in " + to_string(computed) +
                                 ", cast back to its declared " + to_string(declared));
    ++changes_;
  }

  Network& net_;
  PassContext& ctx_;
  passes::GraphEditor editor_;
  const TensorStates& states_;
  std::unordered_map<const Tensor*, DataType> types_;
  std::unordered_map<const Tensor*, TensorState> extra_states_;
  std::map<std::pair<const Tensor*, DataType>, Tensor*> cache_;
  std::map<const Tensor*, Tensor*> converted_constants_;
  std::vector<std::unique_ptr<HostTensor>> preview_;
  int changes_ = 0;
};

}  // namespace

int pass_fp16_precision(Network& network, PassContext& ctx) {
  if (!ctx.config.fp16) return 0;
  const auto points = passes::shape_points_of(network, ctx);
  if (points.empty()) return 0;
  const TensorStates states = infer_shapes(network, points.front());
  PrecisionAssigner assigner(network, ctx, states);
  return assigner.run();
}

}  // namespace kiln
