// SigmoidGate: y = alpha * a * sigmoid(b) + beta, element-wise over two inputs of one shape: the
// example of a plugin with several inputs and fields of several types (docs/writing-a-plugin.md,
// "Several inputs"). Built into the same library as ScaledTanh (CMakeLists.txt in this folder).
//
// Registered as "SigmoidGate", version "1", namespace "". Fields: alpha (float32, default 1),
// beta (float32, default 0), mode (int64, default 0): mode 0 computes alpha * a * sigmoid(b) +
// beta, mode 1 the plain gate a * sigmoid(b) (alpha and beta are then ignored).
// Inputs a and b: float32, same dims (dynamic ones included), same format; output like a.
// Kernels: CPU float32; CUDA float32 when built with CUDA (sigmoid_gate.cu, KILN_PLUGIN_WITH_CUDA).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/plugin.h"

#ifdef KILN_PLUGIN_WITH_CUDA
// sigmoid_gate.cu: launches on `stream`; returns 0 or the cudaError_t of the launch.
int sigmoid_gate_cuda(const float* a, const float* b, float* y, int64_t n, float alpha, float beta, int mode,
                      void* stream);
#endif

namespace example {

using namespace kiln;

class SigmoidGatePlugin final : public Plugin {
 public:
  static constexpr const char* kName = "SigmoidGate";
  enum Mode : int64_t { kAffine = 0, kGateOnly = 1 };

  SigmoidGatePlugin(std::string layer_name, float alpha, float beta, int64_t mode)
      : layer_name_(std::move(layer_name)), alpha_(alpha), beta_(beta), mode_(mode) {}

  std::string type() const override { return kName; }
  std::string version() const override { return "1"; }
  std::string plugin_namespace() const override { return ""; }

  int num_outputs() const override { return 1; }

  // Throwing for any other input count is also how `kiln plugin check` finds that it takes two.
  std::vector<DataType> output_types(const std::vector<DataType>& input_types) const override {
    if (input_types.size() != 2) {
      throw Error("SigmoidGate '" + layer_name_ + "': expects 2 inputs (a, b), got " +
                  std::to_string(input_types.size()));
    }
    if (input_types[0] != input_types[1]) throw Error("SigmoidGate '" + layer_name_ + "': a and b must have one type");
    return {input_types[0]};
  }

  // The output has a's dims, and a and b must have the same dims. The ranks are known here; each
  // pair of extents is declared equal with require_equal, which kiln checks at once where both
  // are fixed by the network and otherwise for every shape (the profile's at build time, each
  // inference's at run time), failing with the layer's name and both values. So enqueue() only
  // ever sees equal dims.
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    if (index != 0 || inputs.size() != 2) throw Error("SigmoidGate '" + layer_name_ + "': 2 inputs, 1 output");
    if (inputs[0].rank() != inputs[1].rank()) {
      throw Error("SigmoidGate '" + layer_name_ + "': a and b must have the same rank (got " +
                  std::to_string(inputs[0].rank()) + " and " + std::to_string(inputs[1].rank()) + ")");
    }
    DimsExprs out;
    for (int i = 0; i < inputs[0].rank(); ++i) {
      out.d.push_back(exprs.require_equal(*inputs[0].d[static_cast<size_t>(i)], *inputs[1].d[static_cast<size_t>(i)]));
    }
    return out;
  }

  // float32 in either layout; b and the output like a (so the element-wise kernel can ignore the
  // layout).
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const override {
    if (num_inputs != 2 || num_outputs != 1) return false;
    const PluginTensorDesc& d = in_out[static_cast<size_t>(pos)];
    if (d.type != DataType::kFloat32) return false;
#ifndef KILN_PLUGIN_WITH_CUDA
    if (target_device() != DeviceType::kCPU) return false;
#endif
    return pos == 0 || (d.type == in_out[0].type && d.format == in_out[0].format);
  }

  int enqueue(const std::vector<PluginTensorDesc>& input_descs, const std::vector<PluginTensorDesc>&,
              const void* const* inputs, void* const* outputs, void*, const PluginExecContext& exec) override {
    const int64_t n = input_descs[0].dims.volume();
    const auto* a = static_cast<const float*>(inputs[0]);
    const auto* b = static_cast<const float*>(inputs[1]);
    auto* y = static_cast<float*>(outputs[0]);
    if (exec.device == DeviceType::kCPU) {
      for (int64_t i = 0; i < n; ++i) {
        const float gate = a[i] / (1.0f + std::exp(-b[i]));  // exp overflowing to inf gives 0, not NaN
        y[i] = mode_ == kGateOnly ? gate : alpha_ * gate + beta_;
      }
      return 0;
    }
#ifdef KILN_PLUGIN_WITH_CUDA
    return sigmoid_gate_cuda(a, b, y, n, alpha_, beta_, static_cast<int>(mode_), exec.stream);
#else
    return 1;  // not reached: supports_format_combination refuses CUDA in this build
#endif
  }

  std::unique_ptr<Plugin> clone() const override { return std::make_unique<SigmoidGatePlugin>(*this); }

  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::float32("alpha", {alpha_}));
    f.add(PluginField::float32("beta", {beta_}));
    f.add(PluginField::int64("mode", {mode_}));
    return f;
  }

 private:
  std::string layer_name_;
  float alpha_, beta_;
  int64_t mode_;
};

class SigmoidGateCreator final : public PluginCreator {
 public:
  std::string name() const override { return SigmoidGatePlugin::kName; }
  std::string version() const override { return "1"; }
  std::string plugin_namespace() const override { return ""; }

  std::vector<PluginFieldSpec> field_schema() const override {
    return {
        {"alpha", PluginFieldType::kFloat32, 1, false, PluginField::float32("alpha", {1.0f}), "scale (mode 0)"},
        {"beta", PluginFieldType::kFloat32, 1, false, PluginField::float32("beta", {0.0f}), "offset (mode 0)"},
        {"mode", PluginFieldType::kInt64, 1, false, PluginField::int64("mode", {0}),
         "0: alpha * a * sigmoid(b) + beta; 1: a * sigmoid(b)"},
    };
  }

  std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const override {
    const float alpha = fields.get_float32("alpha"), beta = fields.get_float32("beta");
    const int64_t mode = fields.get_int64("mode");
    if (!std::isfinite(alpha) || !std::isfinite(beta))
      throw Error("SigmoidGate '" + layer_name + "': alpha and beta must be finite");
    if (mode != SigmoidGatePlugin::kAffine && mode != SigmoidGatePlugin::kGateOnly)
      throw Error("SigmoidGate '" + layer_name + "': mode must be 0 (affine) or 1 (gate only), got " +
                  std::to_string(mode));
    return std::make_unique<SigmoidGatePlugin>(layer_name, alpha, beta, mode);
  }
};

KILN_REGISTER_PLUGIN(SigmoidGateCreator);

}  // namespace example
