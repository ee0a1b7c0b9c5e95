// CPU reference kernel of the bitwise layers: BitShift, a logical shift of the unsigned bit
// pattern of each element with numpy broadcasting. Shift amounts of the type's width or more
// (and negative amounts of signed types, which are huge as unsigned) give 0, where C++ would
// leave the result undefined.
//
// Layout: dense row-major (TensorFormat::kLinear); no alignment is assumed.
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

template <typename T>
void bit_shift(const KernelContext& ctx) {
  using U = std::make_unsigned_t<T>;
  const bool left = params_of<BitShiftParams>(*ctx.layer).direction == BitShiftDirection::kLeft;
  const Dims& out = ctx.outputs[0].dims;
  const auto sa = cpu::broadcast_strides(ctx.inputs[0].dims, out);
  const auto sb = cpu::broadcast_strides(ctx.inputs[1].dims, out);
  const T* a = ctx.inputs[0].as<const T>();
  const T* b = ctx.inputs[1].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  constexpr uint64_t kBits = sizeof(U) * 8;
  cpu::BroadcastCursor<2> at(out, {&sa, &sb}, 0);
  for (int64_t i = 0; i < out.volume(); ++i, at.next()) {
    const auto x = static_cast<U>(a[at[0]]);
    const auto shift = static_cast<uint64_t>(static_cast<U>(b[at[1]]));
    U r = 0;
    if (shift < kBits) r = static_cast<U>(left ? x << shift : x >> shift);
    y[i] = static_cast<T>(r);
  }
}

void bit_shift_any(const KernelContext& ctx) {
  switch (ctx.inputs[0].type) {
    case DataType::kUInt8:
      return bit_shift<uint8_t>(ctx);
    case DataType::kInt8:
      return bit_shift<int8_t>(ctx);
    case DataType::kInt32:
      return bit_shift<int32_t>(ctx);
    case DataType::kInt64:
      return bit_shift<int64_t>(ctx);
    case DataType::kUInt16:
      return bit_shift<uint16_t>(ctx);
    case DataType::kUInt32:
      return bit_shift<uint32_t>(ctx);
    case DataType::kUInt64:
      return bit_shift<uint64_t>(ctx);
    case DataType::kInt16:
      return bit_shift<int16_t>(ctx);
    default:
      throw Error(std::string("BitShift: unsupported data type ") + to_string(ctx.inputs[0].type));
  }
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerBitShift, "reference", 0, nullptr,
                                 function_kernel(bit_shift_any)});

}  // namespace kiln
