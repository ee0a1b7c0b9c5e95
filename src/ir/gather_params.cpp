// GatherParams decoding and Gather's output-size rules (see gather_params.h).
#include "src/ir/gather_params.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/ir/op_params.h"
#include "src/ir/reduce_params.h"

namespace kiln {
namespace {

Dims dims_of(const std::vector<int64_t>& v) {
  if (v.size() > static_cast<size_t>(kMaxDims)) {
    throw Error("the output would have rank " + std::to_string(v.size()) + ", kiln supports at most " +
                std::to_string(kMaxDims));
  }
  return Dims::from(v);
}

}  // namespace

GatherParams GatherParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  GatherParams p;
  p.mode = r.get_enum<GatherMode>(
      "mode", {{"default", GatherMode::kDefault}, {"elements", GatherMode::kElements}, {"nd", GatherMode::kNd}});
  p.axis = r.get_int("axis");
  p.batch_dims = r.get_int("batch_dims");
  return p;
}

int gather_axis(const GatherParams& params, int rank) { return normalized_axis_or_throw(params.axis, rank); }

Dims gather_output_dims(const GatherParams& p, const Dims& data, const Dims& idx) {
  switch (p.mode) {
    case GatherMode::kDefault: {
      if (data.rank() < 1) throw Error("cannot gather from a scalar");
      const int axis = gather_axis(p, data.rank());
      std::vector<int64_t> out;
      for (int i = 0; i < axis; ++i) out.push_back(data[i]);
      for (int i = 0; i < idx.rank(); ++i) out.push_back(idx[i]);
      for (int i = axis + 1; i < data.rank(); ++i) out.push_back(data[i]);
      return dims_of(out);
    }
    case GatherMode::kElements: {
      if (data.rank() < 1 || idx.rank() != data.rank()) {
        throw Error("gather elements needs indices of the same rank as data (>= 1), got data " + data.to_string() +
                    ", indices " + idx.to_string());
      }
      const int axis = gather_axis(p, data.rank());
      for (int i = 0; i < data.rank(); ++i) {
        if (i != axis && idx[i] > data[i]) {
          throw Error("gather elements: indices " + idx.to_string() + " exceed data " + data.to_string() + " on axis " +
                      std::to_string(i) + " (only the gather axis may be larger)");
        }
      }
      return idx;
    }
    case GatherMode::kNd: {
      const int64_t b = p.batch_dims;
      if (idx.rank() < 1) throw Error("gather nd needs indices of rank >= 1");
      if (b < 0 || b >= std::min(data.rank(), idx.rank())) {
        throw Error("batch_dims " + std::to_string(b) + " must be in [0, min(rank(data), rank(indices)) - 1]");
      }
      for (int i = 0; i < b; ++i) {
        if (data[i] != idx[i]) {
          throw Error("gather nd: batch dim " + std::to_string(i) + " differs between data " + data.to_string() +
                      " and indices " + idx.to_string());
        }
      }
      const int64_t k = idx[idx.rank() - 1];
      if (k < 1 || k > data.rank() - b) {
        throw Error("gather nd: the last indices dim (" + std::to_string(k) +
                    ") must be in [1, rank(data) - batch_dims] = [1, " + std::to_string(data.rank() - b) + "]");
      }
      std::vector<int64_t> out;
      for (int i = 0; i < idx.rank() - 1; ++i) out.push_back(idx[i]);
      for (int i = static_cast<int>(b + k); i < data.rank(); ++i) out.push_back(data[i]);
      return dims_of(out);
    }
  }
  return data;
}

}  // namespace kiln
