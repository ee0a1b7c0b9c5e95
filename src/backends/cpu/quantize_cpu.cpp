// CPU reference kernels of Quantize and Dequantize (docs/layers.md; ONNX QuantizeLinear /
// DequantizeLinear). Quantize computes as ONNX Runtime does: x / scale in float (double for
// float64 input), rounded half to even (std::nearbyint in the default rounding mode), plus the
// zero point, saturated to the int8/uint8 range. Dequantize computes (x - zero_point) exactly
// in integers, then multiplies by the scale in float (double for float64). Scale and zero point
// are per tensor, per axis or blocked; every element finds its parameter index through
// param_index below. Layout: kLinear only.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/quantize_params.h"

namespace kiln {
namespace {

// Where the parameter of a flat element index lives: per tensor (always 0), per axis (the
// index along axis) or blocked (the element's coordinates with the axis one divided by block).
struct ParamIndex {
  int kind = 0;  // 0 per tensor, 1 per axis, 2 blocked
  int64_t extent = 1, inner = 1, block = 1, param_extent = 1;

  ParamIndex(const Layer& layer, const Dims& x, const Dims& param) {
    const QuantizeParams& p = params_of<QuantizeParams>(layer);
    const int64_t block_size = p.block_size;
    if (block_size == 0 && param.volume() == 1) return;
    int64_t axis = p.axis;
    if (axis < 0) axis += x.rank();
    extent = x[static_cast<int>(axis)];
    for (int i = static_cast<int>(axis) + 1; i < x.rank(); ++i) inner *= x[i];
    if (block_size == 0) {
      kind = 1;
    } else {
      kind = 2;
      block = block_size;
      param_extent = param[static_cast<int>(axis)];
    }
  }

  int64_t operator()(int64_t i) const {
    if (kind == 0) return 0;
    const int64_t a = (i / inner) % extent;
    if (kind == 1) return a;
    const int64_t outer = i / (inner * extent);
    return (outer * param_extent + a / block) * inner + i % inner;
  }
};

// The zero point as int32 values (zeros when absent).
std::vector<int32_t> zero_points(const KernelContext& ctx, int64_t count) {
  std::vector<int32_t> zp(static_cast<size_t>(count), 0);
  if (ctx.inputs.size() < 3 || !ctx.inputs[2].data) return zp;
  const TensorView& z = ctx.inputs[2];
  for (int64_t i = 0; i < count; ++i) {
    switch (z.type) {
      case DataType::kInt8:
        zp[static_cast<size_t>(i)] = z.as<const int8_t>()[i];
        break;
      case DataType::kUInt8:
        zp[static_cast<size_t>(i)] = z.as<const uint8_t>()[i];
        break;
      case DataType::kInt32:
        zp[static_cast<size_t>(i)] = z.as<const int32_t>()[i];
        break;
      default:
        throw Error(std::string("Quantize/Dequantize: zero point of type ") + to_string(z.type));
    }
  }
  return zp;
}

// Scale values converted to the compute type C.
template <typename C>
std::vector<C> scales(const TensorView& s) {
  std::vector<C> out(static_cast<size_t>(s.count()));
  KILN_DISPATCH_FLOAT(s.type, "Quantize/Dequantize scale", {
    for (int64_t i = 0; i < s.count(); ++i)
      out[static_cast<size_t>(i)] = static_cast<C>(static_cast<double>(s.as<const T>()[i]));
  });
  return out;
}

template <typename X, typename C, typename Q>
void quantize_loop(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const ParamIndex pidx(*ctx.layer, x.dims, ctx.inputs[1].dims);
  const auto scale = scales<C>(ctx.inputs[1]);
  const auto zp = zero_points(ctx, ctx.inputs[1].count());
  const C lo = static_cast<C>(std::numeric_limits<Q>::min()), hi = static_cast<C>(std::numeric_limits<Q>::max());
  const X* in = x.as<const X>();
  Q* out = y.as<Q>();
  cpu::parallel_for(x.count(), ctx.num_threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto p = static_cast<size_t>(pidx(i));
      C v = std::nearbyint(static_cast<C>(in[i]) / scale[p]) + static_cast<C>(zp[p]);
      // NaN (a NaN input, or 0 / a zero scale) would survive the clamp, and converting it to an
      // integer is undefined behaviour (UBSan, found by tests/fuzz engine_load): it becomes the
      // zero point.
      if (std::isnan(v)) v = static_cast<C>(zp[p]);
      v = std::min(std::max(v, lo), hi);
      out[i] = static_cast<Q>(v);
    }
  });
}

template <typename X, typename C>
void quantize_to(const KernelContext& ctx) {
  switch (ctx.outputs[0].type) {
    case DataType::kInt8:
      quantize_loop<X, C, int8_t>(ctx);
      break;
    case DataType::kUInt8:
      quantize_loop<X, C, uint8_t>(ctx);
      break;
    default:
      throw Error(std::string("Quantize: output type ") + to_string(ctx.outputs[0].type) + " is not int8/uint8");
  }
}

void quantize_execute(const KernelContext& ctx) {
  switch (ctx.inputs[0].type) {
    case DataType::kFloat32:
      quantize_to<float, float>(ctx);
      break;
    case DataType::kFloat16:
      quantize_to<half, float>(ctx);
      break;
    case DataType::kFloat64:
      quantize_to<double, double>(ctx);
      break;
    default:
      throw Error(std::string("Quantize: input type ") + to_string(ctx.inputs[0].type) + " is not floating-point");
  }
}

template <typename Q, typename C, typename Y>
void dequantize_loop(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  const ParamIndex pidx(*ctx.layer, x.dims, ctx.inputs[1].dims);
  const auto scale = scales<C>(ctx.inputs[1]);
  const auto zp = zero_points(ctx, ctx.inputs[1].count());
  const Q* in = x.as<const Q>();
  Y* out = y.as<Y>();
  cpu::parallel_for(x.count(), ctx.num_threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto p = static_cast<size_t>(pidx(i));
      const int64_t q = static_cast<int64_t>(in[i]) - zp[p];
      out[i] = static_cast<Y>(static_cast<C>(q) * scale[p]);
    }
  });
}

template <typename Q>
void dequantize_from(const KernelContext& ctx) {
  switch (ctx.outputs[0].type) {
    case DataType::kFloat32:
      dequantize_loop<Q, float, float>(ctx);
      break;
    case DataType::kFloat16:
      dequantize_loop<Q, float, half>(ctx);
      break;
    case DataType::kFloat64:
      dequantize_loop<Q, double, double>(ctx);
      break;
    default:
      throw Error(std::string("Dequantize: output type ") + to_string(ctx.outputs[0].type) + " is not floating-point");
  }
}

void dequantize_execute(const KernelContext& ctx) {
  switch (ctx.inputs[0].type) {
    case DataType::kInt8:
      dequantize_from<int8_t>(ctx);
      break;
    case DataType::kUInt8:
      dequantize_from<uint8_t>(ctx);
      break;
    case DataType::kInt32:
      dequantize_from<int32_t>(ctx);
      break;
    default:
      throw Error(std::string("Dequantize: input type ") + to_string(ctx.inputs[0].type) + " is not int8/uint8/int32");
  }
}

bool linear_only(const Layer&, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerQuantize, "reference", 0, linear_only,
                                 function_kernel(quantize_execute)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerDequantize, "reference", 0, linear_only,
                                 function_kernel(dequantize_execute)});

}  // namespace kiln
