// CUDA kernel of Cast (tactic "cuda"): every pair of float32, float16, float64, int8, uint8, int16,
// uint16, int32, uint32, int64, uint64 and bool (cuda::AllTypes; strings stay on the CPU), with
// the CPU reference's conversions (src/backends/cpu/elementwise_cpu.cpp): float -> int truncates
// toward zero through int64 (NaN and values beyond +-9.2e18 give the type's minimum), integers
// convert modulo 2^bits (narrowing and signed <-> unsigned wrap), -> bool is != 0 (NaN -> true),
// -> float16 rounds through float32. A cast to the same type is a device-to-device copy on the
// stream. One vectorized map kernel per pair, chosen from a table in prepare(). Layout: any
// format (output format = input format).
#include <array>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/element_types_cuda.cuh"
#include "src/backends/cuda/elementwise_cuda.cuh"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, __half>;

template <typename S, typename D>
__device__ __forceinline__ D cast_value(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    if constexpr (std::is_same_v<S, __half>)
      return __half2float(v) != 0.0f;
    else
      return v != S(0);
  } else if constexpr (std::is_same_v<D, __half>) {
    if constexpr (std::is_same_v<S, __half>)
      return v;
    else
      return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<D> && kIsFloat<S>) {
    double d;
    if constexpr (std::is_same_v<S, __half>)
      d = static_cast<double>(__half2float(v));
    else
      d = static_cast<double>(v);
    if (d != d || d < -9.2e18 || d > 9.2e18) return std::numeric_limits<D>::min();
    return static_cast<D>(static_cast<int64_t>(d));  // toward zero; narrowing wraps
  } else if constexpr (std::is_same_v<S, __half>) {
    return static_cast<D>(__half2float(v));
  } else if constexpr (std::is_same_v<S, double> && std::is_same_v<D, float>) {
    return cuda::double_to_float_rn(v);
  } else {
    return static_cast<D>(v);
  }
}

template <typename S, typename D>
struct CastFn {
  using Out = D;
  __device__ __forceinline__ D operator()(S v) const { return cast_value<S, D>(v); }
};

using CastRunner = void (*)(const void* x, void* y, int64_t n, cudaStream_t stream);

template <typename S, typename D>
void run_cast(const void* x, void* y, int64_t n, cudaStream_t stream) {
  if constexpr (std::is_same_v<S, D>) {
    if (n > 0 && x != y) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * sizeof(S), cudaMemcpyDeviceToDevice, stream));
    }
  } else {
    cuda::run_map<CastFn<S, D>, S>(CastFn<S, D>{}, x, y, n, stream);
  }
}

// The table is indexed by the positions of the two types in cuda::AllTypes.
using Types = cuda::AllTypes;
constexpr size_t kNumTypes = Types::size;
using CastRow = std::array<CastRunner, kNumTypes>;

template <DataType S, DataType D>
constexpr CastRunner cast_entry() {
  return &run_cast<cuda::Element<S>, cuda::Element<D>>;
}

template <DataType S, DataType... D>
constexpr CastRow cast_row(cuda::TypeList<D...>) {
  return {cast_entry<S, D>()...};
}

template <DataType... S>
constexpr std::array<CastRow, kNumTypes> cast_table(cuda::TypeList<S...> types) {
  return {cast_row<S>(types)...};
}

CastRunner cast_runner(DataType from, DataType to) {
  static constexpr auto kTable = cast_table(Types{});
  const int f = cuda::index_in(Types{}, from), t = cuda::index_in(Types{}, to);
  if (f < 0 || t < 0) return nullptr;
  return kTable[static_cast<size_t>(f)][static_cast<size_t>(t)];
}

bool cast_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.empty()) return false;
  const TensorFormat of =
      layer.num_outputs() > 0 && layer.output(0) ? layer.output(0)->format() : TensorFormat::kLinear;
  if (!cuda::same_memory_order(in[0].dims, in[0].format, of)) return false;
  return cast_runner(in[0].type, params_of<CastParams>(layer).to) != nullptr;
}

class CastCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    if (!cuda::same_memory_order(in[0].dims, in[0].format, out[0].format)) {
      throw Error("layer '" + layer.name() + "' (Cast): input format " + to_string(in[0].format) +
                  " differs from output format " + to_string(out[0].format));
    }
    runner_ = cast_runner(in[0].type, out[0].type);
    if (!runner_) {
      throw Error("layer '" + layer.name() + "' (Cast): no CUDA kernel from " + to_string(in[0].type) + " to " +
                  to_string(out[0].type));
    }
  }

  void execute(const KernelContext& ctx) override {
    runner_(ctx.inputs[0].data, ctx.outputs[0].data, ctx.outputs[0].count(), cuda::stream_of(ctx));
  }

 private:
  CastRunner runner_ = nullptr;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerCast, "cuda", 10, cast_supports,
                                 [](const Layer&) { return std::make_unique<CastCuda>(); }});

}  // namespace kiln
