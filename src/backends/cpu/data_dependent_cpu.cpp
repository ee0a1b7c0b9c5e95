// CPU reference kernels of the layers with data-dependent output sizes (src/ir/ops_data_dependent.cpp):
// NonZero, NonMaxSuppression and Unique. Outputs arrive sized by their upper bound; each kernel
// writes the actual tensor compactly at the start of the buffer and its extent into the int64
// size output.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/backends/params_kernel.h"
#include "src/ir/data_dependent_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

template <typename T>
bool is_non_zero(T v) {
  if constexpr (std::is_same_v<T, half>) {
    return static_cast<float>(v) != 0.0f;
  } else {
    return v != T(0);
  }
}

// Row-major order; the coordinate of axis a of the i-th non-zero element lands at [a, i] of a
// [rank, count] tensor, so the count must be known before writing: one pass counts, one writes.
template <typename T>
void non_zero(const TensorView& x, const TensorView& out, const TensorView& size) {
  const T* v = x.as<T>();
  const int64_t n = x.count();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += is_non_zero(v[i]) ? 1 : 0;
  const int rank = x.dims.rank();
  int64_t* coords = out.as<int64_t>();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (is_non_zero(v[i])) {
      for (int a = 0; a < rank; ++a) coords[a * count + k] = index[static_cast<size_t>(a)];
      ++k;
    }
    for (int a = rank - 1; a >= 0; --a) {  // advance the multi-index
      if (++index[static_cast<size_t>(a)] < x.dims[a]) break;
      index[static_cast<size_t>(a)] = 0;
    }
  }
  size.as<int64_t>()[0] = count;
}

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerNonZero, "reference", 0, nullptr, function_kernel([](const KernelContext& ctx) {
      KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "NonZero", non_zero<T>(ctx.inputs[0], ctx.outputs[0], ctx.outputs[1]));
    })});

// ---- NonMaxSuppression ---------------------------------------------------------------------------
// ONNX Runtime's algorithm and float arithmetic (non_max_suppression_helper.h), which the ONNX
// reference implementation repeats: per (batch, class) the candidates (score > score_threshold
// when that input is given) by descending score, ties by lower box index; a candidate is kept
// unless its IoU with a kept box exceeds iou_threshold; at most max_output_boxes_per_class kept.

// A box as the edges the IoU needs, computed once per box exactly as ONNX Runtime does per pair.
struct NmsBox {
  float x_min, x_max, y_min, y_max;
};

NmsBox nms_box(float b0, float b1, float b2, float b3, bool center) {
  if (center) {  // [x_center, y_center, width, height]
    const float w = b2 / 2, h = b3 / 2;
    return NmsBox{b0 - w, b0 + w, b1 - h, b1 + h};
  }
  // [y1, x1, y2, x2], any two opposite corners
  return NmsBox{std::min(b1, b3), std::max(b1, b3), std::min(b0, b2), std::max(b0, b2)};
}

// True when the IoU of the candidate a and the kept box b exceeds the threshold.
bool nms_suppresses(const NmsBox& a, const NmsBox& b, float iou_threshold) {
  const float ix_min = std::max(a.x_min, b.x_min), ix_max = std::min(a.x_max, b.x_max);
  if (ix_max <= ix_min) return false;
  const float iy_min = std::max(a.y_min, b.y_min), iy_max = std::min(a.y_max, b.y_max);
  if (iy_max <= iy_min) return false;
  const float inter = (ix_max - ix_min) * (iy_max - iy_min);
  if (inter <= 0.0f) return false;
  const float area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const float area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const float uni = area_a + area_b - inter;
  if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
  return inter / uni > iou_threshold;
}

float read_float(const TensorView& t) {
  if (t.type == DataType::kFloat16) return static_cast<float>(*t.as<const half>());
  if (t.type == DataType::kFloat32) return *t.as<const float>();
  throw Error(std::string("threshold must be float32 or float16, got ") + to_string(t.type));
}

int64_t read_int(const TensorView& t) {
  if (t.type == DataType::kInt32) return *t.as<const int32_t>();
  if (t.type == DataType::kInt64) return *t.as<const int64_t>();
  throw Error(std::string("max_output_boxes_per_class must be int64 or int32, got ") + to_string(t.type));
}

bool present(const KernelContext& ctx, size_t i) { return i < ctx.inputs.size() && ctx.inputs[i].data != nullptr; }

template <typename T>
void non_max_suppression(const NonMaxSuppressionParams& params, const KernelContext& ctx) {
  const Dims& bd = ctx.inputs[0].dims;
  const int64_t batches = bd[0], n = bd[1], classes = ctx.inputs[1].dims[1];
  const bool center = params.center_point_box;
  const int64_t max_per_class = present(ctx, 2) ? std::max<int64_t>(read_int(ctx.inputs[2]), 0) : 0;
  const float iou_threshold = present(ctx, 3) ? read_float(ctx.inputs[3]) : 0.0f;
  const bool filter = present(ctx, 4);
  const float score_threshold = filter ? read_float(ctx.inputs[4]) : 0.0f;
  const T* boxes = ctx.inputs[0].as<const T>();
  const T* scores = ctx.inputs[1].as<const T>();
  int64_t* out = ctx.outputs[0].as<int64_t>();
  int64_t count = 0;
  std::vector<NmsBox> edges(static_cast<size_t>(n));
  std::vector<std::pair<float, int64_t>> candidates;
  std::vector<int64_t> kept;
  for (int64_t b = 0; b < batches && max_per_class > 0; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      const T* p = boxes + (b * n + i) * 4;
      edges[static_cast<size_t>(i)] = nms_box(static_cast<float>(p[0]), static_cast<float>(p[1]),
                                              static_cast<float>(p[2]), static_cast<float>(p[3]), center);
    }
    for (int64_t c = 0; c < classes; ++c) {
      const T* s = scores + (b * classes + c) * n;
      candidates.clear();
      for (int64_t i = 0; i < n; ++i) {
        const auto v = static_cast<float>(s[i]);
        if (!filter || v > score_threshold) candidates.emplace_back(v, i);
      }
      // Descending score, ties (and NaNs, ranked below every number) by lower index.
      std::sort(candidates.begin(), candidates.end(), [](const auto& x, const auto& y) {
        const bool xn = std::isnan(x.first), yn = std::isnan(y.first);
        if (xn != yn) return yn;
        if (!xn && x.first != y.first) return x.first > y.first;
        return x.second < y.second;
      });
      kept.clear();
      for (const auto& [score, i] : candidates) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        bool keep = true;
        for (int64_t k : kept) {
          if (nms_suppresses(edges[static_cast<size_t>(i)], edges[static_cast<size_t>(k)], iou_threshold)) {
            keep = false;
            break;
          }
        }
        if (!keep) continue;
        kept.push_back(i);
        out[count * 3] = b;
        out[count * 3 + 1] = c;
        out[count * 3 + 2] = i;
        ++count;
      }
    }
  }
  ctx.outputs[1].as<int64_t>()[0] = count;
}

void non_max_suppression_execute(const NonMaxSuppressionParams& params, const KernelContext& ctx) {
  if (ctx.inputs[0].type == DataType::kFloat16) {
    non_max_suppression<half>(params, ctx);
  } else if (ctx.inputs[0].type == DataType::kFloat32) {
    non_max_suppression<float>(params, ctx);
  } else {
    throw Error(std::string("NonMaxSuppression: unsupported data type ") + to_string(ctx.inputs[0].type));
  }
}

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerNonMaxSuppression, "reference", 0, nullptr,
                                 params_kernel<NonMaxSuppressionParams, non_max_suppression_execute>()});

// ---- Unique -----------------------------------------------------------------------------------------
// x is viewed as [outer, n, inner] around the axis (flatten: [1, volume, 1]); "element" j is the
// slice x[:, j, :], compared lexicographically in row-major order (numpy.unique's order, NaN after
// every number and equal to NaN). A stable sort of the slice numbers groups equal slices with
// their first occurrence first; sorted = 0 then orders the groups by first occurrence.

template <typename T>
using UniqueCmp = std::conditional_t<std::is_same_v<T, half>, float, T>;

template <typename T>
bool unique_nan(T v) {
  if constexpr (std::is_floating_point_v<UniqueCmp<T>>) {
    return std::isnan(static_cast<UniqueCmp<T>>(v));
  } else {
    return false;
  }
}

// -1, 0, 1: a before, equal to, after b.
template <typename T>
int unique_order(T a, T b) {
  const bool an = unique_nan(a), bn = unique_nan(b);
  if (an || bn) return an == bn ? 0 : (an ? 1 : -1);
  const auto x = static_cast<UniqueCmp<T>>(a), y = static_cast<UniqueCmp<T>>(b);
  return x < y ? -1 : (y < x ? 1 : 0);
}

template <typename T>
void unique(const UniqueParams& params, const KernelContext& ctx) {
  const UniqueSlices slices = unique_slices(params, ctx.inputs[0].dims);
  const int64_t outer = slices.outer, n = slices.n, inner = slices.inner;
  const T* x = ctx.inputs[0].as<const T>();
  auto compare = [&](int64_t p, int64_t q) {  // slices p and q
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int c = unique_order(x[(o * n + p) * inner + i], x[(o * n + q) * inner + i]);
        if (c) return c;
      }
    }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return compare(p, q) < 0; });
  // Groups of equal slices in sorted order: their first occurrence, size, and each slice's group.
  std::vector<int64_t> first, counts, group(static_cast<size_t>(n));
  for (size_t r = 0; r < order.size(); ++r) {
    if (r == 0 || compare(order[r - 1], order[r]) != 0) {
      first.push_back(order[r]);
      counts.push_back(0);
    }
    ++counts.back();
    group[static_cast<size_t>(order[r])] = static_cast<int64_t>(first.size()) - 1;
  }
  const auto u = static_cast<int64_t>(first.size());
  std::vector<int64_t> rank(static_cast<size_t>(u));  // output position of each group
  std::iota(rank.begin(), rank.end(), int64_t{0});
  if (!params.sorted) {
    std::vector<int64_t> by_first(static_cast<size_t>(u));
    std::iota(by_first.begin(), by_first.end(), int64_t{0});
    std::sort(by_first.begin(), by_first.end(),
              [&](int64_t g, int64_t h) { return first[static_cast<size_t>(g)] < first[static_cast<size_t>(h)]; });
    for (int64_t pos = 0; pos < u; ++pos) rank[static_cast<size_t>(by_first[static_cast<size_t>(pos)])] = pos;
  }
  T* y = ctx.outputs[0].as<T>();
  int64_t* indices = ctx.outputs[1].as<int64_t>();
  int64_t* inverse = ctx.outputs[2].as<int64_t>();
  int64_t* count_out = ctx.outputs[3].as<int64_t>();
  for (int64_t g = 0; g < u; ++g) {
    const int64_t pos = rank[static_cast<size_t>(g)];
    const int64_t j = first[static_cast<size_t>(g)];
    indices[pos] = j;
    count_out[pos] = counts[static_cast<size_t>(g)];
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(y + (o * u + pos) * inner, x + (o * n + j) * inner, static_cast<size_t>(inner) * sizeof(T));
    }
  }
  for (int64_t j = 0; j < n; ++j) inverse[j] = rank[static_cast<size_t>(group[static_cast<size_t>(j)])];
  ctx.outputs[4].as<int64_t>()[0] = u;
}

void unique_execute(const UniqueParams& params, const KernelContext& ctx) {
  KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "Unique", unique<T>(params, ctx));
}

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerUnique, "reference", 0, nullptr,
                                 params_kernel<UniqueParams, unique_execute>()});

}  // namespace
}  // namespace kiln
