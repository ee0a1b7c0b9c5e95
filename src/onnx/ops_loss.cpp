// ONNX importers of the loss ops NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, and of
// CastLike, as compositions of general kiln layers (so every backend that runs those layers runs
// the losses too; no layer type of their own).
//
// NegativeLogLikelihoodLoss(x [N,C,d..], target [N,d..], weight [C]?):
//   t      = Cast(target, int64), with ignored entries replaced by 0 (Select), so that every
//            gather reads a valid class; the masks below drop what they read
//   picked = GatherElements(x, Unsqueeze(t, 1), axis 1)                  [N,1,d..]
//   w      = Gather(weight, Unsqueeze(t, 1)) or ones of x's type            [N,1,d..]
//   loss   = ignored ? 0 : -picked * w; w_eff = ignored ? 0 : w
//   reduction none: Squeeze(loss, 1); sum: Reduce sum; mean: sum(loss) / sum(w_eff) when there is
//   a weight or ignore_index (ONNX's weighted mean), else Reduce mean.
// The importer does not know x's element type (kiln infers types when it builds), so the ones
// come from an ArgReduce one-hot over the size-1 axis of `picked` (1 in x's type, whatever the
// values) and the zeros from ones - ones. Masking goes through Select, not a product, so that an
// ignored position whose gathered value is inf or NaN still gives 0 (as ONNX does).
// SoftmaxCrossEntropyLoss is the same on log_prob = SoftMax(x, axis 1, log), its optional second
// output.
// CastLike is a Cast to the element type of its second input, which must be known when the
// node is imported (a graph input, a constant, or the output of a Cast).
#include <optional>
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// Layer-building shorthands, all named after the node (name() + "/" + suffix).
struct LossBuilder {
  NodeContext& ctx;

  Tensor* elementwise(Tensor* a, Tensor* b, const char* op, const std::string& suffix) {
    Attributes attrs;
    attrs.set("op", std::string(op));
    return ctx.add_layer(kLayerElementWise, {a, b}, 1, std::move(attrs), suffix)->output(0);
  }
  Tensor* unary(Tensor* x, const char* op, const std::string& suffix) {
    Attributes attrs;
    attrs.set("op", std::string(op));
    return ctx.add_layer(kLayerUnary, {x}, 1, std::move(attrs), suffix)->output(0);
  }
  Tensor* cast(Tensor* x, DataType to, const std::string& suffix) {
    Attributes attrs;
    attrs.set("to", std::string(to_string(to)));
    return ctx.add_layer(kLayerCast, {x}, 1, std::move(attrs), suffix)->output(0);
  }
  Tensor* select(Tensor* condition, Tensor* a, Tensor* b, const std::string& suffix) {
    return ctx.add_layer(kLayerSelect, {condition, a, b}, 1, {}, suffix)->output(0);
  }
  // Inserts (unsqueeze) or drops (squeeze) a size-1 axis 1.
  Tensor* axis1(Tensor* x, bool insert, const std::string& suffix) {
    Attributes attrs;
    attrs.set("reshape_mode", std::string(insert ? "unsqueeze" : "squeeze"));
    attrs.set("axes", std::vector<int64_t>{1});
    return ctx.add_layer(kLayerShuffle, {x}, 1, std::move(attrs), suffix)->output(0);
  }
  // Reduces over every axis to a scalar (ONNX's reduced losses have rank 0).
  Tensor* reduce_all(Tensor* x, const char* op, const std::string& suffix) {
    Attributes attrs;
    attrs.set("op", std::string(op));
    attrs.set("axes", std::vector<int64_t>{});
    attrs.set("keep_dims", int64_t{0});
    return ctx.add_layer(kLayerReduce, {x}, 1, std::move(attrs), suffix)->output(0);
  }
  // Ones of x's type and dims, for an x with a size-1 axis 1: the one-hot of the arg max over
  // that axis is 1 at its only position whatever the value (inf and NaN included).
  Tensor* ones_like_axis1(Tensor* x, const std::string& suffix) {
    Attributes attrs;
    attrs.set("op", std::string("max"));
    attrs.set("axis", int64_t{1});
    attrs.set("one_hot", int64_t{1});
    return ctx.add_layer(kLayerArgReduce, {x}, 1, std::move(attrs), suffix)->output(0);
  }
};

enum class LossReduction { kNone, kSum, kMean };

LossReduction loss_reduction(NodeContext& ctx) {
  const std::string r = ctx.attr_string("reduction", "mean");
  if (r == "none") return LossReduction::kNone;
  if (r == "sum") return LossReduction::kSum;
  if (r == "mean") return LossReduction::kMean;
  ctx.fail("attribute 'reduction' is " + quote(r) + "; valid values: none, sum, mean");
}

// Checks what the model records of the ranks: x [N,C,d..] (rank >= 2), target [N,d..], weight [C].
void check_loss_ranks(NodeContext& ctx) {
  const auto x = ctx.input_dims(0);
  const auto target = ctx.input_dims(1);
  if (x && x->rank() < 2) {
    ctx.fail("input " + quote(ctx.input_name(0)) + " has dims " + x->to_string() +
             "; it must be [N, C, d1..dk] (rank >= 2)");
  }
  if (x && target && target->rank() != x->rank() - 1) {
    ctx.fail("target " + quote(ctx.input_name(1)) + " has dims " + target->to_string() + " but input '" +
             ctx.input_name(0) + "' has dims " + x->to_string() + "; the target must be [N, d1..dk] (rank one less)");
  }
  if (ctx.has_input(2)) {
    const auto weight = ctx.input_dims(2);
    if (weight && weight->rank() != 1) {
      ctx.fail("weight " + quote(ctx.input_name(2)) + " has dims " + weight->to_string() + "; it must be 1-D [C]");
    }
  }
}

// The NegativeLogLikelihoodLoss of log-probabilities `x` with the node's target (input 1),
// weight (input 2, optional), ignore_index and reduction; see the file comment.
Tensor* negative_log_likelihood(NodeContext& ctx, Tensor* x) {
  LossBuilder b{ctx};
  const LossReduction reduction = loss_reduction(ctx);
  check_loss_ranks(ctx);
  Tensor* target = b.cast(ctx.required_input(1, "target"), DataType::kInt64, "target_int64");

  Tensor* index = b.axis1(target, true, "index");  // [N,1,d..]
  Tensor* ignored = nullptr;                       // bool [N,1,d..]; null without ignore_index
  if (ctx.has_attr("ignore_index")) {
    Tensor* ii = ctx.add_int64_constant({ctx.attr_int("ignore_index", 0)}, "ignore_index");
    ignored = b.elementwise(index, ii, "equal", "ignored");
    index = b.select(ignored, ctx.add_int64_constant({0}, "safe_index"), index, "index_safe");
  }

  Attributes elements;
  elements.set("axis", int64_t{1});
  elements.set("mode", std::string("elements"));
  Tensor* picked = ctx.add_layer(kLayerGather, {x, index}, 1, std::move(elements), "picked")->output(0);

  Tensor* loss = b.unary(picked, "neg", "neg");
  Tensor* weight = nullptr;  // [N,1,d..]; null when every weight is 1
  if (ctx.has_input(2)) {
    Attributes gather;
    gather.set("axis", int64_t{0});
    weight = ctx.add_layer(kLayerGather, {ctx.input(2), index}, 1, std::move(gather), "weight")->output(0);
    loss = b.elementwise(loss, weight, "prod", "weighted");
  }
  if (ignored) {
    Tensor* ones = b.ones_like_axis1(picked, "ones");
    Tensor* zeros = b.elementwise(ones, ones, "sub", "zeros");
    loss = b.select(ignored, zeros, loss, "masked");
    weight = b.select(ignored, zeros, weight ? weight : ones, "weight_masked");
  }

  switch (reduction) {
    case LossReduction::kNone:
      return b.axis1(loss, false, "squeeze");
    case LossReduction::kSum:
      return b.reduce_all(loss, "sum", "sum");
    case LossReduction::kMean:
      break;
  }
  if (!weight) return b.reduce_all(loss, "mean", "mean");
  return b.elementwise(b.reduce_all(loss, "sum", "sum"), b.reduce_all(weight, "sum", "weight_sum"), "div", "mean");
}

void import_negative_log_likelihood_loss(NodeContext& ctx) {
  ctx.set_output(0, negative_log_likelihood(ctx, ctx.required_input(0, "input")));
}
KILN_REGISTER_ONNX_IMPORTER("NegativeLogLikelihoodLoss", import_negative_log_likelihood_loss,
                            {.min_opset = 12,
                             .types = "float32, float16, float64 (target int32, int64)",
                             .notes = "a target that is not ignore_index must lie in [0, C): one outside [-C, C) "
                                      "is a run-time error, a negative one counts from the end (ONNX leaves both "
                                      "undefined)"});

void import_softmax_cross_entropy_loss(NodeContext& ctx) {
  Attributes softmax;
  softmax.set("axis", int64_t{1});
  softmax.set("log", int64_t{1});
  Tensor* log_prob =
      ctx.add_layer(kLayerSoftMax, {ctx.required_input(0, "scores")}, 1, std::move(softmax), "log_prob")->output(0);
  ctx.set_output(0, negative_log_likelihood(ctx, log_prob));
  ctx.set_output(1, log_prob);
}
KILN_REGISTER_ONNX_IMPORTER("SoftmaxCrossEntropyLoss", import_softmax_cross_entropy_loss,
                            {.min_opset = 12,
                             .types = "float32, float16, float64 (labels int32, int64)",
                             .notes = "a label that is not ignore_index must lie in [0, C): one outside [-C, C) "
                                      "is a run-time error, a negative one counts from the end (ONNX leaves both "
                                      "undefined)"});

void import_cast_like(NodeContext& ctx) {
  Tensor* input = ctx.required_input(0, "input");
  ctx.required_input(1, "target_type");
  const std::optional<DataType> type = ctx.static_type(1);
  if (!type) {
    ctx.unsupported("the element type of target_type '" + ctx.input_name(1) +
                    "' must be known at import (a graph input, an initializer or Constant, or a Cast output); "
                    "replace CastLike by Cast with 'to'");
  }
  // saturate (opset 19) only matters for float8 targets, which kiln does not have.
  Attributes attrs;
  attrs.set("to", std::string(to_string(*type)));
  ctx.set_output(0, ctx.add_layer(kLayerCast, {input}, 1, std::move(attrs))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("CastLike", import_cast_like,
                            {.min_opset = 15,
                             .types = "kiln's types (as Cast)",
                             .notes = "target_type's element type must be known at import: a graph input, a "
                                      "constant or a Cast output"});

}  // namespace
}  // namespace kiln
