// Decoding of Einsum's parameters (einsum_params.h).
#include "src/ir/einsum_params.h"

#include <string>

#include "kiln/error.h"
#include "src/ir/op_params.h"

namespace kiln {

EinsumParams EinsumParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  EinsumParams p;
  const std::string equation = r.get_string("equation");
  try {
    p.equation = parse_einsum_equation(equation);
  } catch (const Error& e) {
    r.fail("equation", e.what());
  }
  return p;
}

}  // namespace kiln
