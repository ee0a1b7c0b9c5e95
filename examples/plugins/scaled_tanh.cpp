// ScaledTanh: y = alpha * tanh(beta * x), element-wise: a complete external kiln plugin, written
// the way a user writes one (public headers only, built as its own shared library with
// find_package(kiln), loaded with `--plugins`). See README.md in this folder and
// docs/writing-a-plugin.md, which walks through every function below.
//
// Registered as "ScaledTanh", version "1", namespace "" (so the ONNX node custom::ScaledTanh maps
// to it). Fields: alpha (float32, default 1), beta (float32, default 1).
// Kernels: CPU float32; CUDA float32 when built with CUDA (scaled_tanh.cu; kiln_add_plugin then
// defines KILN_PLUGIN_WITH_CUDA).
// Element-wise, so the layout does not matter: linear and channels-last both work as long as
// input and output share it.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/plugin.h"

#ifdef KILN_PLUGIN_WITH_CUDA
// scaled_tanh.cu: launches on `stream`; returns 0 or the cudaError_t of the launch.
int scaled_tanh_cuda(const float* x, float* y, int64_t n, float alpha, float beta, void* stream);
#endif

namespace example {

using namespace kiln;

class ScaledTanhPlugin final : public Plugin {
 public:
  static constexpr const char* kName = "ScaledTanh";

  ScaledTanhPlugin(std::string layer_name, float alpha, float beta)
      : layer_name_(std::move(layer_name)), alpha_(alpha), beta_(beta) {}

  // ---- identity: must match the creator, the engine finds the creator by these ----
  std::string type() const override { return kName; }
  std::string version() const override { return "1"; }
  std::string plugin_namespace() const override { return ""; }

  // ---- builder questions ----
  int num_outputs() const override { return 1; }

  // Asked while the network is validated and shapes are inferred: output type = input type.
  std::vector<DataType> output_types(const std::vector<DataType>& input_types) const override {
    if (input_types.size() != 1) throw Error("ScaledTanh '" + layer_name_ + "': expects exactly 1 input");
    return {input_types[0]};
  }

  // Symbolic output dims: the input's own expressions, so dynamic dims (the batch) stay dynamic.
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    if (index != 0 || inputs.size() != 1) throw Error("ScaledTanh '" + layer_name_ + "': 1 input, 1 output");
    return inputs[0];
  }

  // Asked at build time for the device in target_device(): float32 in either layout, the output
  // like the input.
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const override {
    if (num_inputs != 1 || num_outputs != 1) return false;
    const PluginTensorDesc& d = in_out[static_cast<size_t>(pos)];
    if (d.type != DataType::kFloat32) return false;
#ifndef KILN_PLUGIN_WITH_CUDA
    if (target_device() != DeviceType::kCPU) return false;
#endif
    return pos == 0 || (d.type == in_out[0].type && d.format == in_out[0].format);
  }

  // No scratch memory needed (the default workspace_size() returns 0).

  // ---- execution ----
  int enqueue(const std::vector<PluginTensorDesc>& input_descs, const std::vector<PluginTensorDesc>&,
              const void* const* inputs, void* const* outputs, void*, const PluginExecContext& exec) override {
    const int64_t n = input_descs[0].dims.volume();  // every element, batch included
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    if (exec.device == DeviceType::kCPU) {
      for (int64_t i = 0; i < n; ++i) y[i] = alpha_ * std::tanh(beta_ * x[i]);
      return 0;
    }
#ifdef KILN_PLUGIN_WITH_CUDA
    return scaled_tanh_cuda(x, y, n, alpha_, beta_, exec.stream);  // on the given stream, no sync
#else
    return 1;  // not reached: supports_format_combination refuses CUDA in this build
#endif
  }

  // ---- lifecycle and serialization ----
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<ScaledTanhPlugin>(*this); }

  // Everything create() needs to make this plugin again, under the names create() reads.
  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::float32("alpha", {alpha_}));
    f.add(PluginField::float32("beta", {beta_}));
    return f;
  }

 private:
  std::string layer_name_;
  float alpha_, beta_;
};

class ScaledTanhCreator final : public PluginCreator {
 public:
  std::string name() const override { return ScaledTanhPlugin::kName; }
  std::string version() const override { return "1"; }
  std::string plugin_namespace() const override { return ""; }

  // kiln checks given fields against this (type, count) and fills in the defaults.
  std::vector<PluginFieldSpec> field_schema() const override {
    return {
        {"alpha", PluginFieldType::kFloat32, 1, false, PluginField::float32("alpha", {1.0f}), "output scale"},
        {"beta", PluginFieldType::kFloat32, 1, false, PluginField::float32("beta", {1.0f}), "input scale"},
    };
  }

  std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const override {
    const float alpha = fields.get_float32("alpha"), beta = fields.get_float32("beta");
    if (!std::isfinite(alpha) || !std::isfinite(beta))
      throw Error("ScaledTanh '" + layer_name + "': alpha and beta must be finite");
    return std::make_unique<ScaledTanhPlugin>(layer_name, alpha, beta);
  }
};

// Registers the creator when the library is loaded (dlopen by --plugins / load_plugin_library).
KILN_REGISTER_PLUGIN(ScaledTanhCreator);

}  // namespace example
