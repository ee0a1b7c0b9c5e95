// CUDA kernels (tactic "cuda") of Quantize and Dequantize (docs/layers.md; ONNX QuantizeLinear /
// DequantizeLinear), matching the CPU reference (quantize_cpu.cpp) bit for bit:
//   - Quantize: x / scale in float (double for float64 x), rounded half to even (rint), plus the
//     zero point, saturated to int8/uint8. The division and multiplication use the IEEE-rounded
//     intrinsics (__fdiv_rn, ...) so that the library's --use_fast_math cannot move a value
//     across a rounding boundary;
//   - Dequantize: (x - zero_point) exactly in int64, converted to float (double for a float64
//     output) and multiplied by the scale, then stored in the output type.
// Scale and zero point are per tensor, per axis or blocked; each element finds its parameter
// index as the reference's ParamIndex does. The scale is read on the device in its own type
// (float32/float16/float64, converted through double as the reference does); the zero point
// (int8/uint8/int32, absent = 0) likewise. One thread per element in a grid-stride loop.
//
// Layout: kLinear only.
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/rounded_math_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/quantize_params.h"

namespace kiln::cuda {
namespace {

// The parameter index of flat element i: per tensor, per axis or blocked (quantize_cpu.cpp).
struct QParams {
  int kind = 0;  // 0 per tensor, 1 per axis, 2 blocked
  int64_t extent = 1, inner = 1, block = 1, param_extent = 1;
  int64_t count = 0;
  int scale_type = 0;  // 0 float32, 1 float16, 2 float64
  int zp_type = -1;    // -1 absent, 0 int8, 1 uint8, 2 int32
  const void* scale = nullptr;
  const void* zp = nullptr;

  __device__ __forceinline__ int64_t index(int64_t i) const {
    if (kind == 0) return 0;
    const int64_t a = (i / inner) % extent;
    if (kind == 1) return a;
    const int64_t outer = i / (inner * extent);
    return (outer * param_extent + a / block) * inner + i % inner;
  }
  __device__ __forceinline__ double scale_at(int64_t p) const {
    switch (scale_type) {
      case 0:
        return static_cast<double>(static_cast<const float*>(scale)[p]);
      case 1:
        return static_cast<double>(__half2float(static_cast<const __half*>(scale)[p]));
      default:
        return static_cast<const double*>(scale)[p];
    }
  }
  __device__ __forceinline__ int32_t zp_at(int64_t p) const {
    switch (zp_type) {
      case 0:
        return static_cast<const int8_t*>(zp)[p];
      case 1:
        return static_cast<const uint8_t*>(zp)[p];
      case 2:
        return static_cast<const int32_t*>(zp)[p];
      default:
        return 0;
    }
  }
};

template <typename X, typename Q>
__global__ void quantize_kernel(const X* __restrict__ x, Q* __restrict__ y, QParams p) {
  using C = typename Elem<X>::C;
  const C lo = static_cast<C>(std::numeric_limits<Q>::min()), hi = static_cast<C>(std::numeric_limits<Q>::max());
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += step) {
    const int64_t q = p.index(i);
    const C s = static_cast<C>(p.scale_at(q));
    C v = add_rn(round_even(div_rn(Elem<X>::load(x[i]), s)), static_cast<C>(p.zp_at(q)));
    v = v < lo ? lo : v;  // std::max(v, lo) then std::min(v, hi), as the reference
    v = hi < v ? hi : v;
    y[i] = static_cast<Q>(v);
  }
}

template <typename Q, typename Y>
__global__ void dequantize_kernel(const Q* __restrict__ x, Y* __restrict__ y, QParams p) {
  using C = typename Elem<Y>::C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += step) {
    const int64_t q = p.index(i);
    const int64_t d = static_cast<int64_t>(x[i]) - p.zp_at(q);
    y[i] = Elem<Y>::store(mul_rn(from_int64(d, C{}), static_cast<C>(p.scale_at(q))));
  }
}

int scale_code(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 0;
    case DataType::kFloat16:
      return 1;
    case DataType::kFloat64:
      return 2;
    default:
      return -1;
  }
}

int zp_code(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return 0;
    case DataType::kUInt8:
      return 1;
    case DataType::kInt32:
      return 2;
    default:
      return -1;
  }
}

// Shape-derived part of QParams (quantize_cpu.cpp's ParamIndex).
QParams make_params(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  QParams p;
  const Dims& x = inputs.at(0).dims;
  const Dims& param = inputs.at(1).dims;
  p.count = x.volume();
  p.scale_type = scale_code(inputs[1].type);
  p.zp_type = inputs.size() > 2 && inputs[2].present ? zp_code(inputs[2].type) : -1;
  const QuantizeParams& qp = params_of<QuantizeParams>(layer);
  const int64_t block_size = qp.block_size;
  if (block_size == 0 && param.volume() == 1) return p;
  int64_t axis = qp.axis;
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis >= x.rank()) {
    throw Error("Quantize/Dequantize layer '" + layer.name() + "': axis " + std::to_string(qp.axis) +
                " is out of range for input " + x.to_string());
  }
  p.extent = x[static_cast<int>(axis)];
  for (int i = static_cast<int>(axis) + 1; i < x.rank(); ++i) p.inner *= x[i];
  if (block_size == 0) {
    p.kind = 1;
  } else {
    p.kind = 2;
    p.block = block_size;
    if (param.rank() != x.rank()) {
      throw Error("Quantize/Dequantize layer '" + layer.name() + "': blocked scale " + param.to_string() +
                  " must have the rank of input " + x.to_string());
    }
    p.param_extent = param[static_cast<int>(axis)];
  }
  return p;
}

class QuantizeCuda : public Kernel {
 public:
  explicit QuantizeCuda(bool quantize) : quantize_(quantize) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    p_ = make_params(layer, inputs);
    in_ = inputs.at(0).type;
    out_ = outputs.at(0).type;
  }

  void execute(const KernelContext& ctx) override {
    if (p_.count == 0) return;
    QParams p = p_;
    p.scale = ctx.inputs[1].data;
    p.zp = p.zp_type >= 0 ? ctx.inputs[2].data : nullptr;
    if (p.zp_type >= 0 && !p.zp) p.zp_type = -1;
    const cudaStream_t stream = stream_of(ctx);
    const void* x = ctx.inputs[0].data;
    void* y = ctx.outputs[0].data;
    if (quantize_) {
      if (in_ == DataType::kFloat32) return quantize_to<float>(x, y, p, stream);
      if (in_ == DataType::kFloat16) return quantize_to<__half>(x, y, p, stream);
      if (in_ == DataType::kFloat64) return quantize_to<double>(x, y, p, stream);
      throw Error(std::string("Quantize (CUDA): input type ") + to_string(in_));
    }
    if (in_ == DataType::kInt8) return dequantize_from<int8_t>(x, y, p, stream);
    if (in_ == DataType::kUInt8) return dequantize_from<uint8_t>(x, y, p, stream);
    if (in_ == DataType::kInt32) return dequantize_from<int32_t>(x, y, p, stream);
    throw Error(std::string("Dequantize (CUDA): input type ") + to_string(in_));
  }

 private:
  template <typename X>
  void quantize_to(const void* x, void* y, const QParams& p, cudaStream_t stream) const {
    if (out_ == DataType::kInt8) {
      quantize_kernel<X, int8_t>
          <<<grid_for(p.count), kBlock, 0, stream>>>(static_cast<const X*>(x), static_cast<int8_t*>(y), p);
    } else if (out_ == DataType::kUInt8) {
      quantize_kernel<X, uint8_t>
          <<<grid_for(p.count), kBlock, 0, stream>>>(static_cast<const X*>(x), static_cast<uint8_t*>(y), p);
    } else {
      throw Error(std::string("Quantize (CUDA): output type ") + to_string(out_) + " is not int8/uint8");
    }
    KILN_CUDA_CHECK_LAUNCH();
  }

  template <typename Q>
  void dequantize_from(const void* x, void* y, const QParams& p, cudaStream_t stream) const {
    const auto* xq = static_cast<const Q*>(x);
    if (out_ == DataType::kFloat32) {
      dequantize_kernel<Q, float><<<grid_for(p.count), kBlock, 0, stream>>>(xq, static_cast<float*>(y), p);
    } else if (out_ == DataType::kFloat16) {
      dequantize_kernel<Q, __half><<<grid_for(p.count), kBlock, 0, stream>>>(xq, static_cast<__half*>(y), p);
    } else if (out_ == DataType::kFloat64) {
      dequantize_kernel<Q, double><<<grid_for(p.count), kBlock, 0, stream>>>(xq, static_cast<double*>(y), p);
    } else {
      throw Error(std::string("Dequantize (CUDA): output type ") + to_string(out_) + " is not floating-point");
    }
    KILN_CUDA_CHECK_LAUNCH();
  }

  bool quantize_;
  QParams p_;
  DataType in_ = DataType::kFloat32, out_ = DataType::kUInt8;
};

bool is_float_type(DataType t) { return scale_code(t) >= 0; }

// Shared checks: kLinear everywhere, a scale type the kernel reads, a zero point it reads.
bool common_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || layer.num_outputs() < 1 || !layer.output(0)) return false;
  if (layer.output(0)->format() != TensorFormat::kLinear) return false;
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  if (!inputs[1].present || !is_float_type(inputs[1].type)) return false;
  if (inputs.size() > 2 && inputs[2].present && zp_code(inputs[2].type) < 0) return false;
  try {
    (void)make_params(layer, inputs);
  } catch (const Error&) {
    return false;
  }
  return true;
}

// The output types follow from the inputs and attributes as shape inference derives them
// (src/ir/ops_quantize.cpp), not from the layer's output tensor, whose type is only final once
// the network has been through the builder (the op harness asks before that).
bool quantize_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!common_supports(layer, inputs) || !is_float_type(inputs[0].type)) return false;
  const DataType out =
      inputs.size() > 2 && inputs[2].present ? inputs[2].type : params_of<QuantizeParams>(layer).output_type;
  return out == DataType::kInt8 || out == DataType::kUInt8;
}

bool dequantize_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  // y takes the scale's type, which common_supports requires to be a float type.
  return common_supports(layer, inputs) && zp_code(inputs[0].type) >= 0;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerQuantize, "cuda", 100, quantize_supports,
                                 [](const Layer&) { return std::make_unique<QuantizeCuda>(true); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerDequantize, "cuda", 100, dequantize_supports,
                                 [](const Layer&) { return std::make_unique<QuantizeCuda>(false); }});

}  // namespace kiln::cuda
