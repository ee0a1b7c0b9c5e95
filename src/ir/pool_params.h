// The parameters of Pooling (ONNX MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool,
// 1-D to 3-D): decoded once from a layer's attributes (PoolParams::decode, through the schema's
// with_params) and turned into one geometry per input shape (pool_geometry) that shape inference
// and every pooling kernel (CPU reference, fast, oneDNN, CUDA) use. `mode` is required (the
// schema's one rule); the output-size rules are ONNX Runtime's, including its ceil_mode rule
// that drops a last window starting in the right padding.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/network.h"
#include "src/ir/conv_params.h"

namespace kiln {

// `mode` is the public PoolingType (include/kiln/network.h).
struct PoolParams {
  PoolingType mode = PoolingType::kMax;
  bool global = false;             // pool over all spatial dims (kernel and window unused)
  bool ceil_mode = false;          // round output sizes up
  bool count_include_pad = false;  // average: divide by the window clipped to the padded extent
  std::vector<int64_t> kernel;     // one value per spatial dim (unused when global)
  WindowParams window;

  bool is_max() const { return mode == PoolingType::kMax; }
  // Throws kiln::Error naming the layer and the attribute.
  static PoolParams decode(const Layer& layer);
};

// One pooling at one input shape; spatial vectors have one entry per spatial dim. Global
// pooling is a window over the whole input (kernel = in, unit strides, no padding, out = 1).
struct PoolGeometry {
  int spatial_rank = 0;
  int64_t batch = 0, channels = 0;
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end;
};

// The geometry of x [N, C, D1..Dk] (k = 1..3). Throws kiln::Error with the reason (without a
// layer name; callers add theirs).
PoolGeometry pool_geometry(const PoolParams& params, const Dims& x);

// Attributes of a Pooling layer from the public description (Network::add_pooling).
Attributes pool_attributes(const PoolingDesc& desc);

}  // namespace kiln
