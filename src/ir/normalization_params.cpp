// NormalizationParams / LrnParams decoding and the statistics view (see normalization_params.h).
#include "src/ir/normalization_params.h"

#include <string>

#include "kiln/error.h"
#include "src/ir/enum_names.h"
#include "src/ir/op_params.h"
#include "src/ir/reduce_params.h"

namespace kiln {
namespace {

// The names of `mode`, for decoding and for messages.
const EnumNames<NormalizationMode> kModes = {{"layer", NormalizationMode::kLayer},
                                             {"instance", NormalizationMode::kInstance},
                                             {"group", NormalizationMode::kGroup},
                                             {"mvn", NormalizationMode::kMvn},
                                             {"lp", NormalizationMode::kLp}};

}  // namespace

const char* to_string(NormalizationMode mode) { return name_in(kModes, mode); }

NormalizationParams NormalizationParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  NormalizationParams p;
  p.mode = r.get_enum<NormalizationMode>("mode", kModes);
  p.axis = r.get_int("axis");
  p.axes = r.get_ints("axes");
  p.num_groups = r.get_int("num_groups");
  if (p.mode == NormalizationMode::kGroup && p.num_groups < 1) {
    r.fail("num_groups", "is " + std::to_string(p.num_groups) + "; it must be >= 1");
  }
  p.epsilon = r.get_float("epsilon");
  p.normalize_variance = r.get_int("normalize_variance") != 0;
  p.p = r.get_int("p");
  if (p.mode == NormalizationMode::kLp && p.p != 1 && p.p != 2) {
    r.fail("p", "is " + std::to_string(p.p) + "; mode \"lp\" supports 1 and 2");
  }
  return p;
}

NormStatsView normalization_stats_view(const NormalizationParams& p, const Dims& x) {
  const int rank = x.rank();
  NormStatsView v;
  if (p.mode == NormalizationMode::kInstance || p.mode == NormalizationMode::kGroup) {
    if (rank < 2) {
      throw Error(std::string("mode '") + to_string(p.mode) + "' needs x of rank >= 2 ([N, C, ...]), got " +
                  x.to_string());
    }
  }
  if (p.mode == NormalizationMode::kGroup) {
    if (p.num_groups < 1 || x[1] % p.num_groups != 0) {
      throw Error("num_groups " + std::to_string(p.num_groups) + " must be >= 1 and divide the channel count " +
                  std::to_string(x[1]));
    }
    int64_t inner = x[1] / p.num_groups;
    for (int i = 2; i < rank; ++i) inner *= x[i];
    v.dims = {x[0], p.num_groups, inner};
    v.reduced = {false, false, true};
    return v;
  }
  v.dims = x.to_vector();
  v.reduced.assign(static_cast<size_t>(rank), false);
  switch (p.mode) {
    case NormalizationMode::kLayer:
      for (int i = normalized_axis_or_throw(p.axis, rank); i < rank; ++i) v.reduced[static_cast<size_t>(i)] = true;
      break;
    case NormalizationMode::kInstance:
      for (int i = 2; i < rank; ++i) v.reduced[static_cast<size_t>(i)] = true;
      break;
    case NormalizationMode::kMvn:
      for (int64_t a : p.axes) {
        const auto axis = static_cast<size_t>(normalized_axis_or_throw(a, rank));
        if (v.reduced[axis]) throw Error("attribute 'axes' names axis " + std::to_string(axis) + " twice");
        v.reduced[axis] = true;
      }
      break;
    case NormalizationMode::kLp:
      v.reduced[static_cast<size_t>(normalized_axis_or_throw(p.axis, rank))] = true;
      break;
    case NormalizationMode::kGroup:
      break;
  }
  return v;
}

LrnParams LrnParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  LrnParams p;
  p.size = r.get_int("size");
  if (p.size < 1) r.fail("size", "is " + std::to_string(p.size) + "; it must be >= 1");
  p.alpha = r.get_float("alpha");
  p.beta = r.get_float("beta");
  p.bias = r.get_float("bias");
  return p;
}

}  // namespace kiln
