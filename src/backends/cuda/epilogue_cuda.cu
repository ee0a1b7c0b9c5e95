// Kernels of the (de)convolution epilogue declared in epilogue_cuda.h: y = act(src + bias[c] +
// residual), in place or from a shifted/clipped source window. Everything computes in float;
// float16 tensors are converted on load and store.
//
// The in-place form is the hot one (after every cuDNN call that could not fuse the post-op): it
// works on packs of 4 elements (16-byte float4 / 8-byte half x4 accesses) when the element count,
// the channel grouping and the pointers allow it, and uses 32-bit index math when the tensor has
// fewer than 2^31 elements. The shifted form decomposes every index (it runs for asymmetric pads
// and transposed-convolution crops only).
#include <cstdint>
#include <string>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/device_math.cuh"
#include "src/backends/cuda/epilogue_cuda.h"

namespace kiln::cuda {
namespace {

template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

// Packs of 4 consecutive elements share one channel (linear: spatial % 4 == 0) or hold 4
// consecutive channels (channels-last: channels % 4 == 0).
template <typename T, typename I>
__global__ void epilogue_in_place_vec4(T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ residual,
                                       I packs, I spatial, I channels, bool channels_last, DevicePostOp post) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += step) {
    const I i = p * 4;
    Pack4<T> v = reinterpret_cast<const Pack4<T>*>(y)[p];
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (bias) {
      if (channels_last) {
        const I c = i % channels;
#pragma unroll
        for (int k = 0; k < 4; ++k) b[k] = to_float(bias[c + k]);
      } else {
        const float bc = to_float(bias[(i / spatial) % channels]);
#pragma unroll
        for (int k = 0; k < 4; ++k) b[k] = bc;
      }
    }
    Pack4<T> r{};
    if (residual) r = reinterpret_cast<const Pack4<T>*>(residual)[p];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float t = to_float(v.v[k]) + b[k];
      if (residual) t += to_float(r.v[k]);
      v.v[k] = from_float<T>(post.apply(t));
    }
    reinterpret_cast<Pack4<T>*>(y)[p] = v;
  }
}

template <typename T, typename I>
__global__ void epilogue_in_place(T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ residual,
                                  I count, I spatial, I channels, bool channels_last, DevicePostOp post) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    float t = to_float(y[i]);
    if (bias) t += to_float(bias[channels_last ? i % channels : (i / spatial) % channels]);
    if (residual) t += to_float(residual[i]);
    y[i] = from_float<T>(post.apply(t));
  }
}

// Geometry of the shifted form, passed by value.
struct ShiftGeometry {
  int64_t count, channels;
  int64_t out[3], src[3], shift[3];
  bool channels_last;
};

template <typename T, typename I>
__global__ void epilogue_shifted(ShiftGeometry g, const T* __restrict__ src, const T* __restrict__ bias,
                                 const T* __restrict__ residual, T* __restrict__ y, DevicePostOp post) {
  const I count = static_cast<I>(g.count), channels = static_cast<I>(g.channels);
  const I out0 = static_cast<I>(g.out[0]), out1 = static_cast<I>(g.out[1]), out2 = static_cast<I>(g.out[2]);
  const I src0 = static_cast<I>(g.src[0]), src1 = static_cast<I>(g.src[1]), src2 = static_cast<I>(g.src[2]);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    I rest = i, c = 0, o0, o1, o2;
    if (g.channels_last) {
      c = rest % channels;
      rest /= channels;
    }
    o2 = rest % out2;
    rest /= out2;
    o1 = rest % out1;
    rest /= out1;
    o0 = rest % out0;
    rest /= out0;
    if (!g.channels_last) {
      c = rest % channels;
      rest /= channels;
    }
    const I n = rest;
    const I s0 = o0 + static_cast<I>(g.shift[0]), s1 = o1 + static_cast<I>(g.shift[1]),
            s2 = o2 + static_cast<I>(g.shift[2]);
    float t = 0.0f;
    if (s0 >= 0 && s0 < src0 && s1 >= 0 && s1 < src1 && s2 >= 0 && s2 < src2) {
      const I at = g.channels_last ? (((n * src0 + s0) * src1 + s1) * src2 + s2) * channels + c
                                   : (((n * channels + c) * src0 + s0) * src1 + s1) * src2 + s2;
      t = to_float(src[at]);
    }
    if (bias) t += to_float(bias[c]);
    if (residual) t += to_float(residual[i]);
    y[i] = from_float<T>(post.apply(t));
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename T>
void launch_typed(const EpilogueArgs& a, cudaStream_t stream) {
  const int64_t spatial = a.out[0] * a.out[1] * a.out[2];
  const int64_t count = a.batch * a.channels * spatial;
  if (count == 0) return;
  const bool channels_last = a.format == TensorFormat::kChannelsLast;
  const DevicePostOp post = device_post_op(a.post);
  T* y = static_cast<T*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
  const T* residual = static_cast<const T*>(a.residual);
  const bool small = count < (int64_t{1} << 31);

  if (a.source == nullptr || a.source == a.y) {
    const bool packable = count % 4 == 0 && (!bias || (channels_last ? a.channels % 4 == 0 : spatial % 4 == 0)) &&
                          aligned(y, 4 * sizeof(T)) && (!residual || aligned(residual, 4 * sizeof(T)));
    if (packable) {
      const int64_t packs = count / 4;
      if (small) {
        epilogue_in_place_vec4<T, uint32_t><<<grid_for(packs), kBlock, 0, stream>>>(
            y, bias, residual, static_cast<uint32_t>(packs), static_cast<uint32_t>(spatial),
            static_cast<uint32_t>(a.channels), channels_last, post);
      } else {
        epilogue_in_place_vec4<T, uint64_t><<<grid_for(packs), kBlock, 0, stream>>>(
            y, bias, residual, static_cast<uint64_t>(packs), static_cast<uint64_t>(spatial),
            static_cast<uint64_t>(a.channels), channels_last, post);
      }
    } else if (small) {
      epilogue_in_place<T, uint32_t><<<grid_for(count), kBlock, 0, stream>>>(
          y, bias, residual, static_cast<uint32_t>(count), static_cast<uint32_t>(spatial),
          static_cast<uint32_t>(a.channels), channels_last, post);
    } else {
      epilogue_in_place<T, uint64_t><<<grid_for(count), kBlock, 0, stream>>>(
          y, bias, residual, static_cast<uint64_t>(count), static_cast<uint64_t>(spatial),
          static_cast<uint64_t>(a.channels), channels_last, post);
    }
    KILN_CUDA_CHECK_LAUNCH();
    return;
  }

  ShiftGeometry g{};
  g.count = count;
  g.channels = a.channels;
  g.channels_last = channels_last;
  for (int i = 0; i < 3; ++i) {
    const auto u = static_cast<size_t>(i);
    g.out[i] = a.out[u];
    g.src[i] = a.src[u];
    g.shift[i] = a.shift[u];
  }
  const int64_t src_count = a.batch * a.channels * a.src[0] * a.src[1] * a.src[2];
  const T* src = static_cast<const T*>(a.source);
  if (small && src_count < (int64_t{1} << 31)) {
    epilogue_shifted<T, int32_t><<<grid_for(count), kBlock, 0, stream>>>(g, src, bias, residual, y, post);
  } else {
    epilogue_shifted<T, int64_t><<<grid_for(count), kBlock, 0, stream>>>(g, src, bias, residual, y, post);
  }
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_epilogue(const EpilogueArgs& args, cudaStream_t stream) {
  if (epilogue_is_identity(args)) return;
  switch (args.type) {
    case DataType::kFloat32:
      launch_typed<float>(args, stream);
      return;
    case DataType::kFloat16:
      launch_typed<__half>(args, stream);
      return;
    default:
      break;
  }
  throw Error(std::string("CUDA convolution epilogue: unsupported data type ") + to_string(args.type) +
              " (float32 and float16 only)");
}

}  // namespace kiln::cuda
