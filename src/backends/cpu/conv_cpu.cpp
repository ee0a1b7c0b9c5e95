// CPU reference ("oracle") kernels of Convolution and Deconvolution: direct loops over every
// output element, 1-D/2-D/3-D, groups (incl. depthwise), dilations, asymmetric pads, bias,
// Convolution's residual input and the fused post-op. Every other tactic is checked against
// these, so they stay plain: no im2col, no blocking, accumulation in double.
//
// Layout: x, y and the residual each kLinear (NCDHW) or kChannelsLast (NDHWC), independently;
// w and b plain row-major; no alignment assumptions. float32, float16 and float64 (all inputs
// of one type, as the schema checks). Parallel over (batch, output channel) pairs, each of
// which writes a disjoint set of output elements.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/spatial_layout.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using cpu::kMaxSpatial;
using cpu::Layout;
using cpu::Spatial;

// Geometry of one execution in the reference's fixed 3-D form: spatial lists padded to 3 dims
// (stride 1, pad 0, dilation 1) so that one loop nest serves 1-D, 2-D and 3-D.
struct RefGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  Spatial in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0}, dilation{1, 1, 1};

  int64_t kernel_volume() const { return kernel[0] * kernel[1] * kernel[2]; }
};

// From the layer's ConvParams and the views' shapes (conv_geometry, as shape inference computes
// it); y must have the shape that geometry gives.
RefGeometry make_geometry(const char* what, const ConvParams& params, const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& w = ctx.inputs.at(1).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  const int k = x.rank() - 2;
  if (k < 1 || k > kMaxSpatial || w.rank() != x.rank() || y.rank() != x.rank()) {
    throw Error(std::string(what) + " reference: expects x, w and y of equal rank 3..5, got x " + x.to_string() +
                ", w " + w.to_string() + ", y " + y.to_string());
  }
  for (size_t i = 1; i < 3 && i < ctx.inputs.size(); ++i) {
    if (ctx.inputs[i].data && ctx.inputs[i].format != TensorFormat::kLinear) {
      throw Error(std::string(what) + " reference: weights and bias must be in the linear format");
    }
  }
  const kiln::ConvGeometry cg = conv_geometry(params, x, w);
  RefGeometry g;
  g.batch = cg.batch;
  g.in_channels = cg.in_channels;
  g.out_channels = cg.out_channels;
  g.group = cg.group;
  if (y[0] != g.batch || y[1] != g.out_channels) {
    throw Error(std::string(what) + " reference: y " + y.to_string() + " does not match x " + x.to_string() +
                " and w " + w.to_string());
  }
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    if (y[i + 2] != cg.out[u]) {
      throw Error(std::string(what) + " reference: y " + y.to_string() + " does not have the output size " +
                  std::to_string(cg.out[u]) + " of spatial dim " + std::to_string(i));
    }
    g.in[u] = cg.in[u];
    g.out[u] = cg.out[u];
    g.kernel[u] = cg.kernel[u];
    g.stride[u] = cg.stride[u];
    g.dilation[u] = cg.dilation[u];
    g.pad[u] = cg.pad_begin[u];  // end pads (and output_padding) only shape the output
  }
  return g;
}

template <typename T>
double load(const T* p, int64_t i) {
  return static_cast<double>(p[i]);
}

template <typename T>
T store(double v, const PostOp& post) {
  return static_cast<T>(post.enabled ? static_cast<double>(post.apply(static_cast<float>(v))) : v);
}

// y[n, m, o] = post(b[m] + sum_{c in group(m), k} x[n, c, o*s - p + k*d] * w[m, c % Cg, k] + r[n, m, o])
template <typename T>
void convolution_ref(const RefGeometry& g, const PostOp& post, const KernelContext& ctx) {
  const T* x = ctx.inputs[0].as<const T>();
  const T* w = ctx.inputs[1].as<const T>();
  const T* b = ctx.inputs.size() > 2 ? ctx.inputs[2].as<const T>() : nullptr;
  const T* r = ctx.inputs.size() > 3 ? ctx.inputs[3].as<const T>() : nullptr;
  T* y = ctx.outputs[0].as<T>();
  const Layout xl(ctx.inputs[0].format, g.in_channels, g.in), yl(ctx.outputs[0].format, g.out_channels, g.out);
  const Layout rl(r ? ctx.inputs[3].format : TensorFormat::kLinear, g.out_channels, g.out);
  const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  cpu::parallel_for(
      g.batch * g.out_channels, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t nm = begin; nm < end; ++nm) {
          const int64_t n = nm / g.out_channels, m = nm % g.out_channels;
          const int64_t c0 = (m / mg) * cg;  // first input channel of m's group
          for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
            for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
              for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                double acc = b ? load(b, m) : 0.0;
                for (int64_t ci = 0; ci < cg; ++ci) {
                  const int64_t w_base = (m * cg + ci) * g.kernel_volume();
                  for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
                    const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
                    if (i0 < 0 || i0 >= g.in[0]) continue;
                    for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
                      const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
                      if (i1 < 0 || i1 >= g.in[1]) continue;
                      for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                        const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
                        if (i2 < 0 || i2 >= g.in[2]) continue;
                        acc += load(x, xl.at(n, c0 + ci, i0, i1, i2)) *
                               load(w, w_base + (k0 * g.kernel[1] + k1) * g.kernel[2] + k2);
                      }
                    }
                  }
                }
                if (r) acc += load(r, rl.at(n, m, o0, o1, o2));
                y[yl.at(n, m, o0, o1, o2)] = store<T>(acc, post);
              }
            }
          }
        }
      },
      1);
}

// Transposed convolution as a gather: input position i feeds output o = i*s - p + k*d, so
// y[n, m, o] = post(b[m] + sum_{c in group(m), k : (o + p - k*d) = i*s, 0 <= i < in} x[n, c, i] * w[c, m % Mg, k]).
template <typename T>
void deconvolution_ref(const RefGeometry& g, const PostOp& post, const KernelContext& ctx) {
  const T* x = ctx.inputs[0].as<const T>();
  const T* w = ctx.inputs[1].as<const T>();
  const T* b = ctx.inputs.size() > 2 ? ctx.inputs[2].as<const T>() : nullptr;
  T* y = ctx.outputs[0].as<T>();
  const Layout xl(ctx.inputs[0].format, g.in_channels, g.in), yl(ctx.outputs[0].format, g.out_channels, g.out);
  const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  // Input index along spatial dim j feeding output o through tap k, or -1 when none does.
  const auto source = [&g](int j, int64_t o, int64_t k) -> int64_t {
    const auto u = static_cast<size_t>(j);
    const int64_t t = o + g.pad[u] - k * g.dilation[u];
    if (t < 0 || t % g.stride[u] != 0) return -1;
    const int64_t i = t / g.stride[u];
    return i < g.in[u] ? i : -1;
  };
  cpu::parallel_for(
      g.batch * g.out_channels, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t nm = begin; nm < end; ++nm) {
          const int64_t n = nm / g.out_channels, m = nm % g.out_channels;
          const int64_t c0 = (m / mg) * cg, m_in_group = m % mg;
          for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
            for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
              for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                double acc = b ? load(b, m) : 0.0;
                for (int64_t ci = 0; ci < cg; ++ci) {
                  const int64_t w_base = ((c0 + ci) * mg + m_in_group) * g.kernel_volume();
                  for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
                    const int64_t i0 = source(0, o0, k0);
                    if (i0 < 0) continue;
                    for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
                      const int64_t i1 = source(1, o1, k1);
                      if (i1 < 0) continue;
                      for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                        const int64_t i2 = source(2, o2, k2);
                        if (i2 < 0) continue;
                        acc += load(x, xl.at(n, c0 + ci, i0, i1, i2)) *
                               load(w, w_base + (k0 * g.kernel[1] + k1) * g.kernel[2] + k2);
                      }
                    }
                  }
                }
                y[yl.at(n, m, o0, o1, o2)] = store<T>(acc, post);
              }
            }
          }
        }
      },
      1);
}

class ConvolutionRef : public Kernel {
 public:
  explicit ConvolutionRef(const ConvParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    const RefGeometry g = make_geometry("Convolution", params_, ctx);
    KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "Convolution reference", convolution_ref<T>(g, params_.post, ctx));
  }

 private:
  ConvParams params_;
};

class DeconvolutionRef : public Kernel {
 public:
  explicit DeconvolutionRef(const ConvParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    const RefGeometry g = make_geometry("Deconvolution", params_, ctx);
    KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "Deconvolution reference", deconvolution_ref<T>(g, params_.post, ctx));
  }

 private:
  ConvParams params_;
};

// One floating-point type for every present input; weights and bias (inputs 1, 2) plain.
bool supports_conv_ref(const Layer&, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !is_floating_point(inputs[0].type)) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& d = inputs[i];
    if (!d.present) continue;
    if (d.type != inputs[0].type) return false;
    if ((i == 1 || i == 2) && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, "reference", 0, supports_conv_ref,
    [](const Layer& layer) { return std::make_unique<ConvolutionRef>(params_of<ConvParams>(layer)); }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerDeconvolution, "reference", 0, supports_conv_ref,
    [](const Layer& layer) { return std::make_unique<DeconvolutionRef>(params_of<ConvParams>(layer)); }});

}  // namespace kiln
