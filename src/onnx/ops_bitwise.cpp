// ONNX importer of BitShift (opset 11). ONNX defines it on unsigned types; of those kiln has
// uint8 (the BitShift layer also shifts int8/int32/int64 as bit patterns).
#include <string>

#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

void import_bit_shift(NodeContext& ctx) {
  const std::string direction = ctx.attr_string("direction", "");
  if (direction != "LEFT" && direction != "RIGHT")
    ctx.fail("attribute 'direction' must be LEFT or RIGHT, got " + quote(direction));
  Attributes a;
  a.set("direction", std::string(direction == "LEFT" ? "left" : "right"));
  ctx.set_output(
      0, ctx.add_layer(kLayerBitShift, {ctx.required_input(0, "X"), ctx.required_input(1, "Y")}, 1, std::move(a))
             ->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("BitShift", import_bit_shift,
                            {.min_opset = 11,
                             .types = "uint8, uint16, uint32, uint64",
                             .notes = "every unsigned width, on the CPU and CUDA"});

}  // namespace
}  // namespace kiln
