// Schemas and shape/type inference of the linear algebra layers (src/ir/ops_linalg.h): Det,
// the determinant of each square matrix of the last two axes. Semantics: docs/layers.md.
#include <string>

#include "src/ir/op_schema.h"
#include "src/ir/ops_linalg.h"

namespace kiln {
namespace {

void infer_det(ShapeContext& ctx) {
  const DataType type = ctx.input_type(0);
  const Dims& x = ctx.input_dims(0);
  ctx.check(is_floating_point(type),
            std::string("x is ") + to_string(type) + "; the determinant needs float32, float16 or float64");
  ctx.check(x.rank() >= 2 && x[x.rank() - 1] == x[x.rank() - 2],
            "x has dims " + x.to_string() + "; it must be [*, M, M] (square matrices in the last two axes)");
  Dims out;
  for (int i = 0; i < x.rank() - 2; ++i) out.push_back(x[i]);
  ctx.set_output(0, type, out);
}

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerDet,
                          1,
                          1,
                          1,
                          {},
                          {},
                          infer_det,
                          "Determinant of each square matrix in the last two axes: x [*, M, M] -> y [*] (LU "
                          "factorization with partial pivoting)."});

}  // namespace kiln
