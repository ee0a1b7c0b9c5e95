// Mish plugin and creator (see mish.h and README.md).
#include "plugins/mish/mish.h"

#include "kiln/error.h"

namespace kiln::plugins {

MishPlugin::MishPlugin(std::string layer_name) : UnaryPlugin(std::move(layer_name)) {}

std::unique_ptr<Plugin> MishPlugin::clone() const { return std::make_unique<MishPlugin>(*this); }

void MishPlugin::run_cpu(const float* x, float* y, int64_t n, int num_threads) const { mish_cpu(x, y, n, num_threads); }

int MishPlugin::run_cuda(const void* x, void* y, int64_t n, DataType type, void* stream) const {
#ifdef KILN_HAVE_CUDA
  return mish_cuda(x, y, n, type, stream);
#else
  return kUnaryNoCuda;  // not reached: UnaryPlugin::enqueue reports the missing CUDA support first
#endif
}

std::unique_ptr<Plugin> MishCreator::create(const std::string& layer_name, const PluginFieldCollection& fields) const {
  if (!fields.all().empty()) {
    throw Error(plugin_label(MishPlugin::kName, layer_name) + ": Mish has no fields, got field '" +
                fields.all().front().name + "'");
  }
  return std::make_unique<MishPlugin>(layer_name);
}

KILN_REGISTER_PLUGIN(MishCreator);

}  // namespace kiln::plugins
