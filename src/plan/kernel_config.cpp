// Kernel configuration shared by the builder and the runtime (kernel_config.h).
#include "src/plan/kernel_config.h"

#include <algorithm>
#include <map>
#include <string>

#include "kiln/error.h"
#include "src/plan/execution_plan.h"
#include "src/core/out_of_memory.h"
#include "src/core/text.h"

namespace kiln {

std::vector<TensorDesc> input_descs(const Layer& layer, const TensorStates& states) {
  std::vector<TensorDesc> descs;
  for (int i = 0; i < layer.num_inputs(); ++i) {
    TensorDesc d;
    const Tensor* t = layer.input(i);
    if (!t) {
      d.present = false;
    } else {
      const TensorState& s = states.at(t);
      d.type = s.type;
      d.dims = s.dims;
      d.format = t->format();
      d.value = s.value.get();
    }
    descs.push_back(d);
  }
  return descs;
}

std::vector<TensorDesc> output_descs(const Layer& layer, const TensorStates& states) {
  std::vector<TensorDesc> descs;
  for (int i = 0; i < layer.num_outputs(); ++i) {
    const TensorState& st = states.at(layer.output(i));
    descs.push_back(TensorDesc{st.type, st.dims, layer.output(i)->format(), true, nullptr});
  }
  return descs;
}

namespace {

Dims elementwise(const Dims& a, const Dims& b, bool take_min) {
  Dims r = a;
  for (int k = 0; k < r.rank(); ++k) r[k] = take_min ? std::min(a[k], b[k]) : std::max(a[k], b[k]);
  return r;
}

TensorRange range_of(const Tensor* t, const TensorStates& opt, const TensorStates& min, const TensorStates& max) {
  TensorRange r;
  r.format = t->format();
  const TensorState& o = opt.at(t);
  r.type = o.type;
  r.min = r.opt = r.max = o.dims;
  for (const TensorStates* other : {&min, &max}) {
    auto it = other->find(t);
    if (it == other->end() || it->second.dims.rank() != o.dims.rank()) continue;
    r.min = elementwise(r.min, it->second.dims, true);
    r.max = elementwise(r.max, it->second.dims, false);
  }
  for (int k = 0; k < o.dims.rank(); ++k) {
    if (o.dd_axes & (1u << k)) r.min[k] = 0;  // data-dependent: anything up to the bound
  }
  return r;
}

}  // namespace

void layer_ranges(const Layer& layer, const TensorStates& opt, const TensorStates& min, const TensorStates& max,
                  std::vector<TensorRange>& inputs, std::vector<TensorRange>& outputs) {
  inputs.clear();
  outputs.clear();
  for (int i = 0; i < layer.num_inputs(); ++i) {
    inputs.push_back(layer.input(i) ? range_of(layer.input(i), opt, min, max) : TensorRange{});
  }
  for (int i = 0; i < layer.num_outputs(); ++i) outputs.push_back(range_of(layer.output(i), opt, min, max));
}

ProfileStates profile_states(const Network& network, const OptimizationProfile& profile) {
  std::map<std::string, Dims> mn, op, mx;
  for (const auto& [name, s] : profile.all()) {
    mn[name] = s.min;
    op[name] = s.opt;
    mx[name] = s.max;
  }
  ProfileStates r;
  r.opt = infer_shapes(network, op);
  r.min = infer_shapes(network, mn);
  r.max = infer_shapes(network, mx);
  return r;
}

void configure_kernel_for_profile(Kernel& kernel, const Layer& layer, const ProfileStates& states) {
  std::vector<TensorRange> in, out;
  layer_ranges(layer, states.opt, states.min, states.max, in, out);
  try {
    kernel.configure_profile(layer, in, out);
  } catch (const std::exception& e) {
    throw Error("layer " + quote(layer.name()) + " (" + layer.type() +
                "): configuring its kernel for the optimization "
                "profile failed: " +
                exception_text(e));
  }
}

void configure_kernels_for_profile(const Network& network, const std::vector<Layer*>& steps,
                                   const std::vector<std::unique_ptr<Kernel>>& kernels,
                                   const OptimizationProfile& profile) {
  const ProfileStates states = profile_states(network, profile);
  for (size_t s = 0; s < steps.size() && s < kernels.size(); ++s) {
    const Layer& l = *steps[s];
    if (is_host_known(l, states.opt)) continue;
    configure_kernel_for_profile(*kernels[s], l, states);
  }
}

}  // namespace kiln
