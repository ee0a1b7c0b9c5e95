// Layer-type schemas: for each layer type, its inputs, typed attributes with defaults, which
// inputs must be known on the host to infer shapes ("shape inputs", e.g. Reshape's shape) and
// the shape/type inference function. Schemas register themselves next to their definition
// with KILN_REGISTER_OP (src/ir/ops_*.cpp); nothing keeps a central list.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/types.h"
#include "src/core/checked_math.h"

namespace kiln {

struct AttrSpec {
  std::string name;
  AttrType type;
  AttrValue default_value;  // used when absent (ignored when required)
  bool required = false;
  std::string doc;
};

// What the inference function sees: the layer, the dims and types of its inputs (concrete,
// never kDynamic) and, where known, their values (always known for constant inputs and for
// the declared shape inputs).
class ShapeContext {
 public:
  struct Input {
    const Tensor* tensor = nullptr;  // null for an omitted optional input
    DataType type = DataType::kFloat32;
    Dims dims;
    const HostTensor* value = nullptr;  // non-null when the value is known on the host
  };

  // `known_sizes`: values of data-dependent size outputs already computed at run time (see
  // data_dependent_extent); null or missing entries mean "not known yet".
  ShapeContext(const Layer& layer, std::vector<Input> inputs,
               const std::unordered_map<const Tensor*, int64_t>* known_sizes = nullptr);

  const Layer& layer() const { return layer_; }
  const Attributes& attrs() const { return layer_.attrs(); }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[static_cast<size_t>(i)].tensor; }
  DataType input_type(int i) const;
  const Dims& input_dims(int i) const;
  // Null when the value is unknown.
  const HostTensor* input_value(int i) const;
  // The value of a shape input; fails with a clear message when unknown.
  const HostTensor& required_value(int i) const;

  int num_outputs() const { return layer_.num_outputs(); }
  void set_output(int i, DataType type, const Dims& dims);
  DataType output_type(int i) const { return out_types_.at(static_cast<size_t>(i)); }
  const Dims& output_dims(int i) const { return out_dims_.at(static_cast<size_t>(i)); }
  bool output_set(int i) const { return out_set_.at(static_cast<size_t>(i)); }

  // Data-dependent output sizes (NonZero, NonMaxSuppression, Unique, plugins' size tensors).
  // An extent that only the kernel knows is written by the kernel into output `size_output`
  // (an int64 scalar) at run time. Returns that value when the runtime has already read it,
  // else `upper_bound` (which sizes the memory) and records that the layer's outputs hold
  // upper bounds. Kernels write such outputs compactly with the actual extents.
  int64_t data_dependent_extent(int size_output, int64_t upper_bound);
  // Size outputs named by data_dependent_extent calls (empty for ordinary layers).
  const std::vector<int>& size_outputs() const { return size_outputs_; }
  // True when some data-dependent extent is still unknown (outputs hold upper bounds).
  bool has_unknown_extent() const { return unknown_extent_; }

  // Throws kiln::Error "layer '<name>' (<type>): <message>".
  [[noreturn]] void fail(const std::string& message) const;
  void check(bool condition, const std::string& message) const {
    if (!condition) fail(message);
  }

 private:
  const Layer& layer_;
  std::vector<Input> inputs_;
  std::vector<DataType> out_types_;
  std::vector<Dims> out_dims_;
  std::vector<bool> out_set_;
  const std::unordered_map<const Tensor*, int64_t>* known_sizes_ = nullptr;
  std::vector<int> size_outputs_;
  bool unknown_extent_ = false;
};

using ShapeInferFn = std::function<void(ShapeContext&)>;

// What a layer contributes to the float32 "stream" kept for accuracy under fp16 (the precision
// pass's find_accuracy_sensitive): an anchor stays float32 (layer normalization), a stream layer
// joins an anchor's float32 inputs and passes that on to its own inputs (residual additions), a
// leaf joins without passing it on (lookups in constant tables).
enum class AccuracyRole : int32_t { kNone, kAnchor, kStream, kLeaf };

// Properties of a layer type that graph passes ask for, instead of keeping lists of layer types
// of their own (src/builder/passes/).
struct OpTraits {
  // Its kernels may run in channels-last formats (the layout pass puts it into channels-last
  // regions; a kernel's supports() still decides per layer).
  bool channels_last = false;
  // Channels-last regions form around it (convolutions, which gain from NHWC/NDHWC kernels).
  bool channels_last_seed = false;
  // May merge into a FusedElementWise program (elementwise_fusion checks each layer's operands
  // and translates it).
  bool elementwise_fusible = false;
  // The layer's part in the fp16 pass's float32 stream (null: none).
  AccuracyRole (*accuracy_role)(const Layer& layer) = nullptr;
};

struct OpSchema {
  std::string type;  // the layer type name (kLayer*)
  int min_inputs = 1;
  int max_inputs = 1;   // -1: variadic
  int num_outputs = 1;  // -1: any number >= 1 (e.g. Split)
  std::vector<AttrSpec> attrs;
  std::vector<int> shape_inputs;  // inputs whose values are needed by `infer`
  ShapeInferFn infer;
  std::string doc;  // one paragraph for docs/layers.md
  // Whether the layer type takes or produces kString tensors. Shape inference rejects string
  // tensors on every other layer type (their kernels compute on numbers).
  bool takes_strings = false;
  // Typed parameters (src/ir/op_params.h), set by with_params<P>(): decodes and validates the
  // layer's attributes (P::decode(const Layer&)); null for layer types read by string keys.
  std::shared_ptr<const void> (*decode_params)(const Layer& layer) = nullptr;
  const std::type_info* params_type = nullptr;
  OpTraits traits = {};

  const AttrSpec* find_attr(const std::string& name) const;

  // Usage: KILN_REGISTER_OP(OpSchema{...}.with_params<ConvParams>().with_traits({...}));
  template <typename P>
  OpSchema with_params() && {
    decode_params = [](const Layer& layer) -> std::shared_ptr<const void> {
      return std::make_shared<const P>(P::decode(layer));
    };
    params_type = &typeid(P);
    return std::move(*this);
  }
  OpSchema with_traits(OpTraits t) && {
    traits = t;
    return std::move(*this);
  }
};

class OpSchemaRegistry {
 public:
  static OpSchemaRegistry& instance();
  // Throws on a duplicate type.
  void add(OpSchema schema);
  // Null when unknown.
  const OpSchema* find(const std::string& type) const;
  std::vector<std::string> types() const;

 private:
  std::map<std::string, OpSchema> schemas_;
};

// Fills defaults for absent attributes and checks present ones against the schema.
// Throws kiln::Error naming the layer and attribute.
void check_attributes(const OpSchema& schema, const Layer& layer);

// Attribute lookup with the schema default (layer value when present).
int64_t attr_int(const Layer& layer, const std::string& name);
double attr_float(const Layer& layer, const std::string& name);
std::string attr_string(const Layer& layer, const std::string& name);
std::vector<int64_t> attr_ints(const Layer& layer, const std::string& name);
std::vector<double> attr_floats(const Layer& layer, const std::string& name);

struct OpSchemaRegistrar {
  explicit OpSchemaRegistrar(OpSchema schema) { OpSchemaRegistry::instance().add(std::move(schema)); }
};

#define KILN_OP_CONCAT_INNER(a, b) a##b
#define KILN_OP_CONCAT(a, b) KILN_OP_CONCAT_INNER(a, b)
// Usage (at namespace scope in a .cpp of the kiln library):
//   KILN_REGISTER_OP(OpSchema{...});
#define KILN_REGISTER_OP(...) static ::kiln::OpSchemaRegistrar KILN_OP_CONCAT(kiln_op_registrar_, __LINE__)(__VA_ARGS__)

// ---- helpers shared by inference functions (src/ir/shape_utils.cpp) -----------------------
// numpy-style broadcast of two shapes; throws via ctx on mismatch.
Dims broadcast_dims(const ShapeContext& ctx, const Dims& a, const Dims& b);
// Normalizes a possibly negative axis into [0, rank); fails via ctx when out of range.
int64_t normalize_axis(const ShapeContext& ctx, int64_t axis, int rank);
// An extent computed in 128 bits from attributes and values a file controls (pads, strides,
// repeats, ...): returned when it fits in an int64, else fails via ctx naming `what`.
int64_t checked_extent(const ShapeContext& ctx, __int128 value, const std::string& what);

}  // namespace kiln
