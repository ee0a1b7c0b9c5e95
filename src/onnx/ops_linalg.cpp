// ONNX importers of the linear algebra ops that map to kiln's linear algebra layers
// (src/ir/ops_linalg.h): Det.
#include "src/ir/ops_linalg.h"
#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

void import_det(NodeContext& ctx) {
  if (auto dims = ctx.input_dims(0); dims && dims->rank() < 2) {
    ctx.fail("input 'X' has dims " + dims->to_string() + "; it must be [*, M, M]");
  }
  ctx.set_output(0, ctx.add_layer(kLayerDet, {ctx.required_input(0, "X")}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Det", import_det, {.min_opset = 11, .types = "float32, float16, float64"});

}  // namespace
}  // namespace kiln
