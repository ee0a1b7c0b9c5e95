// Schema and shape/type inference of the Einsum layer: the equation (einsum_equation.h) decides
// the output dims; every operand has the same numeric type. Semantics: docs/layers.md.
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/ir/einsum_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

void infer_einsum(ShapeContext& ctx) {
  std::vector<Dims> dims;
  const DataType type = ctx.input_type(0);
  ctx.check(type != DataType::kBool, "operands must be numeric, got bool; Cast them first");
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    ctx.check(ctx.has_input(i), "input " + std::to_string(i) + " is missing (Einsum has no optional inputs)");
    ctx.check(ctx.input_type(i) == type, "input " + std::to_string(i) + " is " + to_string(ctx.input_type(i)) +
                                             " but input 0 is " + to_string(type) + "; every operand needs one type");
    dims.push_back(ctx.input_dims(i));
  }
  try {
    ctx.set_output(0, type, plan_einsum(params_of<EinsumParams>(ctx.layer()).equation, dims).output_dims);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
}

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerEinsum,
    1,
    -1,
    1,
    {AttrSpec{"equation", AttrType::kString, std::string(), true, "numpy einsum equation, e.g. \"bij,bjk->bik\""}},
    {},
    infer_einsum,
    "Einstein summation over the operands as the equation says (numpy einsum rules)."}
                     .with_params<EinsumParams>());

}  // namespace kiln
