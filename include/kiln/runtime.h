// Runtime side: deserialize an engine, query its I/O, create execution contexts and run.
//
// Thread-safety: an Engine is immutable after deserialization and may be shared by threads;
// each ExecutionContext must be used by one thread at a time (create one per thread).
// Memory: tensor addresses given to a context belong to the caller and must be device memory
// of the engine's device (host memory for CPU engines) and stay valid during execution.
// String tensors (DataType::kString, CPU engines only): each element is a StringRef. The
// characters of input strings belong to the caller and must stay valid during execution. The
// characters of output strings belong to the execution context: they stay valid until the next
// execute/enqueue on that context or its destruction (copy them, e.g. with
// HostTensor::from_bytes, to keep them longer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/types.h"

namespace kiln {

class Engine;
class ExecutionContext;
struct EngineImpl;
struct ContextImpl;

enum class TensorIOMode : int32_t { kInput, kOutput };

struct TensorInfo {
  std::string name;
  TensorIOMode mode = TensorIOMode::kInput;
  DataType type = DataType::kFloat32;
  Dims dims;  // kDynamic where the engine accepts several extents
  TensorFormat format = TensorFormat::kLinear;
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

 private:
  bool allow_embedded_plugins_ = false;
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

  // A new context with its own activation memory. Thread-safe.
  std::unique_ptr<ExecutionContext> create_execution_context();

  // Internal.
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  EngineImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<EngineImpl> impl_;
};

class ExecutionContext {
 public:
  ~ExecutionContext();
  // Selects the optimization profile (default 0); resets input shapes to that profile's opt.
  void set_optimization_profile(int index);
  int optimization_profile() const;
  // Sets the dims of a dynamic input; throws kiln::Error naming the input, the dims and the
  // profile's [min, max] when out of range or of the wrong rank.
  void set_input_shape(const std::string& name, const Dims& dims);
  // Current dims of any I/O tensor (outputs are inferred from the input shapes). An output
  // with a data-dependent extent (NonZero, NonMaxSuppression, a plugin's size tensor; shown as
  // -1 in Engine::io_tensors) has the dims of the last inference, or its upper bound before
  // the first one: allocate such outputs with max_tensor_shape().
  Dims tensor_shape(const std::string& name);
  // The dims to allocate for an I/O tensor: tensor_shape() for ordinary tensors, the upper
  // bound for data-dependent outputs (the kernel writes the actual, smaller tensor compactly
  // at the start of the buffer; read its dims with tensor_shape() after the inference).
  Dims max_tensor_shape(const std::string& name);
  // Binds caller memory to an I/O tensor.
  void set_tensor_address(const std::string& name, void* data);
  // CPU threads for this context's kernels (0: the engine's setting).
  void set_num_threads(int threads);
  // Concatenation elision (default on), decided anew for each set of input shapes: where a
  // Concatenation's inputs can be laid out back to back inside its output (the dims stored
  // outside the axis multiply to 1, e.g. batch 1 for a channel concatenation of linear
  // tensors; every input is an activation of the output's type and format written by a kernel
  // and used once by it; neither an input nor the output is a network input/output; each input
  // starts at a multiple of 256 bytes), their producers write straight into the output and the
  // concatenation runs no kernel. Off: every concatenation copies (the arena may then need
  // more than Engine::activation_peak_bytes). The verbose log says once per shape change which
  // concatenations were elided and why the others were not. Not thread-safe (like the rest of
  // the context); takes effect at the next inference.
  void set_concat_elision(bool enabled);
  bool concat_elision() const;

  // Per-layer timing (like trtexec --dumpProfile). When enabled, execute() adds each layer's
  // wall-clock time (measured after the layer finished; on CUDA the stream is synchronized per
  // layer, so only use it to find slow layers).
  void set_profiling(bool enabled);
  // One line per layer, slowest first: name, type, kernel, runs, total and mean milliseconds, share.
  std::string profile_report() const;

  // CUDA: capture the whole inference as one CUDA graph on the first enqueue and replay it on
  // later ones (like trtexec --useCudaGraph). The graph is re-captured when input shapes or
  // tensor addresses change. By default (automatic) a CUDA context does this whenever it can:
  // not for engines with data-dependent sizes (the host reads each size mid-inference), not
  // while the caller's stream is itself being captured (kiln's work then joins the caller's
  // graph), not while profiling; if a capture fails (a plugin that synchronizes, say), the
  // context warns once and runs without graphs from then on. The first enqueue runs the
  // inference once, synchronizes and then captures, so lazy one-time work stays out of the graph.
  // set_graph_capture(true) asks for graphs explicitly: enqueue then throws where it cannot
  // capture; false turns them off (every enqueue launches each layer's kernels).
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

  // Internal.
  ExecutionContext(std::shared_ptr<Engine> engine, std::unique_ptr<ContextImpl> impl);
  ContextImpl& impl() { return *impl_; }

 private:
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace kiln
