// The parameters of Einsum (ops_einsum.cpp): its equation, parsed and checked once from the
// layer's attribute (through the schema's with_params). Shape inference and the kernels (CPU
// reference, CUDA) plan it against the operands' dims with plan_einsum (einsum_equation.h).
#pragma once

#include "kiln/network.h"
#include "src/ir/einsum_equation.h"

namespace kiln {

struct EinsumParams {
  EinsumEquation equation;
  static EinsumParams decode(const Layer& layer);
};

}  // namespace kiln
