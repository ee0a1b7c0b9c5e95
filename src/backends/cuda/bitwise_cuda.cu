// CUDA kernel (tactic "cuda") of BitShift (docs/layers.md), matching the CPU reference
// (bitwise_cpu.cpp): a logical shift of the unsigned bit pattern of each element of x by the
// matching element of y, numpy broadcasting; a shift amount of the type's width or more
// (negative amounts of signed types are huge as unsigned) gives 0, where C++ would leave the
// result undefined. Every integer type the reference takes (8/16/32/64-bit, signed or not:
// cuda::IntegerTypes).
// One thread per output element in a grid-stride loop; when both operands have the output's
// shape (or y is a single element) no index decomposition is done.
//
// Layout: kLinear only (dense row-major).
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/element_types_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln::cuda {
namespace {

// Broadcast strides of both operands over the output (0 on broadcast axes).
struct ShiftArgs {
  int64_t count = 0;
  int rank = 0;
  int kind = 0;  // 0: both dense like the output, 1: y one element, 2: general broadcast
  bool left = true;
  int64_t dims[kMaxDims] = {};
  int64_t sa[kMaxDims] = {};
  int64_t sb[kMaxDims] = {};
};

template <typename T>
__device__ __forceinline__ T shift_one(T xv, T yv, bool left) {
  using U = std::make_unsigned_t<T>;
  constexpr uint64_t kBits = sizeof(U) * 8;
  const auto x = static_cast<U>(xv);
  const auto s = static_cast<uint64_t>(static_cast<U>(yv));
  U r = 0;
  if (s < kBits) r = static_cast<U>(left ? x << s : x >> s);
  return static_cast<T>(r);
}

template <typename T>
__global__ void bit_shift_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, ShiftArgs p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += step) {
    int64_t oa = i, ob = i;
    if (p.kind == 1) {
      ob = 0;
    } else if (p.kind == 2) {
      oa = 0;
      ob = 0;
      int64_t rest = i;
      for (int d = p.rank - 1; d >= 0; --d) {
        const int64_t q = rest / p.dims[d];
        const int64_t c = rest - q * p.dims[d];
        rest = q;
        oa += c * p.sa[d];
        ob += c * p.sb[d];
      }
    }
    y[i] = shift_one<T>(a[oa], b[ob], p.left);
  }
}

// Row-major strides of `in` right-aligned against `out`, 0 where `in` broadcasts.
void broadcast_strides(const Dims& in, const Dims& out, int64_t* s) {
  int64_t stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const int k = d - (out.rank() - in.rank());
    if (k < 0) {
      s[d] = 0;
      continue;
    }
    s[d] = in[k] == 1 && out[d] != 1 ? 0 : stride;
    stride *= in[k];
  }
}

class BitShiftCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    p_ = ShiftArgs{};
    const Dims& out = outputs.at(0).dims;
    p_.count = out.volume();
    p_.rank = out.rank();
    p_.left = params_of<BitShiftParams>(layer).direction == BitShiftDirection::kLeft;
    type_ = inputs.at(0).type;
    const Dims& a = inputs.at(0).dims;
    const Dims& b = inputs.at(1).dims;
    if (a == out && b == out) {
      p_.kind = 0;
    } else if (a == out && b.volume() == 1) {
      p_.kind = 1;
    } else {
      p_.kind = 2;
      for (int d = 0; d < out.rank(); ++d) p_.dims[d] = out[d];
      broadcast_strides(a, out, p_.sa);
      broadcast_strides(b, out, p_.sb);
    }
  }

  void execute(const KernelContext& ctx) override {
    if (p_.count == 0) return;
    const cudaStream_t stream = stream_of(ctx);
    const bool known =
        dispatch_type(IntegerTypes{}, type_, [&](auto tag) { launch<typename decltype(tag)::type>(ctx, stream); });
    if (!known) throw Error(std::string("BitShift (CUDA): unsupported data type ") + to_string(type_));
  }

 private:
  template <typename T>
  void launch(const KernelContext& ctx, cudaStream_t stream) const {
    bit_shift_kernel<T><<<grid_for(p_.count), kBlock, 0, stream>>>(
        ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.outputs[0].as<T>(), p_);
    KILN_CUDA_CHECK_LAUNCH();
  }

  ShiftArgs p_;
  DataType type_ = DataType::kUInt8;
};

bool bit_shift_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || layer.num_outputs() < 1 || !layer.output(0)) return false;
  if (layer.output(0)->format() != TensorFormat::kLinear) return false;
  for (const auto& d : inputs) {
    if (d.format != TensorFormat::kLinear) return false;
  }
  if (inputs[1].type != inputs[0].type || inputs[0].dims.rank() > kMaxDims || inputs[1].dims.rank() > kMaxDims) {
    return false;
  }
  // Both directions have a kernel (the direction was checked when the layer's params were decoded).
  return in_list(IntegerTypes{}, inputs[0].type);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerBitShift, "cuda", 100, bit_shift_supports,
                                 [](const Layer&) { return std::make_unique<BitShiftCuda>(); }});

}  // namespace kiln::cuda
