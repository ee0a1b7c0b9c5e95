// kiln's own CUDA kernels for Convolution and Deconvolution (tactic "cuda") and the host helpers
// shared with the library tactics (conv_cudnn.cpp, conv_cudnn_graph.cpp, conv_cublaslt.cpp;
// declared in conv_cuda.h), among them the engine-wide cache of prepared constant weights.
//
// The "cuda" tactic is a direct gather: one thread per output element, taps outer and the
// group's input channels inner (contiguous in channels-last memory), float accumulation. It
// handles every geometry the layers allow (1-D/2-D/3-D, groups, dilations, asymmetric pads,
// output_padding, bias, residual, any activation) in both formats, so it is the tactic that is
// always there when cuDNN declines a case; for depthwise layers in channels-last format it is
// also a competitive one (neighbouring threads read neighbouring channels).
// Layout: x, y and the residual contiguous in the shape's format; w [M, C/g, k..] (Convolution)
// or [C, M/g, k..] (Deconvolution) and b [M] contiguous. No alignment assumptions.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "src/backends/cuda/conv_cuda.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/device_math.cuh"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

namespace kiln::cuda {
namespace {

// Geometry of the direct kernel, passed by value.
struct DirectGeometry {
  int64_t count, channels_in, channels_out, cg, mg, in_volume, kernel_volume;
  int64_t in[3], out[3], kernel[3], stride[3], pad[3], dilation[3];
  bool channels_last;
};

// Splits output index i into (n, m, o0, o1, o2) in the tensor's format.
__device__ __forceinline__ void split_output(const DirectGeometry& g, int64_t i, int64_t& n, int64_t& m, int64_t& o0,
                                             int64_t& o1, int64_t& o2) {
  if (g.channels_last) {
    m = i % g.channels_out;
    i /= g.channels_out;
  }
  o2 = i % g.out[2];
  i /= g.out[2];
  o1 = i % g.out[1];
  i /= g.out[1];
  o0 = i % g.out[0];
  i /= g.out[0];
  if (!g.channels_last) {
    m = i % g.channels_out;
    i /= g.channels_out;
  }
  n = i;
}

// Input index feeding output o through tap k along one dim, or -1 when padding / no tap.
template <bool kDeconv>
__device__ __forceinline__ int64_t source_index(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                                                int64_t extent) {
  if (kDeconv) {
    const int64_t t = o + pad - k * dilation;
    if (t < 0 || t % stride != 0) return -1;
    const int64_t i = t / stride;
    return i < extent ? i : -1;
  }
  const int64_t i = o * stride - pad + k * dilation;
  return i >= 0 && i < extent ? i : -1;
}

// Convolution: y[n,m,o] = post(b[m] + sum_{c in group(m), k} x[n,c,o*s-p+k*d] * w[m, c-c0, k] + r[n,m,o]).
// Deconvolution: y[n,m,o] = post(b[m] + sum_{c in group(m), k: o+p-k*d = i*s} x[n,c,i] * w[c, m%Mg, k]).
template <typename T, bool kDeconv>
__global__ void conv_direct_kernel(DirectGeometry g, const T* __restrict__ x, const T* __restrict__ w,
                                   const T* __restrict__ bias, const T* __restrict__ residual, T* __restrict__ y,
                                   DevicePostOp post) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.count; i += step) {
    int64_t n = 0, m = 0, o0 = 0, o1 = 0, o2 = 0;
    split_output(g, i, n, m, o0, o1, o2);
    const int64_t c0 = (m / g.mg) * g.cg;  // first input channel of m's group
    // x offset of (n, c0) and the step between channels.
    const int64_t x_base =
        g.channels_last ? n * g.in_volume * g.channels_in + c0 : (n * g.channels_in + c0) * g.in_volume;
    const int64_t x_cstep = g.channels_last ? 1 : g.in_volume;
    const int64_t x_sstep = g.channels_last ? g.channels_in : 1;  // per spatial position
    // w offset of (channel 0 of the group, tap 0) and the step between channels.
    const int64_t w_base = kDeconv ? (c0 * g.mg + m % g.mg) * g.kernel_volume : m * g.cg * g.kernel_volume;
    const int64_t w_cstep = kDeconv ? g.mg * g.kernel_volume : g.kernel_volume;
    float acc = bias ? to_float(bias[m]) : 0.0f;
    for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
      const int64_t i0 = source_index<kDeconv>(o0, k0, g.stride[0], g.pad[0], g.dilation[0], g.in[0]);
      if (i0 < 0) continue;
      for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
        const int64_t i1 = source_index<kDeconv>(o1, k1, g.stride[1], g.pad[1], g.dilation[1], g.in[1]);
        if (i1 < 0) continue;
        for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
          const int64_t i2 = source_index<kDeconv>(o2, k2, g.stride[2], g.pad[2], g.dilation[2], g.in[2]);
          if (i2 < 0) continue;
          const T* xp = x + x_base + ((i0 * g.in[1] + i1) * g.in[2] + i2) * x_sstep;
          const T* wp = w + w_base + (k0 * g.kernel[1] + k1) * g.kernel[2] + k2;
          for (int64_t c = 0; c < g.cg; ++c) acc += to_float(xp[c * x_cstep]) * to_float(wp[c * w_cstep]);
        }
      }
    }
    if (residual) acc += to_float(residual[i]);
    y[i] = from_float<T>(post.apply(acc));
  }
}

// dst[a, s, b] = src[a, b, s] for [K0, K1, S] -> [K0, S, K1]; E is an integer type of the element size.
template <typename E>
__global__ void weights_to_channels_last_kernel(int64_t k0, int64_t k1, int64_t spatial, const E* __restrict__ src,
                                                E* __restrict__ dst) {
  const int64_t count = k0 * k1 * spatial;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    const int64_t b = i % k1, s = (i / k1) % spatial, a = i / (k1 * spatial);
    dst[i] = src[(a * k1 + b) * spatial + s];
  }
}

template <typename T>
void launch_direct_typed(const ConvShape& s, const DirectGeometry& g, const void* x, const void* w, const void* bias,
                         const void* residual, void* y, const DevicePostOp& post, cudaStream_t stream) {
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  const auto* bt = static_cast<const T*>(bias);
  const auto* rt = static_cast<const T*>(residual);
  auto* yt = static_cast<T*>(y);
  if (s.deconv) {
    conv_direct_kernel<T, true><<<grid_for(g.count), kBlock, 0, stream>>>(g, xt, wt, bt, nullptr, yt, post);
  } else {
    conv_direct_kernel<T, false><<<grid_for(g.count), kBlock, 0, stream>>>(g, xt, wt, bt, rt, yt, post);
  }
  KILN_CUDA_CHECK_LAUNCH();
}

const char* layer_kind(bool deconv) { return deconv ? "Deconvolution" : "Convolution"; }

}  // namespace

ConvShape make_conv_shape(const Layer& layer, const std::vector<TensorDesc>& inputs,
                          const std::vector<TensorDesc>& outputs, bool deconv) {
  const auto fail = [&](const std::string& why) -> void {
    throw Error(std::string(layer_kind(deconv)) + " layer '" + layer.name() + "' (CUDA): " + why);
  };
  if (inputs.size() < 2 || outputs.empty()) fail("expects inputs x and w and one output");
  const Dims& x = inputs[0].dims;
  const Dims& w = inputs[1].dims;
  const Dims& y = outputs[0].dims;
  const int k = x.rank() - 2;
  if (k < 1 || k > 3 || w.rank() != x.rank() || y.rank() != x.rank()) {
    fail("expects x, w and y of equal rank 3..5, got x " + x.to_string() + ", w " + w.to_string() + ", y " +
         y.to_string());
  }
  ConvShape s;
  s.deconv = deconv;
  s.spatial_rank = k;
  s.type = inputs[0].type;
  s.format = inputs[0].format;
  s.batch = x[0];
  s.in_channels = x[1];
  s.out_channels = y[1];
  kiln::ConvGeometry g;
  try {
    g = conv_geometry(params_of<ConvParams>(layer), x, w);
  } catch (const Error& e) {
    fail(e.what());
  }
  s.group = g.group;
  if (y[0] != x[0] || y[1] != g.out_channels) {
    fail("weights " + w.to_string() + " do not match x " + x.to_string() + ", y " + y.to_string() + " with group " +
         std::to_string(s.group));
  }
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    const auto slot = static_cast<size_t>(3 - k + i);
    if (y[i + 2] != g.out[u]) {
      fail("output spatial dim " + std::to_string(i) + " is " + std::to_string(y[i + 2]) + " but the attributes give " +
           std::to_string(g.out[u]) + " (x " + x.to_string() + ", w " + w.to_string() + ")");
    }
    s.in[slot] = g.in[u];
    s.out[slot] = g.out[u];
    s.kernel[slot] = g.kernel[u];
    s.stride[slot] = g.stride[u];
    s.dilation[slot] = g.dilation[u];
    s.pad_begin[slot] = g.pad_begin[u];
    s.pad_end[slot] = g.pad_end[u];
    s.output_padding[slot] = g.output_padding[u];
  }
  return s;
}

bool conv_operands_supported(const Layer& layer, const std::vector<TensorDesc>& inputs, bool allow_channels_last) {
  if (inputs.size() < 2 || inputs.size() > 4) return false;
  const TensorDesc& x = inputs[0];
  if (!is_cuda_float(x.type) || x.dims.rank() < 3 || x.dims.rank() > 5) return false;
  if (x.format != TensorFormat::kLinear && !(allow_channels_last && x.format == TensorFormat::kChannelsLast)) {
    return false;
  }
  if (!inputs[1].present || inputs[1].dims.rank() != x.dims.rank()) return false;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const TensorDesc& d = inputs[i];
    if (!d.present) continue;
    if (d.type != x.type) return false;
    if (i <= 2 && d.format != TensorFormat::kLinear) return false;
    if (i == 3 && d.format != x.format) return false;
  }
  try {
    (void)params_of<ConvParams>(layer);  // attributes the schema rejects: not supported
  } catch (const Error&) {
    return false;
  }
  return true;
}

PostOp conv_post_op(const Layer& layer) { return params_of<ConvParams>(layer).post; }

void launch_conv_direct(const ConvShape& s, const void* x, const void* w, const void* bias, const void* residual,
                        void* y, const PostOp& post, cudaStream_t stream) {
  DirectGeometry g{};
  g.count = s.batch * s.out_channels * s.out_volume();
  if (g.count == 0) return;
  g.channels_in = s.in_channels;
  g.channels_out = s.out_channels;
  g.cg = s.in_channels / s.group;
  g.mg = s.out_channels / s.group;
  g.in_volume = s.in_volume();
  g.kernel_volume = s.kernel_volume();
  g.channels_last = s.format == TensorFormat::kChannelsLast;
  for (size_t i = 0; i < 3; ++i) {
    g.in[i] = s.in[i];
    g.out[i] = s.out[i];
    g.kernel[i] = s.kernel[i];
    g.stride[i] = s.stride[i];
    g.pad[i] = s.pad_begin[i];
    g.dilation[i] = s.dilation[i];
  }
  const DevicePostOp p = device_post_op(post);
  switch (s.type) {
    case DataType::kFloat32:
      launch_direct_typed<float>(s, g, x, w, bias, residual, y, p, stream);
      return;
    case DataType::kFloat16:
      launch_direct_typed<__half>(s, g, x, w, bias, residual, y, p, stream);
      return;
    default:
      break;
  }
  throw Error(std::string(layer_kind(s.deconv)) + " (CUDA direct kernel): unsupported data type " + to_string(s.type));
}

void launch_weights_to_channels_last(size_t element_size, int64_t k0, int64_t k1, int64_t spatial, const void* src,
                                     void* dst, cudaStream_t stream) {
  const int64_t count = k0 * k1 * spatial;
  if (count == 0) return;
  switch (element_size) {
    case 2:
      weights_to_channels_last_kernel<uint16_t><<<grid_for(count), kBlock, 0, stream>>>(
          k0, k1, spatial, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
      break;
    case 4:
      weights_to_channels_last_kernel<uint32_t><<<grid_for(count), kBlock, 0, stream>>>(
          k0, k1, spatial, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
      break;
    default:
      throw Error("weights_to_channels_last: element size " + std::to_string(element_size) + " not supported");
  }
  KILN_CUDA_CHECK_LAUNCH();
}

void weights_to_channels_last_host(size_t element_size, int64_t k0, int64_t k1, int64_t spatial, const void* src,
                                   void* dst) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (int64_t a = 0; a < k0; ++a) {
    for (int64_t b = 0; b < k1; ++b) {
      for (int64_t p = 0; p < spatial; ++p) {
        std::memcpy(d + static_cast<size_t>((a * spatial + p) * k1 + b) * element_size,
                    s + static_cast<size_t>((a * k1 + b) * spatial + p) * element_size, element_size);
      }
    }
  }
}

cudaStream_t prepare_stream() {
  thread_local struct Owned {
    cudaStream_t s = nullptr;
    ~Owned() {
      if (s) cudaStreamDestroy(s);
    }
  } owned;
  if (!owned.s) KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
  return owned.s;
}

void upload_now(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  const cudaStream_t s = prepare_stream();
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  KILN_CUDA_CHECK(cudaStreamSynchronize(s));
}

void zero_now(void* dst, size_t bytes) {
  if (!bytes) return;
  const cudaStream_t s = prepare_stream();
  KILN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s));
  KILN_CUDA_CHECK(cudaStreamSynchronize(s));
}

// ---- prepared weights ------------------------------------------------------------------------

namespace {

// 64-bit hash of a byte range, 8 bytes per step (a few GB/s: ResNet-50's weights in ~10 ms, once
// per prepare() of a shape). Not cryptographic: it only tells a reused address from the same data.
uint64_t content_hash(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9E3779B97F4A7C15ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

struct WeightKey {
  const void* storage;
  size_t bytes;
  int type, layout, device;
  std::vector<int64_t> dims;
  uint64_t hash;
  bool operator<(const WeightKey& o) const {
    return std::tie(storage, bytes, type, layout, device, dims, hash) <
           std::tie(o.storage, o.bytes, o.type, o.layout, o.device, o.dims, o.hash);
  }
};

struct WeightCache {
  std::mutex mutex;  // guards entries
  std::map<WeightKey, std::weak_ptr<const PreparedWeights>> entries;
  // Atomic, not under the mutex: a PreparedWeights may die while prepared_weights() holds the
  // mutex (an upload that throws), and its destructor must not wait for that mutex.
  std::atomic<size_t> live_bytes{0};
};

WeightCache& weight_cache() {
  // Never destroyed: kernels (and with them their PreparedWeights) may be released during static
  // destruction, after a cache with static storage would already be gone.
  static WeightCache* cache = new WeightCache;
  return *cache;
}

}  // namespace

PreparedWeights::~PreparedWeights() {
  if (data_) cudaFree(data_);
  weight_cache().live_bytes -= bytes_;
}

std::shared_ptr<const PreparedWeights> prepared_weights(const HostTensor& value, WeightLayout layout) {
  const Dims& d = value.dims();
  if (value.empty() || d.rank() < 2 || (value.type() != DataType::kFloat32 && value.type() != DataType::kFloat16)) {
    throw Error("prepared_weights: expects a float32 or float16 filter of rank >= 2, got " + d.to_string());
  }
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  WeightKey key{value.data(),
                value.nbytes(),
                static_cast<int>(value.type()),
                static_cast<int>(layout),
                device,
                std::vector<int64_t>(d.begin(), d.end()),
                content_hash(value.data(), value.nbytes())};
  WeightCache& cache = weight_cache();
  // Held while a missing copy is made, so that two threads preparing the same weights upload once.
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.entries.find(key);
  if (it != cache.entries.end()) {
    if (auto alive = it->second.lock()) return alive;
  }
  for (auto e = cache.entries.begin(); e != cache.entries.end();) {  // drop expired entries as the map grows
    e = e->second.expired() ? cache.entries.erase(e) : std::next(e);
  }
  const size_t es = data_type_size(value.type());
  const int64_t k0 = d[0], k1 = d[1], spatial = value.count() / std::max<int64_t>(1, k0 * k1);
  std::vector<unsigned char> host(value.nbytes());
  switch (layout) {
    case WeightLayout::kChannelsLast:
      weights_to_channels_last_host(es, k0, k1, spatial, value.data(), host.data());
      break;
  }
  std::shared_ptr<PreparedWeights> w(new PreparedWeights);
  if (!host.empty()) {
    KILN_CUDA_CHECK(cudaMalloc(&w->data_, host.size()));
    w->bytes_ = host.size();
    cache.live_bytes += w->bytes_;  // before anything can throw: the destructor subtracts it
    upload_now(w->data_, host.data(), host.size());
  }
  cache.entries[key] = w;
  return w;
}

size_t prepared_weights_live_bytes() { return weight_cache().live_bytes.load(); }

void ChannelsLastFilter::prepare(const TensorDesc& w, int64_t kernel_volume) {
  k0_ = w.dims[0];
  k1_ = w.dims[1];
  spatial_ = kernel_volume;
  element_size_ = data_type_size(w.type);
  const bool host_known = w.value && !w.value->empty() && w.value->type() == w.type && w.value->dims() == w.dims;
  if (host_known) {
    shared_ = prepared_weights(*w.value, WeightLayout::kChannelsLast);
    own_.reset();
    return;
  }
  shared_.reset();
  own_.reserve(static_cast<size_t>(k0_ * k1_ * spatial_) * element_size_);
}

const void* ChannelsLastFilter::get(const void* weights, cudaStream_t stream) {
  if (shared_) return shared_->data();
  launch_weights_to_channels_last(element_size_, k0_, k1_, spatial_, weights, own_.data(), stream);
  return own_.data();
}

void DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_ && data_) return;
  reset();
  KILN_CUDA_CHECK(cudaMalloc(&data_, bytes ? bytes : 1));
  bytes_ = bytes;
}

void DeviceBuffer::reset() {
  if (data_) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

namespace {

// Tactic "cuda": the direct kernel for every case the layers allow.
class ConvDirect : public Kernel {
 public:
  ConvDirect(const Layer& layer, bool deconv) : deconv_(deconv), post_(conv_post_op(layer)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    shape_ = make_conv_shape(layer, inputs, outputs, deconv_);
  }

  void execute(const KernelContext& ctx) override {
    const void* bias = ctx.inputs.size() > 2 ? ctx.inputs[2].data : nullptr;
    const void* residual = !deconv_ && ctx.inputs.size() > 3 ? ctx.inputs[3].data : nullptr;
    launch_conv_direct(shape_, ctx.inputs[0].data, ctx.inputs[1].data, bias, residual, ctx.outputs[0].data, post_,
                       stream_of(ctx));
  }

 private:
  bool deconv_;
  PostOp post_;
  ConvShape shape_;
};

bool supports_conv_direct(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return conv_operands_supported(layer, inputs, true);
}

bool supports_deconv_direct(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return inputs.size() <= 3 && conv_operands_supported(layer, inputs, true);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerConvolution, "cuda", 10, supports_conv_direct,
                                 [](const Layer& layer) { return std::make_unique<ConvDirect>(layer, false); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerDeconvolution, "cuda", 10, supports_deconv_direct,
                                 [](const Layer& layer) { return std::make_unique<ConvDirect>(layer, true); }});

}  // namespace kiln::cuda
