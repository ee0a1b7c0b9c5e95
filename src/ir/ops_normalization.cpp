// Schemas and shape/type inference of the normalization layers: Normalization (one layer type
// whose `mode` selects layer, instance, group, mean-variance or Lp normalization, the statistics
// differing only in which elements they are taken over) and LRN (local response normalization
// across channels). Semantics: docs/layers.md.
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/ir/normalization_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

std::string describe(const ShapeContext& ctx, int i) {
  return "input " + std::to_string(i) + " (" + std::string(to_string(ctx.input_type(i))) + " " +
         ctx.input_dims(i).to_string() + ")";
}

void require_floating(const ShapeContext& ctx, int i) {
  ctx.check(is_floating_point(ctx.input_type(i)),
            describe(ctx, i) + " must be floating-point; insert a Cast to float32 first");
}

// True when `small` broadcasts to exactly `target` (numpy, unidirectional).
bool broadcasts_to(const Dims& small, const Dims& target) {
  if (small.rank() > target.rank()) return false;
  for (int i = 0; i < small.rank(); ++i) {
    const int64_t s = small[i], t = target[target.rank() - small.rank() + i];
    if (s != 1 && s != t) return false;
  }
  return true;
}

// Checks scale (input 1) and bias (input 2) of a Normalization layer: `per_channel` means one
// value per index of axis 1, otherwise they broadcast to x.
void check_affine(const ShapeContext& ctx, bool per_channel) {
  const Dims& x = ctx.input_dims(0);
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    const char* what = i == 1 ? "scale " : "bias ";
    ctx.check(ctx.input_type(i) == ctx.input_type(0),
              what + describe(ctx, i) + " must have the data type of x (" + to_string(ctx.input_type(0)) + ")");
    if (per_channel) {
      ctx.check(ctx.input_dims(i).volume() == x[1],
                what + describe(ctx, i) + " must hold one value per channel (" + std::to_string(x[1]) + ")");
    } else {
      ctx.check(broadcasts_to(ctx.input_dims(i), x), what + describe(ctx, i) + " must broadcast to x " + x.to_string());
    }
  }
}

void require_no_affine(const ShapeContext& ctx, NormalizationMode mode) {
  ctx.check(!ctx.has_input(1) && !ctx.has_input(2),
            "mode " + quote(to_string(mode)) + " takes no scale or bias inputs");
}

void infer_normalization(ShapeContext& ctx) {
  const NormalizationParams& p = params_of<NormalizationParams>(ctx.layer());
  require_floating(ctx, 0);
  const Dims& x = ctx.input_dims(0);
  const int rank = x.rank();
  ctx.check(p.mode == NormalizationMode::kLayer || ctx.num_outputs() == 1,
            "has " + std::to_string(ctx.num_outputs()) +
                " outputs; only mode 'layer' has the optional mean and "
                "inv_std_dev outputs");
  ctx.check(ctx.num_outputs() <= 3, "has " + std::to_string(ctx.num_outputs()) + " outputs, at most 3 are allowed");
  if (p.per_channel_affine()) {
    ctx.check(rank >= 2,
              "mode " + quote(to_string(p.mode)) + " needs x of rank >= 2 ([N, C, ...]), got " + describe(ctx, 0));
  }
  NormStatsView view;
  try {
    view = normalization_stats_view(p, x);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  if (p.mode == NormalizationMode::kLayer) {
    check_affine(ctx, false);
    // The statistics have x's dims with the normalized axes as 1.
    Dims stats;
    for (int i = 0; i < rank; ++i) stats.push_back(view.reduced[static_cast<size_t>(i)] ? 1 : x[i]);
    for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, DataType::kFloat32, stats);
  } else if (p.per_channel_affine()) {
    check_affine(ctx, true);
  } else {
    require_no_affine(ctx, p.mode);
  }
  ctx.set_output(0, ctx.input_type(0), x);
}

void infer_lrn(ShapeContext& ctx) {
  (void)params_of<LrnParams>(ctx.layer());  // size >= 1, checked when decoded
  require_floating(ctx, 0);
  ctx.check(ctx.input_dims(0).rank() >= 3, "x " + describe(ctx, 0) + " must have rank >= 3 ([N, C, D1, ...])");
  ctx.set_output(0, ctx.input_type(0), ctx.input_dims(0));
}

AttrSpec attr(std::string name, AttrType type, AttrValue def, std::string doc, bool required = false) {
  return AttrSpec{std::move(name), type, std::move(def), required, std::move(doc)};
}

// Layer normalizations stay float32 under fp16 for accuracy (OpTraits; the precision pass says why).
AccuracyRole normalization_accuracy_role(const Layer& layer) {
  return params_of<NormalizationParams>(layer).mode == NormalizationMode::kLayer ? AccuracyRole::kAnchor
                                                                                 : AccuracyRole::kNone;
}

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerNormalization,
    1,
    3,
    -1,
    {attr("mode", AttrType::kString, std::string(), "layer, instance, group, mvn or lp", true),
     attr("axis", AttrType::kInt, int64_t{-1}, "layer: first normalized axis; lp: the normalized axis"),
     attr("axes", AttrType::kInts, std::vector<int64_t>{0, 2, 3}, "mvn: the axes the statistics are taken over"),
     attr("num_groups", AttrType::kInt, int64_t{1}, "group: number of channel groups"),
     attr("epsilon", AttrType::kFloat, 1e-5, "added to the variance (to the standard deviation in mode mvn)"),
     attr("normalize_variance", AttrType::kInt, int64_t{1}, "mvn: 0 only subtracts the mean"),
     attr("p", AttrType::kInt, int64_t{2}, "lp: the norm's order, 1 or 2")},
    {},
    infer_normalization,
    "y = (x - mean) / sqrt(var + epsilon) * scale + bias, with mean and variance over the elements the mode "
    "selects; mode lp divides by the Lp norm instead."}
                     .with_params<NormalizationParams>()
                     .with_traits({.accuracy_role = normalization_accuracy_role}));

KILN_REGISTER_OP(OpSchema{kLayerLRN,
                          1,
                          1,
                          1,
                          {attr("size", AttrType::kInt, int64_t{1}, "channels in the window", true),
                           attr("alpha", AttrType::kFloat, 1e-4, "scale of the sum of squares"),
                           attr("beta", AttrType::kFloat, 0.75, "exponent"),
                           attr("bias", AttrType::kFloat, 1.0, "added to the scaled sum of squares")},
                          {},
                          infer_lrn,
                          "Local response normalization across channels (ONNX LRN)."}
                     .with_params<LrnParams>());

}  // namespace kiln
