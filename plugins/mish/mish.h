// Mish: y = x * tanh(softplus(x)), element-wise, no fields (README.md has the details). The
// plugin, its creator (registered as "Mish", version "1", namespace "") and the kernels' entry
// points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "plugins/common/unary_plugin.h"

namespace kiln::plugins {

// y[i] = mish(x[i]) for i < n, float32, up to num_threads threads (mish_cpu.cpp).
void mish_cpu(const float* x, float* y, int64_t n, int num_threads);
// The same on CUDA for float32 or float16 on `stream` (mish.cu; CUDA builds only). Returns 0 or
// a cudaError_t.
int mish_cuda(const void* x, void* y, int64_t n, DataType type, void* stream);

class MishPlugin final : public UnaryPlugin {
 public:
  static constexpr const char* kName = "Mish";

  explicit MishPlugin(std::string layer_name);

  std::string type() const override { return kName; }
  std::unique_ptr<Plugin> clone() const override;
  PluginFieldCollection fields() const override { return {}; }

 protected:
  void run_cpu(const float* x, float* y, int64_t n, int num_threads) const override;
  int run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const override;
};

class MishCreator final : public PluginCreator {
 public:
  std::string name() const override { return MishPlugin::kName; }
  std::vector<PluginFieldSpec> field_schema() const override { return {}; }
  // Mish has no fields; kiln::Error naming the layer when any is given.
  std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const override;
};

}  // namespace kiln::plugins
