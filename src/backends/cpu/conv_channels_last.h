// What kiln's own float32 channels-last CPU convolutions (conv_winograd_cpu.cpp's winograd_avx2,
// conv_igemm_cpu.cpp's igemm_avx2, and conv_nchw_direct_cpu.cpp's stems, whose output is
// channels-last) share: the inputs they take in supports(), the output and
// residual dims in prepare(), the workspace in execute(), their sizes and state. Both may write
// the output over the residual (KernelEntry::in_place_input = kConvResidualInput): each output
// element is stored once, after its residual was read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/kernel.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

namespace kiln::cpu {

// The sizes of a 2-D convolution the CPU's own convolution kernels keep (their shapes derive
// from it): images, channels, the kernel window, strides, dilations and the leading padding.
struct Conv2dSizes {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, oh = 0, ow = 0, pad_t = 0, pad_l = 0;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1;

  Conv2dSizes() = default;
  explicit Conv2dSizes(const ConvGeometry& g)  // g.spatial_rank == 2
      : n(g.batch),
        h(g.in[0]),
        w(g.in[1]),
        c(g.in_channels),
        k(g.out_channels),
        oh(g.out[0]),
        ow(g.out[1]),
        pad_t(g.pad_begin[0]),
        pad_l(g.pad_begin[1]),
        kh(g.kernel[0]),
        kw(g.kernel[1]),
        sh(g.stride[0]),
        sw(g.stride[1]),
        dh(g.dilation[0]),
        dw(g.dilation[1]) {}
};

// The geometry of x convolved with w into *g where it is an ungrouped 2-D convolution (with
// `depthwise`: one whose groups are its channels, one output channel each), else false with the
// reason (conv_geometry()'s error, or that it is not one).
inline bool conv2d_geometry(const ConvParams& params, const Dims& x, const Dims& w, ConvGeometry* g, std::string* why,
                            bool depthwise = false) {
  try {
    *g = conv_geometry(params, x, w);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  if (depthwise) {
    if (g->spatial_rank != 2 || g->group != g->in_channels || g->out_channels != g->in_channels) {
      *why = "not a 2-D depthwise convolution with one output channel per group";
      return false;
    }
  } else if (g->spatial_rank != 2 || g->group != 1) {
    *why = "not an ungrouped 2-D convolution";
    return false;
  }
  return true;
}

// Whether the layer is a float32 convolution (not a deconvolution) with static x and w dims
// (`dynamic_batch`: x's first dim may be dynamic), channels-last x, y and residual (the layout
// pass makes convolution regions channels-last), plain weights and a rank-1 plain bias, an
// activation activate() computes, on an AVX2 + FMA processor.
inline bool channels_last_conv_inputs(const Layer& layer, const std::vector<TensorDesc>& inputs,
                                      bool dynamic_batch = false) {
  if (!has_avx2_fma()) return false;
  if (inputs.size() < 2 || inputs.size() > 4 || !inputs[0].present || !inputs[1].present) return false;
  for (const TensorDesc& t : inputs) {
    if (t.present && t.type != DataType::kFloat32) return false;
  }
  const ConvParams& params = params_of<ConvParams>(layer);
  if (params.deconv || !activation_vectorized(params.post)) return false;
  if (inputs[0].format != TensorFormat::kChannelsLast || inputs[1].format != TensorFormat::kLinear) return false;
  if (layer.num_outputs() < 1 || layer.output(0)->format() != TensorFormat::kChannelsLast) return false;
  if (inputs.size() > 2 && inputs[2].present &&
      (inputs[2].dims.rank() != 1 || inputs[2].format != TensorFormat::kLinear))
    return false;
  if (inputs.size() > 3 && inputs[3].present && inputs[3].format != TensorFormat::kChannelsLast) return false;
  const Dims& x = inputs[0].dims;
  for (int i = dynamic_batch ? 1 : 0; i < x.rank(); ++i) {
    if (x[i] < 0) return false;
  }
  return !inputs[1].dims.is_dynamic();
}

// prepare(): throws (starting with `where`) unless the output's dims, and the residual's when
// there is one, are `want`; returns whether there is a residual.
inline bool check_conv_output(const std::string& where, const std::vector<TensorDesc>& inputs,
                              const std::vector<TensorDesc>& outputs, const Dims& want) {
  if (outputs[0].dims != want) {
    throw Error(where + "output dims " + outputs[0].dims.to_string() + " differ from the convolution's " +
                want.to_string());
  }
  const bool has_residual = inputs.size() > 3 && inputs[3].present;
  if (has_residual && inputs[3].dims != want) {
    throw Error(where + "residual dims " + inputs[3].dims.to_string() + " must equal the output's " + want.to_string());
  }
  return has_residual;
}

// execute(): throws unless the context's workspace has `need` bytes.
inline void check_workspace(const char* tactic, const KernelContext& ctx, size_t need) {
  if (ctx.workspace_size < need || (need && !ctx.workspace)) {
    throw Error(std::string("Convolution ") + tactic + ": workspace of " + std::to_string(ctx.workspace_size) +
                " bytes, " + std::to_string(need) + " needed");
  }
}

// The state both kernels keep: the layer's parameters, the shape prepared for (Shape), whether a
// residual is read, the threads, and the weights prepared from constant ones (transformed or
// packed), which the instances for other shapes share (another_instance).
template <class Self, class Shape>
class ChannelsLastConv : public Kernel {
 public:
  explicit ChannelsLastConv(const ConvParams& params) : params_(params) {}

  std::unique_ptr<Kernel> another_instance() const override {
    auto k = std::make_unique<Self>(params_);
    k->weights_ = weights_;
    return k;
  }

 protected:
  // The bias and the residual of an execute() call, null where absent.
  static const float* bias_of(const KernelContext& ctx) {
    return ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<float>() : nullptr;
  }
  const float* residual_of(const KernelContext& ctx) const {
    return has_residual_ && ctx.inputs.size() > 3 ? ctx.inputs[3].as<float>() : nullptr;
  }

  ConvParams params_;
  Shape shape_;
  bool has_residual_ = false;
  int threads_ = 1;
  std::shared_ptr<const std::vector<float>> weights_;
};

}  // namespace kiln::cpu
