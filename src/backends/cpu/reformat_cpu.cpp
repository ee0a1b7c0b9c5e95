// CPU reference of Reformat: copies between linear (N, C, spatial...) and channels-last
// (N, spatial..., C) memory orders for any rank >= 3 (channel axis 1) and any element type;
// same-format copies are plain copies.
#include <cstring>

#include "kiln/error.h"
#include "src/backends/kernel.h"

namespace kiln {
namespace {

void reformat(const KernelContext& ctx) {
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

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerReformat, "reference", 0, nullptr, function_kernel(reformat)});

}  // namespace kiln
