// GELU: y = x * Phi(x), exact (erf) or with the tanh approximation, element-wise (README.md has
// the details). The plugin, its creator (registered as "GELU", version "1", namespace "") and
// the kernels' entry points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "plugins/common/unary_plugin.h"

namespace kiln::plugins {

// The `approximation` field: "erf" (exact) or "tanh".
enum class GeluApproximation : int32_t { kErf, kTanh };
const char* to_string(GeluApproximation approximation);
// Inverse of to_string; throws kiln::Error naming `where`, the field and the valid values.
GeluApproximation parse_gelu_approximation(const std::string& text, const std::string& where);

// y[i] = gelu(x[i]) for i < n, float32, up to num_threads threads (gelu_cpu.cpp).
void gelu_cpu(const float* x, float* y, int64_t n, GeluApproximation approximation, int num_threads);
// The same on CUDA for float32 or float16 on `stream` (gelu.cu; CUDA builds only). Returns 0 or a
// cudaError_t.
int gelu_cuda(const void* x, void* y, int64_t n, DataType type, GeluApproximation approximation, void* stream);

class GeluPlugin final : public UnaryPlugin {
 public:
  static constexpr const char* kName = "GELU";
  static constexpr GeluApproximation kDefaultApproximation = GeluApproximation::kErf;

  GeluPlugin(std::string layer_name, GeluApproximation approximation);

  std::string type() const override { return kName; }
  std::unique_ptr<Plugin> clone() const override;
  PluginFieldCollection fields() const override;
  GeluApproximation approximation() const { return approximation_; }

 protected:
  void run_cpu(const float* x, float* y, int64_t n, int num_threads) const override;
  int run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const override;

 private:
  GeluApproximation approximation_;
};

class GeluCreator final : public PluginCreator {
 public:
  std::string name() const override { return GeluPlugin::kName; }
  std::vector<PluginFieldSpec> field_schema() const override;
  // `approximation` (string "erf" | "tanh", default "erf"); kiln::Error naming the layer, the
  // field and the valid values otherwise.
  std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const override;
};

}  // namespace kiln::plugins
