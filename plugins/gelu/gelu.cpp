// GELU plugin and creator (see gelu.h and README.md).
#include "plugins/gelu/gelu.h"

#include "kiln/error.h"

namespace kiln::plugins {
namespace {

struct ApproximationName {
  GeluApproximation value;
  const char* name;
};
constexpr ApproximationName kApproximations[] = {
    {GeluApproximation::kErf, "erf"},
    {GeluApproximation::kTanh, "tanh"},
};

}  // namespace

const char* to_string(GeluApproximation approximation) {
  for (const ApproximationName& a : kApproximations) {
    if (a.value == approximation) return a.name;
  }
  return "unknown";
}

GeluApproximation parse_gelu_approximation(const std::string& text, const std::string& where) {
  std::string valid;
  for (const ApproximationName& a : kApproximations) {
    if (text == a.name) return a.value;
    valid += std::string(valid.empty() ? "" : ", ") + "\"" + a.name + "\"";
  }
  throw Error(where + ": field 'approximation' is \"" + text + "\"; valid values: " + valid);
}

GeluPlugin::GeluPlugin(std::string layer_name, GeluApproximation approximation)
    : UnaryPlugin(std::move(layer_name)), approximation_(approximation) {}

std::unique_ptr<Plugin> GeluPlugin::clone() const { return std::make_unique<GeluPlugin>(*this); }

PluginFieldCollection GeluPlugin::fields() const {
  PluginFieldCollection fields;
  fields.add(PluginField::string("approximation", to_string(approximation_)));
  return fields;
}

void GeluPlugin::run_cpu(const float* x, float* y, int64_t n, int num_threads) const {
  gelu_cpu(x, y, n, approximation_, num_threads);
}

int GeluPlugin::run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const {
#ifdef KILN_HAVE_CUDA
  return gelu_cuda(x, y, n, type, approximation_, stream);
#else
  return kUnaryNoCuda;  // not reached: UnaryPlugin::enqueue reports the missing CUDA support first
#endif
}

std::vector<PluginFieldSpec> GeluCreator::field_schema() const {
  return {string_field_spec("approximation", to_string(GeluPlugin::kDefaultApproximation),
                            "\"erf\": y = 0.5x(1 + erf(x/sqrt(2))); "
                            "\"tanh\": y = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))")};
}

std::unique_ptr<Plugin> GeluCreator::create(const std::string& layer_name, const PluginFieldCollection& fields) const {
  const std::string where = plugin_label(GeluPlugin::kName, layer_name);
  const std::string text =
      read_string_field(fields, "approximation", to_string(GeluPlugin::kDefaultApproximation), where);
  return std::make_unique<GeluPlugin>(layer_name, parse_gelu_approximation(text, where));
}

KILN_REGISTER_PLUGIN(GeluCreator);

}  // namespace kiln::plugins
