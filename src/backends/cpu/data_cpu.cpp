// CPU reference ("oracle") kernels of the data-movement layers: Constant, Shuffle,
// Concatenation, Split, Slice, Gather (default / elements / nd), Padding, Shape, Fill, Expand
// and Tile, with the semantics of docs/layers.md. Movers look only at element widths, so every
// data type works; Fill "range" computes in float32/float64/int32/int64. Each kernel maps
// output coordinates to input coordinates as directly as the layer's definition reads; speed
// comes from the "fast" tactics at the end of this file (Concatenation as row memcpys, Shuffle
// as one composed transpose where the reshape allows it, else two, both OpenMP-parallel) and in
// resize_cpu.cpp. Shape inputs (Slice starts, pads, ...) are read from the input views, which are
// host memory on the CPU. Layout: kLinear only, except the "fast" Concatenation, which also
// concatenates channels-last tensors (all inputs and the output in one format) by the same row
// copies in memory order, and the "fast" Shuffle, whose data input may be channels-last.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/data_copy.h"
#include "src/backends/cpu/isa_region.h"
#include "src/backends/kernel.h"
#include "src/ir/data_params.h"
#include "src/ir/gather_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

using cpu::dispatch_width;
using cpu::read_ints;
using Maps = std::vector<std::vector<int64_t>>;

bool all_linear(const Layer&, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

// ---- Constant ----------------------------------------------------------------------------------

void constant_execute(const KernelContext& ctx) {
  const HostTensor& value = ctx.layer->attrs().get_tensor("value");
  const TensorView& out = ctx.outputs.at(0);
  if (value.type() != out.type || value.dims() != out.dims) {
    throw Error("Constant: output is " + std::string(to_string(out.type)) + " " + out.dims.to_string() +
                " but the value is " + to_string(value.type()) + " " + value.dims().to_string());
  }
  if (value.nbytes()) std::memcpy(out.data, value.data(), value.nbytes());
}

// ---- Shuffle -----------------------------------------------------------------------------------

using Coords = std::array<int64_t, kMaxDims>;

// Row-major flat index <-> coordinates.
void unravel(int64_t flat, const Dims& d, Coords& c) {
  for (int i = d.rank() - 1; i >= 0; --i) {
    c[static_cast<size_t>(i)] = flat % d[i];
    flat /= d[i];
  }
}
int64_t ravel(const Coords& c, const Dims& d) {
  int64_t f = 0;
  for (int i = 0; i < d.rank(); ++i) f = f * d[i] + c[static_cast<size_t>(i)];
  return f;
}

std::vector<int64_t> identity_if_empty(std::vector<int64_t> perm, int rank) {
  if (perm.empty()) {
    for (int i = 0; i < rank; ++i) perm.push_back(i);
  }
  return perm;
}

// Follows the definition step by step backwards: output coords -> coords before the second
// transpose -> flat index of the reshaped (= first-transposed) tensor -> coords after the
// first transpose -> input coords.
class ShuffleRef : public Kernel {
 public:
  explicit ShuffleRef(const Layer& layer)
      : first_(params_of<ShuffleParams>(layer).first_transpose),
        second_(params_of<ShuffleParams>(layer).second_transpose) {}

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    const auto p1 = identity_if_empty(first_, x.dims.rank());
    const auto p2 = identity_if_empty(second_, y.dims.rank());
    if (static_cast<int>(p1.size()) != x.dims.rank() || static_cast<int>(p2.size()) != y.dims.rank()) {
      throw Error("Shuffle: transposes " + std::to_string(p1.size()) + "/" + std::to_string(p2.size()) +
                  " do not match ranks of " + x.dims.to_string() + " -> " + y.dims.to_string());
    }
    Dims t1, reshaped = y.dims;
    for (int64_t p : p1) t1.push_back(x.dims[static_cast<int>(p)]);
    for (int k = 0; k < y.dims.rank(); ++k) reshaped[static_cast<int>(p2[static_cast<size_t>(k)])] = y.dims[k];
    if (t1.volume() != reshaped.volume()) {
      throw Error("Shuffle: " + x.dims.to_string() + " cannot become " + y.dims.to_string());
    }
    dispatch_width(x.type, "Shuffle", [&](auto tag) {
      using E = typename decltype(tag)::type;
      const E* src = x.as<const E>();
      E* dst = y.as<E>();
      Coords c{}, r{}, t{}, in{};
      for (int64_t o = 0; o < y.count(); ++o) {
        unravel(o, y.dims, c);
        for (size_t k = 0; k < p2.size(); ++k) r[static_cast<size_t>(p2[k])] = c[k];
        unravel(ravel(r, reshaped), t1, t);
        for (size_t k = 0; k < p1.size(); ++k) in[static_cast<size_t>(p1[k])] = t[k];
        dst[o] = src[ravel(in, x.dims)];
      }
    });
  }

 private:
  std::vector<int64_t> first_, second_;
};

// ---- Concatenation / Split ---------------------------------------------------------------------

int64_t norm_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// [outer, axis extent, inner] view of dims around axis.
void split_around(const Dims& d, int64_t axis, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int i = 0; i < d.rank(); ++i) {
    if (i < axis) outer *= d[i];
    if (i > axis) inner *= d[i];
  }
}

// Concatenation (to_parts = false) and Split (true): part k covers [offset_k, offset_k + n_k)
// of the whole tensor's axis.
void concat_or_split(const KernelContext& ctx, bool to_parts) {
  const std::vector<TensorView>& parts = to_parts ? ctx.outputs : ctx.inputs;
  const TensorView& whole = to_parts ? ctx.inputs.at(0) : ctx.outputs.at(0);
  const int64_t stored_axis =
      to_parts ? params_of<SplitParams>(*ctx.layer).axis : params_of<ConcatenationParams>(*ctx.layer).axis;
  const int64_t axis = norm_axis(stored_axis, whole.dims.rank());
  int64_t outer = 1, inner = 1;
  split_around(whole.dims, axis, outer, inner);
  const int64_t whole_axis = whole.dims[static_cast<int>(axis)];
  dispatch_width(whole.type, to_parts ? "Split" : "Concatenation", [&](auto tag) {
    using E = typename decltype(tag)::type;
    int64_t offset = 0;
    for (const TensorView& part : parts) {
      const int64_t n = part.dims[static_cast<int>(axis)];
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t a = 0; a < n; ++a) {
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t w = (o * whole_axis + offset + a) * inner + i, p = (o * n + a) * inner + i;
            if (to_parts) {
              part.as<E>()[p] = whole.as<const E>()[w];
            } else {
              whole.as<E>()[w] = part.as<const E>()[p];
            }
          }
        }
      }
      offset += n;
    }
  });
}

// ---- Slice / Padding / Tile / Expand: per-axis index tables -------------------------------------

void slice_execute(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs.at(0);
  const TensorView& y = ctx.outputs.at(0);
  const int rank = x.dims.rank();
  const auto starts = read_ints(ctx.inputs.at(1), "Slice starts");
  std::vector<int64_t> axes, steps;
  if (ctx.inputs.size() > 3 && ctx.inputs[3].data) {
    axes = read_ints(ctx.inputs[3], "Slice axes");
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (ctx.inputs.size() > 4 && ctx.inputs[4].data) {
    steps = read_ints(ctx.inputs[4], "Slice steps");
  } else {
    steps.assign(starts.size(), 1);
  }
  std::vector<int64_t> start(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto k = static_cast<size_t>(norm_axis(axes[i], rank));
    const int64_t d = x.dims[static_cast<int>(k)];
    if (d == 0) continue;  // nothing to read; the output axis is empty too
    int64_t s = starts[i];
    if (s < 0) s += d;
    // ONNX clamps the start into [0, d] for positive steps and [0, d - 1] for negative ones.
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, d) : std::clamp<int64_t>(s, 0, d - 1);
    start[k] = s;
    step[k] = steps[i];
  }
  const auto stride = row_major_strides(x.dims);
  Maps maps(static_cast<size_t>(rank));
  for (int k = 0; k < rank; ++k) {
    const auto u = static_cast<size_t>(k);
    for (int64_t j = 0; j < y.dims[k]; ++j) maps[u].push_back((start[u] + j * step[u]) * stride[u]);
  }
  cpu::table_copy(x, y, maps, nullptr, ctx.num_threads, "Slice");
}

int64_t positive_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

// Source index along one padded axis of `d` input elements, or -1 for the constant.
int64_t pad_source(PaddingMode mode, int64_t o, int64_t d, int64_t begin, int64_t end) {
  // Negative pads crop first; the padding then repeats what is left ([crop_b, d - crop_e)).
  const int64_t crop_b = std::max<int64_t>(-begin, 0), crop_e = std::max<int64_t>(-end, 0);
  const int64_t kept = d - crop_b - crop_e;
  const int64_t i = o - std::max<int64_t>(begin, 0);
  if (i >= 0 && i < kept) return i + crop_b;
  if (mode == PaddingMode::kConstant || kept <= 0) return -1;
  int64_t s = 0;
  if (mode == PaddingMode::kEdge) {
    s = std::clamp<int64_t>(i, 0, kept - 1);
  } else if (mode == PaddingMode::kWrap) {
    s = positive_mod(i, kept);
  } else {  // reflect: mirror without repeating the edge element, bouncing as often as needed
    const int64_t period = 2 * (kept - 1);
    s = period == 0 ? 0 : positive_mod(i, period);
    if (s >= kept) s = period - s;
  }
  return s + crop_b;
}

void padding_execute(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs.at(0);
  const TensorView& y = ctx.outputs.at(0);
  const int rank = x.dims.rank();
  const auto pads = read_ints(ctx.inputs.at(1), "Padding pads");
  if (static_cast<int>(pads.size()) != 2 * rank) throw Error("Padding: pads must have 2 * rank values");
  const PaddingMode mode = params_of<PaddingParams>(*ctx.layer).mode;
  const void* fill = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].data : nullptr;
  if (fill && ctx.inputs[2].type != x.type) throw Error("Padding: the value's type differs from the input's");
  const auto stride = row_major_strides(x.dims);
  Maps maps(static_cast<size_t>(rank));
  for (int k = 0; k < rank; ++k) {
    const auto u = static_cast<size_t>(k);
    for (int64_t o = 0; o < y.dims[k]; ++o) {
      const int64_t s = pad_source(mode, o, x.dims[k], pads[u], pads[u + static_cast<size_t>(rank)]);
      maps[u].push_back(s < 0 ? -1 : s * stride[u]);
    }
  }
  cpu::table_copy(x, y, maps, fill, ctx.num_threads, "Padding");
}

void tile_execute(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs.at(0);
  const TensorView& y = ctx.outputs.at(0);
  const auto stride = row_major_strides(x.dims);
  Maps maps(static_cast<size_t>(x.dims.rank()));
  for (int k = 0; k < x.dims.rank(); ++k) {
    for (int64_t o = 0; o < y.dims[k]; ++o)
      maps[static_cast<size_t>(k)].push_back((o % x.dims[k]) * stride[static_cast<size_t>(k)]);
  }
  cpu::table_copy(x, y, maps, nullptr, ctx.num_threads, "Tile");
}

void expand_execute(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs.at(0);
  const TensorView& y = ctx.outputs.at(0);
  // Trailing alignment; an input extent of 1 repeats, a missing leading axis contributes 0.
  const auto stride = cpu::broadcast_strides(x.dims, y.dims);
  Maps maps(static_cast<size_t>(y.dims.rank()));
  for (int k = 0; k < y.dims.rank(); ++k) {
    for (int64_t o = 0; o < y.dims[k]; ++o) maps[static_cast<size_t>(k)].push_back(o * stride[static_cast<size_t>(k)]);
  }
  cpu::table_copy(x, y, maps, nullptr, ctx.num_threads, "Expand");
}

// ---- Gather ------------------------------------------------------------------------------------

// Wraps a negative index; throws naming the index and the bound when out of range.
int64_t checked_index(int64_t idx, int64_t extent, int64_t axis) {
  if (idx < -extent || idx >= extent) {
    throw Error("Gather: index " + std::to_string(idx) + " is out of range for axis " + std::to_string(axis) +
                " of extent " + std::to_string(extent) + " (valid: " + std::to_string(-extent) + " to " +
                std::to_string(extent - 1) + ")");
  }
  return idx < 0 ? idx + extent : idx;
}

void gather_default(const GatherParams& p, const KernelContext& ctx, const std::vector<int64_t>& idx) {
  const TensorView& data = ctx.inputs.at(0);
  const TensorView& y = ctx.outputs.at(0);
  const int64_t axis = gather_axis(p, data.dims.rank());
  int64_t outer = 1, inner = 1;
  split_around(data.dims, axis, outer, inner);
  const int64_t extent = data.dims[static_cast<int>(axis)];
  const size_t n = idx.size();
  dispatch_width(data.type, "Gather", [&](auto tag) {
    using E = typename decltype(tag)::type;
    for (size_t i = 0; i < n; ++i) {
      const int64_t a = checked_index(idx[i], extent, axis);
      for (int64_t o = 0; o < outer; ++o) {
        const E* src = data.as<const E>() + (o * extent + a) * inner;
        E* dst = y.as<E>() + (o * static_cast<int64_t>(n) + static_cast<int64_t>(i)) * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j];
      }
    }
  });
}

void gather_elements(const GatherParams& p, const KernelContext& ctx, const std::vector<int64_t>& idx) {
  const TensorView& data = ctx.inputs.at(0);
  const TensorView& y = ctx.outputs.at(0);
  const int64_t axis = gather_axis(p, data.dims.rank());
  const int64_t extent = data.dims[static_cast<int>(axis)];
  const auto stride = row_major_strides(data.dims);
  dispatch_width(data.type, "Gather", [&](auto tag) {
    using E = typename decltype(tag)::type;
    Coords c{};
    for (int64_t o = 0; o < y.count(); ++o) {
      unravel(o, y.dims, c);
      c[static_cast<size_t>(axis)] = checked_index(idx[static_cast<size_t>(o)], extent, axis);
      int64_t off = 0;
      for (int k = 0; k < data.dims.rank(); ++k) off += c[static_cast<size_t>(k)] * stride[static_cast<size_t>(k)];
      y.as<E>()[o] = data.as<const E>()[off];
    }
  });
}

void gather_nd(const GatherParams& p, const KernelContext& ctx, const std::vector<int64_t>& idx) {
  const TensorView& data = ctx.inputs.at(0);
  const TensorView& indices = ctx.inputs.at(1);
  const TensorView& y = ctx.outputs.at(0);
  const int b = static_cast<int>(p.batch_dims);
  const int q = indices.dims.rank();
  const int k = static_cast<int>(indices.dims[q - 1]);
  int64_t batches = 1, tuples = 1, slice = 1;
  for (int i = 0; i < b; ++i) batches *= data.dims[i];
  for (int i = b; i < q - 1; ++i) tuples *= indices.dims[i];
  for (int i = b + k; i < data.dims.rank(); ++i) slice *= data.dims[i];
  const auto stride = row_major_strides(data.dims);
  const int64_t batch_stride = b > 0 ? stride[static_cast<size_t>(b - 1)] : data.count();
  dispatch_width(data.type, "Gather", [&](auto tag) {
    using E = typename decltype(tag)::type;
    E* dst = y.as<E>();
    for (int64_t bi = 0; bi < batches; ++bi) {
      for (int64_t t = 0; t < tuples; ++t) {
        const int64_t* tuple = idx.data() + (bi * tuples + t) * k;
        int64_t off = bi * batch_stride;
        for (int j = 0; j < k; ++j) {
          off += checked_index(tuple[j], data.dims[b + j], b + j) * stride[static_cast<size_t>(b + j)];
        }
        for (int64_t s = 0; s < slice; ++s) *dst++ = data.as<const E>()[off + s];
      }
    }
  });
}

class GatherRef : public Kernel {
 public:
  explicit GatherRef(const GatherParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    const auto idx = read_ints(ctx.inputs.at(1), "Gather indices");
    switch (params_.mode) {
      case GatherMode::kDefault:
        return gather_default(params_, ctx, idx);
      case GatherMode::kElements:
        return gather_elements(params_, ctx, idx);
      case GatherMode::kNd:
        return gather_nd(params_, ctx, idx);
    }
  }

 private:
  GatherParams params_;
};

// ---- Shape / Fill ------------------------------------------------------------------------------

void shape_execute(const KernelContext& ctx) {
  const Dims& d = ctx.inputs.at(0).dims;
  const TensorView& y = ctx.outputs.at(0);
  const int64_t rank = d.rank();
  const ShapeParams& p = params_of<ShapeParams>(*ctx.layer);
  int64_t start = p.start, end = p.end;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  if (y.type != DataType::kInt64 || y.count() != std::max<int64_t>(end - start, 0)) {
    throw Error("Shape: the output must be int64 [" + std::to_string(std::max<int64_t>(end - start, 0)) + "]");
  }
  for (int64_t i = start; i < end; ++i) y.as<int64_t>()[i - start] = d[static_cast<int>(i)];
}

void fill_constant(const KernelContext& ctx) {
  const TensorView& y = ctx.outputs.at(0);
  const HostTensor& value = params_of<FillParams>(*ctx.layer).value;
  if (value.type() != y.type || value.count() != 1) throw Error("Fill: 'value' must be one element of the output type");
  dispatch_width(y.type, "Fill", [&](auto tag) {
    using E = typename decltype(tag)::type;
    E v;
    std::memcpy(&v, value.data(), sizeof(E));
    std::fill(y.as<E>(), y.as<E>() + y.count(), v);
  });
}

template <typename T>
void fill_range_typed(const KernelContext& ctx) {
  const T start = *ctx.inputs.at(0).as<const T>(), delta = *ctx.inputs.at(2).as<const T>();
  const TensorView& y = ctx.outputs.at(0);
  // start + i * delta rather than a running sum, so that float outputs do not drift.
  for (int64_t i = 0; i < y.count(); ++i) y.as<T>()[i] = static_cast<T>(start + static_cast<T>(i) * delta);
}

void fill_range(const KernelContext& ctx) {
  using Fn = void (*)(const KernelContext&);
  static const std::vector<std::pair<DataType, Fn>> kTypes = {{DataType::kFloat32, fill_range_typed<float>},
                                                              {DataType::kFloat64, fill_range_typed<double>},
                                                              {DataType::kInt32, fill_range_typed<int32_t>},
                                                              {DataType::kInt64, fill_range_typed<int64_t>}};
  for (const auto& [type, fn] : kTypes) {
    if (type == ctx.outputs.at(0).type && ctx.inputs.at(0).type == type && ctx.inputs.at(2).type == type) {
      return fn(ctx);
    }
  }
  throw Error("Fill range: supports float32, float64, int32 and int64 (start, delta and output of one type), got " +
              std::string(to_string(ctx.outputs.at(0).type)));
}

void fill_execute(const KernelContext& ctx) {
  if (params_of<FillParams>(*ctx.layer).mode == FillMode::kRange) return fill_range(ctx);
  fill_constant(ctx);
}

bool supports_fill(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (params_of<FillParams>(layer).mode != FillMode::kRange) return true;
  const DataType t = inputs.empty() ? DataType::kBool : inputs[0].type;
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kInt32 || t == DataType::kInt64;
}

// ---- "fast" tactics: Concatenation as row memcpys, Shuffle as at most two blocked transposes ---

// A transpose reduced to its essentials: extent-1 axes dropped and input axes that stay adjacent
// and in order in the output merged. Rank <= 1 afterwards means the data does not move.
struct TransposePlan {
  std::vector<int64_t> dims;  // input extents, input order
  std::vector<int64_t> perm;  // output axis j reads input axis perm[j]
};

TransposePlan plan_transpose(const std::vector<int64_t>& in, const std::vector<int64_t>& perm) {
  const int rank = static_cast<int>(in.size());
  std::vector<int64_t> compact(static_cast<size_t>(rank), -1), ext;
  for (int a = 0; a < rank; ++a) {
    if (in[static_cast<size_t>(a)] != 1) {
      compact[static_cast<size_t>(a)] = static_cast<int64_t>(ext.size());
      ext.push_back(in[static_cast<size_t>(a)]);
    }
  }
  std::vector<int64_t> q;  // kept input axes in output order
  for (int64_t p : perm) {
    if (in[static_cast<size_t>(p)] != 1) q.push_back(compact[static_cast<size_t>(p)]);
  }
  std::vector<std::pair<int64_t, int64_t>> groups;  // (first input axis, extent) in output order
  for (size_t j = 0; j < q.size(); ++j) {
    if (j > 0 && q[j] == q[j - 1] + 1) {
      groups.back().second *= ext[static_cast<size_t>(q[j])];
    } else {
      groups.emplace_back(q[j], ext[static_cast<size_t>(q[j])]);
    }
  }
  std::vector<int64_t> starts;
  for (const auto& g : groups) starts.push_back(g.first);
  std::sort(starts.begin(), starts.end());
  TransposePlan plan;
  plan.dims.resize(groups.size());
  for (const auto& g : groups) {
    const auto pos = std::lower_bound(starts.begin(), starts.end(), g.first) - starts.begin();
    plan.dims[static_cast<size_t>(pos)] = g.second;
    plan.perm.push_back(pos);
  }
  return plan;
}

bool moves_data(const TransposePlan& p) { return p.dims.size() > 1; }

// Dims in memory order: channels-last moves axis 1 last (N, spatial..., C); `axis` follows.
Dims memory_order(const Dims& d, TensorFormat format, int64_t* axis) {
  if (format != TensorFormat::kChannelsLast || d.rank() < 3) return d;
  Dims m;
  m.push_back(d[0]);
  for (int i = 2; i < d.rank(); ++i) m.push_back(d[i]);
  m.push_back(d[1]);
  if (axis) *axis = *axis == 1 ? d.rank() - 1 : (*axis >= 2 ? *axis - 1 : *axis);
  return m;
}

// Where logical axis k of a rank-r channels-last tensor is stored: N first, C last, the spatial
// axes in between.
int64_t memory_axis(int64_t k, int r) { return k == 0 ? 0 : k == 1 ? r - 1 : k - 1; }

// One transpose doing what transpose(x, q) -> reshape(R) -> transpose(p2) does, where x is stored
// row-major with dims P; false when there is none. The dims after the first transpose and R are
// split into their common factors (the reshape keeps row-major order, so an axis of extent a
// that R splits into b x a/b is the same data viewed as [b, a/b]); over those factors the
// reshape is the identity and both transposes permute whole factor groups. Extent-1 axes are
// dropped first (they do not move data). Fails where the two factorizations do not nest
// (e.g. 6x4 -> 4x6).
bool compose_shuffle(const std::vector<int64_t>& P, const std::vector<int64_t>& q, const std::vector<int64_t>& R,
                     const std::vector<int64_t>& p2, TransposePlan* out) {
  for (int64_t e : P) {
    if (e == 0) return false;  // nothing moves; the two-step plans handle it
  }
  std::vector<int64_t> dext, dsrc;  // dims after the first transpose (no 1s) and their axis of P
  for (int64_t a : q) {
    if (P[static_cast<size_t>(a)] != 1) {
      dext.push_back(P[static_cast<size_t>(a)]);
      dsrc.push_back(a);
    }
  }
  std::vector<int64_t> rext, ridx(R.size(), -1);
  for (size_t k = 0; k < R.size(); ++k) {
    if (R[k] != 1) {
      ridx[k] = static_cast<int64_t>(rext.size());
      rext.push_back(R[k]);
    }
  }
  std::vector<int64_t> factors;
  std::vector<std::vector<size_t>> gd(dext.size()), gr(rext.size());
  size_t i = 0, k = 0;
  int64_t a = dext.empty() ? 1 : dext[0], b = rext.empty() ? 1 : rext[0];
  while (i < dext.size() && k < rext.size()) {
    const int64_t f = std::min(a, b);
    if (a % f != 0 || b % f != 0) return false;
    gd[i].push_back(factors.size());
    gr[k].push_back(factors.size());
    factors.push_back(f);
    a /= f;
    b /= f;
    if (a == 1 && ++i < dext.size()) a = dext[i];
    if (b == 1 && ++k < rext.size()) b = rext[k];
  }
  if (i != dext.size() || k != rext.size()) return false;
  // The input viewed as its factors in memory order, and each factor's position there.
  std::vector<int64_t> in_dims, in_pos(factors.size());
  for (size_t ax = 0; ax < P.size(); ++ax) {
    if (P[ax] == 1) continue;
    const size_t j = static_cast<size_t>(std::find(dsrc.begin(), dsrc.end(), static_cast<int64_t>(ax)) - dsrc.begin());
    for (size_t f : gd[j]) {
      in_pos[f] = static_cast<int64_t>(in_dims.size());
      in_dims.push_back(factors[f]);
    }
  }
  std::vector<int64_t> perm;
  for (int64_t o : p2) {
    const int64_t r = ridx[static_cast<size_t>(o)];
    if (r < 0) continue;
    for (size_t f : gr[static_cast<size_t>(r)]) perm.push_back(in_pos[f]);
  }
  *out = plan_transpose(in_dims, perm);
  return true;
}

#if defined(__x86_64__) && defined(__GNUC__)
KILN_ISA_AVX2_BEGIN

// Out[i][j] = In[j][i] for i, j in [0, 8) over 4-byte elements, In's rows `ls` elements apart and
// Out's `ld`: eight loads, the 8 x 8 transpose in registers (unpack, shuffle, lane swap; moves
// bits, so any 4-byte type), eight stores.
void transpose8x8_avx2(const uint32_t* in, int64_t ls, uint32_t* out, int64_t ld) {
  const auto* f = reinterpret_cast<const float*>(in);
  auto* o = reinterpret_cast<float*>(out);
  __m256 r0 = _mm256_loadu_ps(f), r1 = _mm256_loadu_ps(f + ls), r2 = _mm256_loadu_ps(f + 2 * ls);
  __m256 r3 = _mm256_loadu_ps(f + 3 * ls), r4 = _mm256_loadu_ps(f + 4 * ls), r5 = _mm256_loadu_ps(f + 5 * ls);
  __m256 r6 = _mm256_loadu_ps(f + 6 * ls), r7 = _mm256_loadu_ps(f + 7 * ls);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  r0 = _mm256_shuffle_ps(t0, t2, 0x44);
  r1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  r2 = _mm256_shuffle_ps(t1, t3, 0x44);
  r3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  r4 = _mm256_shuffle_ps(t4, t6, 0x44);
  r5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  r6 = _mm256_shuffle_ps(t5, t7, 0x44);
  r7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(o, _mm256_permute2f128_ps(r0, r4, 0x20));
  _mm256_storeu_ps(o + ld, _mm256_permute2f128_ps(r1, r5, 0x20));
  _mm256_storeu_ps(o + 2 * ld, _mm256_permute2f128_ps(r2, r6, 0x20));
  _mm256_storeu_ps(o + 3 * ld, _mm256_permute2f128_ps(r3, r7, 0x20));
  _mm256_storeu_ps(o + 4 * ld, _mm256_permute2f128_ps(r0, r4, 0x31));
  _mm256_storeu_ps(o + 5 * ld, _mm256_permute2f128_ps(r1, r5, 0x31));
  _mm256_storeu_ps(o + 6 * ld, _mm256_permute2f128_ps(r2, r6, 0x31));
  _mm256_storeu_ps(o + 7 * ld, _mm256_permute2f128_ps(r3, r7, 0x31));
}

KILN_ISA_END
#endif

// One tile of transpose_blocked: Out[i][j] = In[j][i] for i in [i0, i1), j in [j0, j1), where
// In[j][i] = s[j * isa + i] and Out[i][j] = d[i * osb + j]. 4-byte elements go 8 x 8 at a time
// through registers where the processor has AVX2 (attention's K^T in bert_tiny at batch 8, a
// [8, 16, 2, 64] -> [8, 2, 64, 16] shuffle: 7.7 us element by element, session 29's profile).
template <typename E>
void transpose_tile(const E* s, int64_t isa, E* d, int64_t osb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                    bool simd) {
  int64_t i_full = i0, j_full = j0;
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (sizeof(E) == 4) {
    if (simd) {
      i_full = i0 + (i1 - i0) / 8 * 8;
      j_full = j0 + (j1 - j0) / 8 * 8;
      for (int64_t i = i0; i < i_full; i += 8) {
        for (int64_t j = j0; j < j_full; j += 8) transpose8x8_avx2(s + j * isa + i, isa, d + i * osb + j, osb);
      }
    }
  }
#endif
  (void)simd;
  // What the 8 x 8 blocks left: the columns past j_full of the rows they covered, then the rows
  // past i_full.
  for (int64_t i = i0; i < i_full; ++i) {
    for (int64_t j = j_full; j < j1; ++j) d[i * osb + j] = s[j * isa + i];
  }
  for (int64_t i = i_full; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) d[i * osb + j] = s[j * isa + i];
  }
}

template <typename E>
void transpose_blocked(const TransposePlan& p, const E* src, E* dst, int num_threads) {
  const int r = static_cast<int>(p.dims.size());
  std::vector<int64_t> is(static_cast<size_t>(r)), od(static_cast<size_t>(r)), os(static_cast<size_t>(r));
  int64_t acc = 1, total = 1;
  for (int a = r - 1; a >= 0; --a) {
    is[static_cast<size_t>(a)] = acc;
    acc *= p.dims[static_cast<size_t>(a)];
  }
  total = acc;
  for (int j = 0; j < r; ++j) od[static_cast<size_t>(j)] = p.dims[static_cast<size_t>(p.perm[static_cast<size_t>(j)])];
  acc = 1;
  for (int j = r - 1; j >= 0; --j) {
    os[static_cast<size_t>(j)] = acc;
    acc *= od[static_cast<size_t>(j)];
  }
  // Output axis b reads the input's innermost axis; the output's innermost axis reads input axis a.
  const int b = static_cast<int>(std::find(p.perm.begin(), p.perm.end(), r - 1) - p.perm.begin());
  const int64_t a = p.perm[static_cast<size_t>(r - 1)];
  const int64_t ni = od[static_cast<size_t>(b)], nj = od[static_cast<size_t>(r - 1)];
  const int64_t isa = is[static_cast<size_t>(a)], osb = os[static_cast<size_t>(b)];
  constexpr int64_t kTile = 32;
  const int64_t ti = (ni + kTile - 1) / kTile, tj = (nj + kTile - 1) / kTile;
  const int64_t outer = total / (ni * nj);
  const bool simd = cpu::has_avx2_fma();  // transpose8x8_avx2 runs here
  cpu::parallel_for(
      outer * ti * tj, num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          int64_t o = w / (ti * tj);
          const int64_t it = (w / tj) % ti, jt = w % tj;
          int64_t ib = 0, ob = 0;  // offsets of the outer coordinates (output axes other than b, r-1)
          for (int j = r - 2; j >= 0; --j) {
            if (j == b) continue;
            const int64_t c = o % od[static_cast<size_t>(j)];
            o /= od[static_cast<size_t>(j)];
            ob += c * os[static_cast<size_t>(j)];
            ib += c * is[static_cast<size_t>(p.perm[static_cast<size_t>(j)])];
          }
          const int64_t i_end = std::min(ni, (it + 1) * kTile), j_end = std::min(nj, (jt + 1) * kTile);
          transpose_tile<E>(src + ib, isa, dst + ob, osb, it * kTile, i_end, jt * kTile, j_end, simd);
        }
      },
      4);
}

// Moves whole runs when the innermost axis stays innermost, else tiles.
void transpose_fast(const TransposePlan& p, DataType type, const void* src, void* dst, int num_threads) {
  const size_t esz = data_type_size(type);
  int64_t total = 1;
  for (int64_t d : p.dims) total *= d;
  if (total == 0) return;
  if (!moves_data(p)) {
    if (src != dst) {
      cpu::parallel_for(
          total, num_threads,
          [&](int64_t b, int64_t e) {
            std::memcpy(static_cast<char*>(dst) + b * esz, static_cast<const char*>(src) + b * esz, (e - b) * esz);
          },
          1 << 16);
    }
    return;
  }
  const int r = static_cast<int>(p.dims.size());
  if (p.perm.back() == r - 1) {
    const int64_t run = p.dims.back(), runs = total / run;
    std::vector<int64_t> is(static_cast<size_t>(r));
    int64_t acc = 1;
    for (int a = r - 1; a >= 0; --a) {
      is[static_cast<size_t>(a)] = acc;
      acc *= p.dims[static_cast<size_t>(a)];
    }
    // Output axis j (< r - 1) has extent ext[j] and steps the input by step[j] elements.
    std::vector<int64_t> ext(static_cast<size_t>(r - 1)), step(static_cast<size_t>(r - 1));
    for (int j = 0; j + 1 < r; ++j) {
      ext[static_cast<size_t>(j)] = p.dims[static_cast<size_t>(p.perm[static_cast<size_t>(j)])];
      step[static_cast<size_t>(j)] = is[static_cast<size_t>(p.perm[static_cast<size_t>(j)])];
    }
    const size_t run_bytes = static_cast<size_t>(run) * esz;
    cpu::parallel_for(
        runs, num_threads,
        [&](int64_t begin, int64_t end) {
          // The first run's coordinates from its index, then counted up run by run: the
          // divisions per run cost more than copying a 256-byte run (bert_tiny's attention
          // shuffles, 64 floats a run).
          std::vector<int64_t> c(static_cast<size_t>(r - 1));
          int64_t o = begin, off = 0;
          for (int j = r - 2; j >= 0; --j) {
            c[static_cast<size_t>(j)] = o % ext[static_cast<size_t>(j)];
            o /= ext[static_cast<size_t>(j)];
            off += c[static_cast<size_t>(j)] * step[static_cast<size_t>(j)];
          }
          for (int64_t w = begin; w < end; ++w) {
            cpu::copy_run(static_cast<char*>(dst) + w * run * esz, static_cast<const char*>(src) + off * esz,
                          run_bytes);
            for (int j = r - 2; j >= 0; --j) {
              off += step[static_cast<size_t>(j)];
              if (++c[static_cast<size_t>(j)] < ext[static_cast<size_t>(j)]) break;
              off -= ext[static_cast<size_t>(j)] * step[static_cast<size_t>(j)];
              c[static_cast<size_t>(j)] = 0;
            }
          }
        },
        std::max<int64_t>(1, 8192 / run));
    return;
  }
  dispatch_width(type, "Shuffle", [&](auto tag) {
    using E = typename decltype(tag)::type;
    transpose_blocked<E>(p, static_cast<const E*>(src), static_cast<E*>(dst), num_threads);
  });
}

// Shuffle in one transpose where the reshape lets the two compose (compose_shuffle), else at most
// two; the input may be channels-last (the layout pass then feeds it without a Reformat: the
// first transpose starts from the stored order), the output is linear.
class ShuffleFast : public Kernel {
 public:
  explicit ShuffleFast(const Layer& layer)
      : first_(params_of<ShuffleParams>(layer).first_transpose),
        second_(params_of<ShuffleParams>(layer).second_transpose) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    x_ = inputs.at(0).dims;
    format_ = inputs.at(0).format;
    y_ = outputs.at(0).dims;
    prepared_ = plans(x_, format_, y_);
    workspace_ = prepared_.two_steps ? static_cast<size_t>(y_.volume()) * data_type_size(outputs[0].type) : 0;
  }
  size_t workspace_size() const override { return workspace_; }

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    if (y.count() == 0) return;
    // The plans prepare() made, unless called with other dims (then planned here).
    const bool as_prepared = x.dims == x_ && x.format == format_ && y.dims == y_;
    Plans replanned;
    if (!as_prepared) replanned = plans(x.dims, x.format, y.dims);
    const Plans& p = as_prepared ? prepared_ : replanned;
    if (!p.two_steps) return transpose_fast(p.first, x.type, x.data, y.data, ctx.num_threads);
    if (ctx.workspace_size < static_cast<size_t>(y.count()) * data_type_size(y.type) || !ctx.workspace) {
      throw Error("Shuffle fast: needs a workspace of the output's size (prepare() was not called?)");
    }
    transpose_fast(p.first, x.type, x.data, ctx.workspace, ctx.num_threads);
    transpose_fast(p.second, x.type, ctx.workspace, y.data, ctx.num_threads);
  }

 private:
  struct Plans {
    TransposePlan first, second;  // second: only with two_steps
    bool two_steps = false;
  };

  Plans plans(const Dims& x, TensorFormat format, const Dims& y) const {
    const int r = x.rank();
    auto q = identity_if_empty(first_, r);
    const auto p2 = identity_if_empty(second_, y.rank());
    std::vector<int64_t> stored(x.begin(), x.end());
    if (format == TensorFormat::kChannelsLast && r >= 3) {
      const Dims m = memory_order(x, format, nullptr);
      stored.assign(m.begin(), m.end());
      for (int64_t& a : q) a = memory_axis(a, r);
    }
    std::vector<int64_t> reshaped(y.begin(), y.end());
    for (int k = 0; k < y.rank(); ++k) reshaped[static_cast<size_t>(p2[static_cast<size_t>(k)])] = y[k];
    Plans p;
    if (compose_shuffle(stored, q, reshaped, p2, &p.first)) return p;
    p.first = plan_transpose(stored, q);
    p.second = plan_transpose(reshaped, p2);
    if (!moves_data(p.second)) return p;
    if (!moves_data(p.first)) {
      p.first = p.second;
      return p;
    }
    p.two_steps = true;
    return p;
  }

  std::vector<int64_t> first_, second_;
  Dims x_, y_;
  TensorFormat format_ = TensorFormat::kLinear;
  Plans prepared_;
  size_t workspace_ = 0;
};

// Every input and the output in one format (channels-last needs rank >= 3).
bool concat_fast_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  const TensorFormat f = layer.num_outputs() > 0 && layer.output(0) ? layer.output(0)->format() : TensorFormat::kLinear;
  for (const auto& d : inputs) {
    if (!d.present || d.format != f) return false;
    if (f == TensorFormat::kChannelsLast && d.dims.rank() < 3) return false;
  }
  return true;
}

void concat_fast(const KernelContext& ctx) {
  const TensorView& y = ctx.outputs.at(0);
  for (const TensorView& x : ctx.inputs) {
    if (x.format != y.format) throw Error("Concatenation fast: inputs and output must share one format");
  }
  int64_t axis = norm_axis(params_of<ConcatenationParams>(*ctx.layer).axis, y.dims.rank());
  const Dims y_mem = memory_order(y.dims, y.format, &axis);
  int64_t outer = 1, inner = 1;
  split_around(y_mem, axis, outer, inner);
  const size_t esz = data_type_size(y.type);
  const int64_t k_inputs = static_cast<int64_t>(ctx.inputs.size());
  std::vector<int64_t> row(ctx.inputs.size()), offset(ctx.inputs.size());
  int64_t acc = 0;
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    row[k] =
        memory_order(ctx.inputs[k].dims, y.format, nullptr)[static_cast<int>(axis)] * inner * static_cast<int64_t>(esz);
    offset[k] = acc;
    acc += row[k];
  }
  const int64_t out_row = acc;
  // Work item w: input w % k_inputs's run of output row w / k_inputs (the dims before the axis in
  // memory order); one division per chunk, not per item.
  cpu::parallel_for(
      outer * k_inputs, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        int64_t o = begin / k_inputs;
        auto k = static_cast<size_t>(begin % k_inputs);
        for (int64_t w = begin; w < end; ++w) {
          cpu::copy_run(static_cast<char*>(y.data) + o * out_row + offset[k],
                        static_cast<const char*>(ctx.inputs[k].data) + o * row[k], static_cast<size_t>(row[k]));
          if (++k == ctx.inputs.size()) {
            k = 0;
            ++o;
          }
        }
      },
      std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(out_row / std::max<int64_t>(k_inputs, 1), 1)));
}

// The data input linear or channels-last (rank >= 3), the shape input and the output linear.
bool shuffle_fast_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (layer.num_outputs() > 0 && layer.output(0) && layer.output(0)->format() != TensorFormat::kLinear) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& d = inputs[i];
    if (!d.present || d.format == TensorFormat::kLinear) continue;
    if (i != 0 || d.format != TensorFormat::kChannelsLast || d.dims.rank() < 3) return false;
  }
  return true;
}

KernelEntry reference(const char* type, FunctionKernel::Fn fn, KernelSupportsFn supports = all_linear) {
  return KernelEntry{DeviceType::kCPU, type, "reference", 0, std::move(supports), function_kernel(std::move(fn))};
}

}  // namespace

KILN_REGISTER_KERNEL(reference(kLayerConstant, constant_execute));
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerShuffle, "reference", 0, all_linear,
                                 [](const Layer& layer) { return std::make_unique<ShuffleRef>(layer); }});
KILN_REGISTER_KERNEL(reference(kLayerConcatenation, [](const KernelContext& ctx) { concat_or_split(ctx, false); }));
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerConcatenation, "fast", 10, concat_fast_supports,
                                 function_kernel(concat_fast)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerShuffle, "fast", 10, shuffle_fast_supports,
                                 [](const Layer& layer) { return std::make_unique<ShuffleFast>(layer); }});
KILN_REGISTER_KERNEL(reference(kLayerSplit, [](const KernelContext& ctx) { concat_or_split(ctx, true); }));
KILN_REGISTER_KERNEL(reference(kLayerSlice, slice_execute));
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerGather, "reference", 0, all_linear, [](const Layer& layer) {
                                   return std::make_unique<GatherRef>(params_of<GatherParams>(layer));
                                 }});
KILN_REGISTER_KERNEL(reference(kLayerPadding, padding_execute));
KILN_REGISTER_KERNEL(reference(kLayerShape, shape_execute, nullptr));
KILN_REGISTER_KERNEL(reference(kLayerFill, fill_execute, supports_fill));
KILN_REGISTER_KERNEL(reference(kLayerExpand, expand_execute));
KILN_REGISTER_KERNEL(reference(kLayerTile, tile_execute));

}  // namespace kiln
