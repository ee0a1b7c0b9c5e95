// The parameters of Reduce (ONNX Reduce*: sum, mean, max, min, prod, l1, l2, sum_square,
// log_sum, log_sum_exp) and ArgReduce (ArgMax / ArgMin, and Hardmax's one-hot mask): decoded once
// from a layer's attributes (through the schema's with_params) and the axis rules that shape
// inference and every kernel (CPU reference, CUDA) share: which axes are reduced and the output
// dims.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/network.h"

namespace kiln {

struct ReduceParams {
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> axes;  // as stored (may be negative); empty: every axis
  bool keep_dims = true;      // reduced axes stay as extent 1
  // Throws kiln::Error naming the layer and the attribute.
  static ReduceParams decode(const Layer& layer);
};

// Per axis of a tensor of rank `rank`, whether it is reduced. Throws kiln::Error (without a
// layer name; callers add theirs) for an axis out of range or named twice.
std::vector<bool> reduced_axes(const ReduceParams& params, int rank);
// The output dims of reducing x.
Dims reduce_output_dims(const ReduceParams& params, const Dims& x);

struct ArgReduceParams {
  bool is_max = true;              // op: "max" (ArgMax) or "min" (ArgMin)
  int64_t axis = 0;                // as stored (may be negative)
  bool keep_dims = true;           // the axis stays as extent 1
  bool select_last_index = false;  // ties give the last index
  bool one_hot = false;            // output x's type and dims, 1 at the selected index (Hardmax)
  static ArgReduceParams decode(const Layer& layer);
};

// The reduced axis in [0, rank). Throws kiln::Error when it is out of range.
int arg_reduce_axis(const ArgReduceParams& params, int rank);
// The output dims of x (x's own dims for one_hot).
Dims arg_reduce_output_dims(const ArgReduceParams& params, const Dims& x);

// `axis` in [0, rank) (a negative axis counts from the end). Throws kiln::Error "axis A is out of
// range for a tensor of rank R (valid: -R to R-1)".
int normalized_axis_or_throw(int64_t axis, int rank);

}  // namespace kiln
