// Schemas and shape inference of the data-movement layers: Constant, Shuffle, Concatenation,
// Split, Slice, Gather, Padding, Shape, Fill, Expand and Tile (Resize lives in ops_resize.cpp).
// The contract is docs/layers.md; where it says "ONNX X", the rules are the ONNX operator's at
// the newest opset (Slice clamping, Split's uneven last chunk, Shape-15 start/end, ...).
// Several of these layers read "shape inputs": inputs whose values must be known on the host
// when shapes are inferred; they are declared in OpSchema::shape_inputs and read with
// ShapeContext::required_value.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "src/core/text.h"
#include "src/ir/data_params.h"
#include "src/ir/gather_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// "5x?" style text of a requested shape (-1 prints as "?").
std::string shape_text(const std::vector<int64_t>& v) {
  if (v.empty()) return "()";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + (v[i] == -1 ? std::string("?") : std::to_string(v[i]));
  return s;
}

bool is_index_type(DataType t) { return t == DataType::kInt32 || t == DataType::kInt64; }

// The values of an integer shape input (a scalar or a 1-D int32/int64 tensor).
std::vector<int64_t> int_values(const ShapeContext& ctx, int i, const char* name) {
  const HostTensor& t = ctx.required_value(i);
  ctx.check(is_index_type(t.type()),
            "input " + std::to_string(i) + " (" + name + ") must be int32 or int64, got " + to_string(t.type()));
  ctx.check(t.dims().rank() <= 1,
            "input " + std::to_string(i) + " (" + name + ") must be 1-D, got dims " + t.dims().to_string());
  return t.to_int64();
}

void check_same_type(const ShapeContext& ctx, int i, const char* name) {
  ctx.check(ctx.input_type(i) == ctx.input_type(0),
            std::string("input ") + std::to_string(i) + " (" + name + ") has type " + to_string(ctx.input_type(i)) +
                " but input 0 has " + to_string(ctx.input_type(0)) + "; insert a Cast");
}

Dims make_dims(const ShapeContext& ctx, const std::vector<int64_t>& v) {
  ctx.check(v.size() <= static_cast<size_t>(kMaxDims), "the output would have rank " + std::to_string(v.size()) +
                                                           ", kiln supports at most " + std::to_string(kMaxDims));
  return Dims::from(v);
}

// ---- Constant --------------------------------------------------------------------------------

void infer_constant(ShapeContext& ctx) {
  const HostTensor& value = ctx.attrs().get_tensor("value");
  ctx.check(!value.empty(), "attribute 'value' is an empty tensor object (it needs a type, dims and data)");
  ctx.set_output(0, value.type(), value.dims());
}

// ---- Shuffle ---------------------------------------------------------------------------------

Dims permute(const ShapeContext& ctx, const Dims& in, const std::vector<int64_t>& perm, const char* attr) {
  ctx.check(static_cast<int>(perm.size()) == in.rank(),
            std::string("attribute '") + attr + "' " + join(perm) + " has " + std::to_string(perm.size()) +
                " entries but the tensor it applies to has dims " + in.to_string() + " (rank " +
                std::to_string(in.rank()) + ")");
  std::vector<bool> seen(perm.size(), false);
  Dims out;
  for (int64_t p : perm) {
    ctx.check(p >= 0 && p < in.rank() && !seen[static_cast<size_t>(p)],
              std::string("attribute '") + attr + "' " + join(perm) + " is not a permutation of 0.." +
                  std::to_string(in.rank() - 1));
    seen[static_cast<size_t>(p)] = true;
    out.push_back(in[static_cast<int>(p)]);
  }
  return out;
}

Dims reshape_dims(const ShapeContext& ctx, const Dims& in, std::vector<int64_t> target, bool zero_copies) {
  int infer_at = -1;
  // Product of the given extents, saturated at 2^64 (above any volume) so that huge requested
  // extents cannot wrap around to a plausible product; a 0 extent still makes it 0.
  __int128 known = 1;
  const __int128 kSaturated = __int128{1} << 64;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t& t = target[i];
    if (t == 0 && zero_copies) {
      ctx.check(static_cast<int>(i) < in.rank(), "reshape to " + shape_text(target) + ": 0 at index " +
                                                     std::to_string(i) +
                                                     " copies the input extent there, but the input " + in.to_string() +
                                                     " has rank " + std::to_string(in.rank()));
      t = in[static_cast<int>(i)];
    }
    if (t == -1) {
      ctx.check(infer_at < 0, "reshape to " + shape_text(target) + ": at most one extent may be -1");
      infer_at = static_cast<int>(i);
      continue;
    }
    ctx.check(t >= 0, "reshape to " + join(target) + ": extents must be >= -1");
    known = std::min(known * t, kSaturated);
  }
  const int64_t volume = in.volume();
  const auto impossible = [&] {
    ctx.fail("reshape of " + in.to_string() + " (" + std::to_string(volume) + " elements) to " + shape_text(target) +
             " is impossible");
  };
  if (infer_at >= 0) {
    if (known == 0 || volume % known != 0) impossible();
    target[static_cast<size_t>(infer_at)] = static_cast<int64_t>(volume / known);
  } else if (known != volume) {
    impossible();
  }
  return make_dims(ctx, target);
}

Dims shuffle_dims(const ShapeContext& ctx, const ShuffleParams& p, Dims d) {
  const ReshapeMode mode = p.reshape_mode;
  const bool has_shape = ctx.has_input(1);
  ctx.check(!has_shape || mode == ReshapeMode::kDims, "input 1 (shape) is given but reshape_mode is '" +
                                                          std::string(to_string(mode)) +
                                                          "'; a shape tensor needs reshape_mode 'dims'");
  if (mode == ReshapeMode::kNone) return d;
  if (mode == ReshapeMode::kDims)
    return reshape_dims(ctx, d, has_shape ? int_values(ctx, 1, "shape") : p.reshape, p.zero_is_placeholder);
  if (mode == ReshapeMode::kSqueeze) {
    const std::vector<int64_t>& axes = p.axes;
    std::vector<bool> drop(static_cast<size_t>(d.rank()), false);
    for (int i = 0; i < d.rank() && axes.empty(); ++i) drop[static_cast<size_t>(i)] = d[i] == 1;
    for (int64_t a : axes) {
      const int64_t k = normalize_axis(ctx, a, d.rank());
      ctx.check(d[static_cast<int>(k)] == 1, "squeeze axis " + std::to_string(a) + " of " + d.to_string() +
                                                 " has extent " + std::to_string(d[static_cast<int>(k)]) + ", not 1");
      drop[static_cast<size_t>(k)] = true;
    }
    Dims out;
    for (int i = 0; i < d.rank(); ++i) {
      if (!drop[static_cast<size_t>(i)]) out.push_back(d[i]);
    }
    return out;
  }
  if (mode == ReshapeMode::kUnsqueeze) {
    const std::vector<int64_t>& axes = p.axes;
    ctx.check(!axes.empty(), "reshape_mode 'unsqueeze' needs a non-empty 'axes'");
    const int rank = d.rank() + static_cast<int>(axes.size());
    ctx.check(rank <= kMaxDims, "unsqueeze of " + d.to_string() + " at " + join(axes) + " would have rank " +
                                    std::to_string(rank) + ", kiln supports at most " + std::to_string(kMaxDims));
    std::vector<bool> ones(static_cast<size_t>(rank), false);
    for (int64_t a : axes) {
      const int64_t k = normalize_axis(ctx, a, rank);
      ctx.check(!ones[static_cast<size_t>(k)],
                "unsqueeze axes " + join(axes) + " name output axis " + std::to_string(k) + " twice");
      ones[static_cast<size_t>(k)] = true;
    }
    Dims out;
    int next = 0;
    for (int i = 0; i < rank; ++i) out.push_back(ones[static_cast<size_t>(i)] ? 1 : d[next++]);
    return out;
  }
  // ReshapeMode::kFlatten (the mode was checked when the params were decoded)
  int64_t axis = p.axis;
  ctx.check(axis >= -d.rank() && axis <= d.rank(), "flatten axis " + std::to_string(axis) + " is out of range for " +
                                                       d.to_string() + " (valid: " + std::to_string(-d.rank()) +
                                                       " to " + std::to_string(d.rank()) + ")");
  if (axis < 0) axis += d.rank();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d.rank(); ++i) {
    int64_t& part = i < axis ? outer : inner;
    ctx.check(!mul_overflows(part, d[i], part), "flattening " + d.to_string() + " overflows 64-bit extents");
  }
  return Dims{outer, inner};
}

void infer_shuffle(ShapeContext& ctx) {
  const ShuffleParams& p = params_of<ShuffleParams>(ctx.layer());
  Dims d = ctx.input_dims(0);
  if (!p.first_transpose.empty()) d = permute(ctx, d, p.first_transpose, "first_transpose");
  d = shuffle_dims(ctx, p, d);
  if (!p.second_transpose.empty()) d = permute(ctx, d, p.second_transpose, "second_transpose");
  ctx.set_output(0, ctx.input_type(0), d);
}

// ---- Concatenation / Split ---------------------------------------------------------------------

void infer_concatenation(ShapeContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) ctx.check(ctx.has_input(i), "input " + std::to_string(i) + " is missing");
  const int64_t stored_axis = params_of<ConcatenationParams>(ctx.layer()).axis;  // required: checked there
  const Dims& first = ctx.input_dims(0);
  ctx.check(first.rank() >= 1, "cannot concatenate scalars (input 0 has rank 0); unsqueeze them first");
  const int64_t axis = normalize_axis(ctx, stored_axis, first.rank());
  Dims expected = first;
  expected[static_cast<int>(axis)] = kDynamic;  // prints as "?"
  Dims out = first;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Dims& d = ctx.input_dims(i);
    bool ok = d.rank() == first.rank();
    for (int k = 0; ok && k < d.rank(); ++k) ok = k == axis || d[k] == first[k];
    ctx.check(ok, "concatenation axis " + std::to_string(axis) + ": input " + std::to_string(i) + " has dims " +
                      d.to_string() + ", expected " + expected.to_string() + " (equal to input 0 " + first.to_string() +
                      " except on the axis)");
    check_same_type(ctx, i, "a concatenated tensor");
    out[static_cast<int>(axis)] = checked_extent(ctx, __int128{out[static_cast<int>(axis)]} + d[static_cast<int>(axis)],
                                                 "the concatenated extent on axis " + std::to_string(axis));
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

void infer_split(ShapeContext& ctx) {
  const SplitParams& p = params_of<SplitParams>(ctx.layer());
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() >= 1, "cannot split a scalar");
  const int64_t axis = normalize_axis(ctx, p.axis, x.rank());
  const int64_t extent = x[static_cast<int>(axis)];
  const int n = ctx.num_outputs();
  ctx.check(n >= 1, "a Split layer needs at least one output");
  std::vector<int64_t> sizes = ctx.has_input(1) ? int_values(ctx, 1, "split") : p.split;
  if (sizes.empty()) {
    // ONNX-18: equal chunks of ceil(extent / n), the last one smaller.
    const int64_t chunk = static_cast<int64_t>((__int128{extent} + n - 1) / n);
    sizes.assign(static_cast<size_t>(n), chunk);
    sizes.back() = static_cast<int64_t>(__int128{extent} - __int128{chunk} * (n - 1));
    ctx.check(sizes.back() >= 0, "cannot split extent " + std::to_string(extent) + " of axis " + std::to_string(axis) +
                                     " into " + std::to_string(n) + " chunks of " + std::to_string(chunk) +
                                     "; give explicit split sizes");
  }
  ctx.check(static_cast<int>(sizes.size()) == n, "split sizes " + join(sizes) + " give " +
                                                     std::to_string(sizes.size()) + " parts but the layer has " +
                                                     std::to_string(n) + " outputs");
  __int128 sum = 0;
  for (int64_t s : sizes) {
    ctx.check(s >= 0, "split sizes " + join(sizes) + " must be >= 0");
    sum += s;
  }
  const std::string sum_text = sum <= kInt64Max ? std::to_string(static_cast<int64_t>(sum)) : "more than 2^63";
  ctx.check(sum == extent, "split sizes " + join(sizes) + " sum to " + sum_text + " but axis " + std::to_string(axis) +
                               " of " + x.to_string() + " has extent " + std::to_string(extent));
  for (int i = 0; i < n; ++i) {
    Dims d = x;
    d[static_cast<int>(axis)] = sizes[static_cast<size_t>(i)];
    ctx.set_output(i, ctx.input_type(0), d);
  }
}

// ---- Slice -------------------------------------------------------------------------------------

void infer_slice(ShapeContext& ctx) {
  const Dims& x = ctx.input_dims(0);
  const int rank = x.rank();
  const auto starts = int_values(ctx, 1, "starts");
  const auto ends = int_values(ctx, 2, "ends");
  ctx.check(starts.size() == ends.size(), "starts " + join(starts) + " and ends " + join(ends) + " differ in length");
  std::vector<int64_t> axes, steps;
  if (ctx.has_input(3)) {
    axes = int_values(ctx, 3, "axes");
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  steps = ctx.has_input(4) ? int_values(ctx, 4, "steps") : std::vector<int64_t>(starts.size(), 1);
  ctx.check(axes.size() == starts.size() && steps.size() == starts.size(),
            "starts, ends, axes and steps must have the same length, got " + join(starts) + ", " + join(ends) + ", " +
                join(axes) + ", " + join(steps));
  Dims out = x;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int k = static_cast<int>(normalize_axis(ctx, axes[i], rank));
    ctx.check(!seen[static_cast<size_t>(k)], "slice axes " + join(axes) + " name axis " + std::to_string(k) + " twice");
    seen[static_cast<size_t>(k)] = true;
    const int64_t d = x[k], step = steps[i];
    ctx.check(step != 0, "slice step for axis " + std::to_string(k) + " is 0");
    int64_t start = starts[i], end = ends[i];
    if (d == 0) continue;  // an empty axis stays empty
    if (start < 0) start += d;
    if (end < 0) end += d;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, d);
      end = std::clamp<int64_t>(end, 0, d);
      // In 128 bits: a step near INT64_MAX (or INT64_MIN below) overflows 64-bit arithmetic.
      out[k] = end > start ? static_cast<int64_t>((__int128{end} - start + step - 1) / step) : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, d - 1);
      end = std::clamp<int64_t>(end, -1, d - 1);
      out[k] = start > end ? static_cast<int64_t>((__int128{start} - end - step - 1) / -__int128{step}) : 0;
    }
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

// ---- Gather ------------------------------------------------------------------------------------

void infer_gather(ShapeContext& ctx) {
  const GatherParams& p = params_of<GatherParams>(ctx.layer());
  ctx.check(is_index_type(ctx.input_type(1)),
            "input 1 (indices) must be int32 or int64, got " + std::string(to_string(ctx.input_type(1))));
  Dims out;
  try {
    out = gather_output_dims(p, ctx.input_dims(0), ctx.input_dims(1));
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

// ---- Padding -----------------------------------------------------------------------------------

void infer_padding(ShapeContext& ctx) {
  const Dims& x = ctx.input_dims(0);
  const auto pads = int_values(ctx, 1, "pads");
  ctx.check(static_cast<int>(pads.size()) == 2 * x.rank(),
            "pads " + join(pads) + " must have 2 * rank = " + std::to_string(2 * x.rank()) + " values for input " +
                x.to_string() + " ([x1_begin, x2_begin, ..., x1_end, x2_end, ...])");
  const PaddingMode mode = params_of<PaddingParams>(ctx.layer()).mode;
  if (ctx.has_input(2)) {
    check_same_type(ctx, 2, "value");
    ctx.check(ctx.input_dims(2).volume() == 1,
              "input 2 (value) must hold one value, got dims " + ctx.input_dims(2).to_string());
  }
  Dims out = x;
  for (int i = 0; i < x.rank(); ++i) {
    out[i] =
        checked_extent(ctx, __int128{x[i]} + pads[static_cast<size_t>(i)] + pads[static_cast<size_t>(i + x.rank())],
                       "pads " + join(pads) + " on axis " + std::to_string(i) + " of " + x.to_string());
    ctx.check(out[i] >= 0,
              "pads " + join(pads) + " crop axis " + std::to_string(i) + " of " + x.to_string() + " below zero");
    if (mode != PaddingMode::kConstant && __int128{x[i]} + std::min<int64_t>(pads[static_cast<size_t>(i)], 0) +
                                                  std::min<int64_t>(pads[static_cast<size_t>(i + x.rank())], 0) <=
                                              0) {
      ctx.check(out[i] == 0, "mode " + quote(to_string(mode)) + " cannot pad axis " + std::to_string(i) + " of " +
                                 x.to_string() + ": nothing is left to repeat after cropping");
    }
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

// ---- Shape / Fill / Expand / Tile -------------------------------------------------------------

void infer_shape(ShapeContext& ctx) {
  const int64_t rank = ctx.input_dims(0).rank();
  const ShapeParams& p = params_of<ShapeParams>(ctx.layer());
  int64_t start = p.start, end = p.end;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  ctx.set_output(0, DataType::kInt64, Dims{std::max<int64_t>(end - start, 0)});
}

void infer_fill_constant(ShapeContext& ctx) {
  ctx.check(ctx.num_inputs() == 1, "mode 'constant' takes one input (shape), got " + std::to_string(ctx.num_inputs()));
  const HostTensor& value = params_of<FillParams>(ctx.layer()).value;  // one element: checked there
  const auto shape = int_values(ctx, 0, "shape");
  for (int64_t s : shape) ctx.check(s >= 0, "shape " + join(shape) + " has a negative extent");
  ctx.set_output(0, value.type(), make_dims(ctx, shape));
}

void infer_fill_range(ShapeContext& ctx) {
  ctx.check(ctx.num_inputs() == 3,
            "mode 'range' takes three inputs (start, limit, delta), got " + std::to_string(ctx.num_inputs()));
  const DataType type = ctx.input_type(0);
  static const char* kNames[] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    check_same_type(ctx, i, kNames[i]);
    ctx.check(ctx.input_dims(i).volume() == 1, std::string("input ") + std::to_string(i) + " (" + kNames[i] +
                                                   ") must be a scalar, got dims " + ctx.input_dims(i).to_string());
  }
  int64_t count = 0;
  if (is_floating_point(type)) {
    const double start = ctx.required_value(0).to_double()[0], limit = ctx.required_value(1).to_double()[0],
                 delta = ctx.required_value(2).to_double()[0];
    ctx.check(delta != 0 && std::isfinite(start) && std::isfinite(limit) && std::isfinite(delta),
              "range needs finite start/limit and a finite non-zero delta");
    const double n = std::max(std::ceil((limit - start) / delta), 0.0);
    // 2^63 is the first double beyond int64 (converting it would be undefined).
    ctx.check(n < 9223372036854775808.0, "range(" + std::to_string(start) + ", " + std::to_string(limit) + ", " +
                                             std::to_string(delta) + ") has more than 2^63 elements");
    count = static_cast<int64_t>(n);
  } else {
    ctx.check(type != DataType::kBool, "range does not apply to bool");
    const int64_t start = ctx.required_value(0).to_int64()[0], limit = ctx.required_value(1).to_int64()[0],
                  delta = ctx.required_value(2).to_int64()[0];
    ctx.check(delta != 0, "range delta is 0");
    // In 128 bits: limit - start of two int64 values can overflow int64, and INT64_MIN / -1
    // traps (SIGFPE).
    const __int128 span = static_cast<__int128>(limit) - start;
    // ceil(span / delta) for integers of either sign.
    const __int128 q = span / delta, r = span % delta;
    const __int128 n = std::max<__int128>(q + ((r != 0 && ((r > 0) == (delta > 0))) ? 1 : 0), 0);
    ctx.check(n <= std::numeric_limits<int64_t>::max(), "range(" + std::to_string(start) + ", " +
                                                            std::to_string(limit) + ", " + std::to_string(delta) +
                                                            ") has more than 2^63 - 1 elements");
    count = static_cast<int64_t>(n);
  }
  ctx.set_output(0, type, Dims{count});
}

void infer_fill(ShapeContext& ctx) {
  if (params_of<FillParams>(ctx.layer()).mode == FillMode::kRange) return infer_fill_range(ctx);
  infer_fill_constant(ctx);
}

void infer_expand(ShapeContext& ctx) {
  const auto shape = int_values(ctx, 1, "shape");
  for (int64_t s : shape) ctx.check(s >= 0, "expand shape " + join(shape) + " has a negative extent");
  ctx.set_output(0, ctx.input_type(0), broadcast_dims(ctx, ctx.input_dims(0), make_dims(ctx, shape)));
}

void infer_tile(ShapeContext& ctx) {
  const Dims& x = ctx.input_dims(0);
  const auto repeats = int_values(ctx, 1, "repeats");
  ctx.check(static_cast<int>(repeats.size()) == x.rank(),
            "repeats " + join(repeats) + " must have one value per axis of " + x.to_string());
  Dims out = x;
  for (int i = 0; i < x.rank(); ++i) {
    ctx.check(repeats[static_cast<size_t>(i)] >= 0, "repeats " + join(repeats) + " must be >= 0");
    ctx.check(
        !mul_overflows(x[i], repeats[static_cast<size_t>(i)], out[i]),
        "repeats " + join(repeats) + " of " + x.to_string() + " overflow 64-bit extents on axis " + std::to_string(i));
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

using A = AttrType;
const std::vector<int64_t> kNoInts;

// Lookups in constant tables (embeddings) join the float32 stream the fp16 pass keeps for
// accuracy (OpTraits).
AccuracyRole gather_accuracy_role(const Layer& layer) {
  const Tensor* table = layer.num_inputs() > 0 ? layer.input(0) : nullptr;
  const Layer* producer = table ? table->producer() : nullptr;
  const bool constant = producer && producer->type() == kLayerConstant && producer->attrs().has("value");
  return constant ? AccuracyRole::kLeaf : AccuracyRole::kNone;
}

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerConstant,
                          0,
                          0,
                          1,
                          {{"value", A::kTensor, HostTensor{}, true, "the output tensor"}},
                          {},
                          infer_constant,
                          "Outputs the tensor held in attribute `value`.",
                          /*takes_strings=*/true});

KILN_REGISTER_OP(OpSchema{
    kLayerShuffle,
    1,
    2,
    1,
    {{"first_transpose", A::kInts, kNoInts, false, "permutation applied first (empty: none)"},
     {"reshape_mode", A::kString, std::string("none"), false, "none, dims, squeeze, unsqueeze or flatten"},
     {"reshape", A::kInts, kNoInts, false, "target dims for mode dims (0 copies, -1 infers) when input 1 is absent"},
     {"zero_is_placeholder", A::kInt, int64_t{1}, false, "0 in the target dims copies the input extent"},
     {"axes", A::kInts, kNoInts, false, "squeeze / unsqueeze axes"},
     {"axis", A::kInt, int64_t{1}, false, "flatten axis"},
     {"second_transpose", A::kInts, kNoInts, false, "permutation applied last (empty: none)"}},
    {1},
    infer_shuffle,
    "first_transpose, then a reshape (dims / squeeze / unsqueeze / flatten), then second_transpose."}
                     .with_params<ShuffleParams>());

KILN_REGISTER_OP(OpSchema{kLayerConcatenation,
                          1,
                          -1,
                          1,
                          {{"axis", A::kInt, int64_t{0}, true, "concatenation axis"}},
                          {},
                          infer_concatenation,
                          "Joins its inputs along `axis`; other extents must match."}
                     .with_params<ConcatenationParams>()
                     .with_traits({.channels_last = true}));

KILN_REGISTER_OP(OpSchema{kLayerSplit,
                          1,
                          2,
                          -1,
                          {{"axis", A::kInt, int64_t{0}, false, "split axis"},
                           {"split", A::kInts, kNoInts, false, "part sizes when input 1 is absent"}},
                          {1},
                          infer_split,
                          "Splits x along `axis` into the layer's outputs: sizes from input 1, else `split`, else "
                          "equal parts (the last may be smaller)."}
                     .with_params<SplitParams>());

KILN_REGISTER_OP(OpSchema{kLayerSlice,
                          3,
                          5,
                          1,
                          {},
                          {1, 2, 3, 4},
                          infer_slice,
                          "ONNX Slice: starts, ends, optional axes and steps (shape inputs), with clamping and "
                          "negative steps."});

KILN_REGISTER_OP(OpSchema{kLayerGather,
                          2,
                          2,
                          1,
                          {{"axis", A::kInt, int64_t{0}, false, "gather axis (default / elements)"},
                           {"mode", A::kString, std::string("default"), false, "default, elements or nd"},
                           {"batch_dims", A::kInt, int64_t{0}, false, "leading batch dims (nd)"}},
                          {},
                          infer_gather,
                          "ONNX Gather / GatherElements / GatherND; negative indices wrap, out-of-range indices "
                          "are an error."}
                     .with_params<GatherParams>()
                     .with_traits({.accuracy_role = gather_accuracy_role}));

KILN_REGISTER_OP(OpSchema{kLayerPadding,
                          2,
                          3,
                          1,
                          {{"mode", A::kString, std::string("constant"), false, "constant, reflect, edge or wrap"}},
                          {1},
                          infer_padding,
                          "ONNX Pad: pads [x1_begin, ..., x1_end, ...] (negative values crop), optional scalar "
                          "value for mode constant."}
                     .with_params<PaddingParams>());

KILN_REGISTER_OP(OpSchema{kLayerShape,
                          1,
                          1,
                          1,
                          {{"start", A::kInt, int64_t{0}, false, "first axis (negative counts from the end)"},
                           {"end", A::kInt, kInt64Max, false, "one past the last axis"}},
                          {},
                          infer_shape,
                          "int64 1-D dims of x, sliced by start/end (ONNX Shape-15)."}
                     .with_params<ShapeParams>());

KILN_REGISTER_OP(OpSchema{kLayerFill,
                          1,
                          3,
                          1,
                          {{"mode", A::kString, std::string(), true, "constant or range"},
                           {"value", A::kTensor, HostTensor(DataType::kFloat32, Dims{1}), false,
                            "one-element tensor giving the value and type (default float32 0), mode constant"}},
                          {0, 1, 2},
                          infer_fill,
                          "constant: a tensor of dims input 0 filled with `value` (ONNX ConstantOfShape); range: "
                          "start, start+delta, ... below limit (ONNX Range)."}
                     .with_params<FillParams>());

KILN_REGISTER_OP(OpSchema{
    kLayerExpand, 2, 2, 1, {}, {1}, infer_expand, "ONNX Expand: broadcasts x and the shape input against each other."});

KILN_REGISTER_OP(OpSchema{kLayerTile, 2, 2, 1, {}, {1}, infer_tile, "ONNX Tile: repeats x along every axis."});

}  // namespace kiln
