// CPU kernels of Resize (ONNX Resize, opset 11+ semantics, no roi), float math done as ONNX
// Runtime does it so that nearest-neighbour choices agree bit for bit:
//   - the per-axis scale is the `scales` value when given, else float(out) / float(in);
//   - output coordinate x maps to an input coordinate by coordinate_transformation_mode, in float
//     (an axis of scale 1 maps x to x whatever the mode). align_corners and pytorch_half_pixel
//     use the resized length in * scale, which with `scales` may be fractional (ONNX's reference
//     and backend tests; ONNX Runtime uses the floored output extent there instead);
//   - nearest rounds by nearest_mode and clamps into the input;
//   - linear clamps the coordinate into [0, in - 1] and blends the two neighbours;
//   - cubic blends four neighbours floor(x) - 1 .. floor(x) + 2 with Keys' kernel (cubic_coeff_a),
//     clamping indices to the edge, or with exclude_outside dropping outside taps and
//     renormalizing.
// Linear and cubic apply to every axis whose coordinates are not integers (a tensor-product
// kernel: bilinear, trilinear, bicubic, ...).
// "reference": nearest for every data type (it only moves elements), linear/cubic for
// float32/float16/float64 (accumulating in double). "fast": nearest float32 resizing the last two
// axes, parallel over rows, with a special case for exact 2x (the detectors' upsample).
// Layout: kLinear only.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/data_copy.h"
#include "src/backends/kernel.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// x_original = f(x_resized, scale, output extent, length_resized = in * scale, length_original),
// float math as ONNX Runtime.
using CoordFn = float (*)(float x, float scale, float out_len, double resized_len, float in_len);

const std::vector<std::pair<std::string, CoordFn>>& coord_modes() {
  static const std::vector<std::pair<std::string, CoordFn>> kModes = {
      {"half_pixel", [](float x, float s, float, double, float) { return (x + 0.5f) / s - 0.5f; }},
      {"half_pixel_symmetric",
       [](float x, float s, float out_len, double, float in_len) {
         const float adjustment = out_len / (s * in_len);
         const float center = in_len / 2;
         const float offset = center * (1 - adjustment);
         return static_cast<float>(offset + (x + 0.5) / s - 0.5);  // in double, as ONNX Runtime
       }},
      {"pytorch_half_pixel",
       [](float x, float s, float, double resized_len, float) { return resized_len > 1 ? (x + 0.5f) / s - 0.5f : 0.0f; }},
      {"align_corners",
       [](float x, float, float, double resized_len, float in_len) {
         return resized_len == 1 ? 0.0f : static_cast<float>(x * (in_len - 1.0) / (resized_len - 1.0));
       }},
      {"asymmetric", [](float x, float s, float, double, float) { return x / s; }},
      {"tf_half_pixel_for_nn", [](float x, float s, float, double, float) { return (x + 0.5f) / s; }},
  };
  return kModes;
}

using NearestFn = int64_t (*)(float x);

const std::vector<std::pair<std::string, NearestFn>>& nearest_modes() {
  static const std::vector<std::pair<std::string, NearestFn>> kModes = {
      {"round_prefer_floor",
       [](float x) {
         const float f = std::floor(x);
         return static_cast<int64_t>(x - f == 0.5f ? f : std::round(x));
       }},
      {"round_prefer_ceil", [](float x) { return static_cast<int64_t>(std::round(x)); }},
      {"floor", [](float x) { return static_cast<int64_t>(std::floor(x)); }},
      {"ceil", [](float x) { return static_cast<int64_t>(std::ceil(x)); }},
  };
  return kModes;
}

template <typename Fn>
Fn find_mode(const std::vector<std::pair<std::string, Fn>>& table, const std::string& name, const char* attr) {
  for (const auto& [n, fn] : table) {
    if (n == name) return fn;
  }
  throw Error(std::string("Resize: unsupported ") + attr + " " + quote(name));
}

struct ResizeAttrs {
  std::string mode;
  CoordFn coord;
  NearestFn nearest;
  double cubic_a;
  bool exclude_outside;

  explicit ResizeAttrs(const Layer& layer)
      : mode(attr_string(layer, "mode")),
        coord(find_mode(coord_modes(), attr_string(layer, "coordinate_transformation_mode"),
                        "coordinate_transformation_mode")),
        nearest(find_mode(nearest_modes(), attr_string(layer, "nearest_mode"), "nearest_mode")),
        cubic_a(attr_float(layer, "cubic_coeff_a")),
        exclude_outside(attr_int(layer, "exclude_outside") != 0) {}
};

// ONNX Runtime leaves an axis of scale 1 untouched whatever the mode (it matters for
// tf_half_pixel_for_nn, which would otherwise shift by half a pixel).
// `scales_given`: the resized length is in * scale (fractional when the output was floored),
// else exactly the output extent.
float source_coord(const ResizeAttrs& a, int64_t j, float scale, int64_t out_len, int64_t in_len, bool scales_given) {
  if (scale == 1.0f) return static_cast<float>(j);
  const double resized_len = scales_given ? static_cast<double>(scale) * static_cast<double>(in_len)
                                          : static_cast<double>(out_len);
  return a.coord(static_cast<float>(j), scale, static_cast<float>(out_len), resized_len, static_cast<float>(in_len));
}

bool scales_given(const KernelContext& ctx) {
  return ctx.inputs.size() > 1 && ctx.inputs[1].data && ctx.inputs[1].count() > 0;
}

// Per-axis scales: the given `scales`, else out / in (float, as ONNX Runtime).
std::vector<float> axis_scales(const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  std::vector<float> s(static_cast<size_t>(x.rank()));
  const bool given = scales_given(ctx);
  for (int i = 0; i < x.rank(); ++i) {
    if (given) {
      const TensorView& v = ctx.inputs[1];
      KILN_DISPATCH_FLOAT(v.type, "Resize scales", s[static_cast<size_t>(i)] = static_cast<float>(v.as<const T>()[i]));
    } else {
      s[static_cast<size_t>(i)] = static_cast<float>(y[i]) / static_cast<float>(x[i]);
    }
  }
  return s;
}

// Nearest source index per output index of every axis, scaled to element offsets.
std::vector<std::vector<int64_t>> nearest_maps(const ResizeAttrs& a, const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  const auto scales = axis_scales(ctx);
  const bool given = scales_given(ctx);
  const auto stride = row_major_strides(x);
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(x.rank()));
  for (int k = 0; k < x.rank(); ++k) {
    const auto u = static_cast<size_t>(k);
    for (int64_t j = 0; j < y[k]; ++j) {
      const float c = source_coord(a, j, scales[u], y[k], x[k], given);
      const int64_t i = std::clamp<int64_t>(a.nearest(c), 0, x[k] - 1);
      maps[u].push_back(i * stride[u]);
    }
  }
  return maps;
}

struct Tap {
  int64_t offset;  // elements
  double weight;
};
using AxisTaps = std::vector<std::vector<Tap>>;  // [output index] -> taps

std::array<float, 4> cubic_coeffs(float s, float a) {
  return {((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a, ((a + 2) * s - (a + 3)) * s * s + 1,
          ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1,
          ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a};
}

// Interpolation taps of every axis (zero weights dropped, so untouched axes cost nothing).
std::vector<AxisTaps> interpolation_taps(const ResizeAttrs& a, const KernelContext& ctx) {
  const Dims& x = ctx.inputs.at(0).dims;
  const Dims& y = ctx.outputs.at(0).dims;
  const auto scales = axis_scales(ctx);
  const bool given = scales_given(ctx);
  const auto stride = row_major_strides(x);
  const bool cubic = a.mode == "cubic";
  std::vector<AxisTaps> taps(static_cast<size_t>(x.rank()));
  for (int k = 0; k < x.rank(); ++k) {
    const auto u = static_cast<size_t>(k);
    const int64_t n = x[k];
    for (int64_t j = 0; j < y[k]; ++j) {
      float c = source_coord(a, j, scales[u], y[k], n, given);
      std::vector<Tap> t;
      if (!cubic) {
        c = std::clamp(c, 0.0f, static_cast<float>(n - 1));
        const int64_t i1 = std::min<int64_t>(static_cast<int64_t>(c), n - 1), i2 = std::min<int64_t>(i1 + 1, n - 1);
        const float s = c - static_cast<float>(i1);
        t.push_back({i1 * stride[u], i1 == i2 ? 1.0 : 1.0 - s});
        if (i1 != i2) t.push_back({i2 * stride[u], s});
      } else {
        const float f = std::floor(c);
        const auto w = cubic_coeffs(c - f, static_cast<float>(a.cubic_a));
        double sum = 0;
        for (int m = 0; m < 4; ++m) {
          const int64_t i = static_cast<int64_t>(f) - 1 + m;
          const bool inside = i >= 0 && i < n;
          if (a.exclude_outside && !inside) continue;
          t.push_back({std::clamp<int64_t>(i, 0, n - 1) * stride[u], w[static_cast<size_t>(m)]});
          sum += w[static_cast<size_t>(m)];
        }
        if (a.exclude_outside && sum != 0) {
          for (Tap& tap : t) tap.weight /= sum;
        }
      }
      t.erase(std::remove_if(t.begin(), t.end(), [](const Tap& tap) { return tap.weight == 0; }), t.end());
      taps[u].push_back(std::move(t));
    }
  }
  return taps;
}

double load(float v) { return v; }
double load(double v) { return v; }
double load(half v) { return static_cast<float>(v); }
template <typename T>
T store(double v) {
  return static_cast<T>(static_cast<float>(v));
}
template <>
double store<double>(double v) {
  return v;
}

// For each row of the output (all axes but the last fixed), the outer taps are combined once
// into (offset, weight) pairs; each element then adds the inner axis' taps.
template <typename T>
void interpolate(const T* src, T* dst, const Dims& out, const std::vector<AxisTaps>& taps, int num_threads) {
  const int r = out.rank();
  if (out.volume() == 0) return;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t n = out[r - 1], rows = out.volume() / n;
  const AxisTaps& inner = taps[static_cast<size_t>(r - 1)];
  cpu::parallel_for(rows, num_threads, [&](int64_t begin, int64_t end) {
    std::vector<Tap> combos, next;
    for (int64_t row = begin; row < end; ++row) {
      combos.assign(1, Tap{0, 1.0});
      int64_t rest = row;
      for (int k = r - 2; k >= 0; --k) {
        const int64_t c = rest % out[k];
        rest /= out[k];
        next.clear();
        for (const Tap& a : combos) {
          for (const Tap& b : taps[static_cast<size_t>(k)][static_cast<size_t>(c)]) {
            next.push_back({a.offset + b.offset, a.weight * b.weight});
          }
        }
        combos.swap(next);
      }
      T* d = dst + row * n;
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (const Tap& a : combos) {
          for (const Tap& b : inner[static_cast<size_t>(j)]) acc += a.weight * b.weight * load(src[a.offset + b.offset]);
        }
        d[j] = store<T>(acc);
      }
    }
  }, 16);
}

class ResizeRef : public Kernel {
 public:
  explicit ResizeRef(const Layer& layer) : attrs_(layer) {}

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    if (x.dims.rank() != y.dims.rank()) throw Error("Resize: input and output ranks differ");
    if (attrs_.mode == "nearest") {
      cpu::table_copy(x, y, nearest_maps(attrs_, ctx), nullptr, ctx.num_threads, "Resize");
      return;
    }
    const auto taps = interpolation_taps(attrs_, ctx);
    KILN_DISPATCH_FLOAT(x.type, "Resize", interpolate<T>(x.as<const T>(), y.as<T>(), y.dims, taps, ctx.num_threads));
  }

 private:
  ResizeAttrs attrs_;
};

bool supports_resize_ref(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].format != TensorFormat::kLinear) return false;
  return attr_string(layer, "mode") == "nearest" || is_floating_point(inputs[0].type);
}

// Nearest float32 over the last two axes: each output row copies (or, for exact 2x, doubles)
// one input row; a row whose source equals the previous row's is a memcpy of that row.
class ResizeNearestFast : public Kernel {
 public:
  explicit ResizeNearestFast(const Layer& layer) : attrs_(layer) {}

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    const int r = x.dims.rank();
    auto maps = nearest_maps(attrs_, ctx);
    bool leading_identity = r >= 2;
    const auto stride = row_major_strides(x.dims);
    for (int k = 0; leading_identity && k < r - 2; ++k) {
      leading_identity = x.dims[k] == y.dims[k];
      for (int64_t j = 0; leading_identity && j < y.dims[k]; ++j) {
        leading_identity = maps[static_cast<size_t>(k)][static_cast<size_t>(j)] == j * stride[static_cast<size_t>(k)];
      }
    }
    if (!leading_identity) {
      cpu::table_copy(x, y, maps, nullptr, ctx.num_threads, "Resize");
      return;
    }
    const int64_t h_in = x.dims[r - 2], w_in = x.dims[r - 1], h_out = y.dims[r - 2], w_out = y.dims[r - 1];
    const int64_t rows = y.count() / std::max<int64_t>(w_out, 1);
    if (y.count() == 0) return;
    const std::vector<int64_t>& hmap = maps[static_cast<size_t>(r - 2)];  // offsets (rows * w_in)
    const std::vector<int64_t>& wmap = maps[static_cast<size_t>(r - 1)];
    bool doubles = w_out == 2 * w_in;
    for (int64_t j = 0; doubles && j < w_out; ++j) doubles = wmap[static_cast<size_t>(j)] == j / 2;
    const float* src = x.as<const float>();
    float* dst = y.as<float>();
    cpu::parallel_for(rows, ctx.num_threads, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t plane = row / h_out, oy = row % h_out;
        float* d = dst + row * w_out;
        if (row > begin && oy > 0 && hmap[static_cast<size_t>(oy)] == hmap[static_cast<size_t>(oy - 1)]) {
          std::memcpy(d, d - w_out, static_cast<size_t>(w_out) * sizeof(float));
          continue;
        }
        const float* s = src + plane * h_in * w_in + hmap[static_cast<size_t>(oy)];
        if (doubles) {
          for (int64_t i = 0; i < w_in; ++i) d[2 * i] = d[2 * i + 1] = s[i];
        } else {
          for (int64_t j = 0; j < w_out; ++j) d[j] = s[wmap[static_cast<size_t>(j)]];
        }
      }
    }, std::max<int64_t>(1, 8192 / std::max<int64_t>(w_out, 1)));
  }

 private:
  ResizeAttrs attrs_;
};

bool supports_resize_fast(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && inputs[0].format == TensorFormat::kLinear && inputs[0].type == DataType::kFloat32 &&
         inputs[0].dims.rank() >= 2 && attr_string(layer, "mode") == "nearest";
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerResize, "reference", 0, supports_resize_ref,
                                 [](const Layer& layer) { return std::make_unique<ResizeRef>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerResize, "fast", 10, supports_resize_fast,
                                 [](const Layer& layer) { return std::make_unique<ResizeNearestFast>(layer); }});

}  // namespace kiln
