// The parameters of Scatter (ONNX ScatterElements in mode "elements", ScatterND in mode "nd",
// with the reductions of opset 16/18): decoded once from a layer's attributes
// (ScatterParams::decode, through the schema's with_params) and the shape rules that shape
// inference and every kernel (CPU reference, CUDA) share.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/network.h"

namespace kiln {

// `reduction` is the public ScatterReductionKind (include/kiln/network.h).
const char* to_string(ScatterReductionKind reduction);  // "none", "add", "mul", "max", "min"

struct ScatterParams {
  bool nd = false;   // mode "nd" (ScatterND) rather than "elements" (ScatterElements)
  int64_t axis = 0;  // elements: the scatter axis as stored (may be negative)
  ScatterReductionKind reduction = ScatterReductionKind::kNone;
  // Throws kiln::Error naming the layer, the attribute and the allowed values.
  static ScatterParams decode(const Layer& layer);
};

// Elements mode: the scatter axis in [0, rank). Throws kiln::Error when it is out of range.
int scatter_axis(const ScatterParams& params, int rank);

// The shape rules of the ONNX operators for data, indices and updates (elements: indices and
// updates have data's rank and equal dims, the axis is in range; nd: the last dim k of indices is
// in 1..rank(data) and updates are indices' dims without the last, then data's dims after the
// first k). Throws kiln::Error with the reason (without a layer name; callers add theirs).
void check_scatter_shapes(const ScatterParams& params, const Dims& data, const Dims& indices, const Dims& updates);

}  // namespace kiln
