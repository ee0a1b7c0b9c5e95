// Runtime side: deserialize an engine, query its I/O, create execution contexts and run.
//
// Thread-safety: an Engine is immutable after deserialization and may be shared by threads;
// each ExecutionContext must be used by one thread at a time (create one per thread). Contexts
// of one engine share no mutable state on the inference path: N threads, each with its own
// context (and, on CUDA, its own stream), run in parallel and give the results one context
// gives alone, bit for bit.
// Memory: tensor addresses given to a context belong to the caller and must be device memory
// of the engine's device (host memory for CPU engines) and stay valid during execution.
// String tensors (DataType::kString, CPU engines only): each element is a StringRef. The
// characters of input strings belong to the caller and must stay valid during execution. The
// characters of output strings belong to the execution context: they stay valid until the next
// execute/enqueue on that context or its destruction (copy them, e.g. with
// HostTensor::from_bytes, to keep them longer).
//
// Serving (docs/runtime.md): a context keeps what it prepared for each set of input shapes it
// has seen (the shapes of every tensor, the memory plan, kernels with their cuDNN/cuBLASLt/oneDNN
// state, host-computed shape values) in a bounded cache, so going back to a seen shape costs a
// lookup; its activation memory is planned for the largest shapes of the profile when the
// profile is selected, so no shape within the profile allocates; CUDA graphs are kept per
// (shapes, I/O addresses), so rotating buffer sets replay cached graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/profile.h"
#include "kiln/types.h"

namespace kiln {

class Engine;
class ExecutionContext;
struct EngineImpl;
struct ContextImpl;
namespace detail {
// The library's access to the objects' internals (src/engine/runtime_access.h); not for users.
struct RuntimeAccess;
}  // namespace detail

enum class TensorIOMode : int32_t { kInput, kOutput };

// Who provides a context's device memory (activations, kernel workspace, per-inference flags).
enum class ContextMemory : int32_t {
  // The context allocates it when it selects an optimization profile, planned for the profile's
  // largest shapes (TensorRT's kSTATIC): shape changes within the profile allocate nothing.
  kStatic,
  // The caller provides it with ExecutionContext::set_device_memory before the first inference
  // (TensorRT's kUSER_MANAGED): at least Engine::device_memory_size(profile) bytes, so that a
  // server can pool it across contexts.
  kUserManaged,
};

// What a context did since it was created (or since reset_stats): what serving costs, and
// whether its caches work. Times are host wall-clock milliseconds spent inside kiln.
struct ContextStats {
  uint64_t inferences = 0;              // enqueue / execute calls that ran
  uint64_t shape_plans_built = 0;       // first inference at a shape: shape inference, memory plan, kernels prepared
  uint64_t shape_plan_hits = 0;         // inferences at a shape whose plan was cached
  uint64_t shape_plans_evicted = 0;     // plans dropped because the cache was full (set_shape_cache_size)
  uint64_t graph_captures = 0;          // CUDA graphs captured (each then instantiated, or used to update one)
  uint64_t graph_instantiations = 0;    // new executable graphs
  uint64_t graph_updates = 0;           // cached graphs of the same shapes updated in place (cudaGraphExecUpdate)
  uint64_t graph_replays = 0;           // inferences launched as one CUDA graph
  uint64_t graph_capture_failures = 0;  // captures that failed (the inference then ran without a graph)
  uint64_t plain_inferences = 0;        // inferences launched layer by layer
  uint64_t device_allocations = 0;      // allocations the context made (memory, per-shape buffers), kernels excluded
  uint64_t thread_reductions = 0;       // CPU: times the thread count was halved because the cores were shared
  uint64_t thread_restorations = 0;     // CPU: times it was doubled again once they were free
  double shape_plan_ms = 0;             // building shape plans
  double capture_ms = 0;                // capturing graphs (enqueueing every layer under capture)
  double instantiate_ms = 0;            // instantiating graphs
  double update_ms = 0;                 // updating graphs
};

struct TensorInfo {
  std::string name;
  TensorIOMode mode = TensorIOMode::kInput;
  DataType type = DataType::kFloat32;
  Dims dims;  // kDynamic where the engine accepts several extents
  TensorFormat format = TensorFormat::kLinear;
};

// One layer's row of a context's profile (ExecutionContext::set_profiling).
struct LayerTiming {
  std::string name, type;
  std::string kernel;  // the tactic that ran it ("elided" when it never launched)
  int64_t runs = 0;
  int64_t elided_runs = 0;  // runs in which it was an elided concatenation (no kernel)
  double total_ms = 0;      // host wall-clock, the stream synchronized after the layer
};

class Runtime {
 public:
  // Parses and validates engine bytes; throws kiln::EngineFormatError for corrupt, truncated or
  // foreign data and kiln::Error for engines that cannot run here (missing device, unknown
  // layer kernels). `source` names the file in messages.
  std::shared_ptr<Engine> deserialize(const void* data, size_t size, const std::string& source = "<memory>");
  std::shared_ptr<Engine> deserialize_file(const std::string& path);

  // Engines that embed their plugin libraries (BuilderConfig::embed_plugin_libraries): when a
  // plugin the engine needs is not registered, deserialize loads the embedded copy of its
  // library only when this is set, because that runs code from the engine file; otherwise it
  // throws, saying the library is embedded and how to opt in. Default: false.
  void set_allow_embedded_plugins(bool allow) { allow_embedded_plugins_ = allow; }
  bool allow_embedded_plugins() const { return allow_embedded_plugins_; }

  // Engines that carry compiled plans (BuilderConfig::embed_compiled_plans: cuDNN execution plans
  // with the GPU kernels cuDNN compiled for them): deserialize makes them available to the
  // engine's kernels, which then load them instead of building and compiling their plans, only
  // when this is set, because that runs GPU code from the engine file; otherwise they are ignored
  // (the plans are built as without them, and an info line says how to opt in). Set it for
  // engines you built or trust (kiln run / bench --allow-compiled-plans). Default: false.
  void set_allow_compiled_plans(bool allow) { allow_compiled_plans_ = allow; }
  bool allow_compiled_plans() const { return allow_compiled_plans_; }

 private:
  bool allow_embedded_plugins_ = false;
  bool allow_compiled_plans_ = false;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  ~Engine();
  DeviceType device() const;
  const std::vector<TensorInfo>& io_tensors() const;
  // Throws when no I/O tensor has that name.
  const TensorInfo& io_tensor(const std::string& name) const;
  int num_profiles() const;
  const OptimizationProfile& profile(int index) const;
  // Human-readable dump: layers after fusion, chosen kernels, tensors, formats, memory plan.
  std::string describe() const;
  // Activation bytes the memory planner needs at the max shapes of a profile.
  uint64_t activation_peak_bytes(int profile) const;
  // Bytes of device memory a context created with ContextMemory::kUserManaged needs for
  // `profile` (TensorRT's getDeviceMemorySizeForProfile): activations at the profile's largest
  // shapes, the kernels' workspace at its min, opt and max shapes, and kiln's per-inference
  // flags. Computed on the first call for a profile (kernels are prepared at those shapes),
  // then cached. Thread-safe.
  uint64_t device_memory_size(int profile) const;

  // A new context. kStatic: with its own device memory, allocated now for profile 0.
  // kUserManaged: without; give it memory with set_device_memory before the first inference.
  // Thread-safe.
  std::unique_ptr<ExecutionContext> create_execution_context(ContextMemory memory = ContextMemory::kStatic);

 private:
  friend struct detail::RuntimeAccess;
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  EngineImpl& impl() { return *impl_; }
  std::unique_ptr<EngineImpl> impl_;
};

class ExecutionContext {
 public:
  ~ExecutionContext();
  // Selects the optimization profile (default 0); resets input shapes to that profile's opt.
  // Plans activation memory for the profile's largest shapes (kStatic contexts allocate it
  // here) and drops what was prepared for the previous profile.
  void set_optimization_profile(int index);
  int optimization_profile() const;
  // Sets the dims of a dynamic input; throws kiln::Error naming the input, the dims and the
  // profile's [min, max] when out of range or of the wrong rank.
  void set_input_shape(const std::string& name, const Dims& dims);
  // Current dims of any I/O tensor (outputs are inferred from the input shapes). An output
  // with a data-dependent extent (NonZero, NonMaxSuppression, a plugin's size tensor; shown as
  // -1 in Engine::io_tensors) has the dims of the last inference, or its upper bound before
  // the first one: allocate such outputs with max_tensor_shape(). Cheap: shape inference only;
  // kernels are prepared by the first inference at these input dims (on a GPU that may compile
  // cuDNN kernels for seconds), not by a shape query.
  Dims tensor_shape(const std::string& name);
  // The dims to allocate for an I/O tensor: tensor_shape() for ordinary tensors, the upper
  // bound for data-dependent outputs (the kernel writes the actual, smaller tensor compactly
  // at the start of the buffer; read its dims with tensor_shape() after the inference).
  Dims max_tensor_shape(const std::string& name);
  // Binds caller memory to an I/O tensor. Cheap: no re-planning; on CUDA a graph for these
  // shapes and addresses is replayed when cached, else captured once and cached (see
  // set_graph_cache_size).
  void set_tensor_address(const std::string& name, void* data);
  // Address bound to an I/O tensor (null when none).
  void* tensor_address(const std::string& name) const;

  // User-managed device memory (contexts created with ContextMemory::kUserManaged): `size`
  // bytes at `memory` (device memory of the engine's device, host memory for CPU engines,
  // 256-byte aligned) that the context uses for activations, workspace and flags until it is
  // given other memory or destroyed. Throws when size < Engine::device_memory_size(profile) or
  // the context owns its memory. Should a shape need more workspace than reserved (a kernel's
  // algorithm choice can differ between shapes), the context allocates the extra itself and
  // says so once (warning). Takes effect at the next inference; cached CUDA graphs are dropped.
  void set_device_memory(void* memory, uint64_t size);

  // Plans kept for input shapes seen before (default 32, at least 1): each holds the tensor
  // shapes, the memory plan, the kernels prepared for those shapes (cuDNN/cuBLASLt plans,
  // oneDNN primitives) and host-computed values. When full, the least recently used is dropped
  // (its device buffers are freed after the context's work completes). Servers whose batch
  // size or sequence length takes more distinct values than this should raise it.
  void set_shape_cache_size(int plans);
  int shape_cache_size() const;
  // CUDA graphs kept, keyed by (input shapes, I/O addresses) (default 16, 0 = capture anew
  // whenever shapes or addresses change). When full, a new graph of shapes already cached
  // updates the least recently used graph of those shapes in place (cudaGraphExecUpdate),
  // which is cheaper than instantiating; otherwise the least recently used graph is dropped.
  void set_graph_cache_size(int graphs);
  int graph_cache_size() const;

  // Counters of plans, graphs and allocations (see ContextStats).
  ContextStats stats() const;
  void reset_stats();
  // CPU threads for this context's kernels (0, the default: the engine's setting, or when the
  // engine has none, the machine's cores divided among the engine's live contexts, so that
  // contexts running in parallel threads do not oversubscribe the cores). Each context runs its
  // kernels on its own OpenMP thread team. A change takes effect at the next inference; the
  // plans of the other count stay cached. Thread adaptation (below) may run fewer. Throws kiln::Error outside
  // 0..kMaxThreads.
  void set_num_threads(int threads);
  // The thread count the next inference uses (CPU engines; 1 elsewhere).
  int num_threads() const;
  // Thread adaptation (CPU engines; default on, unless, when the context is created, the
  // environment variable KILN_CPU_THREAD_ADAPTATION is 0, off or false, or it is unset and
  // OMP_WAIT_POLICY is passive, under which the signal below does not work): while another
  // process keeps the cores busy, a context whose thread count is over 1 halves it, and doubles it
  // again once the cores are free. The signal is the share of each inference's wall-clock time the
  // calling thread spent on a core, over windows of at least 20 ms of inference time: below 70%
  // halves the count, 90% or more at a reduced count restores it. Each count has its own shape
  // plans (built once, cached). ContextStats counts the changes and num_threads() says the current
  // count. Off: the count stays what set_num_threads / the engine says, and results are the same
  // bits run after run (some kernels split reductions among threads, so two counts may differ in
  // the last bits). Turning it off or on goes back to the configured count.
  void set_thread_adaptation(bool enabled);
  bool thread_adaptation() const;
  // Concatenation elision (default on), decided anew for each set of input shapes: where a
  // Concatenation's inputs can be laid out back to back inside its output (the dims stored
  // outside the axis multiply to 1, e.g. batch 1 for a channel concatenation of linear
  // tensors; every input is an activation of the output's type and format written by a kernel
  // and used once by it; neither an input nor the output is a network input/output; each input
  // starts at a multiple of 256 bytes), their producers write straight into the output and the
  // concatenation runs no kernel. Off: every concatenation copies (the arena may then need
  // more than Engine::activation_peak_bytes). The verbose log says once per shape change which
  // concatenations were elided and why the others were not. The same switch covers reshape
  // elision: a Shuffle that only reshapes a linear activation (no transpose) gives its output the
  // input's memory and runs no kernel (docs/cli.md lists the conditions). Not thread-safe (like
  // the rest of the context); takes effect at the next inference.
  void set_concat_elision(bool enabled);
  bool concat_elision() const;

  // Per-layer timing (like trtexec --dumpProfile). When enabled, execute() adds each layer's
  // wall-clock time (measured after the layer finished; on CUDA the stream is synchronized per
  // layer, so only use it to find slow layers).
  void set_profiling(bool enabled);
  // One line per layer, slowest first: name, type, kernel, runs, total and mean milliseconds, share.
  std::string profile_report() const;
  // The same per layer, in execution order (layers that never ran are left out).
  std::vector<LayerTiming> layer_profile() const;

  // CUDA: run the whole inference as one CUDA graph (like trtexec --useCudaGraph). Graphs are
  // cached per (input shapes, I/O addresses) (set_graph_cache_size). The first inference at a
  // new set of shapes runs without a graph (a warm-up: lazy module loading and the libraries'
  // one-time work stay out of graphs); later ones capture once in thread-local mode (other
  // threads' CUDA calls cannot invalidate it) and replay. By default (automatic) a CUDA context
  // does this whenever it can: not for engines with data-dependent sizes (the host reads each
  // size mid-inference), not while the caller's stream is itself being captured (kiln's work
  // then joins the caller's graph), not while profiling. A capture that fails (a plugin that
  // synchronizes, say) is ended and its error state cleared, and the same call runs without a
  // graph; the context warns once and captures no more for those shapes.
  // set_graph_capture(true) asks for graphs explicitly: enqueue then throws where it cannot
  // capture (the context stays usable); false turns them off (every enqueue launches each
  // layer's kernels).
  void set_graph_capture(bool enabled);
  // Whether enqueue replays a graph when it can (explicitly or automatically).
  bool graph_capture() const;

  // Runs the inference to completion. Throws kiln::Error naming the failing layer, also for
  // invalid data found on the device during the run (check_device_errors).
  void execute();
  // Device engines: throws kiln::Error naming the layer when a kernel found invalid data that
  // only the device could see during the last inference (an index out of range computed by an
  // earlier layer: Gather, GatherElements/ND, the Scatter family). execute() calls it; after
  // enqueue, call it once the stream has completed the inference. No-op on the CPU, whose
  // kernels throw directly.
  void check_device_errors();
  // Queues the inference on `stream` (a cudaStream_t for CUDA engines; null means the context's
  // own stream, never the legacy default stream; ignored on the CPU, where it runs
  // synchronously) and returns. No host synchronization happens inside, except after a layer
  // with a data-dependent output size, whose size is read back before the next layers run.
  void enqueue(void* stream);

 private:
  friend struct detail::RuntimeAccess;
  ExecutionContext(std::shared_ptr<Engine> engine, std::unique_ptr<ContextImpl> impl);
  ContextImpl& impl() { return *impl_; }
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace kiln
