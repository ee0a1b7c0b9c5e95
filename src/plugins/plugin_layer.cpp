// Plugin layers in the IR. The plugin system (custom layers) builds on this file; until a
// plugin registry is present every Plugin layer is reported as unsupported.
#include "kiln/error.h"
#include "src/ir/plugin_hooks.h"

namespace kiln {

void plugin_infer_shapes(ShapeContext& ctx) {
  ctx.fail("plugin layers are not supported by this build (no plugin registry)");
}

}  // namespace kiln
