// CPU reference ("oracle") kernel of Pooling: max and average over 1-3 spatial dims with
// strides, asymmetric pads, dilations, ceil_mode (through the output dims shape inference
// chose), count_include_pad and global pooling, with ONNX Runtime's semantics:
//   - padding never takes part in a max, and in an average only through the divisor;
//   - count_include_pad=0 divides by the number of in-bounds taps, count_include_pad=1 by the
//     number of taps inside the padded extent [-pad_begin, in + pad_end) (a ceil_mode window
//     hanging past the end padding is clipped there, as ONNX Runtime does).
// Layout: x and y each kLinear (NCDHW) or kChannelsLast (NDHWC), independently. float32,
// float16, float64 (sums in double); max also int8/uint8. Parallel over (batch, channel) pairs.
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/spatial_layout.h"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/pool_params.h"

namespace kiln {
namespace {

using cpu::kMaxSpatial;
using cpu::Layout;
using cpu::Spatial;

// Spatial lists padded to 3 dims (kernel 1, stride 1, pad 0, dilation 1) so that one loop
// nest serves 1-D, 2-D and 3-D.
struct RefGeometry {
  int64_t planes = 0, channels = 0;  // planes: N * C
  Spatial in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, pad_begin{0, 0, 0}, pad_end{0, 0, 0},
      dilation{1, 1, 1};
};

// From the layer's PoolParams and x's shape (pool_geometry, as shape inference computes it); y
// must have the shape that geometry gives.
RefGeometry make_geometry(const PoolParams& params, const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  const int k = x.rank() - 2;
  if (k < 1 || k > kMaxSpatial || y.rank() != x.rank() || y[0] != x[0] || y[1] != x[1]) {
    throw Error("Pooling reference: expects x and y of rank 3..5 with equal N and C, got x " + x.to_string() + ", y " +
                y.to_string());
  }
  const PoolGeometry pg = pool_geometry(params, x);
  RefGeometry g;
  g.channels = x[1];
  g.planes = x[0] * x[1];
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    if (y[i + 2] != pg.out[u]) {
      throw Error("Pooling reference: y " + y.to_string() + " does not have the output size " +
                  std::to_string(pg.out[u]) + " of spatial dim " + std::to_string(i));
    }
    g.in[u] = pg.in[u];
    g.out[u] = pg.out[u];
    g.kernel[u] = pg.kernel[u];
    g.stride[u] = pg.stride[u];
    g.dilation[u] = pg.dilation[u];
    g.pad_begin[u] = pg.pad_begin[u];
    g.pad_end[u] = pg.pad_end[u];
  }
  return g;
}

// The value a max over no element yields (ONNX Runtime's: the lowest finite value).
template <typename T>
double lowest_value() {
  if constexpr (std::is_same_v<T, half>) {
    return -65504.0;
  } else {
    return static_cast<double>(std::numeric_limits<T>::lowest());
  }
}

template <typename T>
void pooling_ref(const RefGeometry& g, const PoolParams& a, const KernelContext& ctx) {
  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  const Layout xl(ctx.inputs[0].format, g.channels, g.in), yl(ctx.outputs[0].format, g.channels, g.out);
  // Taps of the window at output index o along spatial dim j: positions start + t*dilation.
  const auto start = [&g](int j, int64_t o) {
    return o * g.stride[static_cast<size_t>(j)] - g.pad_begin[static_cast<size_t>(j)];
  };
  // Taps inside the padded extent [-pad_begin, in + pad_end) (count_include_pad=1 divisor).
  const auto padded_taps = [&g](int j, int64_t first) {
    const auto u = static_cast<size_t>(j);
    int64_t n = 0;
    for (int64_t t = 0; t < g.kernel[u]; ++t) n += first + t * g.dilation[u] < g.in[u] + g.pad_end[u] ? 1 : 0;
    return n;
  };
  cpu::parallel_for(
      g.planes, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const int64_t n = p / g.channels, c = p % g.channels;
          for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
            for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
              for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                const Spatial first{start(0, o0), start(1, o1), start(2, o2)};
                double sum = 0.0, max = -std::numeric_limits<double>::infinity();
                int64_t in_bounds = 0;
                for (int64_t t0 = 0; t0 < g.kernel[0]; ++t0) {
                  const int64_t i0 = first[0] + t0 * g.dilation[0];
                  if (i0 < 0 || i0 >= g.in[0]) continue;
                  for (int64_t t1 = 0; t1 < g.kernel[1]; ++t1) {
                    const int64_t i1 = first[1] + t1 * g.dilation[1];
                    if (i1 < 0 || i1 >= g.in[1]) continue;
                    for (int64_t t2 = 0; t2 < g.kernel[2]; ++t2) {
                      const int64_t i2 = first[2] + t2 * g.dilation[2];
                      if (i2 < 0 || i2 >= g.in[2]) continue;
                      const double v = static_cast<double>(x[xl.at(n, c, i0, i1, i2)]);
                      sum += v;
                      // A NaN propagates through the max, so that NaN checks downstream see it.
                      if (v > max || std::isnan(v)) max = std::isnan(max) ? max : v;
                      ++in_bounds;
                    }
                  }
                }
                double result;
                if (a.is_max()) {
                  result = in_bounds ? max : lowest_value<T>();
                } else {
                  const int64_t divisor = a.count_include_pad ? padded_taps(0, first[0]) * padded_taps(1, first[1]) *
                                                                    padded_taps(2, first[2])
                                                              : in_bounds;
                  result = divisor ? sum / static_cast<double>(divisor) : 0.0;
                }
                y[yl.at(n, c, o0, o1, o2)] = static_cast<T>(result);
              }
            }
          }
        }
      },
      1);
}

class PoolingRef : public Kernel {
 public:
  explicit PoolingRef(const PoolParams& params) : attrs_(params) {}
  void execute(const KernelContext& ctx) override {
    const RefGeometry g = make_geometry(attrs_, ctx);
    const DataType type = ctx.inputs[0].type;
    if (!attrs_.is_max() && !is_floating_point(type)) {
      throw Error(std::string("Pooling reference: average pooling expects a floating-point input, got ") +
                  to_string(type));
    }
    switch (type) {
      case DataType::kInt8:
        pooling_ref<int8_t>(g, attrs_, ctx);
        break;
      case DataType::kUInt8:
        pooling_ref<uint8_t>(g, attrs_, ctx);
        break;
      default:
        KILN_DISPATCH_FLOAT(type, "Pooling reference", pooling_ref<T>(g, attrs_, ctx));
    }
  }

 private:
  PoolParams attrs_;
};

bool supports_pooling(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty()) return false;
  const DataType t = inputs[0].type;
  const bool is_max = params_of<PoolParams>(layer).is_max();
  return is_floating_point(t) || (is_max && (t == DataType::kInt8 || t == DataType::kUInt8));
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerPooling, "reference", 0, supports_pooling,
    [](const Layer& layer) { return std::make_unique<PoolingRef>(params_of<PoolParams>(layer)); }});

}  // namespace kiln
