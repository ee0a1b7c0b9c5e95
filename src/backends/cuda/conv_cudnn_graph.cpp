// cuDNN graph-API tactics of Convolution ("cudnn_graph", "cudnn_graph_1", "cudnn_graph_2") through
// the header-only cudnn-frontend (compiled only when CMake finds it: KILN_CUDNN_FRONTEND_INCLUDE).
// The legacy API (conv_cudnn.cpp) picks among cuDNN's old algorithm families, fuses only bias +
// ReLU and costs much host time per call; the graph API reaches the newer engines (those PyTorch
// uses through the same frontend), fuses the layer's bias, residual and most activations into the
// convolution, and its execution is one cudnnBackendExecute of a plan made in prepare().
//
// Graph: x, w -> conv_fprop -> (+ b [1,M,1,1]) -> (+ residual) -> (activation) -> y; compute and
// intermediates in float, io in the layer's type. Engine configs: cuDNN's heuristics, modes A then
// FALLBACK, minus (deselected by the frontend and checked again on every built plan's own notes,
// whatever the frontend version does) engines that down-convert inputs, reduce in reduced
// precision (fp16 accumulation), are non-deterministic (atomics: kiln's CUDA-graph replays must
// give the plain run's bytes) or need int8x32 filter/bias reordering kiln does not do, and, for
// float32, tensor-core (TF32) engines, so that float32 stays float32 as in the legacy tactics.
// KILN_CUDNN_GRAPH_DENY=substring[,substring...] also leaves out every engine config whose name or
// notes (e.g. "eng28", "CUBLASLT_DEPENDENCY") contain one of the substrings, so that one bad engine
// can be excluded on a GPU without a rebuild. "cudnn_graph" runs the first config that builds,
// "_1" and "_2" the next distinct ones, for the builder's timing; "cudnn_graph_precompiled" (level
// 0's choice, see kGraphTactics) the first among the engines without runtime compilation. When no engine takes the
// fused graph, the tactic falls back to a convolution-only graph and kiln's epilogue kernel (epilogue_cuda.h);
// activations without an exact cuDNN pointwise mode (and in float32 all but the ReLU family, whose cuDNN forms may use
// approximate transcendentals) always run in that epilogue. When no plan builds, prepare() throws a kiln::Error naming
// CUDNN_STATUS_NOT_SUPPORTED (the builder skips the tactic; the op tests count it as declined). Every choice is logged
// at kVerbose in prepare(): layer, engine config, notes, fusion, workspace, execution path.
//
// Handles, streams, threads: a plan is built and executed with the same cuDNN handle, and only
// ever with it: a plan launches on the stream of the handle it was built with (running it with
// another handle sent its kernels to the build handle's stream: the legacy default stream, racing
// kiln's non-blocking streams, outside CUDA-graph captures). Each thread takes its own handle per
// device from a pool (returned at thread exit, never destroyed, so that plans built with it stay
// valid) and builds its graphs with it. A kernel runs with the handle it was prepared with, from
// whichever thread calls it (a context warmed up in one thread and served from another, as Triton
// does: its instances are initialized on a loading thread and executed on their own): the
// handle's mutex is held while its stream is set to the kernel's stream and the plan launched
// (and while plans are built with it), so a plan never runs on a stream other than the one
// execute() was given, and a thread running a kernel for the first time never builds a plan (which
// a CUDA-graph capture forbids). The mutex is uncontended unless two threads launch kernels
// prepared on one thread at the same time. Graphs are cached per (handle,
// geometry, types, formats, fusion, deny list), shared by equal layers of that thread (the pattern
// PyTorch uses, a thread-local plan cache) and by the three tactics; KILN_CUDNN_GRAPH_PRIVATE=1
// (or kPlanSharingByDefault) gives every kernel object its own graphs instead, so that no two
// executions of one plan are ever in flight together (two contexts of one thread on two streams
// could otherwise run one shared plan at once; whether cuDNN allows that for every engine is not
// documented), and KILN_CUDNN_GRAPH_PRIVATE=handle also its own cuDNN handle (a diagnostic that
// isolates whatever state a handle keeps; such handles are never freed). A kernel
// object used from another thread than the one that prepared it (a context moved between
// threads) resolves its plan for that thread's handle on first use there. Plan building runs with
// the handle on the thread's private prepare stream, which is waited for.
//
// Host cost of execute(): pointer alignment checks, the handle lookup (a thread-local compare),
// cudnnSetStream and cudnnBackendExecute with a variant pack made once per set of pointers (a few
// are cached per kernel object: rotating I/O buffers) - no allocation, map or string in the steady
// state. With a frontend older than 1.32 (whose internals this path reads) execution goes through
// the frontend's execute with a pre-built pointer map instead.
//
// Formats: kLinear, and kChannelsLast with w in the KRSC layout (the engine-wide prepared copy of
// conv_cuda.h for constant weights). 1-D runs as 2-D with H = 1, 3-D with 5-D tensors; groups are
// w's channel extent C/group; asymmetric pads are pre/post paddings. cuDNN assumes 16-byte
// aligned tensors: execute() runs kiln's direct kernel instead when a pointer is not (user-bound
// buffers, rarely).
//
// Compiled plans: a plan resolved in prepare() is first looked for as a compiled plan (cuDNN's
// JSON serialization of a built plan, with its runtime-compiled kernels): one the engine file
// carries (BuilderConfig::embed_compiled_plans), else one another thread's handle built; loading
// one builds and compiles nothing. See "compiled plans" below.
//
// Default: opt-in. kGraphTacticsByDefault below decides whether the tactics are offered when
// KILN_CUDNN_GRAPH is unset (KILN_CUDNN_GRAPH=1 / =0 force them on / off); see docs/cuda-backend.md.
#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

#include "kiln/logger.h"
#include "src/backends/cuda/conv_cuda.h"
#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/epilogue_cuda.h"
#include "src/backends/prepared_state.h"

// Direct execution (cudnnBackendExecute with cached variant packs) reads frontend internals that
// exist from 1.32 on; older frontends use Graph::execute_plan_at_index.
#if defined(CUDNN_FRONTEND_VERSION) && CUDNN_FRONTEND_VERSION >= 13200 && !defined(KILN_CUDNN_GRAPH_FRONTEND_EXECUTE)
#define KILN_CUDNN_GRAPH_DIRECT 1
#else
#define KILN_CUDNN_GRAPH_DIRECT 0
#endif

namespace kiln::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Whether the graph-API tactics are offered when KILN_CUDNN_GRAPH is unset. The one switch to flip
// once the GPU suite (tests/cuda_conv_tactics_test.cpp, CudaConvGraph.*) passes.
constexpr bool kGraphTacticsByDefault = true;
// Who shares a graph and its plans.
enum class PlanSharing {
  kPerThread,        // the equal layers of a thread (one handle), as PyTorch's thread-local plan cache
  kPerKernel,        // nobody: each kernel object builds its own (with its thread's handle)
  kPerKernelHandle,  // nobody, and each kernel object has its own cuDNN handle too (diagnostic)
};
// The sharing when KILN_CUDNN_GRAPH_PRIVATE is unset ("0": kPerThread, "1": kPerKernel, "handle":
// kPerKernelHandle). Private plans cost more plan builds (per layer, shape, context and timed
// tactic) but never let two executions of one plan be in flight at once (two contexts of one
// thread on two streams); set kPerKernel if the GPU suite passes only with
// KILN_CUDNN_GRAPH_PRIVATE=1.
constexpr PlanSharing kPlanSharingByDefault = PlanSharing::kPerThread;

// Engine configs needing more workspace are skipped (as the legacy heuristic tactic does).
constexpr int64_t kWorkspaceLimit = int64_t{1} << 30;
// Distinct graphs kept; the oldest are dropped beyond this (kernels keep theirs alive).
constexpr size_t kCacheCapacity = 512;
// cuDNN engines assume this pointer alignment for every tensor (the frontend's default).
constexpr uintptr_t kAlignment = 16;
// Frontend messages can list every engine config's failure; keep errors readable.
constexpr size_t kMessageLimit = 800;
// The graph's tensors' ids (the variant pack's keys), fixed so that execute() needs no lookup.
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidB = 4, kUidR = 5;
// Variant packs cached per kernel object and handle: one per set of pointers (rotating I/O sets).
constexpr size_t kPackSlots = 4;

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

// ---- per-thread handles ---------------------------------------------------------------------

// A cuDNN handle held by one thread at a time. Never destroyed: the plans built with it live in
// caches and kernels beyond the thread that built them.
struct GraphHandle {
  cudnnHandle_t handle = nullptr;
  int device = 0;
  uint64_t id = 0;  // unique, for cache keys
  std::mutex use;   // held while the handle's stream is set and used (launching, building)
};

class HandlePool {
 public:
  // A handle of `device` (the current device) for one kernel object alone, never reused.
  GraphHandle* make_private(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return create(device);
  }
  // A free handle of `device` (the current device), or a new one.
  GraphHandle* take(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i]->device != device) continue;
      GraphHandle* h = free_[i];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return h;
    }
    return create(device);
  }
  void give_back(GraphHandle* h) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(h);
  }

 private:
  // Called with mutex_ held (which also serializes cudnnCreate, as cuDNN recommends).
  GraphHandle* create(int device) {
    auto h = std::make_unique<GraphHandle>();
    KILN_CUDNN_CHECK(cudnnCreate(&h->handle));
    h->device = device;
    h->id = next_id_++;
    all_.push_back(std::move(h));
    return all_.back().get();
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<GraphHandle>> all_;
  std::vector<GraphHandle*> free_;
  uint64_t next_id_ = 1;
};

HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool;  // intentionally never destroyed (see GraphHandle)
  return *pool;
}

// The calling thread's handle for `device` (taken from the pool on first use, returned when the
// thread exits). The fast path is a scan of one or two thread-local entries.
GraphHandle* thread_graph_handle(int device) {
  thread_local struct Held {
    std::vector<GraphHandle*> handles;
    ~Held() {
      for (GraphHandle* h : handles) handle_pool().give_back(h);
    }
  } held;
  for (GraphHandle* h : held.handles) {
    if (h->device == device) return h;
  }
  GraphHandle* h = handle_pool().take(device);
  held.handles.push_back(h);
  return h;
}

// ---- settings read at every prepare() (so that tests and GPU runs can change them) -----------

struct Settings {
  std::string deny_text;                        // KILN_CUDNN_GRAPH_DENY as given
  std::vector<std::string> deny;                // its non-empty comma-separated items
  PlanSharing sharing = kPlanSharingByDefault;  // KILN_CUDNN_GRAPH_PRIVATE
};

Settings read_settings() {
  Settings s;
  if (const char* v = std::getenv("KILN_CUDNN_GRAPH_DENY")) {
    s.deny_text = v;
    std::stringstream ss(s.deny_text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) s.deny.push_back(item);
    }
  }
  const char* p = std::getenv("KILN_CUDNN_GRAPH_PRIVATE");
  if (p && *p) {
    const std::string v = p;
    s.sharing = v == "handle" ? PlanSharing::kPerKernelHandle
                : v == "0"    ? PlanSharing::kPerThread
                              : PlanSharing::kPerKernel;
  }
  return s;
}

const char* sharing_name(PlanSharing s) {
  switch (s) {
    case PlanSharing::kPerThread:
      return "shared per thread";
    case PlanSharing::kPerKernel:
      return "private to the kernel object";
    case PlanSharing::kPerKernelHandle:
      return "private to the kernel object, with its own cuDNN handle";
  }
  return "?";
}

// The deny-list item found in `text`, or null.
const std::string* denied_by(const Settings& s, const std::string& text) {
  for (const std::string& d : s.deny) {
    if (text.find(d) != std::string::npos) return &d;
  }
  return nullptr;
}

// ---- the graph cache ------------------------------------------------------------------------

// What one graph computes.
struct GraphSpec {
  ConvShape s;
  bool bias = false, residual = false;
  const GraphActivation* act = nullptr;
  PostOp post;       // the activation's parameters when act is set
  int sm_count = 0;  // > 0: heuristics and engines for this many SMs (tuned for several streams)
  // Only engines with precompiled kernels: configs noted CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION
  // (which compile kernels with NVRTC when their plan is built, on every machine the driver's JIT
  // cache has not seen the shape on) are left out (the cudnn_graph_precompiled tactic).
  bool precompiled = false;
};

std::string spec_key(const GraphSpec& g) {
  const ConvShape& s = g.s;
  std::ostringstream k;
  k << static_cast<int>(s.type) << '|' << static_cast<int>(s.format) << '|' << s.spatial_rank << '|' << s.batch << ','
    << s.in_channels << ',' << s.out_channels << ',' << s.group;
  for (const Spatial3* v : {&s.in, &s.out, &s.kernel, &s.stride, &s.pad_begin, &s.pad_end, &s.dilation}) {
    k << '|' << (*v)[0] << ',' << (*v)[1] << ',' << (*v)[2];
  }
  k << '|' << g.bias << g.residual << '|' << g.sm_count << (g.precompiled ? "|pc" : "");
  if (g.act) {
    k << '|' << static_cast<int>(g.act->kind) << ',' << std::setprecision(9) << g.post.alpha << ',' << g.post.beta;
  }
  return k.str();
}

// The frontend's Graph with access to its built execution plans (a protected member), for the
// plans' own notes and for direct execution.
class KilnGraph : public fe::graph::Graph {
 public:
#if KILN_CUDNN_GRAPH_DIRECT
  // The engine and knob choices of engine config i, for building variants of it.
  fe::error_t engine_and_knobs_at(int64_t i, int64_t& engine,
                                  std::unordered_map<fe::KnobType_t, int64_t>& knobs) const {
    return plans.get_engine_and_knobs_at_index(i, engine, knobs);
  }
#endif
  std::shared_ptr<fe::ExecutionPlan> plan_at(int64_t i) const {
#if KILN_CUDNN_GRAPH_DIRECT
    if (i < 0 || i >= static_cast<int64_t>(plans.execution_plans.size())) return nullptr;
    return plans.execution_plans[static_cast<size_t>(i)];
#else
    (void)i;
    return nullptr;  // older frontends: the frontend's own note filters only
#endif
  }
};

const cudnnBackendNumericalNote_t kBarredNumericalNotes[] = {CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
                                                             CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
                                                             CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
const cudnnBackendBehaviorNote_t kBarredBehaviorNotes[] = {CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER,
                                                           CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER};

// One built plan of a graph.
struct PlanInfo {
  int64_t index = -1;     // engine config / plan index in the graph
  int64_t workspace = 0;  // bytes the frontend asks for
  std::string name;       // cuDNN's engine config tag (modes A and FALLBACK may list one engine twice)
  std::string notes;      // its numerical and behaviour notes, for logs and the deny list
  std::shared_ptr<fe::ExecutionPlan> plan;
};

// What a serialized plan (a compiled plan carried in an engine file or handed from one thread's
// handle to another's) says about the resolution it came from, besides cuDNN's JSON.
struct PlanRecord {
  bool graph_bias = false, graph_residual = false, graph_act = false;  // what the plan's graph fuses
  bool precompiled = false;  // from a precompiled-engines-only graph (runtime compilation barred)
  int64_t index = -1, configs = 0, workspace = 0;
  int64_t alignment = static_cast<int64_t>(kAlignment);
  std::string name, notes, json;
};

// One graph with its engine configs, built with (and only ever run with) one handle. Plans are
// built on demand, in heuristic order. The mutex serializes prepare()-time work only (building
// the graph and plans); execute() never takes it.
struct GraphEntry {
  std::mutex mutex;
  GraphHandle* handle = nullptr;
  bool made = false;
  std::string error;  // non-empty: the graph could not be made
  std::shared_ptr<KilnGraph> graph;
  TensorAttr x, w, b, r, y;
  int64_t configs = 0;
  bool precompiled = false;     // GraphSpec::precompiled: runtime-compiled plans are barred too
  int64_t next = 0;             // next config to try building
  std::vector<PlanInfo> built;  // configs that built and passed the checks, in heuristic order
  // entry_plan's direct route: the configs' names (the first config of each distinct name, in
  // heuristic order; listed once), and the plans built that way, by config index (the walk
  // through `built` takes them instead of building them again).
  bool named = false;
  std::vector<int64_t> distinct;
  std::map<int64_t, PlanInfo> direct_built;
  int plans_built = 0;   // build_plan_at_index calls (each may compile kernels), for the verbose log
  std::string failures;  // why the others did not
  // Knob variants of the heuristic's first plan (builder level 5's cudnn_graph_knobs_N), made on
  // first request, in a fixed order; knob_why: why there are not more.
  bool knobs_made = false;
  std::vector<PlanInfo> knob_built;
  std::string knob_why;
  // Direct execution (decided once, after the first plan built).
  bool direct_checked = false, direct = false;
  size_t alignment = kAlignment;
  std::string direct_why;
  // An entry of a compiled plan loaded with this handle instead of a graph (load_plan): no
  // graph; the plan and what its record says.
  std::optional<PlanInfo> loaded;
  PlanRecord loaded_record;  // without the JSON
};

void note_failure(GraphEntry& e, int64_t i, const std::string& why) {
  if (e.failures.size() < kMessageLimit) {
    e.failures += std::string(e.failures.empty() ? "" : "; ") + "config " + std::to_string(i) + ": " + why;
  }
}

// The numerical / behaviour notes of a built plan that kiln bars for `type` (and, with
// `precompiled`, runtime compilation), as text ("" if none), and all its notes in *all.
std::string barred_notes(const fe::ExecutionPlan& plan, DataType type, bool precompiled, std::string* all) {
  std::string barred;
  for (const cudnnBackendNumericalNote_t n : plan.getAllNumericNotes()) {
    if (n >= CUDNN_NUMERICAL_NOTE_TYPE_COUNT) continue;
    const std::string name = fe::to_string(n);
    *all += (all->empty() ? "" : " ") + name;
    bool bar = type == DataType::kFloat32 && n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;  // TF32
    for (const auto b : kBarredNumericalNotes) bar = bar || n == b;
    if (bar) barred += (barred.empty() ? "" : " ") + name;
  }
  for (const cudnnBackendBehaviorNote_t n : plan.getAllBehaviorNotes()) {
    if (n >= CUDNN_BEHAVIOR_NOTE_TYPE_COUNT) continue;
    const std::string name = fe::to_string(n);
    *all += (all->empty() ? "" : " ") + name;
    bool bar = precompiled && n == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    for (const auto b : kBarredBehaviorNotes) bar = bar || n == b;
    if (bar) barred += (barred.empty() ? "" : " ") + name;
  }
  return barred;
}

// Builds engine config i of e.graph into *p and applies kiln's checks to it: the deny list (the
// config's name, then the plan's notes), the plan's own barred notes (whatever the frontend's
// deselection did: that it applies to build_plan_at_index is not documented; 1.32 does, older
// versions may not) and the workspace limit. Returns why the plan is not usable, "" when it is;
// throws GraphFailure where the frontend fails. Called with e.mutex and e.handle's mutex held.
std::string build_checked_plan(GraphEntry& e, int64_t i, DataType type, const Settings& settings, PlanInfo* p) {
  p->index = i;
  if (e.graph->get_plan_name_at_index(i, p->name).is_bad()) p->name = "#" + std::to_string(i);
  if (const std::string* d = denied_by(settings, p->name)) {
    return p->name + " denied by KILN_CUDNN_GRAPH_DENY (" + *d + ")";
  }
  ++e.plans_built;
  check(e.graph->build_plan_at_index(e.handle->handle, i), "build_plan_at_index");
  p->plan = e.graph->plan_at(i);
  if (KILN_CUDNN_GRAPH_DIRECT && !p->plan) throw GraphFailure("the frontend kept no plan at this index");
  const std::string barred = p->plan ? barred_notes(*p->plan, type, e.precompiled, &p->notes) : std::string();
  if (!barred.empty()) return p->name + " has barred notes (" + barred + ")";
  if (const std::string* d = denied_by(settings, p->notes)) {
    return p->name + " (" + p->notes + ") denied by KILN_CUDNN_GRAPH_DENY (" + *d + ")";
  }
  check(e.graph->get_workspace_size_plan_at_index(i, p->workspace), "get_workspace_size_plan_at_index");
  if (p->workspace > kWorkspaceLimit) return p->name + " needs " + std::to_string(p->workspace) + " bytes of workspace";
  return "";
}

// Whether one of `plans` is the engine config `name` (modes A and FALLBACK may list one twice).
bool has_plan_named(const std::vector<PlanInfo>& plans, const std::string& name) {
  return std::any_of(plans.begin(), plans.end(), [&](const PlanInfo& b) { return b.name == name; });
}

// The rank-th distinct plan that builds and passes the checks (0 = the heuristic's choice), or
// nullopt with *why set. Called with e.mutex and e.handle's mutex held.
//
// First directly: the config of the rank-th distinct name in the heuristic list, built alone, so
// that a kernel of rank 2 does not build ranks 0 and 1 first (each may compile runtime-compiled
// kernels: loading a level-3 TinyYolo engine on a fresh host spent most of its time there). Where
// every config builds and passes the checks (the usual case) that is the same plan as the walk
// below gives; where the direct config fails, the walk decides. Builder and loader run the same
// steps, so an engine gets the plan its tactic was timed with.
std::optional<PlanInfo> entry_plan(GraphEntry& e, int rank, DataType type, const Settings& settings, std::string* why) {
  if (!e.error.empty()) {
    *why = e.error;
    return std::nullopt;
  }
  if (rank < static_cast<int>(e.built.size())) return e.built[static_cast<size_t>(rank)];
  if (!e.named) {
    e.named = true;
    std::vector<std::string> names;
    for (int64_t i = 0; i < e.configs; ++i) {
      std::string name;
      if (e.graph->get_plan_name_at_index(i, name).is_bad()) {
        e.distinct.clear();  // unnamed configs: the walk only
        break;
      }
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      names.push_back(name);
      e.distinct.push_back(i);
    }
  }
  if (rank < static_cast<int>(e.distinct.size())) {
    const int64_t i = e.distinct[static_cast<size_t>(rank)];
    if (const auto it = e.direct_built.find(i); it != e.direct_built.end()) return it->second;
    if (i >= e.next) {  // not yet tried by the walk
      try {
        PlanInfo p;
        if (build_checked_plan(e, i, type, settings, &p).empty()) return e.direct_built.emplace(i, p).first->second;
      } catch (const std::exception&) {
        // the walk tries it again and notes why
      }
    }
  }
  while (static_cast<int>(e.built.size()) <= rank && e.next < e.configs) {
    const int64_t i = e.next++;
    if (const auto it = e.direct_built.find(i); it != e.direct_built.end()) {
      if (!has_plan_named(e.built, it->second.name)) e.built.push_back(it->second);
      continue;
    }
    try {
      PlanInfo p;
      const std::string unusable = build_checked_plan(e, i, type, settings, &p);
      if (!unusable.empty()) {
        note_failure(e, i, unusable);
      } else if (!has_plan_named(e.built, p.name)) {
        e.built.push_back(std::move(p));
      }
    } catch (const std::exception& ex) {
      note_failure(e, i, ex.what());
    }
  }
  if (rank < static_cast<int>(e.built.size())) return e.built[static_cast<size_t>(rank)];
  *why = "the heuristics offer " + std::to_string(e.configs) + " engine configs, " + std::to_string(e.built.size()) +
         " of them build and pass kiln's checks" +
         (e.failures.empty() ? std::string() : " (" + clipped(e.failures) + ")");
  return std::nullopt;
}

// Knob variants: the engine of the heuristic's first plan with one knob set to another value of
// its range (the knobs in the engine's order, the values upwards, at most kKnobValuesPerKnob per
// knob), kept when the plan builds, passes build_checked_plan's checks and differs from every
// plan already kept; at most kKnobVariants of them and
// kKnobAttempts builds per graph (some engines compile their kernels at build time). The order is
// fixed, so that a deserialized engine's kernel rebuilds the variant its tactic name says.
constexpr size_t kKnobVariants = 4;
constexpr int kKnobAttempts = 16;
constexpr int64_t kKnobValuesPerKnob = 4;

void make_knob_variants(GraphEntry& e, const PlanInfo& first, DataType type, const Settings& settings) {
#if KILN_CUDNN_GRAPH_DIRECT
  int64_t engine = -1;
  std::unordered_map<fe::KnobType_t, int64_t> chosen;
  std::vector<fe::Knob> knobs;
  try {
    check(e.graph->engine_and_knobs_at(first.index, engine, chosen), "get_engine_and_knobs_at_index");
    check(e.graph->get_knobs_for_engine(engine, knobs), "get_knobs_for_engine");
  } catch (const std::exception& ex) {
    e.knob_why = ex.what();
    return;
  }
  int attempts = 0;
  std::string failures;
  const auto explain = [&] {
    e.knob_why = "engine " + std::to_string(engine) + " of " + first.name + " gives " +
                 std::to_string(e.knob_built.size()) + " knob variants that build and pass kiln's checks in " +
                 std::to_string(attempts) + " tried" +
                 (failures.empty() ? std::string() : " (" + clipped(failures) + ")");
  };
  for (const fe::Knob& k : knobs) {
    if (k.type == fe::KnobType_t::NOT_SET || fe::is_frontend_knob_type(k.type) || k.stride <= 0 ||
        k.maxValue < k.minValue) {
      continue;
    }
    const auto current = chosen.find(k.type);
    int64_t tried = 0;
    for (int64_t v = k.minValue; v <= k.maxValue && tried < kKnobValuesPerKnob; v += k.stride) {
      if (current != chosen.end() && current->second == v) continue;
      if (e.knob_built.size() >= kKnobVariants || attempts >= kKnobAttempts) return explain();
      ++tried;
      ++attempts;
      std::unordered_map<fe::KnobType_t, int64_t> variant = chosen;
      variant[k.type] = v;
      const int64_t i = e.graph->get_execution_plan_count();
      try {
        check(e.graph->create_execution_plan(engine, variant), "create_execution_plan");
        PlanInfo p;
        if (build_checked_plan(e, i, type, settings, &p).empty() && !has_plan_named(e.built, p.name) &&
            !has_plan_named(e.knob_built, p.name)) {
          e.knob_built.push_back(std::move(p));
        }
      } catch (const std::exception& ex) {
        if (failures.size() < kMessageLimit) failures += std::string(failures.empty() ? "" : "; ") + ex.what();
      }
    }
  }
  explain();
#else
  (void)first, (void)type, (void)settings;
  e.knob_why = "knob variants need cudnn-frontend 1.32 or later";
#endif
}

// The variant-th knob variant (0-based), or nullopt with *why set. Called with e.mutex and
// e.handle's mutex held.
std::optional<PlanInfo> knob_plan(GraphEntry& e, int variant, DataType type, const Settings& settings,
                                  std::string* why) {
  if (!e.knobs_made) {
    e.knobs_made = true;
    std::string first_why;
    if (std::optional<PlanInfo> first = entry_plan(e, 0, type, settings, &first_why)) {
      make_knob_variants(e, *first, type, settings);
    } else {
      e.knob_why = first_why;
    }
  }
  if (variant < static_cast<int>(e.knob_built.size())) return e.knob_built[static_cast<size_t>(variant)];
  *why = e.knob_why;
  return std::nullopt;
}

// Makes the graph of `g` with e.handle (validation, cuDNN operation graph, heuristics query,
// filters). Throws GraphFailure or the frontend's exceptions.
void make_graph(const GraphSpec& g, GraphEntry& e) {
  const ConvShape& s = g.s;
  const int rank = tensor_rank(s);
  const bool cl = s.format == TensorFormat::kChannelsLast;
  const fe::DataType_t io = s.type == DataType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::FLOAT;
  const fe::DataType_t f32 = fe::DataType_t::FLOAT;
  const std::vector<int64_t> x_dims = tensor_dims(rank, s.batch, s.in_channels, s.in);
  const std::vector<int64_t> w_dims = tensor_dims(rank, s.out_channels, s.in_channels / s.group, s.kernel);
  const std::vector<int64_t> y_dims = tensor_dims(rank, s.batch, s.out_channels, s.out);
  const std::vector<int64_t> y_strides = packed_strides(y_dims, cl);

  auto graph = std::make_shared<KilnGraph>();
  graph->set_io_data_type(io).set_intermediate_data_type(f32).set_compute_data_type(f32);
  if (g.sm_count > 0) graph->set_sm_count(g.sm_count);
  const auto io_tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& dims,
                             const std::vector<int64_t>& strides) {
    fe::graph::Tensor_attributes t;
    t.set_name(name).set_uid(uid).set_dim(dims).set_stride(strides).set_data_type(io);
    return graph->tensor(t);
  };
  e.x = io_tensor("x", kUidX, x_dims, packed_strides(x_dims, cl));
  e.w = io_tensor("w", kUidW, w_dims, packed_strides(w_dims, cl));
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
    e.b = io_tensor("b", kUidB, b_dims, packed_strides(b_dims, cl));
    y = add(y, e.b, "bias");
  }
  if (g.residual) {
    e.r = io_tensor("residual", kUidR, y_dims, y_strides);
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
  y->set_output(true).set_data_type(io).set_uid(kUidY);
  e.y = y;

  const cudnnHandle_t handle = e.handle->handle;
  check(graph->validate(), "validate");
  check(graph->build_operation_graph(handle), "build_operation_graph");
  check(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
  std::vector<fe::NumericalNote_t> barred{fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                          fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION,
                                          fe::NumericalNote_t::NONDETERMINISTIC};
  if (s.type == DataType::kFloat32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);  // no TF32
  graph->deselect_numeric_notes(barred);
  std::vector<fe::BehaviorNote_t> barred_behaviour{fe::BehaviorNote_t::REQUIRES_FILTER_INT8x32_REORDER,
                                                   fe::BehaviorNote_t::REQUIRES_BIAS_INT8x32_REORDER};
  if (g.precompiled) barred_behaviour.push_back(fe::BehaviorNote_t::RUNTIME_COMPILATION);
  graph->deselect_behavior_notes(barred_behaviour);
  e.precompiled = g.precompiled;
  graph->deselect_workspace_greater_than(kWorkspaceLimit);
  check(graph->check_support(handle), "check_support");
  e.configs = graph->get_execution_plan_count();
  e.graph = std::move(graph);
}

// Whether the plans of e.graph can run through cudnnBackendExecute with kiln's own variant pack:
// the frontend's variant pack must be exactly the graph's tensors (no pass-by-value scalars, no
// frontend workspace, no slot rewriting). Called with e.mutex held, once a plan built.
void check_direct(GraphEntry& e, const PlanInfo& p, bool bias, bool residual) {
  if (e.direct_checked) return;
  e.direct_checked = true;
#if KILN_CUDNN_GRAPH_DIRECT
  try {
    check(e.graph->prepare_variant_pack_template(), "prepare_variant_pack_template");
    const auto& t = e.graph->varpack_template;
    std::vector<int64_t> expect{kUidX, kUidW, kUidY};
    if (bias) expect.push_back(kUidB);
    if (residual) expect.push_back(kUidR);
    std::sort(expect.begin(), expect.end());
    std::vector<int64_t> uids = t.all_uids;
    std::sort(uids.begin(), uids.end());
    if (uids != expect || t.user_slots.size() != t.all_uids.size() || !t.workspace_slots.empty() ||
        !t.replacement_slots.empty() || !t.backend_slots.empty()) {
      e.direct_why = "the frontend's variant pack is not just the graph's tensors";
      return;
    }
    if (p.plan->getWorkspaceSize() != p.workspace) {
      e.direct_why = "the frontend adds workspace of its own";
      return;
    }
    for (const auto& [slot, alignment] : t.aligned_slots) {
      (void)slot;
      e.alignment = std::max(e.alignment, static_cast<size_t>(alignment));
    }
    e.direct = true;
  } catch (const std::exception& ex) {
    e.direct_why = ex.what();
  }
#else
  (void)p;
  (void)bias;
  (void)residual;
  e.direct_why = "cudnn-frontend older than 1.32";
#endif
}

// A thread-safe map of at most kCacheCapacity entries, the oldest dropped first (whoever holds
// one keeps it alive). Never used by execute().
template <typename V>
class BoundedCache {
 public:
  std::shared_ptr<V> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }
  // The entry of `key`: the one there, else make()'s, added.
  template <typename Make>
  std::shared_ptr<V> get_or_add(const std::string& key, Make make) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = entries_.find(key); it != entries_.end()) return it->second;
    if (entries_.size() >= kCacheCapacity) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(key);
    return entries_.emplace(key, make()).first->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<V>> entries_;
  std::deque<std::string> order_;
};

// Graphs by (handle scope, spec): an entry is made empty on first use (the caller makes its graph
// under the entry's mutex).
using GraphCache = BoundedCache<GraphEntry>;

GraphCache& graph_cache_instance() {
  // Intentionally never destroyed: plans own runtime-compiled kernels that must not be unloaded
  // after the CUDA runtime's teardown at exit.
  static GraphCache* cache = new GraphCache;
  return *cache;
}

std::shared_ptr<GraphEntry> graph_entry(const std::string& key, GraphHandle* handle) {
  return graph_cache_instance().get_or_add(key, [&] {
    auto e = std::make_shared<GraphEntry>();
    e->handle = handle;
    return e;
  });
}

// ---- variant packs --------------------------------------------------------------------------

// cudnnBackendExecute's variant packs for one plan, one per set of pointers seen (made on the
// first execution with that set, reused after): a context's pointers are stable, so the steady
// state creates no descriptor.
class VariantPacks {
 public:
  VariantPacks() = default;
  VariantPacks(const VariantPacks&) = delete;
  VariantPacks& operator=(const VariantPacks&) = delete;
  ~VariantPacks() {
    for (Slot& s : slots_) {
      if (s.desc) cudnnBackendDestroyDescriptor(s.desc);
    }
  }
  // The pack for ptrs[0..n) (uids[0..n)) and workspace `ws`.
  cudnnBackendDescriptor_t get(void* const* ptrs, const int64_t* uids, int n, void* ws) {
    for (const Slot& s : slots_) {
      if (s.desc && s.ws == ws && std::memcmp(s.ptrs.data(), ptrs, sizeof(void*) * static_cast<size_t>(n)) == 0) {
        return s.desc;
      }
    }
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % kPackSlots;
    if (s.desc) cudnnBackendDestroyDescriptor(s.desc);
    s.desc = nullptr;
    cudnnBackendDescriptor_t d = nullptr;
    KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &d));
    try {
      KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
      KILN_CUDNN_CHECK(
          cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
      KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
      KILN_CUDNN_CHECK(cudnnBackendFinalize(d));
    } catch (...) {
      cudnnBackendDestroyDescriptor(d);
      throw;
    }
    std::copy(ptrs, ptrs + n, s.ptrs.begin());
    s.ws = ws;
    s.desc = d;
    return d;
  }

 private:
  struct Slot {
    std::array<void*, 5> ptrs{};
    void* ws = nullptr;
    cudnnBackendDescriptor_t desc = nullptr;
  };
  std::array<Slot, kPackSlots> slots_;
  size_t next_ = 0;
};

// ---- compiled plans: carried in engine files, handed between threads ------------------------
//
// A built plan (engine config and the kernels cuDNN compiled for it at run time) serializes to
// cuDNN's JSON representation, which a plan descriptor of another handle on an identical GPU
// loads back without building or compiling anything. Two uses: the builder stores the chosen
// kernels' plans in the engine (Kernel::prepared_states, BuilderConfig::embed_compiled_plans)
// and a kernel's prepare() loads them (find_prepared_state); and a thread that needs a plan
// another thread's handle built (each thread has its own handle; with private plans, each
// kernel object its own graphs) loads a copy of that plan instead of building its own (a copy
// is a plan of its own: private plans stay private). A plan's key names the device (model, compute capability, SMs,
// driver, cuDNN and frontend versions), the tactic, the deny list and the fused graph's spec, so
// that a plan from another machine or library is not found; one that is found and does not load
// is built instead (logged at kVerbose). KILN_COMPILED_PLANS=0 builds every plan (the behaviour
// before: a diagnostic, and bench/engine_startup.py's baseline).

constexpr char kRecordMagic[] = "kiln-cudnn-plan 1\n";

bool plan_loading_enabled() {
  const char* v = std::getenv("KILN_COMPILED_PLANS");
  return !(v && std::string(v) == "0");
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

std::vector<uint8_t> encode_record(const PlanRecord& r) {
  std::ostringstream o;
  o << kRecordMagic << "fused " << r.graph_bias << r.graph_residual << r.graph_act << r.precompiled << "\n"
    << "index " << r.index << "\nconfigs " << r.configs << "\nworkspace " << r.workspace << "\nalignment "
    << r.alignment << "\nname " << one_line(r.name) << "\nnotes " << one_line(r.notes) << "\njson " << r.json.size()
    << "\n";
  std::string text = o.str();
  text += r.json;
  return std::vector<uint8_t>(text.begin(), text.end());
}

// Throws GraphFailure naming what is malformed.
PlanRecord decode_record(const std::vector<uint8_t>& bytes) {
  const std::string s(bytes.begin(), bytes.end());
  const auto bad = [](const std::string& what) -> void {
    throw GraphFailure("malformed compiled plan (" + what + ")");
  };
  const size_t magic = sizeof(kRecordMagic) - 1;
  if (s.compare(0, magic, kRecordMagic) != 0) bad("no kiln-cudnn-plan 1 header");
  size_t pos = magic;
  const auto line = [&](const std::string& field) {
    const size_t end = s.find('\n', pos);
    if (end == std::string::npos || s.compare(pos, field.size() + 1, field + " ") != 0) bad("no " + field + " line");
    std::string v = s.substr(pos + field.size() + 1, end - pos - field.size() - 1);
    pos = end + 1;
    return v;
  };
  const auto number = [&](const std::string& field) {
    const std::string v = line(field);
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) bad("bad " + field);
    return static_cast<int64_t>(std::stoll(v));
  };
  PlanRecord r;
  const std::string fused = line("fused");
  if (fused.size() != 4 || fused.find_first_not_of("01") != std::string::npos) bad("bad fused");
  r.graph_bias = fused[0] == '1';
  r.graph_residual = fused[1] == '1';
  r.graph_act = fused[2] == '1';
  r.precompiled = fused[3] == '1';
  r.index = number("index");
  r.configs = number("configs");
  r.workspace = number("workspace");
  r.alignment = number("alignment");
  if (r.alignment < 1 || r.alignment > 4096 || (r.alignment & (r.alignment - 1)) != 0) bad("bad alignment");
  r.name = line("name");
  r.notes = line("notes");
  const int64_t size = number("json");
  if (static_cast<uint64_t>(size) != s.size() - pos || size == 0) bad("the JSON is not the announced size");
  r.json = s.substr(pos);
  return r;
}

// What a serialized plan depends on besides the graph: the GPU model and its SMs, the driver,
// cuDNN and the frontend. Cached per device.
std::string device_fingerprint(int device) {
  static std::mutex mutex;
  static std::map<int, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(device); it != known.end()) return it->second;
  cudaDeviceProp p{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  int driver = 0;
  KILN_CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::ostringstream o;
  o << p.name << "|sm_" << p.major << p.minor << "|" << p.multiProcessorCount << " SMs|driver " << driver << "|cudnn "
    << cudnnGetVersion() << "|frontend " << CUDNN_FRONTEND_VERSION;
  return known.emplace(device, o.str()).first->second;
}

// A plan a handle built, for other threads' handles and for the engine file: serialized once,
// on first request.
struct SharedPlan {
  GraphHandle* handle = nullptr;      // the handle it was built with
  uint64_t serial = 0;                // the kernel object that built it
  std::shared_ptr<GraphEntry> entry;  // keeps the plan alive
  PlanInfo plan;
  PlanRecord meta;  // all but the JSON
  std::mutex mutex;
  bool serialized = false;
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // null where serialization failed
  std::string why;                                    // why it failed
};

// The record's bytes, serializing the plan on first request with its handle's mutex held (it may
// be launching from another thread). Never call it holding another handle's mutex.
std::shared_ptr<const std::vector<uint8_t>> serialized(SharedPlan& sp) {
  std::lock_guard<std::mutex> lock(sp.mutex);
  if (!sp.serialized) {
    sp.serialized = true;
    try {
      PlanRecord r = sp.meta;
      {
        std::lock_guard<std::mutex> use(sp.handle->use);
        r.json = sp.plan.plan->getJsonRepresentation();
      }
      if (r.json.empty()) throw GraphFailure("cuDNN gave an empty JSON representation");
      sp.bytes = std::make_shared<const std::vector<uint8_t>>(encode_record(r));
    } catch (const std::exception& e) {
      sp.why = e.what();
    }
  }
  return sp.bytes;
}

// Built plans by key (the first of each key), for other handles and the engine file.
using SharedPlans = BoundedCache<SharedPlan>;

SharedPlans& shared_plans() {
  static SharedPlans* plans = new SharedPlans;  // never destroyed, as graph_cache_instance()
  return *plans;
}

// Loads a compiled plan into `e` (an entry of e.handle without a graph); throws GraphFailure or
// the frontend's exception saying why it does not load. Called with e.mutex and e.handle's mutex
// held.
void load_plan(GraphEntry& e, const std::vector<uint8_t>& bytes, DataType type) {
#if KILN_CUDNN_GRAPH_DIRECT
  PlanRecord r = decode_record(bytes);
  auto plan =
      std::make_shared<fe::ExecutionPlan>(fe::ExecutionPlanBuilder().setHandle(e.handle->handle).loadFromJson(r.json));
  PlanInfo p;
  const std::string barred = barred_notes(*plan, type, r.precompiled, &p.notes);
  if (!barred.empty()) throw GraphFailure("the loaded plan has barred notes (" + barred + ")");
  if (p.notes.empty()) p.notes = r.notes;
  p.index = r.index;
  p.name = r.name;
  p.workspace = plan->getWorkspaceSize();
  if (p.workspace > kWorkspaceLimit)
    throw GraphFailure("the loaded plan needs " + std::to_string(p.workspace) + " bytes");
  p.plan = std::move(plan);
  r.json.clear();
  e.loaded_record = r;
  e.configs = r.configs;
  e.alignment = static_cast<size_t>(r.alignment);
  e.direct_checked = e.direct = true;
  e.loaded = std::move(p);
#else
  (void)e;
  (void)bytes;
  (void)type;
  throw GraphFailure("cudnn-frontend older than 1.32");
#endif
}

// ---- the kernel -----------------------------------------------------------------------------

bool aligned(const void* p, size_t alignment) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

std::atomic<uint64_t> g_kernel_serial{1};

class CudnnGraphConvolution : public Kernel {
 public:
  CudnnGraphConvolution(const Layer& layer, std::string tactic, int rank, int knob_variant, bool precompiled)
      : tactic_(std::move(tactic)),
        rank_(rank),
        knob_variant_(knob_variant),
        precompiled_(precompiled),
        post_(conv_post_op(layer)),
        serial_(g_kernel_serial++) {}

  void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    what_ = "Convolution layer '" + layer.name() + "' (CUDA tactic " + tactic_ + ")";
    s_ = make_conv_shape(layer, inputs, outputs, false);
    has_bias_ = inputs.size() > 2 && inputs[2].present;
    has_residual_ = inputs.size() > 3 && inputs[3].present;
    current_.reset();
    workspace_ = 0;
    empty_ = s_.batch == 0 || s_.out_channels == 0 || s_.in_channels == 0;
    if (empty_) return;
    KILN_CUDA_CHECK(cudaGetDevice(&device_));
    sm_target_ = sm_count_target(params_of<ConvParams>(layer).concurrent_streams);
    settings_ = read_settings();
    if (settings_.sharing == PlanSharing::kPerKernelHandle && !own_handle_) {
      own_handle_ = handle_pool().make_private(device_);
    }
    current_ = resolve(handle_for_this_thread());
    workspace_ = current_->workspace;
    if (s_.format == TensorFormat::kChannelsLast) filter_.prepare(inputs[1], s_.kernel_volume());
    kiln::log(Severity::kVerbose, describe_choice(*current_));
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
    Resolved* r = current_.get();
    const size_t al = r->entry->alignment;
    // (NHWC runs the KRSC copy, a buffer of its own: the given weights' alignment does not matter.)
    const bool linear = s_.format != TensorFormat::kChannelsLast;
    if (!aligned(x, al) || (linear && !aligned(weights, al)) || !aligned(bias, al) || !aligned(residual, al) ||
        !aligned(y, al) || !aligned(ctx.workspace, al)) {
      launch_conv_direct(s_, x, weights, bias, residual, y, post_, stream);  // rare: see the file comment
      return;
    }
    const void* w = linear ? weights : filter_.get(weights, stream);
    // The variant pack's pointers in r->uids order: x, w, y, then b and the residual when fused.
    void* ptrs[5] = {const_cast<void*>(x), const_cast<void*>(w), y, nullptr, nullptr};
    int n = 3;
    if (r->graph_bias) ptrs[n++] = const_cast<void*>(bias);
    if (r->graph_residual) ptrs[n++] = const_cast<void*>(residual);
    {
      std::lock_guard<std::mutex> use(r->handle->use);
      KILN_CUDNN_CHECK(cudnnSetStream(r->handle->handle, stream));
      run(*r, ptrs, n, ctx.workspace, stream);
    }
    EpilogueArgs e = output_epilogue(s_, y);
    e.bias = r->graph_bias ? nullptr : bias;
    e.residual = r->graph_residual ? nullptr : residual;
    e.post = r->epilogue_post;
    if (!epilogue_is_identity(e)) launch_epilogue(e, stream);
  }

 private:
  // The plan of this kernel (for the handle it was prepared with), with what execute() needs to run it.
  struct Resolved {
    GraphHandle* handle = nullptr;
    std::shared_ptr<GraphEntry> entry;
    PlanInfo plan;
    bool graph_bias = false, graph_residual = false;
    PostOp epilogue_post;  // what kiln's epilogue still applies
    size_t workspace = 0;
    cudnnBackendDescriptor_t raw_plan = nullptr;  // direct execution
    bool retain = false;                          // runtime-compiled: CUDA graphs must keep the plan
    int plans_built = 0;                          // GraphEntry::plans_built when resolved
    bool graph_act = false;                       // the activation runs in the plan's graph
    bool precompiled = false;                     // from a precompiled-engines-only graph
    // A plan loaded from a compiled plan (the engine file's or another thread's): its bytes and
    // where it came from; null / empty for a plan built here.
    std::shared_ptr<const std::vector<uint8_t>> state;
    std::string loaded_from;
    int64_t uids[5] = {kUidX, kUidW, kUidY, 0, 0};
    VariantPacks packs;
    std::unordered_map<int64_t, void*> pack;  // frontend execution: keys fixed here, values per run
  };

  // The handle this kernel is prepared with on the calling thread: its own (kPerKernelHandle),
  // else the thread's.
  GraphHandle* handle_for_this_thread() const { return own_handle_ ? own_handle_ : thread_graph_handle(device_); }

  // One line for the verbose log: the engine, its notes, what it fuses, how it runs.
  std::string describe_choice(const Resolved& r) const {
    std::string fused, rest;
    (r.graph_bias ? fused : rest) += has_bias_ ? " bias" : "";
    (r.graph_residual ? fused : rest) += has_residual_ ? " residual" : "";
    (r.epilogue_post.enabled ? rest : fused) += post_.enabled ? std::string(" ") + to_string(post_.kind) : "";
    const std::string config =
        knob_variant_ >= 0 ? "knob variant " + std::to_string(knob_variant_ + 1) + " of the first config"
                           : "config " + std::to_string(r.plan.index) + " of " + std::to_string(r.entry->configs);
    const std::string how = r.loaded_from.empty()
                                ? std::to_string(r.plans_built) + " of the graph's configs built so far"
                                : "loaded from " + r.loaded_from + ", nothing built";
    std::string line = what_ + ": engine " + r.plan.name + " (" + config +
                       ", notes: " + (r.plan.notes.empty() ? "none" : r.plan.notes) + "; " + how +
                       "); fused:" + (fused.empty() ? " nothing" : fused) +
                       "; kiln epilogue:" + (rest.empty() ? " none" : rest) + "; workspace " +
                       std::to_string(r.workspace) + " B; " +
                       (r.raw_plan ? "cudnnBackendExecute" : "frontend execute (" + r.entry->direct_why + ")") +
                       "; plans " + sharing_name(settings_.sharing);
    if (s_.format == TensorFormat::kChannelsLast) {
      line += filter_.shared() ? "; KRSC weights shared" : "; KRSC weights converted per run";
    }
    return line;
  }

  // Finds (building when needed) the plan for `handle`; throws naming CUDNN_STATUS_NOT_SUPPORTED
  // when no engine takes the convolution. cudnn_graph_precompiled tries both graphs with
  // precompiled engines only first, then (where neither has one) both as cudnn_graph does. Builds run on the thread's
  // prepare stream, waited for, with the handle's mutex held (a kernel prepared with it may be launching from another
  // thread).
  std::unique_ptr<Resolved> resolve(GraphHandle* handle) {
    // The fused graph first; then the convolution alone with kiln's epilogue.
    GraphSpec fused;
    fused.s = s_;
    fused.bias = has_bias_;
    fused.residual = has_residual_;
    fused.act = graph_activation(post_, s_.type);
    fused.post = post_;
    fused.sm_count = sm_target_;
    GraphSpec plain;
    plain.s = s_;
    plain.sm_count = sm_target_;
    std::vector<GraphSpec> attempts{fused};
    if (fused.bias || fused.residual || fused.act) attempts.push_back(plain);
    if (precompiled_) {
      std::vector<GraphSpec> first = attempts;
      for (GraphSpec& g : first) g.precompiled = true;
      attempts.insert(attempts.begin(), first.begin(), first.end());
    }

    const std::string scope =
        std::to_string(handle->id) + "|" + settings_.deny_text + "|" +
        (settings_.sharing == PlanSharing::kPerThread ? std::string("shared") : std::to_string(serial_)) + "|";
    plan_key_ = "cudnn_graph|" + device_fingerprint(device_) + "|" + tactic_ + "|" + settings_.deny_text + "|" +
                spec_key(fused);
    // A compiled plan: the engine file's, else (plans shared per thread) one another thread's
    // handle built. Serialized before this handle's mutex is taken (that takes the other's).
    std::shared_ptr<const std::vector<uint8_t>> state;
    std::string loaded_from;
    if (KILN_CUDNN_GRAPH_DIRECT && plan_loading_enabled()) {
      state = find_prepared_state(plan_key_);
      if (state) {
        loaded_from = "the engine file's compiled plan";
      } else if (settings_.sharing != PlanSharing::kPerKernelHandle) {
        // Unless this handle's graphs (shared per thread) or this kernel object's (private)
        // already hold it: then the graph cache has it.
        const std::shared_ptr<SharedPlan> other = shared_plans().find(plan_key_);
        const bool cached = other && (settings_.sharing == PlanSharing::kPerThread ? other->handle == handle
                                                                                   : other->serial == serial_);
        if (other && !cached && (state = serialized(*other))) {
          loaded_from = "a copy of the plan built with cuDNN handle " + std::to_string(other->handle->id);
        }
      }
    }
    std::lock_guard<std::mutex> use(handle->use);
    KILN_CUDNN_CHECK(cudnnSetStream(handle->handle, prepare_stream()));
    std::string why;
    std::unique_ptr<Resolved> r;
    if (state) r = resolve_loaded(handle, scope, state, loaded_from);
    for (size_t a = 0; a < attempts.size() && !r; ++a) {
      const GraphSpec& g = attempts[a];
      std::shared_ptr<GraphEntry> e = graph_entry(scope + spec_key(g), handle);
      std::lock_guard<std::mutex> lock(e->mutex);
      if (!e->made) {
        e->made = true;
        try {
          make_graph(g, *e);
        } catch (const std::exception& ex) {
          e->error = ex.what();
          e->graph.reset();
        }
      }
      std::string reason;
      std::optional<PlanInfo> p = knob_variant_ >= 0 ? knob_plan(*e, knob_variant_, s_.type, settings_, &reason)
                                                     : entry_plan(*e, rank_, s_.type, settings_, &reason);
      if (!p) {
        const bool is_fused = g.bias || g.residual || g.act;
        why += std::string(why.empty() ? "" : "; ") + (is_fused ? "fused graph" : "convolution graph") +
               (g.precompiled ? " (precompiled engines only): " : ": ") + reason;
        continue;
      }
      check_direct(*e, *p, g.bias, g.residual);
      r = resolution(handle, std::move(*p), g.bias, g.residual, g.act != nullptr, g.precompiled, e->direct);
      r->plans_built = e->plans_built;
      r->entry = std::move(e);
      if (r->raw_plan && settings_.sharing != PlanSharing::kPerKernelHandle)
        shared_plans().get_or_add(plan_key_, [&] { return share(*r); });
    }
    KILN_CUDA_CHECK(cudaStreamSynchronize(prepare_stream()));  // whatever building enqueued is done
    if (!r) {
      throw Error(what_ + ": cuDNN's graph API has no usable engine for this convolution " +
                  "(CUDNN_STATUS_NOT_SUPPORTED): " + why);
    }
    return r;
  }

  // The plan of a compiled plan `state` loaded with `handle` (once per handle and key: the
  // entry is cached like a graph), or null where it does not load or does not fit this layer
  // (logged; the caller builds). Called with handle's mutex held.
  std::unique_ptr<Resolved> resolve_loaded(GraphHandle* handle, const std::string& scope,
                                           const std::shared_ptr<const std::vector<uint8_t>>& state,
                                           const std::string& loaded_from) {
    std::shared_ptr<GraphEntry> e = graph_entry(scope + "loaded|" + plan_key_, handle);
    std::lock_guard<std::mutex> lock(e->mutex);
    if (!e->made) {
      e->made = true;
      try {
        load_plan(*e, *state, s_.type);
      } catch (const std::exception& ex) {
        e->error = ex.what();
      }
    }
    const PlanRecord& m = e->loaded_record;
    std::string why = e->error;
    if (e->loaded && ((m.graph_bias && !has_bias_) || (m.graph_residual && !has_residual_) ||
                      (m.graph_act && !graph_activation(post_, s_.type)))) {
      why = "it fuses more than this layer has";
    }
    if (!e->loaded || !why.empty()) {
      kiln::log(Severity::kVerbose, what_ + ": " + loaded_from + " did not load (" + clipped(why) + "); building it");
      return nullptr;
    }
    auto r = resolution(handle, *e->loaded, m.graph_bias, m.graph_residual, m.graph_act, m.precompiled, true);
    r->state = state;
    r->loaded_from = loaded_from;
    r->entry = std::move(e);
    return r;
  }

  // `plan` resolved with `handle`: what its graph fuses (bias, residual, activation), kiln's
  // epilogue for the rest, the variant pack's ids; cudnnBackendExecute where `direct`.
  std::unique_ptr<Resolved> resolution(GraphHandle* handle, PlanInfo plan, bool bias, bool residual, bool act,
                                       bool precompiled, bool direct) const {
    auto r = std::make_unique<Resolved>();
    r->handle = handle;
    r->plan = std::move(plan);
    r->graph_bias = bias;
    r->graph_residual = residual;
    r->graph_act = act;
    r->precompiled = precompiled;
    r->epilogue_post = act ? PostOp{} : post_;
    r->workspace = workspace_granule(static_cast<size_t>(r->plan.workspace));
    int n = 3;
    if (bias) r->uids[n++] = kUidB;
    if (residual) r->uids[n++] = kUidR;
#if KILN_CUDNN_GRAPH_DIRECT
    if (direct) {
      r->raw_plan = r->plan.plan->get_raw_desc();
      r->retain = r->plan.plan->needs_cuda_graph_retention();
    }
#else
    (void)direct;
#endif
    if (!r->raw_plan) {
      for (int i = 0; i < n; ++i) r->pack[r->uids[i]] = nullptr;
    }
    return r;
  }

  // A built plan, for other threads' handles and the engine file.
  std::shared_ptr<SharedPlan> share(const Resolved& r) const {
    auto sp = std::make_shared<SharedPlan>();
    sp->handle = r.handle;
    sp->serial = serial_;
    sp->entry = r.entry;
    sp->plan = r.plan;
    PlanRecord& m = sp->meta;
    m.graph_bias = r.graph_bias;
    m.graph_residual = r.graph_residual;
    m.graph_act = r.graph_act;
    m.precompiled = r.precompiled;
    m.index = r.plan.index;
    m.configs = r.entry->configs;
    m.workspace = r.plan.workspace;
    m.alignment = static_cast<int64_t>(r.entry->alignment);
    m.name = r.plan.name;
    m.notes = r.plan.notes;
    return sp;
  }

 public:
  // The plan prepare() resolved, serialized (the engine file's KSTATE section), where it runs
  // through cudnnBackendExecute and cuDNN serializes it.
  std::vector<PreparedState> prepared_states() const override {
    if (!current_ || !current_->raw_plan) return {};
    if (current_->state) return {PreparedState{plan_key_, current_->state}};
    std::shared_ptr<SharedPlan> sp = shared_plans().find(plan_key_);
    if (!sp) sp = share(*current_);
    std::shared_ptr<const std::vector<uint8_t>> bytes = serialized(*sp);
    if (!bytes) {
      kiln::log(Severity::kVerbose, what_ + ": its plan is not stored in the engine (" + clipped(sp->why) + ")");
      return {};
    }
    return {PreparedState{plan_key_, std::move(bytes)}};
  }

 private:
  void run(Resolved& r, void* const* ptrs, int n, void* workspace, cudaStream_t stream) {
    std::string failure;
    if (r.raw_plan) {
#if KILN_CUDNN_GRAPH_DIRECT
      // A CUDA graph being captured on `stream` keeps launching a runtime-compiled plan's kernels
      // after the plan may be gone (the caller's own capture): let it hold the plan, as the
      // frontend's execute does.
      if (r.retain) KILN_CUDA_CHECK(r.plan.plan->retain_on_capturing_stream(stream));
#endif
      const cudnnBackendDescriptor_t pack = r.packs.get(ptrs, r.uids, n, workspace);
      const cudnnStatus_t st = cudnnBackendExecute(r.handle->handle, r.raw_plan, pack);
      if (st == CUDNN_STATUS_SUCCESS) return;
      failure = cudnnGetErrorString(st);
    } else {
      for (int i = 0; i < n; ++i) r.pack[r.uids[i]] = ptrs[i];
      try {
        fe::error_t st = r.entry->graph->execute_plan_at_index(r.handle->handle, r.pack, workspace, r.plan.index);
        if (st.is_good()) return;
        failure = clipped(st.get_message());
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    throw Error(what_ + ": cuDNN graph execution (engine " + r.plan.name + ") failed: " + failure);
  }

  std::string tactic_;
  int rank_;
  int knob_variant_;  // -1: the rank-th heuristic plan
  bool precompiled_;  // cudnn_graph_precompiled: engines without runtime compilation first
  PostOp post_;
  uint64_t serial_;
  std::string what_;
  ConvShape s_;
  bool has_bias_ = false, has_residual_ = false, empty_ = false;
  int device_ = 0;
  int sm_target_ = 0;  // cuda::sm_count_target of the layer's concurrent_streams
  Settings settings_;
  size_t workspace_ = 0;
  GraphHandle* own_handle_ = nullptr;  // kPerKernelHandle only; never destroyed (see GraphHandle)
  std::string plan_key_;               // the compiled plan's key (device, tactic, deny list, fused spec)
  std::unique_ptr<Resolved> current_;  // the plan prepare() resolved
  ChannelsLastFilter filter_;
};

// ---- registration ---------------------------------------------------------------------------

struct GraphTactic {
  const char* name;
  // Above the legacy "cudnn" (100): a build without timing takes the plan prepared once (a few
  // microseconds to launch, capture-safe) over the legacy call (40-150 us of host time each).
  int priority;
  int rank;                        // which buildable engine config of the heuristic's list
  int min_optimization_level;      // the builder level from which the tactic is a candidate
  int knob_variant = -1;           // >= 0: that knob variant of the first config instead (make_knob_variants)
  int max_optimization_level = 5;  // the builder level up to which it is a candidate
  bool precompiled = false;        // engines without runtime compilation first (GraphSpec::precompiled)
};

// Ranks 3-7 (cuDNN's 4th to 8th buildable engine configs) and the knob variants of the first
// config (its engine with one knob changed: tile size, stages, split, ...) are slow to try (each
// builds and checks plans per shape; some engines compile kernels when built): builder
// optimization level 5 only.
//
// Level 0 (which times nothing and takes each layer's highest-priority kernel) gets
// cudnn_graph_precompiled: the heuristic's first engine config among those with precompiled
// kernels. The heuristic's first choice for a fused graph (bias + residual + activation, SiLU) is
// often a runtime-fusion engine (CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) whose plan compiles its
// kernels with NVRTC when built: 0.1-0.3 s per distinct shape the first time a machine (its driver
// JIT cache, ~/.nv/ComputeCache) sees it, so level 0 took 2-3.6 s on TinyYolo on a fresh GPU host
// where ResNet-50 took 1.4 s. The same compilation happens again when an engine is loaded on a
// fresh host. Where no precompiled engine takes the fused graph, the convolution alone is tried
// (kiln's epilogue does the rest), then the runtime-compiled engines after all. Levels 1-5 time
// cudnn_graph, _1, _2 as before (a precompiled engine among them wins when it is faster).
const GraphTactic kGraphTactics[] = {
    {"cudnn_graph_precompiled", 102, 0, 0, -1, 0, true},
    {"cudnn_graph", 101, 0, 0},
    {"cudnn_graph_1", 42, 1, 0},
    {"cudnn_graph_2", 41, 2, 0},
    {"cudnn_graph_3", 39, 3, 5},
    {"cudnn_graph_4", 38, 4, 5},
    {"cudnn_graph_5", 37, 5, 5},
    {"cudnn_graph_6", 36, 6, 5},
    {"cudnn_graph_7", 35, 7, 5},
    {"cudnn_graph_knobs_1", 34, 0, 5, 0},
    {"cudnn_graph_knobs_2", 33, 0, 5, 1},
    {"cudnn_graph_knobs_3", 32, 0, 5, 2},
    {"cudnn_graph_knobs_4", 31, 0, 5, 3},
};

// KILN_CUDNN_GRAPH=1 / =0 turn the tactics on / off; unset, kGraphTacticsByDefault decides. Opt-in
// until the GPU suite passes on the H200: fp16 ResNet-50 engines whose convolutions chose these
// tactics gave outputs off by 10-28% of the output range at batch 32 in session 3 (see
// docs/cuda-backend.md for what changed since).
bool graph_tactics_enabled() {
  const char* v = std::getenv("KILN_CUDNN_GRAPH");
  if (v && *v) return std::string(v) != "0";
  return kGraphTacticsByDefault;
}

bool supports_graph_conv(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return graph_tactics_enabled() && conv_operands_supported(layer, inputs, true);
}

// The knob-variant tactics (cudnn_graph_knobs_N) are offered to the builder only with
// KILN_CUDNN_GRAPH_KNOBS=1. On the H200 (session 28) they matched the CPU reference
// (CudaConvGraph.EveryGraphTacticMatchesCpuReference, which runs them whatever the setting) and
// won 3 of ResNet-50's 31 timed layers at batch 1 by 4-8%, 0.3% of the model, for 15 s more of
// level-5 build: not worth it by default. A kernel made directly (that test, or an engine built
// with the setting on) runs its variant either way.
constexpr bool kKnobVariantsByDefault = false;

bool knob_variants_offered() {
  const char* v = std::getenv("KILN_CUDNN_GRAPH_KNOBS");
  if (v && *v) return std::string(v) != "0";
  return kKnobVariantsByDefault;
}

bool supports_knob_conv(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return knob_variants_offered() && supports_graph_conv(layer, inputs);
}

struct Registrar {
  Registrar() {
    for (const GraphTactic& t : kGraphTactics) {
      const std::string name = t.name;
      const int rank = t.rank, knob_variant = t.knob_variant;
      KernelEntry entry{DeviceType::kCUDA,
                        kLayerConvolution,
                        name,
                        t.priority,
                        t.knob_variant >= 0 ? supports_knob_conv : supports_graph_conv,
                        [name, rank, knob_variant, precompiled = t.precompiled](const Layer& layer) {
                          return std::make_unique<CudnnGraphConvolution>(layer, name, rank, knob_variant, precompiled);
                        }};
      entry.min_optimization_level = t.min_optimization_level;
      entry.max_optimization_level = t.max_optimization_level;
      entry.exports_prepared_state = KILN_CUDNN_GRAPH_DIRECT != 0;
      KernelRegistry::instance().add(std::move(entry));
    }
  }
} registrar;

}  // namespace
}  // namespace kiln::cuda
