// Host-side pieces shared by the CUDA tactics of Convolution and Deconvolution: the geometry of
// one execution, the common supports() checks, kiln's direct (gather) kernels used by the "cuda"
// tactics, the weight re-layout for channels-last cuDNN filters, the engine-wide cache of
// prepared (re-laid-out, uploaded) constant weights, and a small owner of device memory.
// Declarations only (g++-compatible); the definitions live in conv_cuda.cu, the library tactics
// in conv_cudnn.cpp, conv_cudnn_graph.cpp and conv_cublaslt.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"
#include "src/backends/cuda/epilogue_cuda.h"

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

// The epilogue of a (de)convolution's output y (in place, nothing applied yet): its type,
// format and geometry from the shape. Callers set what is left to apply (bias, residual, post-op).
inline EpilogueArgs output_epilogue(const ConvShape& s, void* y) {
  EpilogueArgs e;
  e.type = s.type;
  e.format = s.format;
  e.batch = s.batch;
  e.channels = s.out_channels;
  e.out = s.out;
  e.y = y;
  return e;
}

// The layer's ConvParams and conv_geometry (src/ir/conv_params.h) for the shapes of x (input 0)
// and w (input 1), checked against y (output 0). Throws kiln::Error naming the layer when they are
// inconsistent.
ConvShape make_conv_shape(const Layer& layer, const std::vector<TensorDesc>& inputs,
                          const std::vector<TensorDesc>& outputs, bool deconv);

// The checks every CUDA (de)convolution tactic shares: x of rank 3..5; every present input
// float32 or float16 of x's type; w and b kLinear; x kLinear, or kChannelsLast when
// allow_channels_last; the residual (Convolution input 3) in x's format; valid ConvParams.
bool conv_operands_supported(const Layer& layer, const std::vector<TensorDesc>& inputs, bool allow_channels_last);

// The layer's fused post-op (its ConvParams').
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
// That private non-blocking stream of the calling thread (created on first use), for other
// prepare-time work that must be waited for before execute() runs.
cudaStream_t prepare_stream();

// Bytes rounded up to the 256-byte granule used to split one workspace into several buffers.
inline size_t workspace_granule(size_t bytes) { return (bytes + 255) / 256 * 256; }

// ---- constant weights prepared once per engine ----------------------------------------------
//
// The runtime keeps one prepared kernel object per (step, input shape) per execution context, so
// a device copy of the weights owned by each kernel object would multiply weight memory by
// shapes x contexts. Tactics that need their constant weights in another layout ask this cache
// instead: one device copy per (source storage, layout, type, dims, device), held by the kernels
// through std::shared_ptr and by the cache through std::weak_ptr, so that it is freed with its
// last user. The source is identified by its storage (HostTensor::data(), which copies of a
// HostTensor share) and a hash of its bytes, so that storage freed and reallocated at the same
// address while an old copy lives can never hand out stale weights. The cache's mutex is taken
// only here, i.e. in prepare(), never in execute().

enum class WeightLayout : int32_t {
  kChannelsLast,  // [K0, K1, S] -> [K0, S, K1]: the KRSC / KDRSC filter cuDNN takes with NHWC data
};

// An immutable device copy of constant weights (freed with the last shared_ptr).
class PreparedWeights {
 public:
  PreparedWeights(const PreparedWeights&) = delete;
  PreparedWeights& operator=(const PreparedWeights&) = delete;
  ~PreparedWeights();
  const void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  friend std::shared_ptr<const PreparedWeights> prepared_weights(const HostTensor&, WeightLayout);
  PreparedWeights() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The device copy of `value` (a constant [K0, K1, spatial...] filter of a float type) in `layout`
// on the current device: made (converted on the host, uploaded and waited for) on first use,
// shared afterwards. Thread-safe; for prepare() only (it may allocate, copy and synchronize).
std::shared_ptr<const PreparedWeights> prepared_weights(const HostTensor& value, WeightLayout layout);

// Bytes of prepared weights alive now (tests check that kernel objects share them).
size_t prepared_weights_live_bytes();

// The channels-last (KRSC) filter of one cuDNN (de)convolution kernel object: the shared prepared
// copy when the weights are a constant whose value prepare() sees, otherwise a buffer of the
// kernel's own that execute() converts into on the stream at every run (weights computed by
// earlier layers).
class ChannelsLastFilter {
 public:
  // `w` is the weights' description (input 1); `kernel_volume` the product of the kernel's spatial
  // extents. May allocate and upload.
  void prepare(const TensorDesc& w, int64_t kernel_volume);
  // The filter for this run: the prepared copy, or `weights` converted on `stream` (enqueued).
  const void* get(const void* weights, cudaStream_t stream);
  bool shared() const { return shared_ != nullptr; }

 private:
  std::shared_ptr<const PreparedWeights> shared_;
  DeviceBuffer own_;
  int64_t k0_ = 0, k1_ = 0, spatial_ = 0;
  size_t element_size_ = 0;
};

}  // namespace kiln::cuda
