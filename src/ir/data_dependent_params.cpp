// Decoding of NonMaxSuppression's and Unique's params (see data_dependent_params.h).
#include "src/ir/data_dependent_params.h"

#include "src/ir/op_params.h"
#include "src/ir/reduce_params.h"

namespace kiln {

NonMaxSuppressionParams NonMaxSuppressionParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  NonMaxSuppressionParams p;
  p.center_point_box = r.get_bool("center_point_box");
  return p;
}

UniqueParams UniqueParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  UniqueParams p;
  p.sorted = r.get_bool("sorted");
  p.flatten = r.get_bool("flatten");
  p.axis = r.get_int("axis");
  return p;
}

UniqueSlices unique_slices(const UniqueParams& params, const Dims& x) {
  UniqueSlices s;
  s.n = x.volume();
  if (params.flatten) return s;
  const int axis = normalized_axis_or_throw(params.axis, x.rank());
  s.n = x[axis];
  for (int i = 0; i < axis; ++i) s.outer *= x[i];
  for (int i = axis + 1; i < x.rank(); ++i) s.inner *= x[i];
  return s;
}

}  // namespace kiln
