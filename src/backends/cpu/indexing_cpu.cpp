// CPU reference kernels of the position-driven layers: ArgReduce, TopK, CumSum, Trilu, OneHot,
// ReverseSequence and MaxUnpool. Most view a tensor around one axis as [outer, n, inner]. Kernels
// that only move elements (Trilu, OneHot, ReverseSequence, MaxUnpool) copy bytes and so serve
// every data type. Scalars passed as tensors (CumSum's axis, Trilu's k) are read from the input
// when the kernel runs: CPU tensors live in host memory.
//
// Layout: dense row-major (TensorFormat::kLinear); no alignment is assumed.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/backends/params_kernel.h"
#include "src/ir/indexing_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"

namespace kiln {
namespace {

int64_t product(const Dims& dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// [outer, n, inner] around `axis` of dims.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
  AxisView(const Dims& d, int axis) : outer(product(d, 0, axis)), n(d[axis]), inner(product(d, axis + 1, d.rank())) {}
};

// The single value of an int32/int64 tensor.
int64_t read_int(const TensorView& t, const char* what) {
  if (t.count() != 1) throw Error(std::string(what) + " must hold one value, has dims " + t.dims.to_string());
  if (t.type == DataType::kInt32) return *t.as<const int32_t>();
  if (t.type == DataType::kInt64) return *t.as<const int64_t>();
  throw Error(std::string(what) + " must be int32 or int64, got " + to_string(t.type));
}

// Numbers compare as float for half, natively otherwise.
template <typename T>
using Cmp = std::conditional_t<std::is_same_v<T, half>, float, T>;

// ---- ArgReduce ----------------------------------------------------------------------------------

template <typename T>
void arg_reduce(const ArgReduceParams& params, const KernelContext& ctx) {
  const bool is_max = params.is_max;
  const bool last = params.select_last_index;
  const Dims& d = ctx.inputs[0].dims;
  const AxisView v(d, arg_reduce_axis(params, d.rank()));
  const bool one_hot = params.one_hot;
  const T* x = ctx.inputs[0].as<const T>();
  int64_t* y = one_hot ? nullptr : ctx.outputs[0].as<int64_t>();
  T* mask = one_hot ? ctx.outputs[0].as<T>() : nullptr;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const T* p = x + o * v.n * v.inner + i;
      int64_t best = 0;
      Cmp<T> best_value = static_cast<Cmp<T>>(p[0]);
      for (int64_t j = 1; j < v.n; ++j) {
        const auto value = static_cast<Cmp<T>>(p[j * v.inner]);
        const bool better = is_max ? (value > best_value || (last && value == best_value))
                                   : (value < best_value || (last && value == best_value));
        if (better) {
          best = j;
          best_value = value;
        }
      }
      if (one_hot) {
        for (int64_t j = 0; j < v.n; ++j) mask[(o * v.n + j) * v.inner + i] = static_cast<T>(j == best ? 1 : 0);
      } else {
        y[o * v.inner + i] = best;
      }
    }
  }
}

void arg_reduce_execute(const ArgReduceParams& params, const KernelContext& ctx) {
  KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "ArgReduce", arg_reduce<T>(params, ctx));
}

// ---- TopK ----------------------------------------------------------------------------------------

// k comes from input 1 when the kernel runs: when it was unknown at shape inference the outputs
// are sized for k = n and are written compactly for the actual k, which also goes to output 2
// (the data-dependent size) when the layer has it.
template <typename T>
void top_k(const TopKParams& params, const KernelContext& ctx) {
  const Dims& d = ctx.inputs[0].dims;
  const int axis = normalized_axis_or_throw(params.axis, d.rank());
  const bool largest = params.largest;
  const AxisView v(d, axis);
  const int64_t k = read_int(ctx.inputs[1], "k");
  if (k < 0 || k > ctx.outputs[0].dims[axis]) {
    throw Error("k = " + std::to_string(k) + " must lie in [0, " + std::to_string(v.n) + "] (the extent of axis " +
                std::to_string(axis) + " of x " + d.to_string() + ")");
  }
  if (ctx.outputs.size() > 2) ctx.outputs[2].as<int64_t>()[0] = k;
  const T* x = ctx.inputs[0].as<const T>();
  T* values = ctx.outputs[0].as<T>();
  int64_t* indices = ctx.outputs.size() > 1 ? ctx.outputs[1].as<int64_t>() : nullptr;
  std::vector<int64_t> order(static_cast<size_t>(v.n));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const T* p = x + o * v.n * v.inner + i;
      std::iota(order.begin(), order.end(), int64_t{0});
      // Ties keep the lower index first (ONNX Runtime's order).
      auto before = [&](int64_t a, int64_t b) {
        const auto va = static_cast<Cmp<T>>(p[a * v.inner]), vb = static_cast<Cmp<T>>(p[b * v.inner]);
        if (va != vb) return largest ? va > vb : va < vb;
        return a < b;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * v.inner + i;
        values[at] = p[order[static_cast<size_t>(j)] * v.inner];
        if (indices) indices[at] = order[static_cast<size_t>(j)];
      }
    }
  }
}

// ---- CumSum --------------------------------------------------------------------------------------

template <typename T>
void cum_sum(const CumSumParams& params, const KernelContext& ctx) {
  const Dims& d = ctx.inputs[0].dims;
  const int64_t a = read_int(ctx.inputs[1], "axis");
  if (a < -d.rank() || a >= d.rank()) {
    throw Error("axis " + std::to_string(a) + " is out of range for x of dims " + d.to_string());
  }
  const AxisView v(d, normalized_axis_or_throw(a, d.rank()));
  const bool exclusive = params.exclusive;
  const bool reverse = params.reverse;
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      Acc acc = 0;
      for (int64_t s = 0; s < v.n; ++s) {
        const int64_t j = reverse ? v.n - 1 - s : s;
        const int64_t at = (o * v.n + j) * v.inner + i;
        const auto value = static_cast<Acc>(x[at]);
        if (!exclusive) acc += value;
        y[at] = static_cast<T>(acc);
        if (exclusive) acc += value;
      }
    }
  }
}

void top_k_execute(const TopKParams& params, const KernelContext& ctx) {
  KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "TopK", top_k<T>(params, ctx));
}

void cum_sum_execute(const CumSumParams& params, const KernelContext& ctx) {
  KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "CumSum", cum_sum<T>(params, ctx));
}

// ---- byte-moving kernels ------------------------------------------------------------------------

void trilu(const TriluParams& params, const KernelContext& ctx) {
  const TensorView& xv = ctx.inputs[0];
  const int64_t k = ctx.inputs.size() > 1 && ctx.inputs[1].data ? read_int(ctx.inputs[1], "k") : 0;
  const bool upper = params.upper;
  const Dims& d = xv.dims;
  const int64_t rows = d[d.rank() - 2], cols = d[d.rank() - 1], batch = product(d, 0, d.rank() - 2);
  const size_t es = data_type_size(xv.type);
  const auto* x = static_cast<const uint8_t*>(xv.data);
  auto* y = static_cast<uint8_t*>(ctx.outputs[0].data);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t at = static_cast<size_t>((b * rows + r) * cols + c) * es;
        const bool keep = upper ? c - r >= k : c - r <= k;
        if (keep)
          std::memcpy(y + at, x + at, es);
        else
          std::memset(y + at, 0, es);
      }
    }
  }
}

void one_hot(const OneHotParams& params, const KernelContext& ctx) {
  const TensorView& idx = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  const Dims& od = out.dims;
  const int axis = normalized_axis_or_throw(params.axis, od.rank());
  const AxisView v(od, axis);  // v.n is the depth
  std::vector<double> index(static_cast<size_t>(idx.count()));
  KILN_DISPATCH_NUMERIC(idx.type, "OneHot indices", {
    for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<double>(idx.as<const T>()[i]);
  });
  const size_t es = data_type_size(out.type);
  const auto* off_on = static_cast<const uint8_t*>(ctx.inputs[2].data);
  auto* y = static_cast<uint8_t*>(out.data);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      auto hot = static_cast<int64_t>(index[static_cast<size_t>(o * v.inner + i)]);  // toward zero, as ONNX Runtime
      if (hot < 0) hot += v.n;
      for (int64_t j = 0; j < v.n; ++j) {
        std::memcpy(y + static_cast<size_t>((o * v.n + j) * v.inner + i) * es, off_on + (j == hot ? es : 0), es);
      }
    }
  }
}

void reverse_sequence(const ReverseSequenceParams& params, const KernelContext& ctx) {
  const TensorView& xv = ctx.inputs[0];
  const Dims& d = xv.dims;
  const int batch_axis = normalized_axis_or_throw(params.batch_axis, d.rank());
  const int time_axis = normalized_axis_or_throw(params.time_axis, d.rank());
  std::vector<int64_t> lens(static_cast<size_t>(ctx.inputs[1].count()));
  for (size_t b = 0; b < lens.size(); ++b) {
    lens[b] = ctx.inputs[1].type == DataType::kInt32 ? ctx.inputs[1].as<const int32_t>()[b]
                                                     : ctx.inputs[1].as<const int64_t>()[b];
    if (lens[b] < 0 || lens[b] > d[time_axis]) {
      throw Error("sequence_lens[" + std::to_string(b) + "] = " + std::to_string(lens[b]) + " is outside [0, " +
                  std::to_string(d[time_axis]) + "] (the time axis extent)");
    }
  }
  const auto strides = row_major_strides(d);
  const size_t es = data_type_size(xv.type);
  const auto* x = static_cast<const uint8_t*>(xv.data);
  auto* y = static_cast<uint8_t*>(ctx.outputs[0].data);
  const int64_t total = d.volume();
  for (int64_t flat = 0; flat < total; ++flat) {
    const int64_t b = flat / strides[static_cast<size_t>(batch_axis)] % d[batch_axis];
    const int64_t t = flat / strides[static_cast<size_t>(time_axis)] % d[time_axis];
    const int64_t len = lens[static_cast<size_t>(b)];
    const int64_t src = t < len ? flat + (len - 1 - 2 * t) * strides[static_cast<size_t>(time_axis)] : flat;
    std::memcpy(y + static_cast<size_t>(flat) * es, x + static_cast<size_t>(src) * es, es);
  }
}

// Indices are flat over the default unpooled shape [N, C, (D-1)*s - pb - pe + k ..] (as ONNX
// MaxPool gives them); a larger output_shape pads that tensor at the end of each axis (the ONNX
// reference; ONNX Runtime instead reads the indices in the output_shape layout).
void max_unpool(const MaxUnpoolParams& params, const KernelContext& ctx) {
  const TensorView& xv = ctx.inputs[0];
  const TensorView& out = ctx.outputs[0];
  const Dims unpooled = max_unpool_dims(params, xv.dims);
  const auto unpooled_strides = row_major_strides(unpooled);
  const auto out_strides = row_major_strides(out.dims);
  const int64_t total = unpooled.volume();
  const size_t es = data_type_size(xv.type);
  std::memset(out.data, 0, static_cast<size_t>(out.count()) * es);
  const auto* x = static_cast<const uint8_t*>(xv.data);
  const auto* idx = ctx.inputs[1].as<const int64_t>();
  auto* y = static_cast<uint8_t*>(out.data);
  for (int64_t i = 0; i < xv.count(); ++i) {
    if (idx[i] < 0 || idx[i] >= total) {
      throw Error("indices[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                  " is outside the unpooled tensor (" + unpooled.to_string() + ", " + std::to_string(total) +
                  " elements)");
    }
    int64_t at = 0, rest = idx[i];
    for (int d = 0; d < unpooled.rank(); ++d) {
      at += rest / unpooled_strides[static_cast<size_t>(d)] * out_strides[static_cast<size_t>(d)];
      rest %= unpooled_strides[static_cast<size_t>(d)];
    }
    std::memcpy(y + static_cast<size_t>(at) * es, x + static_cast<size_t>(i) * es, es);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerArgReduce, "reference", 0, nullptr,
                                 params_kernel<ArgReduceParams, arg_reduce_execute>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerTopK, "reference", 0, nullptr,
                                 params_kernel<TopKParams, top_k_execute>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerCumSum, "reference", 0, nullptr,
                                 params_kernel<CumSumParams, cum_sum_execute>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerTrilu, "reference", 0, nullptr,
                                 params_kernel<TriluParams, trilu>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerOneHot, "reference", 0, nullptr,
                                 params_kernel<OneHotParams, one_hot>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerReverseSequence, "reference", 0, nullptr,
                                 params_kernel<ReverseSequenceParams, reverse_sequence>()});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerMaxUnpool, "reference", 0, nullptr,
                                 params_kernel<MaxUnpoolParams, max_unpool>()});

}  // namespace kiln
