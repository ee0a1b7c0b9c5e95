// Deliberately broken CPU plugins, each breaking one rule of the plugin interface the way real
// plugins do, for tests/plugin_check_test.cpp (names "Broken...", version "1", namespace
// "kiln_test"). Each comment says what is wrong and which check must catch it.
#include <cstring>

#include "tests/broken_plugins/affine_plugin.h"

namespace kiln::test {

// output_dims adds one to the last extent; the kernel writes the input's element count, so the
// output's tail keeps the poison. Caught by "shape ...": "output_dims says ... but the kernel wrote".
class BrokenWrongShape final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenWrongShape";
  BrokenWrongShape(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenWrongShape>(*this); }
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    DimsExprs out = inputs.at(0);
    const size_t last = out.d.size() - 1;
    out.d[last] = exprs.operation(DimOp::kSum, *out.d[last], *exprs.constant(1));
    return out;
  }
};
using BrokenWrongShapeCreator = AffineCreator<BrokenWrongShape>;
KILN_REGISTER_PLUGIN(BrokenWrongShapeCreator);

// Claims float16 on the CPU but the kernel reads and writes the buffers as float32. Caught by
// "types float16:linear -> float16:linear".
class BrokenHalfAsFloat final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenHalfAsFloat";
  BrokenHalfAsFloat(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenHalfAsFloat>(*this); }
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const override {
    const PluginTensorDesc& d = in_out[static_cast<size_t>(pos)];
    if (num_inputs != 1 || num_outputs != 1 || d.format != TensorFormat::kLinear) return false;
    if (d.type != DataType::kFloat32 && d.type != DataType::kFloat16) return false;
    return pos == 0 || in_out[1].type == in_out[0].type;
  }
};
using BrokenHalfAsFloatCreator = AffineCreator<BrokenHalfAsFloat>;
KILN_REGISTER_PLUGIN(BrokenHalfAsFloatCreator);

// Serializes its own bytes: serialize() writes only alpha (4 bytes) but deserialize() reads alpha
// and beta (8 bytes), past the end of what the engine stores. Caught by "bytes round trip".
class BrokenSerializedSize final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenSerializedSize";
  BrokenSerializedSize(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenSerializedSize>(*this); }
  std::vector<uint8_t> serialize() const override {
    std::vector<uint8_t> bytes(sizeof(float));
    std::memcpy(bytes.data(), &alpha_, sizeof(float));
    return bytes;
  }
};
class BrokenSerializedSizeCreator final : public AffineCreator<BrokenSerializedSize> {
 public:
  std::unique_ptr<Plugin> deserialize(const std::string&, const void* data, size_t) const override {
    float v[2];
    std::memcpy(v, data, sizeof v);  // trusts its own idea of the size, not `size`
    return std::make_unique<BrokenSerializedSize>(v[0], v[1]);
  }
};
KILN_REGISTER_PLUGIN(BrokenSerializedSizeCreator);

// serialize() writes (alpha, beta); deserialize() reads (beta, alpha). Caught by "bytes round trip"
// (different results and different bytes after the round trip).
class BrokenFieldOrder final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenFieldOrder";
  BrokenFieldOrder(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenFieldOrder>(*this); }
  std::vector<uint8_t> serialize() const override {
    const float v[2] = {alpha_, beta_};
    std::vector<uint8_t> bytes(sizeof v);
    std::memcpy(bytes.data(), v, sizeof v);
    return bytes;
  }
};
class BrokenFieldOrderCreator final : public AffineCreator<BrokenFieldOrder> {
 public:
  std::unique_ptr<Plugin> deserialize(const std::string&, const void* data, size_t size) const override {
    if (size != 2 * sizeof(float)) throw Error("BrokenFieldOrder: expected 8 bytes");
    float v[2];
    std::memcpy(v, data, sizeof v);
    return std::make_unique<BrokenFieldOrder>(v[1], v[0]);
  }
};
KILN_REGISTER_PLUGIN(BrokenFieldOrderCreator);

// fields() reports alpha under "beta" and beta under "alpha". Caught by "fields round trip".
class BrokenFieldsSwapped final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenFieldsSwapped";
  BrokenFieldsSwapped(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenFieldsSwapped>(*this); }
  PluginFieldCollection fields() const override {
    PluginFieldCollection f;
    f.add(PluginField::float32("alpha", {beta_}));
    f.add(PluginField::float32("beta", {alpha_}));
    return f;
  }
};
using BrokenFieldsSwappedCreator = AffineCreator<BrokenFieldsSwapped>;
KILN_REGISTER_PLUGIN(BrokenFieldsSwappedCreator);

// Uses the workspace as scratch (one float per element) but declares workspace_size() = 0.
// Caught by "workspace": "wrote N bytes of scratch but declared workspace_size() = 0".
class BrokenScratch final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenScratch";
  BrokenScratch(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenScratch>(*this); }
  int enqueue(const std::vector<PluginTensorDesc>& input_descs, const std::vector<PluginTensorDesc>&,
              const void* const* inputs, void* const* outputs, void* workspace, const PluginExecContext&) override {
    const auto* x = static_cast<const float*>(inputs[0]);
    auto* y = static_cast<float*>(outputs[0]);
    auto* scratch = static_cast<float*>(workspace);
    const int64_t n = input_descs[0].dims.volume();
    for (int64_t i = 0; i < n; ++i) scratch[i] = alpha_ * x[i];
    for (int64_t i = 0; i < n; ++i) y[i] = scratch[i] + beta_;
    return 0;
  }
};
using BrokenScratchCreator = AffineCreator<BrokenScratch>;
KILN_REGISTER_PLUGIN(BrokenScratchCreator);

// Processes the volume of dims[1..] only, as if the batch were always 1. Caught by the "shape"
// rows with batch > 1: "(element count ignores the batch?)".
class BrokenIgnoresBatch final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenIgnoresBatch";
  BrokenIgnoresBatch(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenIgnoresBatch>(*this); }

 protected:
  int64_t element_count(const Dims& dims) const override { return dims.rank() > 0 ? dims.volume() / dims[0] : 1; }
};
using BrokenIgnoresBatchCreator = AffineCreator<BrokenIgnoresBatch>;
KILN_REGISTER_PLUGIN(BrokenIgnoresBatchCreator);

// output_dims returns the batch as the constant 1 (as if evaluated for one fixed shape) instead of
// the input's symbolic extent. Caught by "dynamic dims": "output dim 0 is the constant 1, it
// should follow the input's dynamic dim".
class BrokenConstantDims final : public AffinePlugin {
 public:
  static constexpr const char* kName = "BrokenConstantDims";
  BrokenConstantDims(float a, float b) : AffinePlugin(kName, a, b) {}
  std::unique_ptr<Plugin> clone() const override { return std::make_unique<BrokenConstantDims>(*this); }
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    DimsExprs out = inputs.at(0);
    out.d[0] = exprs.constant(1);
    return out;
  }
};
using BrokenConstantDimsCreator = AffineCreator<BrokenConstantDims>;
KILN_REGISTER_PLUGIN(BrokenConstantDimsCreator);

}  // namespace kiln::test
