// Decoding of Quantize's and Dequantize's parameters (quantize_params.h).
#include "src/ir/quantize_params.h"

#include <limits>
#include <string>

#include "kiln/error.h"
#include "src/core/text.h"
#include "src/ir/op_params.h"

namespace kiln {

QuantizeParams QuantizeParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  QuantizeParams p;
  p.axis = r.get_int("axis");
  p.block_size = r.int_in("block_size", 0, std::numeric_limits<int64_t>::max());
  if (layer.type() == kLayerQuantize) {
    const std::string name = r.get_string("output_type");
    try {
      p.output_type = parse_data_type(name);
    } catch (const Error&) {
      r.fail("output_type", "is " + quote(name) + ", not a data type name (int8 or uint8)");
    }
  }
  return p;
}

}  // namespace kiln
