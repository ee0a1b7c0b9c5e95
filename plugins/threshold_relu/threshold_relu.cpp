// ThresholdReLU plugin and creator (see threshold_relu.h and README.md).
#include "plugins/threshold_relu/threshold_relu.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln::plugins {

ThresholdReluPlugin::ThresholdReluPlugin(std::string layer_name, float threshold)
    : UnaryPlugin(std::move(layer_name)), threshold_(threshold) {
  if (!std::isfinite(threshold)) {
    throw Error(label() + ": field 'threshold' must be finite, got " + std::to_string(threshold));
  }
}

std::unique_ptr<Plugin> ThresholdReluPlugin::clone() const { return std::make_unique<ThresholdReluPlugin>(*this); }

PluginFieldCollection ThresholdReluPlugin::fields() const {
  PluginFieldCollection fields;
  fields.add(PluginField::float32("threshold", {threshold_}));
  return fields;
}

void ThresholdReluPlugin::run_cpu(const float* x, float* y, int64_t n, int num_threads) const {
  threshold_relu_cpu(x, y, n, threshold_, num_threads);
}

int ThresholdReluPlugin::run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const {
#ifdef KILN_HAVE_CUDA
  return threshold_relu_cuda(x, y, n, type, threshold_, stream);
#else
  return kUnaryNoCuda;  // not reached: UnaryPlugin::enqueue reports the missing CUDA support first
#endif
}

std::vector<PluginFieldSpec> ThresholdReluCreator::field_schema() const {
  return {float32_field_spec("threshold", ThresholdReluPlugin::kDefaultThreshold,
                             "lower bound of the output: y = max(x, threshold); finite")};
}

std::unique_ptr<Plugin> ThresholdReluCreator::create(const std::string& layer_name,
                                                     const PluginFieldCollection& fields) const {
  const std::string where = plugin_label(ThresholdReluPlugin::kName, layer_name);
  const float threshold = read_float32_field(fields, "threshold", ThresholdReluPlugin::kDefaultThreshold, where);
  return std::make_unique<ThresholdReluPlugin>(layer_name, threshold);
}

KILN_REGISTER_PLUGIN(ThresholdReluCreator);

}  // namespace kiln::plugins
