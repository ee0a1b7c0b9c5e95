// A small, correct element-wise test plugin, y = alpha * x + beta (fields alpha, beta: float32,
// defaults 1 and 0), that the deliberately broken plugins of this folder derive from, each
// breaking exactly one rule. They are registered under names such as "BrokenWrongShape",
// version "1", namespace "kiln_test", and tests/plugin_check_test.cpp asserts that
// `kiln plugin check` (kiln::check_plugin) FAILs each one with the right message.
//
// CPU only, float32 linear, one input, identity shapes; derived classes override one answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/plugin.h"

namespace kiln::test {

inline constexpr const char* kTestNamespace = "kiln_test";

class AffinePlugin : public Plugin {
 public:
  AffinePlugin(std::string type, float alpha, float beta) : type_(std::move(type)), alpha_(alpha), beta_(beta) {}

  std::string type() const override { return type_; }
  std::string plugin_namespace() const override { return kTestNamespace; }
  int num_outputs() const override { return 1; }
  std::vector<DataType> output_types(const std::vector<DataType>& input_types) const override {
    if (input_types.size() != 1) throw Error(type_ + ": expects 1 input");
    return {input_types[0]};
  }
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    if (index != 0 || inputs.size() != 1) throw Error(type_ + ": expects 1 input and 1 output");
    return inputs[0];
  }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const override {
    if (num_inputs != 1 || num_outputs != 1) return false;
    if (in_out[static_cast<size_t>(pos)].type != DataType::kFloat32 ||
        in_out[static_cast<size_t>(pos)].format != TensorFormat::kLinear)
      return false;
    return pos == 0 || (in_out[1].type == in_out[0].type && in_out[1].format == in_out[0].format);
  }
  int enqueue(const std::vector<PluginTensorDesc>& input_descs, const std::vector<PluginTensorDesc>& output_descs,
              const void* const* inputs, void* const* outputs, void* workspace,
              const PluginExecContext& exec) override {
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    const int64_t n = element_count(input_descs[0].dims);
    for (int64_t i = 0; i < n; ++i) y[i] = alpha_ * x[i] + beta_;
    return 0;
  }
  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::float32("alpha", {alpha_}));
    f.add(PluginField::float32("beta", {beta_}));
    return f;
  }

 protected:
  // How many elements the kernel processes (the broken batch plugin overrides it).
  virtual int64_t element_count(const Dims& dims) const { return dims.volume(); }

  std::string type_;
  float alpha_, beta_;
};

// Makes `P` (constructed from alpha and beta) under P::kName, version "1", namespace "kiln_test".
template <typename P>
class AffineCreator : public PluginCreator {
 public:
  std::string name() const override { return P::kName; }
  std::string plugin_namespace() const override { return kTestNamespace; }
  std::vector<PluginFieldSpec> field_schema() const override {
    PluginFieldSpec alpha{"alpha", PluginFieldType::kFloat32, 1, false, PluginField::float32("alpha", {1.0f}), "scale"};
    PluginFieldSpec beta{"beta", PluginFieldType::kFloat32, 1, false, PluginField::float32("beta", {0.0f}), "offset"};
    return {alpha, beta};
  }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection& fields) const override {
    return std::make_unique<P>(fields.get_float32("alpha"), fields.get_float32("beta"));
  }
};

}  // namespace kiln::test
