// The control for the broken plugins: "GoodAffine" (version "1", namespace "kiln_test") does
// everything the broken ones get wrong, so the suite must PASS it: float32 and float16 on the
// CPU in linear and channels-last format (element-wise, so the layout does not matter), its own
// serialized bytes with a size check, and scratch declared through workspace_size().
#include <cstring>

#include "src/core/half.h"
#include "tests/broken_plugins/affine_plugin.h"

namespace kiln::test {

class GoodAffine final : public AffinePlugin {
 public:
  static constexpr const char* kName = "GoodAffine";
  GoodAffine(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<GoodAffine>(*this); }

  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const override {
    const PluginTensorDesc& d = in_out[static_cast<size_t>(pos)];
    if (num_inputs != 1 || num_outputs != 1) return false;
    if (d.type != DataType::kFloat32 && d.type != DataType::kFloat16) return false;
    return pos == 0 || (in_out[1].type == in_out[0].type && in_out[1].format == in_out[0].format);
  }
  size_t workspace_size(const std::vector<PluginTensorDesc>& inputs,
                        const std::vector<PluginTensorDesc>&) const override {
    return static_cast<size_t>(inputs[0].dims.volume()) * sizeof(float);
  }
  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>&, const void* const* inputs,
              void* const* outputs, void* workspace, const PluginExecContext&) override {
    const int64_t n = in[0].dims.volume();
    auto* scratch = static_cast<float*>(workspace);
    if (in[0].type == DataType::kFloat16) {
      const auto* x = static_cast<const half*>(inputs[0]);
      auto* y = static_cast<half*>(outputs[0]);
      for (int64_t i = 0; i < n; ++i) scratch[i] = alpha_ * static_cast<float>(x[i]);
      for (int64_t i = 0; i < n; ++i) y[i] = half(scratch[i] + beta_);
      return 0;
    }
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    for (int64_t i = 0; i < n; ++i) scratch[i] = alpha_ * x[i];
    for (int64_t i = 0; i < n; ++i) y[i] = scratch[i] + beta_;
    return 0;
  }
  std::vector<uint8_t> serialize() const override {
    const float v[2] = {alpha_, beta_};
    std::vector<uint8_t> bytes(sizeof v);
    std::memcpy(bytes.data(), v, sizeof v);
    return bytes;
  }
};

class GoodAffineCreator final : public AffineCreator<GoodAffine> {
 public:
  std::unique_ptr<Plugin> deserialize(const std::string&, const void* data, size_t size) const override {
    float v[2];
    if (size != sizeof v)
      throw Error("GoodAffine: expected " + std::to_string(sizeof v) + " bytes, got " + std::to_string(size));
    std::memcpy(v, data, sizeof v);
    return std::make_unique<GoodAffine>(v[0], v[1]);
  }
};
KILN_REGISTER_PLUGIN(GoodAffineCreator);

}  // namespace kiln::test
