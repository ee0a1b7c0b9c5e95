// Building blocks of the CPU data-movement kernels (data_cpu.cpp, resize_cpu.cpp): dispatch on
// the element *width* (moving data never looks at values, so one instantiation per width
// serves all eight data types), reading int32/int64 index tensors, and the per-axis
// index-table copy that Slice, Padding, Tile, Expand and nearest Resize reduce to:
//   out[c0, .., cr-1] = in[map0[c0] + .. + mapr-1[cr-1]]  (maps hold element offsets),
// or a fill value where any map entry is -1. Layout: kLinear, contiguous.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/types.h"
#include "src/backends/cpu/copy_run.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"

namespace kiln::cpu {

// Calls fn(std::type_identity<E>{}) with E an unsigned integer as wide as one element.
template <typename Fn>
void dispatch_width(DataType type, const char* what, Fn&& fn) {
  switch (data_type_size(type)) {
    case 1:
      fn(std::type_identity<uint8_t>{});
      break;
    case 2:
      fn(std::type_identity<uint16_t>{});
      break;
    case 4:
      fn(std::type_identity<uint32_t>{});
      break;
    case 8:
      fn(std::type_identity<uint64_t>{});
      break;
    default:
      throw Error(std::string(what) + ": unsupported element size for " + to_string(type));
  }
}

// Values of a host-visible int32/int64 tensor (shape inputs, indices) widened to int64.
inline std::vector<int64_t> read_ints(const TensorView& v, const char* what) {
  const int64_t n = v.count();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (v.type == DataType::kInt64) {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = v.as<const int64_t>()[i];
  } else if (v.type == DataType::kInt32) {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = v.as<const int32_t>()[i];
  } else {
    throw Error(std::string(what) + ": expected an int32 or int64 tensor, got " + to_string(v.type));
  }
  return out;
}

// The outer axes (all but the last) of a table copy, merged where that keeps the offsets: a
// detection head's Slice of [1, 3, 40, 40, 85] -> [1, 3, 40, 40, 81] has one outer axis of 4,800
// rows, so each row costs one table read instead of four (its per-row index walk took about a
// third of the slice's time, 0.11 ms against ONNX Runtime's 0.06 on one thread).
struct OuterAxes {
  std::vector<int64_t> extent;             // outermost first
  std::vector<std::vector<int64_t>> maps;  // offsets per entry, -1: fill
};

// Whether `m` is start + j * step with no fill entry (a single entry is, with step 0).
inline bool affine_map(const std::vector<int64_t>& m, int64_t* start, int64_t* step) {
  *start = m[0];
  *step = m.size() > 1 ? m[1] - m[0] : 0;
  if (m[0] < 0) return false;
  for (size_t j = 1; j < m.size(); ++j) {
    if (m[j] < 0 || m[j] != m[0] + static_cast<int64_t>(j) * *step) return false;
  }
  return true;
}

// Axes k, k + 1 merge where axis k (of extent > 0) holds a single offset (then it is added to
// axis k + 1's entries), axis k + 1 holds one (added to axis k's), or both step evenly, axis k's
// step being axis k + 1's extent times its step.
inline OuterAxes merge_outer_axes(const Dims& out, const std::vector<std::vector<int64_t>>& maps) {
  OuterAxes a;
  const auto shifted = [](std::vector<int64_t> m, int64_t by) {
    for (int64_t& v : m) v = v < 0 ? v : v + by;
    return m;
  };
  for (int k = 0; k + 1 < out.rank(); ++k) {
    const std::vector<int64_t>& m = maps[static_cast<size_t>(k)];
    if (!a.maps.empty()) {
      std::vector<int64_t>& prev = a.maps.back();
      if (prev.size() == 1 && prev[0] >= 0) {
        prev = shifted(m, prev[0]);
        a.extent.back() = out[k];
        continue;
      }
      if (m.size() == 1 && m[0] >= 0) {
        prev = shifted(prev, m[0]);
        continue;
      }
      int64_t s0 = 0, d0 = 0, s1 = 0, d1 = 0;
      if (affine_map(prev, &s0, &d0) && affine_map(m, &s1, &d1) && d0 == out[k] * d1) {
        const int64_t n = a.extent.back() * out[k];
        prev.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) prev[static_cast<size_t>(j)] = s0 + s1 + j * d1;
        a.extent.back() = n;
        continue;
      }
    }
    a.extent.push_back(out[k]);
    a.maps.push_back(m);
  }
  return a;
}

// The table copy described above; rows (runs along the last axis) are spread over threads.
template <typename E>
void table_copy(E* dst, const E* src, const Dims& out, const std::vector<std::vector<int64_t>>& maps, E fill,
                int num_threads) {
  const int r = out.rank();
  const int64_t total = out.volume();
  if (total == 0) return;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t n = out[r - 1];
  const int64_t rows = total / n;
  const std::vector<int64_t>& inner = maps[static_cast<size_t>(r - 1)];
  const OuterAxes outer = merge_outer_axes(out, maps);
  const int ro = static_cast<int>(outer.extent.size());
  // A contiguous run of the source along the last axis (a slice with step 1, most paddings' middle
  // rows): copied with memcpy instead of element by element.
  bool contiguous = inner[0] >= 0;
  for (int64_t j = 1; j < n && contiguous; ++j) contiguous = inner[static_cast<size_t>(j)] == inner[0] + j;
  parallel_for(
      rows, num_threads,
      [&](int64_t begin, int64_t end) {
        std::vector<int64_t> c(static_cast<size_t>(ro), 0);
        int64_t rest = begin;
        for (int k = ro - 1; k >= 0; --k) {
          c[static_cast<size_t>(k)] = rest % outer.extent[static_cast<size_t>(k)];
          rest /= outer.extent[static_cast<size_t>(k)];
        }
        for (int64_t row = begin; row < end; ++row) {
          int64_t base = 0;
          bool outside = false;
          for (int k = 0; k < ro; ++k) {
            const int64_t m = outer.maps[static_cast<size_t>(k)][static_cast<size_t>(c[static_cast<size_t>(k)])];
            outside = outside || m < 0;
            base += m;
          }
          E* d = dst + row * n;
          if (outside) {
            for (int64_t j = 0; j < n; ++j) d[j] = fill;
          } else if (contiguous) {
            copy_run(d, src + base + inner[0], static_cast<size_t>(n) * sizeof(E));
          } else {
            for (int64_t j = 0; j < n; ++j) {
              const int64_t m = inner[static_cast<size_t>(j)];
              d[j] = m < 0 ? fill : src[base + m];
            }
          }
          for (int k = ro - 1; k >= 0; --k) {
            if (++c[static_cast<size_t>(k)] < outer.extent[static_cast<size_t>(k)]) break;
            c[static_cast<size_t>(k)] = 0;
          }
        }
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)));
}

// Type-erased front end: maps per output axis, fill given as the bytes of one element (null:
// zero).
inline void table_copy(const TensorView& in, const TensorView& out, const std::vector<std::vector<int64_t>>& maps,
                       const void* fill_bytes, int num_threads, const char* what) {
  dispatch_width(out.type, what, [&](auto tag) {
    using E = typename decltype(tag)::type;
    E fill{};
    if (fill_bytes) std::memcpy(&fill, fill_bytes, sizeof(E));
    table_copy<E>(out.as<E>(), in.as<const E>(), out.dims, maps, fill, num_threads);
  });
}

}  // namespace kiln::cpu
