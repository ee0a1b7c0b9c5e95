// Helpers shared by the shape inference functions of all layer types (declared at the end of
// src/ir/op_schema.h): numpy broadcasting of two shapes, axis normalization and overflow-checked
// extents. Failures go
// through ShapeContext::fail so that the message names the layer.
#include <limits>
#include <string>

#include "src/ir/op_schema.h"

namespace kiln {

Dims broadcast_dims(const ShapeContext& ctx, const Dims& a, const Dims& b) {
  const int rank = a.rank() > b.rank() ? a.rank() : b.rank();
  Dims out;
  for (int i = 0; i < rank; ++i) {
    // Align trailing dims: a missing leading dim behaves as extent 1.
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      ctx.fail("cannot broadcast shapes " + a.to_string() + " and " + b.to_string() + ": dim " + std::to_string(i) +
               " of the broadcast result has extents " + std::to_string(da) + " and " + std::to_string(db) +
               " (each must be equal or 1)");
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

int64_t normalize_axis(const ShapeContext& ctx, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for a tensor of rank " + std::to_string(rank) +
             " (valid: " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

int64_t checked_extent(const ShapeContext& ctx, __int128 value, const std::string& what) {
  if (value > std::numeric_limits<int64_t>::max() || value < std::numeric_limits<int64_t>::min()) {
    ctx.fail(what + " overflows 64-bit extents");
  }
  return static_cast<int64_t>(value);
}

}  // namespace kiln
