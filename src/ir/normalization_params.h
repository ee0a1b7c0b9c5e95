// The parameters of Normalization (one layer type whose `mode` selects layer, instance, group,
// mean-variance or Lp normalization) and LRN: decoded once from a layer's attributes (through the
// schema's with_params) and the statistics view that shape inference and every kernel (CPU
// reference, CUDA) share: which elements one mean / variance (or norm) is taken over.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/network.h"

namespace kiln {

// `mode` is the public NormalizationMode (include/kiln/network.h).
const char* to_string(NormalizationMode mode);  // "layer", "instance", "group", "mvn", "lp"

struct NormalizationParams {
  NormalizationMode mode = NormalizationMode::kLayer;
  int64_t axis = -1;                   // layer: first normalized axis; lp: the normalized axis (as stored)
  std::vector<int64_t> axes{0, 2, 3};  // mvn: the axes the statistics are taken over (as stored)
  int64_t num_groups = 1;              // group: >= 1
  double epsilon = 1e-5;               // added to the variance (mvn: to the standard deviation)
  bool normalize_variance = true;      // mvn: false only subtracts the mean
  int64_t p = 2;                       // lp: 1 or 2

  // Scale and bias hold one value per channel (axis 1) rather than broadcasting to x.
  bool per_channel_affine() const { return mode == NormalizationMode::kInstance || mode == NormalizationMode::kGroup; }
  // Throws kiln::Error naming the layer, the attribute and the allowed values.
  static NormalizationParams decode(const Layer& layer);
};

// The view of x whose `reduced` axes one statistics group spans: group mode views x as
// [N, groups, C / groups * D1 * ...] with the last axis reduced; layer reduces axis..rank-1,
// instance 2..rank-1, mvn `axes`, lp its one axis; other views are x's dims.
struct NormStatsView {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
};
// Throws kiln::Error (without a layer name; callers add theirs) for an axis out of range, an mvn
// axis named twice, instance / group on x of rank < 2, or groups not dividing the channel count.
NormStatsView normalization_stats_view(const NormalizationParams& params, const Dims& x);

struct LrnParams {
  int64_t size = 1;  // channels in the window, >= 1
  double alpha = 1e-4, beta = 0.75, bias = 1.0;
  static LrnParams decode(const Layer& layer);
};

}  // namespace kiln
