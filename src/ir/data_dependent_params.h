// The parameters of the data-dependent layers NonMaxSuppression and Unique: decoded once from a
// layer's attributes (through the schemas' with_params in src/ir/ops_data_dependent.cpp) and read
// by shape inference and every kernel (CPU reference, CUDA) through params_of.
#pragma once

#include <cstdint>

#include "kiln/network.h"

namespace kiln {

struct NonMaxSuppressionParams {
  bool center_point_box = false;  // boxes are [x_center, y_center, width, height] (false: two corners)
  // Throws kiln::Error naming the layer and the attribute.
  static NonMaxSuppressionParams decode(const Layer& layer);
};

struct UniqueParams {
  bool sorted = true;   // ascending order (false: order of first occurrence)
  bool flatten = true;  // unique elements of x flattened (false: unique slices along axis)
  int64_t axis = 0;     // the axis of the slices (flatten false), as stored
  static UniqueParams decode(const Layer& layer);
};

// x viewed as [outer, n, inner] where the n elements (flatten) or slices along the axis are made
// unique (flatten: [1, volume, 1]).
struct UniqueSlices {
  int64_t outer = 1, n = 0, inner = 1;
};
// Throws kiln::Error (without a layer name) when the axis is out of range for x.
UniqueSlices unique_slices(const UniqueParams& params, const Dims& x);

}  // namespace kiln
