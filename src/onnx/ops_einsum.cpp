// ONNX importer of Einsum (opset 12): the equation goes to the Einsum layer unchanged; kiln
// parses it with numpy's rules (src/ir/einsum_equation.h).
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

void import_einsum(NodeContext& ctx) {
  if (!ctx.has_attr("equation")) ctx.fail("attribute 'equation' is required");
  std::vector<Tensor*> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.required_input(i, "Inputs"));
  if (inputs.empty()) ctx.fail("needs at least one input");
  Attributes a;
  a.set("equation", ctx.attr_string("equation", ""));
  ctx.set_output(0, ctx.add_layer(kLayerEinsum, inputs, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Einsum", import_einsum,
                            {.min_opset = 12, .types = "float32, float16, float64, int32, int64, int8, uint8"});

}  // namespace
}  // namespace kiln
