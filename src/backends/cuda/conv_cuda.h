// Host-side pieces shared by the CUDA tactics of Convolution and Deconvolution: the geometry of
// one execution, the common supports() checks, kiln's direct (gather) kernels used by the "cuda"
// tactics, the weight re-layout for channels-last cuDNN filters, and a small owner of device
// memory. Declarations only (g++-compatible); the definitions live in conv_cuda.cu, the cuDNN
// tactics in conv_cudnn.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"

namespace kiln::cuda {

using Spatial3 = std::array<int64_t, 3>;

// Geometry of one (de)convolution execution. Spatial lists are right-aligned in 3 slots
// (1-D: {1, 1, L}; 2-D: {1, H, W}) with neutral values (extent 1, stride 1, pad 0, dilation 1) in
// the unused leading slots, so that a 1-D layer is also a 2-D one with H = 1.
struct ConvShape {
  bool deconv = false;
  int spatial_rank = 2;  // k = 1..3
  DataType type = DataType::kFloat32;
  TensorFormat format = TensorFormat::kLinear;  // of x, y and the residual
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  Spatial3 in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, pad_begin{0, 0, 0}, pad_end{0, 0, 0},
      dilation{1, 1, 1}, output_padding{0, 0, 0};

  int64_t kernel_volume() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t in_volume() const { return in[0] * in[1] * in[2]; }
  int64_t out_volume() const { return out[0] * out[1] * out[2]; }
};

// Reads the layer's attributes and the shapes of x (input 0), w (input 1) and y (output 0).
// Throws kiln::Error naming the layer when they are inconsistent.
ConvShape make_conv_shape(const Layer& layer, const std::vector<TensorDesc>& inputs,
                          const std::vector<TensorDesc>& outputs, bool deconv);

// The checks every CUDA (de)convolution tactic shares: x of rank 3..5; every present input
// float32 or float16 of x's type; w and b kLinear; x kLinear, or kChannelsLast when
// allow_channels_last; the residual (Convolution input 3) in x's format; a known activation.
bool conv_operands_supported(const Layer& layer, const std::vector<TensorDesc>& inputs, bool allow_channels_last);

// The layer's fused post-op, or a disabled one when `activation` names no known kind (the
// schema rejects that earlier; supports() declines it).
PostOp conv_post_op(const Layer& layer);

// kiln's direct kernel: one thread per output element gathering over its input channels and
// taps (a transposed convolution gathers the taps that reach it). Handles every geometry, both
// formats, float32/float16, bias, residual (Convolution only; may be null) and the post-op.
void launch_conv_direct(const ConvShape& shape, const void* x, const void* w, const void* bias, const void* residual,
                        void* y, const PostOp& post, cudaStream_t stream);

// Weights [K0, K1, S] (kiln's linear filter, S = the kernel volume) to [K0, S, K1], the
// channels-last (KRSC) filter layout cuDNN wants with NHWC data. Device version (enqueued on
// `stream`) and host version (for constant weights, once per prepare()).
void launch_weights_to_channels_last(size_t element_size, int64_t k0, int64_t k1, int64_t spatial, const void* src,
                                     void* dst, cudaStream_t stream);
void weights_to_channels_last_host(size_t element_size, int64_t k0, int64_t k1, int64_t spatial, const void* src,
                                   void* dst);

// Device memory owned by a kernel object (allocated in prepare(), freed with the object).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  // Makes the buffer at least `bytes` large (contents are lost when it grows).
  void reserve(size_t bytes);
  void reset();
  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Synchronous copies for prepare(): on a private non-blocking stream that is waited for, so
// that the data is in place before any later kernel on any stream reads it (a plain cudaMemcpy
// or cudaMemset may return before the transfer lands, and kiln's streams do not order against
// the legacy default stream).
void upload_now(void* dst, const void* src, size_t bytes);
void zero_now(void* dst, size_t bytes);

// Bytes rounded up to the 256-byte granule used to split one workspace into several buffers.
inline size_t workspace_granule(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace kiln::cuda
