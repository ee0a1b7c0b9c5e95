// The parameters of Quantize and Dequantize (ops_quantize.cpp), decoded once from a layer's
// attributes (through the schema's with_params) and read by shape inference and the kernels
// (CPU reference, CUDA).
#pragma once

#include <cstdint>

#include "kiln/network.h"

namespace kiln {

struct QuantizeParams {
  int64_t axis = 1;        // per-axis / blocked parameters' axis as stored (may be negative)
  int64_t block_size = 0;  // >= 0; 0: per tensor or per axis
  // Quantize only: the quantized type when the zero point is absent (a data type name; int8 or
  // uint8 is checked at shape inference, since a zero point decides the type otherwise).
  DataType output_type = DataType::kUInt8;
  static QuantizeParams decode(const Layer& layer);
};

}  // namespace kiln
