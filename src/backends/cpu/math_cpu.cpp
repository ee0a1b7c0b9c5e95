// CPU kernels of the math layers: Activation, ParametricReLU, Scale, SoftMax, Reduce,
// MatrixMultiply and Gemm. The "reference" tactics are plain loops (matrix products and
// reductions accumulate in double, or int64 for integers) and serve as the oracle of every
// other backend. "vectorized" tactics for Activation and Scale run float32 loops over
// contiguous data, specialized per activation kind / scale mode so that the compiler emits SIMD
// code, parallelized with cpu::parallel_for.
//
// Layout: all tensors are dense row-major (TensorFormat::kLinear); no alignment is assumed. The
// "vectorized" Activation, and Scale in uniform mode, work element by element, so they also run
// channels-last tensors (x and y in one format).
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <type_traits>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/vector_erf.h"
#include "src/backends/cpu/vector_exp.h"
#include "src/backends/kernel.h"
#include "src/core/activation_math.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/reduce_params.h"
#include "src/core/text.h"

namespace kiln {
namespace {

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, half>;
// Arithmetic type of a floating-point storage type (half computes in float).
template <typename T>
using FloatCalc = std::conditional_t<std::is_same_v<T, half>, float, T>;
// Accumulator of sums and products: double for floating point, int64 for integers.
template <typename T>
using Acc = std::conditional_t<kIsFloat<T>, double, int64_t>;

const TensorView* optional_input(const KernelContext& ctx, size_t i) {
  return i < ctx.inputs.size() && ctx.inputs[i].data != nullptr ? &ctx.inputs[i] : nullptr;
}

int64_t product(const Dims& dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// ---- Activation -----------------------------------------------------------------------------

struct ActivationArgs {
  ActivationType kind;
  float alpha, beta;
  double alpha64, beta64;  // the attributes as stored, for the float64 path
  explicit ActivationArgs(const Layer& layer) : ActivationArgs(params_of<ActivationParams>(layer)) {}
  explicit ActivationArgs(const ActivationParams& p)
      : kind(p.kind),
        alpha(static_cast<float>(p.alpha)),
        beta(static_cast<float>(p.beta)),
        alpha64(p.alpha),
        beta64(p.beta) {}
};

// Computes in float for float32 and float16, in double for float64 (activation_value is the
// shared definition).
void activation_reference(const KernelContext& ctx, const ActivationArgs& p) {
  KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "Activation", {
    const T* x = ctx.inputs[0].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    cpu::parallel_for(ctx.outputs[0].count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if constexpr (std::is_same_v<T, double>) {
          y[i] = activation_value<double>(p.kind, x[i], p.alpha64, p.beta64);
        } else {
          y[i] = static_cast<T>(apply_activation(p.kind, static_cast<float>(x[i]), p.alpha, p.beta));
        }
      }
    });
  });
}

// One loop per kind: with the kind a compile-time constant, apply_activation's switch folds
// away and the loop body is straight-line code.
template <ActivationType kKind>
void activation_loop(const float* x, float* y, int64_t n, float alpha, float beta, int num_threads) {
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    if constexpr (kKind == ActivationType::kGeluErf) {
      cpu::gelu_erf_block(x + begin, y + begin, end - begin);  // vectorized erf (vector_erf.h)
    } else {
      for (int64_t i = begin; i < end; ++i) y[i] = apply_activation(kKind, x[i], alpha, beta);
    }
  });
}

using ActivationLoop = void (*)(const float*, float*, int64_t, float, float, int);

const std::map<ActivationType, ActivationLoop>& activation_loops() {
  using A = ActivationType;
  static const std::map<ActivationType, ActivationLoop> kTable = {
      {A::kRelu, &activation_loop<A::kRelu>},
      {A::kSigmoid, &activation_loop<A::kSigmoid>},
      {A::kTanh, &activation_loop<A::kTanh>},
      {A::kLeakyRelu, &activation_loop<A::kLeakyRelu>},
      {A::kElu, &activation_loop<A::kElu>},
      {A::kSelu, &activation_loop<A::kSelu>},
      {A::kSoftplus, &activation_loop<A::kSoftplus>},
      {A::kClip, &activation_loop<A::kClip>},
      {A::kHardSigmoid, &activation_loop<A::kHardSigmoid>},
      {A::kHardSwish, &activation_loop<A::kHardSwish>},
      {A::kSilu, &activation_loop<A::kSilu>},
      {A::kGeluErf, &activation_loop<A::kGeluErf>},
      {A::kGeluTanh, &activation_loop<A::kGeluTanh>},
      {A::kMish, &activation_loop<A::kMish>},
      {A::kSoftsign, &activation_loop<A::kSoftsign>},
      {A::kCelu, &activation_loop<A::kCelu>},
      {A::kThresholdedRelu, &activation_loop<A::kThresholdedRelu>},
      {A::kSwish, &activation_loop<A::kSwish>},
  };
  return kTable;
}

class ActivationVectorized : public Kernel {
 public:
  explicit ActivationVectorized(const Layer& layer) : p_(layer), loop_(activation_loops().at(p_.kind)) {}
  void execute(const KernelContext& ctx) override {
    loop_(ctx.inputs[0].as<const float>(), ctx.outputs[0].as<float>(), ctx.outputs[0].count(), p_.alpha, p_.beta,
          ctx.num_threads);
  }

 private:
  ActivationArgs p_;
  ActivationLoop loop_;
};

bool float32_input(const Layer&, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && inputs[0].type == DataType::kFloat32;
}

TensorFormat output_format(const Layer& layer) {
  return layer.num_outputs() > 0 ? layer.output(0)->format() : TensorFormat::kLinear;
}

// Element by element over memory: x and y in one format.
bool activation_vectorized_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return float32_input(layer, inputs) && inputs[0].format == output_format(layer);
}

// ---- ParametricReLU ---------------------------------------------------------------------------

void parametric_relu_reference(const KernelContext& ctx) {
  KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "ParametricReLU", {
    using C = FloatCalc<T>;
    const TensorView& xv = ctx.inputs[0];
    const T* x = xv.as<const T>();
    const T* slope = ctx.inputs[1].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    const auto ss = cpu::broadcast_strides(ctx.inputs[1].dims, xv.dims);
    cpu::parallel_for(xv.count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
      cpu::BroadcastCursor<1> at(xv.dims, {&ss}, begin);
      for (int64_t i = begin; i < end; ++i, at.next()) {
        const C v = static_cast<C>(x[i]);
        y[i] = static_cast<T>(v >= C(0) ? v : static_cast<C>(slope[at[0]]) * v);
      }
    });
  });
}

// ---- Scale ------------------------------------------------------------------------------------

// Extents around the channel axis of mode kChannel: x is [outer, channels, inner].
void scale_split(const ScaleParams& p, const Dims& x, int64_t* outer, int64_t* channels, int64_t* inner) {
  const int axis = static_cast<int>(p.channel_axis < 0 ? p.channel_axis + x.rank() : p.channel_axis);
  *outer = product(x, 0, axis);
  *channels = x[axis];
  *inner = product(x, axis + 1, x.rank());
}

// Maps a flat index of x to the index of one scale/shift/power term.
struct ScaleTermIndex {
  ScaleMode mode = ScaleMode::kUniform;
  int64_t channels = 1, inner = 1;
  bool broadcast = false;  // elementwise term broadcast to x (else it is used flat)
  std::vector<int64_t> strides;
  const Dims* x_dims = nullptr;

  int64_t operator()(int64_t i) const {
    switch (mode) {
      case ScaleMode::kUniform:
        return 0;
      case ScaleMode::kChannel:
        return (i / inner) % channels;
      case ScaleMode::kElementWise:
        return broadcast ? cpu::broadcast_offset(i, *x_dims, strides) : i;
    }
    return 0;
  }
};

bool term_broadcasts(const Dims& t, const Dims& x) {
  if (t.rank() > x.rank()) return false;
  for (int i = 0; i < t.rank(); ++i) {
    if (t[i] != 1 && t[i] != x[x.rank() - t.rank() + i]) return false;
  }
  return true;
}

void scale_reference(const KernelContext& ctx, const ScaleParams& p) {
  const TensorView& xv = ctx.inputs[0];
  const TensorView* terms[3] = {optional_input(ctx, 1), optional_input(ctx, 2), optional_input(ctx, 3)};
  ScaleTermIndex index[3];
  for (int t = 0; t < 3; ++t) {
    index[t].mode = p.mode;
    index[t].x_dims = &xv.dims;
    if (p.mode == ScaleMode::kChannel) {
      int64_t outer;
      scale_split(p, xv.dims, &outer, &index[t].channels, &index[t].inner);
    }
    if (terms[t] && p.mode == ScaleMode::kElementWise && term_broadcasts(terms[t]->dims, xv.dims)) {
      index[t].broadcast = true;
      index[t].strides = cpu::broadcast_strides(terms[t]->dims, xv.dims);
    }
  }
  KILN_DISPATCH_FLOAT(xv.type, "Scale", {
    using C = FloatCalc<T>;
    const T* x = xv.as<const T>();
    const T* scale = terms[0] ? terms[0]->as<const T>() : nullptr;
    const T* shift = terms[1] ? terms[1]->as<const T>() : nullptr;
    const T* power = terms[2] ? terms[2]->as<const T>() : nullptr;
    T* y = ctx.outputs[0].as<T>();
    cpu::parallel_for(xv.count(), ctx.num_threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        C v = static_cast<C>(x[i]);
        if (scale) v = v * static_cast<C>(scale[index[0](i)]);
        if (shift) v = v + static_cast<C>(shift[index[1](i)]);
        if (power) v = std::pow(v, static_cast<C>(power[index[2](i)]));
        y[i] = static_cast<T>(v);
      }
    });
  });
}

// float32, contiguous rows of `inner` elements sharing one scale/shift/power.
void scale_rows(const float* x, float* y, int64_t rows, int64_t inner, const float* scale, const float* shift,
                const float* power, int64_t channels, int num_threads) {
  cpu::parallel_for(
      rows, num_threads,
      [=](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t c = r % channels;
          const float s = scale ? scale[c] : 1.0f, b = shift ? shift[c] : 0.0f;
          const float* xr = x + r * inner;
          float* yr = y + r * inner;
          for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] * s + b;
          if (power) {
            const float pw = power[c];
            for (int64_t i = 0; i < inner; ++i) yr[i] = std::pow(yr[i], pw);
          }
        }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)));
}

// Per-element terms of x's size (term pointers may be null).
void scale_flat(const float* x, float* y, int64_t n, const float* scale, const float* shift, const float* power,
                int num_threads) {
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    if (scale && shift) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] * scale[i] + shift[i];
    } else if (scale) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] * scale[i];
    } else if (shift) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] + shift[i];
    } else {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i];
    }
    if (power) {
      for (int64_t i = begin; i < end; ++i) y[i] = std::pow(y[i], power[i]);
    }
  });
}

void scale_uniform(const float* x, float* y, int64_t n, const float* scale, const float* shift, const float* power,
                   int num_threads) {
  const float s = scale ? scale[0] : 1.0f, b = shift ? shift[0] : 0.0f;
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = x[i] * s + b;
    if (power) {
      const float pw = power[0];
      for (int64_t i = begin; i < end; ++i) y[i] = std::pow(y[i], pw);
    }
  });
}

class ScaleVectorized : public Kernel {
 public:
  explicit ScaleVectorized(const Layer& layer) : p_(params_of<ScaleParams>(layer)) {}
  void execute(const KernelContext& ctx) override {
    const TensorView& xv = ctx.inputs[0];
    const TensorView* terms[3] = {optional_input(ctx, 1), optional_input(ctx, 2), optional_input(ctx, 3)};
    const float* t[3];
    for (int i = 0; i < 3; ++i) t[i] = terms[i] ? terms[i]->as<const float>() : nullptr;
    const float* x = xv.as<const float>();
    float* y = ctx.outputs[0].as<float>();
    const int64_t n = xv.count();
    if (p_.mode == ScaleMode::kUniform) {
      scale_uniform(x, y, n, t[0], t[1], t[2], ctx.num_threads);
    } else if (p_.mode == ScaleMode::kChannel) {
      int64_t outer, channels, inner;
      scale_split(p_, xv.dims, &outer, &channels, &inner);
      scale_rows(x, y, outer * channels, inner, t[0], t[1], t[2], channels, ctx.num_threads);
    } else {
      for (const TensorView* term : terms) {
        if (term && term->count() != n) {
          scale_reference(ctx, p_);  // a broadcast term needs general indexing
          return;
        }
      }
      scale_flat(x, y, n, t[0], t[1], t[2], ctx.num_threads);
    }
  }

 private:
  ScaleParams p_;
};

// Channel and element-wise terms index x in linear order: channels-last only in uniform mode.
bool scale_vectorized_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (!float32_input(layer, inputs)) return false;
  if (inputs[0].format == TensorFormat::kLinear && output_format(layer) == TensorFormat::kLinear) return true;
  return inputs[0].format == output_format(layer) && params_of<ScaleParams>(layer).mode == ScaleMode::kUniform;
}

// ---- SoftMax ----------------------------------------------------------------------------------

// x viewed as [outer, length, inner]; each (outer, inner) pair is one softmax over `length`
// values `inner` apart. Subtracting the max keeps exp() from overflowing; sums are in double.
void softmax_reference(const KernelContext& ctx, int64_t axis_attr, bool log) {
  const TensorView& xv = ctx.inputs[0];
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + xv.dims.rank() : axis_attr);
  const int64_t outer = product(xv.dims, 0, axis), length = xv.dims[axis];
  const int64_t inner = product(xv.dims, axis + 1, xv.dims.rank());
  KILN_DISPATCH_FLOAT(xv.type, "SoftMax", {
    const T* x = xv.as<const T>();
    T* y = ctx.outputs[0].as<T>();
    cpu::parallel_for(
        outer * inner, ctx.num_threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t base = (r / inner) * length * inner + r % inner;
            double max = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < length; ++j) max = std::max(max, static_cast<double>(x[base + j * inner]));
            double sum = 0.0;
            for (int64_t j = 0; j < length; ++j) sum += std::exp(static_cast<double>(x[base + j * inner]) - max);
            const double log_sum = std::log(sum);
            for (int64_t j = 0; j < length; ++j) {
              const double shifted = static_cast<double>(x[base + j * inner]) - max;
              y[base + j * inner] = static_cast<T>(log ? shifted - log_sum : std::exp(shifted) / sum);
            }
          }
        },
        std::max<int64_t>(1, 1024 / std::max<int64_t>(length, 1)));
  });
}

// The "rows" tactic: float32 softmax over the last axis of a linear tensor, each row in float32
// with the vectorized exp (vector_exp.h) instead of double and libm. Parallel over rows.
bool softmax_rows_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].type != DataType::kFloat32 || inputs[0].format != TensorFormat::kLinear) return false;
  if (layer.num_outputs() > 0 && layer.output(0)->format() != TensorFormat::kLinear) return false;
  const int64_t axis = params_of<SoftMaxParams>(layer).axis;
  const int rank = inputs[0].dims.rank();
  return rank > 0 && (axis == -1 || axis == rank - 1);
}

void softmax_rows(const KernelContext& ctx, bool log) {
  const TensorView& xv = ctx.inputs[0];
  const int64_t length = xv.dims[xv.dims.rank() - 1];
  if (length <= 0) return;
  const int64_t rows = xv.count() / length;
  const float* x = xv.as<const float>();
  float* y = ctx.outputs[0].as<float>();
  cpu::parallel_for(
      rows, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) cpu::softmax_row(x + r * length, y + r * length, length, log);
      },
      std::max<int64_t>(1, 8192 / length));
}

// ---- Reduce -----------------------------------------------------------------------------------

// Each op folds the `count` values p[offsets[j]] of one output element.
#define KILN_REDUCE_OP(Name, init, step, finish)                      \
  struct Name {                                                       \
    template <typename T>                                             \
    static T run(const T* p, const int64_t* offsets, int64_t count) { \
      using A = Acc<T>;                                               \
      A acc = init;                                                   \
      for (int64_t j = 0; j < count; ++j) {                           \
        const A v = static_cast<A>(p[offsets[j]]);                    \
        step;                                                         \
      }                                                               \
      (void)count;                                                    \
      return static_cast<T>(finish);                                  \
    }                                                                 \
  }
KILN_REDUCE_OP(RSum, A(0), acc += v, acc);
KILN_REDUCE_OP(RMean, A(0), acc += v, count > 0 ? acc / static_cast<A>(count) : A(0) / A(1));
KILN_REDUCE_OP(RMax, std::numeric_limits<A>::lowest(), acc = (v > acc || v != v) ? v : acc, acc);
KILN_REDUCE_OP(RMin, std::numeric_limits<A>::max(), acc = (v < acc || v != v) ? v : acc, acc);
KILN_REDUCE_OP(RProd, A(1), acc *= v, acc);
KILN_REDUCE_OP(RL1, A(0), acc += (v < A(0) ? -v : v), acc);
KILN_REDUCE_OP(RL2, A(0), acc += v * v, std::sqrt(static_cast<double>(acc)));
KILN_REDUCE_OP(RSumSquare, A(0), acc += v * v, acc);
KILN_REDUCE_OP(RLogSum, A(0), acc += v, std::log(static_cast<double>(acc)));
#undef KILN_REDUCE_OP

// log(sum(exp(x))) computed as max + log(sum(exp(x - max))) so that large inputs do not overflow.
struct RLogSumExp {
  template <typename T>
  static T run(const T* p, const int64_t* offsets, int64_t count) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < count; ++j) max = std::max(max, static_cast<double>(p[offsets[j]]));
    if (std::isinf(max)) return static_cast<T>(max);
    double sum = 0.0;
    for (int64_t j = 0; j < count; ++j) sum += std::exp(static_cast<double>(p[offsets[j]]) - max);
    return static_cast<T>(max + std::log(sum));
  }
};

template <typename T, typename Op>
void reduce_loop(const KernelContext& ctx, const std::vector<bool>& reduced) {
  const TensorView& xv = ctx.inputs[0];
  const Dims& in = xv.dims;
  const auto in_strides = row_major_strides(in);
  // keep_shape: the input with reduced axes set to 1 (same layout as the output either way).
  Dims keep_shape, red_dims;
  std::vector<int64_t> red_strides;
  for (int i = 0; i < in.rank(); ++i) {
    keep_shape.push_back(reduced[static_cast<size_t>(i)] ? 1 : in[i]);
    if (reduced[static_cast<size_t>(i)]) {
      red_dims.push_back(in[i]);
      red_strides.push_back(in_strides[static_cast<size_t>(i)]);
    }
  }
  // Offsets (relative to an output's first input element) of the values folded into it.
  std::vector<int64_t> offsets(static_cast<size_t>(red_dims.volume()));
  for (size_t r = 0; r < offsets.size(); ++r) {
    offsets[r] = cpu::broadcast_offset(static_cast<int64_t>(r), red_dims, red_strides);
  }
  const T* x = xv.as<const T>();
  T* y = ctx.outputs[0].as<T>();
  const auto count = static_cast<int64_t>(offsets.size());
  cpu::parallel_for(
      keep_shape.volume(), ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          y[o] = Op::run(x + cpu::broadcast_offset(o, keep_shape, in_strides), offsets.data(), count);
        }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(count, 1)));
}

using ReduceFn = void (*)(const KernelContext&, const std::vector<bool>&);

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  static const std::map<ReduceOp, ReduceFn> kTable = {
      {ReduceOp::kSum, &reduce_loop<T, RSum>},       {ReduceOp::kMean, &reduce_loop<T, RMean>},
      {ReduceOp::kMax, &reduce_loop<T, RMax>},       {ReduceOp::kMin, &reduce_loop<T, RMin>},
      {ReduceOp::kProd, &reduce_loop<T, RProd>},     {ReduceOp::kL1, &reduce_loop<T, RL1>},
      {ReduceOp::kL2, &reduce_loop<T, RL2>},         {ReduceOp::kSumSquare, &reduce_loop<T, RSumSquare>},
      {ReduceOp::kLogSum, &reduce_loop<T, RLogSum>}, {ReduceOp::kLogSumExp, &reduce_loop<T, RLogSumExp>},
  };
  return kTable.at(op);
}

class ReduceReference : public Kernel {
 public:
  explicit ReduceReference(const ReduceParams& params) : params_(params) {}
  void execute(const KernelContext& ctx) override {
    const std::vector<bool> reduced = reduced_axes(params_, ctx.inputs[0].dims.rank());
    KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "Reduce", reduce_fn<T>(params_.op)(ctx, reduced));
  }

 private:
  ReduceParams params_;
};

// ---- MatrixMultiply, Gemm -----------------------------------------------------------------------

// One operand as a batch of matrices: element (row, col) of the logical (possibly transposed)
// matrix of batch entry b lies at base(b) + row * row_stride + col * col_stride.
struct MatrixOperand {
  int64_t rows = 1, cols = 1, row_stride = 0, col_stride = 0, matrix_size = 1;
  Dims batch;

  // vector_is_row: how a 1-D operand is promoted (a: [1,K], b: [K,1]); transposes swap the
  // last two dims of a >= 2-D operand.
  MatrixOperand(const Dims& d, bool transpose, bool vector_is_row) {
    int64_t r, c;
    if (d.rank() == 1) {
      r = vector_is_row ? 1 : d[0];
      c = vector_is_row ? d[0] : 1;
      transpose = false;
    } else {
      r = d[d.rank() - 2];
      c = d[d.rank() - 1];
      for (int i = 0; i + 2 < d.rank(); ++i) batch.push_back(d[i]);
    }
    matrix_size = r * c;
    rows = transpose ? c : r;
    cols = transpose ? r : c;
    row_stride = transpose ? 1 : c;
    col_stride = transpose ? c : 1;
  }
};

Dims broadcast_batch(const Dims& a, const Dims& b) {
  const int rank = std::max(a.rank(), b.rank());
  Dims out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      throw Error("MatrixMultiply: batch dims " + a.to_string() + " and " + b.to_string() + " do not broadcast");
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

template <typename T>
void matrix_multiply_reference(const KernelContext& ctx, bool transpose_a, bool transpose_b) {
  const MatrixOperand a(ctx.inputs[0].dims, transpose_a, true);
  const MatrixOperand b(ctx.inputs[1].dims, transpose_b, false);
  if (a.cols != b.rows) {
    throw Error("MatrixMultiply: inner dimensions differ (" + std::to_string(a.cols) + " vs " + std::to_string(b.rows) +
                ")");
  }
  const Dims batch = broadcast_batch(a.batch, b.batch);
  const auto a_batch_strides = cpu::broadcast_strides(a.batch, batch);
  const auto b_batch_strides = cpu::broadcast_strides(b.batch, batch);
  const int64_t m_size = a.rows, n_size = b.cols, k_size = a.cols;
  const T* pa = ctx.inputs[0].as<const T>();
  const T* pb = ctx.inputs[1].as<const T>();
  T* py = ctx.outputs[0].as<T>();
  const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(n_size * k_size, 1));
  cpu::parallel_for(
      batch.volume() * m_size, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t bi = row / m_size, m = row % m_size;
          const T* ra = pa + cpu::broadcast_offset(bi, batch, a_batch_strides) * a.matrix_size + m * a.row_stride;
          const T* mb = pb + cpu::broadcast_offset(bi, batch, b_batch_strides) * b.matrix_size;
          for (int64_t n = 0; n < n_size; ++n) {
            Acc<T> acc = 0;
            for (int64_t k = 0; k < k_size; ++k) {
              acc += static_cast<Acc<T>>(ra[k * a.col_stride]) *
                     static_cast<Acc<T>>(mb[k * b.row_stride + n * b.col_stride]);
            }
            py[row * n_size + n] = static_cast<T>(acc);
          }
        }
      },
      min_rows);
}

// The bias [N], residual (the output's dims) and activation the CPU builder fuses into a
// MatrixMultiply (float types; float16 where --fp16 runs the layer in it), computed in float32:
// act(product + bias + residual).
template <typename T>
void matrix_multiply_epilogue(const KernelContext& ctx, bool bias, bool residual, const PostOp& post) {
  const TensorView& y = ctx.outputs[0];
  const int64_t n = y.dims.rank() > 0 ? y.dims[y.dims.rank() - 1] : 1, count = y.count();
  if (bias && ctx.inputs[2].count() != n) {
    throw Error("MatrixMultiply: the bias has " + std::to_string(ctx.inputs[2].count()) + " elements, the product " +
                std::to_string(n) + " columns");
  }
  if (residual && ctx.inputs[3].dims != y.dims) {
    throw Error("MatrixMultiply: the residual " + ctx.inputs[3].dims.to_string() + " differs from the product's " +
                y.dims.to_string());
  }
  const T* b = bias ? ctx.inputs[2].as<const T>() : nullptr;
  const T* r = residual ? ctx.inputs[3].as<const T>() : nullptr;
  T* out = y.as<T>();
  for (int64_t i = 0; i < count; ++i) {
    float v = static_cast<float>(out[i]);
    if (b) v += static_cast<float>(b[i % n]);
    if (r) v += static_cast<float>(r[i]);
    out[i] = static_cast<T>(post.apply(v));
  }
}

class GemmReference : public Kernel {
 public:
  explicit GemmReference(const Layer& layer)
      : alpha_(params_of<GemmParams>(layer).alpha),
        beta_(params_of<GemmParams>(layer).beta),
        trans_a_(params_of<GemmParams>(layer).trans_a),
        trans_b_(params_of<GemmParams>(layer).trans_b),
        post_(read_post_op(layer)) {}

  void execute(const KernelContext& ctx) override { KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "Gemm", run<T>(ctx)); }

 private:
  template <typename T>
  void run(const KernelContext& ctx) const {
    const MatrixOperand a(ctx.inputs[0].dims, trans_a_, true);
    const MatrixOperand b(ctx.inputs[1].dims, trans_b_, false);
    if (a.cols != b.rows) {
      throw Error("Gemm: inner dimensions differ (" + std::to_string(a.cols) + " vs " + std::to_string(b.rows) + ")");
    }
    const int64_t m_size = a.rows, n_size = b.cols, k_size = a.cols;
    const TensorView* c = optional_input(ctx, 2);
    const Dims out{m_size, n_size};
    const auto c_strides = c ? cpu::broadcast_strides(c->dims, out) : std::vector<int64_t>{};
    const T* pa = ctx.inputs[0].as<const T>();
    const T* pb = ctx.inputs[1].as<const T>();
    const T* pc = c ? c->as<const T>() : nullptr;
    T* py = ctx.outputs[0].as<T>();
    const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(n_size * k_size, 1));
    cpu::parallel_for(
        m_size, ctx.num_threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t m = begin; m < end; ++m) {
            for (int64_t n = 0; n < n_size; ++n) {
              double acc = 0.0;
              for (int64_t k = 0; k < k_size; ++k) {
                acc += static_cast<double>(pa[m * a.row_stride + k * a.col_stride]) *
                       static_cast<double>(pb[k * b.row_stride + n * b.col_stride]);
              }
              double v = alpha_ * acc;
              if (pc) v += beta_ * static_cast<double>(pc[m * c_strides[0] + n * c_strides[1]]);
              py[m * n_size + n] = static_cast<T>(post_.enabled ? post_.apply(static_cast<float>(v)) : v);
            }
          }
        },
        min_rows);
  }

  double alpha_, beta_;
  bool trans_a_, trans_b_;
  PostOp post_;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerActivation, "reference", 0, nullptr, [](const Layer& layer) {
                                   const ActivationArgs p(layer);
                                   return std::make_unique<FunctionKernel>(
                                       [p](const KernelContext& ctx) { activation_reference(ctx, p); });
                                 }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerActivation, "vectorized", 10, activation_vectorized_supports,
                                 [](const Layer& layer) { return std::make_unique<ActivationVectorized>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerParametricReLU, "reference", 0, nullptr,
                                 function_kernel(parametric_relu_reference)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerScale, "reference", 0, nullptr, [](const Layer& layer) {
                                   const ScaleParams p = params_of<ScaleParams>(layer);
                                   return std::make_unique<FunctionKernel>(
                                       [p](const KernelContext& ctx) { scale_reference(ctx, p); });
                                 }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerScale, "vectorized", 10, scale_vectorized_supports,
                                 [](const Layer& layer) { return std::make_unique<ScaleVectorized>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerSoftMax, "rows", 10, softmax_rows_supports, [](const Layer& layer) {
      const bool log = params_of<SoftMaxParams>(layer).log;
      return std::make_unique<FunctionKernel>([log](const KernelContext& ctx) { softmax_rows(ctx, log); });
    }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerSoftMax, "reference", 0, nullptr, [](const Layer& layer) {
                                   const int64_t axis = params_of<SoftMaxParams>(layer).axis;
                                   const bool log = params_of<SoftMaxParams>(layer).log;
                                   return std::make_unique<FunctionKernel>(
                                       [axis, log](const KernelContext& ctx) { softmax_reference(ctx, axis, log); });
                                 }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerReduce, "reference", 0, nullptr, [](const Layer& layer) {
                                   return std::make_unique<ReduceReference>(params_of<ReduceParams>(layer));
                                 }});
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerMatrixMultiply, "reference", 0, nullptr, [](const Layer& layer) {
      const bool ta = params_of<MatMulParams>(layer).transpose_a;
      const bool tb = params_of<MatMulParams>(layer).transpose_b;
      const PostOp post = read_post_op(layer);
      return std::make_unique<FunctionKernel>([ta, tb, post](const KernelContext& ctx) {
        KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "MatrixMultiply", matrix_multiply_reference<T>(ctx, ta, tb));
        const bool bias = ctx.inputs.size() > 2 && ctx.inputs[2].data;
        const bool residual = ctx.inputs.size() > 3 && ctx.inputs[3].data;
        if (bias || residual || post.enabled) {
          KILN_DISPATCH_FLOAT(ctx.outputs[0].type, "MatrixMultiply with a fused bias, residual or activation",
                              matrix_multiply_epilogue<T>(ctx, bias, residual, post));
        }
      });
    }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerGemm, "reference", 0, nullptr,
                                 [](const Layer& layer) { return std::make_unique<GemmReference>(layer); }});

}  // namespace kiln
