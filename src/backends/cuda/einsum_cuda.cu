// CUDA kernel (tactic "cuda") of the Einsum layer: a generic strided reduction over the labels
// of the equation (src/ir/einsum_equation.h), the same plan the CPU reference (einsum_cpu.cpp)
// walks. Each output element is the sum, over every combination of the summed labels (those
// missing from the output), of the product of one element of every operand; an operand's offset
// is the sum of its per-label strides (a repeated label walks the diagonal, extent-1 axes
// broadcast with stride 0). Products and sums are in double for float64, float for float32 /
// float16, int64 for integers (wrapping on the cast back, as the reference).
//
// Two kernels, chosen in prepare(): a thread per output element walking the summed labels with
// an odometer (many outputs), or a warp per output element whose lanes split the summed
// combinations and shuffle-add their partial sums (few outputs, long sums: traces, dot products,
// full reductions). This is not a tiled GEMM: equations that are batched matrix products run
// correctly but far from peak (a builder pass rewriting them to MatrixMultiply would be faster).
//
// Limits (supports() says no beyond them): at most 8 operands and 16 labels; numeric types (no
// bool); kLinear only.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/element_types_cuda.cuh"
#include "src/backends/cuda/op_helpers_cuda.cuh"
#include "src/ir/einsum_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxOperands = 8;
constexpr int kMaxLabels = 16;
constexpr int kWarpThreads = 128;  // threads per block of the warp-per-output kernel
constexpr int64_t kWarpMaxOutputs = 8192;
constexpr int64_t kWarpMinSum = 128;

template <typename T>
using EAcc =
    std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<std::is_same_v<T, double>, double, float>>;

template <typename T>
__device__ __forceinline__ EAcc<T> e_load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(p[i]);
  } else {
    return static_cast<EAcc<T>>(p[i]);
  }
}

template <typename T>
__device__ __forceinline__ T e_store(EAcc<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return static_cast<T>(v);
  }
}

// Integer products wrap modulo 2^64 as the reference's int64 arithmetic does in practice.
template <typename A>
__device__ __forceinline__ A e_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

template <typename A>
__device__ __forceinline__ A e_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}

struct EinsumArgs {
  int operands = 0;
  const void* data[kMaxOperands] = {};
  int n_out = 0, n_sum = 0;  // output labels, summed labels
  int64_t total_out = 0, total_sum = 1;
  bool k32 = true;
  IndexDiv out_div[kMaxLabels];  // output label extents (row-major over the output)
  IndexDiv sum_div[kMaxLabels];  // summed label extents (last fastest)
  int64_t out_stride[kMaxOperands][kMaxLabels] = {};
  int64_t sum_stride[kMaxOperands][kMaxLabels] = {};
};

__device__ __forceinline__ int64_t e_div(const EinsumArgs& a, const IndexDiv& d, int64_t v) {
  return a.k32 ? d.div<true>(v) : d.div<false>(v);
}

// offsets[k] = operand k's offset of output element o.
__device__ __forceinline__ void out_offsets(const EinsumArgs& a, int64_t o, int64_t* off) {
  for (int k = 0; k < kMaxOperands; ++k) off[k] = 0;
  for (int l = a.n_out - 1; l >= 0; --l) {
    const int64_t q = e_div(a, a.out_div[l], o);
    const int64_t c = o - q * a.out_div[l].d;
    o = q;
    for (int k = 0; k < a.operands; ++k) off[k] += c * a.out_stride[k][l];
  }
}

template <typename T>
__device__ __forceinline__ EAcc<T> product_at(const EinsumArgs& a, const int64_t* off) {
  EAcc<T> p = e_load(static_cast<const T*>(a.data[0]), off[0]);
  for (int k = 1; k < a.operands; ++k) p = e_mul(p, e_load(static_cast<const T*>(a.data[k]), off[k]));
  return p;
}

// A thread per output element; the summed labels advance as an odometer (last label fastest).
template <typename T>
__global__ void einsum_thread_kernel(T* __restrict__ y, EinsumArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < a.total_out; o += step) {
    int64_t off[kMaxOperands];
    out_offsets(a, o, off);
    int64_t idx[kMaxLabels];
    for (int l = 0; l < kMaxLabels; ++l) idx[l] = 0;
    EAcc<T> acc = 0;
    for (int64_t s = 0; s < a.total_sum; ++s) {
      acc = e_add(acc, product_at<T>(a, off));
      for (int l = a.n_sum - 1; l >= 0; --l) {
        for (int k = 0; k < a.operands; ++k) off[k] += a.sum_stride[k][l];
        if (++idx[l] < a.sum_div[l].d) break;
        for (int k = 0; k < a.operands; ++k) off[k] -= a.sum_stride[k][l] * a.sum_div[l].d;
        idx[l] = 0;
      }
    }
    y[o] = e_store<T>(acc);
  }
}

// A warp per output element; lanes take summed combinations lane, lane + 32, ...
template <typename T>
__global__ void __launch_bounds__(kWarpThreads) einsum_warp_kernel(T* __restrict__ y, EinsumArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t o = warp; o < a.total_out; o += warps) {
    int64_t base[kMaxOperands];
    out_offsets(a, o, base);
    EAcc<T> acc = 0;
    for (int64_t s = lane; s < a.total_sum; s += 32) {
      int64_t off[kMaxOperands];
      for (int k = 0; k < kMaxOperands; ++k) off[k] = base[k];
      int64_t rest = s;
      for (int l = a.n_sum - 1; l >= 0; --l) {
        const int64_t q = e_div(a, a.sum_div[l], rest);
        const int64_t c = rest - q * a.sum_div[l].d;
        rest = q;
        for (int k = 0; k < a.operands; ++k) off[k] += c * a.sum_stride[k][l];
      }
      acc = e_add(acc, product_at<T>(a, off));
    }
#pragma unroll
    for (int m = 16; m > 0; m /= 2) acc = e_add(acc, oph::shfl_xor(acc, m));
    if (lane == 0) y[o] = e_store<T>(acc);
  }
}

// The reference's numeric types (no bool, none of int16, uint16, uint32, uint64).
template <typename Fn>
void dispatch_einsum_type(DataType t, Fn&& fn) {
  if (!dispatch_type(NumericTypes{}, t, fn)) throw Error(std::string("Einsum: unsupported data type ") + to_string(t));
}

// Per label, the element stride of a tensor along it (as the reference's label_strides).
std::vector<int64_t> label_strides(const std::vector<int>& labels, const Dims& dims, size_t num_labels) {
  std::vector<int64_t> s(num_labels, 0);
  int64_t acc = 1;
  for (int axis = dims.rank() - 1; axis >= 0; --axis) {
    if (dims[axis] != 1) s[static_cast<size_t>(labels[static_cast<size_t>(axis)])] += acc;
    acc *= dims[axis];
  }
  return s;
}

class EinsumCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&,
               int) override {
    std::vector<Dims> dims;
    for (const auto& in : inputs) dims.push_back(in.dims);
    EinsumPlan plan;
    try {
      plan = plan_einsum(params_of<EinsumParams>(layer).equation, dims);
    } catch (const Error& e) {
      throw Error("Einsum layer '" + layer.name() + "': " + e.what());
    }
    const size_t num_labels = plan.label_sizes.size();
    if (inputs.size() > static_cast<size_t>(kMaxOperands) || num_labels > static_cast<size_t>(kMaxLabels)) {
      throw Error("Einsum layer '" + layer.name() + "': the CUDA kernel takes at most " + std::to_string(kMaxOperands) +
                  " operands and " + std::to_string(kMaxLabels) + " labels");
    }
    a_ = EinsumArgs{};
    a_.operands = static_cast<int>(inputs.size());
    std::vector<bool> in_output(num_labels, false);
    for (int l : plan.output_labels) in_output[static_cast<size_t>(l)] = true;
    std::vector<std::vector<int64_t>> strides;
    for (size_t k = 0; k < inputs.size(); ++k)
      strides.push_back(label_strides(plan.operand_labels[k], dims[k], num_labels));
    a_.total_out = plan.output_dims.volume();
    for (int l : plan.output_labels) {
      const int i = a_.n_out++;
      a_.out_div[i] = IndexDiv(plan.label_sizes[static_cast<size_t>(l)]);
      for (size_t k = 0; k < inputs.size(); ++k) a_.out_stride[k][i] = strides[k][static_cast<size_t>(l)];
    }
    a_.total_sum = 1;
    for (size_t l = 0; l < num_labels; ++l) {
      if (in_output[l]) continue;
      const int i = a_.n_sum++;
      a_.sum_div[i] = IndexDiv(plan.label_sizes[l]);
      a_.total_sum *= plan.label_sizes[l];
      for (size_t k = 0; k < inputs.size(); ++k) a_.sum_stride[k][i] = strides[k][l];
    }
    a_.k32 = std::max(a_.total_out, a_.total_sum) < kFast32Limit;
    warp_ = a_.total_out <= kWarpMaxOutputs && a_.total_sum >= kWarpMinSum;
  }

  void execute(const KernelContext& ctx) override {
    if (a_.total_out == 0) return;
    EinsumArgs a = a_;
    for (int k = 0; k < a.operands; ++k) a.data[k] = ctx.inputs[static_cast<size_t>(k)].data;
    const cudaStream_t stream = stream_of(ctx);
    dispatch_einsum_type(ctx.inputs[0].type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y = ctx.outputs[0].as<T>();
      if (a.total_sum == 0) {
        KILN_CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<size_t>(a.total_out) * sizeof(T), stream));
        return;
      }
      if (warp_) {
        einsum_warp_kernel<T><<<grid_for(a.total_out, kWarpThreads / 32), kWarpThreads, 0, stream>>>(y, a);
      } else {
        einsum_thread_kernel<T><<<grid_for(a.total_out), kBlock, 0, stream>>>(y, a);
      }
      KILN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  EinsumArgs a_;
  bool warp_ = false;
};

bool einsum_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxOperands)) return false;
  std::vector<Dims> dims;
  for (const auto& in : inputs) {
    if (!in.present || in.format != TensorFormat::kLinear || in.type != inputs[0].type) return false;
    dims.push_back(in.dims);
  }
  if (!in_list(NumericTypes{}, inputs[0].type)) return false;
  if (layer.output(0) && layer.output(0)->format() != TensorFormat::kLinear) return false;
  try {
    return plan_einsum(params_of<EinsumParams>(layer).equation, dims).label_sizes.size() <=
           static_cast<size_t>(kMaxLabels);
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerEinsum, "cuda", 100, einsum_supports,
                                 [](const Layer&) { return std::make_unique<EinsumCuda>(); }});

}  // namespace kiln::cuda
