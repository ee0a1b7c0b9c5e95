// TemperatureSwish plugin and creator (see temperature_swish.h and README.md).
#include "plugins/temperature_swish/temperature_swish.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln::plugins {

TemperatureSwishPlugin::TemperatureSwishPlugin(std::string layer_name, float temperature)
    : UnaryPlugin(std::move(layer_name)), temperature_(temperature) {
  if (!std::isfinite(temperature)) {
    throw Error(label() + ": field 'temperature' must be finite, got " + std::to_string(temperature));
  }
}

std::unique_ptr<Plugin> TemperatureSwishPlugin::clone() const {
  return std::make_unique<TemperatureSwishPlugin>(*this);
}

PluginFieldCollection TemperatureSwishPlugin::fields() const {
  PluginFieldCollection fields;
  fields.add(PluginField::float32("temperature", {temperature_}));
  return fields;
}

void TemperatureSwishPlugin::run_cpu(const float* x, float* y, int64_t n, int num_threads) const {
  temperature_swish_cpu(x, y, n, temperature_, num_threads);
}

int TemperatureSwishPlugin::run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const {
#ifdef KILN_HAVE_CUDA
  return temperature_swish_cuda(x, y, n, type, temperature_, stream);
#else
  return kUnaryNoCuda;  // not reached: UnaryPlugin::enqueue reports the missing CUDA support first
#endif
}

std::vector<PluginFieldSpec> TemperatureSwishCreator::field_schema() const {
  return {float32_field_spec("temperature", TemperatureSwishPlugin::kDefaultTemperature,
                             "scale of x inside the sigmoid: y = x * sigmoid(temperature * x); finite")};
}

std::unique_ptr<Plugin> TemperatureSwishCreator::create(const std::string& layer_name,
                                                        const PluginFieldCollection& fields) const {
  const std::string where = plugin_label(TemperatureSwishPlugin::kName, layer_name);
  const float temperature =
      read_float32_field(fields, "temperature", TemperatureSwishPlugin::kDefaultTemperature, where);
  return std::make_unique<TemperatureSwishPlugin>(layer_name, temperature);
}

KILN_REGISTER_PLUGIN(TemperatureSwishCreator);

}  // namespace kiln::plugins
