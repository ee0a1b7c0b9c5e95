// TemperatureSwish: y = x * sigmoid(temperature * x), element-wise (README.md has the details).
// The plugin, its creator (registered as "TemperatureSwish", version "1", namespace ""), and
// the kernels' entry points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "plugins/common/unary_plugin.h"

namespace kiln::plugins {

// y[i] = x[i] * sigmoid(temperature * x[i]) for i < n, float32, up to num_threads threads
// (temperature_swish_cpu.cpp).
void temperature_swish_cpu(const float* x, float* y, int64_t n, float temperature, int num_threads);
// The same on CUDA for float32 or float16 on `stream` (temperature_swish.cu; CUDA builds only).
// Returns 0 or a cudaError_t.
int temperature_swish_cuda(const void* x, void* y, int64_t n, DataType type, float temperature, void* stream);

class TemperatureSwishPlugin final : public UnaryPlugin {
 public:
  static constexpr const char* kName = "TemperatureSwish";
  static constexpr float kDefaultTemperature = 1.0f;

  // Throws kiln::Error when temperature is not finite.
  TemperatureSwishPlugin(std::string layer_name, float temperature);

  std::string type() const override { return kName; }
  std::unique_ptr<Plugin> clone() const override;
  PluginFieldCollection fields() const override;
  float temperature() const { return temperature_; }

 protected:
  void run_cpu(const float* x, float* y, int64_t n, int num_threads) const override;
  int run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const override;

 private:
  float temperature_;
};

class TemperatureSwishCreator final : public PluginCreator {
 public:
  std::string name() const override { return TemperatureSwishPlugin::kName; }
  std::vector<PluginFieldSpec> field_schema() const override;
  // `temperature` (float32, default 1.0) must be finite; kiln::Error naming the layer otherwise.
  std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const override;
};

}  // namespace kiln::plugins
