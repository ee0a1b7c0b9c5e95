// CPU kernels of the element-wise layers: ElementWise, Unary, Select, Cast and Identity.
// The "reference" tactics are plain per-element loops over every data type (numpy
// broadcasting through cpu::broadcast_strides); they are the oracle of every other backend.
// The "vectorized" ElementWise tactic covers the float32 arithmetic of real models (same-shape,
// scalar and per-channel operands, and general broadcasting of linear tensors such as biases and
// attention masks) with loops over contiguous rows that the compiler vectorizes.
//
// Layout: all tensors are dense row-major (TensorFormat::kLinear); no alignment is assumed. The
// "vectorized" ElementWise also runs channels-last tensors: its cases (same shape, or one
// single-element operand) are the same in any memory order, so it only asks that the full-size
// operands share the output's format. Its per-channel case (one operand [N or 1, C, 1, ...], the
// other y-shaped: squeeze-excitation's scale, a per-channel bias) reads the small operand as
// [N][C] in either format (with every spatial extent 1 both orders are the same memory) and walks
// the full one in its own order: rows of spatial extent in linear memory, rows of C channels in
// channels-last memory, so a channels-last region keeps it instead of reformatting around it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <type_traits>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/core/int_math.h"
#include "src/backends/cpu/string_cpu.h"
#include "src/backends/kernel.h"
#include "src/ir/op_schema.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

// Type the arithmetic happens in: half computes in float; bool, 8- and 16-bit integers are
// promoted to int32 so that their arithmetic wraps (modulo 2^8, 2^16) instead of overflowing in
// odd ways; uint32 and uint64 compute in their own (wrapping) type.
template <typename T>
using Calc = std::conditional_t<std::is_same_v<T, half>, float,
                                std::conditional_t<(std::is_integral_v<T> && sizeof(T) <= 2), int32_t, T>>;

// ---- integer helpers: defined results where C++ would trap (x/0, INT_MIN/-1) ----------------

template <typename C>
C wrap_neg(C a) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(U{0} - static_cast<U>(a));
}

// Truncates toward zero (C / ONNX Runtime); x/0 is 0 rather than a SIGFPE. Unsigned types
// (uint32, uint64) have no negative operands to care about.
template <typename C>
C int_div(C a, C b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return wrap_neg(a);
  }
  return static_cast<C>(a / b);
}

template <typename C>
C int_mod(C a, C b, bool fmod) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return 0;
    C r = static_cast<C>(a % b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);  // follow the divisor's sign
    return r;
  } else {
    return static_cast<C>(a % b);
  }
}

template <typename C>
C int_floor_div(C a, C b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return wrap_neg(a);
    C q = static_cast<C>(a / b);
    if (a % b != 0 && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return static_cast<C>(a / b);
  }
}

// ---- binary ops (docs/layers.md "Element-wise ops") -----------------------------------------

// Integer sums, differences and products wrap (two's complement), as on the GPU: they are
// computed in the unsigned type of at least int's width, so neither a signed overflow nor the
// promotion of 16-bit operands to int (65535 * 65535 overflows int) is undefined behaviour.
template <typename C>
using WrapType = std::make_unsigned_t<std::common_type_t<C, unsigned>>;
template <typename C, typename F>
C wrapping(C a, C b, F f) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<C>(f(static_cast<WrapType<C>>(a), static_cast<WrapType<C>>(b)));
  } else {
    return static_cast<C>(f(a, b));
  }
}
struct OpSum {
  template <typename C>
  static C apply(C a, C b, bool) {
    return wrapping(a, b, [](auto x, auto y) { return x + y; });
  }
};
struct OpSub {
  template <typename C>
  static C apply(C a, C b, bool) {
    return wrapping(a, b, [](auto x, auto y) { return x - y; });
  }
};
struct OpProd {
  template <typename C>
  static C apply(C a, C b, bool) {
    return wrapping(a, b, [](auto x, auto y) { return x * y; });
  }
};
struct OpDiv {
  template <typename C>
  static C apply(C a, C b, bool) {
    if constexpr (std::is_integral_v<C>)
      return int_div(a, b);
    else
      return a / b;
  }
};
struct OpPow {
  template <typename C>
  static C apply(C a, C b, bool) {
    if constexpr (std::is_integral_v<C>)
      return int_pow(a, b);
    else
      return std::pow(a, b);
  }
};
// max/min propagate NaN (numpy, ONNX Runtime).
struct OpMax {
  template <typename C>
  static C apply(C a, C b, bool) {
    return (a >= b || a != a) ? a : b;
  }
};
struct OpMin {
  template <typename C>
  static C apply(C a, C b, bool) {
    return (a <= b || a != a) ? a : b;
  }
};
struct OpMod {
  template <typename C>
  static C apply(C a, C b, bool fmod) {
    if constexpr (std::is_integral_v<C>) {
      return int_mod(a, b, fmod);
    } else {
      C r = std::fmod(a, b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
  }
};
struct OpFloorDiv {
  template <typename C>
  static C apply(C a, C b, bool) {
    if constexpr (std::is_integral_v<C>)
      return int_floor_div(a, b);
    else
      return std::floor(a / b);
  }
};
struct OpEqual {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a == b;
  }
};
struct OpLess {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a < b;
  }
};
struct OpGreater {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a > b;
  }
};
struct OpLessOrEqual {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a <= b;
  }
};
struct OpGreaterOrEqual {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a >= b;
  }
};
struct OpAnd {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a != C(0) && b != C(0);
  }
};
struct OpOr {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return a != C(0) || b != C(0);
  }
};
struct OpXor {
  template <typename C>
  static bool apply(C a, C b, bool) {
    return (a != C(0)) != (b != C(0));
  }
};

// Output element type: bool for comparisons and logic, else the input type.
template <typename T, typename Op>
using BinaryOut = std::conditional_t<std::is_same_v<decltype(Op::apply(Calc<T>{}, Calc<T>{}, false)), bool>, bool, T>;

template <typename T, typename Op>
void binary_reference(const KernelContext& ctx, bool fmod) {
  using C = Calc<T>;
  using Out = BinaryOut<T, Op>;
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  const TensorView& y = ctx.outputs[0];
  const T* pa = a.as<const T>();
  const T* pb = b.as<const T>();
  Out* py = y.as<Out>();
  if (a.dims == y.dims && b.dims == y.dims) {
    cpu::parallel_for(y.count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) py[i] = static_cast<Out>(Op::apply(C(pa[i]), C(pb[i]), fmod));
    });
    return;
  }
  const auto sa = cpu::broadcast_strides(a.dims, y.dims);
  const auto sb = cpu::broadcast_strides(b.dims, y.dims);
  cpu::parallel_for(y.count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
    cpu::BroadcastCursor<2> at(y.dims, {&sa, &sb}, begin);
    for (int64_t i = begin; i < end; ++i, at.next()) {
      py[i] = static_cast<Out>(Op::apply(C(pa[at[0]]), C(pb[at[1]]), fmod));
    }
  });
}

using BinaryFn = void (*)(const KernelContext&, bool fmod);

template <typename T>
BinaryFn binary_reference_fn(ElementWiseOp op) {
  static const std::map<ElementWiseOp, BinaryFn> kTable = {
      {ElementWiseOp::kSum, &binary_reference<T, OpSum>},
      {ElementWiseOp::kSub, &binary_reference<T, OpSub>},
      {ElementWiseOp::kProd, &binary_reference<T, OpProd>},
      {ElementWiseOp::kDiv, &binary_reference<T, OpDiv>},
      {ElementWiseOp::kPow, &binary_reference<T, OpPow>},
      {ElementWiseOp::kMax, &binary_reference<T, OpMax>},
      {ElementWiseOp::kMin, &binary_reference<T, OpMin>},
      {ElementWiseOp::kMod, &binary_reference<T, OpMod>},
      {ElementWiseOp::kFloorDiv, &binary_reference<T, OpFloorDiv>},
      {ElementWiseOp::kEqual, &binary_reference<T, OpEqual>},
      {ElementWiseOp::kLess, &binary_reference<T, OpLess>},
      {ElementWiseOp::kGreater, &binary_reference<T, OpGreater>},
      {ElementWiseOp::kLessOrEqual, &binary_reference<T, OpLessOrEqual>},
      {ElementWiseOp::kGreaterOrEqual, &binary_reference<T, OpGreaterOrEqual>},
      {ElementWiseOp::kAnd, &binary_reference<T, OpAnd>},
      {ElementWiseOp::kOr, &binary_reference<T, OpOr>},
      {ElementWiseOp::kXor, &binary_reference<T, OpXor>},
  };
  return kTable.at(op);
}

// pow with an exponent of another type (ONNX Pow-12+; numpy's power(a, b).astype(a.dtype)):
// integer ** integer is exact in int64, anything else computes in double and converts to the
// base type (toward zero for integers; NaN and out-of-range give the type's minimum, as Cast).
template <typename T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, half>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}

template <typename B, typename E>
void pow_mixed_reference(const KernelContext& ctx) {
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  const TensorView& y = ctx.outputs[0];
  const auto sa = cpu::broadcast_strides(a.dims, y.dims);
  const auto sb = cpu::broadcast_strides(b.dims, y.dims);
  const B* pa = a.as<const B>();
  const E* pb = b.as<const E>();
  B* py = y.as<B>();
  cpu::parallel_for(y.count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
    cpu::BroadcastCursor<2> at(y.dims, {&sa, &sb}, begin);
    for (int64_t i = begin; i < end; ++i, at.next()) {
      const B va = pa[at[0]];
      const E vb = pb[at[1]];
      if constexpr (std::is_integral_v<B> && std::is_integral_v<E>) {
        py[i] = static_cast<B>(int_pow<int64_t>(static_cast<int64_t>(va), static_cast<int64_t>(vb)));
      } else if constexpr (std::is_integral_v<B>) {
        const double r = std::pow(as_double(va), as_double(vb));
        py[i] = (std::isnan(r) || r < -9.2e18 || r > 9.2e18) ? std::numeric_limits<B>::min()
                                                             : static_cast<B>(static_cast<int64_t>(r));
      } else {
        py[i] = static_cast<B>(static_cast<Calc<B>>(std::pow(as_double(va), as_double(vb))));
      }
    }
  });
}

class ElementWiseReference : public Kernel {
 public:
  explicit ElementWiseReference(const Layer& layer)
      : op_(params_of<ElementWiseParams>(layer).op), fmod_(params_of<ElementWiseParams>(layer).fmod) {}
  void execute(const KernelContext& ctx) override {
    if (op_ == ElementWiseOp::kPow && ctx.inputs[0].type != ctx.inputs[1].type) {
      KILN_DISPATCH_NUMERIC_WIDE(ctx.inputs[0].type, "ElementWise pow base", {
        using B = T;
        KILN_DISPATCH_NUMERIC_WIDE(ctx.inputs[1].type, "ElementWise pow exponent", pow_mixed_reference<B, T>(ctx));
      });
      return;
    }
    KILN_DISPATCH_NUMERIC_WIDE(ctx.inputs[0].type, "ElementWise", binary_reference_fn<T>(op_)(ctx, fmod_));
  }

 private:
  ElementWiseOp op_;
  bool fmod_;
};

// ---- vectorized float32 ElementWise ----------------------------------------------------------

enum class Operands { kSameShape, kScalarA, kScalarB, kChannelA, kChannelB };

// Per-channel case: y[n, c, s] = op(full[n, c, s], per_channel[n or 0, c]) (operands swapped when
// the per-channel one is a), for y of extents [n, c, spatial] in linear or channels-last memory.
struct ChannelShape {
  int64_t batch = 0, channels = 0, spatial = 0;
  bool per_channel_batched = false;  // the small operand has N rows, not 1
};

template <typename Op, bool kSmallIsA>
void per_channel_loop(const float* full, const float* small, float* y, const ChannelShape& sh, bool channels_last,
                      int num_threads) {
  const int64_t C = sh.channels, S = sh.spatial;
  const int64_t small_batch_stride = sh.per_channel_batched ? C : 0;
  if (!channels_last) {
    // Rows of S contiguous elements, one per (n, c).
    cpu::parallel_for(
        sh.batch * C, num_threads,
        [=](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const float v = small[(r / C) * small_batch_stride + r % C];
            const float* x = full + r * S;
            float* out = y + r * S;
            if constexpr (kSmallIsA) {
              for (int64_t i = 0; i < S; ++i) out[i] = Op::apply(v, x[i], false);
            } else {
              for (int64_t i = 0; i < S; ++i) out[i] = Op::apply(x[i], v, false);
            }
          }
        },
        std::max<int64_t>(1, 4096 / std::max<int64_t>(S, 1)));
    return;
  }
  // Rows of C contiguous channels, one per (n, spatial position).
  cpu::parallel_for(
      sh.batch * S, num_threads,
      [=](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* v = small + (r / S) * small_batch_stride;
          const float* x = full + r * C;
          float* out = y + r * C;
          if constexpr (kSmallIsA) {
            for (int64_t c = 0; c < C; ++c) out[c] = Op::apply(v[c], x[c], false);
          } else {
            for (int64_t c = 0; c < C; ++c) out[c] = Op::apply(x[c], v[c], false);
          }
        }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)));
}

// The three loops have compile-time strides so that the compiler emits SIMD code.
template <typename Op, Operands kMode>
void vectorized_loop(const float* a, const float* b, float* y, int64_t n, int num_threads) {
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    if constexpr (kMode == Operands::kSameShape) {
      for (int64_t i = begin; i < end; ++i) y[i] = Op::apply(a[i], b[i], false);
    } else if constexpr (kMode == Operands::kScalarA) {
      const float va = a[0];
      for (int64_t i = begin; i < end; ++i) y[i] = Op::apply(va, b[i], false);
    } else {
      const float vb = b[0];
      if constexpr (std::is_same_v<Op, OpPow>) {
        if (vb == 2.0f) {  // a square: one product, not libm's pow per element (5 ns)
          for (int64_t i = begin; i < end; ++i) y[i] = a[i] * a[i];
          return;
        }
      }
      for (int64_t i = begin; i < end; ++i) y[i] = Op::apply(a[i], vb, false);
    }
  });
}

// General broadcasting of linear tensors (a bias [C] against [N, T, C], an attention mask
// [1, 1, T, T] against [N, H, T, T], ...): the dims are coalesced where neither operand breaks
// contiguity, the output is walked as rows of its innermost coalesced extent, and each operand's
// row is contiguous (stride 1) or one repeated element (stride 0), so the inner loops vectorize;
// only the row starts take index arithmetic. Op::apply as in the reference: the same results.
constexpr int kMaxBroadcastRank = 16;
struct BroadcastShape {
  int rank = 0;  // coalesced
  int64_t extent[kMaxBroadcastRank] = {}, stride_a[kMaxBroadcastRank] = {}, stride_b[kMaxBroadcastRank] = {};
};

// False when the shapes do not broadcast to y or the rank is beyond kMaxBroadcastRank.
bool broadcast_shape(const Dims& a, const Dims& b, const Dims& y, BroadcastShape* out) {
  const int r = y.rank();
  if (r > kMaxBroadcastRank || a.rank() > r || b.rank() > r) return false;
  int64_t ext[kMaxBroadcastRank], sa[kMaxBroadcastRank], sb[kMaxBroadcastRank];
  int64_t acc_a = 1, acc_b = 1;
  for (int i = r - 1; i >= 0; --i) {
    const int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    const int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
    if ((ea != y[i] && ea != 1) || (eb != y[i] && eb != 1)) return false;
    ext[i] = y[i];
    sa[i] = ea == 1 ? 0 : acc_a;
    sb[i] = eb == 1 ? 0 : acc_b;
    acc_a *= ea;
    acc_b *= eb;
  }
  // Coalesce from the innermost dim outwards; extents of 1 drop out.
  BroadcastShape s;
  for (int i = r - 1; i >= 0; --i) {
    if (ext[i] == 1) continue;
    if (s.rank > 0) {
      const int j = s.rank - 1;  // the dim just inside this one
      if (sa[i] == s.stride_a[j] * s.extent[j] && sb[i] == s.stride_b[j] * s.extent[j]) {
        s.extent[j] *= ext[i];
        continue;
      }
    }
    s.extent[s.rank] = ext[i];
    s.stride_a[s.rank] = sa[i];
    s.stride_b[s.rank] = sb[i];
    ++s.rank;
  }
  if (s.rank == 0) s = BroadcastShape{1, {1}, {1}, {1}};
  // Stored innermost first; flip to outermost first.
  std::reverse(s.extent, s.extent + s.rank);
  std::reverse(s.stride_a, s.stride_a + s.rank);
  std::reverse(s.stride_b, s.stride_b + s.rank);
  *out = s;
  return true;
}

template <typename Op>
void broadcast_loop(const float* a, const float* b, float* y, const BroadcastShape& sh, int num_threads) {
  const int inner_dim = sh.rank - 1;
  const int64_t n = sh.extent[inner_dim];
  const int64_t ia = sh.stride_a[inner_dim], ib = sh.stride_b[inner_dim];
  int64_t rows = 1;
  for (int d = 0; d < inner_dim; ++d) rows *= sh.extent[d];
  cpu::parallel_for(
      rows, num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t oa = 0, ob = 0, rest = r;
          for (int d = inner_dim - 1; d >= 0; --d) {
            const int64_t i = rest % sh.extent[d];
            rest /= sh.extent[d];
            oa += i * sh.stride_a[d];
            ob += i * sh.stride_b[d];
          }
          const float* pa = a + oa;
          const float* pb = b + ob;
          float* out = y + r * n;
          if (ia == 1 && ib == 1) {
            for (int64_t i = 0; i < n; ++i) out[i] = Op::apply(pa[i], pb[i], false);
          } else if (ia == 1) {
            const float vb = pb[0];
            for (int64_t i = 0; i < n; ++i) out[i] = Op::apply(pa[i], vb, false);
          } else if (ib == 1) {
            const float va = pa[0];
            for (int64_t i = 0; i < n; ++i) out[i] = Op::apply(va, pb[i], false);
          } else {
            const float v = Op::apply(pa[0], pb[0], false);
            for (int64_t i = 0; i < n; ++i) out[i] = v;
          }
        }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)));
}

using VectorizedFn = void (*)(const float*, const float*, float*, int64_t, int);
using BroadcastFn = void (*)(const float*, const float*, float*, const BroadcastShape&, int);
using PerChannelFn = void (*)(const float* full, const float* small, float*, const ChannelShape&, bool, int);
struct VectorizedEntry {
  VectorizedFn same, scalar_a, scalar_b;
  PerChannelFn channel_a, channel_b;
  BroadcastFn broadcast;
};
template <typename Op>
constexpr VectorizedEntry vectorized_entry() {
  return {&vectorized_loop<Op, Operands::kSameShape>,
          &vectorized_loop<Op, Operands::kScalarA>,
          &vectorized_loop<Op, Operands::kScalarB>,
          &per_channel_loop<Op, true>,
          &per_channel_loop<Op, false>,
          &broadcast_loop<Op>};
}

// Ops worth a fast path; the rest (mod, floor_div, comparisons, logic) stay on the reference.
const std::map<ElementWiseOp, VectorizedEntry>& vectorized_table() {
  static const std::map<ElementWiseOp, VectorizedEntry> kTable = {
      {ElementWiseOp::kSum, vectorized_entry<OpSum>()},   {ElementWiseOp::kSub, vectorized_entry<OpSub>()},
      {ElementWiseOp::kProd, vectorized_entry<OpProd>()}, {ElementWiseOp::kDiv, vectorized_entry<OpDiv>()},
      {ElementWiseOp::kPow, vectorized_entry<OpPow>()},   {ElementWiseOp::kMax, vectorized_entry<OpMax>()},
      {ElementWiseOp::kMin, vectorized_entry<OpMin>()},
  };
  return kTable;
}

// numpy broadcasting of two static shapes; false when they do not broadcast.
bool static_broadcast(const Dims& a, const Dims& b, Dims* y) {
  const int rank = std::max(a.rank(), b.rank());
  Dims out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
    if (ea != eb && ea != 1 && eb != 1) return false;
    out.push_back(ea == 1 ? eb : ea);
  }
  *y = out;
  return true;
}

// Whether `small` broadcasts against `full` only over the spatial extents: full is [N, C, ...]
// of rank >= 3, small (right-aligned, missing leading extents 1) is [N or 1, C, 1, ...].
bool per_channel_shape(const Dims& full, const Dims& small, ChannelShape* sh) {
  if (full.is_dynamic() || small.is_dynamic() || full.rank() < 3 || small.rank() > full.rank()) return false;
  const int offset = full.rank() - small.rank();
  auto small_at = [&](int i) { return i < offset ? int64_t{1} : small[i - offset]; };
  if (small_at(0) != 1 && small_at(0) != full[0]) return false;
  if (small_at(1) != full[1]) return false;
  int64_t spatial = 1;
  for (int i = 2; i < full.rank(); ++i) {
    if (small_at(i) != 1) return false;
    spatial *= full[i];
  }
  *sh = ChannelShape{full[0], full[1], spatial, small_at(0) != 1 && full[0] != 1};
  return true;
}

// Which contiguous case applies, or false when the shapes need general broadcasting. `y` is the
// output's dims (the per-channel cases need the full operand to be y-shaped).
bool classify_operands(const Dims& a, const Dims& b, Operands* mode, const Dims* y = nullptr,
                       ChannelShape* sh = nullptr) {
  ChannelShape unused;
  if (!sh) sh = &unused;
  if (a == b) {
    *mode = Operands::kSameShape;
  } else if (!a.is_dynamic() && a.volume() == 1) {
    *mode = Operands::kScalarA;
  } else if (!b.is_dynamic() && b.volume() == 1) {
    *mode = Operands::kScalarB;
  } else if (y && b == *y && per_channel_shape(b, a, sh)) {
    *mode = Operands::kChannelA;
  } else if (y && a == *y && per_channel_shape(a, b, sh)) {
    *mode = Operands::kChannelB;
  } else {
    return false;
  }
  return true;
}

// Whether operand `d` is read in y's memory order in `mode` (and so must be in y's format):
// single elements and the per-channel operand read the same memory in either format.
bool operand_needs_y_format(const TensorDesc& d, int index, Operands mode) {
  if (!d.dims.is_dynamic() && d.dims.volume() == 1) return false;
  if (mode == Operands::kChannelA && index == 0) return false;
  if (mode == Operands::kChannelB && index == 1) return false;
  return true;
}

bool elementwise_vectorized_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() != 2 || inputs[0].type != DataType::kFloat32 || inputs[1].type != DataType::kFloat32) {
    return false;
  }
  const ElementWiseOp op = params_of<ElementWiseParams>(layer).op;
  if (!vectorized_table().count(op)) return false;
  const TensorFormat y_format = layer.num_outputs() > 0 ? layer.output(0)->format() : TensorFormat::kLinear;
  // With dynamic dims the case is only known at run time; execute() falls back to the reference
  // for linear tensors (operands that are not single elements then must be in y's format).
  if (inputs[0].dims.is_dynamic() || inputs[1].dims.is_dynamic()) {
    for (const TensorDesc& d : inputs) {
      if (operand_needs_y_format(d, -1, Operands::kSameShape) && d.format != y_format) return false;
    }
    return true;
  }
  Dims y;
  if (!static_broadcast(inputs[0].dims, inputs[1].dims, &y)) return false;
  Operands mode;
  if (!classify_operands(inputs[0].dims, inputs[1].dims, &mode, &y)) {
    // General broadcasting walks linear memory.
    BroadcastShape unused;
    return y_format == TensorFormat::kLinear && inputs[0].format == TensorFormat::kLinear &&
           inputs[1].format == TensorFormat::kLinear && broadcast_shape(inputs[0].dims, inputs[1].dims, y, &unused);
  }
  // Operands read in memory order must be in y's format.
  for (int i = 0; i < 2; ++i) {
    const TensorDesc& d = inputs[static_cast<size_t>(i)];
    if (operand_needs_y_format(d, i, mode) && d.format != y_format) return false;
  }
  return true;
}

class ElementWiseVectorized : public Kernel {
 public:
  explicit ElementWiseVectorized(const Layer& layer)
      : op_(params_of<ElementWiseParams>(layer).op), entry_(vectorized_table().at(op_)) {}
  void execute(const KernelContext& ctx) override {
    const TensorView& a = ctx.inputs[0];
    const TensorView& b = ctx.inputs[1];
    const TensorView& y = ctx.outputs[0];
    Operands mode;
    ChannelShape sh;
    if (!classify_operands(a.dims, b.dims, &mode, &y.dims, &sh)) {
      if (a.format != TensorFormat::kLinear || b.format != TensorFormat::kLinear || y.format != TensorFormat::kLinear) {
        throw Error("ElementWise vectorized: broadcasting " + a.dims.to_string() + " with " + b.dims.to_string() +
                    " needs linear tensors; rebuild the engine with these shapes in its profile");
      }
      BroadcastShape bs;
      if (broadcast_shape(a.dims, b.dims, y.dims, &bs)) {
        entry_.broadcast(a.as<const float>(), b.as<const float>(), y.as<float>(), bs, ctx.num_threads);
      } else {
        binary_reference_fn<float>(op_)(ctx, false);
      }
      return;
    }
    if (mode == Operands::kChannelA || mode == Operands::kChannelB) {
      const bool small_is_a = mode == Operands::kChannelA;
      const TensorView& full = small_is_a ? b : a;
      const TensorView& small = small_is_a ? a : b;
      (small_is_a ? entry_.channel_a : entry_.channel_b)(full.as<const float>(), small.as<const float>(), y.as<float>(),
                                                         sh, y.format == TensorFormat::kChannelsLast, ctx.num_threads);
      return;
    }
    const VectorizedFn fn = mode == Operands::kSameShape ? entry_.same
                            : mode == Operands::kScalarA ? entry_.scalar_a
                                                         : entry_.scalar_b;
    fn(a.as<const float>(), b.as<const float>(), y.as<float>(), y.count(), ctx.num_threads);
  }

 private:
  ElementWiseOp op_;
  VectorizedEntry entry_;
};

// ---- Unary ------------------------------------------------------------------------------------

// Transcendental ops on an integer input (rejected by shape inference) still compute, via double.
template <typename C, typename F>
C via_float(C x, F f) {
  if constexpr (std::is_floating_point_v<C>) {
    return f(x);
  } else {
    return static_cast<C>(f(static_cast<double>(x)));
  }
}

#define KILN_UNARY_MATH(Name, expr)                     \
  struct Name {                                         \
    template <typename C>                               \
    static C apply(C x) {                               \
      return via_float(x, [](auto v) { return expr; }); \
    }                                                   \
  }
KILN_UNARY_MATH(UExp, std::exp(v));
KILN_UNARY_MATH(ULog, std::log(v));
KILN_UNARY_MATH(USqrt, std::sqrt(v));
KILN_UNARY_MATH(URecip, decltype(v)(1) / v);
KILN_UNARY_MATH(USin, std::sin(v));
KILN_UNARY_MATH(UCos, std::cos(v));
KILN_UNARY_MATH(UTan, std::tan(v));
KILN_UNARY_MATH(UAsin, std::asin(v));
KILN_UNARY_MATH(UAcos, std::acos(v));
KILN_UNARY_MATH(UAtan, std::atan(v));
KILN_UNARY_MATH(USinh, std::sinh(v));
KILN_UNARY_MATH(UCosh, std::cosh(v));
KILN_UNARY_MATH(UTanh, std::tanh(v));
KILN_UNARY_MATH(UAsinh, std::asinh(v));
KILN_UNARY_MATH(UAcosh, std::acosh(v));
KILN_UNARY_MATH(UAtanh, std::atanh(v));
KILN_UNARY_MATH(UErf, std::erf(v));
#undef KILN_UNARY_MATH

struct UAbs {
  template <typename C>
  static C apply(C x) {
    if constexpr (std::is_integral_v<C>)
      return x < C(0) ? static_cast<C>(-x) : x;
    else
      return std::fabs(x);
  }
};
struct UNeg {
  template <typename C>
  static C apply(C x) {
    return static_cast<C>(-x);
  }
};
// floor/ceil/round are the identity on integers; round is half-to-even (default FP rounding mode).
struct UFloor {
  template <typename C>
  static C apply(C x) {
    if constexpr (std::is_integral_v<C>)
      return x;
    else
      return std::floor(x);
  }
};
struct UCeil {
  template <typename C>
  static C apply(C x) {
    if constexpr (std::is_integral_v<C>)
      return x;
    else
      return std::ceil(x);
  }
};
struct URound {
  template <typename C>
  static C apply(C x) {
    if constexpr (std::is_integral_v<C>)
      return x;
    else
      return std::nearbyint(x);
  }
};
struct USign {
  template <typename C>
  static C apply(C x) {
    if (x != x) return x;  // NaN stays NaN (numpy)
    return static_cast<C>((C(0) < x) - (x < C(0)));
  }
};
struct UNot {
  template <typename C>
  static bool apply(C x) {
    return x == C(0);
  }
};
struct UIsNaN {
  template <typename C>
  static bool apply(C x) {
    if constexpr (std::is_integral_v<C>)
      return false;
    else
      return std::isnan(x);
  }
};
struct UIsInf {
  template <typename C>
  static bool apply(C x) {
    if constexpr (std::is_integral_v<C>)
      return false;
    else
      return std::isinf(x);
  }
};

template <typename T, typename Op>
void unary_reference(const KernelContext& ctx) {
  using C = Calc<T>;
  using Out = std::conditional_t<std::is_same_v<decltype(Op::apply(C{})), bool>, bool, T>;
  const T* x = ctx.inputs[0].as<const T>();
  Out* y = ctx.outputs[0].as<Out>();
  cpu::parallel_for(ctx.outputs[0].count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = static_cast<Out>(Op::apply(C(x[i])));
  });
}

using UnaryFn = void (*)(const KernelContext&);

template <typename T>
UnaryFn unary_reference_fn(UnaryOp op) {
  static const std::map<UnaryOp, UnaryFn> kTable = {
      {UnaryOp::kExp, &unary_reference<T, UExp>},     {UnaryOp::kLog, &unary_reference<T, ULog>},
      {UnaryOp::kSqrt, &unary_reference<T, USqrt>},   {UnaryOp::kRecip, &unary_reference<T, URecip>},
      {UnaryOp::kAbs, &unary_reference<T, UAbs>},     {UnaryOp::kNeg, &unary_reference<T, UNeg>},
      {UnaryOp::kFloor, &unary_reference<T, UFloor>}, {UnaryOp::kCeil, &unary_reference<T, UCeil>},
      {UnaryOp::kRound, &unary_reference<T, URound>}, {UnaryOp::kSin, &unary_reference<T, USin>},
      {UnaryOp::kCos, &unary_reference<T, UCos>},     {UnaryOp::kTan, &unary_reference<T, UTan>},
      {UnaryOp::kAsin, &unary_reference<T, UAsin>},   {UnaryOp::kAcos, &unary_reference<T, UAcos>},
      {UnaryOp::kAtan, &unary_reference<T, UAtan>},   {UnaryOp::kSinh, &unary_reference<T, USinh>},
      {UnaryOp::kCosh, &unary_reference<T, UCosh>},   {UnaryOp::kTanh, &unary_reference<T, UTanh>},
      {UnaryOp::kAsinh, &unary_reference<T, UAsinh>}, {UnaryOp::kAcosh, &unary_reference<T, UAcosh>},
      {UnaryOp::kAtanh, &unary_reference<T, UAtanh>}, {UnaryOp::kErf, &unary_reference<T, UErf>},
      {UnaryOp::kNot, &unary_reference<T, UNot>},     {UnaryOp::kSign, &unary_reference<T, USign>},
      {UnaryOp::kIsNaN, &unary_reference<T, UIsNaN>}, {UnaryOp::kIsInf, &unary_reference<T, UIsInf>},
  };
  return kTable.at(op);
}

// ---- Select, Cast, Identity -------------------------------------------------------------------

// Select only moves elements, so it dispatches on the element size, not the type.
template <typename Word>
void select_reference(const KernelContext& ctx) {
  const TensorView& c = ctx.inputs[0];
  const TensorView& a = ctx.inputs[1];
  const TensorView& b = ctx.inputs[2];
  const TensorView& y = ctx.outputs[0];
  const auto sc = cpu::broadcast_strides(c.dims, y.dims);
  const auto sa = cpu::broadcast_strides(a.dims, y.dims);
  const auto sb = cpu::broadcast_strides(b.dims, y.dims);
  const uint8_t* pc = c.as<const uint8_t>();
  const Word* pa = a.as<const Word>();
  const Word* pb = b.as<const Word>();
  Word* py = y.as<Word>();
  cpu::parallel_for(y.count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
    cpu::BroadcastCursor<3> at(y.dims, {&sc, &sa, &sb}, begin);
    for (int64_t i = begin; i < end; ++i, at.next()) py[i] = pc[at[0]] != 0 ? pa[at[1]] : pb[at[2]];
  });
}

void select_execute(const KernelContext& ctx) {
  using SelectFn = void (*)(const KernelContext&);
  static const std::map<size_t, SelectFn> kBySize = {{1, &select_reference<uint8_t>},
                                                     {2, &select_reference<uint16_t>},
                                                     {4, &select_reference<uint32_t>},
                                                     {8, &select_reference<uint64_t>}};
  kBySize.at(data_type_size(ctx.inputs[1].type))(ctx);
}

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, half>;

// One element of Cast: float->int truncates toward zero (NaN and out-of-range values give the
// type's minimum instead of undefined behaviour), ->bool is != 0 (NaN -> true, as numpy).
template <typename S, typename D>
D cast_value(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    if constexpr (std::is_same_v<S, half>)
      return static_cast<float>(v) != 0.0f;
    else
      return v != S(0);
  } else if constexpr (std::is_same_v<D, half>) {
    return half(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<D> && kIsFloat<S>) {
    const double d = static_cast<double>(static_cast<std::conditional_t<std::is_same_v<S, half>, float, S>>(v));
    if (std::isnan(d) || d < -9.2e18 || d > 9.2e18) return std::numeric_limits<D>::min();
    return static_cast<D>(static_cast<int64_t>(d));  // truncates toward zero; narrowing wraps as numpy on x86
  } else if constexpr (std::is_same_v<S, half>) {
    return static_cast<D>(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

template <typename S, typename D>
void cast_loop(const KernelContext& ctx) {
  const S* x = ctx.inputs[0].as<const S>();
  D* y = ctx.outputs[0].as<D>();
  cpu::parallel_for(ctx.outputs[0].count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = cast_value<S, D>(x[i]);
  });
}

void cast_execute(const KernelContext& ctx) {
  const DataType to = ctx.outputs[0].type;
  if (to == DataType::kString || ctx.inputs[0].type == DataType::kString) {
    cpu::cast_with_strings(ctx);
    return;
  }
  KILN_DISPATCH_NUMERIC_WIDE(ctx.inputs[0].type, "Cast", {
    using S = T;
    KILN_DISPATCH_NUMERIC_WIDE(to, "Cast", cast_loop<S, T>(ctx));
  });
}

void identity_execute(const KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  if (x.type == DataType::kString) {
    cpu::copy_strings(ctx);
    return;
  }
  if (x.data != y.data) std::memcpy(y.data, x.data, static_cast<size_t>(x.count()) * data_type_size(x.type));
}

// The reference broadcasts by linear (row-major) indices: every operand that is not a single
// element, and y, in the linear format.
bool elementwise_reference_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (layer.num_outputs() > 0 && layer.output(0)->format() != TensorFormat::kLinear) return false;
  for (const TensorDesc& d : inputs) {
    const bool single = !d.dims.is_dynamic() && d.dims.volume() == 1;
    if (!single && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerElementWise, "reference", 0, elementwise_reference_supports,
                                 [](const Layer& layer) { return std::make_unique<ElementWiseReference>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerElementWise, "vectorized", 10, elementwise_vectorized_supports,
                                 [](const Layer& layer) { return std::make_unique<ElementWiseVectorized>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerUnary, "reference", 0, nullptr, [](const Layer& layer) {
                                   const UnaryOp op = params_of<UnaryParams>(layer).op;
                                   return std::make_unique<FunctionKernel>([op](const KernelContext& ctx) {
                                     KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "Unary", unary_reference_fn<T>(op)(ctx));
                                   });
                                 }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerSelect, "reference", 0, nullptr,
                                 function_kernel(select_execute)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerCast, "reference", 0, nullptr, function_kernel(cast_execute)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerIdentity, "reference", 0, nullptr,
                                 function_kernel(identity_execute)});

}  // namespace kiln
