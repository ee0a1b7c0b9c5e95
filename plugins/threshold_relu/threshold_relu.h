// ThresholdReLU: y = max(x, threshold), element-wise (README.md has the details). The plugin,
// its creator (registered as "ThresholdReLU", version "1", namespace "") and the kernels' entry
// points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "plugins/common/unary_plugin.h"

namespace kiln::plugins {

// y[i] = max(x[i], threshold) for i < n (NaN stays NaN), float32, up to num_threads threads
// (threshold_relu_cpu.cpp).
void threshold_relu_cpu(const float* x, float* y, int64_t n, float threshold, int num_threads);
// The same on CUDA for float32 or float16 on `stream` (threshold_relu.cu; CUDA builds only).
// Returns 0 or a cudaError_t.
int threshold_relu_cuda(const void* x, void* y, int64_t n, DataType type, float threshold, void* stream);

class ThresholdReluPlugin final : public UnaryPlugin {
 public:
  static constexpr const char* kName = "ThresholdReLU";
  static constexpr float kDefaultThreshold = 0.0f;

  // Throws kiln::Error when threshold is not finite.
  ThresholdReluPlugin(std::string layer_name, float threshold);

  std::string type() const override { return kName; }
  std::unique_ptr<Plugin> clone() const override;
  PluginFieldCollection fields() const override;
  float threshold() const { return threshold_; }

 protected:
  void run_cpu(const float* x, float* y, int64_t n, int num_threads) const override;
  int run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const override;

 private:
  float threshold_;
};

class ThresholdReluCreator final : public PluginCreator {
 public:
  std::string name() const override { return ThresholdReluPlugin::kName; }
  std::vector<PluginFieldSpec> field_schema() const override;
  // `threshold` (float32, default 0.0) must be finite; kiln::Error naming the layer otherwise.
  std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const override;
};

}  // namespace kiln::plugins
