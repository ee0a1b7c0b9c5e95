// ReduceParams / ArgReduceParams decoding and their axis rules (see reduce_params.h).
#include "src/ir/reduce_params.h"

#include <string>

#include "kiln/error.h"
#include "src/ir/op_params.h"

namespace kiln {

int normalized_axis_or_throw(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    throw Error("axis " + std::to_string(axis) + " is out of range for a tensor of rank " + std::to_string(rank) +
                " (valid: " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

ReduceParams ReduceParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ReduceParams p;
  const std::string op = r.get_string("op");
  try {
    p.op = parse_reduce_op(op);
  } catch (const Error&) {
    std::string names;
    for (int i = 0; i <= static_cast<int>(ReduceOp::kLogSumExp); ++i) {
      names += (names.empty() ? "\"" : ", \"") + std::string(to_string(static_cast<ReduceOp>(i))) + "\"";
    }
    r.fail("op", "is \"" + op + "\"; allowed values: " + names);
  }
  p.axes = r.get_ints("axes");
  p.keep_dims = r.get_bool("keep_dims");
  return p;
}

std::vector<bool> reduced_axes(const ReduceParams& params, int rank) {
  std::vector<bool> reduced(static_cast<size_t>(rank), params.axes.empty());
  for (int64_t a : params.axes) {
    const auto axis = static_cast<size_t>(normalized_axis_or_throw(a, rank));
    if (reduced[axis]) throw Error("attribute 'axes' names axis " + std::to_string(axis) + " twice");
    reduced[axis] = true;
  }
  return reduced;
}

Dims reduce_output_dims(const ReduceParams& params, const Dims& x) {
  const std::vector<bool> reduced = reduced_axes(params, x.rank());
  Dims out;
  for (int i = 0; i < x.rank(); ++i) {
    if (!reduced[static_cast<size_t>(i)]) {
      out.push_back(x[i]);
    } else if (params.keep_dims) {
      out.push_back(1);
    }
  }
  return out;
}

ArgReduceParams ArgReduceParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ArgReduceParams p;
  p.is_max = r.get_enum<bool>("op", {{"max", true}, {"min", false}});
  p.axis = r.get_int("axis");
  p.keep_dims = r.get_bool("keep_dims");
  p.select_last_index = r.get_bool("select_last_index");
  p.one_hot = r.get_bool("one_hot");
  return p;
}

int arg_reduce_axis(const ArgReduceParams& params, int rank) { return normalized_axis_or_throw(params.axis, rank); }

Dims arg_reduce_output_dims(const ArgReduceParams& params, const Dims& x) {
  const int axis = arg_reduce_axis(params, x.rank());
  if (params.one_hot) return x;
  Dims out;
  for (int i = 0; i < x.rank(); ++i) {
    if (i != axis) {
      out.push_back(x[i]);
    } else if (params.keep_dims) {
      out.push_back(1);
    }
  }
  return out;
}

}  // namespace kiln
