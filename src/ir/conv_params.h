// The parameters of the convolution family (Convolution, Deconvolution = ONNX ConvTranspose)
// and the sliding-window arithmetic they share with pooling: decoded once from a layer's
// attributes (ConvParams::decode, through the schema's with_params) and turned into one
// geometry per input shape (conv_geometry) that shape inference and every kernel (CPU
// reference, oneDNN, CUDA direct, cuDNN, cuBLASLt) use, so that padding, output sizes, groups
// and the fused post-op are defined once. The attribute contract is docs/layers.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "src/core/activation_math.h"

namespace kiln {

// ONNX's auto_pad: NOTSET uses the explicit pads; SAME_* pads so that out = ceil(in / stride)
// (deconvolution: out = in * stride), the odd cell at the end (UPPER) or the beginning (LOWER);
// VALID pads nothing.
enum class AutoPad : int32_t { kNotSet, kSameUpper, kSameLower, kValid };
const char* to_string(AutoPad pad);

// Strides, pads and dilations as stored: one value per spatial dim or empty for the default
// (ones; zeros for pads, which hold [b1..bk, e1..ek]). Values are range-checked at decode time;
// their count against the input's rank in the geometry functions.
struct WindowParams {
  std::vector<int64_t> strides, pads, dilations;
  AutoPad auto_pad = AutoPad::kNotSet;
};

// Begin and end padding of one spatial dim under `auto_pad` for a forward window (convolution,
// pooling): SAME gives out = ceil(in / stride) and total = max(0, (out - 1) * stride + kernel - in)
// with `kernel` the dilated extent. Also used by the ONNX importer.
void same_padding(AutoPad auto_pad, int64_t in, int64_t kernel, int64_t stride, int64_t* begin, int64_t* end);

// Per spatial dim strides, dilations and begin/end pads for an input of spatial extents `in` and
// (undilated) kernel sizes `kernel`: the explicit values or those auto_pad gives (forward windows).
// Throws kiln::Error when a list has neither k nor zero values (pads: 2k).
struct ResolvedWindow {
  std::vector<int64_t> stride, dilation, pad_begin, pad_end;
};
ResolvedWindow resolve_window(const WindowParams& window, const std::vector<int64_t>& in,
                              const std::vector<int64_t>& kernel);
// Decodes the strides, pads, dilations and auto_pad attributes (conv and pooling schemas).
WindowParams decode_window(const Layer& layer);
// The schema entries of those attributes (src/ir/op_schema.h's AttrSpec).
struct AttrSpec;
std::vector<AttrSpec> window_attr_specs();
// An extent computed in 128 bits: returned when it fits in an int64, else kiln::Error naming `what`.
int64_t window_extent(__int128 value, const std::string& what);
// The output size of a forward window (convolution, pooling) along spatial dim `dim` of input
// `x`: floor((in + pb + pe - d*(k-1) - 1) / s) + 1, or with ceil_mode rounded up, a last window
// starting in the end padding being dropped (ONNX Runtime's rule). Throws kiln::Error when the
// dilated kernel exceeds the padded input or an extent overflows.
int64_t window_output(const Dims& x, size_t dim, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t dilation,
                      int64_t stride, bool ceil_mode);

struct ConvParams {
  bool deconv = false;  // Deconvolution (weights [C, M/group, k..]) rather than Convolution
  WindowParams window;
  std::vector<int64_t> output_padding;  // Deconvolution only; empty: zeros
  int64_t group = 1;
  PostOp post;  // the fused activation (attributes activation, activation_alpha, activation_beta)
  // How many contexts the engine was tuned to run at once (BuilderConfig::tune_for_streams,
  // attribute concurrent_streams, 1..kMaxTuneStreams): CUDA library kernels (cuBLASLt, cuDNN's
  // graph API) then choose kernels for the device's SMs / this many.
  int64_t concurrent_streams = 1;

  // Throws kiln::Error naming the layer and the attribute (an unknown activation or auto_pad,
  // group < 1, strides/dilations < 1, negative pads or output_padding).
  static ConvParams decode(const Layer& layer);
};

// Convolution's optional residual input (inputs: x, w, bias, residual): y = act(conv + bias +
// residual).
inline constexpr int kConvResidualInput = 3;

// One (de)convolution at one input shape; spatial vectors have one entry per spatial dim.
struct ConvGeometry {
  int spatial_rank = 0;
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end, output_padding;

  int64_t kernel_volume() const;
  // Whether the convolution is a plain GEMM over channels: 1x1 kernel, unit strides and
  // dilations, no padding, one group.
  bool pointwise() const;
};

// The geometry of x [N, C, D1..Dk] (k = 1..3) with weights w ([M, C/group, k..] for a
// convolution, [C, M/group, k..] for a deconvolution): output sizes, resolved padding (auto_pad
// included), dilations, groups. Throws kiln::Error with the reason (without a layer name; callers
// add theirs) when ranks, channels, groups or sizes do not fit or an extent overflows 64 bits.
ConvGeometry conv_geometry(const ConvParams& params, const Dims& x, const Dims& w);

// Attributes of a (de)convolution layer from the public description (Network::add_convolution,
// add_deconvolution): the inverse of ConvParams::decode for the fields ConvolutionDesc has.
Attributes conv_attributes(const ConvolutionDesc& desc, bool deconv);

}  // namespace kiln
