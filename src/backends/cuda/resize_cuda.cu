// CUDA kernels of Resize (ONNX Resize, opset 11+ semantics, no roi; docs/layers.md), matching
// the CPU reference (resize_cpu.cpp) which follows ONNX Runtime's float math:
//   - per-axis scale: the `scales` value when given, else float(out) / float(in);
//   - coordinate_transformation_mode in float (half_pixel_symmetric and align_corners partly in
//     double); align_corners and pytorch_half_pixel use the resized length in * scale (fractional
//     when `scales` is given and the output extent was floored), else the output extent; an axis of
//     scale 1 maps x to x; nearest rounds by nearest_mode and clamps; linear clamps the coordinate
//     and blends two neighbours; cubic blends four with Keys' kernel (cubic_coeff_a), clamping
//     indices, or with exclude_outside dropping outside taps and renormalizing.
// Every axis is handled alike, so linear/cubic are (bi/tri/...)linear/cubic over all resized
// axes, any rank. Two launches per execute:
//   1. a table kernel writes, for every output index of every resized ("active") axis, its
//      source offset (nearest) or its 2 / 4 taps (offset, weight) into the workspace. The
//      coordinates use IEEE-rounded intrinsics (__fdiv_rn, ...) so that nearest picks exactly
//      the CPU's neighbour even though the library builds with --use_fast_math;
//   2. the resize kernel: per output element, a passthrough offset for unresized axes plus the
//      table entries of the active axes. Nearest moves elements by width (any type), widened to
//      up to 16 bytes when the innermost axis is not resized (e.g. C of NHWC); linear/cubic
//      compute in float for float32/float16, 4 channels at a time when the innermost axis is not
//      resized, with the tap loops unrolled for 1-3 active axes.
// Formats: input and output both kLinear, or both kChannelsLast (rank >= 3): the kernels work in
// memory order, so NHWC needs nothing special.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/strided_copy_cuda.cuh"
#include "src/backends/cuda/rounded_math_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/resize_params.h"

namespace kiln {
namespace {

using cuda::IndexDiv;

// ---- coordinate math (IEEE round-to-nearest on the device whatever the compile flags: the *_rn
// helpers of rounded_math_cuda.cuh) ------------------------------------------------------------------

using cuda::add_rn;
using cuda::div_rn;
using cuda::mul_rn;
using cuda::sub_rn;

// x_original of output index j (resize_cpu.cpp's coord_modes and source_coord). `resized_len` is
// in * scale (double, possibly fractional) when `scales` was given, else the output extent:
// align_corners and pytorch_half_pixel use it, not the output extent (ONNX's reference).
__host__ __device__ __forceinline__ float source_coord(ResizeCoordMode mode, int64_t j, float s, float out_len,
                                                       float in_len, double resized_len) {
  const float x = static_cast<float>(j);
  if (s == 1.0f) return x;
  switch (mode) {
    case ResizeCoordMode::kHalfPixel:
      return sub_rn(div_rn(add_rn(x, 0.5f), s), 0.5f);
    case ResizeCoordMode::kHalfPixelSymmetric: {
      const float adjustment = div_rn(out_len, mul_rn(s, in_len));
      const float center = div_rn(in_len, 2.0f);
      const float offset = mul_rn(center, sub_rn(1.0f, adjustment));
      // offset + (x + 0.5) / s - 0.5 in double, as ONNX Runtime.
      return static_cast<float>(add_rn(
          add_rn(static_cast<double>(offset), div_rn(add_rn(static_cast<double>(x), 0.5), static_cast<double>(s))),
          -0.5));
    }
    case ResizeCoordMode::kPytorchHalfPixel:
      return resized_len > 1 ? sub_rn(div_rn(add_rn(x, 0.5f), s), 0.5f) : 0.0f;
    case ResizeCoordMode::kAlignCorners:
      // x * (in - 1.0) / (resized - 1.0) in double, as the CPU reference.
      return resized_len == 1
                 ? 0.0f
                 : static_cast<float>(div_rn(mul_rn(static_cast<double>(x), sub_rn(static_cast<double>(in_len), 1.0)),
                                             sub_rn(resized_len, 1.0)));
    case ResizeCoordMode::kAsymmetric:
      return div_rn(x, s);
    default:
      return div_rn(add_rn(x, 0.5f), s);  // tf_half_pixel_for_nn
  }
}

__host__ __device__ __forceinline__ int64_t nearest_round(ResizeNearestMode mode, float x) {
  switch (mode) {
    case ResizeNearestMode::kRoundPreferFloor: {
      const float f = floorf(x);
      return static_cast<int64_t>(sub_rn(x, f) == 0.5f ? f : roundf(x));
    }
    case ResizeNearestMode::kRoundPreferCeil:
      return static_cast<int64_t>(roundf(x));
    case ResizeNearestMode::kFloor:
      return static_cast<int64_t>(floorf(x));
    default:
      return static_cast<int64_t>(ceilf(x));
  }
}

// ---- tables ------------------------------------------------------------------------------------

struct Taps {
  int64_t off[4];
  float w[4];
};

struct TableAxis {
  float scale = 1, out_len = 1, in_len = 1;
  double resized_len = 1;  // in * scale when `scales` was given, else out (see source_coord)
  int64_t in_extent = 1;
  int64_t stride = 1;  // in the resize kernel's offset units
  int64_t first = 0;   // index of this axis's first table entry
};

struct TableParams {
  InterpolationMode mode = InterpolationMode::kNearest;
  ResizeCoordMode coord = ResizeCoordMode::kHalfPixel;
  ResizeNearestMode nearest = ResizeNearestMode::kRoundPreferFloor;
  float cubic_a = -0.75f;
  bool exclude_outside = false;
  int naxes = 0;
  int64_t total = 0;
  TableAxis axis[kMaxDims];
};

__host__ __device__ __forceinline__ void cubic_coeffs(float s, float a, float* w) {
  w[0] = ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a;
  w[1] = ((a + 2) * s - (a + 3)) * s * s + 1;
  w[2] = ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1;
  w[3] = ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a;
}

// Table entry e: nearest writes an offset, linear/cubic their taps (unused taps weigh 0).
__host__ __device__ __forceinline__ void table_entry(const TableParams& p, int64_t e, int64_t* offsets, Taps* taps) {
  int a = 0;
  for (int k = 1; k < p.naxes; ++k) {
    if (e >= p.axis[k].first) a = k;
  }
  const TableAxis ax = p.axis[a];
  const int64_t j = e - ax.first, n = ax.in_extent;
  float c = source_coord(p.coord, j, ax.scale, ax.out_len, ax.in_len, ax.resized_len);
  if (p.mode == InterpolationMode::kNearest) {
    const int64_t i = nearest_round(p.nearest, c);
    offsets[e] = (i < 0 ? 0 : (i > n - 1 ? n - 1 : i)) * ax.stride;
    return;
  }
  Taps t;
  for (int m = 0; m < 4; ++m) {
    t.off[m] = 0;
    t.w[m] = 0.0f;
  }
  if (p.mode == InterpolationMode::kLinear) {
    const float hi = static_cast<float>(n - 1);
    c = c < 0.0f ? 0.0f : (hi < c ? hi : c);
    int64_t i1 = static_cast<int64_t>(c);
    if (i1 > n - 1) i1 = n - 1;
    const int64_t i2 = i1 + 1 < n - 1 ? i1 + 1 : n - 1;
    const float s = c - static_cast<float>(i1);
    t.off[0] = i1 * ax.stride;
    t.off[1] = i2 * ax.stride;
    t.w[0] = i1 == i2 ? 1.0f : 1.0f - s;
    t.w[1] = i1 == i2 ? 0.0f : s;
  } else {
    const float f = floorf(c);
    float w[4];
    cubic_coeffs(c - f, p.cubic_a, w);
    float sum = 0.0f;
    for (int m = 0; m < 4; ++m) {
      const int64_t i = static_cast<int64_t>(f) - 1 + m;
      const bool inside = i >= 0 && i < n;
      t.off[m] = (i < 0 ? 0 : (i > n - 1 ? n - 1 : i)) * ax.stride;
      t.w[m] = p.exclude_outside && !inside ? 0.0f : w[m];
      sum += t.w[m];
    }
    if (p.exclude_outside && sum != 0.0f) {
      for (int m = 0; m < 4; ++m) t.w[m] /= sum;
    }
  }
  taps[e] = t;
}

struct TableBody {
  TableParams p;
  int64_t* offsets;
  Taps* taps;
  __host__ __device__ __forceinline__ void operator()(int64_t e) const { table_entry(p, e, offsets, taps); }
};

// ---- nearest -----------------------------------------------------------------------------------

// Output axes in memory order; an active axis reads its table, a passthrough axis c * stride.
struct NearestMap {
  int rank = 0;
  IndexDiv div[kMaxDims];
  int64_t stride[kMaxDims] = {};
  const int64_t* table[kMaxDims] = {};
};

template <bool k32>
__host__ __device__ __forceinline__ int64_t nearest_offset(const NearestMap& m, int64_t i) {
  int64_t rest = i, off = 0;
  KILN_UNROLL
  for (int k = kMaxDims - 1; k >= 0; --k) {
    if (k < m.rank) {
      int64_t c = rest;
      if (k > 0) {
        const int64_t q = m.div[k].template div<k32>(rest);
        c = rest - q * m.div[k].d;
        rest = q;
      }
      off += m.table[k] ? cuda::load_ro(m.table[k] + c) : c * m.stride[k];
    }
  }
  return off;
}

template <typename W, bool k32>
struct NearestBody {
  const W* src;
  W* dst;
  NearestMap m;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    dst[i] = cuda::load_ro(src + nearest_offset<k32>(m, i));
  }
};

// ---- linear / cubic ----------------------------------------------------------------------------

// Passthrough axes as a strided map (active axes have stride 0); active axis slot a has
// coordinate (i / inner[a]) % extent[a] and its table. Offsets are in elements; index i counts
// groups of V elements along the innermost axis (V > 1 only when that axis is passthrough).
struct InterpMap {
  cuda::DeviceMap pass;
  int nactive = 0;
  IndexDiv inner[kMaxDims], extent[kMaxDims];
  const Taps* table[kMaxDims] = {};
};

template <typename T, int V>
__host__ __device__ __forceinline__ void load_vec(const T* p, float* v) {
  if constexpr (V == 4 && sizeof(T) == 4) {
    const float4 q = cuda::load_ro(reinterpret_cast<const float4*>(p));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else if constexpr (V == 4) {
    const uint2 q = cuda::load_ro(reinterpret_cast<const uint2*>(p));
    const __half2 a = *reinterpret_cast<const __half2*>(&q.x), b = *reinterpret_cast<const __half2*>(&q.y);
    v[0] = __low2float(a), v[1] = __high2float(a), v[2] = __low2float(b), v[3] = __high2float(b);
  } else {
    v[0] = cuda::to_float(cuda::load_ro(p));
  }
}

template <typename T, int V>
__host__ __device__ __forceinline__ void store_vec(T* p, const float* v) {
  if constexpr (V == 4 && sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (V == 4) {
    uint2 q;
    *reinterpret_cast<__half2*>(&q.x) = __floats2half2_rn(v[0], v[1]);
    *reinterpret_cast<__half2*>(&q.y) = __floats2half2_rn(v[2], v[3]);
    *reinterpret_cast<uint2*>(p) = q;
  } else {
    *p = cuda::from_float<T>(v[0]);
  }
}

template <bool k32>
__host__ __device__ __forceinline__ int64_t active_coord(const InterpMap& m, int a, int64_t i) {
  const int64_t q = m.inner[a].template div<k32>(i);
  return q - m.extent[a].template div<k32>(q) * m.extent[a].d;
}

constexpr int pow_int(int b, int e) { return e == 0 ? 1 : b * pow_int(b, e - 1); }

// One output group: kActive > 0 unrolls the taps of that many active axes; 0 loops over any
// number at run time.
template <typename T, int V, int kTaps, int kActive, bool k32>
__host__ __device__ __forceinline__ void interp_element(const T* __restrict__ src, T* __restrict__ dst,
                                                        const InterpMap& m, int64_t i) {
  const int64_t base = cuda::map_offset<k32, kMaxDims>(m.pass, i);
  float acc[V];
  for (int l = 0; l < V; ++l) acc[l] = 0.0f;
  float x[V];
  if constexpr (kActive > 0) {
    float w[kActive][kTaps];
    int64_t off[kActive][kTaps];
    KILN_UNROLL
    for (int a = 0; a < kActive; ++a) {
      const Taps* e = m.table[a] + active_coord<k32>(m, a, i);
      KILN_UNROLL
      for (int t = 0; t < kTaps; ++t) {
        w[a][t] = e->w[t];
        off[a][t] = e->off[t];
      }
    }
    KILN_UNROLL
    for (int combo = 0; combo < pow_int(kTaps, kActive); ++combo) {
      float wt = 1.0f;
      int64_t o = base;
      int r = combo;
      KILN_UNROLL
      for (int a = 0; a < kActive; ++a) {
        wt *= w[a][r % kTaps];
        o += off[a][r % kTaps];
        r /= kTaps;
      }
      if (wt != 0.0f) {  // the CPU drops zero-weight taps (0 * inf would be NaN)
        load_vec<T, V>(src + o, x);
        for (int l = 0; l < V; ++l) acc[l] += wt * x[l];
      }
    }
  } else {
    int combos = 1;
    for (int a = 0; a < m.nactive; ++a) combos *= kTaps;
    for (int combo = 0; combo < combos; ++combo) {
      float wt = 1.0f;
      int64_t o = base;
      int r = combo;
      for (int a = 0; a < m.nactive; ++a) {
        const Taps& e = m.table[a][active_coord<k32>(m, a, i)];
        wt *= e.w[r % kTaps];
        o += e.off[r % kTaps];
        r /= kTaps;
      }
      if (wt != 0.0f) {
        load_vec<T, V>(src + o, x);
        for (int l = 0; l < V; ++l) acc[l] += wt * x[l];
      }
    }
  }
  store_vec<T, V>(dst + i * V, acc);
}

template <typename T, int V, int kTaps, int kActive, bool k32>
struct InterpBody {
  const T* src;
  T* dst;
  InterpMap m;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    interp_element<T, V, kTaps, kActive, k32>(src, dst, m, i);
  }
};

// Picks the instantiation: unrolled taps for 1-3 active axes, else the run-time loop.
template <typename T, int V, int kTaps>
void launch_interp_body(const T* src, T* dst, const InterpMap& m, int64_t n, cudaStream_t stream) {
  const bool k32 = n < cuda::kFast32Limit;
  if (k32 && m.nactive == 1) return cuda::launch_for_each(InterpBody<T, V, kTaps, 1, true>{src, dst, m}, n, stream);
  if (k32 && m.nactive == 2) return cuda::launch_for_each(InterpBody<T, V, kTaps, 2, true>{src, dst, m}, n, stream);
  if (k32 && m.nactive == 3) return cuda::launch_for_each(InterpBody<T, V, kTaps, 3, true>{src, dst, m}, n, stream);
  if constexpr (V == 1) {
    if (k32) return cuda::launch_for_each(InterpBody<T, 1, kTaps, 0, true>{src, dst, m}, n, stream);
    return cuda::launch_for_each(InterpBody<T, 1, kTaps, 0, false>{src, dst, m}, n, stream);
  } else {
    throw Error("Resize (CUDA): internal: no vectorized kernel for " + std::to_string(m.nactive) + " resized axes");
  }
}

// ---- host side ---------------------------------------------------------------------------------

// Everything prepare() derives from the shapes, in memory order.
struct ResizeGeometry {
  std::vector<ResizeAxis> axis;  // resize_axes, in memory order
  std::vector<int64_t> out, in, in_stride;
  std::vector<int> active;  // memory axes that are resized
  int64_t count = 0;
  bool inner_passthrough = false;
};

class ResizeCuda : public Kernel {
 public:
  explicit ResizeCuda(const ResizeParams& params) : attrs_(params) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const TensorDesc& x = inputs.at(0);
    const TensorDesc& y = outputs.at(0);
    const int rank = x.dims.rank();
    const bool given = inputs.size() > 1 && inputs[1].present && inputs[1].dims.volume() > 0;
    if (given && !inputs[1].value) throw Error("Resize (CUDA): scales must be known on the host");
    const std::vector<ResizeAxis> axes =
        resize_axes(x.dims, y.dims, given ? inputs[1].value->to_double() : std::vector<double>{});
    geo_ = ResizeGeometry{};
    const auto order = cuda::memory_order(rank, x.format);
    for (int a : order) geo_.axis.push_back(axes[static_cast<size_t>(a)]);
    for (const ResizeAxis& a : geo_.axis) {
      geo_.out.push_back(a.out);
      geo_.in.push_back(a.in);
    }
    geo_.in_stride = row_major_strides(geo_.in);
    for (int m = 0; m < rank; ++m) {
      if (!geo_.axis[static_cast<size_t>(m)].identity()) geo_.active.push_back(m);
    }
    geo_.count = y.dims.volume();
    geo_.inner_passthrough = rank > 0 && (geo_.active.empty() || geo_.active.back() != rank - 1);
    elem_ = data_type_size(x.type);
    type_ = x.type;
    int64_t entries = 0;
    for (int a : geo_.active) entries += geo_.out[static_cast<size_t>(a)];
    workspace_ = geo_.count == 0 || geo_.active.empty()
                     ? 0
                     : static_cast<size_t>(entries) * (attrs_.is_nearest() ? sizeof(int64_t) : sizeof(Taps));
  }

  size_t workspace_size() const override { return workspace_; }

  void execute(const KernelContext& ctx) override {
    if (geo_.count == 0) return;
    const void* src = ctx.inputs.at(0).data;
    void* dst = ctx.outputs.at(0).data;
    const cudaStream_t stream = cuda::stream_of(ctx);
    if (geo_.active.empty()) {
      cuda::copy_async(dst, src, static_cast<size_t>(geo_.count) * elem_, stream);
      return;
    }
    if (!ctx.workspace || ctx.workspace_size < workspace_) throw Error("Resize (CUDA): missing workspace");
    if (attrs_.is_nearest()) {
      run_nearest(src, dst, ctx.workspace, stream);
    } else {
      run_interp(src, dst, ctx.workspace, stream);
    }
  }

 private:
  // Writes the tables of the active axes (offset units: `unit` elements; innermost extent /v).
  void enqueue_tables(void* workspace, int64_t unit, cudaStream_t stream) const {
    TableParams p;
    p.mode = attrs_.mode;
    p.coord = attrs_.coord;
    p.nearest = attrs_.nearest;
    p.cubic_a = static_cast<float>(attrs_.cubic_a);
    p.exclude_outside = attrs_.exclude_outside;
    for (int a : geo_.active) {
      const auto u = static_cast<size_t>(a);
      TableAxis& t = p.axis[p.naxes++];
      t.scale = geo_.axis[u].scale;
      t.out_len = static_cast<float>(geo_.out[u]);
      t.in_len = static_cast<float>(geo_.in[u]);
      t.resized_len = geo_.axis[u].resized_len;
      t.in_extent = geo_.in[u];
      t.stride = geo_.in_stride[u] / unit;
      t.first = p.total;
      p.total += geo_.out[u];
    }
    cuda::launch_for_each(TableBody{p, static_cast<int64_t*>(workspace), static_cast<Taps*>(workspace)}, p.total,
                          stream);
  }

  void run_nearest(const void* src, void* dst, void* workspace, cudaStream_t stream) const {
    const int rank = static_cast<int>(geo_.out.size());
    const size_t w = geo_.inner_passthrough ? cuda::vector_bytes(elem_, {geo_.out.back()}, {src, dst}) : elem_;
    const int64_t f = static_cast<int64_t>(w / elem_);
    enqueue_tables(workspace, f, stream);
    NearestMap m;
    m.rank = rank;
    const auto* table = static_cast<const int64_t*>(workspace);
    int64_t first = 0;
    for (int k = 0; k < rank; ++k) {
      const auto u = static_cast<size_t>(k);
      const int64_t extent = k == rank - 1 ? geo_.out[u] / f : geo_.out[u];
      m.div[k] = IndexDiv(extent);
      const bool active = std::find(geo_.active.begin(), geo_.active.end(), k) != geo_.active.end();
      if (active) {
        m.table[k] = table + first;
        first += geo_.out[u];
      } else {
        m.stride[k] = k == rank - 1 ? 1 : geo_.in_stride[u] / f;
      }
    }
    const int64_t n = geo_.count / f;
    cuda::dispatch_bytes(w, "Resize", [&](auto tag) {
      using W = typename decltype(tag)::type;
      const auto* s = static_cast<const W*>(src);
      auto* d = static_cast<W*>(dst);
      if (n < cuda::kFast32Limit) {
        cuda::launch_for_each(NearestBody<W, true>{s, d, m}, n, stream);
      } else {
        cuda::launch_for_each(NearestBody<W, false>{s, d, m}, n, stream);
      }
    });
  }

  void run_interp(const void* src, void* dst, void* workspace, cudaStream_t stream) const {
    const int rank = static_cast<int>(geo_.out.size());
    // Groups of 4 along a passthrough innermost axis (unrolled kernels only: fewer than 2^31 groups).
    const int64_t v = geo_.inner_passthrough && geo_.out.back() % 4 == 0 && geo_.count < cuda::kFast32Limit &&
                              geo_.active.size() <= 3 && cuda::vector_bytes(elem_, {}, {src, dst}) >= 4 * elem_
                          ? 4
                          : 1;
    enqueue_tables(workspace, 1, stream);
    // Output extents in index units (the innermost axis counts groups of v).
    std::vector<int64_t> ext = geo_.out;
    ext.back() /= v;
    InterpMap m;
    cuda::StridedMap pass;
    for (int k = 0; k < rank; ++k) {
      const auto u = static_cast<size_t>(k);
      const bool active = std::find(geo_.active.begin(), geo_.active.end(), k) != geo_.active.end();
      pass.push(ext[u], active ? 0 : (k == rank - 1 ? v : geo_.in_stride[u]));
    }
    m.pass = cuda::device_map(pass);  // not simplified: active axes must keep their place
    const auto* table = static_cast<const Taps*>(workspace);
    int64_t first = 0;
    for (int a : geo_.active) {
      int64_t inner = 1;
      for (int k = a + 1; k < rank; ++k) inner *= ext[static_cast<size_t>(k)];
      m.inner[m.nactive] = IndexDiv(inner);
      m.extent[m.nactive] = IndexDiv(ext[static_cast<size_t>(a)]);
      m.table[m.nactive] = table + first;
      first += geo_.out[static_cast<size_t>(a)];
      ++m.nactive;
    }
    const int64_t n = geo_.count / v;
    const bool cubic = attrs_.mode == InterpolationMode::kCubic;
    if (type_ == DataType::kFloat32) {
      launch_interp(static_cast<const float*>(src), static_cast<float*>(dst), m, n, v, cubic, stream);
    } else {
      launch_interp(static_cast<const __half*>(src), static_cast<__half*>(dst), m, n, v, cubic, stream);
    }
  }

  template <typename T>
  static void launch_interp(const T* src, T* dst, const InterpMap& m, int64_t n, int64_t v, bool cubic,
                            cudaStream_t stream) {
    if (cubic) {
      if (v == 4) return launch_interp_body<T, 4, 4>(src, dst, m, n, stream);
      return launch_interp_body<T, 1, 4>(src, dst, m, n, stream);
    }
    if (v == 4) return launch_interp_body<T, 4, 2>(src, dst, m, n, stream);
    launch_interp_body<T, 1, 2>(src, dst, m, n, stream);
  }

  ResizeParams attrs_;
  ResizeGeometry geo_;
  size_t elem_ = 1;
  DataType type_ = DataType::kFloat32;
  size_t workspace_ = 0;
};

bool supports_resize(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || layer.num_outputs() < 1 || !layer.output(0)) return false;
  const TensorDesc& x = inputs[0];
  if (layer.output(0)->format() != x.format) return false;
  if (x.format == TensorFormat::kChannelsLast && x.dims.rank() < 3) return false;
  // Non-empty scales must be known on the host (a dynamic count is never empty).
  if (inputs.size() > 1 && inputs[1].present && !inputs[1].value &&
      (inputs[1].dims.is_dynamic() || inputs[1].dims.volume() > 0)) {
    return false;
  }
  if (params_of<ResizeParams>(layer).is_nearest()) {
    const size_t e = data_type_size(x.type);
    return e == 1 || e == 2 || e == 4 || e == 8;
  }
  return cuda::is_cuda_float(x.type);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerResize, "cuda", 10, supports_resize, [](const Layer& layer) {
                                   return std::make_unique<ResizeCuda>(params_of<ResizeParams>(layer));
                                 }});

}  // namespace kiln
