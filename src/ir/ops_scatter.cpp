// Schema and shape inference of the Scatter layer: ONNX ScatterElements (and its opset 9-10
// name Scatter) in mode "elements", ONNX ScatterND in mode "nd", each with the reductions of
// opset 16/18 (none, add, mul, max, min). The output is `data` with `updates` written (or
// combined) at the places `indices` name, so it always has data's type and dims; the checks
// here are the shape rules of the ONNX operators (src/ir/scatter_params.h, with the parameters),
// so that a wrong model fails at build time naming the layer instead of reading out of bounds at
// run time.
#include <string>

#include "src/core/text.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/scatter_params.h"

namespace kiln {
namespace {

void infer_scatter(ShapeContext& ctx) {
  const ScatterParams& p = params_of<ScatterParams>(ctx.layer());
  const DataType it = ctx.input_type(1);
  ctx.check(it == DataType::kInt32 || it == DataType::kInt64,
            std::string("indices must be int32 or int64, got ") + to_string(it));
  ctx.check(ctx.input_type(2) == ctx.input_type(0), std::string("updates have type ") + to_string(ctx.input_type(2)) +
                                                        " but data has " + to_string(ctx.input_type(0)));
  ctx.check(p.reduction == ScatterReductionKind::kNone || ctx.input_type(0) != DataType::kBool,
            "reduction " + quote(to_string(p.reduction)) + " is not defined for bool data");
  const Dims& data = ctx.input_dims(0);
  try {
    check_scatter_shapes(p, data, ctx.input_dims(1), ctx.input_dims(2));
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  ctx.set_output(0, ctx.input_type(0), data);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerScatter,
                          3,
                          3,
                          1,
                          {{"mode", A::kString, std::string("elements"), false, "elements or nd"},
                           {"axis", A::kInt, int64_t{0}, false, "scatter axis (elements)"},
                           {"reduction", A::kString, std::string("none"), false, "none, add, mul, max or min"}},
                          {},
                          infer_scatter,
                          "ONNX ScatterElements (mode elements) / ScatterND (mode nd): a copy of data with updates "
                          "written at indices, or combined with the reduction; negative indices wrap, out-of-range "
                          "indices are an error."}
                     .with_params<ScatterParams>());

}  // namespace kiln
