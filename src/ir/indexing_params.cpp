// Decoding of the position-driven layers' params and MaxUnpool's size rule (see indexing_params.h).
#include "src/ir/indexing_params.h"

#include <limits>
#include <string>

#include "kiln/error.h"
#include "src/ir/op_params.h"

namespace kiln {

TopKParams TopKParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  TopKParams p;
  p.axis = r.get_int("axis");
  p.largest = r.get_bool("largest");
  p.sorted = r.get_bool("sorted");
  return p;
}

CumSumParams CumSumParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  CumSumParams p;
  p.exclusive = r.get_bool("exclusive");
  p.reverse = r.get_bool("reverse");
  return p;
}

TriluParams TriluParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  TriluParams p;
  p.upper = r.get_bool("upper");
  return p;
}

OneHotParams OneHotParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  OneHotParams p;
  p.axis = r.get_int("axis");
  return p;
}

ReverseSequenceParams ReverseSequenceParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ReverseSequenceParams p;
  p.batch_axis = r.get_int("batch_axis");
  p.time_axis = r.get_int("time_axis");
  return p;
}

MaxUnpoolParams MaxUnpoolParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  MaxUnpoolParams p;
  p.kernel = r.ints_at_least("kernel", 1);
  if (p.kernel.empty()) r.fail("kernel", "is empty; it needs one extent per spatial dim");
  const size_t k = p.kernel.size();
  p.strides = r.ints_at_least("strides", 1);
  if (p.strides.empty()) p.strides.assign(k, 1);
  if (p.strides.size() != k) {
    r.fail("strides", "has " + std::to_string(p.strides.size()) + " values; expected one per spatial dim (" +
                          std::to_string(k) + ", the length of 'kernel')");
  }
  p.pads = r.ints_at_least("pads", 0);
  if (p.pads.empty()) p.pads.assign(2 * k, 0);
  if (p.pads.size() != 2 * k) {
    r.fail("pads", "has " + std::to_string(p.pads.size()) + " values; expected two per spatial dim (" +
                       std::to_string(2 * k) + ", begins then ends)");
  }
  return p;
}

Dims max_unpool_dims(const MaxUnpoolParams& p, const Dims& x) {
  const int k = p.spatial_rank();
  if (x.rank() != k + 2) {
    throw Error("x " + x.to_string() + " must be [N, C, D1..Dk] with k = " + std::to_string(k) +
                " spatial dims (the length of 'kernel')");
  }
  Dims out{x[0], x[1]};
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    const __int128 extent =
        __int128{x[i + 2] - 1} * p.strides[u] - p.pads[u] - p.pads[u + static_cast<size_t>(k)] + p.kernel[u];
    if (extent > std::numeric_limits<int64_t>::max() || extent < std::numeric_limits<int64_t>::min()) {
      throw Error("the unpooled extent of spatial dim " + std::to_string(i) + " overflows 64-bit extents");
    }
    out.push_back(static_cast<int64_t>(extent));
  }
  return out;
}

}  // namespace kiln
