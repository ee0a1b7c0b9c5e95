// CUDA kernels of the small layers that move or make data without math: Identity (a
// device-to-device cudaMemcpyAsync, any type and format), Shape (the int64 dims of its input, known
// in prepare, written by a one-block kernel that takes them by value, so the launch is safe to
// capture in a CUDA graph) and Fill when the builder could not fold it: "constant" (any type;
// 16-byte stores of the repeated value when aligned) and "range" (float32, float64, int32, int64,
// start and delta read from device memory, y[i] = start + i * delta rounded as the CPU reference
// does, without an FMA). Tactic "cuda" for each.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/elementwise_cuda.cuh"
#include "src/ir/data_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

std::string layer_where(const Layer& layer) { return "layer '" + layer.name() + "' (" + layer.type() + ")"; }

TensorFormat output_format(const Layer& layer) {
  return layer.num_outputs() > 0 && layer.output(0) ? layer.output(0)->format() : TensorFormat::kLinear;
}

// ---- Identity ----------------------------------------------------------------------------------

bool identity_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  return !in.empty() && cuda::same_memory_order(in[0].dims, in[0].format, output_format(layer));
}

void identity_execute(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const size_t bytes = static_cast<size_t>(x.count()) * data_type_size(x.type);
  if (bytes == 0 || x.data == y.data) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, bytes, cudaMemcpyDeviceToDevice, cuda::stream_of(ctx)));
}

// ---- Shape -------------------------------------------------------------------------------------

struct ShapeValues {
  int64_t v[kMaxDims];
  int32_t n;
};

__global__ void shape_kernel(ShapeValues values, int64_t* y) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < values.n) y[i] = values.v[i];
}

class ShapeCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    const Dims& d = in[0].dims;
    const int64_t rank = d.rank();
    const ShapeParams& p = params_of<ShapeParams>(layer);
    int64_t start = p.start, end = p.end;
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, 0, rank);
    const int64_t n = std::max<int64_t>(end - start, 0);
    if (out[0].type != DataType::kInt64 || out[0].dims.volume() != n) {
      throw Error(layer_where(layer) + ": the output must be int64 [" + std::to_string(n) + "]");
    }
    values_ = ShapeValues{};
    values_.n = static_cast<int32_t>(n);
    for (int64_t i = start; i < end; ++i) values_.v[i - start] = d[static_cast<int>(i)];
  }

  void execute(const KernelContext& ctx) override {
    if (values_.n == 0) return;
    shape_kernel<<<1, 32, 0, cuda::stream_of(ctx)>>>(values_, ctx.outputs[0].as<int64_t>());
    KILN_CUDA_CHECK_LAUNCH();
  }

 private:
  ShapeValues values_{};
};

// ---- Fill --------------------------------------------------------------------------------------

// Fills n elements of width sizeof(E) with `value`, V elements per store when `vec`.
template <typename E, int V>
__global__ void fill_constant_kernel(E value, E* __restrict__ y, int64_t n, bool vec) {
  E vals[V];
  KILN_UNROLL
  for (int v = 0; v < V; ++v) vals[v] = value;
  for (int64_t base = cuda::thread_start(V); base < n; base += cuda::grid_step(V)) {
    const int count = n - base < V ? static_cast<int>(n - base) : V;
    cuda::store_pack<E, V>(y + base, vals, count, vec);
  }
}

template <typename E>
void run_fill_constant(uint64_t bits, void* y, int64_t n, cudaStream_t stream) {
  constexpr int V = cuda::kVecWidth<E>;
  E value;
  std::memcpy(&value, &bits, sizeof(E));
  if (n <= 0) return;
  cuda::launch(fill_constant_kernel<E, V>, (n + V - 1) / V, stream, value, static_cast<E*>(y), n,
               cuda::aligned_to(y, sizeof(E) * V));
}

template <typename T>
__device__ __forceinline__ T range_value(T start, T delta, int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    return __fadd_rn(start, __fmul_rn(static_cast<float>(i), delta));
  } else if constexpr (std::is_same_v<T, double>) {
    return __dadd_rn(start, __dmul_rn(static_cast<double>(i), delta));
  } else {
    return static_cast<T>(start + static_cast<T>(i) * delta);
  }
}

template <typename T>
__global__ void fill_range_kernel(const T* __restrict__ start, const T* __restrict__ delta, T* __restrict__ y,
                                  int64_t n) {
  const T s = *start, d = *delta;
  for (int64_t i = cuda::thread_start(1); i < n; i += cuda::grid_step(1)) y[i] = range_value<T>(s, d, i);
}

template <typename T>
void run_fill_range(const KernelContext& ctx, int64_t n) {
  if (n <= 0) return;
  cuda::launch(fill_range_kernel<T>, n, cuda::stream_of(ctx), ctx.inputs[0].as<const T>(), ctx.inputs[2].as<const T>(),
               ctx.outputs[0].as<T>(), n);
}

bool range_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kInt32 || t == DataType::kInt64;
}

bool fill_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (params_of<FillParams>(layer).mode != FillMode::kRange) return true;
  return in.size() >= 3 && range_type(in[0].type) && in[2].type == in[0].type;
}

class FillCuda : public Kernel {
 public:
  explicit FillCuda(const Layer& layer) : range_(params_of<FillParams>(layer).mode == FillMode::kRange) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    type_ = out[0].type;
    n_ = out[0].dims.volume();
    if (range_) {
      if (!range_type(type_) || in[0].type != type_ || in[2].type != type_) {
        throw Error(layer_where(layer) +
                    ": range supports float32, float64, int32 and int64 (start, delta and "
                    "output of one type), got " +
                    to_string(type_));
      }
      return;
    }
    const HostTensor& value = params_of<FillParams>(layer).value;
    if (value.type() != type_ || value.count() != 1) {
      throw Error(layer_where(layer) + ": 'value' must be one element of the output type " + to_string(type_));
    }
    bits_ = 0;
    std::memcpy(&bits_, value.data(), data_type_size(type_));
  }

  void execute(const KernelContext& ctx) override {
    cudaStream_t s = cuda::stream_of(ctx);
    void* y = ctx.outputs[0].data;
    if (range_) {
      switch (type_) {
        case DataType::kFloat32:
          run_fill_range<float>(ctx, n_);
          break;
        case DataType::kFloat64:
          run_fill_range<double>(ctx, n_);
          break;
        case DataType::kInt32:
          run_fill_range<int32_t>(ctx, n_);
          break;
        case DataType::kInt64:
          run_fill_range<int64_t>(ctx, n_);
          break;
        default:
          throw Error("Fill range: unsupported type " + std::string(to_string(type_)));
      }
      return;
    }
    switch (data_type_size(type_)) {
      case 1:
        run_fill_constant<uint8_t>(bits_, y, n_, s);
        break;
      case 2:
        run_fill_constant<uint16_t>(bits_, y, n_, s);
        break;
      case 4:
        run_fill_constant<uint32_t>(bits_, y, n_, s);
        break;
      case 8:
        run_fill_constant<uint64_t>(bits_, y, n_, s);
        break;
      default:
        throw Error("Fill: unsupported element size");
    }
  }

 private:
  bool range_;
  DataType type_ = DataType::kFloat32;
  int64_t n_ = 0;
  uint64_t bits_ = 0;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerIdentity, "cuda", 10, identity_supports,
                                 function_kernel(identity_execute)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerShape, "cuda", 10, nullptr,
                                 [](const Layer&) { return std::make_unique<ShapeCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerFill, "cuda", 10, fill_supports,
                                 [](const Layer& layer) { return std::make_unique<FillCuda>(layer); }});

}  // namespace kiln
