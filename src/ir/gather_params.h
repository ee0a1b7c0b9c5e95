// The parameters of Gather (ONNX Gather in mode "default", GatherElements in "elements", GatherND
// in "nd"): decoded once from a layer's attributes (GatherParams::decode, through the schema's
// with_params) and the output-size rules that shape inference and every kernel (CPU reference,
// CUDA) share.
#pragma once

#include <cstdint>

#include "kiln/network.h"

namespace kiln {

enum class GatherMode : int32_t { kDefault, kElements, kNd };

struct GatherParams {
  GatherMode mode = GatherMode::kDefault;
  int64_t axis = 0;        // default / elements: the gather axis as stored (may be negative)
  int64_t batch_dims = 0;  // nd: leading batch dims (checked against the ranks by gather_output_dims)
  // Throws kiln::Error naming the layer, the attribute and the allowed values.
  static GatherParams decode(const Layer& layer);
};

// default / elements: the gather axis in [0, rank). Throws kiln::Error when it is out of range.
int gather_axis(const GatherParams& params, int rank);

// The output dims of gathering from `data` with `indices` of these dims (default: data's dims with
// the axis replaced by indices' dims; elements: indices' dims, which may exceed data's only on the
// axis; nd: indices' dims without the last, then data's dims after batch_dims + k). Throws
// kiln::Error with the reason (without a layer name; callers add theirs).
Dims gather_output_dims(const GatherParams& params, const Dims& data, const Dims& indices);

}  // namespace kiln
