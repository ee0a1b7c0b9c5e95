// CUDA kernels of the binary element-wise layers: ElementWise (every op of docs/layers.md on
// float32, float16, int8, uint8, int16, uint16, int32, uint32, int64, uint64 and bool, with the
// CPU reference's integer division / modulo / power semantics and wrap-around; pow also with an
// exponent of another type, bases float32, float16, int32, int64), ParametricReLU (float32,
// float16) and Select (any type, by element width). Tactic "cuda" for each.
//
// prepare() rewrites the broadcast over dims in memory order (cuda::memory_order_broadcast, so
// channels-last tensors, per-channel [C,1,1] operands and scalars mix freely) and plans one of
// three cases, fastest first:
//   flat     - every operand is output-shaped or a single element: vectorized (16-byte loads when
//              the pointers allow), no index arithmetic;
//   channel  - one operand dense, the other per channel ([N,C,HW] against [C]; in channels-last or
//              for a bias along the last axis the channel is innermost): one fast division per
//              vector; float arithmetic and ParametricReLU only;
//   general  - numpy broadcasting up to rank 8 over the collapsed index space (StridedIndex with
//              32-bit fast division; 2^31 elements or more run as several pieces), each thread
//              walking a run of consecutive outputs.
// Layout: linear, or channels-last where memory_order_broadcast accepts the mix. Alignment: none
// assumed (vector paths are chosen at execute from the pointers).
#include <array>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/element_types_cuda.cuh"
#include "src/backends/cuda/elementwise_cuda.cuh"
#include "src/ir/op_schema.h"
#include "src/ir/elementwise_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using cuda::aligned_to;
using cuda::ChannelBroadcast;
using cuda::FastDivmod;
using cuda::grid_step;
using cuda::kVecWidth;
using cuda::launch;
using cuda::StridedIndex;
using cuda::thread_start;

constexpr int64_t kMax32 = int64_t{1} << 31;

// The types of ElementWise's operands (both of one type) and of pow's exponent; pow's bases when
// the exponent has another type.
using EwTypes = cuda::TypeList<DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kUInt8,
                               DataType::kInt16, DataType::kUInt16, DataType::kInt32, DataType::kUInt32,
                               DataType::kInt64, DataType::kUInt64, DataType::kBool>;
using PowBaseTypes = cuda::TypeList<DataType::kFloat32, DataType::kFloat16, DataType::kInt32, DataType::kInt64>;

// Calls fn(std::type_identity<T>{}) for the element type; false when the type is not listed.
template <typename Fn>
bool dispatch_ew_type(DataType t, Fn&& fn) {
  return cuda::dispatch_type(EwTypes{}, t, fn);
}

// ---- binary kernels over a functor F: F::Out operator()(TA a, TB b) ----------------------------

template <typename F, typename TA, typename TB, int V>
__global__ void binary_flat_kernel(F f, const TA* __restrict__ a, const TB* __restrict__ b,
                                   typename F::Out* __restrict__ y, int64_t n, bool a_scalar, bool b_scalar, bool vec) {
  using Out = typename F::Out;
  const TA a0 = a[0];
  const TB b0 = b[0];
  for (int64_t base = thread_start(V); base < n; base += grid_step(V)) {
    const int count = n - base < V ? static_cast<int>(n - base) : V;
    TA va[V];
    TB vb[V];
    if (a_scalar) {
      KILN_UNROLL
      for (int v = 0; v < V; ++v) va[v] = a0;
    } else {
      cuda::load_pack<TA, V>(a + base, va, count, vec);
    }
    if (b_scalar) {
      KILN_UNROLL
      for (int v = 0; v < V; ++v) vb[v] = b0;
    } else {
      cuda::load_pack<TB, V>(b + base, vb, count, vec);
    }
    Out vy[V];
    KILN_UNROLL
    for (int v = 0; v < V; ++v) vy[v] = f(va[v], vb[v]);
    cuda::store_pack<Out, V>(y + base, vy, count, vec);
  }
}

// y[i] = f(dense[i], chan[(i / inner) % channels]) (or with the operands swapped); n < 2^31.
template <typename F, typename T, int V>
__global__ void binary_channel_kernel(F f, const T* __restrict__ dense, const T* __restrict__ chan,
                                      typename F::Out* __restrict__ y, int64_t n, FastDivmod inner_dm, int64_t inner,
                                      FastDivmod chan_dm, int64_t channels, bool dense_first, bool vec) {
  using Out = typename F::Out;
  for (int64_t base = thread_start(V); base < n; base += grid_step(V)) {
    const int count = n - base < V ? static_cast<int>(n - base) : V;
    uint32_t q, r, q2, c;
    inner_dm.divmod(static_cast<uint32_t>(base), q, r);
    chan_dm.divmod(q, q2, c);
    T vd[V];
    cuda::load_pack<T, V>(dense + base, vd, count, vec);
    Out vy[V];
    KILN_UNROLL
    for (int v = 0; v < V; ++v) {
      const T vc = chan[c];
      vy[v] = dense_first ? f(vd[v], vc) : f(vc, vd[v]);
      if (++r == static_cast<uint32_t>(inner)) {
        r = 0;
        if (++c == static_cast<uint32_t>(channels)) c = 0;
      }
    }
    cuda::store_pack<Out, V>(y + base, vy, count, vec);
  }
}

// Runs of kRun consecutive outputs per thread: the operand offsets are computed once per run (and
// innermost row) and then stepped.
constexpr int kRun = 8;

template <typename F, typename TA, typename TB>
__global__ void binary_general_kernel(F f, StridedIndex<2> ix, const TA* __restrict__ a, const TB* __restrict__ b,
                                      typename F::Out* __restrict__ y, int64_t n) {
  for (int64_t base = thread_start(kRun); base < n; base += grid_step(kRun)) {
    const int64_t count = n - base < kRun ? n - base : kRun;
    cuda::for_each_strided<2, uint32_t>(ix, base, count,
                                        [&](int64_t i, const int64_t(&off)[2]) { y[i] = f(a[off[0]], b[off[1]]); });
  }
}

// ---- planning ----------------------------------------------------------------------------------

// Output format as the network records it (what the layout pass decided).
TensorFormat output_format(const Layer& layer) {
  return layer.num_outputs() > 0 && layer.output(0) ? layer.output(0)->format() : TensorFormat::kLinear;
}

enum class BinaryCase { kFlat, kChannel, kGeneral };

struct BinaryPlan {
  BinaryCase kind = BinaryCase::kFlat;
  int64_t n = 0;
  bool a_scalar = false, b_scalar = false;  // flat
  ChannelBroadcast channel;                 // channel (only below 2^31 elements)
  FastDivmod inner_dm, chan_dm;
  std::vector<cuda::IndexPiece<2>> pieces;  // general (also set for the channel case)
};

// Plans y = f(a, b) over dims in memory order (see cuda::memory_order_broadcast).
BinaryPlan plan_binary(const Dims& a, const Dims& b, const Dims& y) {
  BinaryPlan p;
  p.n = y.volume();
  const bool a_flat = a == y || a.volume() == 1, b_flat = b == y || b.volume() == 1;
  if (a_flat && b_flat) {
    p.a_scalar = a != y;
    p.b_scalar = b != y;
    return p;
  }
  const cuda::StridedLayout layout = cuda::broadcast_layout(y, {a, b});
  if (layout.extents.size() == 1) {  // collapses to a flat walk (e.g. [1,6] against [6])
    const int64_t sa = layout.strides[0][0], sb = layout.strides[1][0];
    if ((sa == 0 || sa == 1) && (sb == 0 || sb == 1)) {
      p.a_scalar = sa == 0;
      p.b_scalar = sb == 0;
      return p;
    }
  }
  p.pieces = cuda::make_index_pieces<2>(layout);
  p.kind = BinaryCase::kGeneral;
  if (p.n > 0 && p.n < kMax32 && cuda::match_channel_broadcast(layout, &p.channel)) {
    p.kind = BinaryCase::kChannel;
    p.inner_dm = FastDivmod(static_cast<uint32_t>(p.channel.inner));
    p.chan_dm = FastDivmod(static_cast<uint32_t>(p.channel.channels));
  }
  return p;
}

// Runs a planned binary op. kChannelPath: whether the channel kernel is compiled for F (else the
// general kernel serves that case; it needs TA == TB).
template <typename F, typename TA, typename TB, bool kChannelPath>
void run_binary(const BinaryPlan& p, F f, const void* a_ptr, const void* b_ptr, void* y_ptr, cudaStream_t stream) {
  using Out = typename F::Out;
  using T = TA;
  constexpr int kWidth = kVecWidth<TA> < kVecWidth<TB> ? kVecWidth<TA> : kVecWidth<TB>;
  constexpr int V = kWidth > 8 ? 8 : kWidth;
  if (p.n == 0) return;
  const TA* a = static_cast<const TA*>(a_ptr);
  const TB* b = static_cast<const TB*>(b_ptr);
  Out* y = static_cast<Out*>(y_ptr);
  const int64_t items = (p.n + V - 1) / V;
  const bool y_vec = aligned_to(y, sizeof(Out) * V);
  if (p.kind == BinaryCase::kFlat) {
    const bool vec =
        y_vec && (p.a_scalar || aligned_to(a, sizeof(TA) * V)) && (p.b_scalar || aligned_to(b, sizeof(TB) * V));
    launch(binary_flat_kernel<F, TA, TB, V>, items, stream, f, a, b, y, p.n, p.a_scalar, p.b_scalar, vec);
    return;
  }
  if constexpr (kChannelPath) {
    static_assert(std::is_same_v<TA, TB>, "the channel kernel takes operands of one type");
    if (p.kind == BinaryCase::kChannel) {
      const bool first = p.channel.dense == 0;
      const T* dense = first ? a : b;
      const T* chan = first ? b : a;
      const bool vec = y_vec && aligned_to(dense, sizeof(T) * V);
      const auto& c = p.channel;
      launch(binary_channel_kernel<F, T, V>, items, stream, f, dense, chan, y, p.n, p.inner_dm, c.inner, p.chan_dm,
             c.channels, first, vec);
      return;
    }
  }
  for (const cuda::IndexPiece<2>& piece : p.pieces) {
    launch(binary_general_kernel<F, TA, TB>, (piece.n + kRun - 1) / kRun, stream, f, piece.index, a + piece.offsets[0],
           b + piece.offsets[1], y + piece.out_offset, piece.n);
  }
}

// Operand and output dims in memory order; false when the formats do not allow it.
bool memory_dims(const Dims& out, TensorFormat out_format, const std::vector<TensorDesc>& in, Dims* out_mem,
                 std::vector<Dims>* in_mem) {
  std::vector<cuda::FormattedDims> ops;
  for (const TensorDesc& d : in) ops.push_back({d.dims, d.format});
  return cuda::memory_order_broadcast({out, out_format}, ops, out_mem, in_mem);
}

// supports() of a broadcasting layer: the output dims are the broadcast of `in` (or `out_dims`).
bool broadcast_formats_ok(const Layer& layer, const std::vector<TensorDesc>& in) {
  std::vector<Dims> shapes;
  for (const TensorDesc& d : in) {
    if (d.dims.rank() > kMaxDims || d.dims.is_dynamic()) return false;
    shapes.push_back(d.dims);
  }
  Dims out, out_mem;
  std::vector<Dims> in_mem;
  return cuda::numpy_broadcast(shapes, &out) && memory_dims(out, output_format(layer), in, &out_mem, &in_mem);
}

std::string layer_where(const Layer& layer) { return "layer '" + layer.name() + "' (" + layer.type() + ")"; }

// Memory-order dims for prepare(); throws when the formats do not allow them.
void memory_dims_or_throw(const Layer& layer, const TensorDesc& out, const std::vector<TensorDesc>& in, Dims* out_mem,
                          std::vector<Dims>* in_mem) {
  if (!memory_dims(out.dims, out.format, in, out_mem, in_mem)) {
    std::string formats;
    for (const TensorDesc& d : in)
      formats += std::string(formats.empty() ? "" : ", ") + d.dims.to_string() + " " + to_string(d.format);
    throw Error(layer_where(layer) + ": the CUDA kernel cannot combine inputs " + formats + " into a " +
                to_string(out.format) + " output; keep these tensors linear");
  }
}

// ---- ElementWise -------------------------------------------------------------------------------

template <ElementWiseOp kOp, typename T>
struct EwFn {
  using Out = std::conditional_t<cuda::binary_outputs_bool(kOp), bool, T>;
  bool fmod;
  __device__ __forceinline__ Out operator()(T a, T b) const {
    using C = cuda::Calc<T>;
    return cuda::from_calc<Out>(cuda::binary_value<kOp, C>(cuda::to_calc<C>(a), cuda::to_calc<C>(b), fmod));
  }
};

// The channel kernel is compiled for the float arithmetic that dominates real models (biases,
// per-channel scales); other combinations take the general kernel.
template <ElementWiseOp kOp, typename T>
constexpr bool kEwChannelPath = (std::is_same_v<T, float> || std::is_same_v<T, __half>)&&(
    kOp == ElementWiseOp::kSum || kOp == ElementWiseOp::kSub || kOp == ElementWiseOp::kProd ||
    kOp == ElementWiseOp::kDiv || kOp == ElementWiseOp::kMax || kOp == ElementWiseOp::kMin);

using EwRunner = void (*)(const BinaryPlan&, bool fmod, const void*, const void*, void*, cudaStream_t);

template <ElementWiseOp kOp, typename T>
void run_ew(const BinaryPlan& p, bool fmod, const void* a, const void* b, void* y, cudaStream_t s) {
  run_binary<EwFn<kOp, T>, T, T, kEwChannelPath<kOp, T>>(p, EwFn<kOp, T>{fmod}, a, b, y, s);
}

constexpr int kNumEwOps = static_cast<int>(ElementWiseOp::kXor) + 1;

template <typename T, int... K>
constexpr std::array<EwRunner, sizeof...(K)> make_ew_table(std::integer_sequence<int, K...>) {
  return {&run_ew<static_cast<ElementWiseOp>(K), T>...};
}

template <typename T>
EwRunner ew_runner(ElementWiseOp op) {
  static constexpr auto kTable = make_ew_table<T>(std::make_integer_sequence<int, kNumEwOps>{});
  return kTable.at(static_cast<size_t>(op));
}

// pow with an exponent of another type (docs/layers.md): the output has the base's type; integer **
// integer is exact (in int64), anything else computes in double and converts like Cast.
template <typename B, typename E>
struct PowMixedFn {
  using Out = B;
  __device__ __forceinline__ static double as_double(float v) { return v; }
  __device__ __forceinline__ static double as_double(__half v) { return __half2float(v); }
  template <typename I>
  __device__ __forceinline__ static double as_double(I v) {
    return static_cast<double>(v);
  }
  __device__ __forceinline__ B operator()(B a, E b) const {
    if constexpr (std::is_integral_v<B> && std::is_integral_v<E>) {
      return static_cast<B>(int_pow<int64_t>(static_cast<int64_t>(a), static_cast<int64_t>(b)));
    } else {
      const double r = pow(as_double(a), as_double(b));
      if constexpr (std::is_integral_v<B>) {
        if (r != r || r < -9.2e18 || r > 9.2e18) return std::numeric_limits<B>::min();
        return static_cast<B>(static_cast<int64_t>(r));
      } else {
        return cuda::from_calc<B>(cuda::double_to_float_rn(r));
      }
    }
  }
};

using PowRunner = void (*)(const BinaryPlan&, const void*, const void*, void*, cudaStream_t);

template <typename B, typename E>
void run_pow_mixed(const BinaryPlan& p, const void* a, const void* b, void* y, cudaStream_t s) {
  run_binary<PowMixedFn<B, E>, B, E, false>(p, PowMixedFn<B, E>{}, a, b, y, s);
}

// Bases float32, float16, int32, int64 (ONNX Pow's T); exponents any type of EwTypes but bool
// (ONNX Pow's T1: every integer type included).
PowRunner pow_mixed_runner(DataType base, DataType exponent) {
  PowRunner runner = nullptr;
  cuda::dispatch_type(PowBaseTypes{}, base, [&](auto btag) {
    using B = typename decltype(btag)::type;
    dispatch_ew_type(exponent, [&](auto etag) {
      using E = typename decltype(etag)::type;
      if constexpr (!std::is_same_v<B, E> && !std::is_same_v<E, bool>) runner = &run_pow_mixed<B, E>;
    });
  });
  return runner;
}

bool elementwise_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.size() != 2) return false;
  if (in[0].type != in[1].type) {
    if (params_of<ElementWiseParams>(layer).op != ElementWiseOp::kPow) return false;
    if (!pow_mixed_runner(in[0].type, in[1].type)) return false;
  } else if (!dispatch_ew_type(in[0].type, [](auto) {})) {
    return false;
  }
  if (in[0].dims.rank() > kMaxDims || in[1].dims.rank() > kMaxDims) return false;
  return broadcast_formats_ok(layer, in);
}

class ElementWiseCuda : public Kernel {
 public:
  explicit ElementWiseCuda(const Layer& layer)
      : op_(params_of<ElementWiseParams>(layer).op), fmod_(params_of<ElementWiseParams>(layer).fmod) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    const std::string where = layer_where(layer);
    runner_ = nullptr;
    pow_runner_ = nullptr;
    if (in[0].type != in[1].type) {
      if (op_ == ElementWiseOp::kPow) pow_runner_ = pow_mixed_runner(in[0].type, in[1].type);
      if (!pow_runner_) {
        throw Error(where + ": no CUDA ElementWise kernel for " + to_string(in[0].type) + " and " +
                    to_string(in[1].type));
      }
    } else if (!dispatch_ew_type(in[0].type,
                                 [&](auto tag) { runner_ = ew_runner<typename decltype(tag)::type>(op_); })) {
      throw Error(where + ": no CUDA ElementWise kernel for " + to_string(in[0].type));
    }
    Dims y;
    std::vector<Dims> ab;
    memory_dims_or_throw(layer, out[0], in, &y, &ab);
    plan_ = plan_binary(ab[0], ab[1], y);
  }

  void execute(const KernelContext& ctx) override {
    if (pow_runner_) {
      pow_runner_(plan_, ctx.inputs[0].data, ctx.inputs[1].data, ctx.outputs[0].data, cuda::stream_of(ctx));
    } else {
      runner_(plan_, fmod_, ctx.inputs[0].data, ctx.inputs[1].data, ctx.outputs[0].data, cuda::stream_of(ctx));
    }
  }

 private:
  ElementWiseOp op_;
  bool fmod_;
  EwRunner runner_ = nullptr;
  PowRunner pow_runner_ = nullptr;
  BinaryPlan plan_;
};

// ---- ParametricReLU ----------------------------------------------------------------------------

template <typename T>
struct PReluFn {
  using Out = T;
  __device__ __forceinline__ T operator()(T x, T slope) const {
    const float v = cuda::to_float(x);
    return v >= 0.0f ? x : cuda::from_float<T>(cuda::to_float(slope) * v);
  }
};

bool prelu_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.size() != 2 || !cuda::is_cuda_float(in[0].type) || in[1].type != in[0].type) return false;
  if (in[0].dims.rank() > kMaxDims || in[0].dims.is_dynamic() || in[1].dims.is_dynamic()) return false;
  Dims out_mem;
  std::vector<Dims> in_mem;
  return memory_dims(in[0].dims, output_format(layer), in, &out_mem, &in_mem);
}

class ParametricReLUCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    half_ = in[0].type == DataType::kFloat16;
    Dims y;
    std::vector<Dims> xs;
    memory_dims_or_throw(layer, out[0], in, &y, &xs);
    plan_ = plan_binary(xs[0], xs[1], y);
  }

  void execute(const KernelContext& ctx) override {
    const void* x = ctx.inputs[0].data;
    const void* s = ctx.inputs[1].data;
    void* y = ctx.outputs[0].data;
    if (half_) {
      run_binary<PReluFn<__half>, __half, __half, true>(plan_, PReluFn<__half>{}, x, s, y, cuda::stream_of(ctx));
    } else {
      run_binary<PReluFn<float>, float, float, true>(plan_, PReluFn<float>{}, x, s, y, cuda::stream_of(ctx));
    }
  }

 private:
  bool half_ = false;
  BinaryPlan plan_;
};

// ---- Select ------------------------------------------------------------------------------------

template <typename W, int V>
__global__ void select_flat_kernel(const bool* __restrict__ c, const W* __restrict__ a, const W* __restrict__ b,
                                   W* __restrict__ y, int64_t n, bool c_scalar, bool a_scalar, bool b_scalar,
                                   bool vec) {
  const bool c0 = c[0];
  const W a0 = a[0], b0 = b[0];
  for (int64_t base = thread_start(V); base < n; base += grid_step(V)) {
    const int count = n - base < V ? static_cast<int>(n - base) : V;
    bool vc[V];
    W va[V], vb[V], vy[V];
    if (c_scalar) {
      KILN_UNROLL
      for (int v = 0; v < V; ++v) vc[v] = c0;
    } else {
      cuda::load_pack<bool, V>(c + base, vc, count, vec);
    }
    if (a_scalar) {
      KILN_UNROLL
      for (int v = 0; v < V; ++v) va[v] = a0;
    } else {
      cuda::load_pack<W, V>(a + base, va, count, vec);
    }
    if (b_scalar) {
      KILN_UNROLL
      for (int v = 0; v < V; ++v) vb[v] = b0;
    } else {
      cuda::load_pack<W, V>(b + base, vb, count, vec);
    }
    KILN_UNROLL
    for (int v = 0; v < V; ++v) vy[v] = vc[v] ? va[v] : vb[v];
    cuda::store_pack<W, V>(y + base, vy, count, vec);
  }
}

template <typename W>
__global__ void select_general_kernel(StridedIndex<3> ix, const bool* __restrict__ c, const W* __restrict__ a,
                                      const W* __restrict__ b, W* __restrict__ y, int64_t n) {
  for (int64_t base = thread_start(kRun); base < n; base += grid_step(kRun)) {
    const int64_t count = n - base < kRun ? n - base : kRun;
    cuda::for_each_strided<3, uint32_t>(
        ix, base, count, [&](int64_t i, const int64_t(&off)[3]) { y[i] = c[off[0]] ? a[off[1]] : b[off[2]]; });
  }
}

struct SelectPlan {
  bool flat = true;
  int64_t n = 0;
  bool scalar[3] = {false, false, false};
  std::vector<cuda::IndexPiece<3>> pieces;
};

template <typename W>
void run_select(const SelectPlan& p, const KernelContext& ctx) {
  // At most 8 elements per thread: the condition pack stays within 8 bytes for 1-byte words.
  constexpr int V = kVecWidth < W >> 8 ? 8 : kVecWidth<W>;
  if (p.n == 0) return;
  const bool* c = ctx.inputs[0].as<const bool>();
  const W* a = ctx.inputs[1].as<const W>();
  const W* b = ctx.inputs[2].as<const W>();
  W* y = ctx.outputs[0].as<W>();
  const int64_t items = (p.n + V - 1) / V;
  const bool y_vec = aligned_to(y, sizeof(W) * V);
  if (p.flat) {
    const bool vec = y_vec && (p.scalar[0] || aligned_to(c, V)) && (p.scalar[1] || aligned_to(a, sizeof(W) * V)) &&
                     (p.scalar[2] || aligned_to(b, sizeof(W) * V));
    launch(select_flat_kernel<W, V>, items, cuda::stream_of(ctx), c, a, b, y, p.n, p.scalar[0], p.scalar[1],
           p.scalar[2], vec);
  } else {
    for (const cuda::IndexPiece<3>& piece : p.pieces) {
      launch(select_general_kernel<W>, (piece.n + kRun - 1) / kRun, cuda::stream_of(ctx), piece.index,
             c + piece.offsets[0], a + piece.offsets[1], b + piece.offsets[2], y + piece.out_offset, piece.n);
    }
  }
}

bool select_supports(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (in.size() != 3 || in[0].type != DataType::kBool || in[1].type != in[2].type) return false;
  return broadcast_formats_ok(layer, in);
}

class SelectCuda : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int) override {
    width_ = data_type_size(in[1].type);
    Dims y;
    std::vector<Dims> ops;
    memory_dims_or_throw(layer, out[0], in, &y, &ops);
    plan_ = SelectPlan{};
    plan_.n = y.volume();
    for (int k = 0; k < 3; ++k) {
      const Dims& d = ops[static_cast<size_t>(k)];
      plan_.scalar[k] = d != y && d.volume() == 1;
      plan_.flat = plan_.flat && (d == y || d.volume() == 1);
    }
    if (!plan_.flat) plan_.pieces = cuda::make_index_pieces<3>(cuda::broadcast_layout(y, ops));
  }

  void execute(const KernelContext& ctx) override {
    switch (width_) {
      case 1:
        run_select<uint8_t>(plan_, ctx);
        break;
      case 2:
        run_select<uint16_t>(plan_, ctx);
        break;
      case 4:
        run_select<uint32_t>(plan_, ctx);
        break;
      case 8:
        run_select<uint64_t>(plan_, ctx);
        break;
      default:
        throw Error("Select: unsupported element size " + std::to_string(width_));
    }
  }

 private:
  size_t width_ = 4;
  SelectPlan plan_;
};

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerElementWise, "cuda", 10, elementwise_supports,
                                 [](const Layer& layer) { return std::make_unique<ElementWiseCuda>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerParametricReLU, "cuda", 10, prelu_supports,
                                 [](const Layer&) { return std::make_unique<ParametricReLUCuda>(); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerSelect, "cuda", 10, select_supports,
                                 [](const Layer&) { return std::make_unique<SelectCuda>(); }});

}  // namespace kiln
