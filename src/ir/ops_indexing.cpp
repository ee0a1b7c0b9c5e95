// Schemas and shape/type inference of the layers whose results depend on element positions
// along an axis: ArgReduce (ArgMax/ArgMin), TopK, CumSum, Trilu, OneHot, ReverseSequence and
// MaxUnpool. Values that decide an output shape (OneHot's depth, MaxUnpool's output_shape) are
// shape inputs; TopK's k is used when known and otherwise read by the kernel (a data-dependent
// extent, src/ir/ops_data_dependent.cpp); values that do not (CumSum's axis, Trilu's k, sequence
// lengths) are ordinary inputs the kernels read when they run. Semantics: docs/layers.md.
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/ir/indexing_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"
#include "src/core/text.h"

namespace kiln {
namespace {

std::string describe(const ShapeContext& ctx, int i) {
  return "input " + std::to_string(i) + " (" + std::string(to_string(ctx.input_type(i))) + " " +
         ctx.input_dims(i).to_string() + ")";
}

void require_index(const ShapeContext& ctx, int i, const std::string& what) {
  ctx.check(ctx.input_type(i) == DataType::kInt32 || ctx.input_type(i) == DataType::kInt64,
            what + " " + describe(ctx, i) + " must be int32 or int64");
}

// A one-element input (scalar or [1]); fails naming `what` otherwise.
void require_single(const ShapeContext& ctx, int i, const std::string& what) {
  ctx.check(ctx.input_dims(i).volume() == 1, what + " " + describe(ctx, i) + " must hold exactly one value");
}

void infer_arg_reduce(ShapeContext& ctx) {
  const ArgReduceParams& p = params_of<ArgReduceParams>(ctx.layer());
  ctx.check(ctx.input_type(0) != DataType::kBool,
            std::string("cannot take the arg") + (p.is_max ? "max" : "min") + " of a bool tensor; Cast it first");
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() >= 1, "x must have rank >= 1");
  Dims out;
  int64_t axis = 0;
  try {
    axis = arg_reduce_axis(p, x.rank());
    out = arg_reduce_output_dims(p, x);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  ctx.check(x[static_cast<int>(axis)] > 0,
            "the reduced axis " + std::to_string(axis) + " of x " + x.to_string() + " is empty");
  ctx.set_output(0, p.one_hot ? ctx.input_type(0) : DataType::kInt64, out);
}

// k known on the host (a constant or shape arithmetic) gives the extent directly. Otherwise the
// kernel reads k when it runs and writes it into output 2 (an int64 scalar, which kiln's ONNX
// importer always adds): a data-dependent extent bounded by the axis' extent. Layers with 2
// outputs (older networks and engines) need k known.
void infer_top_k(ShapeContext& ctx) {
  ctx.check(ctx.num_outputs() <= 3, "has " + std::to_string(ctx.num_outputs()) +
                                        " outputs; TopK has values, indices and (optional) k as an int64 scalar");
  ctx.check(ctx.input_type(0) != DataType::kBool, "cannot sort a bool tensor; Cast it first");
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() >= 1, "x must have rank >= 1");
  const int64_t axis = normalize_axis(ctx, params_of<TopKParams>(ctx.layer()).axis, x.rank());
  require_index(ctx, 1, "k");
  require_single(ctx, 1, "k");
  const int64_t n = x[static_cast<int>(axis)];
  int64_t k = 0;
  if (const HostTensor* value = ctx.input_value(1)) {
    k = value->to_int64().at(0);
    ctx.check(k >= 0 && k <= n, "k = " + std::to_string(k) + " must lie in [0, " + std::to_string(n) +
                                    "] (the extent of axis " + std::to_string(axis) + " of x " + x.to_string() + ")");
  } else {
    ctx.check(ctx.num_outputs() == 3, "k (input 1) must be known when shapes are inferred for a TopK layer with " +
                                          std::to_string(ctx.num_outputs()) +
                                          " outputs; a run-time k needs output 2 "
                                          "(an int64 scalar the kernel writes k into), or make k a constant");
    k = ctx.data_dependent_extent(2, n);
  }
  Dims out = x;
  out[static_cast<int>(axis)] = k;
  ctx.set_output(0, ctx.input_type(0), out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, DataType::kInt64, out);
  if (ctx.num_outputs() > 2) ctx.set_output(2, DataType::kInt64, Dims{});
}

void infer_cum_sum(ShapeContext& ctx) {
  const DataType t = ctx.input_type(0);
  ctx.check(t != DataType::kBool, "cannot sum a bool tensor; Cast it first");
  ctx.check(ctx.input_dims(0).rank() >= 1, "x must have rank >= 1");
  require_index(ctx, 1, "axis");
  require_single(ctx, 1, "axis");
  if (const HostTensor* v = ctx.input_value(1)) normalize_axis(ctx, v->to_int64().at(0), ctx.input_dims(0).rank());
  ctx.set_output(0, t, ctx.input_dims(0));
}

void infer_trilu(ShapeContext& ctx) {
  ctx.check(ctx.input_dims(0).rank() >= 2, "x " + describe(ctx, 0) + " must have rank >= 2");
  if (ctx.has_input(1)) {
    require_index(ctx, 1, "k");
    require_single(ctx, 1, "k");
  }
  ctx.set_output(0, ctx.input_type(0), ctx.input_dims(0));
}

void infer_one_hot(ShapeContext& ctx) {
  ctx.check(ctx.input_type(0) != DataType::kBool, "indices " + describe(ctx, 0) + " must be numeric");
  require_single(ctx, 1, "depth");
  ctx.check(ctx.input_dims(2).rank() == 1 && ctx.input_dims(2).volume() == 2,
            "values " + describe(ctx, 2) + " must be a 1-D tensor [off_value, on_value]");
  const double depth = ctx.required_value(1).to_double().at(0);
  ctx.check(depth >= 1, "depth must be >= 1, got " + std::to_string(depth));
  // 2^63 is the first double beyond int64 (converting it would be undefined).
  ctx.check(depth < 9223372036854775808.0, "depth " + std::to_string(depth) + " does not fit in a 64-bit extent");
  const Dims& idx = ctx.input_dims(0);
  ctx.check(idx.rank() < kMaxDims, "indices " + idx.to_string() + " have too many dims to add one");
  const int64_t axis = normalize_axis(ctx, params_of<OneHotParams>(ctx.layer()).axis, idx.rank() + 1);
  Dims out;
  for (int i = 0, j = 0; i <= idx.rank(); ++i) out.push_back(i == axis ? static_cast<int64_t>(depth) : idx[j++]);
  ctx.set_output(0, ctx.input_type(2), out);
}

void infer_reverse_sequence(ShapeContext& ctx) {
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() >= 2, "x " + describe(ctx, 0) + " must have rank >= 2");
  const ReverseSequenceParams& p = params_of<ReverseSequenceParams>(ctx.layer());
  const int64_t batch = normalize_axis(ctx, p.batch_axis, x.rank());
  const int64_t time = normalize_axis(ctx, p.time_axis, x.rank());
  ctx.check(batch != time, "batch_axis and time_axis must differ");
  require_index(ctx, 1, "sequence_lens");
  ctx.check(ctx.input_dims(1).rank() == 1 && ctx.input_dims(1)[0] == x[static_cast<int>(batch)],
            "sequence_lens " + describe(ctx, 1) + " must be 1-D with one length per batch entry (" +
                std::to_string(x[static_cast<int>(batch)]) + ")");
  ctx.set_output(0, ctx.input_type(0), x);
}

void infer_max_unpool(ShapeContext& ctx) {
  const MaxUnpoolParams& p = params_of<MaxUnpoolParams>(ctx.layer());
  const Dims& x = ctx.input_dims(0);
  const int k = p.spatial_rank();
  ctx.check(x.rank() == k + 2, "x " + describe(ctx, 0) + " must be [N, C, D1..Dk] with k = " + std::to_string(k) +
                                   " spatial dims (the length of 'kernel')");
  ctx.check(ctx.input_type(1) == DataType::kInt64 && ctx.input_dims(1) == x,
            "indices " + describe(ctx, 1) + " must be int64 with the dims of x " + x.to_string());
  Dims out;
  try {
    out = max_unpool_dims(p, x);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  if (ctx.has_input(2)) {
    const auto shape = ctx.required_value(2).to_int64();
    ctx.check(static_cast<int>(shape.size()) == x.rank(),
              "output_shape has " + std::to_string(shape.size()) + " values, expected " + std::to_string(x.rank()));
    for (int i = 0; i < x.rank(); ++i) {
      ctx.check(
          shape[static_cast<size_t>(i)] >= out[i] || i < 2,
          "output_shape " + Dims::from(shape).to_string() + " is smaller than the unpooled size " + out.to_string());
    }
    out = Dims::from(shape);
    ctx.check(out[0] == x[0] && out[1] == x[1], "output_shape must keep N and C of x " + x.to_string());
  }
  ctx.set_output(0, ctx.input_type(0), out);
}

AttrSpec attr(std::string name, AttrType type, AttrValue def, std::string doc, bool required = false) {
  return AttrSpec{std::move(name), type, std::move(def), required, std::move(doc)};
}

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerArgReduce,
    1,
    1,
    1,
    {attr("op", AttrType::kString, std::string(), "max or min", true),
     attr("axis", AttrType::kInt, int64_t{0}, "the reduced axis"),
     attr("keep_dims", AttrType::kInt, int64_t{1}, "1: the axis stays as extent 1"),
     attr("select_last_index", AttrType::kInt, int64_t{0}, "1: ties give the last index, 0: the first"),
     attr("one_hot", AttrType::kInt, int64_t{0},
          "1: output x's type and dims, 1 at the selected index and 0 elsewhere (Hardmax)")},
    {},
    infer_arg_reduce,
    "int64 index of the largest (smallest) value along an axis, or its one-hot mask."}
                     .with_params<ArgReduceParams>());

KILN_REGISTER_OP(OpSchema{kLayerTopK,
                          2,
                          2,
                          -1,
                          {attr("axis", AttrType::kInt, int64_t{-1}, "the axis searched"),
                           attr("largest", AttrType::kInt, int64_t{1}, "1: the k largest, 0: the k smallest"),
                           attr("sorted", AttrType::kInt, int64_t{1},
                                "accepted for ONNX; the output is always sorted (largest first, or smallest)")},
                          {},
                          infer_top_k,
                          "The k largest (smallest) values along an axis and their int64 indices; ties keep the "
                          "lower index first. Optional output 2: k as an int64 scalar (a data-dependent size when "
                          "k is only known at run time)."}
                     .with_params<TopKParams>());

KILN_REGISTER_OP(OpSchema{kLayerCumSum,
                          2,
                          2,
                          1,
                          {attr("exclusive", AttrType::kInt, int64_t{0}, "1: each sum leaves its own element out"),
                           attr("reverse", AttrType::kInt, int64_t{0}, "1: sum from the end of the axis")},
                          {},
                          infer_cum_sum,
                          "Cumulative sum along the axis given by input 1 (a scalar read at run time)."}
                     .with_params<CumSumParams>());

KILN_REGISTER_OP(OpSchema{kLayerTrilu,
                          1,
                          2,
                          1,
                          {attr("upper", AttrType::kInt, int64_t{1}, "1: keep the upper triangle, 0: the lower")},
                          {},
                          infer_trilu,
                          "Keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims; k is "
                          "input 1 (default 0), read at run time."}
                     .with_params<TriluParams>());

KILN_REGISTER_OP(OpSchema{kLayerOneHot,
                          3,
                          3,
                          1,
                          {attr("axis", AttrType::kInt, int64_t{-1}, "where the depth axis is inserted")},
                          {1},
                          infer_one_hot,
                          "One-hot encoding: on_value where the index (negative: + depth) equals the position "
                          "along the new axis, off_value elsewhere."}
                     .with_params<OneHotParams>());

KILN_REGISTER_OP(OpSchema{kLayerReverseSequence,
                          2,
                          2,
                          1,
                          {attr("batch_axis", AttrType::kInt, int64_t{1}, "the batch axis"),
                           attr("time_axis", AttrType::kInt, int64_t{0}, "the time axis")},
                          {},
                          infer_reverse_sequence,
                          "Reverses the first sequence_lens[b] elements along time_axis of each batch entry b."}
                     .with_params<ReverseSequenceParams>());

KILN_REGISTER_OP(OpSchema{kLayerMaxUnpool,
                          2,
                          3,
                          1,
                          {attr("kernel", AttrType::kInts, std::vector<int64_t>{}, "pooling kernel extents", true),
                           attr("strides", AttrType::kInts, std::vector<int64_t>{}, "pooling strides (empty: 1)"),
                           attr("pads", AttrType::kInts, std::vector<int64_t>{}, "pooling pads (empty: 0)")},
                          {2},
                          infer_max_unpool,
                          "Scatters x into a zero tensor of the unpooled shape at the flat positions given by "
                          "indices (the inverse of max pooling with indices), padded at the end to output_shape."}
                     .with_params<MaxUnpoolParams>());

}  // namespace kiln
