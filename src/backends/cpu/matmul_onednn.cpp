// oneDNN tactics ("onednn", priority 100) of MatrixMultiply and Gemm through the matmul
// primitive, float32.
//
// MatrixMultiply: numpy matmul with batch broadcasting (oneDNN broadcasts size-1 batch dims of
// either operand); transposes are strides, not copies. When b has no batch extent and a is not
// transposed, a's batch dims fold into M (one large GEMM instead of a batch of small ones).
// Gemm: y = act(alpha*A'B' + beta*C). With alpha = beta = 1, C is the matmul's bias (any
// broadcast shape); otherwise C is broadcast into y first and added by a `sum` post-op scaled
// by beta, while alpha is the output scale.
// A constant b (weights, as in fully connected layers) is reordered once per prepare() shape into
// the format oneDNN prefers; other operands are used in place.
//
// Layout: kLinear (row-major), contiguous; no alignment assumptions.
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/onednn_common.h"
#include "src/ir/matmul_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using dnnl::memory;

// What build_plan needs, independent of the layer type.
struct MatmulSpec {
  memory::desc a, b, dst, bias;  // b: kiln's layout; bias empty when absent
  bool b_constant = false;       // b's host value is known: let oneDNN pick its format
  float output_scale = 1.f;
  bool sum = false;  // seed dst with C and add it scaled by sum_scale
  float sum_scale = 1.f;
  PostOp post;
};

struct MatmulPlan {
  dnnl::matmul matmul;
  memory::desc a, user_b, b, dst, bias, scratch;
  memory cached_b;  // reordered constant b
  size_t workspace = 0;
  int num_threads = 1;
  // Gemm's sum path: how C broadcasts into y ([M, N] row-major).
  bool seed_c = false;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> c_strides;  // per output dim (0 where broadcast)
  // The primitive's arguments, made at the first execute() and given new data handles after: an
  // inference creates no oneDNN memory objects and no map (both allocate).
  std::unordered_map<int, memory> args;
};

MatmulPlan build_plan(const MatmulSpec& s, int num_threads) {
  MatmulPlan p;
  p.num_threads = num_threads;
  p.a = s.a;
  p.user_b = s.b;
  p.dst = s.dst;
  p.bias = s.bias;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.output_scale != 1.f) attr.set_output_scales(0, {s.output_scale});
  dnnl::post_ops ops;
  if (s.sum) ops.append_sum(s.sum_scale);
  if (!onednn::append_activation(ops, s.post)) {
    throw dnnl::error(dnnl_unimplemented, "activation not expressible as oneDNN 2.6 post-ops");
  }
  attr.set_post_ops(ops);
  const auto make_pd = [&](const memory::desc& b) {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(s.a, b, s.bias, s.dst), attr, onednn::engine());
  };
  dnnl::matmul::primitive_desc pd;
  bool done = false;
  if (s.b_constant) {
    try {
      pd = make_pd(memory::desc(s.b.dims(), memory::data_type::f32, memory::format_tag::any));
      done = true;
    } catch (const dnnl::error&) {
      // Fall back to b as it is.
    }
  }
  if (!done) pd = make_pd(s.b);
  p.b = pd.weights_desc();
  p.scratch = pd.scratchpad_desc();
  p.workspace = p.scratch.get_size();
  p.matmul = dnnl::matmul(pd);
  return p;
}

// Dims of a tensor as a memory::dims padded on the left with ones to `rank`.
memory::dims padded(const memory::dims& d, size_t rank) {
  memory::dims r(rank - d.size(), 1);
  r.insert(r.end(), d.begin(), d.end());
  return r;
}

// A row-major operand [.., R, C] seen as [.., C, R] when transposed (strides swapped).
memory::desc operand_desc(const memory::dims& physical, bool transpose) {
  memory::dims dims = physical, strides = onednn::plain_strides(physical);
  if (transpose) {
    const size_t n = dims.size();
    std::swap(dims[n - 1], dims[n - 2]);
    std::swap(strides[n - 1], strides[n - 2]);
  }
  return memory::desc(dims, memory::data_type::f32, strides);
}

// ---- MatrixMultiply -----------------------------------------------------------------------

bool matmul_spec(const Layer& layer, const std::vector<TensorDesc>& inputs, MatmulSpec* s, std::string* why) {
  const bool ta = params_of<MatMulParams>(layer).transpose_a;
  const bool tb = params_of<MatMulParams>(layer).transpose_b;
  const Dims& ad = inputs[0].dims;
  const Dims& bd = inputs[1].dims;
  if (ad.rank() < 1 || bd.rank() < 1) {
    *why = "operands must have rank >= 1";
    return false;
  }
  if ((ad.rank() == 1 && ta) || (bd.rank() == 1 && tb)) {
    *why = "a transpose of a 1-D operand";
    return false;
  }
  // 1-D operands: a [K] -> [1, K], b [K] -> [K, 1].
  memory::dims pa = onednn::to_dnnl(ad), pb = onednn::to_dnnl(bd);
  if (pa.size() == 1) pa.insert(pa.begin(), 1);
  if (pb.size() == 1) pb.push_back(1);
  const size_t rank = std::max(pa.size(), pb.size());
  pa = padded(pa, rank);
  pb = padded(pb, rank);
  memory::desc a = operand_desc(pa, ta), b = operand_desc(pb, tb);
  const memory::dims la = a.dims(), lb = b.dims();
  const int64_t m = la[rank - 2], k = la[rank - 1], n = lb[rank - 1];
  if (lb[rank - 2] != k) {
    *why = "inner dims differ: a " + ad.to_string() + ", b " + bd.to_string();
    return false;
  }
  memory::dims out;
  bool b_batched = false;
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (la[i] != lb[i] && la[i] != 1 && lb[i] != 1) {
      *why = "batch dims do not broadcast: a " + ad.to_string() + ", b " + bd.to_string();
      return false;
    }
    out.push_back(std::max(la[i], lb[i]));
    b_batched = b_batched || lb[i] != 1;
  }
  if (!b_batched && !ta && rank > 2) {
    // Fold a's batch into M: [B.., M, K] x [K, N] is one [B..*M, K] x [K, N].
    int64_t rows = m;
    for (size_t i = 0; i + 2 < rank; ++i) rows *= la[i];
    a = onednn::plain_desc({rows, k});
    b = operand_desc({pb[rank - 2], pb[rank - 1]}, tb);
    s->dst = onednn::plain_desc({rows, n});
  } else {
    out.push_back(m);
    out.push_back(n);
    s->dst = onednn::plain_desc(out);
  }
  s->a = a;
  s->b = b;
  s->b_constant = inputs[1].value != nullptr;
  return true;
}

// ---- Gemm ---------------------------------------------------------------------------------

struct GemmAttrs {
  float alpha = 1.f, beta = 1.f;
  bool ta = false, tb = false;
  PostOp post;
  bool post_known = true;
  explicit GemmAttrs(const Layer& layer)
      : alpha(static_cast<float>(params_of<GemmParams>(layer).alpha)),
        beta(static_cast<float>(params_of<GemmParams>(layer).beta)),
        ta(params_of<GemmParams>(layer).trans_a),
        tb(params_of<GemmParams>(layer).trans_b) {
    post_known = onednn::read_post_op_safe(layer, &post);
  }
};

// `use_bias`: C as the matmul bias (alpha = beta = 1) rather than seeded into y.
bool gemm_spec(const GemmAttrs& g, const std::vector<TensorDesc>& inputs, bool use_bias, MatmulSpec* s,
               MatmulPlan* shape, std::string* why) {
  const Dims& ad = inputs[0].dims;
  const Dims& bd = inputs[1].dims;
  if (ad.rank() != 2 || bd.rank() != 2) {
    *why = "expects 2-D a and b, got " + ad.to_string() + " and " + bd.to_string();
    return false;
  }
  s->a = operand_desc(onednn::to_dnnl(ad), g.ta);
  s->b = operand_desc(onednn::to_dnnl(bd), g.tb);
  const int64_t m = s->a.dims()[0], k = s->a.dims()[1], n = s->b.dims()[1];
  if (s->b.dims()[0] != k) {
    *why = "inner dims differ: a " + ad.to_string() + ", b " + bd.to_string();
    return false;
  }
  s->dst = onednn::plain_desc({m, n});
  s->b_constant = inputs[1].value != nullptr;
  s->post = g.post;
  const bool has_c = inputs.size() > 2 && inputs[2].present && g.beta != 0.f;
  shape->rows = m;
  shape->cols = n;
  if (has_c) {
    const Dims& cd = inputs[2].dims;
    if (cd.rank() > 2) {
      *why = "C must have rank <= 2, got " + cd.to_string();
      return false;
    }
    const Dims out{m, n};
    for (int i = 0; i < cd.rank(); ++i) {
      const int64_t o = out[i + 2 - cd.rank()];
      if (cd[i] != 1 && cd[i] != o) {
        *why = "C " + cd.to_string() + " does not broadcast to " + out.to_string();
        return false;
      }
    }
    if (use_bias) {
      memory::dims c2 = padded(onednn::to_dnnl(cd), 2);
      s->bias = memory::desc(c2, memory::data_type::f32, onednn::plain_strides(c2));
    } else {
      s->sum = true;
      s->sum_scale = g.beta;
      shape->seed_c = true;
      shape->c_strides = cpu::broadcast_strides(cd, out);
    }
  }
  s->output_scale = g.alpha;
  return true;
}

// ---- the kernel ---------------------------------------------------------------------------

class MatmulOneDnn : public Kernel {
 public:
  MatmulOneDnn() : stream_(onednn::engine()) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    if (inputs.size() < 2 || outputs.empty()) throw Error(onednn::where(layer) + "expects inputs a, b and output y");
    const std::string key = onednn::shape_key(inputs) + "t" + std::to_string(num_threads);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      MatmulPlan plan;
      std::string why;
      onednn::ScopedOmpThreads threads(num_threads);
      try {
        if (!build(layer, inputs, num_threads, &plan, &why)) throw Error(onednn::where(layer) + why);
      } catch (const dnnl::error& e) {
        throw Error(onednn::where(layer) + "oneDNN declined the primitive (" + e.what() +
                    "); the reference tactic handles this layer");
      }
      if (static_cast<int64_t>(plan.dst.get_size()) != outputs[0].dims.volume() * 4) {
        throw Error(onednn::where(layer) + "output dims " + outputs[0].dims.to_string() +
                    " differ from the product's " + Dims::from(plan.dst.dims()).to_string());
      }
      const HostTensor* b = inputs[1].value;
      if (b && plan.b != plan.user_b && b->type() == DataType::kFloat32 &&
          b->count() * 4 == static_cast<int64_t>(plan.user_b.get_size())) {
        auto& eng = onednn::engine();
        memory user(plan.user_b, eng, const_cast<void*>(b->data()));
        plan.cached_b = memory(plan.b, eng);
        onednn::make_reorder(plan.user_b, plan.b).execute(stream_, user, plan.cached_b);
        stream_.wait();
      } else if (plan.b != plan.user_b) {
        throw Error(onednn::where(layer) + "internal: a non-constant b in a reordered format");
      }
      it = plans_.emplace(key, std::move(plan)).first;
    }
    current_ = &it->second;
  }

  size_t workspace_size() const override { return current_ ? current_->workspace : 0; }

  void execute(const KernelContext& ctx) override {
    if (!current_) throw Error("MatrixMultiply/Gemm onednn: execute() before prepare()");
    MatmulPlan& p = *current_;
    onednn::ScopedOmpThreads threads(p.num_threads);
    float* y = ctx.outputs.at(0).as<float>();
    if (p.seed_c) seed_c(p, ctx.inputs.at(2), y);
    if (p.args.empty()) {  // made whole or not at all: an allocation failing halfway leaves it empty
      auto& eng = onednn::engine();
      std::unordered_map<int, memory> args;
      args.emplace(DNNL_ARG_SRC, memory(p.a, eng, DNNL_MEMORY_NONE));
      args.emplace(DNNL_ARG_WEIGHTS, p.cached_b ? p.cached_b : memory(p.user_b, eng, DNNL_MEMORY_NONE));
      args.emplace(DNNL_ARG_DST, memory(p.dst, eng, DNNL_MEMORY_NONE));
      if (p.bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, eng, DNNL_MEMORY_NONE));
      if (p.workspace) args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, DNNL_MEMORY_NONE));
      p.args = std::move(args);
    }
    p.args.at(DNNL_ARG_SRC).set_data_handle(ctx.inputs.at(0).data);
    if (!p.cached_b) p.args.at(DNNL_ARG_WEIGHTS).set_data_handle(ctx.inputs.at(1).data);
    p.args.at(DNNL_ARG_DST).set_data_handle(y);
    if (p.bias) p.args.at(DNNL_ARG_BIAS).set_data_handle(ctx.inputs.at(2).data);
    if (p.workspace) {
      p.args.at(DNNL_ARG_SCRATCHPAD)
          .set_data_handle(onednn::workspace_at(ctx, 0, p.workspace, "MatrixMultiply/Gemm onednn"));
    }
    p.matmul.execute(stream_, p.args);
    stream_.wait();
  }

  // Shared with supports(): the spec, then the primitive (dnnl::error when oneDNN declines).
  static bool build(const Layer& layer, const std::vector<TensorDesc>& inputs, int num_threads, MatmulPlan* plan,
                    std::string* why) {
    MatmulSpec spec;
    if (layer.type() != kLayerGemm) {
      if (!matmul_spec(layer, inputs, &spec, why)) return false;
      *plan = build_plan(spec, num_threads);
      return true;
    }
    const GemmAttrs g(layer);
    if (!g.post_known) {
      *why = "unknown activation kind";
      return false;
    }
    const bool has_c = inputs.size() > 2 && inputs[2].present && g.beta != 0.f;
    if (has_c && g.alpha == 1.f && g.beta == 1.f) {
      MatmulPlan shape;
      if (!gemm_spec(g, inputs, true, &spec, &shape, why)) return false;
      try {
        *plan = build_plan(spec, num_threads);
        return true;
      } catch (const dnnl::error&) {
        spec = MatmulSpec{};  // this bias shape is not supported: seed C instead
      }
    }
    MatmulPlan shape;
    if (!gemm_spec(g, inputs, false, &spec, &shape, why)) return false;
    *plan = build_plan(spec, num_threads);
    plan->seed_c = shape.seed_c;
    plan->rows = shape.rows;
    plan->cols = shape.cols;
    plan->c_strides = shape.c_strides;
    return true;
  }

 private:
  // y[i, j] = C broadcast, before the matmul adds beta * y.
  static void seed_c(const MatmulPlan& p, const TensorView& c, float* y) {
    const float* cv = c.as<const float>();
    const int64_t rs = p.c_strides.size() > 0 ? p.c_strides[0] : 0, cs = p.c_strides.size() > 1 ? p.c_strides[1] : 0;
    for (int64_t i = 0; i < p.rows; ++i) {
      float* row = y + i * p.cols;
      const float* crow = cv + i * rs;
      if (cs == 1) {
        std::memcpy(row, crow, static_cast<size_t>(p.cols) * sizeof(float));
      } else {
        for (int64_t j = 0; j < p.cols; ++j) row[j] = crow[j * cs];
      }
    }
  }

  dnnl::stream stream_;
  std::unordered_map<std::string, MatmulPlan> plans_;
  MatmulPlan* current_ = nullptr;
};

bool supports_matmul(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  const size_t max_inputs = layer.type() == kLayerGemm ? 3 : 2;
  if (inputs.size() < 2 || inputs.size() > max_inputs || !inputs[0].present || !inputs[1].present) return false;
  if (!onednn::all_float32(inputs)) return false;
  for (const TensorDesc& t : inputs) {
    if (t.present && t.format != TensorFormat::kLinear) return false;
  }
  if (layer.type() == kLayerGemm) {
    const GemmAttrs g(layer);
    if (!g.post_known || !onednn::activation_supported(g.post)) return false;
  } else if (!layer.attrs().get_string("activation", "").empty()) {
    return false;  // a fused activation (CPU builds): packed_avx2 or the reference
  }
  for (const TensorDesc& t : inputs) {
    if (t.present && t.dims.is_dynamic()) return true;  // decided in prepare()
  }
  if (inputs[0].dims.volume() == 0 || inputs[1].dims.volume() == 0) return false;
  MatmulPlan plan;
  std::string why;
  try {
    return MatmulOneDnn::build(layer, inputs, 1, &plan, &why);
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerMatrixMultiply, onednn::kTactic, onednn::kPriority,
                                 supports_matmul, [](const Layer& layer) { return std::make_unique<MatmulOneDnn>(); }});

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerGemm, onednn::kTactic, onednn::kPriority, supports_matmul,
                                 [](const Layer& layer) { return std::make_unique<MatmulOneDnn>(); }});

}  // namespace kiln
