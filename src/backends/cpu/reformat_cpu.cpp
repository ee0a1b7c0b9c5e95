// CPU kernels of Reformat: copies between linear (N, C, spatial...) and channels-last
// (N, spatial..., C) memory orders for any rank >= 3 (channel axis 1) and any element type;
// same-format copies are plain copies. The "reference" tactic moves one element at a time in
// the order the definition reads; the "fast" tactic (the one the builder picks) sees each
// batch item as a [C, S] <-> [S, C] matrix transpose and moves square tiles, so that both the
// reads and the writes stay within a few cache lines, split over the threads by tile rows. The
// layout pass puts these at the edges of channels-last regions, so on the CPU they run around
// every such region (the network input and output, reshapes, ...).
#include <algorithm>
#include <cstring>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"

namespace kiln {
namespace {

void reformat_reference(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const size_t elem = data_type_size(x.type);
  if (x.format == y.format || x.dims.rank() < 3) {
    if (x.count()) std::memcpy(y.data, x.data, static_cast<size_t>(x.count()) * elem);
    return;
  }
  const int64_t n = x.dims[0], c = x.dims[1];
  const int64_t spatial = c ? x.count() / (n * c) : 0;
  const auto* src = static_cast<const uint8_t*>(x.data);
  auto* dst = static_cast<uint8_t*>(y.data);
  const bool to_last = y.format == TensorFormat::kChannelsLast;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t s = 0; s < spatial; ++s) {
        const int64_t linear = (b * c + ch) * spatial + s;
        const int64_t last = (b * spatial + s) * c + ch;
        const int64_t from = to_last ? linear : last, to = to_last ? last : linear;
        std::memcpy(dst + static_cast<size_t>(to) * elem, src + static_cast<size_t>(from) * elem, elem);
      }
    }
  }
}

// Tile edge in elements: 16 x 16 float32 tiles are 16 cache lines in and 16 out.
constexpr int64_t kTile = 16;

// Transposes `batch` row-major [rows, cols] matrices of T into [cols, rows].
template <typename T>
void transpose_batched(const T* src, T* dst, int64_t batch, int64_t rows, int64_t cols, int num_threads) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t matrix = rows * cols;
  // One work item = one tile row of one matrix: [kTile rows, all cols].
  cpu::parallel_for(
      batch * row_tiles, num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          const int64_t b = w / row_tiles;
          const int64_t r0 = (w % row_tiles) * kTile, r1 = std::min(rows, r0 + kTile);
          const T* s = src + b * matrix;
          T* d = dst + b * matrix;
          for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
            const int64_t c1 = std::min(cols, c0 + kTile);
            for (int64_t c = c0; c < c1; ++c) {
              for (int64_t r = r0; r < r1; ++r) d[c * rows + r] = s[r * cols + c];
            }
          }
        }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(kTile * cols, 1)));
}

template <typename T>
void transpose_typed(const TensorView& x, const TensorView& y, int num_threads) {
  const int64_t n = x.dims[0], c = x.dims[1];
  const int64_t spatial = x.count() / (n * c);
  // linear [C, S] -> channels-last [S, C], or back.
  const bool to_last = y.format == TensorFormat::kChannelsLast;
  transpose_batched<T>(x.as<const T>(), y.as<T>(), n, to_last ? c : spatial, to_last ? spatial : c, num_threads);
}

void reformat_fast(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const size_t elem = data_type_size(x.type);
  const bool same_order = x.format == y.format || x.dims.rank() < 3 || x.count() == 0 || x.dims[1] == 1 ||
                          x.count() == x.dims[0] * x.dims[1];
  if (same_order) {
    // Same order in memory (one channel, or no spatial extent): a copy.
    if (x.count()) std::memcpy(y.data, x.data, static_cast<size_t>(x.count()) * elem);
    return;
  }
  switch (elem) {
    case 1:
      transpose_typed<uint8_t>(x, y, ctx.num_threads);
      break;
    case 2:
      transpose_typed<uint16_t>(x, y, ctx.num_threads);
      break;
    case 4:
      transpose_typed<uint32_t>(x, y, ctx.num_threads);
      break;
    case 8:
      transpose_typed<uint64_t>(x, y, ctx.num_threads);
      break;
    default:
      reformat_reference(ctx);
      break;
  }
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerReformat, "reference", 0, nullptr,
                                 function_kernel(reformat_reference)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerReformat, "fast", 10, nullptr,
                                 function_kernel(reformat_fast)});

}  // namespace kiln
