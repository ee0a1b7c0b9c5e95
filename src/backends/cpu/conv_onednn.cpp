// oneDNN tactics ("onednn", priority 100) of Convolution and Deconvolution: 1-D/2-D/3-D,
// groups (incl. depthwise), dilations, asymmetric pads, output_padding, bias, Convolution's
// residual input (a `sum` post-op) and the fused activation (eltwise post-ops), float32.
//
// Layout: x/y/residual kLinear (NCHW...) or kChannelsLast (NHWC...), contiguous; w and b plain.
// x, y and the residual may each be in either format. For kLinear tensors oneDNN picks its own
// (blocked) src/dst formats and the kernel reorders in and out through its workspace: on the AVX2 development machines
// oneDNN's plain-NCHW path is a generic GEMM convolution that is 1.1-2.2x slower than blocked jit kernels plus the two
// reorders (ResNet-50 shapes, 1 and 2 threads). Channels-last tensors are used as they are (oneDNN
// has native NHWC kernels). Weights are reordered once per prepare() shape into the format the
// primitive chose, from the constant's host value (TensorDesc::value); non-constant weights are
// reordered into the workspace on every execute.
//
// "onednn_winograd" (priority 110, before the direct kernels where it applies): oneDNN's Winograd
// F(2x2, 3x3) convolution for 3x3, stride 1, undilated, ungrouped 2-D convolutions with at least
// 32 input channels on images of at least 14x14. It needs blocked formats, so x and y are reordered through the
// workspace in any layout. On this project's AVX-512 machine it ran ResNet-50's 3x3 convolutions at 56x56 and
// 28x28 1.3-1.5x faster than the direct kernels, reorders included (1 thread), 14x14 ~1.1x;
// oneDNN declines it where the ISA has no kernel (AVX2) or the fused activation has no post-op
// there (then the direct tactic runs).
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/activation_avx2.h"
#include "src/backends/cpu/onednn_common.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

using dnnl::memory;

// A (de)convolution layer's parameters: the activation oneDNN fuses as a post-op (`post`) and the
// one kiln applies to the output after the primitive (`after`, cpu::activation_after_onednn()).
struct ConvAttrs {
  ConvParams params;
  bool deconv = false;
  PostOp post, after;

  explicit ConvAttrs(const ConvParams& p) : params(p), deconv(p.deconv), post(p.post) {
    if (cpu::activation_after_onednn(post)) std::swap(post, after);
  }
};

// oneDNN-side geometry of one input shape.
struct ConvGeometry {
  memory::dims src, weights, user_weight_strides, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;  // dilates are oneDNN's (d - 1)
};

// Computes the geometry from x and w; returns false with `why` when the shapes or attributes
// do not fit (then supports() declines and prepare() throws).
bool make_geometry(const ConvAttrs& a, const Dims& x, const Dims& w, ConvGeometry* g, std::string* why) {
  kiln::ConvGeometry cg;
  try {
    cg = conv_geometry(a.params, x, w);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  const int k = cg.spatial_rank;
  const int64_t groups = cg.group, c = cg.in_channels, m = cg.out_channels;
  memory::dims spatial_k(cg.kernel.begin(), cg.kernel.end());
  const memory::dims ks = onednn::plain_strides(spatial_k);
  const int64_t kvol = ks.empty() ? 1 : ks[0] * spatial_k[0];

  // oneDNN weights dims are (g,) o, i, k... ; strides describe kiln's physical layout.
  const int64_t og = m / groups, ig = c / groups;
  g->weights.clear();
  g->user_weight_strides.clear();
  if (groups > 1) g->weights.push_back(groups);
  g->weights.push_back(og);
  g->weights.push_back(ig);
  if (a.deconv) {  // physical [g, ig, og, k...]
    if (groups > 1) g->user_weight_strides.push_back(ig * og * kvol);
    g->user_weight_strides.push_back(kvol);
    g->user_weight_strides.push_back(og * kvol);
  } else {  // physical [g, og, ig, k...]
    if (groups > 1) g->user_weight_strides.push_back(og * ig * kvol);
    g->user_weight_strides.push_back(ig * kvol);
    g->user_weight_strides.push_back(kvol);
  }
  for (int i = 0; i < k; ++i) {
    g->weights.push_back(spatial_k[static_cast<size_t>(i)]);
    g->user_weight_strides.push_back(ks[static_cast<size_t>(i)]);
  }

  g->src = onednn::to_dnnl(x);
  g->dst = {x[0], m};
  g->bias = {m};
  g->strides.clear();
  g->dilates.clear();
  g->pad_l.clear();
  g->pad_r.clear();
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    g->dst.push_back(cg.out[u]);
    g->strides.push_back(cg.stride[u]);
    g->dilates.push_back(cg.dilation[u] - 1);
    g->pad_l.push_back(cg.pad_begin[u]);
    // output_padding extends the output's end: oneDNN sees it as less end padding.
    g->pad_r.push_back(a.deconv ? cg.pad_end[u] - cg.output_padding[u] : cg.pad_end[u]);
  }
  return true;
}

// Everything one input shape needs at execute time.
struct ConvPlan {
  dnnl::primitive conv;
  memory::desc user_src, user_dst, user_residual, src, dst, user_weights, weights, bias, scratch;
  bool copy_residual = false;  // residual in y's layout: seed y with memcpy instead of dst_in
  bool reorder_src = false, reorder_dst = false;
  dnnl::reorder src_in, dst_in, dst_out, weights_in;
  memory cached_weights;  // reordered constant weights; empty when w is not constant
  bool weights_need_reorder = false;
  size_t src_off = 0, dst_off = 0, weights_off = 0, scratch_off = 0, scratch_bytes = 0, workspace = 0;
  int num_threads = 1;
  // The memory objects execute() binds, made at its first call and re-pointed at each call's
  // buffers (set_data_handle): making five or six per call, with the argument map, cost about 2%
  // of MobileNetV3 at batch 1 in malloc and free (3-5% of its latency on 1-2 threads). A kernel
  // instance runs one call at a time. `made` is set last: an allocation failing halfway leaves it
  // false and the next call makes them again.
  struct Bound {
    bool made = false;
    memory user_src, src, user_dst, dst, user_residual, user_weights, weights, bias, scratch;
    std::unordered_map<int, memory> args;
  };
  mutable Bound bound;
};

// Layouts of the activation tensors of one (de)convolution.
struct ConvFormats {
  TensorFormat x = TensorFormat::kLinear, y = TensorFormat::kLinear, residual = TensorFormat::kLinear;
};

// Builds the primitive and the reorders for one shape (throws dnnl::error when oneDNN declines).
// Weights are not touched here.
ConvPlan build_plan(const ConvAttrs& a, const ConvGeometry& g, const ConvFormats& f, bool has_bias, bool has_residual,
                    int num_threads, bool winograd = false) {
  ConvPlan p;
  p.num_threads = num_threads;
  auto& eng = onednn::engine();
  const auto f32 = memory::data_type::f32;
  p.user_src = onednn::activation_desc(g.src, f.x);
  p.user_dst = onednn::activation_desc(g.dst, f.y);
  p.user_residual = onednn::activation_desc(g.dst, f.residual);
  p.user_weights = memory::desc(g.weights, f32, g.user_weight_strides);
  p.bias = has_bias ? onednn::plain_desc(g.bias) : memory::desc();
  const memory::desc src_req =
      f.x == TensorFormat::kLinear || winograd ? memory::desc(g.src, f32, memory::format_tag::any) : p.user_src;
  const memory::desc dst_req =
      f.y == TensorFormat::kLinear || winograd ? memory::desc(g.dst, f32, memory::format_tag::any) : p.user_dst;
  const memory::desc w_req(g.weights, f32, memory::format_tag::any);

  // Order matters: y = act(conv + b + residual), so the sum comes before the activation.
  dnnl::post_ops ops;
  if (has_residual) ops.append_sum(1.f);
  if (!onednn::append_activation(ops, a.post)) {
    throw dnnl::error(dnnl_unimplemented, "activation not expressible as oneDNN 2.6 post-ops");
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  if (a.deconv) {
    dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                        src_req, w_req, p.bias, dst_req, g.strides, g.dilates, g.pad_l, g.pad_r);
    dnnl::deconvolution_forward::primitive_desc pd(d, attr, eng);
    p.src = pd.src_desc();
    p.dst = pd.dst_desc();
    p.weights = pd.weights_desc();
    p.scratch = pd.scratchpad_desc();
    p.conv = dnnl::deconvolution_forward(pd);
  } else {
    const auto algorithm = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, algorithm, src_req, w_req, p.bias, dst_req,
                                      g.strides, g.dilates, g.pad_l, g.pad_r);
    dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
    p.src = pd.src_desc();
    p.dst = pd.dst_desc();
    p.weights = pd.weights_desc();
    p.scratch = pd.scratchpad_desc();
    p.conv = dnnl::convolution_forward(pd);
  }
  p.reorder_src = p.src != p.user_src;
  p.reorder_dst = p.dst != p.user_dst;
  onednn::WorkspaceLayout ws;
  if (p.reorder_src) {
    p.src_in = onednn::make_reorder(p.user_src, p.src);
    p.src_off = ws.add(p.src.get_size());
  }
  if (p.reorder_dst) {
    p.dst_out = onednn::make_reorder(p.dst, p.user_dst);
    p.dst_off = ws.add(p.dst.get_size());
  }
  p.copy_residual = has_residual && p.dst == p.user_residual;
  if (has_residual && !p.copy_residual) p.dst_in = onednn::make_reorder(p.user_residual, p.dst);
  p.weights_need_reorder = p.weights != p.user_weights;
  if (p.weights_need_reorder) {
    p.weights_in = onednn::make_reorder(p.user_weights, p.weights);
  }
  p.scratch_bytes = p.scratch.get_size();
  p.scratch_off = ws.add(p.scratch_bytes);
  p.workspace = ws.total();
  return p;
}

class ConvOneDnn : public Kernel {
 public:
  explicit ConvOneDnn(const ConvParams& params, bool winograd = false)
      : attrs_(params), winograd_(winograd), stream_(onednn::engine()) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    if (inputs.size() < 2 || outputs.empty()) throw Error(onednn::where(layer) + "expects inputs x, w and output y");
    const std::string key = onednn::shape_key(inputs) + "t" + std::to_string(num_threads);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      ConvGeometry g;
      std::string why;
      if (!make_geometry(attrs_, inputs[0].dims, inputs[1].dims, &g, &why)) throw Error(onednn::where(layer) + why);
      if (onednn::to_dnnl(outputs[0].dims) != g.dst) {
        throw Error(onednn::where(layer) + "output dims " + outputs[0].dims.to_string() +
                    " differ from the convolution's " + Dims::from(g.dst).to_string());
      }
      const bool has_bias = inputs.size() > 2 && inputs[2].present;
      const bool has_residual = !attrs_.deconv && inputs.size() > 3 && inputs[3].present;
      if (has_residual && inputs[3].dims != outputs[0].dims) {
        throw Error(onednn::where(layer) + "residual dims " + inputs[3].dims.to_string() + " must equal the output's " +
                    outputs[0].dims.to_string());
      }
      onednn::ScopedOmpThreads threads(num_threads);
      ConvPlan plan;
      try {
        const ConvFormats formats{inputs[0].format, outputs[0].format,
                                  has_residual ? inputs[3].format : TensorFormat::kLinear};
        plan = build_plan(attrs_, g, formats, has_bias, has_residual, num_threads, winograd_);
      } catch (const dnnl::error& e) {
        throw Error(onednn::where(layer) + "oneDNN declined the primitive (" + e.what() +
                    "); the reference tactic handles this layer");
      }
      const HostTensor* w = inputs[1].value;
      if (w && w->type() == DataType::kFloat32 &&
          w->count() * 4 == static_cast<int64_t>(plan.user_weights.get_size())) {
        auto& eng = onednn::engine();
        memory user(plan.user_weights, eng, const_cast<void*>(w->data()));
        plan.cached_weights = memory(plan.weights, eng);
        dnnl::reorder(user, plan.cached_weights).execute(stream_, user, plan.cached_weights);
        stream_.wait();
      } else if (plan.weights_need_reorder) {
        onednn::WorkspaceLayout ws;
        ws.add(plan.workspace);
        plan.weights_off = ws.add(plan.weights.get_size());
        plan.workspace = ws.total();
      }
      it = plans_.emplace(key, std::move(plan)).first;
    }
    current_ = &it->second;
  }

  size_t workspace_size() const override { return current_ ? current_->workspace : 0; }

  void execute(const KernelContext& ctx) override {
    if (!current_) throw Error("Convolution onednn: execute() before prepare()");
    const ConvPlan& p = *current_;
    const char* what = attrs_.deconv ? "Deconvolution onednn" : "Convolution onednn";
    // The primitive was shaped for prepare()'s thread count (its scratchpad too): run with it.
    onednn::ScopedOmpThreads threads(p.num_threads);
    auto& eng = onednn::engine();
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    const bool has_bias = ctx.inputs.size() > 2 && ctx.inputs[2].data;
    const bool has_residual = !attrs_.deconv && ctx.inputs.size() > 3 && ctx.inputs[3].data;

    ConvPlan::Bound& b = p.bound;
    if (!b.made) {
      const auto unbound = [&](const memory::desc& d) { return memory(d, eng, DNNL_MEMORY_NONE); };
      b.user_src = unbound(p.user_src);
      b.src = p.reorder_src ? unbound(p.src) : b.user_src;
      b.user_dst = unbound(p.user_dst);
      b.dst = p.reorder_dst ? unbound(p.dst) : b.user_dst;
      b.user_residual = unbound(p.user_residual);
      if (!p.cached_weights) {
        b.user_weights = unbound(p.user_weights);
        b.weights = p.weights_need_reorder ? unbound(p.weights) : b.user_weights;
      }
      b.args = {{DNNL_ARG_SRC, b.src},
                {DNNL_ARG_WEIGHTS, p.cached_weights ? p.cached_weights : b.weights},
                {DNNL_ARG_DST, b.dst}};
      if (p.bias.get_size()) {
        b.bias = unbound(p.bias);
        b.args.emplace(DNNL_ARG_BIAS, b.bias);
      }
      if (p.scratch_bytes) {
        b.scratch = unbound(p.scratch);
        b.args.emplace(DNNL_ARG_SCRATCHPAD, b.scratch);
      }
      b.made = true;
    }
    b.user_src.set_data_handle(x.data);
    if (p.reorder_src) {
      b.src.set_data_handle(onednn::workspace_at(ctx, p.src_off, p.workspace, what));
      p.src_in.execute(stream_, b.user_src, b.src);
    }
    b.user_dst.set_data_handle(y.data);
    if (p.reorder_dst) b.dst.set_data_handle(onednn::workspace_at(ctx, p.dst_off, p.workspace, what));
    if (has_residual) {
      // The sum post-op accumulates into dst: seed it with the residual.
      void* r = ctx.inputs[3].data;
      if (!p.copy_residual) {
        b.user_residual.set_data_handle(r);
        p.dst_in.execute(stream_, b.user_residual, b.dst);
      } else if (r != b.dst.get_data_handle()) {
        std::memcpy(b.dst.get_data_handle(), r, p.dst.get_size());
      }
    }
    if (!p.cached_weights) {
      b.user_weights.set_data_handle(ctx.inputs.at(1).data);
      if (p.weights_need_reorder) {
        b.weights.set_data_handle(onednn::workspace_at(ctx, p.weights_off, p.workspace, what));
        p.weights_in.execute(stream_, b.user_weights, b.weights);
      }
    }
    if (p.bias.get_size()) {
      if (!has_bias) throw Error(std::string(what) + ": the bias prepared for is missing at execute()");
      b.bias.set_data_handle(ctx.inputs[2].data);
    }
    if (p.scratch_bytes) b.scratch.set_data_handle(onednn::workspace_at(ctx, p.scratch_off, p.workspace, what));
    p.conv.execute(stream_, b.args);
    if (p.reorder_dst) p.dst_out.execute(stream_, b.dst, b.user_dst);
    stream_.wait();
    if (attrs_.after.enabled) {
      float* out = y.as<float>();
      cpu::activate_simd(attrs_.after, out, out, y.count(), p.num_threads);
    }
  }

 private:
  ConvAttrs attrs_;
  bool winograd_ = false;
  dnnl::stream stream_;
  std::map<std::string, ConvPlan> plans_;
  const ConvPlan* current_ = nullptr;
};

// Cheap checks first, then (for static shapes) whether oneDNN builds the primitive at all.
bool supports_conv(const Layer& layer, const std::vector<TensorDesc>& inputs, bool deconv, bool winograd = false) {
  if (inputs.size() < 2 || !inputs[0].present || !inputs[1].present) return false;
  if (!onednn::all_float32(inputs)) return false;
  const ConvAttrs attrs(params_of<ConvParams>(layer));
  if (!onednn::activation_supported(attrs.post)) return false;
  if (!inputs[0].dims.is_dynamic() && inputs[0].dims.volume() == 0) return false;
  if (inputs[1].format != TensorFormat::kLinear) return false;
  if (inputs.size() > 2 && inputs[2].present &&
      (inputs[2].dims.rank() != 1 || inputs[2].format != TensorFormat::kLinear)) {
    return false;
  }
  const bool has_residual = inputs.size() > 3 && inputs[3].present;
  if (has_residual && deconv) return false;
  if (inputs.size() > (deconv ? 3u : 4u)) return false;
  if (winograd) {  // 3x3, stride 1, undilated, ungrouped, 2-D
    const ConvParams& p = attrs.params;
    if (deconv || p.group != 1 || inputs[1].dims.rank() != 4 || inputs[1].dims[2] != 3 || inputs[1].dims[3] != 3) {
      return false;
    }
    for (int64_t v : p.window.strides) {
      if (v != 1) return false;
    }
    for (int64_t v : p.window.dilations) {
      if (v != 1) return false;
    }
    // The CPU builder does not time kernels: Winograd is taken where it won on ResNet-50 (1
    // thread, AVX-512): from 14x14 images up; at 7x7 its transformed weights (16/9 the size)
    // and the reorders cost more than it saves (1.53 -> 1.91 ms for 512 channels).
    const Dims& x = inputs[0].dims;
    if (x.rank() != 4 || x[2] < 0 || x[3] < 0 || x[2] * x[3] < 14 * 14) return false;
    // Fewer than 32 input channels: the transforms cost more than the products save (SqueezeNet's
    // 16-channel fire modules at 55x55: 2 threads, batch 8, 17.2-17.7 ms without, 18.9-19.0 with).
    if (x[1] < 32) return false;
  }
  if (inputs[0].dims.is_dynamic() || inputs[1].dims.is_dynamic()) return true;  // decided in prepare()
  ConvGeometry g;
  std::string why;
  if (!make_geometry(attrs, inputs[0].dims, inputs[1].dims, &g, &why)) return false;
  if (has_residual && !inputs[3].dims.is_dynamic() && onednn::to_dnnl(inputs[3].dims) != g.dst) return false;
  try {
    const bool has_bias = inputs.size() > 2 && inputs[2].present;
    // y's format is not known here; the layouts only decide reorders, not whether oneDNN can run.
    const ConvFormats formats{inputs[0].format, inputs[0].format,
                              has_residual ? inputs[3].format : TensorFormat::kLinear};
    build_plan(attrs, g, formats, has_bias, has_residual, 1, winograd);
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

}  // namespace

// The sum post-op accumulates into the output seeded with the residual: where the planner gives the
// residual's buffer to the output (in_place_input), nothing is copied (execute skips the seeding copy).
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, onednn::kTactic, onednn::kPriority,
    [](const Layer& layer, const std::vector<TensorDesc>& inputs) { return supports_conv(layer, inputs, false); },
    [](const Layer& layer) { return std::make_unique<ConvOneDnn>(params_of<ConvParams>(layer)); }, 0,
    kConvResidualInput});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerConvolution, "onednn_winograd", onednn::kPriority + 10,
    [](const Layer& layer, const std::vector<TensorDesc>& inputs) { return supports_conv(layer, inputs, false, true); },
    [](const Layer& layer) { return std::make_unique<ConvOneDnn>(params_of<ConvParams>(layer), true); }, 0,
    kConvResidualInput});

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerDeconvolution, onednn::kTactic, onednn::kPriority,
    [](const Layer& layer, const std::vector<TensorDesc>& inputs) { return supports_conv(layer, inputs, true); },
    [](const Layer& layer) { return std::make_unique<ConvOneDnn>(params_of<ConvParams>(layer)); }});

}  // namespace kiln
