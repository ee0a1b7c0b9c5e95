// CUDA kernel of FusedElementWise (tactic "cuda"): one kernel evaluates the layer's register
// program (src/ir/ops_fused.h) per element, so a chain of element-wise layers reads its inputs and
// writes its output once. prepare() compiles the program (cuda::compile_fused_program: dead code
// dropped, constants folded into immediates, values assigned to a few reusable slots by liveness)
// into a fixed-size struct passed by value; the kernel walks it with a switch per instruction.
//
// Each thread handles 4 consecutive elements at a time (16-byte float32 / 8-byte float16 loads
// when aligned). Live values sit in shared memory, one float4 per slot and thread ([slot][thread],
// conflict-free), because a register file cannot be indexed at run time; single-element inputs
// are read once per thread into slots of their own. Math is float32 with the CPU reference's
// definitions (accurate libdevice functions, IEEE division). Types: float32 or float16 inputs and
// output (one type). Layout: any format, as long as every output-shaped input has the output's
// format (element-wise math does not care about the order).
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/elementwise_cuda.cuh"
#include "src/ir/op_params.h"
#include "src/ir/ops_fused.h"

namespace kiln {
namespace {

using cuda::FusedKernelInstr;
using cuda::FusedKernelProgram;
using cuda::kFusedImmediate;
using cuda::kFusedMaxInputs;
using cuda::kFusedNoSlot;

constexpr int kLanes = 4;  // elements per thread and step

struct FusedIo {
  const void* in[kFusedMaxInputs];
  void* out;
};

// Device code dispatches with switches: a table of function pointers would be an indirect call
// per instruction and element, and a switch on a warp-uniform value is a single jump.
#define KILN_ACT_CASE(K)                                                 \
  case ActivationType::K:                                                \
    KILN_UNROLL for (int v = 0; v < kLanes; ++v) r[v] =                  \
        cuda::activation_value<ActivationType::K>(a[v], ins.p0, ins.p1); \
    break;

__device__ __forceinline__ void fused_activation(const FusedKernelInstr& ins, const float (&a)[kLanes],
                                                 float (&r)[kLanes]) {
  switch (static_cast<ActivationType>(ins.op)) {
    KILN_ACT_CASE(kRelu)
    KILN_ACT_CASE(kSigmoid)
    KILN_ACT_CASE(kTanh)
    KILN_ACT_CASE(kLeakyRelu)
    KILN_ACT_CASE(kElu)
    KILN_ACT_CASE(kSelu)
    KILN_ACT_CASE(kSoftplus)
    KILN_ACT_CASE(kClip)
    KILN_ACT_CASE(kHardSigmoid)
    KILN_ACT_CASE(kHardSwish)
    KILN_ACT_CASE(kSilu)
    KILN_ACT_CASE(kGeluErf)
    KILN_ACT_CASE(kGeluTanh)
    KILN_ACT_CASE(kMish)
    KILN_ACT_CASE(kSoftsign)
    KILN_ACT_CASE(kCelu)
    KILN_ACT_CASE(kThresholdedRelu)
    KILN_ACT_CASE(kSwish)
  }
}
#undef KILN_ACT_CASE

#define KILN_UNARY_CASE(K)                                                                          \
  case UnaryOp::K:                                                                                  \
    KILN_UNROLL for (int v = 0; v < kLanes; ++v) r[v] = cuda::unary_value<UnaryOp::K, float>(a[v]); \
    break;

__device__ __forceinline__ void fused_unary(const FusedKernelInstr& ins, const float (&a)[kLanes], float (&r)[kLanes]) {
  switch (static_cast<UnaryOp>(ins.op)) {
    KILN_UNARY_CASE(kExp)
    KILN_UNARY_CASE(kLog)
    KILN_UNARY_CASE(kSqrt)
    KILN_UNARY_CASE(kRecip)
    KILN_UNARY_CASE(kAbs)
    KILN_UNARY_CASE(kNeg)
    KILN_UNARY_CASE(kFloor)
    KILN_UNARY_CASE(kCeil)
    KILN_UNARY_CASE(kRound)
    KILN_UNARY_CASE(kSin)
    KILN_UNARY_CASE(kCos)
    KILN_UNARY_CASE(kTan)
    KILN_UNARY_CASE(kAsin)
    KILN_UNARY_CASE(kAcos)
    KILN_UNARY_CASE(kAtan)
    KILN_UNARY_CASE(kSinh)
    KILN_UNARY_CASE(kCosh)
    KILN_UNARY_CASE(kTanh)
    KILN_UNARY_CASE(kAsinh)
    KILN_UNARY_CASE(kAcosh)
    KILN_UNARY_CASE(kAtanh)
    KILN_UNARY_CASE(kErf)
    KILN_UNARY_CASE(kSign)
    default:  // not / isnan / isinf: rejected by the program parser
      KILN_UNROLL for (int v = 0; v < kLanes; ++v) r[v] = a[v];
  }
}
#undef KILN_UNARY_CASE

#define KILN_BINARY_CASE(K)                                             \
  case ElementWiseOp::K:                                                \
    KILN_UNROLL for (int v = 0; v < kLanes; ++v) r[v] =                 \
        cuda::binary_value<ElementWiseOp::K, float>(a[v], b[v], false); \
    break;

__device__ __forceinline__ void fused_binary(const FusedKernelInstr& ins, const float (&a)[kLanes],
                                             const float (&b)[kLanes], float (&r)[kLanes]) {
  switch (static_cast<ElementWiseOp>(ins.op)) {
    KILN_BINARY_CASE(kSum)
    KILN_BINARY_CASE(kSub)
    KILN_BINARY_CASE(kProd)
    KILN_BINARY_CASE(kDiv)
    KILN_BINARY_CASE(kPow)
    KILN_BINARY_CASE(kMax)
    KILN_BINARY_CASE(kMin)
    default:  // other ops: rejected by the program parser
      KILN_UNROLL for (int v = 0; v < kLanes; ++v) r[v] = a[v];
  }
}
#undef KILN_BINARY_CASE

__device__ __forceinline__ void fused_operand(uint8_t slot, float imm, const float4* slots, int stride,
                                              float (&x)[kLanes]) {
  if (slot == kFusedImmediate) {
    KILN_UNROLL
    for (int v = 0; v < kLanes; ++v) x[v] = imm;
  } else {
    const float4 s = slots[slot * stride];
    x[0] = s.x;
    x[1] = s.y;
    x[2] = s.z;
    x[3] = s.w;
  }
}

template <typename T>
__global__ void fused_elementwise_kernel(FusedKernelProgram prog, FusedIo io, int64_t n, bool vec) {
  extern __shared__ float4 fused_slots[];  // [num_slots][blockDim.x]
  float4* slots = fused_slots + threadIdx.x;
  const int stride = static_cast<int>(blockDim.x);
  for (int i = 0; i < prog.num_inputs; ++i) {
    if (prog.input_pinned[i] && prog.input_slot[i] != kFusedNoSlot) {
      const float v = cuda::to_float(static_cast<const T*>(io.in[i])[0]);
      slots[prog.input_slot[i] * stride] = make_float4(v, v, v, v);
    }
  }
  T* out = static_cast<T*>(io.out);
  for (int64_t base = cuda::thread_start(kLanes); base < n; base += cuda::grid_step(kLanes)) {
    const int count = n - base < kLanes ? static_cast<int>(n - base) : kLanes;
    for (int i = 0; i < prog.num_inputs; ++i) {
      const uint8_t s = prog.input_slot[i];
      if (s == kFusedNoSlot || prog.input_pinned[i]) continue;
      T x[kLanes];
      cuda::load_pack<T, kLanes>(static_cast<const T*>(io.in[i]) + base, x, count, vec);
      slots[s * stride] =
          make_float4(cuda::to_float(x[0]), cuda::to_float(x[1]), cuda::to_float(x[2]), cuda::to_float(x[3]));
    }
    float r[kLanes] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < prog.num_instrs; ++k) {
      const FusedKernelInstr ins = prog.instrs[k];
      float a[kLanes];
      fused_operand(ins.a, ins.ia, slots, stride, a);
      switch (static_cast<FusedOpCode>(ins.code)) {
        case FusedOpCode::kConst:
          KILN_UNROLL
          for (int v = 0; v < kLanes; ++v) r[v] = ins.p0;
          break;
        case FusedOpCode::kActivation:
          fused_activation(ins, a, r);
          break;
        case FusedOpCode::kUnary:
          fused_unary(ins, a, r);
          break;
        case FusedOpCode::kBinary: {
          float b[kLanes];
          fused_operand(ins.b, ins.ib, slots, stride, b);
          fused_binary(ins, a, b, r);
          break;
        }
        case FusedOpCode::kScale:
          // (x * scale + shift) ^ power, rounded step by step as the CPU reference does.
          KILN_UNROLL
          for (int v = 0; v < kLanes; ++v) r[v] = cuda::precise_pow(__fadd_rn(__fmul_rn(a[v], ins.p0), ins.p1), ins.p2);
          break;
      }
      if (k + 1 < prog.num_instrs) slots[ins.dst * stride] = make_float4(r[0], r[1], r[2], r[3]);
    }
    T y[kLanes];
    KILN_UNROLL
    for (int v = 0; v < kLanes; ++v) y[v] = cuda::from_float<T>(r[v]);
    cuda::store_pack<T, kLanes>(out + base, y, count, vec);
  }
}

bool fused_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.empty() || static_cast<int>(in.size()) > kFusedMaxInputs) return false;
  const DataType t = in[0].type;
  if (!cuda::is_cuda_float(t)) return false;
  const TensorFormat of =
      layer.num_outputs() > 0 && layer.output(0) ? layer.output(0)->format() : TensorFormat::kLinear;
  for (const TensorDesc& d : in) {
    if (!d.present || d.type != t) return false;
    const bool single = !d.dims.is_dynamic() && d.dims.volume() == 1;
    if (!single && !cuda::same_memory_order(d.dims, d.format, of)) return false;
  }
  FusedKernelProgram compiled;
  try {
    // Every input pinned is the most slots the program can need.
    return cuda::compile_fused_program(params_of<FusedProgram>(layer), std::vector<bool>(in.size(), true), &compiled,
                                       nullptr);
  } catch (const Error&) {
    return false;
  }
}

class FusedElementWiseCuda : public Kernel {
 public:
  explicit FusedElementWiseCuda(const Layer& layer) : program_(params_of<FusedProgram>(layer)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    const std::string where = "layer '" + layer.name() + "' (" + kLayerFusedElementWise + ")";
    type_ = out[0].type;
    if (!cuda::is_cuda_float(type_)) throw Error(where + ": CUDA supports float32 and float16 outputs only");
    n_ = out[0].dims.volume();
    std::vector<bool> broadcast(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].type != type_) {
        throw Error(where + ": input " + std::to_string(i) + " is " + to_string(in[i].type) + " but the output is " +
                    to_string(type_) + "; CUDA needs one type");
      }
      const int64_t c = in[i].dims.volume();
      if (c != n_ && c != 1) {
        throw Error(where + ": input " + std::to_string(i) + " dims " + in[i].dims.to_string() +
                    " match neither the output dims " + out[0].dims.to_string() + " nor a single element");
      }
      broadcast[i] = c == 1 && n_ != 1;
      if (!broadcast[i] && !cuda::same_memory_order(in[i].dims, in[i].format, out[0].format)) {
        throw Error(where + ": input " + std::to_string(i) + " is " + to_string(in[i].format) + " but the output is " +
                    to_string(out[0].format));
      }
    }
    std::string why;
    if (!cuda::compile_fused_program(program_, broadcast, &compiled_, &why)) {
      throw Error(where + ": program too large for the CUDA kernel: " + why);
    }
    block_ = compiled_.num_slots > 8 ? 128 : 256;
    smem_ = static_cast<size_t>(compiled_.num_slots) * static_cast<size_t>(block_) * sizeof(float4);
  }

  void execute(const KernelContext& ctx) override {
    if (n_ == 0) return;
    FusedIo io{};
    const size_t esz = data_type_size(type_);
    bool vec = cuda::aligned_to(ctx.outputs[0].data, esz * kLanes);
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      io.in[i] = ctx.inputs[i].data;
      if (!compiled_.input_pinned[i]) vec = vec && cuda::aligned_to(io.in[i], esz * kLanes);
    }
    io.out = ctx.outputs[0].data;
    const unsigned grid = cuda::grid_for((n_ + kLanes - 1) / kLanes, block_);
    if (type_ == DataType::kFloat16) {
      fused_elementwise_kernel<__half><<<grid, block_, smem_, cuda::stream_of(ctx)>>>(compiled_, io, n_, vec);
    } else {
      fused_elementwise_kernel<float><<<grid, block_, smem_, cuda::stream_of(ctx)>>>(compiled_, io, n_, vec);
    }
    KILN_CUDA_CHECK_LAUNCH();
  }

 private:
  FusedProgram program_;
  FusedKernelProgram compiled_;
  DataType type_ = DataType::kFloat32;
  int64_t n_ = 0;
  int block_ = 256;
  size_t smem_ = 0;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerFusedElementWise, "cuda", 10, fused_supports,
                                 [](const Layer& layer) { return std::make_unique<FusedElementWiseCuda>(layer); }});

}  // namespace kiln
