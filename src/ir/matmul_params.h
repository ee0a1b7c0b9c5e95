// The parameters of MatrixMultiply (ONNX MatMul) and Gemm, decoded once from a layer's attributes
// (through the schema's with_params) and read by every kernel (CPU reference, oneDNN, CUDA,
// cuBLASLt). A transpose flag is set by any nonzero value, as ONNX Runtime reads transA/transB.
#pragma once

#include "kiln/network.h"

namespace kiln {

struct MatMulParams {
  bool transpose_a = false;  // swap the last two dims of a first
  bool transpose_b = false;
  // BuilderConfig::tune_for_streams (attribute concurrent_streams, as ConvParams): cuBLASLt
  // kernels for the device's SMs / this many.
  int64_t concurrent_streams = 1;
  static MatMulParams decode(const Layer& layer);
};

struct GemmParams {
  double alpha = 1.0;  // scales A'B'
  double beta = 1.0;   // scales C
  bool trans_a = false;
  bool trans_b = false;
  int64_t concurrent_streams = 1;  // as MatMulParams
  static GemmParams decode(const Layer& layer);
};

}  // namespace kiln
