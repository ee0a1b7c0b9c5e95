// cuDNN graph-API tactics of Convolution ("cudnn_graph", "cudnn_graph_1", "cudnn_graph_2") through
// the header-only cudnn-frontend (compiled only when CMake finds it: KILN_CUDNN_FRONTEND_INCLUDE).
// The legacy API (conv_cudnn.cpp) picks among cuDNN's old algorithm families and fuses only bias +
// ReLU; the graph API reaches the newer engines (those PyTorch uses through the same frontend) and
// fuses the layer's bias, residual and most activations into the convolution.
//
// Graph: x, w -> conv_fprop -> (+ b [1,M,1,1]) -> (+ residual) -> (activation) -> y; compute and
// intermediates in float, io in the layer's type. Engine configs: cuDNN's heuristics, modes A then
// FALLBACK, minus engines that down-convert inputs or reduce in reduced precision and, for float32,
// minus tensor-core (TF32) engines, so that float32 stays float32 as in the legacy tactics.
// "cudnn_graph" runs the first config that builds, "_1" and "_2" the next distinct ones, for the
// builder's timing. When no engine takes the fused graph, the tactic falls back to a convolution-only graph and
// kiln's epilogue kernel (epilogue_cuda.h); activations without an exact cuDNN pointwise mode (and in
// float32 all but the ReLU family, whose cuDNN forms may use approximate transcendentals) always run
// in that epilogue. When no plan builds, prepare() throws a kiln::Error naming
// CUDNN_STATUS_NOT_SUPPORTED (the builder skips the tactic; the op tests count it as declined).
//
// Graphs and their plans are cached per (device, geometry, types, formats, fusion), shared by equal
// layers, the three tactics and all threads (an entry's mutex serializes building and the host side
// of execution), and never freed (plans own runtime-compiled kernels that must not be unloaded after
// the CUDA runtime's teardown at exit). They are built with one long-lived cuDNN handle per device
// and run with that same handle, its stream set to the kernel's stream under a lock: a plan's
// kernels go to the stream of the handle it was built with (running it with another handle left
// them on the build handle's legacy default stream, racing kiln's non-blocking streams, and
// outside CUDA-graph captures). Formats: kLinear, and kChannelsLast with w converted once to the KRSC layout
// (as in conv_cudnn.cpp). 1-D runs as 2-D with H = 1, 3-D with 5-D tensors; groups are w's channel
// extent C/group; asymmetric pads are pre/post paddings. cuDNN assumes 16-byte aligned tensors:
// execute() runs kiln's direct kernel instead when a pointer is not (user-bound buffers, rarely).
#include <cudnn_frontend.h>

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/backends/cuda/conv_cuda.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/epilogue_cuda.h"

namespace kiln::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Engine configs needing more workspace are skipped (as the legacy heuristic tactic does).
constexpr int64_t kWorkspaceLimit = int64_t{1} << 30;
// Distinct graphs kept; the oldest are dropped beyond this (kernels keep theirs alive).
constexpr size_t kCacheCapacity = 512;
// cuDNN engines assume this pointer alignment for every tensor (the frontend's default).
constexpr uintptr_t kAlignment = 16;
// Frontend messages can list every engine config's failure; keep errors readable.
constexpr size_t kMessageLimit = 800;

std::string clipped(std::string s) {
  if (s.size() > kMessageLimit) s = s.substr(0, kMessageLimit) + " ...";
  return s;
}

// A frontend status that is not OK, as an exception carrying the step's name.
struct GraphFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(fe::error_t status, const char* step) {
  if (status.is_bad()) throw GraphFailure(std::string(step) + ": " + clipped(status.get_message()));
}

// ---- activations cuDNN's pointwise modes express exactly as docs/layers.md defines them -------

struct GraphActivation {
  ActivationType kind;
  fe::PointwiseMode_t mode;
  bool float32;  // also fused in float32 graphs (no transcendental function involved)
  void (*configure)(fe::graph::Pointwise_attributes&, const PostOp&);
};

void no_parameters(fe::graph::Pointwise_attributes&, const PostOp&) {}

// cuDNN's RELU_FWD: x < lower ? lower + slope * (x - lower) : min(x, upper) (defaults 0, 0, +max).
const GraphActivation kGraphActivations[] = {
    {ActivationType::kRelu, fe::PointwiseMode_t::RELU_FWD, true, no_parameters},
    {ActivationType::kLeakyRelu, fe::PointwiseMode_t::RELU_FWD, true,
     [](fe::graph::Pointwise_attributes& a, const PostOp& p) { a.set_relu_lower_clip_slope(p.alpha); }},
    {ActivationType::kClip, fe::PointwiseMode_t::RELU_FWD, true,
     [](fe::graph::Pointwise_attributes& a, const PostOp& p) {
       a.set_relu_lower_clip(p.alpha);
       a.set_relu_upper_clip(p.beta);
     }},
    {ActivationType::kSigmoid, fe::PointwiseMode_t::SIGMOID_FWD, false, no_parameters},
    {ActivationType::kTanh, fe::PointwiseMode_t::TANH_FWD, false, no_parameters},
    {ActivationType::kElu, fe::PointwiseMode_t::ELU_FWD, false,
     [](fe::graph::Pointwise_attributes& a, const PostOp& p) { a.set_elu_alpha(p.alpha); }},
    {ActivationType::kSoftplus, fe::PointwiseMode_t::SOFTPLUS_FWD, false,
     [](fe::graph::Pointwise_attributes& a, const PostOp&) { a.set_softplus_beta(1.0f); }},
    {ActivationType::kSilu, fe::PointwiseMode_t::SWISH_FWD, false,
     [](fe::graph::Pointwise_attributes& a, const PostOp&) { a.set_swish_beta(1.0f); }},
    {ActivationType::kSwish, fe::PointwiseMode_t::SWISH_FWD, false,
     [](fe::graph::Pointwise_attributes& a, const PostOp& p) { a.set_swish_beta(p.alpha); }},
    {ActivationType::kGeluErf, fe::PointwiseMode_t::GELU_FWD, false, no_parameters},
    {ActivationType::kGeluTanh, fe::PointwiseMode_t::GELU_APPROX_TANH_FWD, false, no_parameters},
};

// The pointwise node for the layer's activation, or null when the epilogue must apply it.
const GraphActivation* graph_activation(const PostOp& post, DataType type) {
  if (!post.enabled) return nullptr;
  if (post.kind == ActivationType::kClip && !(post.alpha <= post.beta)) return nullptr;  // always beta: epilogue
  for (const GraphActivation& a : kGraphActivations) {
    if (a.kind == post.kind) return type == DataType::kFloat32 && !a.float32 ? nullptr : &a;
  }
  return nullptr;
}

// ---- geometry -------------------------------------------------------------------------------

int tensor_rank(const ConvShape& s) { return s.spatial_rank == 3 ? 5 : 4; }

// [a, b, spatial...] in the graph's rank (the right-aligned slots of Spatial3).
std::vector<int64_t> tensor_dims(int rank, int64_t a, int64_t b, const Spatial3& sp) {
  std::vector<int64_t> d{a, b};
  for (int i = 5 - rank; i < 3; ++i) d.push_back(sp[static_cast<size_t>(i)]);
  return d;
}

std::vector<int64_t> spatial(int rank, const Spatial3& sp) {
  std::vector<int64_t> d;
  for (int i = 5 - rank; i < 3; ++i) d.push_back(sp[static_cast<size_t>(i)]);
  return d;
}

// Packed strides of [N, C, spatial...]: row-major, or channels innermost (NHWC; for w, KRSC).
std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims, bool channels_last) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> st(dims.size());
  int64_t acc = 1;
  if (channels_last) {
    st[1] = 1;
    acc = dims[1];
    for (int i = rank - 1; i >= 2; --i) {
      st[static_cast<size_t>(i)] = acc;
      acc *= dims[static_cast<size_t>(i)];
    }
    st[0] = acc;
  } else {
    for (int i = rank - 1; i >= 0; --i) {
      st[static_cast<size_t>(i)] = acc;
      acc *= dims[static_cast<size_t>(i)];
    }
  }
  return st;
}

// ---- the graph cache ------------------------------------------------------------------------

// What one graph computes.
struct GraphSpec {
  ConvShape s;
  bool bias = false, residual = false;
  const GraphActivation* act = nullptr;
  PostOp post;  // the activation's parameters when act is set
};

std::string spec_key(const GraphSpec& g, int device) {
  const ConvShape& s = g.s;
  std::ostringstream k;
  k << device << '|' << static_cast<int>(s.type) << '|' << static_cast<int>(s.format) << '|'
    << s.spatial_rank << '|' << s.batch << ',' << s.in_channels << ',' << s.out_channels << ',' << s.group;
  for (const Spatial3* v : {&s.in, &s.out, &s.kernel, &s.stride, &s.pad_begin, &s.pad_end, &s.dilation}) {
    k << '|' << (*v)[0] << ',' << (*v)[1] << ',' << (*v)[2];
  }
  k << '|' << g.bias << g.residual;
  if (g.act) {
    k << '|' << static_cast<int>(g.act->kind) << ',' << std::setprecision(9) << g.post.alpha << ',' << g.post.beta;
  }
  return k.str();
}

// One graph with its engine configs; plans are built on demand, in heuristic order.
struct GraphEntry {
  struct Plan {
    int64_t index = -1;      // engine config / plan index in the graph
    int64_t workspace = 0;   // bytes
    std::string name;        // cuDNN's engine tag (modes A and FALLBACK may list one engine twice)
  };

  std::mutex mutex;  // guards everything below once the entry is published
  std::string error;  // non-empty: the graph could not be made (then nothing else is set)
  cudnnHandle_t handle = nullptr;  // the device's build handle
  std::shared_ptr<fe::graph::Graph> graph;
  TensorAttr x, w, b, r, y;
  int64_t configs = 0;
  int64_t next = 0;          // next config to try building
  std::vector<Plan> built;   // configs that built, in heuristic order
  std::string failures;      // why the others did not

  // The rank-th distinct plan that builds (0 = the heuristic's choice), or nullopt with *why set.
  std::optional<Plan> plan(int rank, std::string* why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error.empty()) {
      *why = error;
      return std::nullopt;
    }
    while (static_cast<int>(built.size()) <= rank && next < configs) {
      const int64_t i = next++;
      try {
        check(graph->build_plan_at_index(handle, i), "build_plan_at_index");
        Plan p;
        p.index = i;
        if (graph->get_plan_name_at_index(i, p.name).is_bad()) p.name = "#" + std::to_string(i);
        bool duplicate = false;
        for (const Plan& b : built) duplicate = duplicate || b.name == p.name;
        if (duplicate) continue;
        check(graph->get_workspace_size_plan_at_index(i, p.workspace), "get_workspace_size_plan_at_index");
        built.push_back(p);
      } catch (const std::exception& e) {
        if (failures.size() < kMessageLimit) {
          failures += std::string(failures.empty() ? "" : "; ") + "config " + std::to_string(i) + ": " + e.what();
        }
      }
    }
    if (rank < static_cast<int>(built.size())) return built[static_cast<size_t>(rank)];
    *why = "the heuristics offer " + std::to_string(configs) + " engine configs, " + std::to_string(built.size()) +
           " of them build" + (failures.empty() ? std::string() : " (" + clipped(failures) + ")");
    return std::nullopt;
  }
};

// Makes the graph of `g` (validation, cuDNN operation graph, heuristics query, filters). Throws
// GraphFailure or the frontend's exceptions.
void make_graph(const GraphSpec& g, cudnnHandle_t handle, GraphEntry& e) {
  const ConvShape& s = g.s;
  const int rank = tensor_rank(s);
  const bool cl = s.format == TensorFormat::kChannelsLast;
  const fe::DataType_t io = s.type == DataType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::FLOAT;
  const fe::DataType_t f32 = fe::DataType_t::FLOAT;
  const std::vector<int64_t> x_dims = tensor_dims(rank, s.batch, s.in_channels, s.in);
  const std::vector<int64_t> w_dims = tensor_dims(rank, s.out_channels, s.in_channels / s.group, s.kernel);
  const std::vector<int64_t> y_dims = tensor_dims(rank, s.batch, s.out_channels, s.out);
  const std::vector<int64_t> y_strides = packed_strides(y_dims, cl);

  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(io).set_intermediate_data_type(f32).set_compute_data_type(f32);
  const auto io_tensor = [&](const char* name, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
    fe::graph::Tensor_attributes t;
    t.set_name(name).set_dim(dims).set_stride(strides).set_data_type(io);
    return graph->tensor(t);
  };
  e.x = io_tensor("x", x_dims, packed_strides(x_dims, cl));
  e.w = io_tensor("w", w_dims, packed_strides(w_dims, cl));
  auto conv = fe::graph::Conv_fprop_attributes()
                  .set_pre_padding(spatial(rank, s.pad_begin))
                  .set_post_padding(spatial(rank, s.pad_end))
                  .set_stride(spatial(rank, s.stride))
                  .set_dilation(spatial(rank, s.dilation));
  conv.set_name("conv").set_compute_data_type(f32);
  TensorAttr y = graph->conv_fprop(e.x, e.w, conv);
  // Every intermediate gets y's shape and layout (the frontend would default to NHWC strides).
  y->set_dim(y_dims).set_stride(y_strides);
  const auto add = [&](const TensorAttr& a, const TensorAttr& b, const char* name) {
    fe::graph::Pointwise_attributes p;
    p.set_mode(fe::PointwiseMode_t::ADD);
    p.set_name(name).set_compute_data_type(f32);
    TensorAttr out = graph->pointwise(a, b, p);
    out->set_dim(y_dims).set_stride(y_strides);
    return out;
  };
  if (g.bias) {
    std::vector<int64_t> b_dims(static_cast<size_t>(rank), 1);
    b_dims[1] = s.out_channels;
    e.b = io_tensor("b", b_dims, packed_strides(b_dims, cl));
    y = add(y, e.b, "bias");
  }
  if (g.residual) {
    e.r = io_tensor("residual", y_dims, y_strides);
    y = add(y, e.r, "add_residual");
  }
  if (g.act) {
    fe::graph::Pointwise_attributes p;
    p.set_mode(g.act->mode);
    p.set_name("activation").set_compute_data_type(f32);
    g.act->configure(p, g.post);
    y = graph->pointwise(y, p);
    y->set_dim(y_dims).set_stride(y_strides);
  }
  y->set_output(true).set_data_type(io);
  e.y = y;

  check(graph->validate(), "validate");
  check(graph->build_operation_graph(handle), "build_operation_graph");
  check(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
  std::vector<fe::NumericalNote_t> barred{fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                          fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION};
  if (s.type == DataType::kFloat32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);  // no TF32
  graph->deselect_numeric_notes(barred);
  graph->deselect_workspace_greater_than(kWorkspaceLimit);
  check(graph->check_support(handle), "check_support");
  e.configs = graph->get_execution_plan_count();
  e.graph = std::move(graph);
}

class GraphCache {
 public:
  // The entry of `g` on the current device, made on first use (a failed graph is cached with its
  // error, so that the other tactics do not retry it).
  std::shared_ptr<GraphEntry> get(const GraphSpec& g) {
    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    const std::string key = spec_key(g, device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    auto e = std::make_shared<GraphEntry>();
    try {
      e->handle = build_handle(device);
      make_graph(g, e->handle, *e);
    } catch (const std::exception& ex) {
      e->error = ex.what();
      e->graph.reset();
    }
    if (entries_.size() >= kCacheCapacity) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
    entries_.emplace(key, e);
    order_.push_back(key);
    return e;
  }

 private:
  // The handle graphs of `device` are built with (the current device); called under mutex_.
  cudnnHandle_t build_handle(int device) {
    cudnnHandle_t& h = handles_[device];
    if (!h) KILN_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }

  std::mutex mutex_;
  std::map<int, cudnnHandle_t> handles_;  // per device, never destroyed (as the cache)
  std::unordered_map<std::string, std::shared_ptr<GraphEntry>> entries_;
  std::deque<std::string> order_;
};

GraphCache& graph_cache() {
  static GraphCache* cache = new GraphCache;  // intentionally never destroyed (see the file comment)
  return *cache;
}

// ---- the kernel -----------------------------------------------------------------------------

// KRSC copy of the constant weights for channels-last graphs: converted once in prepare() from the
// weights' host value, else on the device at every execute() (non-constant weights).
class KrscFilter {
 public:
  void prepare(const ConvShape& s, const TensorDesc& w) {
    k0_ = w.dims[0];
    k1_ = w.dims[1];
    spatial_ = s.kernel_volume();
    es_ = data_type_size(s.type);
    const size_t bytes = static_cast<size_t>(k0_ * k1_ * spatial_) * es_;
    const bool host_known = w.value && !w.value->empty() && w.value->type() == w.type && w.value->dims() == w.dims;
    if (ready_ && host_known && source_ == w.value && buffer_.size() >= bytes) return;
    buffer_.reserve(bytes);
    ready_ = false;
    source_ = nullptr;
    if (host_known) {
      std::vector<unsigned char> host(bytes);
      weights_to_channels_last_host(es_, k0_, k1_, spatial_, w.value->data(), host.data());
      upload_now(buffer_.data(), host.data(), bytes);
      ready_ = true;
      source_ = w.value;
    }
  }
  const void* get(const void* weights, cudaStream_t stream) {
    if (!ready_) launch_weights_to_channels_last(es_, k0_, k1_, spatial_, weights, buffer_.data(), stream);
    return buffer_.data();
  }

 private:
  DeviceBuffer buffer_;
  bool ready_ = false;
  const HostTensor* source_ = nullptr;
  int64_t k0_ = 0, k1_ = 0, spatial_ = 0;
  size_t es_ = 0;
};

std::mutex& build_handle_stream_mutex() {
  static std::mutex m;
  return m;
}

bool aligned(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }

class CudnnGraphConvolution : public Kernel {
 public:
  CudnnGraphConvolution(const Layer& layer, std::string tactic, int rank)
      : tactic_(std::move(tactic)), rank_(rank), post_(conv_post_op(layer)) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    what_ = "Convolution layer '" + layer.name() + "' (CUDA tactic " + tactic_ + ")";
    s_ = make_conv_shape(layer, inputs, outputs, false);
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    has_residual_ = inputs.size() > 3 && inputs[3].present;
    entry_.reset();
    workspace_ = 0;
    empty_ = s_.batch == 0 || s_.out_channels == 0 || s_.in_channels == 0;
    if (empty_) return;

    // The fused graph first; then the convolution alone with kiln's epilogue.
    GraphSpec fused;
    fused.s = s_;
    fused.bias = has_bias_;
    fused.residual = has_residual_;
    fused.act = graph_activation(post_, s_.type);
    fused.post = post_;
    GraphSpec plain;
    plain.s = s_;
    std::vector<GraphSpec> attempts{fused};
    if (fused.bias || fused.residual || fused.act) attempts.push_back(plain);

    std::string why;
    for (size_t a = 0; a < attempts.size(); ++a) {
      const GraphSpec& g = attempts[a];
      std::shared_ptr<GraphEntry> e = graph_cache().get(g);
      std::string reason;
      const std::optional<GraphEntry::Plan> p = e->plan(rank_, &reason);
      if (!p) {
        const bool is_fused = a == 0 && attempts.size() > 1;
        why += std::string(why.empty() ? "" : "; ") + (is_fused ? "fused graph: " : "convolution graph: ") + reason;
        continue;
      }
      entry_ = std::move(e);
      plan_index_ = p->index;
      workspace_ = workspace_granule(static_cast<size_t>(p->workspace));
      graph_bias_ = g.bias;
      graph_residual_ = g.residual;
      epilogue_post_ = g.act ? PostOp{} : post_;
      break;
    }
    if (!entry_) {
      throw Error(what_ + ": cuDNN's graph API has no usable engine for this convolution " +
                  "(CUDNN_STATUS_NOT_SUPPORTED): " + why);
    }
    pack_.clear();
    pack_[entry_->x->get_uid()] = nullptr;
    pack_[entry_->w->get_uid()] = nullptr;
    pack_[entry_->y->get_uid()] = nullptr;
    if (graph_bias_) pack_[entry_->b->get_uid()] = nullptr;
    if (graph_residual_) pack_[entry_->r->get_uid()] = nullptr;
    if (s_.format == TensorFormat::kChannelsLast) filter_.prepare(s_, inputs[1]);
  }

  size_t workspace_size() const override { return workspace_; }

  void execute(const KernelContext& ctx) override {
    if (empty_) return;
    const cudaStream_t stream = stream_of(ctx);
    const void* x = ctx.inputs[0].data;
    const void* weights = ctx.inputs[1].data;
    const void* bias = has_bias_ ? ctx.inputs[2].data : nullptr;
    const void* residual = has_residual_ ? ctx.inputs[3].data : nullptr;
    void* y = ctx.outputs[0].data;
    if (!aligned(x) || !aligned(weights) || !aligned(bias) || !aligned(residual) || !aligned(y) ||
        !aligned(ctx.workspace)) {
      launch_conv_direct(s_, x, weights, bias, residual, y, post_, stream);  // rare: see the file comment
      return;
    }
    const void* w = s_.format == TensorFormat::kChannelsLast ? filter_.get(weights, stream) : weights;
    {
      // A plan launches on the stream of the handle it was built with (the device's build handle),
      // whatever handle execute gets: that handle's stream is set to ours, under one lock for all
      // graph executions (the handle is shared by every entry of the device).
      std::lock_guard<std::mutex> handle_lock(build_handle_stream_mutex());
      std::lock_guard<std::mutex> lock(entry_->mutex);
      const cudnnHandle_t handle = entry_->handle;
      KILN_CUDNN_CHECK(cudnnSetStream(handle, stream));
      pack_[entry_->x->get_uid()] = const_cast<void*>(x);
      pack_[entry_->w->get_uid()] = const_cast<void*>(w);
      pack_[entry_->y->get_uid()] = y;
      if (graph_bias_) pack_[entry_->b->get_uid()] = const_cast<void*>(bias);
      if (graph_residual_) pack_[entry_->r->get_uid()] = const_cast<void*>(residual);
      std::string failure;
      try {
        fe::error_t st = entry_->graph->execute_plan_at_index(handle, pack_, ctx.workspace, plan_index_);
        if (st.is_bad()) failure = clipped(st.get_message());
      } catch (const std::exception& e) {
        failure = e.what();
      }
      if (!failure.empty()) {
        throw Error(what_ + ": cuDNN graph execution (plan " + std::to_string(plan_index_) + ") failed: " + failure);
      }
    }
    EpilogueArgs e;
    e.type = s_.type;
    e.format = s_.format;
    e.batch = s_.batch;
    e.channels = s_.out_channels;
    e.out = s_.out;
    e.bias = graph_bias_ ? nullptr : bias;
    e.residual = graph_residual_ ? nullptr : residual;
    e.y = y;
    e.post = epilogue_post_;
    if (!epilogue_is_identity(e)) launch_epilogue(e, stream);
  }

 private:
  std::string tactic_;
  int rank_;
  PostOp post_;
  std::string what_;
  ConvShape s_;
  bool has_bias_ = false, has_residual_ = false, empty_ = false;
  std::shared_ptr<GraphEntry> entry_;
  int64_t plan_index_ = -1;
  size_t workspace_ = 0;
  bool graph_bias_ = false, graph_residual_ = false;
  PostOp epilogue_post_;
  std::unordered_map<int64_t, void*> pack_;  // uid -> pointer; keys fixed in prepare (no allocation in execute)
  KrscFilter filter_;
};

// ---- registration ---------------------------------------------------------------------------

struct GraphTactic {
  const char* name;
  int priority;  // below the legacy "cudnn" (100): an untimed build keeps the proven path
  int rank;      // which buildable engine config of the heuristic's list
};

const GraphTactic kGraphTactics[] = {
    {"cudnn_graph", 95, 0},
    {"cudnn_graph_1", 42, 1},
    {"cudnn_graph_2", 41, 2},
};

// Opt-in (KILN_CUDNN_GRAPH=1) until an accuracy problem is found: on the H200, fp16 ResNet-50
// engines whose convolutions chose these tactics gave outputs off by 10-28% of the output range at
// batch 8 and 32 (plain runs; a CUDA-graph replay at batch 8 was right), while every tactic
// matches the CPU reference in tests/cuda_conv_graph_test.cpp. See docs/status.md.
bool graph_tactics_enabled() {
  const char* v = std::getenv("KILN_CUDNN_GRAPH");
  return v && std::string(v) == "1";
}

bool supports_graph_conv(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return graph_tactics_enabled() && conv_operands_supported(layer, inputs, true);
}

struct Registrar {
  Registrar() {
    for (const GraphTactic& t : kGraphTactics) {
      const std::string name = t.name;
      const int rank = t.rank;
      KernelRegistry::instance().add(KernelEntry{
          DeviceType::kCUDA, kLayerConvolution, name, t.priority, supports_graph_conv,
          [name, rank](const Layer& layer) { return std::make_unique<CudnnGraphConvolution>(layer, name, rank); }});
    }
  }
} registrar;

}  // namespace
}  // namespace kiln::cuda
