// oneDNN tactic ("onednn", priority 100) of Pooling: max and average (count_include_pad 0/1)
// over 1-3 spatial dims with strides, asymmetric pads, dilations (pooling_v2), ceil_mode and
// global pooling, float32, with the reference's (ONNX Runtime's) semantics.
//
// ceil_mode becomes extra end padding: the output dims (from shape inference) fix how many
// windows there are, and the end padding is grown until oneDNN's floor formula yields them.
// oneDNN's include-padding average then divides by the whole window, while ONNX Runtime clips a
// window hanging past the end padding; the two agree when there are no pads (the divisor is the
// count of in-bounds taps either way), otherwise supports() declines so the reference runs.
//
// Layout: kLinear or kChannelsLast, contiguous; oneDNN pools in x's layout (no reorder of x), and
// a y in the other layout is reordered from the workspace.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/onednn_common.h"
#include "src/ir/op_params.h"
#include "src/ir/pool_params.h"

namespace kiln {
namespace {

using dnnl::memory;

struct OneDnnPool {
  memory::dims src, dst, kernel, strides, dilates, pad_l, pad_r;  // dilates are oneDNN's (d - 1)
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
};

// Geometry for input dims x; `y` gives the output dims when known (prepare), else they are
// computed. False with `why` when the layer does not fit oneDNN's pooling.
bool make_geometry(const PoolParams& a, const Dims& x, const Dims* y, OneDnnPool* g, std::string* why) {
  PoolGeometry pg;
  try {
    pg = pool_geometry(a, x);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  if (y && (y->rank() != x.rank() || (*y)[0] != x[0] || (*y)[1] != x[1])) {
    *why = "output dims " + y->to_string() + " do not match input " + x.to_string();
    return false;
  }
  *g = OneDnnPool{};
  g->src = onednn::to_dnnl(x);
  g->dst = {x[0], x[1]};
  bool overhang = false, any_pad = false;
  for (int i = 0; i < pg.spatial_rank; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t in = pg.in[u], kk = pg.kernel[u], s = pg.stride[u], d = pg.dilation[u];
    const int64_t pb = pg.pad_begin[u], pe = pg.pad_end[u];
    const int64_t span = d * (kk - 1) + 1;
    const int64_t out = y ? (*y)[i + 2] : pg.out[u];
    if (out < 1) {
      *why = "the output would be empty along spatial dim " + std::to_string(i);
      return false;
    }
    // oneDNN requires out == (in + pb + pr - span) / s + 1 (floor).
    int64_t pr = pe;
    if (in + pb + pe - span < 0 || (in + pb + pe - span) / s + 1 != out) pr = (out - 1) * s + span - in - pb;
    if (pr < 0 || (in + pb + pr - span) / s + 1 != out) {
      *why = "output extent " + std::to_string(out) + " along spatial dim " + std::to_string(i) +
             " does not follow from the pooling attributes";
      return false;
    }
    overhang = overhang || pr > pe;
    any_pad = any_pad || pb > 0 || pe > 0;
    g->dst.push_back(out);
    g->kernel.push_back(kk);
    g->strides.push_back(s);
    g->dilates.push_back(d - 1);
    g->pad_l.push_back(pb);
    g->pad_r.push_back(pr);
  }
  if (a.is_max()) {
    g->alg = dnnl::algorithm::pooling_max;
  } else if (!a.count_include_pad || !any_pad) {
    // Without pads, ONNX's include-pad divisor is the in-bounds count too.
    g->alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else if (!overhang) {
    g->alg = dnnl::algorithm::pooling_avg_include_padding;
  } else {
    *why = "count_include_pad with pads and a ceil_mode window past the end padding (ONNX clips that divisor)";
    return false;
  }
  return true;
}

struct PoolPlan {
  dnnl::pooling_v2_forward pool;
  memory::desc src, dst, user_dst, scratch;
  bool reorder_dst = false;
  dnnl::reorder dst_out;
  size_t dst_off = 0, scratch_off = 0, workspace = 0;
  int num_threads = 1;
  // The primitive's arguments and the output before the reorder, made at the first execute() and
  // re-pointed at each call's buffers (as the oneDNN convolution's and matmul's are); made whole or
  // not at all: an allocation failing halfway leaves `args` empty.
  mutable std::unordered_map<int, memory> args;
  mutable memory user_dst_memory;
};

PoolPlan build_plan(const OneDnnPool& g, TensorFormat x_format, TensorFormat y_format, int num_threads) {
  PoolPlan p;
  p.num_threads = num_threads;
  p.src = onednn::activation_desc(g.src, x_format);
  p.dst = onednn::activation_desc(g.dst, x_format);
  p.user_dst = onednn::activation_desc(g.dst, y_format);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, g.alg, p.src, p.dst, g.strides, g.kernel,
                                   g.dilates, g.pad_l, g.pad_r);
  dnnl::pooling_v2_forward::primitive_desc pd(d, attr, onednn::engine());
  if (pd.dst_desc() != p.dst) throw dnnl::error(dnnl_unimplemented, "pooling picked another dst format");
  p.scratch = pd.scratchpad_desc();
  onednn::WorkspaceLayout ws;
  p.reorder_dst = p.dst != p.user_dst;
  if (p.reorder_dst) {
    p.dst_out = onednn::make_reorder(p.dst, p.user_dst);
    p.dst_off = ws.add(p.dst.get_size());
  }
  p.scratch_off = ws.add(p.scratch.get_size());
  p.workspace = ws.total();
  p.pool = dnnl::pooling_v2_forward(pd);
  return p;
}

class PoolingOneDnn : public Kernel {
 public:
  explicit PoolingOneDnn(const PoolParams& params) : attrs_(params), stream_(onednn::engine()) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    if (inputs.empty() || outputs.empty()) throw Error(onednn::where(layer) + "expects input x and output y");
    const std::string key = onednn::shape_key(inputs) + onednn::shape_key(outputs) + "t" + std::to_string(num_threads);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      OneDnnPool g;
      std::string why;
      if (!make_geometry(attrs_, inputs[0].dims, &outputs[0].dims, &g, &why)) throw Error(onednn::where(layer) + why);
      onednn::ScopedOmpThreads threads(num_threads);
      try {
        it = plans_.emplace(key, build_plan(g, inputs[0].format, outputs[0].format, num_threads)).first;
      } catch (const dnnl::error& e) {
        throw Error(onednn::where(layer) + "oneDNN declined the primitive (" + e.what() +
                    "); the reference tactic handles this layer");
      }
    }
    current_ = &it->second;
  }

  size_t workspace_size() const override { return current_ ? current_->workspace : 0; }

  void execute(const KernelContext& ctx) override {
    if (!current_) throw Error("Pooling onednn: execute() before prepare()");
    const PoolPlan& p = *current_;
    onednn::ScopedOmpThreads threads(p.num_threads);
    auto& eng = onednn::engine();
    const char* what = "Pooling onednn";
    if (p.args.empty()) {
      std::unordered_map<int, memory> args;
      args.emplace(DNNL_ARG_SRC, memory(p.src, eng, DNNL_MEMORY_NONE));
      args.emplace(DNNL_ARG_DST, memory(p.dst, eng, DNNL_MEMORY_NONE));
      if (p.scratch.get_size()) args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, DNNL_MEMORY_NONE));
      p.user_dst_memory = p.reorder_dst ? memory(p.user_dst, eng, DNNL_MEMORY_NONE) : args.at(DNNL_ARG_DST);
      p.args = std::move(args);
    }
    p.args.at(DNNL_ARG_SRC).set_data_handle(ctx.inputs.at(0).data);
    p.user_dst_memory.set_data_handle(ctx.outputs.at(0).data);
    if (p.reorder_dst) {
      p.args.at(DNNL_ARG_DST).set_data_handle(onednn::workspace_at(ctx, p.dst_off, p.workspace, what));
    }
    if (p.scratch.get_size()) {
      p.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(onednn::workspace_at(ctx, p.scratch_off, p.workspace, what));
    }
    p.pool.execute(stream_, p.args);
    if (p.reorder_dst) p.dst_out.execute(stream_, p.args.at(DNNL_ARG_DST), p.user_dst_memory);
    stream_.wait();
  }

 private:
  PoolParams attrs_;
  dnnl::stream stream_;
  std::unordered_map<std::string, PoolPlan> plans_;
  const PoolPlan* current_ = nullptr;
};

bool supports_pooling(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() != 1 || !inputs[0].present || inputs[0].type != DataType::kFloat32) return false;
  const PoolParams& attrs = params_of<PoolParams>(layer);
  if (inputs[0].dims.is_dynamic()) return inputs[0].dims.rank() >= 3 && inputs[0].dims.rank() <= 5;
  if (inputs[0].dims.volume() == 0) return false;
  OneDnnPool g;
  std::string why;
  if (!make_geometry(attrs, inputs[0].dims, nullptr, &g, &why)) return false;
  try {
    build_plan(g, inputs[0].format, inputs[0].format, 1);
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerPooling, onednn::kTactic, onednn::kPriority, supports_pooling,
    [](const Layer& layer) { return std::make_unique<PoolingOneDnn>(params_of<PoolParams>(layer)); }});

}  // namespace kiln
