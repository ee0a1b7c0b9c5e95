// CUDA kernels of the single-input math layers: Activation (every kind, float32 / float16),
// Unary (every op; float32 / float16, and int8 / uint8 / int32 / int64 / bool for the ops defined
// on integers: abs, neg, sign, floor, ceil, round, not, isnan, isinf) and Scale (uniform, channel
// and elementwise modes, any channel_axis, optional power). Tactic "cuda" for each.
//
// Activation and Unary are one vectorized map kernel per (type, kind/op), selected from tables
// built over the enums; they are format-agnostic (the output must have the input's format).
// Scale reads each term as uniform (one value), per channel ((i / inner) % C, or i % C for axis 1
// of a channels-last tensor), flat (term shaped like x) or broadcast (StridedIndex); it computes
// (x * scale + shift) ^ power in float without contracting into an FMA, as the CPU reference does.
// Layout: any format for Activation, Unary and uniform Scale; Scale's channel mode takes
// channels-last on axis 1, its elementwise mode the mixes cuda::memory_order_broadcast accepts.
// Alignment: none assumed.
#include <array>
#include <memory>
#include <string>
#include <utility>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/elementwise_cuda.cuh"
#include "src/ir/op_schema.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using cuda::FastDivmod;
using cuda::StridedIndex;

constexpr int64_t kMax32 = int64_t{1} << 31;

TensorFormat output_format(const Layer& layer) {
  return layer.num_outputs() > 0 && layer.output(0) ? layer.output(0)->format() : TensorFormat::kLinear;
}

std::string layer_where(const Layer& layer) { return "layer '" + layer.name() + "' (" + layer.type() + ")"; }

void check_same_format(const Layer& layer, const TensorDesc& in, const TensorDesc& out) {
  if (!cuda::same_memory_order(in.dims, in.format, out.format)) {
    throw Error(layer_where(layer) + ": input format " + to_string(in.format) + " differs from output format " +
                to_string(out.format));
  }
}

// ---- Activation --------------------------------------------------------------------------------

template <ActivationType kKind, typename T>
struct ActivationFn {
  using Out = T;
  float alpha, beta;
  __device__ __forceinline__ T operator()(T x) const {
    return cuda::from_float<T>(cuda::activation_value<kKind>(cuda::to_float(x), alpha, beta));
  }
};

using ActRunner = void (*)(float alpha, float beta, const void* x, void* y, int64_t n, cudaStream_t stream);

template <ActivationType kKind, typename T>
void run_activation(float alpha, float beta, const void* x, void* y, int64_t n, cudaStream_t stream) {
  cuda::run_map<ActivationFn<kKind, T>, T>(ActivationFn<kKind, T>{alpha, beta}, x, y, n, stream);
}

constexpr int kNumActivations = static_cast<int>(ActivationType::kSwish) + 1;

template <typename T, int... K>
constexpr std::array<ActRunner, sizeof...(K)> make_act_table(std::integer_sequence<int, K...>) {
  return {&run_activation<static_cast<ActivationType>(K), T>...};
}

template <typename T>
ActRunner act_runner(ActivationType kind) {
  static constexpr auto kTable = make_act_table<T>(std::make_integer_sequence<int, kNumActivations>{});
  return kTable.at(static_cast<size_t>(kind));
}

bool float_same_format_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  return !in.empty() && cuda::is_cuda_float(in[0].type) &&
         cuda::same_memory_order(in[0].dims, in[0].format, output_format(layer));
}

class ActivationCuda : public Kernel {
 public:
  explicit ActivationCuda(const Layer& layer)
      : kind_(params_of<ActivationParams>(layer).kind),
        alpha_(static_cast<float>(params_of<ActivationParams>(layer).alpha)),
        beta_(static_cast<float>(params_of<ActivationParams>(layer).beta)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    check_same_format(layer, in[0], out[0]);
    runner_ = in[0].type == DataType::kFloat16 ? act_runner<__half>(kind_) : act_runner<float>(kind_);
  }

  void execute(const KernelContext& ctx) override {
    runner_(alpha_, beta_, ctx.inputs[0].data, ctx.outputs[0].data, ctx.outputs[0].count(), cuda::stream_of(ctx));
  }

 private:
  ActivationType kind_;
  float alpha_, beta_;
  ActRunner runner_ = nullptr;
};

// ---- Unary -------------------------------------------------------------------------------------

template <UnaryOp kOp, typename T>
struct UnaryFn {
  using C = cuda::Calc<T>;
  using Out = std::conditional_t<cuda::unary_outputs_bool(kOp), bool, T>;
  __device__ __forceinline__ Out operator()(T x) const {
    return cuda::from_calc<Out>(cuda::unary_value<kOp, C>(cuda::to_calc<C>(x)));
  }
};

using UnaryRunner = void (*)(const void* x, void* y, int64_t n, cudaStream_t stream);

template <UnaryOp kOp, typename T>
void run_unary(const void* x, void* y, int64_t n, cudaStream_t stream) {
  cuda::run_map<UnaryFn<kOp, T>, T>(UnaryFn<kOp, T>{}, x, y, n, stream);
}

template <typename T>
constexpr bool kFloatT = std::is_same_v<T, float> || std::is_same_v<T, __half>;

// Null for an op the type does not take (transcendental ops on integers).
template <UnaryOp kOp, typename T>
constexpr UnaryRunner unary_entry() {
  if constexpr (kFloatT<T> || cuda::unary_takes_integers(kOp)) {
    return &run_unary<kOp, T>;
  } else {
    return nullptr;
  }
}

constexpr int kNumUnary = static_cast<int>(UnaryOp::kIsInf) + 1;

template <typename T, int... K>
constexpr std::array<UnaryRunner, sizeof...(K)> make_unary_table(std::integer_sequence<int, K...>) {
  return {unary_entry<static_cast<UnaryOp>(K), T>()...};
}

template <typename T>
UnaryRunner unary_runner_typed(UnaryOp op) {
  static constexpr auto kTable = make_unary_table<T>(std::make_integer_sequence<int, kNumUnary>{});
  return kTable.at(static_cast<size_t>(op));
}

UnaryRunner unary_runner(DataType t, UnaryOp op) {
  switch (t) {
    case DataType::kFloat32:
      return unary_runner_typed<float>(op);
    case DataType::kFloat16:
      return unary_runner_typed<__half>(op);
    case DataType::kInt8:
      return unary_runner_typed<int8_t>(op);
    case DataType::kUInt8:
      return unary_runner_typed<uint8_t>(op);
    case DataType::kInt32:
      return unary_runner_typed<int32_t>(op);
    case DataType::kInt64:
      return unary_runner_typed<int64_t>(op);
    case DataType::kBool:
      return unary_runner_typed<bool>(op);
    default:
      return nullptr;
  }
}

bool unary_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.empty()) return false;
  if (!cuda::same_memory_order(in[0].dims, in[0].format, output_format(layer))) return false;
  return unary_runner(in[0].type, params_of<UnaryParams>(layer).op) != nullptr;
}

class UnaryCuda : public Kernel {
 public:
  explicit UnaryCuda(const Layer& layer) : op_(params_of<UnaryParams>(layer).op) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    check_same_format(layer, in[0], out[0]);
    runner_ = unary_runner(in[0].type, op_);
    if (!runner_) {
      throw Error(layer_where(layer) + ": no CUDA kernel for op '" + to_string(op_) + "' on " + to_string(in[0].type));
    }
  }

  void execute(const KernelContext& ctx) override {
    runner_(ctx.inputs[0].data, ctx.outputs[0].data, ctx.outputs[0].count(), cuda::stream_of(ctx));
  }

 private:
  UnaryOp op_;
  UnaryRunner runner_ = nullptr;
};

// ---- Scale -------------------------------------------------------------------------------------

// How the scale / shift / power terms are indexed for element i of x.
enum class ScaleIndex { kUniform, kChannel, kFlat, kStrided };

struct ScaleTerms {
  const void* t[3] = {nullptr, nullptr, nullptr};  // scale, shift, power (null: identity)
};

template <typename T>
__device__ __forceinline__ float scale_value(float v, const T* const (&t)[3], const int64_t (&idx)[3]) {
  if (t[0]) v = __fmul_rn(v, cuda::to_float(t[0][idx[0]]));
  if (t[1]) v = __fadd_rn(v, cuda::to_float(t[1][idx[1]]));
  if (t[2]) v = cuda::precise_pow(v, cuda::to_float(t[2][idx[2]]));
  return v;
}

// kChannel: idx = (i / inner) % channels (inner == 1 for channels-last); kStrided: ix. n < 2^31
// for both (larger tensors run as several strided pieces).
template <typename T, int V, ScaleIndex kIndex>
__global__ void scale_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, const T* scale, const T* shift,
                             const T* power, FastDivmod inner_dm, int64_t inner, FastDivmod chan_dm, int64_t channels,
                             StridedIndex<3> ix, bool vec) {
  const T* const t[3] = {scale, shift, power};
  for (int64_t base = cuda::thread_start(V); base < n; base += cuda::grid_step(V)) {
    const int count = n - base < V ? static_cast<int>(n - base) : V;
    T vx[V], vy[V];
    cuda::load_pack<T, V>(x + base, vx, count, vec);
    if constexpr (kIndex == ScaleIndex::kUniform || kIndex == ScaleIndex::kFlat) {
      KILN_UNROLL
      for (int v = 0; v < V; ++v) {
        const int64_t i = kIndex == ScaleIndex::kFlat ? base + v : 0;
        const int64_t idx[3] = {i, i, i};
        vy[v] = cuda::from_float<T>(scale_value<T>(cuda::to_float(vx[v]), t, idx));
      }
    } else if constexpr (kIndex == ScaleIndex::kChannel) {
      uint32_t q, r, q2, c;
      inner_dm.divmod(static_cast<uint32_t>(base), q, r);
      chan_dm.divmod(q, q2, c);
      KILN_UNROLL
      for (int v = 0; v < V; ++v) {
        const int64_t idx[3] = {static_cast<int64_t>(c), static_cast<int64_t>(c), static_cast<int64_t>(c)};
        vy[v] = cuda::from_float<T>(scale_value<T>(cuda::to_float(vx[v]), t, idx));
        if (++r == static_cast<uint32_t>(inner)) {
          r = 0;
          if (++c == static_cast<uint32_t>(channels)) c = 0;
        }
      }
    } else {
      cuda::for_each_strided<3, uint32_t>(ix, base, count, [&](int64_t i, const int64_t(&off)[3]) {
        const int v = static_cast<int>(i - base);
        KILN_UNROLL
        for (int k = 0; k < V; ++k) {  // constant indices keep vx / vy in registers
          if (k == v) vy[k] = cuda::from_float<T>(scale_value<T>(cuda::to_float(vx[k]), t, off));
        }
      });
    }
    cuda::store_pack<T, V>(y + base, vy, count, vec);
  }
}

struct ScalePlan {
  ScaleIndex index = ScaleIndex::kUniform;
  int64_t n = 0;
  int64_t inner = 1, channels = 1;
  FastDivmod inner_dm, chan_dm;
  std::vector<cuda::IndexPiece<3>> pieces;  // kStrided
};

template <typename T>
void run_scale(const ScalePlan& p, const KernelContext& ctx) {
  constexpr int V = cuda::kVecWidth<T>;
  if (p.n == 0) return;
  const T* x = ctx.inputs[0].as<const T>();
  T* y = ctx.outputs[0].as<T>();
  const T* term[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 1; i < 4 && i < ctx.inputs.size(); ++i) term[i - 1] = ctx.inputs[i].as<const T>();
  cudaStream_t s = cuda::stream_of(ctx);
  auto run = [&](auto index, const StridedIndex<3>& ix, int64_t n, int64_t out_offset, const int64_t(&offsets)[3]) {
    constexpr ScaleIndex kIndex = decltype(index)::value;
    const T* xp = x + out_offset;
    T* yp = y + out_offset;
    const T* t[3];
    for (int k = 0; k < 3; ++k) t[k] = term[k] ? term[k] + offsets[k] : nullptr;
    const bool vec = cuda::aligned_to(xp, sizeof(T) * V) && cuda::aligned_to(yp, sizeof(T) * V);
    cuda::launch(scale_kernel<T, V, kIndex>, (n + V - 1) / V, s, xp, yp, n, t[0], t[1], t[2], p.inner_dm, p.inner,
                 p.chan_dm, p.channels, ix, vec);
  };
  const int64_t zero[3] = {0, 0, 0};
  using I = ScaleIndex;
  switch (p.index) {
    case I::kUniform:
      run(std::integral_constant<I, I::kUniform>{}, StridedIndex<3>{}, p.n, 0, zero);
      break;
    case I::kFlat:
      run(std::integral_constant<I, I::kFlat>{}, StridedIndex<3>{}, p.n, 0, zero);
      break;
    case I::kChannel:
      run(std::integral_constant<I, I::kChannel>{}, StridedIndex<3>{}, p.n, 0, zero);
      break;
    case I::kStrided:
      for (const cuda::IndexPiece<3>& piece : p.pieces) {
        run(std::integral_constant<I, I::kStrided>{}, piece.index, piece.n, piece.out_offset, piece.offsets);
      }
      break;
  }
}

int64_t normalized_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// Elementwise-mode terms of Scale in memory order: a term with as many elements as x but another
// shape is read flat (as the CPU reference does), i.e. as a linear tensor of x's dims.
bool scale_terms_in_memory_order(const std::vector<TensorDesc>& in, TensorFormat out_format, Dims* x_mem,
                                 std::vector<Dims>* t_mem, std::vector<size_t>* present, bool* all_single) {
  const Dims& x = in[0].dims;
  if (x.is_dynamic()) return false;
  const int64_t n = x.volume();
  std::vector<cuda::FormattedDims> terms;
  *all_single = true;
  for (size_t i = 1; i < 4 && i < in.size(); ++i) {
    if (!in[i].present) continue;
    const Dims& t = in[i].dims;
    if (t.is_dynamic()) return false;
    Dims b;
    const bool broadcasts = t.rank() <= x.rank() && cuda::numpy_broadcast({t, x}, &b) && b == x;
    *all_single = *all_single && t.volume() == 1;
    if (broadcasts) {
      terms.push_back({t, in[i].format});
    } else if (t.volume() == n) {
      terms.push_back({x, TensorFormat::kLinear});
    } else {
      return false;
    }
    present->push_back(i);
  }
  return cuda::memory_order_broadcast({x, out_format}, terms, x_mem, t_mem);
}

bool scale_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.empty() || !cuda::is_cuda_float(in[0].type) || in[0].dims.rank() > kMaxDims) return false;
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].present && in[i].type != in[0].type) return false;
  }
  const TensorFormat of = output_format(layer);
  if (!cuda::same_memory_order(in[0].dims, in[0].format, of)) return false;
  const ScaleParams& p = params_of<ScaleParams>(layer);
  if (p.mode == ScaleMode::kUniform) return true;
  if (p.mode == ScaleMode::kChannel) {
    return cuda::same_as_linear(in[0].dims, in[0].format) || normalized_axis(p.channel_axis, in[0].dims.rank()) == 1;
  }
  Dims x_mem;
  std::vector<Dims> t_mem;
  std::vector<size_t> present;
  bool all_single = true;
  return scale_terms_in_memory_order(in, of, &x_mem, &t_mem, &present, &all_single);
}

class ScaleCuda : public Kernel {
 public:
  explicit ScaleCuda(const Layer& layer)
      : mode_(params_of<ScaleParams>(layer).mode), channel_axis_(params_of<ScaleParams>(layer).channel_axis) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    const Dims& x = in[0].dims;
    check_same_format(layer, in[0], out[0]);
    half_ = in[0].type == DataType::kFloat16;
    plan_ = ScalePlan{};
    plan_.n = x.volume();
    const bool cl = !cuda::same_as_linear(x, in[0].format);
    if (mode_ == ScaleMode::kUniform) {
      plan_.index = ScaleIndex::kUniform;
    } else if (mode_ == ScaleMode::kChannel) {
      const int axis = static_cast<int>(normalized_axis(channel_axis_, x.rank()));
      if (axis < 0 || axis >= x.rank()) throw Error(layer_where(layer) + ": channel_axis out of range");
      plan_.index = ScaleIndex::kChannel;
      plan_.channels = x[axis];
      plan_.inner = 1;
      if (cl) {
        if (axis != 1) throw Error(layer_where(layer) + ": channels-last Scale supports channel_axis 1 only");
      } else {
        for (int i = axis + 1; i < x.rank(); ++i) plan_.inner *= x[i];
      }
      if (plan_.n < kMax32) {
        plan_.inner_dm = FastDivmod(static_cast<uint32_t>(std::max<int64_t>(plan_.inner, 1)));
        plan_.chan_dm = FastDivmod(static_cast<uint32_t>(std::max<int64_t>(plan_.channels, 1)));
      } else {  // [outer, channels, inner] as a strided walk in 32-bit pieces
        cuda::StridedLayout l;
        l.extents = {plan_.n / (plan_.channels * plan_.inner), plan_.channels, plan_.inner};
        l.strides.assign(3, std::vector<int64_t>{0, 1, 0});
        plan_.index = ScaleIndex::kStrided;
        plan_.pieces = cuda::make_index_pieces<3>(cuda::collapse(l));
      }
    } else {  // ScaleMode::kElementWise
      plan_elementwise(layer, in, out[0]);
    }
  }

  void execute(const KernelContext& ctx) override {
    if (half_) {
      run_scale<__half>(plan_, ctx);
    } else {
      run_scale<float>(plan_, ctx);
    }
  }

 private:
  // Terms broadcast (numpy) to x over dims in memory order; all single-valued is the uniform
  // case, all shaped like x the flat one.
  void plan_elementwise(const Layer& layer, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    Dims x_mem;
    std::vector<Dims> t_mem;
    std::vector<size_t> present;
    bool all_single = true;
    if (!scale_terms_in_memory_order(in, out.format, &x_mem, &t_mem, &present, &all_single)) {
      throw Error(layer_where(layer) + ": the CUDA kernel cannot read these terms against a " + to_string(out.format) +
                  " x; keep them linear");
    }
    if (all_single) {
      plan_.index = ScaleIndex::kUniform;
      return;
    }
    cuda::StridedLayout layout;
    layout.extents = x_mem.to_vector();
    bool all_flat = true;
    size_t j = 0;
    for (size_t i = 1; i < 4; ++i) {
      if (j < present.size() && present[j] == i) {
        all_flat = all_flat && t_mem[j] == x_mem;
        layout.strides.push_back(cuda::broadcast_strides_to(t_mem[j], x_mem));
        ++j;
      } else {
        layout.strides.emplace_back(static_cast<size_t>(x_mem.rank()), 0);
      }
    }
    if (all_flat) {
      plan_.index = ScaleIndex::kFlat;
    } else {
      plan_.index = ScaleIndex::kStrided;
      plan_.pieces = cuda::make_index_pieces<3>(cuda::collapse(layout));
    }
  }

  ScaleMode mode_;
  int64_t channel_axis_;
  bool half_ = false;
  ScalePlan plan_;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerActivation, "cuda", 10, float_same_format_supports,
                                 [](const Layer& layer) { return std::make_unique<ActivationCuda>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerUnary, "cuda", 10, unary_supports,
                                 [](const Layer& layer) { return std::make_unique<UnaryCuda>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerScale, "cuda", 10, scale_supports,
                                 [](const Layer& layer) { return std::make_unique<ScaleCuda>(layer); }});

}  // namespace kiln
