// Layers whose output extents depend on the input *values*, known only after the kernel ran:
// NonZero, NonMaxSuppression and Unique (TopK with a run-time k: src/ir/ops_indexing.cpp). Each has
// an extra int64 scalar output (the last one) into which the kernel writes the extent;
// ShapeContext::data_dependent_extent gives the upper bound until the runtime has read it, and
// kernels write their outputs compactly with the actual extent. Semantics: docs/layers.md.
#include <algorithm>
#include <string>
#include <utility>

#include "src/ir/data_dependent_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

// NonZero: outputs [rank(x), count] int64 coordinates of the non-zero elements in row-major
// order, and the count (output 1).
void infer_non_zero(ShapeContext& ctx) {
  ctx.check(ctx.num_outputs() == 2,
            "has " + std::to_string(ctx.num_outputs()) + " outputs; NonZero has the coordinates and their count");
  const Dims& x = ctx.input_dims(0);
  const int64_t count = ctx.data_dependent_extent(1, x.volume());
  ctx.set_output(0, DataType::kInt64, Dims{static_cast<int64_t>(x.rank()), count});
  ctx.set_output(1, DataType::kInt64, Dims{});
}

std::string describe(const ShapeContext& ctx, int i) {
  return "input " + std::to_string(i) + " (" + std::string(to_string(ctx.input_type(i))) + " " +
         ctx.input_dims(i).to_string() + ")";
}

bool is_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16; }

// NonMaxSuppression: boxes [B, N, 4], scores [B, C, N], then the optional scalars
// max_output_boxes_per_class (int), iou_threshold and score_threshold (float), all read by the
// kernel at run time. Output 0: selected [count, 3] int64 (batch, class, box); output 1: count.
// A host-known max_output_boxes_per_class tightens the bound B*C*N to B*C*min(N, max).
void infer_non_max_suppression(ShapeContext& ctx) {
  ctx.check(ctx.num_outputs() == 2, "has " + std::to_string(ctx.num_outputs()) +
                                        " outputs; NonMaxSuppression has the selected indices and their count");
  const Dims& boxes = ctx.input_dims(0);
  const Dims& scores = ctx.input_dims(1);
  ctx.check(is_float(ctx.input_type(0)) && ctx.input_type(1) == ctx.input_type(0),
            "boxes " + describe(ctx, 0) + " and scores " + describe(ctx, 1) + " must both be float32 or float16");
  ctx.check(boxes.rank() == 3 && boxes[2] == 4, "boxes " + describe(ctx, 0) + " must be [batch, boxes, 4]");
  ctx.check(scores.rank() == 3 && scores[0] == boxes[0] && scores[2] == boxes[1],
            "scores " + describe(ctx, 1) + " must be [batch, classes, boxes] = [" + std::to_string(boxes[0]) +
                ", classes, " + std::to_string(boxes[1]) + "] for boxes " + boxes.to_string());
  int64_t per_class = boxes[1];
  if (ctx.has_input(2)) {
    ctx.check((ctx.input_type(2) == DataType::kInt64 || ctx.input_type(2) == DataType::kInt32) &&
                  ctx.input_dims(2).volume() == 1,
              "max_output_boxes_per_class " + describe(ctx, 2) + " must be one int64 (or int32) value");
    if (const HostTensor* v = ctx.input_value(2))
      per_class = std::min(per_class, std::max<int64_t>(v->to_int64().at(0), 0));
  } else {
    per_class = 0;  // ONNX's default: no box is selected
  }
  for (int i : {3, 4}) {
    if (!ctx.has_input(i)) continue;
    ctx.check(is_float(ctx.input_type(i)) && ctx.input_dims(i).volume() == 1,
              std::string(i == 3 ? "iou_threshold " : "score_threshold ") + describe(ctx, i) +
                  " must be one float32 (or float16) value");
  }
  const int64_t count = ctx.data_dependent_extent(1, boxes[0] * scores[1] * per_class);
  ctx.set_output(0, DataType::kInt64, Dims{count, 3});
  ctx.set_output(1, DataType::kInt64, Dims{});
}

// Unique: x's distinct elements (flatten = 1) or distinct slices along `axis` (flatten = 0).
// Outputs: Y, indices (first occurrences), inverse_indices, counts and (4) the number of
// distinct values U, bounded by the number of elements (slices).
void infer_unique(ShapeContext& ctx) {
  ctx.check(ctx.num_outputs() == 5, "has " + std::to_string(ctx.num_outputs()) +
                                        " outputs; Unique has Y, indices, inverse_indices, counts and the count");
  const UniqueParams& p = params_of<UniqueParams>(ctx.layer());
  const Dims& x = ctx.input_dims(0);
  const bool flatten = p.flatten;
  Dims y;
  int64_t n = 0;
  int axis = 0;
  if (flatten) {
    n = x.volume();
  } else {
    ctx.check(x.rank() >= 1, "x " + describe(ctx, 0) + " has no axis to take unique slices along");
    axis = static_cast<int>(normalize_axis(ctx, p.axis, x.rank()));
    n = x[axis];
  }
  const int64_t u = ctx.data_dependent_extent(4, n);
  if (flatten) {
    y = Dims{u};
  } else {
    y = x;
    y[axis] = u;
  }
  ctx.set_output(0, ctx.input_type(0), y);
  ctx.set_output(1, DataType::kInt64, Dims{u});
  ctx.set_output(2, DataType::kInt64, Dims{n});
  ctx.set_output(3, DataType::kInt64, Dims{u});
  ctx.set_output(4, DataType::kInt64, Dims{});
}

AttrSpec attr(const std::string& name, AttrType type, AttrValue def, const std::string& doc) {
  return AttrSpec{name, type, std::move(def), false, doc};
}

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerNonMaxSuppression,
                          2,
                          5,
                          2,
                          {attr("center_point_box", AttrType::kInt, int64_t{0},
                                "0: boxes are [y1, x1, y2, x2] (any two opposite corners), 1: [x_center, y_center, "
                                "width, height]")},
                          {},
                          infer_non_max_suppression,
                          "ONNX NonMaxSuppression: per batch and class, boxes by descending score (ties: lower box "
                          "index first), those not above score_threshold dropped, each kept unless its IoU with an "
                          "already kept box exceeds iou_threshold, at most max_output_boxes_per_class; output 0 is "
                          "[count, 3] int64 (batch, class, box), output 1 the count (a data-dependent size)."}
                     .with_params<NonMaxSuppressionParams>());

KILN_REGISTER_OP(OpSchema{
    kLayerUnique,
    1,
    1,
    5,
    {attr("sorted", AttrType::kInt, int64_t{1}, "1: ascending order, 0: order of first occurrence"),
     attr("flatten", AttrType::kInt, int64_t{1},
          "1: unique elements of x flattened (ONNX without axis), 0: unique slices along axis"),
     attr("axis", AttrType::kInt, int64_t{0}, "the axis of the slices (flatten = 0)")},
    {},
    infer_unique,
    "ONNX Unique: distinct elements (slices) Y, the index of each one's first occurrence, "
    "for each input element (slice) the position of its value in Y, and the counts; output "
    "4 is the number of distinct values (a data-dependent size)."}
                     .with_params<UniqueParams>());

KILN_REGISTER_OP(OpSchema{kLayerNonZero,
                          1,
                          1,
                          2,
                          {},
                          {},
                          infer_non_zero,
                          "int64 coordinates [rank, count] of the non-zero elements of x in row-major order; "
                          "output 1 is the count (an int64 scalar written by the kernel: a data-dependent size)."});

}  // namespace kiln
