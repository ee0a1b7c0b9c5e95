// ONNX importers of the scatter family: ScatterElements (opset 11-18), its older name Scatter
// (opset 9-10, no reduction) and ScatterND (opset 11-18), each one Scatter layer. The reduction
// attribute exists from opset 16 ("none", "add", "mul") and 18 ("max", "min"); the layer checks
// the names, so a misspelt one fails naming the node's layer.
#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

void import_scatter_mode(NodeContext& ctx, const char* mode) {
  Tensor* data = ctx.required_input(0, "data");
  Tensor* indices = ctx.required_input(1, "indices");
  Tensor* updates = ctx.required_input(2, "updates");
  Attributes a;
  a.set("mode", std::string(mode));
  if (std::string(mode) == "elements") a.set("axis", ctx.attr_int("axis", 0));
  a.set("reduction", ctx.attr_string("reduction", "none"));
  ctx.set_output(0, ctx.add_layer(kLayerScatter, {data, indices, updates}, 1, std::move(a))->output(0));
}

void import_scatter_elements(NodeContext& ctx) { import_scatter_mode(ctx, "elements"); }
void import_scatter_nd(NodeContext& ctx) { import_scatter_mode(ctx, "nd"); }
KILN_REGISTER_ONNX_IMPORTER("ScatterElements", import_scatter_elements,
                            {.min_opset = 11,
                             .types = "all kiln types (reductions: not bool)",
                             .notes = "reduction none, add, mul, max, min"});
KILN_REGISTER_ONNX_IMPORTER("Scatter", import_scatter_elements,
                            {.min_opset = 9, .max_opset = 10, .types = "all kiln types"});
KILN_REGISTER_ONNX_IMPORTER("ScatterND", import_scatter_nd,
                            {.min_opset = 11,
                             .types = "all kiln types (reductions: not bool)",
                             .notes = "reduction none, add, mul, max, min"});

}  // namespace
}  // namespace kiln
