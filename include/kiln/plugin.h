// Custom layers (plugins). A plugin answers the builder's questions (outputs, types, symbolic
// output dims, supported type/format combinations, workspace) and runs its kernel; kiln checks
// every answer. A PluginCreator makes plugins from typed fields; the engine stores a plugin's
// fields (or its own bytes, wrapped with size and checksum) and re-creates it through the
// creator when the engine is loaded. See docs/writing-a-plugin.md.
//
// Thread-safety: a plugin object is used by one thread at a time. kiln clones one per
// execution context; creators and the registry are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/types.h"

namespace kiln {

// The version of the plugin interface below (the classes' layouts and virtual methods). A
// library registers its creators with the version of the header it was compiled against
// (KILN_REGISTER_PLUGIN passes it), and kiln refuses creators of another version, naming both,
// before it calls anything in them: rebuild the library against this kiln. History: 1 (kiln
// 0.1.0), 2 (ExprBuilder::require_equal/broadcast, PluginExecContext::fail,
// PluginCreator::example_fields, int32/float64 field getters), 3 (Plugin::aliased_input), 4
// (calls go through the library's own noexcept entry points, detail::PluginEntryPoints).
inline constexpr uint32_t kPluginInterfaceVersion = 4;

}  // namespace kiln

// The same version as an extern "C" symbol of every library (and program) compiled with this
// header: load_plugin_library reads a library's own copy and refuses a library of another
// version, naming both. (A weak definition: one per library, whatever the number of files.)
extern "C" __attribute__((weak, visibility("default"))) const uint32_t kiln_plugin_interface_version =
    kiln::kPluginInterfaceVersion;

namespace kiln {

// ---- symbolic dimensions ------------------------------------------------------------------

enum class DimOp : int32_t { kSum, kSub, kProd, kFloorDiv, kCeilDiv, kMin, kMax, kEqual, kLess };

// A node of a dimension expression: a constant, an input extent, a data-dependent size or an
// operation. Owned by the ExprBuilder that made it; valid while the builder lives.
class DimExpr {
 public:
  bool is_constant() const { return kind_ == Kind::kConstant; }
  int64_t constant_value() const { return value_; }
  // "N", "(N*4)", "3", "input0[2]" ... for messages and `kiln plugin check`.
  std::string to_string() const;
  // Value for concrete input dims (and size-tensor values, and the host values of shape inputs:
  // values[i] is input i's value, or null when it is not known).
  int64_t evaluate(const std::vector<Dims>& inputs, const std::vector<int64_t>& sizes = {},
                   const std::vector<const HostTensor*>& values = {}) const;

 private:
  friend class ExprBuilder;
  enum class Kind { kConstant, kInput, kSize, kOp, kValue } kind_ = Kind::kConstant;
  int64_t value_ = 0;         // constant; upper bound for kSize; element index for kValue
  int input_ = 0, axis_ = 0;  // kInput; input_ is the size index for kSize, the input for kValue
  DimOp op_ = DimOp::kSum;
  const DimExpr* a_ = nullptr;
  const DimExpr* b_ = nullptr;
};

// The dims of one tensor as expressions.
struct DimsExprs {
  std::vector<const DimExpr*> d;
  int rank() const { return static_cast<int>(d.size()); }
};

class ExprBuilder {
 public:
  ExprBuilder();
  ~ExprBuilder();
  ExprBuilder(const ExprBuilder&) = delete;
  ExprBuilder& operator=(const ExprBuilder&) = delete;
  const DimExpr* constant(int64_t value);
  const DimExpr* operation(DimOp op, const DimExpr& a, const DimExpr& b);
  // A data-dependent size (NonZero-, NMS-like). `size_index` is the index of one of the
  // plugin's own outputs, an int64 scalar (dims {}) into which enqueue writes the actual
  // extent; `upper_bound` sizes the memory. enqueue gets the output with the upper bound and
  // writes it compactly with the actual extent; the runtime reads the size after enqueue and
  // gives later layers the actual dims. See docs/writing-a-plugin.md.
  const DimExpr* size_tensor(int size_index, int64_t upper_bound);
  // The size tensors declared so far: (size_index, upper_bound) pairs. Used by kiln.
  std::vector<std::pair<int, int64_t>> size_tensors() const;

  // Declares that two extents must be equal (two inputs' batch, say). Checked by kiln whenever
  // the dims are known: at once when both are constants, else at shape inference for every
  // shape (build and run time); a mismatch fails naming the layer, both expressions and their
  // values. Returns `a`.
  const DimExpr* require_equal(const DimExpr& a, const DimExpr& b);
  // Numpy-style broadcasting of two inputs' dims (aligned at the last axis): an extent that is
  // the constant 1 takes the other's, equal expressions stay, otherwise the result is max(a, b)
  // with the check that a == b or one of them is 1 (as require_equal, naming the layer).
  DimsExprs broadcast(const DimsExprs& a, const DimsExprs& b);

  // A shape input (TensorRT's shape tensors): element `index` (row-major) of input `input`'s
  // integer value, known on the host whenever shapes are inferred (a constant, or shape
  // arithmetic on the inputs' dims, as exporters write for reshape targets). kiln evaluates it
  // for every shape; an input whose value only a kernel computes fails naming the layer.
  const DimExpr* input_value(int input, int64_t index);

  // Used by kiln: extent `axis` of input `input` (when the extent is fixed by the network, kiln
  // passes constant(extent) instead, so that is_constant() tells fixed dims from dynamic ones).
  const DimExpr* input_dim(int input, int axis);
  // Used by kiln: the checks require_equal and broadcast declared.
  struct Check {
    const DimExpr* a = nullptr;
    const DimExpr* b = nullptr;
    bool broadcast = false;  // a == b, or a == 1, or b == 1
  };
  const std::vector<Check>& checks() const { return checks_; }

 private:
  std::vector<std::unique_ptr<DimExpr>> nodes_;
  std::vector<Check> checks_;
};

// ---- tensors as plugins see them ----------------------------------------------------------

struct PluginTensorDesc {
  DataType type = DataType::kFloat32;
  TensorFormat format = TensorFormat::kLinear;
  Dims dims;  // concrete in enqueue/workspace_size; may hold kDynamic in configure
};

struct DynamicPluginTensorDesc {
  PluginTensorDesc desc;  // dims with kDynamic where the profile allows a range
  Dims min, opt, max;
};

// ---- fields -------------------------------------------------------------------------------
//
// Plugin fields and layer attributes share one type system, that of types.h: a field's value is
// an AttrValue, and it is what the engine stores on the Plugin layer, as the attribute
// "field.<name>" (docs/engine-format.md). PluginField is that value in the form it crosses the
// plugin boundary in (the layout of interface version 4, kept so that plugins built against it
// keep working), where it also fixes the element width the plugin reads: PluginFieldType is the
// attribute type plus that width. value() and from_value() convert, exactly:
//   kFloat32, kFloat64 <-> AttrType::kFloats (float32 values widen to double and back exactly)
//   kInt32,   kInt64   <-> AttrType::kInts   (int32 values widen to int64; back with a range check)
//   kString            <-> AttrType::kString
//   kTensor            <-> AttrType::kTensor
// The typed members (f32, f64, i32, i64, str, tensor) and the factories (float32(), int64(), ...)
// are the compatibility names of the same values; code written against them stays valid.

enum class PluginFieldType : int32_t { kFloat32, kFloat64, kInt32, kInt64, kString, kTensor };
const char* to_string(PluginFieldType type);
// The attribute type that the values of a field of `type` take (the table above).
AttrType attr_type_of(PluginFieldType type);

// One field value: typed arrays (a scalar is count 1); strings; tensors.
struct PluginField {
  std::string name;
  PluginFieldType type = PluginFieldType::kFloat32;
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::string str;
  HostTensor tensor;
  int64_t count() const;

  static PluginField float32(std::string name, std::vector<float> v);
  static PluginField int64(std::string name, std::vector<int64_t> v);
  static PluginField int32(std::string name, std::vector<int32_t> v);
  static PluginField float64(std::string name, std::vector<double> v);
  static PluginField string(std::string name, std::string v);
  static PluginField tensor_value(std::string name, HostTensor v);

  // The value as a layer attribute value, of type attr_type_of(type).
  AttrValue value() const;
  // A field of `type` holding `value`, which must have type attr_type_of(type); throws
  // kiln::Error naming the field when it has another type or an int64 value does not fit int32.
  static PluginField from_value(std::string name, PluginFieldType type, const AttrValue& value);
};

class PluginFieldCollection {
 public:
  void add(PluginField field);
  const PluginField* find(const std::string& name) const;
  const std::vector<PluginField>& all() const { return fields_; }
  // Typed access to the first value, with a clear error (naming the field) when it is absent or
  // of another kind. Integer getters take int32 and int64 fields alike (an int64 value that does
  // not fit int32 is an error), float getters float32 and float64 alike.
  float get_float32(const std::string& name) const;
  double get_float64(const std::string& name) const;
  int32_t get_int32(const std::string& name) const;
  int64_t get_int64(const std::string& name) const;
  std::string get_string(const std::string& name) const;

 private:
  std::vector<PluginField> fields_;
};

// One entry of a creator's field schema.
struct PluginFieldSpec {
  std::string name;
  PluginFieldType type = PluginFieldType::kFloat32;
  int64_t count = 1;      // -1: any count
  bool required = false;  // when false, `default_value` is used if absent
  PluginField default_value;
  std::string description;
};

// ---- execution ----------------------------------------------------------------------------

// What enqueue gets besides the tensors. On CUDA `stream` is the cudaStream_t to launch on (never
// the legacy default stream, never synchronize the device); on the CPU it is null and
// `num_threads` says how many threads the kernel may use. A failing enqueue can say why:
// `return exec.fail("indices must be sorted");` puts the message into the error kiln raises
// (with the layer's name), and returns a non-zero code.
struct PluginExecContext {
  DeviceType device = DeviceType::kCPU;
  void* stream = nullptr;
  int num_threads = 1;
  std::string* message = nullptr;  // set by kiln; use fail()
  int fail(const std::string& why, int code = 1) const {
    if (message) *message = why;
    return code == 0 ? 1 : code;
  }
};

class PluginCreator;
namespace detail {
class PluginEntryPoints;
template <class Local>
class LibraryEntryPoints;
}  // namespace detail

class Plugin {
 public:
  virtual ~Plugin() = default;

  // Identity.
  virtual std::string type() const = 0;
  virtual std::string version() const { return "1"; }
  virtual std::string plugin_namespace() const { return ""; }

  // Number of outputs, and their data types given the input types.
  virtual int num_outputs() const = 0;
  virtual std::vector<DataType> output_types(const std::vector<DataType>& input_types) const = 0;
  // Dims of output `index` as expressions of the input dims (inputs[i].d[j] are the extents).
  virtual DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const = 0;

  // Whether tensor `pos` (inputs first, then outputs) may have in_out[pos]'s type and format,
  // given the choices already made for positions < pos. Asked for the device returned by
  // target_device().
  virtual bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                           int num_outputs) const = 0;

  // Once per optimization profile, with the min/opt/max of every tensor (desc.dims: the opt dims
  // with kDynamic where min != max), before workspace_size: at build time for every profile, and
  // on each plugin object when its execution context selects a profile. Throwing fails the build
  // or the profile selection with the layer's name. (Run outside any profile, e.g. evaluated on
  // the host during shape inference, a plugin is configured for its concrete dims, min = max.)
  virtual void configure(const std::vector<DynamicPluginTensorDesc>& inputs,
                         const std::vector<DynamicPluginTensorDesc>& outputs) {}
  // Scratch bytes needed for these concrete shapes; kiln provides that much (never null if > 0).
  virtual size_t workspace_size(const std::vector<PluginTensorDesc>& inputs,
                                const std::vector<PluginTensorDesc>& outputs) const {
    return 0;
  }
  // Runs the layer. Return 0 on success; any other value fails the inference with the layer's
  // name and the code (and the message given to exec.fail, when it was used).
  virtual int enqueue(const std::vector<PluginTensorDesc>& input_descs,
                      const std::vector<PluginTensorDesc>& output_descs, const void* const* inputs,
                      void* const* outputs, void* workspace, const PluginExecContext& exec) = 0;

  // Several implementations (TensorRT's getValidTactics / setTactic). tactics(): the names of
  // this plugin's implementations for these tensors (type and format as chosen; dims at the
  // first profile's opt point); empty (the default): one implementation. With more than one,
  // the builder runs each on the build device at the layer's real shapes (the kernel's device
  // time on CUDA, host time on the CPU) and keeps the fastest; the choice is stored in the
  // engine (and the timing cache). set_tactic(name) is called on every plugin object kiln makes
  // for the layer before any other call that depends on it (workspace_size, enqueue).
  virtual std::vector<std::string> tactics(const std::vector<PluginTensorDesc>& inputs,
                                           const std::vector<PluginTensorDesc>& outputs) const {
    return {};
  }
  virtual void set_tactic(const std::string& name) {}

  // In-place outputs (TensorRT's getAliasedInput): the index of the input whose memory output
  // `output_index` may reuse, or -1 (the default). kiln reuses it when it can: the input is an
  // activation of the same type, format and byte size, written by an earlier layer, read by no
  // later layer, neither a network input nor a network output, and the network has no
  // data-dependent sizes; then enqueue gets the same address for that input and that output.
  // Otherwise they are separate buffers, so enqueue must be right either way (read an element
  // before writing it, as element-wise kernels do). Asked once, when the layer is added; an
  // index out of range, or an input declared twice, fails naming the layer.
  virtual int aliased_input(int output_index) const { return -1; }

  // Lifecycle: clone for each execution context; initialize/terminate around its use there.
  virtual std::unique_ptr<Plugin> clone() const = 0;
  virtual int initialize() { return 0; }
  virtual void terminate() {}

  // Serialization by fields (preferred): the values that re-create this plugin through its
  // creator's create().
  virtual PluginFieldCollection fields() const = 0;
  // Optional own bytes. When non-empty, the engine stores them (with size and checksum) and
  // re-creates the plugin with the creator's deserialize().
  virtual std::vector<uint8_t> serialize() const { return {}; }

  // Set by kiln before any builder question.
  DeviceType target_device() const { return device_; }
  void set_target_device(DeviceType device) { device_ = device; }

  // Used by kiln: the entry points of the library whose creator made this plugin (set when a
  // registered creator creates, deserializes or clones it); null for an object the program
  // constructed itself, which kiln calls through its own.
  const detail::PluginEntryPoints* entry_points() const { return entry_points_; }

 private:
  template <class Local>
  friend class detail::LibraryEntryPoints;
  DeviceType device_ = DeviceType::kCPU;
  const detail::PluginEntryPoints* entry_points_ = nullptr;
};

class PluginCreator {
 public:
  virtual ~PluginCreator() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const { return "1"; }
  virtual std::string plugin_namespace() const { return ""; }
  virtual std::vector<PluginFieldSpec> field_schema() const = 0;
  // Creates a plugin from fields already checked against field_schema() (defaults filled in).
  virtual std::unique_ptr<Plugin> create(const std::string& layer_name, const PluginFieldCollection& fields) const = 0;
  // Re-creates a plugin from its own bytes (for plugins whose serialize() is non-empty).
  virtual std::unique_ptr<Plugin> deserialize(const std::string& layer_name, const void* data, size_t size) const;
  // Values for required fields that `kiln plugin check` (and tests) use when the user gives none
  // (`--fields` overrides them). Without them, a required field without a value is an error
  // that names it and --fields.
  virtual PluginFieldCollection example_fields() const { return {}; }
};

// ---- the library boundary ---------------------------------------------------------------
//
// kiln never calls a plugin's or a creator's methods itself, and no exception crosses between
// kiln and a plugin library. Every call goes through the entry points of the library that
// registered the creator (detail::PluginEntryPoints): noexcept functions that
// KILN_REGISTER_PLUGIN compiles into that library, which call the method, catch anything it
// throws (a std::exception, or anything else) and hand kiln a PluginStatus. A plugin may
// therefore throw from any method, also through kiln's own helpers that throw (the field
// getters, ExprBuilder), and kiln reports the failure with the layer's name, the method and the
// message. Destructors must not throw. The classes cross the boundary as C++ types
// (std::string, std::vector): build the library with a compiler whose C++ library is
// compatible with kiln's (the same GCC/Clang family and libstdc++), and against the same
// include/kiln (the interface version above).

// The outcome of a call into a plugin library: ok, or failed with a message.
class PluginStatus {
 public:
  PluginStatus() = default;
  static PluginStatus failure(std::string message) {
    PluginStatus s;
    s.failed_ = true;
    s.message_ = message.empty() ? std::string("failed without a message") : std::move(message);
    return s;
  }
  bool ok() const noexcept { return !failed_; }
  const std::string& message() const noexcept { return message_; }

 private:
  bool failed_ = false;
  std::string message_;
};

namespace detail {

// The calls kiln makes into a plugin library. Results come back through the out-parameters,
// which are only written when the status is ok. Implemented by LibraryEntryPoints below,
// instantiated in each registering library.
class PluginEntryPoints {
 public:
  // Creators.
  virtual PluginStatus creator_identity(const PluginCreator& c, std::string* name, std::string* version,
                                        std::string* plugin_namespace) const noexcept = 0;
  virtual PluginStatus field_schema(const PluginCreator& c, std::vector<PluginFieldSpec>* out) const noexcept = 0;
  virtual PluginStatus example_fields(const PluginCreator& c, PluginFieldCollection* out) const noexcept = 0;
  virtual PluginStatus create(const PluginCreator& c, const std::string& layer_name,
                              const PluginFieldCollection& fields, std::unique_ptr<Plugin>* out) const noexcept = 0;
  virtual PluginStatus deserialize(const PluginCreator& c, const std::string& layer_name, const void* data, size_t size,
                                   std::unique_ptr<Plugin>* out) const noexcept = 0;
  // Plugins.
  virtual PluginStatus identity(const Plugin& p, std::string* type, std::string* version,
                                std::string* plugin_namespace) const noexcept = 0;
  virtual PluginStatus num_outputs(const Plugin& p, int* out) const noexcept = 0;
  virtual PluginStatus output_types(const Plugin& p, const std::vector<DataType>& inputs,
                                    std::vector<DataType>* out) const noexcept = 0;
  virtual PluginStatus output_dims(const Plugin& p, int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs,
                                   DimsExprs* out) const noexcept = 0;
  virtual PluginStatus supports_format_combination(const Plugin& p, int pos,
                                                   const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                                   int num_outputs, bool* out) const noexcept = 0;
  virtual PluginStatus configure(Plugin& p, const std::vector<DynamicPluginTensorDesc>& inputs,
                                 const std::vector<DynamicPluginTensorDesc>& outputs) const noexcept = 0;
  virtual PluginStatus workspace_size(const Plugin& p, const std::vector<PluginTensorDesc>& inputs,
                                      const std::vector<PluginTensorDesc>& outputs, size_t* out) const noexcept = 0;
  // A non-zero return of Plugin::enqueue is a failure, with the message given to exec.fail (or
  // the code).
  virtual PluginStatus enqueue(Plugin& p, const std::vector<PluginTensorDesc>& input_descs,
                               const std::vector<PluginTensorDesc>& output_descs, const void* const* inputs,
                               void* const* outputs, void* workspace, const PluginExecContext& exec) const noexcept = 0;
  virtual PluginStatus tactics(const Plugin& p, const std::vector<PluginTensorDesc>& inputs,
                               const std::vector<PluginTensorDesc>& outputs,
                               std::vector<std::string>* out) const noexcept = 0;
  virtual PluginStatus set_tactic(Plugin& p, const std::string& name) const noexcept = 0;
  virtual PluginStatus aliased_input(const Plugin& p, int output_index, int* out) const noexcept = 0;
  virtual PluginStatus clone(const Plugin& p, std::unique_ptr<Plugin>* out) const noexcept = 0;
  // A non-zero return of Plugin::initialize is a failure naming the code.
  virtual PluginStatus initialize(Plugin& p) const noexcept = 0;
  virtual PluginStatus terminate(Plugin& p) const noexcept = 0;
  virtual PluginStatus fields(const Plugin& p, PluginFieldCollection* out) const noexcept = 0;
  virtual PluginStatus serialize(const Plugin& p, std::vector<uint8_t>* out) const noexcept = 0;

 protected:
  ~PluginEntryPoints() = default;
};

// The entry points, compiled into whichever library instantiates them: `Local` is a type of
// that library with internal linkage (KILN_REGISTER_PLUGIN declares one in an unnamed
// namespace), so this code, and its catch clauses, are the library's own copy.
template <class Local>
class LibraryEntryPoints final : public PluginEntryPoints {
 public:
  static const PluginEntryPoints& instance() {
    static const LibraryEntryPoints entry_points;
    return entry_points;
  }
  PluginStatus creator_identity(const PluginCreator& c, std::string* name, std::string* version,
                                std::string* ns) const noexcept override {
    return guarded([&] {
      std::string n = c.name(), v = c.version(), s = c.plugin_namespace();
      *name = std::move(n);
      *version = std::move(v);
      *ns = std::move(s);
    });
  }
  PluginStatus field_schema(const PluginCreator& c, std::vector<PluginFieldSpec>* out) const noexcept override {
    return guarded([&] { *out = c.field_schema(); });
  }
  PluginStatus example_fields(const PluginCreator& c, PluginFieldCollection* out) const noexcept override {
    return guarded([&] { *out = c.example_fields(); });
  }
  PluginStatus create(const PluginCreator& c, const std::string& layer_name, const PluginFieldCollection& fields,
                      std::unique_ptr<Plugin>* out) const noexcept override {
    return guarded([&] { *out = adopt(c.create(layer_name, fields)); });
  }
  PluginStatus deserialize(const PluginCreator& c, const std::string& layer_name, const void* data, size_t size,
                           std::unique_ptr<Plugin>* out) const noexcept override {
    return guarded([&] { *out = adopt(c.deserialize(layer_name, data, size)); });
  }
  PluginStatus identity(const Plugin& p, std::string* type, std::string* version,
                        std::string* ns) const noexcept override {
    return guarded([&] {
      std::string t = p.type(), v = p.version(), s = p.plugin_namespace();
      *type = std::move(t);
      *version = std::move(v);
      *ns = std::move(s);
    });
  }
  PluginStatus num_outputs(const Plugin& p, int* out) const noexcept override {
    return guarded([&] { *out = p.num_outputs(); });
  }
  PluginStatus output_types(const Plugin& p, const std::vector<DataType>& inputs,
                            std::vector<DataType>* out) const noexcept override {
    return guarded([&] { *out = p.output_types(inputs); });
  }
  PluginStatus output_dims(const Plugin& p, int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs,
                           DimsExprs* out) const noexcept override {
    return guarded([&] { *out = p.output_dims(index, inputs, exprs); });
  }
  PluginStatus supports_format_combination(const Plugin& p, int pos, const std::vector<PluginTensorDesc>& in_out,
                                           int num_inputs, int num_outputs, bool* out) const noexcept override {
    return guarded([&] { *out = p.supports_format_combination(pos, in_out, num_inputs, num_outputs); });
  }
  PluginStatus configure(Plugin& p, const std::vector<DynamicPluginTensorDesc>& inputs,
                         const std::vector<DynamicPluginTensorDesc>& outputs) const noexcept override {
    return guarded([&] { p.configure(inputs, outputs); });
  }
  PluginStatus workspace_size(const Plugin& p, const std::vector<PluginTensorDesc>& inputs,
                              const std::vector<PluginTensorDesc>& outputs, size_t* out) const noexcept override {
    return guarded([&] { *out = p.workspace_size(inputs, outputs); });
  }
  PluginStatus enqueue(Plugin& p, const std::vector<PluginTensorDesc>& input_descs,
                       const std::vector<PluginTensorDesc>& output_descs, const void* const* inputs,
                       void* const* outputs, void* workspace, const PluginExecContext& exec) const noexcept override {
    int code = 0;
    PluginStatus s = guarded([&] { code = p.enqueue(input_descs, output_descs, inputs, outputs, workspace, exec); });
    if (!s.ok() || code == 0) return s;
    return code_failure("returned code", code, exec.message);
  }
  PluginStatus tactics(const Plugin& p, const std::vector<PluginTensorDesc>& inputs,
                       const std::vector<PluginTensorDesc>& outputs,
                       std::vector<std::string>* out) const noexcept override {
    return guarded([&] { *out = p.tactics(inputs, outputs); });
  }
  PluginStatus set_tactic(Plugin& p, const std::string& name) const noexcept override {
    return guarded([&] { p.set_tactic(name); });
  }
  PluginStatus aliased_input(const Plugin& p, int output_index, int* out) const noexcept override {
    return guarded([&] { *out = p.aliased_input(output_index); });
  }
  PluginStatus clone(const Plugin& p, std::unique_ptr<Plugin>* out) const noexcept override {
    return guarded([&] { *out = adopt(p.clone()); });
  }
  PluginStatus initialize(Plugin& p) const noexcept override {
    int code = 0;
    PluginStatus s = guarded([&] { code = p.initialize(); });
    if (!s.ok() || code == 0) return s;
    return code_failure("returned", code, nullptr);
  }
  PluginStatus terminate(Plugin& p) const noexcept override {
    return guarded([&] { p.terminate(); });
  }
  PluginStatus fields(const Plugin& p, PluginFieldCollection* out) const noexcept override {
    return guarded([&] { *out = p.fields(); });
  }
  PluginStatus serialize(const Plugin& p, std::vector<uint8_t>* out) const noexcept override {
    return guarded([&] { *out = p.serialize(); });
  }

 private:
  std::unique_ptr<Plugin> adopt(std::unique_ptr<Plugin> p) const {
    if (p) p->entry_points_ = this;
    return p;
  }
  template <class F>
  static PluginStatus guarded(F&& call) noexcept {
    try {
      call();
      return PluginStatus();
    } catch (const std::exception& e) {
      return PluginStatus::failure(std::string("threw: ") + e.what());
    } catch (...) {
      return PluginStatus::failure("threw an exception that is not a std::exception");
    }
  }
  static PluginStatus code_failure(const char* what, int code, const std::string* message) noexcept {
    try {
      std::string text = std::string(what) + " " + std::to_string(code);
      if (message && !message->empty()) text += ": " + *message;
      return PluginStatus::failure(std::move(text));
    } catch (...) {
      return PluginStatus::failure("");
    }
  }
};

// kiln's own instance: for creators registered with PluginRegistry::register_creator and
// plugin objects the program constructed itself (code compiled with the program, not a
// library kiln loads).
const PluginEntryPoints& in_process_entry_points();

}  // namespace detail

// Loads a plugin library (dlopen) and registers the creators its KILN_REGISTER_PLUGIN lines
// define. Throws kiln::Error: file missing, the loader's message (with the missing symbol), no
// creators found, duplicate name + version. Returns the names of the creators it added.
std::vector<std::string> load_plugin_library(const std::string& path);

struct PluginInfo {
  std::string name, version, plugin_namespace, library;  // library: "" for built-in / static
};

namespace detail {
struct PluginRegistrar;
}  // namespace detail

class PluginRegistry {
 public:
  static PluginRegistry& instance();
  // Registers a creator (kiln takes ownership). Throws when the same name + version + namespace
  // is registered already, unless `replace` (a user plugin overriding a built-in on purpose).
  void register_creator(std::unique_ptr<PluginCreator> creator, const std::string& library = "", bool replace = false);
  // Null when not registered.
  const PluginCreator* find(const std::string& name, const std::string& version = "1",
                            const std::string& plugin_namespace = "") const;
  std::vector<PluginInfo> list() const;
  // The library a creator came from ("" when built in).
  std::string library_of(const std::string& name, const std::string& version,
                         const std::string& plugin_namespace) const;

  // Checks fields against a creator's schema: fills defaults, rejects missing required fields,
  // unknown fields and type/count mismatches with a message naming `where` and the field.
  PluginFieldCollection resolve_fields(const PluginCreator& creator, const PluginFieldCollection& given,
                                       const std::string& where) const;

  // Used by kiln: the entry points of the library that registered `creator`
  // (detail::in_process_entry_points() for one registered by the program or not registered).
  const detail::PluginEntryPoints& entry_points(const PluginCreator& creator) const;

 private:
  friend std::vector<std::string> load_plugin_library(const std::string& path);
  friend struct detail::PluginRegistrar;
  PluginRegistry() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
  Impl& impl() const;
};

// Adds a Plugin layer to a network; the plugin's fields (or bytes) are stored on the layer.
class Network;
class Layer;
class Tensor;
Layer* add_plugin(Network& network, const std::vector<Tensor*>& inputs, const Plugin& plugin,
                  const std::string& name = "");

namespace detail {
struct PluginRegistrar {
  // `interface_version`: the kPluginInterfaceVersion the creator was compiled with;
  // `entry_points`: the registering library's own (LibraryEntryPoints<a type local to it>).
  PluginRegistrar(std::unique_ptr<PluginCreator> creator, uint32_t interface_version,
                  const PluginEntryPoints& entry_points);
  // What KILN_REGISTER_PLUGIN of interface versions 1-3 called: always refused, naming both
  // versions (nothing of the creator is called).
  PluginRegistrar(std::unique_ptr<PluginCreator> creator, uint32_t interface_version);

 private:
  static void refuse(std::unique_ptr<PluginCreator> creator, uint32_t interface_version);
};
}  // namespace detail

}  // namespace kiln

#define KILN_PLUGIN_CONCAT_INNER(a, b) a##b
#define KILN_PLUGIN_CONCAT(a, b) KILN_PLUGIN_CONCAT_INNER(a, b)
// Registers a creator class at load time (static initialization of the library or program that
// defines it). In a static library, link the object with --whole-archive or reference
// kiln_plugin_anchor_<Creator>() so the linker keeps it.
#define KILN_REGISTER_PLUGIN(Creator)                                                                  \
  extern "C" int kiln_plugin_anchor_##Creator() { return 1; }                                          \
  namespace {                                                                                          \
  struct KILN_PLUGIN_CONCAT(KilnLibraryLocal_, Creator) {};                                            \
  ::kiln::detail::PluginRegistrar KILN_PLUGIN_CONCAT(kiln_plugin_registrar_, Creator)(                 \
      std::make_unique<Creator>(), ::kiln::kPluginInterfaceVersion,                                    \
      ::kiln::detail::LibraryEntryPoints<KILN_PLUGIN_CONCAT(KilnLibraryLocal_, Creator)>::instance()); \
  }
