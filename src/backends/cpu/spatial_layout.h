// Index arithmetic shared by the reference convolution and pooling kernels: spatial extents
// padded to 3 dims, and the element strides of an [N, C, S0, S1, S2] activation tensor in its
// format (linear NCHW-style or channels-last).
#pragma once

#include <array>
#include <cstdint>

#include "kiln/types.h"

namespace kiln::cpu {

inline constexpr int kMaxSpatial = 3;
using Spatial = std::array<int64_t, kMaxSpatial>;

struct Layout {
  int64_t n = 0, c = 0;
  Spatial s{};

  Layout(TensorFormat format, int64_t channels, const Spatial& e) {
    const int64_t volume = e[0] * e[1] * e[2];
    n = channels * volume;
    if (format == TensorFormat::kChannelsLast) {
      c = 1;
      s = {e[1] * e[2] * channels, e[2] * channels, channels};
    } else {
      c = volume;
      s = {e[1] * e[2], e[2], 1};
    }
  }
  int64_t at(int64_t in, int64_t ic, int64_t i0, int64_t i1, int64_t i2) const {
    return in * n + ic * c + i0 * s[0] + i1 * s[1] + i2 * s[2];
  }
};

}  // namespace kiln::cpu
