// Schema and shape/type inference of the bitwise layers: BitShift (ONNX BitShift), element-wise
// with numpy broadcasting on integer tensors. Semantics: docs/layers.md.
#include <string>

#include "kiln/error.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

void infer_bit_shift(ShapeContext& ctx) {
  (void)params_of<BitShiftParams>(ctx.layer());  // direction checked there
  const DataType t = ctx.input_type(0);
  ctx.check(t == DataType::kUInt8 || t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64 ||
                t == DataType::kInt16 || t == DataType::kUInt16 || t == DataType::kUInt32 || t == DataType::kUInt64,
            std::string("x must be an integer tensor (int8/16/32/64, uint8/16/32/64), got ") + to_string(t));
  ctx.check(ctx.input_type(1) == t, std::string("the shift amounts (") + to_string(ctx.input_type(1)) +
                                        ") must have the type of x (" + to_string(t) + ")");
  ctx.set_output(0, t, broadcast_dims(ctx, ctx.input_dims(0), ctx.input_dims(1)));
}

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerBitShift,
                          2,
                          2,
                          1,
                          {AttrSpec{"direction", AttrType::kString, std::string(), true, "left or right"}},
                          {},
                          infer_bit_shift,
                          "x shifted by y bits (logical shift on the unsigned bit pattern; shifts of the type's "
                          "width or more give 0), with numpy broadcasting."}
                     .with_params<BitShiftParams>());

}  // namespace kiln
