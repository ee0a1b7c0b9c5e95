// Whole-network shape/type inference with host evaluation of shape arithmetic, and host
// evaluation of single layers through the CPU reference kernels.
#include "src/ir/shape_inference.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "kiln/error.h"
#include "src/backends/kernel.h"
#include "src/ir/op_schema.h"
#include "src/ir/plugin_hooks.h"
#include "src/core/text.h"

namespace kiln {

namespace {

// Prefixes errors that do not name a layer yet.
[[noreturn]] void rethrow_for_layer(const Layer& layer, const std::exception& e) {
  // std::bad_alloc from a container says only "std::bad_alloc".
  const std::string msg = dynamic_cast<const std::bad_alloc*>(&e) ? std::string("out of memory") : e.what();
  if (msg.rfind("layer '", 0) == 0) throw Error(msg);
  throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): " + msg);
}

HostTensor shape_value(const Layer& layer, const Dims& dims) {
  const int64_t rank = dims.rank();
  int64_t start = layer.attrs().get_int("start", 0);
  int64_t end = layer.attrs().get_int("end", std::numeric_limits<int64_t>::max());
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  const int64_t n = std::max<int64_t>(end - start, 0);
  HostTensor t(DataType::kInt64, Dims{n});
  for (int64_t i = 0; i < n; ++i) t.as<int64_t>()[i] = dims[static_cast<int>(start + i)];
  return t;
}

// String tensors reach only the layer types whose schema says takes_strings (the others'
// kernels compute on numbers and would read StringRefs as bytes).
void check_string_support(const ShapeContext& ctx, const std::vector<std::pair<DataType, Dims>>& outputs) {
  const Layer& layer = ctx.layer();
  std::string which;
  for (int i = 0; i < ctx.num_inputs() && which.empty(); ++i) {
    if (ctx.has_input(i) && ctx.input_type(i) == DataType::kString) which = "input " + std::to_string(i);
  }
  for (size_t i = 0; i < outputs.size() && which.empty(); ++i) {
    if (outputs[i].first == DataType::kString) which = "output " + std::to_string(i);
  }
  if (which.empty()) return;
  const OpSchema* schema = layer.type() == kLayerPlugin ? nullptr : OpSchemaRegistry::instance().find(layer.type());
  if (schema && schema->takes_strings) return;
  std::string allowed;
  for (const std::string& type : OpSchemaRegistry::instance().types()) {
    const OpSchema* s = OpSchemaRegistry::instance().find(type);
    if (s && s->takes_strings) allowed += (allowed.empty() ? "" : ", ") + type;
  }
  ctx.fail(which + " is a string tensor; string tensors are supported only by " + allowed +
           " (on the CPU); convert with Cast first");
}

}  // namespace

std::vector<std::pair<DataType, Dims>> infer_layer(const Layer& layer, const std::vector<const TensorState*>& inputs,
                                                   const std::unordered_map<const Tensor*, int64_t>* known_sizes,
                                                   DataDependence* dependence) {
  std::vector<ShapeContext::Input> ins;
  ins.reserve(inputs.size());
  for (int i = 0; i < layer.num_inputs(); ++i) {
    ShapeContext::Input in;
    const TensorState* s = static_cast<size_t>(i) < inputs.size() ? inputs[static_cast<size_t>(i)] : nullptr;
    if (layer.input(i) && s) {
      in.tensor = layer.input(i);
      in.type = s->type;
      in.dims = s->dims;
      in.value = s->value.get();
    }
    ins.push_back(in);
  }
  ShapeContext ctx(layer, std::move(ins), known_sizes);
  if (layer.type() == kLayerPlugin) {
    plugin_infer_shapes(ctx);
  } else {
    const OpSchema* schema = OpSchemaRegistry::instance().find(layer.type());
    if (!schema) ctx.fail("unknown layer type " + quote(layer.type()));
    const int n = layer.num_inputs();
    if (n < schema->min_inputs || (schema->max_inputs >= 0 && n > schema->max_inputs)) {
      ctx.fail("has " + std::to_string(n) + " inputs, expected " + std::to_string(schema->min_inputs) +
               (schema->max_inputs < 0 ? " or more" : " to " + std::to_string(schema->max_inputs)));
    }
    for (int i = 0; i < std::min(n, schema->min_inputs); ++i) {
      if (!ctx.has_input(i)) ctx.fail("required input " + std::to_string(i) + " is missing");
    }
    if (!schema->infer) ctx.fail("layer type has no shape inference");
    schema->infer(ctx);
  }
  std::vector<std::pair<DataType, Dims>> out;
  for (int i = 0; i < layer.num_outputs(); ++i) {
    if (!ctx.output_set(i)) ctx.fail("shape inference did not set output " + std::to_string(i));
    out.emplace_back(ctx.output_type(i), ctx.output_dims(i));
  }
  check_string_support(ctx, out);
  for (int k : ctx.size_outputs()) {
    if (ctx.output_type(k) != DataType::kInt64 || ctx.output_dims(k).volume() != 1) {
      ctx.fail("data-dependent size output " + std::to_string(k) + " must be an int64 scalar, it is " +
               to_string(ctx.output_type(k)) + " " + ctx.output_dims(k).to_string());
    }
  }
  if (dependence) {
    dependence->size_outputs = ctx.size_outputs();
    dependence->unknown = ctx.has_unknown_extent();
  }
  return out;
}

std::vector<HostTensor> evaluate_on_host(const Layer& layer, const std::vector<const HostTensor*>& inputs) {
  std::vector<TensorState> states(inputs.size());
  std::vector<const TensorState*> state_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] && !inputs[i]->empty()) {
      states[i].type = inputs[i]->type();
      states[i].dims = inputs[i]->dims();
      states[i].value = std::make_shared<HostTensor>(*inputs[i]);
      state_ptrs.push_back(&states[i]);
    } else {
      state_ptrs.push_back(nullptr);
    }
  }
  const auto shapes = infer_layer(layer, state_ptrs);
  const KernelEntry* entry = KernelRegistry::instance().find(DeviceType::kCPU, layer.type(), "reference");
  if (!entry) {
    const auto all = KernelRegistry::instance().find(DeviceType::kCPU, layer.type());
    if (all.empty())
      throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): no CPU kernel to evaluate it on the host");
    entry = all.back();
  }
  std::vector<HostTensor> outputs;
  for (const auto& [type, dims] : shapes) outputs.emplace_back(type, dims);
  std::vector<TensorDesc> in_desc, out_desc;
  KernelContext kc;
  kc.layer = &layer;
  kc.num_threads = 1;
  StringArena strings;  // the kernel's string characters, copied into the outputs below
  kc.strings = &strings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorDesc d;
    TensorView v;
    if (state_ptrs[i]) {
      d.type = v.type = inputs[i]->type();
      d.dims = v.dims = inputs[i]->dims();
      d.value = inputs[i];
      v.data = const_cast<void*>(inputs[i]->data());
    } else {
      d.present = false;
    }
    in_desc.push_back(d);
    kc.inputs.push_back(v);
  }
  for (auto& o : outputs) {
    TensorDesc d;
    d.type = o.type();
    d.dims = o.dims();
    out_desc.push_back(d);
    kc.outputs.push_back(TensorView{o.type(), o.dims(), TensorFormat::kLinear, o.data()});
  }
  try {
    auto kernel = entry->create(layer);
    kernel->prepare(layer, in_desc, out_desc, 1);
    std::vector<uint8_t> workspace(kernel->workspace_size());
    kc.workspace = workspace.empty() ? nullptr : workspace.data();
    kc.workspace_size = workspace.size();
    kernel->execute(kc);
    // String outputs point into `strings`: give each output its own copy of the characters.
    for (auto& o : outputs) {
      if (o.type() == DataType::kString) o = HostTensor::from_bytes(o.type(), o.dims(), o.data(), o.nbytes());
    }
    // Data-dependent outputs were written compactly with the extents the kernel put in its
    // size outputs: keep that prefix.
    DataDependence dd;
    (void)infer_layer(layer, state_ptrs, nullptr, &dd);
    if (!dd.size_outputs.empty()) {
      std::unordered_map<const Tensor*, int64_t> sizes;
      for (int k : dd.size_outputs) sizes[layer.output(k)] = outputs[static_cast<size_t>(k)].as<int64_t>()[0];
      const auto actual = infer_layer(layer, state_ptrs, &sizes);
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (actual[k].second == outputs[k].dims()) continue;
        // from_bytes copies the leading elements (and, for strings, their characters).
        const size_t nbytes = static_cast<size_t>(tensor_byte_size(actual[k].first, actual[k].second));
        outputs[k] = HostTensor::from_bytes(actual[k].first, actual[k].second, outputs[k].data(), nbytes);
      }
    }
  } catch (const std::exception& e) {
    rethrow_for_layer(layer, e);
  }
  return outputs;
}

TensorStates infer_shapes(const Network& network, const std::map<std::string, Dims>& input_dims,
                          const ShapeInferenceOptions& options, const std::map<std::string, HostTensor>* input_values) {
  TensorStates states;
  for (int i = 0; i < network.num_inputs(); ++i) {
    const Tensor* t = network.input(i);
    auto it = input_dims.find(t->name());
    Dims dims = t->dims();
    if (it != input_dims.end()) {
      dims = it->second;
      if (dims.rank() != t->dims().rank()) {
        throw Error("input " + quote(t->name()) + ": dims " + dims.to_string() + " have rank " +
                    std::to_string(dims.rank()) + ", the network declares " + t->dims().to_string() + " (rank " +
                    std::to_string(t->dims().rank()) + ")");
      }
      for (int k = 0; k < dims.rank(); ++k) {
        if (t->dims()[k] >= 0 && dims[k] != t->dims()[k]) {
          throw Error("input " + quote(t->name()) + ": dims " + dims.to_string() + " do not match the declared " +
                      t->dims().to_string() + " at axis " + std::to_string(k));
        }
      }
    }
    if (dims.is_dynamic()) {
      throw Error("input " + quote(t->name()) + " has dynamic dims " + dims.to_string() +
                  " and no concrete dims were given (set an optimization profile or the input shape)");
    }
    try {
      (void)tensor_byte_size(t->type(), dims);
    } catch (const Error& e) {
      throw Error("input " + quote(t->name()) + " is too large: " + e.what());
    }
    TensorState s;
    s.type = t->type();
    s.dims = dims;
    if (input_values) {
      auto v = input_values->find(t->name());
      if (v != input_values->end()) s.value = std::make_shared<HostTensor>(v->second);
    }
    states[t] = s;
  }

  for (Layer* layer : network.topological_order()) {
    try {
      if (layer->type() == kLayerConstant) {
        const HostTensor& value = layer->attrs().get_tensor("value");
        TensorState s;
        s.type = value.type();
        s.dims = value.dims();
        s.value = std::make_shared<HostTensor>(value);
        states[layer->output(0)] = s;
        continue;
      }
      std::vector<const TensorState*> ins;
      bool all_known = true;
      bool derived = false;  // reads a tensor whose dims/value are upper bounds
      for (int i = 0; i < layer->num_inputs(); ++i) {
        const Tensor* t = layer->input(i);
        if (!t) {
          ins.push_back(nullptr);
          continue;
        }
        auto it = states.find(t);
        if (it == states.end()) {
          throw Error("input " + quote(t->name()) + " is not produced by any layer and is not a network input");
        }
        ins.push_back(&it->second);
        if (!it->second.value) all_known = false;
        if (it->second.data_dependent) derived = true;
      }
      DataDependence dd;
      const auto shapes = infer_layer(*layer, ins, options.known_sizes, &dd);
      std::vector<TensorState> outs(shapes.size());
      for (size_t k = 0; k < shapes.size(); ++k) {
        outs[k].type = shapes[k].first;
        outs[k].dims = shapes[k].second;
        outs[k].data_dependent = derived || dd.unknown;
      }
      if (dd.unknown || derived) {
        // Which axes move with the sizes: infer again as if every unknown size were 0.
        std::vector<std::pair<DataType, Dims>> at_zero;
        if (dd.unknown) {
          std::unordered_map<const Tensor*, int64_t> zeros;
          if (options.known_sizes) zeros = *options.known_sizes;
          for (int k : dd.size_outputs) zeros.emplace(layer->output(k), 0);
          at_zero = infer_layer(*layer, ins, &zeros);
        }
        for (size_t k = 0; k < outs.size(); ++k) {
          for (int a = 0; a < outs[k].dims.rank(); ++a) {
            if (derived || outs[k].dims[a] != at_zero[k].second[a]) outs[k].dd_axes |= 1u << a;
          }
        }
      }
      for (int k : dd.size_outputs) {
        TensorState& st = outs[static_cast<size_t>(k)];
        st.dd_axes = 0;
        st.dd_size = true;
        st.data_dependent = derived;
        if (!options.known_sizes) continue;
        auto known = options.known_sizes->find(layer->output(k));
        if (known == options.known_sizes->end()) continue;
        st.value = std::make_shared<HostTensor>(DataType::kInt64, st.dims);
        st.value->as<int64_t>()[0] = known->second;
      }
      if (layer->type() == kLayerShape) {
        outs[0].value = std::make_shared<HostTensor>(shape_value(*layer, ins[0]->dims));
      } else if (all_known && layer->type() != kLayerPlugin) {
        bool small = true;
        for (const auto& o : outs) small = small && o.dims.volume() <= options.max_host_eval_elements;
        if (small || options.fold_all_constants) {
          std::vector<const HostTensor*> values;
          for (const TensorState* s : ins) values.push_back(s ? s->value.get() : nullptr);
          auto results = evaluate_on_host(*layer, values);
          for (size_t k = 0; k < results.size(); ++k) {
            outs[k].dims = results[k].dims();  // data-dependent extents are exact now
            outs[k].data_dependent = derived;
            if (!derived) outs[k].dd_axes = 0;
            outs[k].value = std::make_shared<HostTensor>(std::move(results[k]));
          }
        }
      }
      for (size_t k = 0; k < outs.size(); ++k) states[layer->output(static_cast<int>(k))] = std::move(outs[k]);
    } catch (const std::exception& e) {
      rethrow_for_layer(*layer, e);
    }
  }
  return states;
}

}  // namespace kiln
