// cpu::table_copy (src/backends/cpu/data_copy.h), the per-axis index-table copy of Slice, Padding,
// Tile, Expand and nearest Resize, and the merging of its outer axes (cpu::merge_outer_axes): which
// axes merge (full axes stepping evenly, single-entry axes, broadcast axes) and which do not (fill
// entries, steps that do not line up), and, over random slices, paddings and broadcasts of rank-1
// to rank-5 tensors on 1-3 threads, the copy against an element-by-element walk of the maps.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kiln/types.h"
#include "src/backends/cpu/data_copy.h"

namespace kiln {
namespace {

using Maps = std::vector<std::vector<int64_t>>;

// out[c] = in[sum of maps[k][c[k]]], or fill where any entry is -1: the definition, one element at a time.
std::vector<int32_t> walk(const std::vector<int32_t>& in, const Dims& out, const Maps& maps, int32_t fill) {
  std::vector<int32_t> y(static_cast<size_t>(out.volume()));
  std::vector<int64_t> c(static_cast<size_t>(out.rank()), 0);
  for (auto& v : y) {
    int64_t off = 0;
    bool outside = false;
    for (int k = 0; k < out.rank(); ++k) {
      const int64_t m = maps[static_cast<size_t>(k)][static_cast<size_t>(c[static_cast<size_t>(k)])];
      outside = outside || m < 0;
      off += m;
    }
    v = outside ? fill : in[static_cast<size_t>(off)];
    for (int k = out.rank() - 1; k >= 0; --k) {
      if (++c[static_cast<size_t>(k)] < out[k]) break;
      c[static_cast<size_t>(k)] = 0;
    }
  }
  return y;
}

// Offsets along each axis of a row-major tensor of dims `in`, for a slice starting at `start`
// with `step` per axis, and -1 (fill) for the entries a padding adds before (`pad`) the data.
Maps slice_maps(const Dims& in, const Dims& out, const std::vector<int64_t>& start, const std::vector<int64_t>& step,
                const std::vector<int64_t>& pad) {
  Maps maps(static_cast<size_t>(out.rank()));
  int64_t stride = 1;
  for (int k = out.rank() - 1; k >= 0; --k) {
    const auto u = static_cast<size_t>(k);
    for (int64_t j = 0; j < out[k]; ++j) {
      const int64_t src = start[u] + (j - pad[u]) * step[u];
      maps[u].push_back(j < pad[u] || src < 0 || src >= in[k] ? -1 : src * stride);
    }
    stride *= in[k];
  }
  return maps;
}

TEST(TableCopy, OuterAxesMergeWhereTheOffsetsAllow) {
  // A detection head's slice [1, 3, 40, 40, 85] -> [1, 3, 40, 40, 81]: one outer axis of 4,800.
  const Dims in{1, 3, 40, 40, 85}, out{1, 3, 40, 40, 81};
  const Maps head = slice_maps(in, out, {0, 0, 0, 0, 4}, {1, 1, 1, 1, 1}, {0, 0, 0, 0, 0});
  cpu::OuterAxes a = cpu::merge_outer_axes(out, head);
  ASSERT_EQ(a.extent, (std::vector<int64_t>{4800}));
  for (int64_t j = 0; j < 4800; ++j) ASSERT_EQ(a.maps[0][static_cast<size_t>(j)], j * 85);

  // Every other row of 6 (rows 1, 3, 5) steps evenly across the axis before it too: 8 + 16 j.
  const Dims in2{2, 6, 8}, out2{2, 3, 8};
  a = cpu::merge_outer_axes(out2, slice_maps(in2, out2, {0, 1, 0}, {1, 2, 1}, {0, 0, 0}));
  ASSERT_EQ(a.extent, (std::vector<int64_t>{6}));
  EXPECT_EQ(a.maps[0], (std::vector<int64_t>{8, 24, 40, 56, 72, 88}));
  // Rows 1-3 of 6 do not: the rows left out break the step.
  a = cpu::merge_outer_axes(out2, slice_maps(in2, out2, {0, 1, 0}, {1, 1, 1}, {0, 0, 0}));
  EXPECT_EQ(a.extent, (std::vector<int64_t>{2, 3}));

  // A padded axis (fill entries) stays on its own; the single-entry axis before it folds in.
  const Dims in3{1, 4, 5}, out3{1, 6, 5};
  a = cpu::merge_outer_axes(out3, slice_maps(in3, out3, {0, 0, 0}, {1, 1, 1}, {0, 1, 0}));
  ASSERT_EQ(a.extent, (std::vector<int64_t>{6}));
  EXPECT_EQ(a.maps[0], (std::vector<int64_t>{-1, 0, 5, 10, 15, -1}));

  // Broadcast axes (step 0, as Expand gives) merge with each other, not with a stepping one.
  const Maps expand = {{0, 0}, {0, 0, 0}, {0, 1, 2, 3}, {0}};
  a = cpu::merge_outer_axes(Dims{2, 3, 4, 1}, expand);
  EXPECT_EQ(a.extent, (std::vector<int64_t>{6, 4}));
}

TEST(TableCopy, MatchesTheElementWalkOnRandomSlicesPaddingsAndBroadcasts) {
  std::mt19937 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = static_cast<int>(pick(1, 5));
    std::vector<int64_t> in_dims, out_dims, start, step, pad;
    for (int k = 0; k < rank; ++k) {
      const int64_t d = pick(1, 7);
      in_dims.push_back(d);
      const int kind = static_cast<int>(pick(0, 3));  // 0 full, 1 slice, 2 padding, 3 broadcast
      if (kind == 0 || d == 1) {
        out_dims.push_back(kind == 3 ? pick(1, 4) : d);
        start.push_back(0), step.push_back(kind == 3 ? 0 : 1), pad.push_back(0);
      } else if (kind == 1) {
        const int64_t s = pick(0, d - 1), st = pick(1, 2);
        out_dims.push_back((d - s + st - 1) / st);
        start.push_back(s), step.push_back(st), pad.push_back(0);
      } else if (kind == 2) {
        const int64_t before = pick(0, 2);
        out_dims.push_back(d + before + pick(0, 2));
        start.push_back(0), step.push_back(1), pad.push_back(before);
      } else {
        out_dims.push_back(d);
        start.push_back(d - 1), step.push_back(-1), pad.push_back(0);  // reversed
      }
    }
    const Dims in = Dims::from(in_dims), out = Dims::from(out_dims);
    const Maps maps = slice_maps(in, out, start, step, pad);
    std::vector<int32_t> x(static_cast<size_t>(in.volume()));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i * 7 + 1);
    const std::vector<int32_t> want = walk(x, out, maps, -5);
    for (int threads : {1, 3}) {
      std::vector<int32_t> y(static_cast<size_t>(out.volume()) + 4, 99);  // 4 guard elements
      cpu::table_copy<uint32_t>(reinterpret_cast<uint32_t*>(y.data()), reinterpret_cast<const uint32_t*>(x.data()), out,
                                maps, static_cast<uint32_t>(-5), threads);
      for (size_t g = 0; g < 4; ++g) ASSERT_EQ(y[want.size() + g], 99) << "wrote past the output, trial " << trial;
      y.resize(want.size());
      ASSERT_EQ(y, want) << "trial " << trial << ": " << in.to_string() << " -> " << out.to_string() << ", " << threads
                         << " threads";
    }
  }
}

}  // namespace
}  // namespace kiln
