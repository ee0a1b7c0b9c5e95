// kiln's CUDA kernels for Pooling (tactic "cuda"): max and average over 1-3 spatial dims with
// strides, asymmetric pads, dilations, ceil_mode (through the output dims shape inference chose:
// a window always starts inside the input or the left padding), count_include_pad and global
// pooling, with exactly the CPU reference's semantics (src/backends/cpu/pooling_cpu.cpp):
//   - padding never takes part in a max, and in an average only through the divisor;
//   - count_include_pad=0 divides by the in-bounds taps, =1 by the taps inside the padded extent
//     [-pad_begin, in + pad_end) (a ceil_mode window hanging past the end padding is clipped);
//   - a NaN in a max window propagates; a max over no element is the type's lowest finite value,
//     an average over no element 0.
// Types: float32, float16 (float arithmetic), and int8/uint8 for max. Layout: x and y
// contiguous, both kLinear (NCDHW) or both kChannelsLast (NDHWC); no alignment assumptions.
//
// Windowed pooling runs one thread per output element (channels-last: channel innermost, so a
// warp reads neighbouring channels; 16 bytes of channels per thread when C allows), with the valid tap range computed
// per dim instead of tested per tap and 32-bit index math when the tensors are small enough. Global pooling is a
// reduction: linear format, a warp (or a whole block for large planes) per (n, c) plane; channels-last, a 32x8 block
// per (n, 32 channels) with the 8 rows splitting the spatial positions.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/ir/op_params.h"
#include "src/ir/pool_params.h"

namespace kiln::cuda {
namespace {

// ---- element helpers ------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float load_f(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float load_f<__half>(__half v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T store_f(float v) {
  return static_cast<T>(v);  // integer max pooling: v is an exact 8-bit value
}
template <>
__device__ __forceinline__ __half store_f<__half>(float v) {
  return __float2half_rn(v);
}

// The value of a max over no element (ONNX Runtime's: the lowest finite value of the type).
template <typename T>
__device__ __forceinline__ float lowest_value();
template <>
__device__ __forceinline__ float lowest_value<float>() {
  return -FLT_MAX;
}
template <>
__device__ __forceinline__ float lowest_value<__half>() {
  return -65504.0f;
}
template <>
__device__ __forceinline__ float lowest_value<int8_t>() {
  return -128.0f;
}
template <>
__device__ __forceinline__ float lowest_value<uint8_t>() {
  return 0.0f;
}

// max that propagates NaN (either operand).
__device__ __forceinline__ float nan_max(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  return b > a ? b : a;
}

// ---- windowed pooling -----------------------------------------------------------------------

// Spatial lists right-aligned in 3 slots (1-D: {1, 1, L}); neutral values in unused slots.
struct PoolGeometry {
  int64_t count = 0, channels = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad_begin[3] = {0, 0, 0},
          pad_end[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};
  bool channels_last = false, count_include_pad = false;
};

// Taps t in [lo, hi) of the window starting at `first` land inside [0, in); `padded` counts the
// taps inside [-pad_begin, in + pad_end) (all start at or after -pad_begin).
template <typename I>
__device__ __forceinline__ void tap_range(I first, I kernel, I dilation, I in, I pad_end, I& lo, I& hi, I& padded) {
  lo = first < 0 ? (-first + dilation - 1) / dilation : 0;
  const I room = in - first;  // positions first + t*d < in  <=>  t < ceil(room / d)
  hi = room <= 0 ? 0 : (room + dilation - 1) / dilation;
  if (hi > kernel) hi = kernel;
  if (lo > hi) lo = hi;
  const I room_padded = in + pad_end - first;
  padded = room_padded <= 0 ? 0 : (room_padded + dilation - 1) / dilation;
  if (padded > kernel) padded = kernel;
}

// kVec consecutive channels per thread (channels-last only, channels % kVec == 0, 16-byte
// aligned tensors): one 16-byte load per tap instead of kVec narrow ones. kVec = 1 otherwise.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

template <typename T, typename I, bool kMax, int kVec>
__global__ void pool_window_kernel(PoolGeometry g, const T* __restrict__ x, T* __restrict__ y) {
  const I count = static_cast<I>(g.count / kVec), channels = static_cast<I>(g.channels);
  const I vchannels = channels / kVec;
  const I in0 = static_cast<I>(g.in[0]), in1 = static_cast<I>(g.in[1]), in2 = static_cast<I>(g.in[2]);
  const I out0 = static_cast<I>(g.out[0]), out1 = static_cast<I>(g.out[1]), out2 = static_cast<I>(g.out[2]);
  const I d0 = static_cast<I>(g.dilation[0]), d1 = static_cast<I>(g.dilation[1]), d2 = static_cast<I>(g.dilation[2]);
  const I in_volume = in0 * in1 * in2;
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    I rest = i, c = 0;
    if (g.channels_last) {
      c = (rest % vchannels) * kVec;
      rest /= vchannels;
    }
    const I o2 = rest % out2;
    rest /= out2;
    const I o1 = rest % out1;
    rest /= out1;
    const I o0 = rest % out0;
    rest /= out0;
    if (!g.channels_last) {
      c = rest % channels;
      rest /= channels;
    }
    const I n = rest;
    const I f0 = o0 * static_cast<I>(g.stride[0]) - static_cast<I>(g.pad_begin[0]);
    const I f1 = o1 * static_cast<I>(g.stride[1]) - static_cast<I>(g.pad_begin[1]);
    const I f2 = o2 * static_cast<I>(g.stride[2]) - static_cast<I>(g.pad_begin[2]);
    I lo0, hi0, p0, lo1, hi1, p1, lo2, hi2, p2;
    tap_range<I>(f0, static_cast<I>(g.kernel[0]), d0, in0, static_cast<I>(g.pad_end[0]), lo0, hi0, p0);
    tap_range<I>(f1, static_cast<I>(g.kernel[1]), d1, in1, static_cast<I>(g.pad_end[1]), lo1, hi1, p1);
    tap_range<I>(f2, static_cast<I>(g.kernel[2]), d2, in2, static_cast<I>(g.pad_end[2]), lo2, hi2, p2);
    // Element (n, c, 0, 0, 0) and the step between spatial positions.
    const T* base = g.channels_last ? x + n * in_volume * channels + c : x + (n * channels + c) * in_volume;
    const I sstep = g.channels_last ? channels : 1;
    float acc[kVec];
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] = kMax ? -INFINITY : 0.0f;
    for (I t0 = lo0; t0 < hi0; ++t0) {
      const I i0 = f0 + t0 * d0;
      for (I t1 = lo1; t1 < hi1; ++t1) {
        const I row = (i0 * in1 + f1 + t1 * d1) * in2;
        for (I t2 = lo2; t2 < hi2; ++t2) {
          const Pack<T, kVec> p = *reinterpret_cast<const Pack<T, kVec>*>(base + (row + f2 + t2 * d2) * sstep);
#pragma unroll
          for (int v = 0; v < kVec; ++v) {
            const float e = load_f<T>(p.v[v]);
            acc[v] = kMax ? nan_max(acc[v], e) : acc[v] + e;
          }
        }
      }
    }
    const I taps = (hi0 - lo0) * (hi1 - lo1) * (hi2 - lo2);
    const I divisor = g.count_include_pad ? p0 * p1 * p2 : taps;
    Pack<T, kVec> out;
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      float result;
      if (kMax) {
        result = taps ? acc[v] : lowest_value<T>();
      } else {
        result = divisor ? acc[v] / static_cast<float>(divisor) : 0.0f;
      }
      out.v[v] = store_f<T>(result);
    }
    *reinterpret_cast<Pack<T, kVec>*>(y + i * kVec) = out;
  }
}

// ---- global pooling -------------------------------------------------------------------------

template <bool kMax>
__device__ __forceinline__ float combine(float a, float b) {
  return kMax ? nan_max(a, b) : a + b;
}

template <bool kMax>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = combine<kMax>(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Linear format: kThreads threads (a warp, or the whole 256-thread block) per plane of `spatial`
// contiguous elements.
template <typename T, bool kMax, int kThreads>
__global__ void global_pool_linear_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t spatial) {
  constexpr int kPlanesPerBlock = kBlock / kThreads;
  __shared__ float partial[kBlock / 32];
  const int lane = threadIdx.x % kThreads;
  for (int64_t p0 = static_cast<int64_t>(blockIdx.x) * kPlanesPerBlock; p0 < planes;
       p0 += static_cast<int64_t>(gridDim.x) * kPlanesPerBlock) {
    const int64_t plane = p0 + threadIdx.x / kThreads;
    float acc = kMax ? -INFINITY : 0.0f;
    if (plane < planes) {
      const T* src = x + plane * spatial;
      for (int64_t s = lane; s < spatial; s += kThreads) acc = combine<kMax>(acc, load_f<T>(src[s]));
    }
    acc = warp_reduce<kMax>(acc);
    if (kThreads > 32) {
      if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = acc;
      __syncthreads();
      if (threadIdx.x < 32) {
        acc = threadIdx.x < kBlock / 32 ? partial[threadIdx.x] : (kMax ? -INFINITY : 0.0f);
        acc = warp_reduce<kMax>(acc);
      }
      __syncthreads();  // partial[] is reused by the next plane
    }
    if (lane == 0 && plane < planes) y[plane] = store_f<T>(kMax ? acc : acc / static_cast<float>(spatial));
  }
}

// Channels-last: block (32, 8) per (n, 32 channels); threadIdx.y splits the spatial positions.
template <typename T, bool kMax>
__global__ void global_pool_channels_last_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t channels,
                                                 int64_t spatial) {
  __shared__ float partial[8][33];
  const int64_t n = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = kMax ? -INFINITY : 0.0f;
  if (c < channels) {
    const T* src = x + n * spatial * channels + c;
    for (int64_t s = threadIdx.y; s < spatial; s += 8) acc = combine<kMax>(acc, load_f<T>(src[s * channels]));
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int r = 1; r < 8; ++r) acc = combine<kMax>(acc, partial[r][threadIdx.x]);
    y[n * channels + c] = store_f<T>(kMax ? acc : acc / static_cast<float>(spatial));
  }
}

// ---- the kernel object ----------------------------------------------------------------------

class PoolingCuda : public Kernel {
 public:
  explicit PoolingCuda(const PoolParams& params)
      : is_max_(params.is_max()),
        global_(params.global),
        count_include_pad_(params.count_include_pad),
        params_(params) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    const int k = x.rank() - 2;
    const auto fail = [&](const std::string& why) -> void {
      throw Error("Pooling layer '" + layer.name() + "' (CUDA): " + why);
    };
    if (k < 1 || k > 3 || y.rank() != x.rank() || y[0] != x[0] || y[1] != x[1]) {
      fail("expects x and y of rank 3..5 with equal N and C, got x " + x.to_string() + ", y " + y.to_string());
    }
    kiln::PoolGeometry pg;
    try {
      pg = pool_geometry(params_, x);
    } catch (const Error& e) {
      fail(e.what());
    }
    type_ = inputs[0].type;
    g_ = PoolGeometry{};
    g_.channels = x[1];
    g_.channels_last = inputs[0].format == TensorFormat::kChannelsLast;
    g_.count_include_pad = count_include_pad_;
    batch_ = x[0];
    for (int i = 0; i < k; ++i) {
      const auto u = static_cast<size_t>(i);
      const auto slot = static_cast<size_t>(3 - k + i);
      if (y[i + 2] != pg.out[u]) {
        fail("y " + y.to_string() + " does not have the output size " + std::to_string(pg.out[u]) + " of spatial dim " +
             std::to_string(i));
      }
      g_.in[slot] = pg.in[u];
      g_.out[slot] = pg.out[u];
      g_.kernel[slot] = pg.kernel[u];
      g_.stride[slot] = pg.stride[u];
      g_.dilation[slot] = pg.dilation[u];
      g_.pad_begin[slot] = pg.pad_begin[u];
      g_.pad_end[slot] = pg.pad_end[u];
    }
    g_.count = y.volume();
    in_count_ = x.volume();
    spatial_ = g_.in[0] * g_.in[1] * g_.in[2];
  }

  void execute(const KernelContext& ctx) override {
    switch (type_) {
      case DataType::kFloat32:
        run<float>(ctx);
        return;
      case DataType::kFloat16:
        run<__half>(ctx);
        return;
      case DataType::kInt8:
        run<int8_t>(ctx);
        return;
      case DataType::kUInt8:
        run<uint8_t>(ctx);
        return;
      default:
        break;
    }
    throw Error(std::string("Pooling (CUDA): unsupported data type ") + to_string(type_));
  }

 private:
  template <typename T>
  void run(const KernelContext& ctx) {
    if (g_.count == 0) return;
    if (!is_max_ && !std::is_same_v<T, float> && !std::is_same_v<T, __half>) {
      throw Error("Pooling (CUDA): average pooling expects a floating-point input");
    }
    const cudaStream_t stream = stream_of(ctx);
    const T* x = ctx.inputs[0].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    if (global_) {
      is_max_ ? run_global<T, true>(x, y, stream) : run_global<T, false>(x, y, stream);
    } else if (g_.count < (int64_t{1} << 31) && in_count_ < (int64_t{1} << 31)) {
      is_max_ ? launch_window<T, int32_t, true>(x, y, stream) : launch_window<T, int32_t, false>(x, y, stream);
    } else {
      is_max_ ? launch_window<T, int64_t, true>(x, y, stream) : launch_window<T, int64_t, false>(x, y, stream);
    }
  }

  template <typename T, typename I, bool kMax>
  void launch_window(const T* x, T* y, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    const bool vectorize = g_.channels_last && g_.channels % kVec == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(y) % 16 == 0;
    if (vectorize) {
      pool_window_kernel<T, I, kMax, kVec><<<grid_for(g_.count / kVec), kBlock, 0, stream>>>(g_, x, y);
    } else {
      pool_window_kernel<T, I, kMax, 1><<<grid_for(g_.count), kBlock, 0, stream>>>(g_, x, y);
    }
    KILN_CUDA_CHECK_LAUNCH();
  }

  template <typename T, bool kMax>
  void run_global(const T* x, T* y, cudaStream_t stream) {
    if (g_.channels_last) {
      if (batch_ > 65535) throw Error("Pooling (CUDA): global channels-last pooling supports batch <= 65535");
      const dim3 grid(static_cast<unsigned>((g_.channels + 31) / 32), static_cast<unsigned>(batch_));
      global_pool_channels_last_kernel<T, kMax><<<grid, dim3(32, 8), 0, stream>>>(x, y, g_.channels, spatial_);
    } else {
      const int64_t planes = batch_ * g_.channels;
      if (spatial_ >= 1024) {
        global_pool_linear_kernel<T, kMax, kBlock><<<grid_for(planes, 1), kBlock, 0, stream>>>(x, y, planes, spatial_);
      } else {
        global_pool_linear_kernel<T, kMax, 32>
            <<<grid_for(planes, kBlock / 32), kBlock, 0, stream>>>(x, y, planes, spatial_);
      }
    }
    KILN_CUDA_CHECK_LAUNCH();
  }

  bool is_max_, global_, count_include_pad_;
  PoolParams params_;
  DataType type_ = DataType::kFloat32;
  PoolGeometry g_;
  int64_t batch_ = 0, in_count_ = 0, spatial_ = 1;
};

bool supports_pooling_cuda(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() != 1) return false;
  const TensorDesc& x = inputs[0];
  if (x.dims.rank() < 3 || x.dims.rank() > 5) return false;
  if (x.format != TensorFormat::kLinear && x.format != TensorFormat::kChannelsLast) return false;
  if (!params_of<PoolParams>(layer).is_max()) return is_cuda_float(x.type);
  return is_cuda_float(x.type) || x.type == DataType::kInt8 || x.type == DataType::kUInt8;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerPooling, "cuda", 100, supports_pooling_cuda,
    [](const Layer& layer) { return std::make_unique<PoolingCuda>(params_of<PoolParams>(layer)); }});

}  // namespace kiln::cuda
