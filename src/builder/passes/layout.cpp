// Memory-format (layout) assignment. Tensor cores run float16 convolutions natively in
// channels-last (NHWC) memory; in NCHW cuDNN transposes around every convolution. On the CPU,
// oneDNN's fast float32 convolutions want blocked or NHWC memory: given NCHW, the oneDNN kernel
// reorders its input and output around every convolution (on small convolutions the two
// reorders cost as much as the convolution), while its NHWC kernels need no reorder at all (on
// AVX2 some 3x3 ones run up to 20% slower than the blocked ones; whole networks still gain,
// SqueezeNet the most: its fire modules are small convolutions and concatenations).
//
// This pass finds the connected regions of layers that can all run in channels-last (some
// kernel of the device accepts them with their activation inputs in that format) and that
// contain convolutions worth it (float16 ones on CUDA, float32 ones on the CPU), makes every
// activation inside such a region channels-last, and inserts Reformat layers only at the
// region's edges: where a linear tensor enters (a network input, a reshape's output, ...) and
// where a channels-last tensor leaves to a layer that needs linear memory or to a network output
// (outputs keep the linear format users expect), except where a kernel of the layer reads the
// linear tensor as it is (a CPU stem convolution reading the network's NCHW input:
// reads_linear()). A region whose convolutions cannot pay for the reformats it needs is left
// linear: on CUDA when it has fewer convolutions than reformats; on the CPU, where every linear
// convolution already pays two reorders, when it has fewer than half as many. At builder
// optimization level 5 (with timing on, either device) that rule gives way to a measurement:
// each region's layers are timed with the kernels the builder would choose, once as they are
// (linear) and once channels-last with the Reformats the region would need, and the faster way
// is kept (the verbose log gives both times). Identical layer configurations are timed once per
// build; the region decisions are not kept in the timing cache.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/kernel.h"
#include "src/builder/passes/pass_utils.h"
#include "src/builder/tactic_selection.h"
#include "src/ir/op_schema.h"
#include "src/ir/shape_inference.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// Whether the layer type's kernels may run in channels-last (its schema's OpTraits; plugins,
// which have no schema, are asked through their format combinations). Each layer still has to be
// accepted by a kernel's supports() with channels-last inputs.
bool format_capable_type(const Layer& l) {
  if (l.type() == kLayerPlugin) return true;
  const OpSchema* schema = OpSchemaRegistry::instance().find(l.type());
  return schema && schema->traits.channels_last;
}

class LayoutAssigner {
 public:
  // `states` per shape point, the first one deciding ranks and types.
  LayoutAssigner(Network& net, PassContext& ctx, const std::vector<TensorStates>& states)
      : net_(net), ctx_(ctx), editor_(net), all_states_(states), states_(states.front()) {}

  int run() {
    order_ = net_.topological_order();
    for (size_t i = 0; i < order_.size(); ++i) index_[order_[i]] = static_cast<int>(i);
    parent_.resize(order_.size());
    std::iota(parent_.begin(), parent_.end(), 0);
    std::vector<bool> capable(order_.size(), false);
    for (size_t i = 0; i < order_.size(); ++i) capable[i] = can_run_channels_last(*order_[i]);
    // Regions: capable layers joined through the activations they pass to each other.
    for (size_t i = 0; i < order_.size(); ++i) {
      if (!capable[i]) continue;
      for (int k : activation_inputs(*order_[i])) {
        const Layer* p = order_[i]->input(k)->producer();
        if (p && index_.count(p) && capable[static_cast<size_t>(index_.at(p))])
          unite(static_cast<int>(i), index_.at(p));
      }
    }
    std::map<int, std::vector<Layer*>> regions;
    for (size_t i = 0; i < order_.size(); ++i) {
      if (capable[i]) regions[find(static_cast<int>(i))].push_back(order_[i]);
    }
    int changes = 0;
    for (auto& [root, layers] : regions) {
      const int convs =
          static_cast<int>(std::count_if(layers.begin(), layers.end(), [&](const Layer* l) { return is_seed(*l); }));
      if (convs == 0) continue;
      const int edges = count_edges(layers);
      bool channels_last = pays_off(convs, edges);
      if (times_regions()) {
        const RegionCost cost = time_region(layers);
        const bool measured = cost.linear < kInfinity && cost.channels_last < kInfinity;
        passes::log_change(
            ctx_, "layout: level 5 timed the region of " + std::to_string(layers.size()) + " layers around '" +
                      layers.front()->name() + "': " +
                      (measured ? "linear " + ms_text(cost.linear) + ", channels-last " + ms_text(cost.channels_last) +
                                      " with " + std::to_string(cost.reformats) + " reformats"
                                : "not every layer ran both ways, the rule decides" + cost.failures));
        if (measured) channels_last = cost.channels_last < cost.linear;
      }
      if (!channels_last) {
        passes::log_change(ctx_, "layout: region of " + std::to_string(layers.size()) + " layers around '" +
                                     layers.front()->name() + "' stays linear (" + std::to_string(convs) +
                                     " convolutions, " + std::to_string(edges) + " reformats needed)");
        continue;
      }
      for (Layer* l : layers) {
        in_region_.insert(l);
        for (int i = 0; i < l->num_outputs(); ++i) {
          if (rank_of(l->output(i)) >= 3) l->output(i)->set_format(TensorFormat::kChannelsLast);
        }
      }
      passes::log_change(ctx_, "layout: " + std::to_string(layers.size()) + " layers around '" +
                                   layers.front()->name() + "' run channels-last (" + std::to_string(convs) +
                                   " convolutions)");
      ++changes;
    }
    if (!changes) return 0;
    return changes + insert_reformats();
  }

 private:
  int rank_of(const Tensor* t) const {
    auto it = states_.find(t);
    return it != states_.end() ? it->second.dims.rank() : t->dims().rank();
  }
  bool host_known(const Tensor* t) const {
    auto it = states_.find(t);
    return it != states_.end() && it->second.value;
  }

  // Inputs carrying activations: not constants, not shape inputs, rank >= 3.
  std::vector<int> activation_inputs(const Layer& l) const {
    const OpSchema* schema = OpSchemaRegistry::instance().find(l.type());
    std::set<int> shape_inputs;
    if (schema) shape_inputs.insert(schema->shape_inputs.begin(), schema->shape_inputs.end());
    std::vector<int> r;
    for (int i = 0; i < l.num_inputs(); ++i) {
      const Tensor* t = l.input(i);
      if (t && !shape_inputs.count(i) && !passes::is_constant(t) && !host_known(t) && rank_of(t) >= 3) r.push_back(i);
    }
    return r;
  }

  // Convolutions that gain from channels-last: float16 ones on CUDA (tensor cores), float32 ones
  // on the CPU (oneDNN's NHWC kernels; the CPU has no fast float16 convolution).
  bool is_seed(const Layer& l) const {
    const OpSchema* schema = OpSchemaRegistry::instance().find(l.type());
    if (!schema || !schema->traits.channels_last_seed) return false;
    const DataType seed_type = ctx_.config.device == DeviceType::kCUDA ? DataType::kFloat16 : DataType::kFloat32;
    auto it = states_.find(l.input(0));
    return it != states_.end() && it->second.type == seed_type &&
           (rank_of(l.input(0)) == 4 || rank_of(l.input(0)) == 5);
  }

  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

  static std::string ms_text(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f ms", ms);
    return buf;
  }

  // Level 5 with timing: regions are decided by timing them both ways.
  bool times_regions() const { return ctx_.config.optimization_level >= 5 && builder_times_kernels(ctx_.config); }

  struct RegionCost {
    double linear = 0, channels_last = 0;  // ms per inference at the first shape point
    int reformats = 0;                     // that channels-last needs
    std::string failures;
  };

  // The region's layers timed as they are (every activation linear) and channels-last: their
  // outputs channels-last, an input from outside channels-last too unless the layer reads it
  // linear directly (reads_linear), plus a Reformat per tensor entering or leaving (unless every
  // outside reader takes it channels-last, reads_channels_last). Formats are restored after.
  RegionCost time_region(const std::vector<Layer*>& layers) {
    if (!timer_) timer_ = std::make_unique<LayerTimer>(ctx_.config);
    RegionCost cost;
    const std::set<const Layer*> members(layers.begin(), layers.end());
    for (const Layer* l : layers) cost.linear += timer_->chosen_kernel_ms(*l, states_, &cost.failures);
    std::vector<std::pair<Tensor*, TensorFormat>> saved;
    const auto set_format = [&](Tensor* t, TensorFormat f) {
      saved.emplace_back(t, t->format());
      t->set_format(f);
    };
    for (Layer* l : layers) {
      for (int o = 0; o < l->num_outputs(); ++o) {
        if (rank_of(l->output(o)) >= 3) set_format(l->output(o), TensorFormat::kChannelsLast);
      }
    }
    std::set<Tensor*> entering, leaving;
    for (Layer* l : layers) {
      const size_t mark = saved.size();
      for (int i : activation_inputs(*l)) {
        Tensor* t = l->input(i);
        if (members.count(t->producer()) || reads_linear(*l, i)) continue;
        entering.insert(t);
        set_format(t, TensorFormat::kChannelsLast);
      }
      cost.channels_last += timer_->chosen_kernel_ms(*l, states_, &cost.failures);
      while (saved.size() > mark) {  // entering tensors back to linear for the next layer's questions
        saved.back().first->set_format(saved.back().second);
        saved.pop_back();
      }
      for (int o = 0; o < l->num_outputs(); ++o) {
        Tensor* t = l->output(o);
        if (t->format() != TensorFormat::kChannelsLast) continue;
        bool needs = t->is_network_output();
        for (Layer* c : passes::distinct_consumers(t)) {
          if (members.count(c) || c->type() == kLayerShape) continue;
          for (int i = 0; i < c->num_inputs(); ++i) {
            if (c->input(i) == t && !reads_channels_last(*c, i)) needs = true;
          }
        }
        if (needs) leaving.insert(t);
      }
    }
    for (Tensor* t : entering) {
      cost.channels_last += reformat_ms(t, TensorFormat::kLinear, TensorFormat::kChannelsLast, &cost.failures);
    }
    for (Tensor* t : leaving) {
      cost.channels_last += reformat_ms(t, TensorFormat::kChannelsLast, TensorFormat::kLinear, &cost.failures);
    }
    cost.reformats = static_cast<int>(entering.size() + leaving.size());
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) it->first->set_format(it->second);
    return cost;
  }

  // A Reformat of t's dims and type from one format to another, timed on its own.
  double reformat_ms(const Tensor* t, TensorFormat from, TensorFormat to, std::string* failures) {
    auto it = states_.find(t);
    if (it == states_.end()) return kInfinity;
    Network scratch;
    Tensor* in = scratch.add_input("t", it->second.type, it->second.dims);
    in->set_format(from);
    Layer* r = scratch.add_layer(kLayerReformat, {in}, 1, {}, "reformat " + t->name());
    r->output(0)->set_format(to);
    try {
      return timer_->chosen_kernel_ms(*r, infer_shapes(scratch, {{"t", it->second.dims}}), failures);
    } catch (const std::exception& e) {
      *failures += "\n  reformat of " + t->name() + ": " + e.what();
      return kInfinity;
    }
  }

  // Whether a region with `convs` seed convolutions is worth `edges` reformats.
  bool pays_off(int convs, int edges) const {
    if (ctx_.config.device == DeviceType::kCUDA) return convs >= edges;
    return 2 * convs >= edges;
  }

  // The layer's input descriptors at the first `points` shape points, with the inputs in
  // `channels_last` asked about in that format and the others in their current one.
  std::vector<std::vector<TensorDesc>> input_descs(const Layer& l, size_t points,
                                                   const std::set<int>& channels_last) const {
    std::vector<std::vector<TensorDesc>> descs(points);
    for (size_t p = 0; p < points; ++p) {
      const TensorStates& states = all_states_[p];
      for (int i = 0; i < l.num_inputs(); ++i) {
        TensorDesc d;
        const Tensor* t = l.input(i);
        if (!t) {
          d.present = false;
        } else {
          auto it = states.find(t);
          d.type = it != states.end() ? it->second.type : t->type();
          d.dims = it != states.end() ? it->second.dims : t->dims();
          d.value = it != states.end() ? it->second.value.get() : nullptr;
          d.format = channels_last.count(i) ? TensorFormat::kChannelsLast : t->format();
        }
        descs[p].push_back(d);
      }
    }
    return descs;
  }

  bool can_run_channels_last(const Layer& l) const {
    if (!format_capable_type(l)) return false;
    const auto acts = activation_inputs(l);
    if (acts.empty()) return false;
    for (int i = 0; i < l.num_outputs(); ++i) {
      const int r = rank_of(l.output(i));
      if (r != 4 && r != 5) return false;
    }
    for (int i : acts) {
      const int r = rank_of(l.input(i));
      if (r != rank_of(l.output(0))) return false;
    }
    // The kernel has to take the layer at every shape point the tactic selection will ask about:
    // on the CPU one that declines some point would leave the layer to a reference kernel that
    // reads linear memory. CUDA asks at the first point only (its tactics are timed there).
    const size_t points = ctx_.config.device == DeviceType::kCPU ? all_states_.size() : 1;
    const auto descs = input_descs(l, points, std::set<int>(acts.begin(), acts.end()));
    // Kernels read the output format from the layer's output tensors: ask with them channels-last.
    Layer& layer = const_cast<Layer&>(l);
    std::vector<TensorFormat> saved;
    for (int i = 0; i < layer.num_outputs(); ++i) {
      saved.push_back(layer.output(i)->format());
      layer.output(i)->set_format(TensorFormat::kChannelsLast);
    }
    bool ok = false;
    for (const KernelEntry* e : KernelRegistry::instance().find(ctx_.config.device, l.type())) {
      if (!e->supports) continue;  // a kernel without supports() makes no claim about formats
      ok = std::all_of(descs.begin(), descs.end(), [&](const std::vector<TensorDesc>& d) { return e->supports(l, d); });
      if (ok) break;
    }
    for (int i = 0; i < layer.num_outputs(); ++i) layer.output(i)->set_format(saved[static_cast<size_t>(i)]);
    return ok;
  }

  // Whether layer `l`, outside every region, can take its activation input `i` channels-last with
  // its output linear, at every shape point: a CPU Shuffle (the "fast" kernel starts its first
  // transpose from the stored order, so a Reformat followed by a transpose becomes one
  // transpose). Other layer types are not asked: a supports() that ignores formats would take
  // channels-last data as linear.
  bool reads_channels_last(const Layer& l, int i) const {
    if (ctx_.config.device != DeviceType::kCPU || l.type() != kLayerShuffle) return false;
    for (int o = 0; o < l.num_outputs(); ++o) {
      if (l.output(o)->format() != TensorFormat::kLinear) return false;
    }
    const auto descs = input_descs(l, all_states_.size(), {i});
    // Some kernel must take it; one without supports() makes no claim about formats and could
    // still be chosen, so then the answer is no.
    bool any = false;
    for (const KernelEntry* e : KernelRegistry::instance().find(ctx_.config.device, l.type())) {
      if (!e->supports) return false;
      const bool ok =
          std::all_of(descs.begin(), descs.end(), [&](const std::vector<TensorDesc>& d) { return e->supports(l, d); });
      any = any || ok;
    }
    return any;
  }

  // Whether layer `l`, inside a region, can take its linear activation input `i` as it is (with
  // its outputs channels-last) at every shape point: a CPU convolution with a network's few input
  // channels (the "nchw_direct_avx2" stem kernel). Asked only of kernels that tell the formats
  // apart: one that takes the input linear and declines it channels-last. A kernel that takes both
  // (oneDNN's reorders internally) makes no claim, and one without supports() none at all.
  bool reads_linear(const Layer& l, int i) const {
    if (ctx_.config.device != DeviceType::kCPU || l.type() != kLayerConvolution || i != 0) return false;
    for (int o = 0; o < l.num_outputs(); ++o) {
      if (l.output(o)->format() != TensorFormat::kChannelsLast) return false;
    }
    const auto as_is = input_descs(l, all_states_.size(), {});
    const auto last = input_descs(l, all_states_.size(), {i});
    for (const KernelEntry* e : KernelRegistry::instance().find(ctx_.config.device, l.type())) {
      if (!e->supports) continue;
      const auto takes = [&](const std::vector<TensorDesc>& d) { return e->supports(l, d); };
      if (std::all_of(as_is.begin(), as_is.end(), takes) && std::none_of(last.begin(), last.end(), takes)) {
        return true;
      }
    }
    return false;
  }

  // Reformats a region would need: activations entering from outside and leaving to outside.
  int count_edges(const std::vector<Layer*>& layers) const {
    std::set<const Layer*> members(layers.begin(), layers.end());
    std::set<std::string> entering, leaving;
    for (const Layer* l : layers) {
      for (int i : activation_inputs(*l)) {
        if (!members.count(l->input(i)->producer())) entering.insert(l->input(i)->name());
      }
      for (int o = 0; o < l->num_outputs(); ++o) {
        const Tensor* t = l->output(o);
        bool out = t->is_network_output();
        for (const Layer* c : passes::distinct_consumers(t)) {
          if (!members.count(c) && c->type() != kLayerShape) out = true;
        }
        if (out) leaving.insert(t->name());
      }
    }
    return static_cast<int>(entering.size() + leaving.size());
  }

  Tensor* reformatted(Tensor* t, TensorFormat to) {
    const auto key = std::make_pair(t->name(), static_cast<int>(to));
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Layer* r = net_.add_layer(kLayerReformat, {t}, 1, {},
                              net_.unique_name(t->name() + (to == TensorFormat::kChannelsLast ? ".nhwc" : ".nchw")));
    r->output(0)->set_format(to);
    cache_[key] = r->output(0);
    return r->output(0);
  }

  int insert_reformats() {
    int changes = 0;
    std::vector<Tensor*> outputs_to_fix;
    for (Layer* l : order_) {
      if (l->type() == kLayerConstant || l->type() == kLayerShape) continue;
      const bool inside = in_region_.count(l) != 0;
      for (int i : activation_inputs(*l)) {
        Tensor* t = l->input(i);
        const TensorFormat want = inside ? TensorFormat::kChannelsLast : TensorFormat::kLinear;
        if (!inside && t->format() == TensorFormat::kChannelsLast && reads_channels_last(*l, i)) {
          passes::log_change(ctx_, "layout: " + quote(l->name()) + " reads channels-last " + quote(t->name()) +
                                       " directly (no Reformat)");
          ++changes;
          continue;
        }
        if (inside && t->format() == TensorFormat::kLinear && reads_linear(*l, i)) {
          passes::log_change(
              ctx_, "layout: " + quote(l->name()) + " reads linear " + quote(t->name()) + " directly (no Reformat)");
          ++changes;
          continue;
        }
        if (t->format() != want) {
          l->set_input(i, reformatted(t, want));
          ++changes;
        }
      }
      if (!inside) {
        // Inputs of rank < 3 or host-known ones are never channels-last; nothing to do.
        continue;
      }
      for (int o = 0; o < l->num_outputs(); ++o) {
        if (l->output(o)->is_network_output() && l->output(o)->format() == TensorFormat::kChannelsLast) {
          outputs_to_fix.push_back(l->output(o));
        }
      }
    }
    for (Tensor* out : outputs_to_fix) {
      Layer* r = editor_.append_to_output(out, kLayerReformat, {}, ".nchw", ".nhwc");
      r->output(0)->set_format(TensorFormat::kLinear);
      passes::log_change(ctx_, "layout: output " + quote(r->output(0)->name()) + " reformatted back to linear");
      ++changes;
    }
    return changes;
  }

  int find(int x) {
    while (parent_[static_cast<size_t>(x)] != x)
      x = parent_[static_cast<size_t>(x)] = parent_[static_cast<size_t>(parent_[static_cast<size_t>(x)])];
    return x;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  }

  Network& net_;
  PassContext& ctx_;
  passes::GraphEditor editor_;
  const std::vector<TensorStates>& all_states_;
  const TensorStates& states_;
  std::vector<Layer*> order_;
  std::map<const Layer*, int> index_;
  std::vector<int> parent_;
  std::set<const Layer*> in_region_;
  std::map<std::pair<std::string, int>, Tensor*> cache_;
  std::unique_ptr<LayerTimer> timer_;  // level 5's region timing, made on first use
};

}  // namespace

int pass_layout(Network& network, PassContext& ctx) {
  // On the CPU channels-last only saves time: an unoptimized build keeps every tensor linear
  // (on CUDA the pass runs regardless, as part of the fp16 request).
  if (ctx.config.device == DeviceType::kCPU && ctx.config.disable_optimizations) return 0;
  const auto points = passes::shape_points_of(network, ctx);
  if (points.empty()) return 0;
  std::vector<TensorStates> states;
  for (const auto& point : points) {
    states.push_back(infer_shapes(network, point));
    if (ctx.config.device != DeviceType::kCPU) break;  // CUDA decides at the first point
  }
  LayoutAssigner assigner(network, ctx, states);
  return assigner.run();
}

}  // namespace kiln
