// The parameters of the position-driven layers TopK, CumSum, Trilu, OneHot, ReverseSequence and
// MaxUnpool (ArgReduce's are ArgReduceParams, src/ir/reduce_params.h): decoded once from a
// layer's attributes (through the schemas' with_params in src/ir/ops_indexing.cpp) and read by
// shape inference and every kernel (CPU reference, CUDA) through params_of. Axes are kept as
// stored (possibly negative): they are normalized where the rank is known, with
// normalized_axis_or_throw (kernels) or normalize_axis (shape inference).
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/network.h"

namespace kiln {

struct TopKParams {
  int64_t axis = -1;    // the axis searched, as stored
  bool largest = true;  // the k largest (false: the k smallest)
  bool sorted = true;   // accepted for ONNX; the output is always sorted
  // Throws kiln::Error naming the layer and the attribute.
  static TopKParams decode(const Layer& layer);
};

struct CumSumParams {
  bool exclusive = false;  // each sum leaves its own element out
  bool reverse = false;    // sum from the end of the axis
  static CumSumParams decode(const Layer& layer);
};

struct TriluParams {
  bool upper = true;  // keep the upper triangle (false: the lower)
  static TriluParams decode(const Layer& layer);
};

struct OneHotParams {
  int64_t axis = -1;  // where the depth axis goes in the output (rank(indices) + 1), as stored
  static OneHotParams decode(const Layer& layer);
};

struct ReverseSequenceParams {
  int64_t batch_axis = 1;  // as stored
  int64_t time_axis = 0;   // as stored
  static ReverseSequenceParams decode(const Layer& layer);
};

struct MaxUnpoolParams {
  std::vector<int64_t> kernel;   // one extent (>= 1) per spatial dim, at least one
  std::vector<int64_t> strides;  // one per spatial dim (>= 1; the attribute's empty default: 1)
  std::vector<int64_t> pads;     // begins then ends (>= 0; the attribute's empty default: 0)
  int spatial_rank() const { return static_cast<int>(kernel.size()); }
  static MaxUnpoolParams decode(const Layer& layer);
};

// The default unpooled dims of x [N, C, D1..Dk]: [N, C, (Di - 1) * stride - pad_begin - pad_end +
// kernel ..]. Throws kiln::Error (without a layer name; callers add theirs) when x's rank is not
// k + 2 or an extent does not fit in 64 bits.
Dims max_unpool_dims(const MaxUnpoolParams& params, const Dims& x);

}  // namespace kiln
