// Kernels: the per-backend implementations of layer types. Each kernel registers itself next
// to its definition with KILN_REGISTER_KERNEL under (device, layer type, tactic name). Every
// CPU layer type has a "reference" tactic: the plain, obviously correct oracle that is never
// removed. Optimized tactics (e.g. "onednn") are added beside it; the builder chooses among
// the tactics whose `supports` accepts the layer, by priority on the CPU and by timing on CUDA.
//
// A Kernel object belongs to one execution context (one thread at a time) and is prepared for
// one set of shapes: a context keeps one prepared kernel per step for each input shape it has
// seen (src/plan/shape_plan.h), made from a prototype per step (another_instance), so that a
// return to a seen shape re-prepares nothing. prepare() may build shape-specific state (cuDNN
// plans, oneDNN primitives); execute() only launches.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"
#include "src/backends/prepared_state.h"

namespace kiln {

// A tensor as a kernel sees it: contiguous in `format`, data in the backend's memory.
struct TensorView {
  DataType type = DataType::kFloat32;
  Dims dims;
  TensorFormat format = TensorFormat::kLinear;
  void* data = nullptr;
  int64_t count() const { return dims.volume(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Shapes/types only (no data): what supports()/prepare()/workspace_size() see.
struct TensorDesc {
  DataType type = DataType::kFloat32;
  Dims dims;
  TensorFormat format = TensorFormat::kLinear;
  bool present = true;                // false for an omitted optional input
  const HostTensor* value = nullptr;  // host value when constant / shape-known, else null
};

struct KernelContext {
  const Layer* layer = nullptr;
  std::vector<TensorView> inputs;  // omitted optional inputs have data == nullptr
  std::vector<TensorView> outputs;
  void* workspace = nullptr;  // never null when workspace_size() > 0
  size_t workspace_size = 0;
  void* stream = nullptr;  // cudaStream_t on CUDA; null on the CPU
  int num_threads = 1;     // CPU threads this kernel may use
  // Owner of the characters of the kString elements the kernel writes (StringRef in the
  // outputs point into it); reset by the runtime at the start of each inference. CPU only;
  // null on other devices, which take no string tensors.
  StringArena* strings = nullptr;
  // Device memory (CUDA): an int32 the kernel sets to non-zero when it finds invalid data that
  // only the device sees (an index out of range computed by an earlier layer). Set by the runtime
  // for kernels whose reports_device_errors() is true, zeroed at the start of each inference and
  // read after it (ExecutionContext::execute / check_device_errors), which then fails naming the
  // layer. May be null (kernel timing at build time): write only when it is not.
  int32_t* device_error = nullptr;
};

// The extents one input or output of a layer takes over an optimization profile (the shapes at
// the profile's min, opt and max input dims; min/max element-wise over the three), with its
// type and format.
struct TensorRange {
  DataType type = DataType::kFloat32;
  TensorFormat format = TensorFormat::kLinear;
  Dims min, opt, max;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Called once per optimization profile before the prepare() calls of that profile: by the
  // builder for every profile, and when an execution context selects a profile
  // (src/plan/kernel_config.h). Most kernels ignore it;
  // the plugin kernel hands it to Plugin::configure.
  virtual void configure_profile(const Layer& layer, const std::vector<TensorRange>& inputs,
                                 const std::vector<TensorRange>& outputs) {
    (void)layer;
    (void)inputs;
    (void)outputs;
  }
  // Called whenever input shapes change (before execute). May cache primitives.
  virtual void prepare(const Layer& layer, const std::vector<TensorDesc>& inputs,
                       const std::vector<TensorDesc>& outputs, int num_threads) {
    (void)layer;
    (void)inputs;
    (void)outputs;
    (void)num_threads;
  }
  // Scratch bytes needed for these shapes (called after prepare).
  virtual size_t workspace_size() const { return 0; }
  // Whether execute() may set KernelContext::device_error for these shapes (called after prepare).
  virtual bool reports_device_errors() const { return false; }
  // Runs the layer. Throws kiln::Error on failure (the runtime adds the layer name).
  virtual void execute(const KernelContext& ctx) = 0;
  // A new kernel object for the same layer, already configured for the same profile, to be
  // prepared for other shapes. Null (the default): the runtime makes a fresh one with the
  // registry's factory and configures it. Kernels whose objects own state that does not depend
  // on shapes (a plugin object and its initialize()) share it with their instances.
  virtual std::unique_ptr<Kernel> another_instance() const { return nullptr; }
  // What the last prepare() built that a later prepare() for the same shapes, in another process
  // on the same kind of device, can load instead of building (src/backends/prepared_state.h):
  // the builder stores it in the engine for the chosen kernels of entries that set
  // KernelEntry::exports_prepared_state. Empty (the default): nothing worth carrying.
  virtual std::vector<PreparedState> prepared_states() const { return {}; }
};

using KernelSupportsFn = std::function<bool(const Layer&, const std::vector<TensorDesc>& inputs)>;
using KernelFactory = std::function<std::unique_ptr<Kernel>(const Layer&)>;

struct KernelEntry {
  DeviceType device = DeviceType::kCPU;
  std::string layer_type;
  std::string tactic;         // "reference", "onednn", "cudnn", ...
  int priority = 0;           // higher wins on the CPU; reference is 0
  KernelSupportsFn supports;  // null: supports everything the schema allows
  KernelFactory create;
  // The lowest BuilderConfig::optimization_level at which the builder tries this kernel: 0 for
  // most; 5 for those that are slow to try and rarely win (more library heuristic results).
  // A kernel with a level above 0 must not be the only one for its layer type.
  int min_optimization_level = 0;
  // The input whose memory the kernel may write output 0 into (it reads every element of that
  // input before writing the same element of the output, and no other), -1 for none. Where the
  // input is read by no later layer and matches the output in type, format and size, the planner
  // gives both one buffer (ExecutionPlan's in-place outputs), as it does for plugins that declare
  // Plugin::aliased_input: e.g. a convolution adding a residual input writes over it (no copy of
  // the residual into the output first).
  int in_place_input = -1;
  // (After in_place_input: registrations initialize the fields above by position.)
  // The highest level at which the builder tries it: 5 for most; 0 for a kernel that suits level
  // 0's untimed choice only (cudnn_graph_precompiled: an engine that builds without compiling
  // kernels, where levels 1-5 time cuDNN's first choices). Whatever the levels, a kernel named by
  // an engine file is found by its name when the engine is loaded.
  int max_optimization_level = 5;
  // Whether the builder asks this kernel for its prepared states (Kernel::prepared_states) at the
  // profiles' points, to store them in the engine (BuilderConfig::embed_compiled_plans).
  bool exports_prepared_state = false;
  // Whether the builder tries it at `level`.
  bool offered_at(int level) const { return min_optimization_level <= level && level <= max_optimization_level; }
};

class KernelRegistry {
 public:
  static KernelRegistry& instance();
  void add(KernelEntry entry);  // throws on duplicate (device, type, tactic)
  // All tactics for a device and layer type, highest priority first.
  std::vector<const KernelEntry*> find(DeviceType device, const std::string& layer_type) const;
  const KernelEntry* find(DeviceType device, const std::string& layer_type, const std::string& tactic) const;

 private:
  std::map<std::string, std::vector<KernelEntry>> entries_;  // key: "<device>/<type>"
};

struct KernelRegistrar {
  explicit KernelRegistrar(KernelEntry entry) { KernelRegistry::instance().add(std::move(entry)); }
};

#define KILN_KERNEL_CONCAT_INNER(a, b) a##b
#define KILN_KERNEL_CONCAT(a, b) KILN_KERNEL_CONCAT_INNER(a, b)
// Usage: KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerSoftMax, "reference", 0, nullptr,
//            [](const Layer&) { return std::make_unique<SoftMaxRef>(); }});
#define KILN_REGISTER_KERNEL(...) \
  static ::kiln::KernelRegistrar KILN_KERNEL_CONCAT(kiln_kernel_registrar_, __LINE__)(__VA_ARGS__)

// Helper for simple stateless kernels written as a function.
class FunctionKernel : public Kernel {
 public:
  using Fn = std::function<void(const KernelContext&)>;
  explicit FunctionKernel(Fn fn) : fn_(std::move(fn)) {}
  void execute(const KernelContext& ctx) override { fn_(ctx); }

 private:
  Fn fn_;
};

inline KernelFactory function_kernel(FunctionKernel::Fn fn) {
  return [fn](const Layer&) { return std::make_unique<FunctionKernel>(fn); };
}

}  // namespace kiln
