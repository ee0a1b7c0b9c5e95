// CUDA kernel (tactic "cuda") of the RNN layer (ONNX RNN / GRU / LSTM, src/ir/ops_rnn.cpp,
// docs/layers.md), computing what the CPU reference (src/backends/cpu/rnn_cpu.cpp, where the
// equations are) computes: float32 and float16 tensors in float, float64 in double.
//
// Design: simple rather than fast. The host walks the time steps; each step is one launch (two
// for GRU with linear_before_reset = 0, whose candidate gate needs r . h of every unit first)
// with one warp per (direction, batch entry, hidden unit). The warp's lanes split the dot
// products of that unit's gate rows of W (over input_size) and R (over hidden_size), a warp sum
// joins them, and lane 0 applies the cell's equations. The state lives in the workspace in the
// compute type, laid out [direction][batch][hidden] whatever `layout` is: H in two buffers that
// alternate between steps (every unit reads the whole previous H), C in place (a unit reads and
// writes only its own), plus r . h for GRU. Step s of direction d and batch entry n handles time
// t = s (forward) or len - 1 - s (reverse) for s < len = sequence_lens[n]; for s >= len it
// writes the zeros of Y at t = s and carries the state over, so Y_h / Y_c are the state after
// the last valid step, as in the reference. sequence_lens outside 0..seq_length: a host-known
// (constant) value throws in prepare() with the reference's message; a run-time value sets the
// layer's device error flag and is clamped.
//
// Layout: kLinear only (dense row-major, ONNX's dims).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/op_helpers_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/rnn_params.h"

// libdevice's accurate exp and tanh: under --use_fast_math expf and tanhf become approximations.
extern "C" __device__ float __nv_expf(float);
extern "C" __device__ float __nv_tanhf(float);

namespace kiln::cuda {
namespace {

enum class Cell : int { kRnn, kGru, kLstm };

// The activations of rnn_cpu.cpp's table, in the same formulas.
enum class RnnAct : int {
  kRelu,
  kTanh,
  kSigmoid,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus,
};

constexpr std::pair<const char*, RnnAct> kActNames[] = {
    {"relu", RnnAct::kRelu},
    {"tanh", RnnAct::kTanh},
    {"sigmoid", RnnAct::kSigmoid},
    {"affine", RnnAct::kAffine},
    {"leaky_relu", RnnAct::kLeakyRelu},
    {"thresholded_relu", RnnAct::kThresholdedRelu},
    {"scaled_tanh", RnnAct::kScaledTanh},
    {"hard_sigmoid", RnnAct::kHardSigmoid},
    {"elu", RnnAct::kElu},
    {"softsign", RnnAct::kSoftsign},
    {"softplus", RnnAct::kSoftplus},
};

constexpr int kMaxActs = 6;   // 3 per direction (lstm), 2 directions
constexpr int kMaxGates = 4;  // lstm
constexpr int kStepBlock = 256;

// ---- device math in the compute type C (float or double) -------------------------------------

__device__ __forceinline__ float m_exp(float x) { return __nv_expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_tanh(float x) { return __nv_tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double m_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
// IEEE division (--use_fast_math would make float '/' approximate).
__device__ __forceinline__ float m_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double m_div(double a, double b) { return a / b; }

template <typename C>
struct DevAct {
  RnnAct kind = RnnAct::kTanh;
  C alpha = 0, beta = 0;
};

template <typename C>
__device__ C apply_act(const DevAct<C>& a, C x) {
  const C one = C(1), zero = C(0);
  switch (a.kind) {
    case RnnAct::kRelu:
      return x > zero ? x : zero;
    case RnnAct::kTanh:
      return m_tanh(x);
    case RnnAct::kSigmoid:
      return m_div(one, one + m_exp(-x));
    case RnnAct::kAffine:
      return a.alpha * x + a.beta;
    case RnnAct::kLeakyRelu:
      return x >= zero ? x : a.alpha * x;
    case RnnAct::kThresholdedRelu:
      return x > a.alpha ? x : zero;
    case RnnAct::kScaledTanh:
      return a.alpha * m_tanh(a.beta * x);
    case RnnAct::kHardSigmoid: {  // std::max(0, std::min(1, v)), NaN handling included
      const C v = a.alpha * x + a.beta;
      const C lo = v < one ? v : one;
      return zero < lo ? lo : zero;
    }
    case RnnAct::kElu:
      return x >= zero ? x : a.alpha * (m_exp(x) - one);
    case RnnAct::kSoftsign:
      return m_div(x, one + m_abs(x));
    case RnnAct::kSoftplus:
      return m_log1p(m_exp(x));
  }
  return x;
}

__device__ __forceinline__ float load_c(float v, float) { return v; }
__device__ __forceinline__ float load_c(__half v, float) { return __half2float(v); }
__device__ __forceinline__ double load_c(double v, double) { return v; }
template <typename C, typename T>
__device__ __forceinline__ C ld(const T& v) {
  return load_c(v, C(0));
}

template <typename T>
__device__ __forceinline__ T st(float v);
template <>
__device__ __forceinline__ float st<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half st<__half>(float v) {
  return __float2half_rn(v);
}
template <typename T>
__device__ __forceinline__ T st(double v);
template <>
__device__ __forceinline__ double st<double>(double v) {
  return v;
}

// ---- parameters --------------------------------------------------------------------------------

template <typename T, typename C>
struct RnnParams {
  const T* x = nullptr;
  const T* w = nullptr;
  const T* r = nullptr;
  const T* b = nullptr;        // null: zero biases
  const void* lens = nullptr;  // null: every sequence is seq long
  bool lens64 = false;
  const T* h0 = nullptr;
  const T* c0 = nullptr;
  const T* p = nullptr;  // null: zero peepholes
  T* y = nullptr;
  T* yh = nullptr;
  T* yc = nullptr;
  C* h_in = nullptr;   // state before the step, [dirs][batch][hidden]
  C* h_out = nullptr;  // state after the step
  C* c = nullptr;      // lstm cell state (in place)
  C* rh = nullptr;     // gru: r . h of the step
  int32_t* error = nullptr;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int dirs = 1, gates = 1, acts_per_dir = 1;
  Cell cell = Cell::kRnn;
  bool reverse_only = false, batch_first = false, linear_before_reset = false, input_forget = false;
  C clip = 0;
  DevAct<C> acts[kMaxActs];
};

// Offsets of rnn_cpu.cpp's RnnProblem.
template <typename T, typename C>
__device__ __forceinline__ int64_t x_off(const RnnParams<T, C>& p, int64_t t, int64_t n) {
  return (p.batch_first ? n * p.seq + t : t * p.batch + n) * p.input;
}
template <typename T, typename C>
__device__ __forceinline__ int64_t state_off(const RnnParams<T, C>& p, int64_t d, int64_t n) {
  return (p.batch_first ? n * p.dirs + d : d * p.batch + n) * p.hidden;
}
template <typename T, typename C>
__device__ __forceinline__ int64_t y_off(const RnnParams<T, C>& p, int64_t t, int64_t d, int64_t n) {
  return (p.batch_first ? (n * p.seq + t) * p.dirs + d : (t * p.dirs + d) * p.batch + n) * p.hidden;
}

// sequence_lens[n] clamped to 0..seq (the reference's clamp; prepare() or the init kernel
// reports values outside).
template <typename T, typename C>
__device__ __forceinline__ int64_t seq_len(const RnnParams<T, C>& p, int64_t n) {
  if (!p.lens) return p.seq;
  const int64_t v = p.lens64 ? static_cast<const int64_t*>(p.lens)[n] : static_cast<const int32_t*>(p.lens)[n];
  return v < 0 ? 0 : (v > p.seq ? p.seq : v);
}

template <typename C>
__device__ __forceinline__ C clip_to(C v, C c) {  // std::clamp(v, -c, c) when c > 0
  if (!(c > C(0))) return v;
  return v < -c ? -c : (c < v ? c : v);
}

// ---- kernels -----------------------------------------------------------------------------------

// One thread per state element: the initial H (and C) into the workspace, sequence_lens checked.
template <typename T, typename C>
__global__ void rnn_init_kernel(RnnParams<T, C> p) {
  const int64_t count = p.dirs * p.batch * p.hidden;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride) {
    const int64_t j = e % p.hidden, dn = e / p.hidden, n = dn % p.batch, d = dn / p.batch;
    const int64_t src = state_off(p, d, n) + j;
    p.h_out[e] = p.h0 ? ld<C>(p.h0[src]) : C(0);
    if (p.c) p.c[e] = p.c0 ? ld<C>(p.c0[src]) : C(0);
    if (p.lens && p.error && d == 0 && j == 0) {
      const int64_t v = p.lens64 ? static_cast<const int64_t*>(p.lens)[n] : static_cast<const int32_t*>(p.lens)[n];
      if (v < 0 || v > p.seq) *p.error = 1;
    }
  }
}

// What a step launch computes: the reset gate's r . h (GRU with linear_before_reset = 0, before
// the update launch), or the cell's update.
enum class Phase : int { kGruReset, kUpdate };

// Lane 0 of a unit's warp: the cell's equations on the summed gate rows (xs: x W', hs: h R',
// or (r . h) Rh' for gate 2 of the split GRU), the new state and Y at time t.
template <typename T, typename C>
__device__ void update_unit(const RnnParams<T, C>& p, Phase phase, int64_t u, int64_t t, int64_t d, int64_t n,
                            int64_t j, const C* xs, const C* hs) {
  const int64_t H = p.hidden, G = p.gates;
  const T* bias = p.b ? p.b + d * 2 * G * H : nullptr;
  auto wb = [&](int64_t g) { return bias ? ld<C>(bias[g * H + j]) : C(0); };
  auto rb = [&](int64_t g) { return bias ? ld<C>(bias[G * H + g * H + j]) : C(0); };
  auto pre = [&](int g) { return xs[g] + hs[g] + wb(g) + rb(g); };  // x W' + h R' + Wb + Rb
  const DevAct<C>* act = p.acts + d * p.acts_per_dir;
  const C hprev = p.h_in[u];
  C hnew;
  if (p.cell == Cell::kRnn) {
    hnew = apply_act(act[0], clip_to(pre(0), p.clip));
  } else if (p.cell == Cell::kGru) {
    if (phase == Phase::kGruReset) {
      p.rh[u] = apply_act(act[0], clip_to(pre(1), p.clip)) * hprev;
      return;
    }
    const C z = apply_act(act[0], clip_to(pre(0), p.clip));
    C rec;
    if (p.linear_before_reset) {
      const C r = apply_act(act[0], clip_to(pre(1), p.clip));
      rec = r * (hs[2] + rb(2));
    } else {
      rec = hs[2] + rb(2);  // hs[2] is (r . h) Rh'
    }
    const C cand = apply_act(act[1], clip_to(xs[2] + wb(2) + rec, p.clip));
    hnew = (C(1) - z) * cand + z * hprev;
  } else {  // lstm: gates i, o, f, c; peepholes i, o, f
    const T* peep = p.p ? p.p + d * 3 * H : nullptr;
    const C pi = peep ? ld<C>(peep[j]) : C(0);
    const C po = peep ? ld<C>(peep[H + j]) : C(0);
    const C pf = peep ? ld<C>(peep[2 * H + j]) : C(0);
    const C cprev = p.c[u];
    const C ig = apply_act(act[0], clip_to(pre(0) + pi * cprev, p.clip));
    const C fg = p.input_forget ? C(1) - ig : apply_act(act[0], clip_to(pre(2) + pf * cprev, p.clip));
    const C cand = apply_act(act[1], clip_to(pre(3), p.clip));
    const C cnew = fg * cprev + ig * cand;
    const C og = apply_act(act[0], clip_to(pre(1) + po * cnew, p.clip));
    p.c[u] = cnew;
    hnew = og * apply_act(act[2], cnew);
  }
  p.h_out[u] = hnew;
  if (p.y) p.y[y_off(p, t, d, n) + j] = st<T>(hnew);
}

// One warp per (direction, batch entry, hidden unit): time step `step` of every sequence.
template <typename T, typename C>
__global__ void __launch_bounds__(kStepBlock) rnn_step_kernel(RnnParams<T, C> p, int64_t step, Phase phase) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t units = p.dirs * p.batch * p.hidden;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t H = p.hidden, I = p.input, G = p.gates;
  // The loop is uniform across the warp so that every shuffle has all 32 lanes.
  for (int64_t u = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; u < units; u += warps) {
    const int64_t j = u % H, dn = u / H, n = dn % p.batch, d = dn / p.batch;
    const int64_t len = seq_len(p, n);
    if (step >= len) {  // past this sequence's end: zeros in Y at t = step, the state carried over
      if (phase == Phase::kUpdate && lane == 0) {
        p.h_out[u] = p.h_in[u];
        if (p.y) p.y[y_off(p, step, d, n) + j] = st<T>(C(0));
      }
      continue;
    }
    const bool reverse = p.reverse_only || d == 1;
    const int64_t t = reverse ? len - 1 - step : step;
    const T* xt = p.x + x_off(p, t, n);
    const T* W = p.w + d * G * H * I;
    const T* R = p.r + d * G * H * H;
    const C* h = p.h_in + dn * H;
    const bool gru_split = p.cell == Cell::kGru && !p.linear_before_reset;
    // The gate rows this launch needs; gate 2 of the split GRU multiplies R by r . h, not h.
    unsigned mask = (1u << G) - 1u;
    if (phase == Phase::kGruReset) {
      mask = 1u << 1;
    } else if (gru_split) {
      mask = (1u << 0) | (1u << 2);
    }
    C xs[kMaxGates], hs[kMaxGates];
#pragma unroll
    for (int g = 0; g < kMaxGates; ++g) {
      xs[g] = C(0);
      hs[g] = C(0);
      if (!(mask & (1u << g))) continue;
      const T* wrow = W + (g * H + j) * I;
      for (int64_t i = lane; i < I; i += 32) xs[g] += ld<C>(wrow[i]) * ld<C>(xt[i]);
      const T* rrow = R + (g * H + j) * H;
      const C* v = (gru_split && g == 2) ? p.rh + dn * H : h;
      for (int64_t k = lane; k < H; k += 32) hs[g] += ld<C>(rrow[k]) * v[k];
      xs[g] = oph::group_sum<32>(xs[g]);
      hs[g] = oph::group_sum<32>(hs[g]);
    }
    if (lane == 0) update_unit(p, phase, u, t, d, n, j, xs, hs);
  }
}

// One thread per state element: Y_h and Y_c from the final state.
template <typename T, typename C>
__global__ void rnn_final_kernel(RnnParams<T, C> p, const C* h) {
  const int64_t count = p.dirs * p.batch * p.hidden;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride) {
    const int64_t j = e % p.hidden, dn = e / p.hidden, n = dn % p.batch, d = dn / p.batch;
    const int64_t dst = state_off(p, d, n) + j;
    if (p.yh) p.yh[dst] = st<T>(h[e]);
    if (p.yc) p.yc[dst] = st<T>(p.c[e]);
  }
}

// ---- the kernel object -----------------------------------------------------------------------

int64_t host_len(const HostTensor& v, int64_t i) {
  return v.type() == DataType::kInt64 ? v.as<int64_t>()[i] : v.as<int32_t>()[i];
}

class RnnCuda : public Kernel {
 public:
  explicit RnnCuda(const Layer& layer) : name_(layer.name()) {
    const kiln::RnnParams& p = params_of<kiln::RnnParams>(layer);  // validated there (rnn_params.cpp)
    cell_ = p.cell == RNNCell::kGru ? Cell::kGru : p.cell == RNNCell::kLstm ? Cell::kLstm : Cell::kRnn;
    gates_ = p.gates();
    acts_per_dir_ = p.activations_per_direction();
    dirs_ = p.directions();
    reverse_only_ = p.reverse_only();
    batch_first_ = p.batch_first;
    linear_before_reset_ = p.linear_before_reset;
    input_forget_ = p.input_forget;
    clip_ = p.clip;
    hidden_ = p.hidden;
    alpha_ = p.alpha;  // one per activation, as many as activations_per_direction() * directions()
    beta_ = p.beta;
    for (const auto& name : p.activations) {  // names RnnParams accepts, each with a device kind here
      const auto* it = std::find_if(std::begin(kActNames), std::end(kActNames),
                                    [&](const auto& entry) { return name == entry.first; });
      if (it == std::end(kActNames)) fail("unknown activation '" + name + "'");
      act_kinds_.push_back(it->second);
    }
  }

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>&, int) override {
    const Dims& xd = inputs.at(0).dims;
    if (xd.rank() != 3) fail("X " + xd.to_string() + " must be 3-D");
    type_ = inputs[0].type;
    seq_ = batch_first_ ? xd[1] : xd[0];
    batch_ = batch_first_ ? xd[0] : xd[1];
    input_ = xd[2];
    has_lens_ = inputs.size() > 4 && inputs[4].present;
    lens64_ = has_lens_ && inputs[4].type == DataType::kInt64;
    lens_known_ = has_lens_ && inputs[4].value != nullptr;
    if (lens_known_) {  // the reference's check, at build time when the lengths are constants
      const HostTensor& v = *inputs[4].value;
      for (int64_t i = 0; i < v.count(); ++i) {
        const int64_t len = host_len(v, i);
        if (len < 0 || len > seq_) {
          throw Error("RNN: sequence length " + std::to_string(len) + " is outside 0.." + std::to_string(seq_));
        }
      }
    }
    const size_t elem = type_ == DataType::kFloat64 ? sizeof(double) : sizeof(float);
    state_ = static_cast<size_t>(dirs_ * batch_ * hidden_);
    // H twice (alternating), C (lstm), r . h (gru).
    const size_t buffers = 2 + (cell_ == Cell::kLstm ? 1 : 0) + (cell_ == Cell::kGru ? 1 : 0);
    workspace_ = buffers * state_ * elem;
  }

  size_t workspace_size() const override { return workspace_; }
  bool reports_device_errors() const override { return has_lens_ && !lens_known_; }

  void execute(const KernelContext& ctx) override {
    if (state_ == 0) return;  // no batch entries: every output is empty
    if (!ctx.workspace || ctx.workspace_size < workspace_) fail("missing workspace");
    switch (type_) {
      case DataType::kFloat32:
        return run<float, float>(ctx);
      case DataType::kFloat16:
        return run<__half, float>(ctx);
      case DataType::kFloat64:
        return run<double, double>(ctx);
      default:
        fail(std::string("unsupported data type ") + to_string(type_));
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error("RNN layer '" + name_ + "' (CUDA): " + what); }

  template <typename T, typename C>
  void run(const KernelContext& ctx) const {
    const cudaStream_t stream = stream_of(ctx);
    auto in = [&](size_t i) -> const T* {
      return i < ctx.inputs.size() ? static_cast<const T*>(ctx.inputs[i].data) : nullptr;
    };
    auto out = [&](size_t i) -> T* { return i < ctx.outputs.size() ? static_cast<T*>(ctx.outputs[i].data) : nullptr; };
    RnnParams<T, C> p;
    p.x = in(0);
    p.w = in(1);
    p.r = in(2);
    p.b = in(3);
    p.lens = has_lens_ ? ctx.inputs[4].data : nullptr;
    p.lens64 = lens64_;
    p.h0 = in(5);
    p.c0 = cell_ == Cell::kLstm ? in(6) : nullptr;
    p.p = cell_ == Cell::kLstm ? in(7) : nullptr;
    p.y = out(0);
    p.yh = out(1);
    p.yc = cell_ == Cell::kLstm ? out(2) : nullptr;
    C* ws = static_cast<C*>(ctx.workspace);
    C* h_bufs[2] = {ws, ws + state_};
    p.c = cell_ == Cell::kLstm ? ws + 2 * state_ : nullptr;
    p.rh = cell_ == Cell::kGru ? ws + 2 * state_ : nullptr;
    p.error = reports_device_errors() ? ctx.device_error : nullptr;
    p.seq = seq_;
    p.batch = batch_;
    p.input = input_;
    p.hidden = hidden_;
    p.dirs = static_cast<int>(dirs_);
    p.gates = gates_;
    p.acts_per_dir = acts_per_dir_;
    p.cell = cell_;
    p.reverse_only = reverse_only_;
    p.batch_first = batch_first_;
    p.linear_before_reset = linear_before_reset_;
    p.input_forget = input_forget_;
    p.clip = static_cast<C>(clip_);
    for (size_t a = 0; a < act_kinds_.size(); ++a) {
      p.acts[a].kind = act_kinds_[a];
      p.acts[a].alpha = static_cast<C>(alpha_[a]);
      p.acts[a].beta = static_cast<C>(beta_[a]);
    }
    const auto units = static_cast<int64_t>(state_);

    p.h_out = h_bufs[0];
    rnn_init_kernel<T, C><<<grid_for(units), kBlock, 0, stream>>>(p);
    KILN_CUDA_CHECK_LAUNCH();
    const unsigned grid = grid_for(units * 32, kStepBlock);
    const bool gru_split = cell_ == Cell::kGru && !linear_before_reset_;
    for (int64_t s = 0; s < seq_; ++s) {
      p.h_in = h_bufs[s % 2];
      p.h_out = h_bufs[(s + 1) % 2];
      if (gru_split) {
        rnn_step_kernel<T, C><<<grid, kStepBlock, 0, stream>>>(p, s, Phase::kGruReset);
        KILN_CUDA_CHECK_LAUNCH();
      }
      rnn_step_kernel<T, C><<<grid, kStepBlock, 0, stream>>>(p, s, Phase::kUpdate);
      KILN_CUDA_CHECK_LAUNCH();
    }
    if (p.yh || p.yc) {
      rnn_final_kernel<T, C><<<grid_for(units), kBlock, 0, stream>>>(p, h_bufs[seq_ % 2]);
      KILN_CUDA_CHECK_LAUNCH();
    }
  }

  std::string name_;
  Cell cell_ = Cell::kRnn;
  int gates_ = 1, acts_per_dir_ = 1;
  int64_t dirs_ = 1, hidden_ = 0;
  bool reverse_only_ = false, batch_first_ = false, linear_before_reset_ = false, input_forget_ = false;
  double clip_ = 0;
  std::vector<RnnAct> act_kinds_;
  std::vector<double> alpha_, beta_;
  DataType type_ = DataType::kFloat32;
  int64_t seq_ = 0, batch_ = 0, input_ = 0;
  bool has_lens_ = false, lens64_ = false, lens_known_ = false;
  size_t state_ = 0, workspace_ = 0;
};

// Linear float32 / float16 / float64, every float input of X's type, sequence_lens int32/int64.
bool rnn_supports(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 3 || !inputs[0].present) return false;
  const DataType t = inputs[0].type;
  if (t != DataType::kFloat32 && t != DataType::kFloat16 && t != DataType::kFloat64) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& d = inputs[i];
    if (!d.present) continue;
    if (d.format != TensorFormat::kLinear) return false;
    if (i == 4) {
      if (d.type != DataType::kInt32 && d.type != DataType::kInt64) return false;
    } else if (d.type != t) {
      return false;
    }
  }
  for (int o = 0; o < layer.num_outputs(); ++o) {
    if (layer.output(o) && layer.output(o)->format() != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerRNN, "cuda", 10, rnn_supports,
                                 [](const Layer& layer) { return std::make_unique<RnnCuda>(layer); }});

}  // namespace kiln::cuda
