// Schema of Reformat: the layer the builder inserts where a tensor changes memory format
// (linear NCHW <-> channels-last NHWC) between producer and consumer. Logically an identity:
// dims and type are the input's; the output tensor's format() says how it is laid out.
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

void infer_reformat(ShapeContext& ctx) { ctx.set_output(0, ctx.input_type(0), ctx.input_dims(0)); }

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerReformat,
                          1,
                          1,
                          1,
                          {},
                          {},
                          infer_reformat,
                          "Copies its input into the output tensor's memory format (inserted by the builder)."});

}  // namespace kiln
