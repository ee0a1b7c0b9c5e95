// ScatterParams decoding and Scatter's shape rules (see scatter_params.h).
#include "src/ir/scatter_params.h"

#include "kiln/error.h"
#include "src/ir/enum_names.h"
#include "src/ir/op_params.h"
#include "src/ir/reduce_params.h"

namespace kiln {
namespace {

// The names of `reduction`, for decoding and for messages.
const EnumNames<ScatterReductionKind> kReductions = {{"none", ScatterReductionKind::kNone},
                                                     {"add", ScatterReductionKind::kAdd},
                                                     {"mul", ScatterReductionKind::kMul},
                                                     {"max", ScatterReductionKind::kMax},
                                                     {"min", ScatterReductionKind::kMin}};

}  // namespace

const char* to_string(ScatterReductionKind reduction) { return name_in(kReductions, reduction); }

ScatterParams ScatterParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ScatterParams p;
  p.nd = r.get_enum<bool>("mode", {{"elements", false}, {"nd", true}});
  p.axis = r.get_int("axis");
  p.reduction = r.get_enum<ScatterReductionKind>("reduction", kReductions);
  return p;
}

int scatter_axis(const ScatterParams& params, int rank) { return normalized_axis_or_throw(params.axis, rank); }

void check_scatter_shapes(const ScatterParams& p, const Dims& data, const Dims& indices, const Dims& updates) {
  if (!p.nd) {
    if (data.rank() < 1) throw Error("data must have rank >= 1");
    (void)scatter_axis(p, data.rank());
    if (indices.rank() != data.rank()) {
      throw Error("indices " + indices.to_string() + " must have the rank of data " + data.to_string());
    }
    if (updates != indices) {
      throw Error("updates " + updates.to_string() + " must have the dims of indices " + indices.to_string());
    }
    return;
  }
  if (data.rank() < 1 || indices.rank() < 1) throw Error("data and indices must have rank >= 1");
  const int q = indices.rank();
  const int64_t k = indices[q - 1];
  if (k < 1 || k > data.rank()) {
    throw Error("the last dim of indices " + indices.to_string() + " is " + std::to_string(k) + "; it must lie in 1.." +
                std::to_string(data.rank()) + " (the rank of data)");
  }
  Dims expected;
  for (int i = 0; i < q - 1; ++i) expected.push_back(indices[i]);
  for (int i = static_cast<int>(k); i < data.rank(); ++i) expected.push_back(data[i]);
  if (updates != expected) {
    throw Error("updates " + updates.to_string() + " must have dims " + expected.to_string() +
                " (indices dims without the last, then data dims after the first " + std::to_string(k) + ")");
  }
}

}  // namespace kiln
