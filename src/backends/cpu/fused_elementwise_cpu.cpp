// CPU reference kernel of FusedElementWise: interprets the layer's register program
// (src/ir/ops_fused.h) in float32. Rather than walking the program once per element, it runs
// each instruction over a block of elements at a time (registers are blocks), so the per-op
// dispatch is paid once per block and every inner loop is a plain, vectorizable loop.
// Layout: inputs and the output are contiguous float32 in any format (element-wise ops do not
// care about the layout as long as all full-size tensors share it); single-element inputs are
// broadcast. Work is split over elements with cpu::parallel_for.
#include <array>
#include <cmath>
#include <utility>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/vector_erf.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"
#include "src/ir/op_params.h"
#include "src/ir/ops_fused.h"
#include "src/core/text.h"

namespace kiln {
namespace {

constexpr int64_t kBlock = 256;

using ActFn = void (*)(const float* x, float* y, int64_t n, float alpha, float beta);
using UnaryFn = void (*)(const float* x, float* y, int64_t n);
using BinaryFn = void (*)(const float* a, const float* b, float* y, int64_t n);

template <int K>
void act_block(const float* x, float* y, int64_t n, float alpha, float beta) {
  constexpr ActivationType kind = static_cast<ActivationType>(K);
  if constexpr (kind == ActivationType::kGeluErf) {
    cpu::gelu_erf_block(x, y, n);  // vectorized erf (vector_erf.h)
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = apply_activation(kind, x[i], alpha, beta);
  }
}

// Float-valued unary ops, as docs/layers.md defines them (round is half to even: nearbyint in the
// default rounding mode).
template <UnaryOp Op>
float unary_value(float x) {
  switch (Op) {
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kRecip:
      return 1.0f / x;
    case UnaryOp::kAbs:
      return std::fabs(x);
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kFloor:
      return std::floor(x);
    case UnaryOp::kCeil:
      return std::ceil(x);
    case UnaryOp::kRound:
      return std::nearbyint(x);
    case UnaryOp::kSin:
      return std::sin(x);
    case UnaryOp::kCos:
      return std::cos(x);
    case UnaryOp::kTan:
      return std::tan(x);
    case UnaryOp::kAsin:
      return std::asin(x);
    case UnaryOp::kAcos:
      return std::acos(x);
    case UnaryOp::kAtan:
      return std::atan(x);
    case UnaryOp::kSinh:
      return std::sinh(x);
    case UnaryOp::kCosh:
      return std::cosh(x);
    case UnaryOp::kTanh:
      return std::tanh(x);
    case UnaryOp::kAsinh:
      return std::asinh(x);
    case UnaryOp::kAcosh:
      return std::acosh(x);
    case UnaryOp::kAtanh:
      return std::atanh(x);
    case UnaryOp::kErf:
      return std::erf(x);
    case UnaryOp::kSign:
      return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? x : 0.0f));  // NaN stays NaN
    default:
      return x;  // bool-valued ops never reach here: the parser rejects them
  }
}

template <int K>
void unary_block(const float* x, float* y, int64_t n) {
  if constexpr (static_cast<UnaryOp>(K) == UnaryOp::kErf) {
    cpu::erf_block(x, y, n);  // vectorized erf (vector_erf.h)
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = unary_value<static_cast<UnaryOp>(K)>(x[i]);
  }
}

template <ElementWiseOp Op>
float binary_value(float a, float b) {
  switch (Op) {
    case ElementWiseOp::kSum:
      return a + b;
    case ElementWiseOp::kSub:
      return a - b;
    case ElementWiseOp::kProd:
      return a * b;
    case ElementWiseOp::kDiv:
      return a / b;
    case ElementWiseOp::kPow:
      return std::pow(a, b);
    case ElementWiseOp::kMax:
      return (a >= b || a != a) ? a : b;  // NaN propagates, as in the ElementWise kernel
    case ElementWiseOp::kMin:
      return (a <= b || a != a) ? a : b;
    default:
      return a;  // the parser admits only the ops above
  }
}

template <int K>
void binary_block(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = binary_value<static_cast<ElementWiseOp>(K)>(a[i], b[i]);
}

// Dispatch tables indexed by the enum value; built from the enums' ranges so they cannot fall out
// of order with the enum declarations.
constexpr int kNumActivations = static_cast<int>(ActivationType::kSwish) + 1;
constexpr int kNumUnary = static_cast<int>(UnaryOp::kIsInf) + 1;
constexpr int kNumBinary = static_cast<int>(ElementWiseOp::kXor) + 1;

template <int... K>
constexpr std::array<ActFn, sizeof...(K)> make_act_table(std::integer_sequence<int, K...>) {
  return {act_block<K>...};
}
template <int... K>
constexpr std::array<UnaryFn, sizeof...(K)> make_unary_table(std::integer_sequence<int, K...>) {
  return {unary_block<K>...};
}
template <int... K>
constexpr std::array<BinaryFn, sizeof...(K)> make_binary_table(std::integer_sequence<int, K...>) {
  return {binary_block<K>...};
}
constexpr auto kActFns = make_act_table(std::make_integer_sequence<int, kNumActivations>{});
constexpr auto kUnaryFns = make_unary_table(std::make_integer_sequence<int, kNumUnary>{});
constexpr auto kBinaryFns = make_binary_table(std::make_integer_sequence<int, kNumBinary>{});

// GELU (erf form) written out as exporters write it, 0.5 * x * (1 + erf(x / sqrt 2)) in either
// multiplication order (x / sqrt 2 may also be x * (1 / sqrt 2)), becomes one "act gelu_erf"
// instruction: one vectorized pass instead of five (the erf's loop, gelu_erf_block, is the same).
// The instructions it replaces stay in the program and are skipped when nothing else reads them.
bool near(double v, double want) { return std::fabs(v - want) <= 1e-6 * std::fabs(want); }

// The instruction that writes register `reg`, or null for an input register.
const FusedInstr* definition(const FusedProgram& p, int reg) {
  const int n = p.num_inputs;
  return reg >= n && reg - n < static_cast<int>(p.instrs.size()) ? &p.instrs[static_cast<size_t>(reg - n)] : nullptr;
}

void fold_gelu(FusedProgram& p) {
  const auto def = [&](int reg) { return definition(p, reg); };
  const auto is_const = [&](int reg, double v) {
    const FusedInstr* d = def(reg);
    return d && d->code == FusedOpCode::kConst && near(d->p0, v);
  };
  const auto is_binary = [](const FusedInstr* d, ElementWiseOp op) {
    return d && d->code == FusedOpCode::kBinary && d->op == static_cast<int32_t>(op);
  };
  // The other operand of a commutative product/sum `d` when one operand is `reg`; -1 otherwise.
  const auto other = [](const FusedInstr* d, int reg) { return d->a == reg ? d->b : (d->b == reg ? d->a : -1); };
  // x when `reg` holds erf(x / sqrt 2) (or erf(x * 0.7071...)); -1 otherwise.
  const auto erf_of_scaled = [&](int reg) -> int {
    const FusedInstr* e = def(reg);
    if (!e || e->code != FusedOpCode::kUnary || e->op != static_cast<int32_t>(UnaryOp::kErf)) return -1;
    const FusedInstr* d = def(e->a);
    if (is_binary(d, ElementWiseOp::kDiv) && is_const(d->b, 1.4142135623730951)) return d->a;
    if (is_binary(d, ElementWiseOp::kProd)) {
      if (is_const(d->b, 0.7071067811865476)) return d->a;
      if (is_const(d->a, 0.7071067811865476)) return d->b;
    }
    return -1;
  };
  // x when `reg` holds 1 + erf(x / sqrt 2); -1 otherwise.
  const auto one_plus_erf = [&](int reg) -> int {
    const FusedInstr* d = def(reg);
    if (!is_binary(d, ElementWiseOp::kSum)) return -1;
    if (is_const(d->b, 1.0)) return erf_of_scaled(d->a);
    if (is_const(d->a, 1.0)) return erf_of_scaled(d->b);
    return -1;
  };
  for (size_t k = 0; k < p.instrs.size(); ++k) {
    FusedInstr& top = p.instrs[k];
    if (!is_binary(&top, ElementWiseOp::kProd)) continue;
    int x = -1;
    for (int side = 0; side < 2 && x < 0; ++side) {
      const int u = side ? top.b : top.a, v = side ? top.a : top.b;
      const FusedInstr* du = def(u);
      // (x * (1 + erf)) * 0.5
      if (is_const(v, 0.5) && is_binary(du, ElementWiseOp::kProd)) {
        for (int w : {du->a, du->b}) {
          const int y = one_plus_erf(w);
          if (y >= 0 && other(du, w) == y) x = y;
        }
      }
      // (x * 0.5) * (1 + erf)
      if (x < 0 && is_binary(du, ElementWiseOp::kProd)) {
        const int y = one_plus_erf(v);
        if (y >= 0 && ((du->a == y && is_const(du->b, 0.5)) || (du->b == y && is_const(du->a, 0.5)))) x = y;
      }
    }
    if (x < 0) continue;
    top = FusedInstr{};
    top.code = FusedOpCode::kActivation;
    top.op = static_cast<int32_t>(ActivationType::kGeluErf);
    top.a = x;
  }
}

// Pow(x, 2) with a constant 2 (a detection head's (2 sigmoid)^2, a variance's (x - mean)^2)
// becomes x * x: libm's pow per element took 5 ns (TinyYolo's head: 0.05 ms against ONNX Runtime's
// 0.014 for its Pow), the product is exact where pow's result is within an ulp of it.
void fold_square(FusedProgram& p) {
  for (FusedInstr& ins : p.instrs) {
    if (ins.code != FusedOpCode::kBinary || ins.op != static_cast<int32_t>(ElementWiseOp::kPow)) continue;
    const FusedInstr* e = definition(p, ins.b);
    if (!e || e->code != FusedOpCode::kConst || e->p0 != 2.0) continue;
    ins.op = static_cast<int32_t>(ElementWiseOp::kProd);
    ins.b = ins.a;
  }
}

// Which instructions the output depends on (others are skipped at run time).
std::vector<bool> live_instructions(const FusedProgram& p) {
  const int n = p.num_inputs;
  std::vector<bool> live(p.instrs.size(), false);
  if (p.instrs.empty()) return live;
  live.back() = true;
  for (size_t k = p.instrs.size(); k-- > 0;) {
    if (!live[k]) continue;
    const FusedInstr& ins = p.instrs[k];
    for (int r : {ins.a, ins.b}) {
      if (r >= n) live[static_cast<size_t>(r - n)] = true;
    }
  }
  return live;
}

class FusedElementWiseRef : public Kernel {
 public:
  explicit FusedElementWiseRef(const Layer& layer) : program_(params_of<FusedProgram>(layer)) {
    fold_gelu(program_);
    fold_square(program_);
    live_ = live_instructions(program_);
    for (const FusedInstr& ins : program_.instrs) {
      const bool bad = (ins.code == FusedOpCode::kActivation && (ins.op < 0 || ins.op >= kNumActivations)) ||
                       (ins.code == FusedOpCode::kUnary && (ins.op < 0 || ins.op >= kNumUnary)) ||
                       (ins.code == FusedOpCode::kBinary && (ins.op < 0 || ins.op >= kNumBinary));
      if (bad) throw Error("layer " + quote(layer.name()) + " (FusedElementWise): op out of range in program");
    }
  }

  void execute(const KernelContext& ctx) override {
    const TensorView& out = ctx.outputs.at(0);
    if (out.type != DataType::kFloat32) throw Error("FusedElementWise: the output must be float32");
    const int64_t n = out.count();
    const int num_inputs = program_.num_inputs;
    if (static_cast<int>(ctx.inputs.size()) != num_inputs) throw Error("FusedElementWise: wrong number of inputs");
    for (const TensorView& in : ctx.inputs) {
      if (in.type != DataType::kFloat32) throw Error("FusedElementWise: every input must be float32");
      const int64_t c = in.count();
      if (c != n && c != 1) {
        throw Error("FusedElementWise: input dims " + in.dims.to_string() + " match neither the output dims " +
                    out.dims.to_string() + " nor a single element");
      }
    }
    float* y = out.as<float>();
    const int num_regs = program_.num_registers();
    const int last = num_regs - 1;

    cpu::parallel_for(n, ctx.num_threads, [&](int64_t begin, int64_t end) {
      // Register blocks; broadcast inputs and constants are filled once per chunk.
      std::vector<float> storage(static_cast<size_t>(num_regs) * kBlock);
      std::vector<const float*> reg(static_cast<size_t>(num_regs), nullptr);
      auto block = [&](int r) { return storage.data() + static_cast<int64_t>(r) * kBlock; };
      for (int i = 0; i < num_inputs; ++i) {
        if (ctx.inputs[static_cast<size_t>(i)].count() == 1 && n != 1) {
          std::fill(block(i), block(i) + kBlock, *ctx.inputs[static_cast<size_t>(i)].as<const float>());
        }
      }
      for (size_t k = 0; k < program_.instrs.size(); ++k) {
        const FusedInstr& ins = program_.instrs[k];
        const int r = num_inputs + static_cast<int>(k);
        if (ins.code == FusedOpCode::kConst && live_[k]) {
          std::fill(block(r), block(r) + kBlock, static_cast<float>(ins.p0));
        }
      }
      for (int64_t base = begin; base < end; base += kBlock) {
        const int64_t m = std::min(kBlock, end - base);
        for (int i = 0; i < num_inputs; ++i) {
          const TensorView& in = ctx.inputs[static_cast<size_t>(i)];
          reg[static_cast<size_t>(i)] = in.count() == 1 && n != 1 ? block(i) : in.as<const float>() + base;
        }
        for (size_t k = 0; k < program_.instrs.size(); ++k) {
          if (!live_[k]) continue;
          const FusedInstr& ins = program_.instrs[k];
          const int r = num_inputs + static_cast<int>(k);
          float* dst = r == last ? y + base : block(r);
          const float* a = ins.a >= 0 ? reg[static_cast<size_t>(ins.a)] : nullptr;
          switch (ins.code) {
            case FusedOpCode::kConst:
              if (r == last) std::fill(dst, dst + m, static_cast<float>(ins.p0));
              break;
            case FusedOpCode::kActivation:
              kActFns[static_cast<size_t>(ins.op)](a, dst, m, static_cast<float>(ins.p0), static_cast<float>(ins.p1));
              break;
            case FusedOpCode::kUnary:
              kUnaryFns[static_cast<size_t>(ins.op)](a, dst, m);
              break;
            case FusedOpCode::kBinary:
              kBinaryFns[static_cast<size_t>(ins.op)](a, reg[static_cast<size_t>(ins.b)], dst, m);
              break;
            case FusedOpCode::kScale: {
              const float s = static_cast<float>(ins.p0), t = static_cast<float>(ins.p1),
                          p = static_cast<float>(ins.p2);
              if (p == 1.0f) {
                for (int64_t i = 0; i < m; ++i) dst[i] = a[i] * s + t;
              } else if (p == 2.0f) {  // a square: one product, not libm's pow (as fold_square)
                for (int64_t i = 0; i < m; ++i) {
                  const float v = a[i] * s + t;
                  dst[i] = v * v;
                }
              } else {
                for (int64_t i = 0; i < m; ++i) dst[i] = std::pow(a[i] * s + t, p);
              }
              break;
            }
          }
          reg[static_cast<size_t>(r)] = dst;
        }
      }
    });
  }

 private:
  FusedProgram program_;
  std::vector<bool> live_;  // per instruction: whether the output depends on it
};

// float32 only on the CPU (the CUDA kernel also takes float16). Full-size inputs are read in
// memory order, so they must be in the output's format (single elements may be in any).
static bool fused_reference_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  const TensorFormat y_format = layer.num_outputs() > 0 ? layer.output(0)->format() : TensorFormat::kLinear;
  for (const auto& d : in) {
    if (d.present && d.type != DataType::kFloat32) return false;
    const bool single = !d.dims.is_dynamic() && d.dims.volume() == 1;
    if (d.present && !single && d.format != y_format) return false;
  }
  return true;
}

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerFusedElementWise, "reference", 0, fused_reference_supports,
    [](const Layer& layer) -> std::unique_ptr<Kernel> { return std::make_unique<FusedElementWiseRef>(layer); }});

}  // namespace
}  // namespace kiln
