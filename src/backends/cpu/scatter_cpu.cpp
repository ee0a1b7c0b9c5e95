// CPU reference kernel of the Scatter layer (docs/layers.md): ONNX ScatterElements (mode
// "elements") and ScatterND (mode "nd") with the reductions none / add / mul / max / min. The
// output starts as a copy of data; the updates are then applied one by one in their row-major
// order, so duplicate indices behave as ONNX Runtime's CPU kernel does (the last write wins
// for "none", every update is combined for a reduction). Layout: kLinear only; every numeric
// type (bool only without a reduction); indices int32 or int64, negative values wrap.
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/ir/op_params.h"
#include "src/ir/scatter_params.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/data_copy.h"
#include "src/backends/kernel.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

using Reduction = ScatterReductionKind;

// One update combined into the current value. half goes through float (its arithmetic is
// float's, rounded back on assignment); integers wrap as ONNX Runtime's do.
template <typename T>
void combine(T& dst, T src, Reduction r) {
  switch (r) {
    case Reduction::kNone:
      dst = src;
      break;
    case Reduction::kAdd:
      dst = static_cast<T>(dst + src);
      break;
    case Reduction::kMul:
      dst = static_cast<T>(dst * src);
      break;
    case Reduction::kMax:
      dst = src > dst ? src : dst;
      break;
    case Reduction::kMin:
      dst = src < dst ? src : dst;
      break;
  }
}

template <>
void combine<bool>(bool& dst, bool src, Reduction r) {
  if (r != Reduction::kNone) throw Error("Scatter: reductions are not defined for bool data");
  dst = src;
}

int64_t wrap_index(int64_t idx, int64_t extent, int axis) {
  if (idx < -extent || idx >= extent) {
    throw Error("Scatter: index " + std::to_string(idx) + " is out of range for axis " + std::to_string(axis) +
                " of extent " + std::to_string(extent) + " (valid: " + std::to_string(-extent) + " to " +
                std::to_string(extent - 1) + ")");
  }
  return idx < 0 ? idx + extent : idx;
}

template <typename T>
void scatter_elements(const KernelContext& ctx, const std::vector<int64_t>& idx, const ScatterParams& p) {
  const Reduction r = p.reduction;
  const TensorView& updates = ctx.inputs.at(2);
  const TensorView& y = ctx.outputs.at(0);
  const int rank = y.dims.rank();
  const int axis = scatter_axis(p, rank);
  const auto stride = row_major_strides(y.dims);
  const Dims& ud = updates.dims;
  std::array<int64_t, kMaxDims> c{};
  T* out = y.as<T>();
  const T* upd = updates.as<const T>();
  for (int64_t u = 0; u < updates.count(); ++u) {
    int64_t rest = u;
    for (int i = rank - 1; i >= 0; --i) {
      c[static_cast<size_t>(i)] = rest % ud[i];
      rest /= ud[i];
    }
    int64_t off = 0;
    for (int i = 0; i < rank; ++i) {
      int64_t ci = c[static_cast<size_t>(i)];
      if (i == axis) {
        ci = wrap_index(idx[static_cast<size_t>(u)], y.dims[i], i);
      } else if (ci >= y.dims[i]) {
        throw Error("Scatter: indices/updates dims " + ud.to_string() + " exceed data dims " + y.dims.to_string() +
                    " at axis " + std::to_string(i));
      }
      off += ci * stride[static_cast<size_t>(i)];
    }
    combine(out[off], upd[u], r);
  }
}

template <typename T>
void scatter_nd(const KernelContext& ctx, const std::vector<int64_t>& idx, const ScatterParams& p) {
  const Reduction r = p.reduction;
  const TensorView& indices = ctx.inputs.at(1);
  const TensorView& updates = ctx.inputs.at(2);
  const TensorView& y = ctx.outputs.at(0);
  const int q = indices.dims.rank();
  const int k = static_cast<int>(indices.dims[q - 1]);
  const auto stride = row_major_strides(y.dims);
  int64_t slice = 1;
  for (int i = k; i < y.dims.rank(); ++i) slice *= y.dims[i];
  const int64_t tuples = k > 0 ? indices.count() / k : 0;
  T* out = y.as<T>();
  const T* upd = updates.as<const T>();
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int j = 0; j < k; ++j) {
      off += wrap_index(idx[static_cast<size_t>(t * k + j)], y.dims[j], j) * stride[static_cast<size_t>(j)];
    }
    for (int64_t s = 0; s < slice; ++s) combine(out[off + s], upd[t * slice + s], r);
  }
}

class ScatterRef : public Kernel {
 public:
  explicit ScatterRef(const ScatterParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    const TensorView& data = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    if (data.count()) std::memcpy(y.data, data.data, static_cast<size_t>(data.count()) * data_type_size(data.type));
    const auto idx = cpu::read_ints(ctx.inputs.at(1), "Scatter indices");
    KILN_DISPATCH_NUMERIC(data.type, "Scatter", {
      if (params_.nd) {
        scatter_nd<T>(ctx, idx, params_);
      } else {
        scatter_elements<T>(ctx, idx, params_);
      }
    });
  }

 private:
  ScatterParams params_;
};

bool linear_only(const Layer&, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerScatter, "reference", 0, linear_only, [](const Layer& layer) {
                                   return std::make_unique<ScatterRef>(params_of<ScatterParams>(layer));
                                 }});

}  // namespace kiln
