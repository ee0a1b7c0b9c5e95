// Hooks through which the IR reaches the plugin system (src/plugins) without depending on it:
// shape inference of Plugin layers. Implemented in src/plugins/plugin_layer.cpp.
#pragma once

#include "src/ir/op_schema.h"

namespace kiln {

// Infers the outputs of a Plugin layer by asking its plugin; fails via ctx with a clear message.
void plugin_infer_shapes(ShapeContext& ctx);

}  // namespace kiln
