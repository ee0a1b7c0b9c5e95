// CPU reference kernel of the RNN layer (ONNX RNN / GRU / LSTM). For each direction and batch
// entry, independently (they run in parallel), it walks the valid time steps (all of them, or
// sequence_lens[b]; backwards for the reverse direction) and applies the ONNX equations,
// with gates in ONNX's order (W/R/B rows: rnn i; gru z, r, h; lstm i, o, f, c; P: i, o, f):
//   rnn:  H = f(x Wi' + h Ri' + Wbi + Rbi)
//   gru:  z = f(x Wz' + h Rz' + Wbz + Rbz), r = f(x Wr' + h Rr' + Wbr + Rbr),
//         n = g(x Wh' + (r . h) Rh' + Rbh + Wbh)           (linear_before_reset = 0)
//         n = g(x Wh' + r . (h Rh' + Rbh) + Wbh)           (linear_before_reset = 1)
//         H = (1 - z) . n + z . h
//   lstm: i = f(x Wi' + h Ri' + Pi . c + Wbi + Rbi), f = f(... Pf . c ...) (1 - i with
//         input_forget), c~ = g(x Wc' + h Rc' + Wbc + Rbc), C = f . c + i . c~,
//         o = f(x Wo' + h Ro' + Po . C + Wbo + Rbo), H = o . h(C)
// `clip` bounds every gate pre-activation. Steps past a sequence's length give zeros in Y;
// Y_h / Y_c hold the state after the last valid step. Computes in float (double for float64).
// Layout: kLinear only; `layout` 1 is the batch-first ONNX layout.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/data_copy.h"
#include "src/backends/kernel.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/rnn_params.h"
#include "src/core/text.h"

namespace kiln {
namespace {

enum class Cell { kRnn, kGru, kLstm };

template <typename C>
struct Act {
  using Fn = C (*)(C, C, C);
  Fn fn = nullptr;
  C alpha = 0, beta = 0;
  C operator()(C x) const { return fn(x, alpha, beta); }
};

template <typename C>
typename Act<C>::Fn activation_fn(const std::string& name) {
  using Fn = typename Act<C>::Fn;
  static const std::pair<const char*, Fn> kTable[] = {
      {"relu", [](C x, C, C) { return x > 0 ? x : C(0); }},
      {"tanh", [](C x, C, C) { return std::tanh(x); }},
      {"sigmoid", [](C x, C, C) { return C(1) / (C(1) + std::exp(-x)); }},
      {"affine", [](C x, C a, C b) { return a * x + b; }},
      {"leaky_relu", [](C x, C a, C) { return x >= 0 ? x : a * x; }},
      {"thresholded_relu", [](C x, C a, C) { return x > a ? x : C(0); }},
      {"scaled_tanh", [](C x, C a, C b) { return a * std::tanh(b * x); }},
      {"hard_sigmoid", [](C x, C a, C b) { return std::max(C(0), std::min(C(1), a * x + b)); }},
      {"elu", [](C x, C a, C) { return x >= 0 ? x : a * (std::exp(x) - C(1)); }},
      {"softsign", [](C x, C, C) { return x / (C(1) + std::abs(x)); }},
      {"softplus", [](C x, C, C) { return std::log1p(std::exp(x)); }},
  };
  for (const auto& [n, fn] : kTable) {
    if (name == n) return fn;
  }
  throw Error("RNN: unknown activation " + quote(name));
}

template <typename C>
std::vector<C> to_compute(const TensorView& v) {
  std::vector<C> out;
  if (!v.data) return out;
  out.resize(static_cast<size_t>(v.count()));
  KILN_DISPATCH_FLOAT(v.type, "RNN", {
    for (int64_t i = 0; i < v.count(); ++i)
      out[static_cast<size_t>(i)] = static_cast<C>(static_cast<double>(v.as<const T>()[i]));
  });
  return out;
}

template <typename C>
struct RnnProblem {
  Cell cell = Cell::kRnn;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 1;
  bool reverse_only = false, layout_batch_first = false, linear_before_reset = false, input_forget = false;
  C clip = 0;
  std::vector<Act<C>> acts;  // per direction, activations_per_dir each
  int acts_per_dir = 1;
  std::vector<C> x, w, r, b, h0, c0, p;
  std::vector<int64_t> lens;

  int64_t x_off(int64_t t, int64_t n) const { return (layout_batch_first ? n * seq + t : t * batch + n) * input; }
  int64_t state_off(int64_t d, int64_t n) const { return (layout_batch_first ? n * dirs + d : d * batch + n) * hidden; }
  int64_t y_off(int64_t t, int64_t d, int64_t n) const {
    return (layout_batch_first ? (n * seq + t) * dirs + d : (t * dirs + d) * batch + n) * hidden;
  }
};

// One gate row block: out[j] = sum_i m[(g*H + j) * cols + i] * v[i] for j < H.
template <typename C>
void matvec(const C* m, int64_t gate, int64_t hidden, int64_t cols, const C* v, C* out) {
  for (int64_t j = 0; j < hidden; ++j) {
    const C* row = m + (gate * hidden + j) * cols;
    C acc = 0;
    for (int64_t i = 0; i < cols; ++i) acc += row[i] * v[i];
    out[j] = acc;
  }
}

// Runs direction d for batch entry n; writes Y rows (y may be null) and the final states.
template <typename C>
void run_sequence(const RnnProblem<C>& pb, int64_t d, int64_t n, C* y, C* yh, C* yc) {
  const int64_t H = pb.hidden, I = pb.input, G = pb.gates;
  const bool reverse = pb.reverse_only || d == 1;
  const C* W = pb.w.data() + d * G * H * I;
  const C* R = pb.r.data() + d * G * H * H;
  std::vector<C> wb(static_cast<size_t>(G * H), 0), rb(static_cast<size_t>(G * H), 0),
      pp(static_cast<size_t>(3 * H), 0);
  if (!pb.b.empty()) {
    std::copy_n(pb.b.data() + d * 2 * G * H, G * H, wb.data());
    std::copy_n(pb.b.data() + d * 2 * G * H + G * H, G * H, rb.data());
  }
  if (!pb.p.empty()) std::copy_n(pb.p.data() + d * 3 * H, 3 * H, pp.data());
  const Act<C>* act = pb.acts.data() + d * pb.acts_per_dir;
  std::vector<C> h(static_cast<size_t>(H), 0), c(static_cast<size_t>(H), 0);
  if (!pb.h0.empty()) std::copy_n(pb.h0.data() + pb.state_off(d, n), H, h.data());
  if (!pb.c0.empty()) std::copy_n(pb.c0.data() + pb.state_off(d, n), H, c.data());
  std::vector<C> xg(static_cast<size_t>(G * H)), hg(static_cast<size_t>(G * H)), tmp(static_cast<size_t>(H));
  auto clip = [&](C v) { return pb.clip > 0 ? std::clamp(v, -pb.clip, pb.clip) : v; };
  const int64_t len = pb.lens.empty() ? pb.seq : std::clamp<int64_t>(pb.lens[static_cast<size_t>(n)], 0, pb.seq);

  for (int64_t step = 0; step < len; ++step) {
    const int64_t t = reverse ? len - 1 - step : step;
    const C* xt = pb.x.data() + pb.x_off(t, n);
    for (int64_t g = 0; g < G; ++g) {
      matvec(W, g, H, I, xt, xg.data() + g * H);
      matvec(R, g, H, H, h.data(), hg.data() + g * H);
    }
    auto pre = [&](int64_t g, int64_t j) {  // x W' + h R' + Wb + Rb of gate g, unit j
      const auto k = static_cast<size_t>(g * H + j);
      return xg[k] + hg[k] + wb[k] + rb[k];
    };
    if (pb.cell == Cell::kRnn) {
      for (int64_t j = 0; j < H; ++j) tmp[static_cast<size_t>(j)] = act[0](clip(pre(0, j)));
      h = tmp;
    } else if (pb.cell == Cell::kGru) {
      std::vector<C> z(static_cast<size_t>(H)), rg(static_cast<size_t>(H)), rh(static_cast<size_t>(H));
      for (int64_t j = 0; j < H; ++j) {
        z[static_cast<size_t>(j)] = act[0](clip(pre(0, j)));
        rg[static_cast<size_t>(j)] = act[0](clip(pre(1, j)));
        rh[static_cast<size_t>(j)] = rg[static_cast<size_t>(j)] * h[static_cast<size_t>(j)];
      }
      if (!pb.linear_before_reset) matvec(R, 2, H, H, rh.data(), hg.data() + 2 * H);  // (r . h) Rh'
      for (int64_t j = 0; j < H; ++j) {
        const auto k = static_cast<size_t>(2 * H + j);
        const C rec = pb.linear_before_reset ? rg[static_cast<size_t>(j)] * (hg[k] + rb[k]) : hg[k] + rb[k];
        const C nj = act[1](clip(xg[k] + wb[k] + rec));
        const C zj = z[static_cast<size_t>(j)];
        tmp[static_cast<size_t>(j)] = (C(1) - zj) * nj + zj * h[static_cast<size_t>(j)];
      }
      h = tmp;
    } else {  // lstm: gates i, o, f, c; peepholes i, o, f
      for (int64_t j = 0; j < H; ++j) {
        const auto u = static_cast<size_t>(j);
        const C cprev = c[u];
        const C ig = act[0](clip(pre(0, j) + pp[u] * cprev));
        const C fg = pb.input_forget ? C(1) - ig : act[0](clip(pre(2, j) + pp[static_cast<size_t>(2 * H + j)] * cprev));
        const C cand = act[1](clip(pre(3, j)));
        const C cnew = fg * cprev + ig * cand;
        const C og = act[0](clip(pre(1, j) + pp[static_cast<size_t>(H + j)] * cnew));
        c[u] = cnew;
        tmp[u] = og * act[2](cnew);
      }
      h = tmp;
    }
    if (y) std::copy(h.begin(), h.end(), y + pb.y_off(t, d, n));
  }
  if (y) {
    for (int64_t t = len; t < pb.seq; ++t) std::fill_n(y + pb.y_off(t, d, n), H, C(0));
  }
  if (yh) std::copy(h.begin(), h.end(), yh + pb.state_off(d, n));
  if (yc) std::copy(c.begin(), c.end(), yc + pb.state_off(d, n));
}

template <typename T>
void rnn_run(const KernelContext& ctx) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Layer& layer = *ctx.layer;
  RnnProblem<C> pb;
  const RnnParams& p = params_of<RnnParams>(layer);
  pb.cell = p.cell == RNNCell::kGru ? Cell::kGru : p.cell == RNNCell::kLstm ? Cell::kLstm : Cell::kRnn;
  pb.gates = p.gates();
  pb.acts_per_dir = p.activations_per_direction();
  pb.dirs = p.directions();
  pb.reverse_only = p.reverse_only();
  pb.layout_batch_first = p.batch_first;
  pb.linear_before_reset = p.linear_before_reset;
  pb.input_forget = p.input_forget;
  pb.clip = static_cast<C>(p.clip);
  pb.hidden = p.hidden;
  const Dims& xd = ctx.inputs[0].dims;
  pb.seq = pb.layout_batch_first ? xd[1] : xd[0];
  pb.batch = pb.layout_batch_first ? xd[0] : xd[1];
  pb.input = xd[2];
  const auto& names = p.activations;
  const auto& alpha = p.alpha;
  const auto& beta = p.beta;
  for (size_t i = 0; i < names.size(); ++i) {
    pb.acts.push_back(Act<C>{activation_fn<C>(names[i]), static_cast<C>(alpha.at(i)), static_cast<C>(beta.at(i))});
  }
  auto input = [&](size_t i) { return i < ctx.inputs.size() ? to_compute<C>(ctx.inputs[i]) : std::vector<C>{}; };
  pb.x = input(0);
  pb.w = input(1);
  pb.r = input(2);
  pb.b = input(3);
  pb.h0 = input(5);
  pb.c0 = input(6);
  pb.p = input(7);
  if (ctx.inputs.size() > 4 && ctx.inputs[4].data) {
    pb.lens = cpu::read_ints(ctx.inputs[4], "RNN sequence_lens");
    for (int64_t v : pb.lens) {
      if (v < 0 || v > pb.seq) {
        throw Error("RNN: sequence length " + std::to_string(v) + " is outside 0.." + std::to_string(pb.seq));
      }
    }
  }
  const size_t state_count = static_cast<size_t>(pb.dirs * pb.batch * pb.hidden);
  std::vector<C> y(static_cast<size_t>(ctx.outputs[0].count())), yh(state_count), yc(state_count);
  cpu::parallel_for(
      pb.dirs * pb.batch, ctx.num_threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w)
          run_sequence(pb, w / pb.batch, w % pb.batch, y.data(), yh.data(), yc.data());
      },
      1);
  const std::vector<C>* results[] = {&y, &yh, &yc};
  for (size_t o = 0; o < ctx.outputs.size() && o < 3; ++o) {
    T* dst = ctx.outputs[o].as<T>();
    const auto& src = *results[o];
    for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<T>(src[i]);
  }
}

void rnn_execute(const KernelContext& ctx) { KILN_DISPATCH_FLOAT(ctx.inputs[0].type, "RNN", rnn_run<T>(ctx)); }

bool linear_only(const Layer&, const std::vector<TensorDesc>& inputs) {
  for (const auto& d : inputs) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerRNN, "reference", 0, linear_only,
                                 function_kernel(rnn_execute)});

}  // namespace kiln
