// The layer-schema registry, the ShapeContext given to inference functions and attribute
// checking against schemas.
#include "src/ir/op_schema.h"
#include "src/core/text.h"
#include "src/ir/op_params.h"

#include <algorithm>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <variant>

namespace kiln {

ShapeContext::ShapeContext(const Layer& layer, std::vector<Input> inputs,
                           const std::unordered_map<const Tensor*, int64_t>* known_sizes)
    : layer_(layer),
      inputs_(std::move(inputs)),
      out_types_(static_cast<size_t>(layer.num_outputs()), DataType::kFloat32),
      out_dims_(static_cast<size_t>(layer.num_outputs())),
      out_set_(static_cast<size_t>(layer.num_outputs()), false),
      known_sizes_(known_sizes) {}

int64_t ShapeContext::data_dependent_extent(int size_output, int64_t upper_bound) {
  check(size_output >= 0 && size_output < num_outputs(),
        "data-dependent size output " + std::to_string(size_output) + " does not exist");
  check(upper_bound >= 0, "data-dependent extent has a negative upper bound " + std::to_string(upper_bound));
  if (std::find(size_outputs_.begin(), size_outputs_.end(), size_output) == size_outputs_.end()) {
    size_outputs_.push_back(size_output);
  }
  if (known_sizes_) {
    auto it = known_sizes_->find(layer_.output(size_output));
    if (it != known_sizes_->end()) {
      check(it->second >= 0 && it->second <= upper_bound,
            "the kernel wrote data-dependent size " + std::to_string(it->second) + " into output " +
                std::to_string(size_output) + ", outside [0, " + std::to_string(upper_bound) + "]");
      return it->second;
    }
  }
  unknown_extent_ = true;
  return upper_bound;
}

DataType ShapeContext::input_type(int i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is missing");
  return inputs_[static_cast<size_t>(i)].type;
}

const Dims& ShapeContext::input_dims(int i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is missing");
  return inputs_[static_cast<size_t>(i)].dims;
}

const HostTensor* ShapeContext::input_value(int i) const {
  if (!has_input(i)) return nullptr;
  return inputs_[static_cast<size_t>(i)].value;
}

const HostTensor& ShapeContext::required_value(int i) const {
  const HostTensor* v = input_value(i);
  if (!v) {
    const Tensor* t = has_input(i) ? inputs_[static_cast<size_t>(i)].tensor : nullptr;
    fail("input " + std::to_string(i) + (t ? " (" + quote(t->name()) + ")" : std::string()) +
         " must be known when shapes are inferred: it has to be computed from constants and input shapes "
         "(a shape tensor), not from input data");
  }
  return *v;
}

void ShapeContext::set_output(int i, DataType type, const Dims& dims) {
  if (i < 0 || i >= num_outputs())
    fail("inference set output " + std::to_string(i) + " but the layer has " + std::to_string(num_outputs()));
  for (int64_t d : dims) {
    if (d < 0) fail("inferred a negative extent for output " + std::to_string(i) + ": " + dims.to_string());
  }
  // Every tensor's element count and byte size fit in an int64, so the memory planner, the
  // kernels and the runtime can size buffers without wrapping around.
  try {
    (void)tensor_byte_size(type, dims);
  } catch (const Error& e) {
    const Tensor* t = layer_.output(i);
    fail("output " + std::to_string(i) + (t ? " " + quote(t->name()) : std::string()) + " is too large: " + e.what());
  }
  out_types_[static_cast<size_t>(i)] = type;
  out_dims_[static_cast<size_t>(i)] = dims;
  out_set_[static_cast<size_t>(i)] = true;
}

void ShapeContext::fail(const std::string& message) const {
  throw Error("layer " + quote(layer_.name()) + " (" + layer_.type() + "): " + message);
}

const AttrSpec* OpSchema::find_attr(const std::string& name) const {
  for (const auto& a : attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

OpSchemaRegistry& OpSchemaRegistry::instance() {
  static OpSchemaRegistry registry;
  return registry;
}

void OpSchemaRegistry::add(OpSchema schema) {
  if (schemas_.count(schema.type)) throw Error("layer type " + quote(schema.type) + " is registered twice");
  std::string type = schema.type;
  schemas_.emplace(std::move(type), std::move(schema));
}

const OpSchema* OpSchemaRegistry::find(const std::string& type) const {
  auto it = schemas_.find(type);
  return it == schemas_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpSchemaRegistry::types() const {
  std::vector<std::string> r;
  for (const auto& [k, v] : schemas_) r.push_back(k);
  return r;
}

void check_attributes(const OpSchema& schema, const Layer& layer) {
  for (const auto& spec : schema.attrs) {
    if (spec.required && !layer.attrs().has(spec.name)) {
      throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): required attribute " + quote(spec.name) +
                  " (" + to_string(spec.type) + ") is missing");
    }
  }
  for (const auto& [name, value] : layer.attrs().all()) {
    const AttrSpec* spec = schema.find_attr(name);
    if (!spec) {
      if (layer.type() == kLayerPlugin) continue;  // plugin fields are checked by the plugin's creator
      throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): unknown attribute " + quote(name));
    }
    const AttrType t = attr_type_of(value);
    const bool numeric_ok = (spec->type == AttrType::kFloat && t == AttrType::kInt);
    if (t != spec->type && !numeric_ok) {
      throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): attribute " + quote(name) + " has type " +
                  to_string(t) + ", expected " + to_string(spec->type));
    }
  }
}

namespace {
const AttrSpec& spec_of(const Layer& layer, const std::string& name) {
  const OpSchema* schema = OpSchemaRegistry::instance().find(layer.type());
  if (!schema) throw Error("layer " + quote(layer.name()) + ": unknown layer type " + quote(layer.type()));
  const AttrSpec* spec = schema->find_attr(name);
  if (!spec) throw Error("layer type " + quote(layer.type()) + " has no attribute " + quote(name));
  return *spec;
}

template <typename T>
T attr_get(const Layer& layer, const std::string& name) {
  const AttrSpec& spec = spec_of(layer, name);
  auto it = layer.attrs().all().find(name);
  const AttrValue& v = it != layer.attrs().all().end() ? it->second : spec.default_value;
  if constexpr (std::is_same_v<T, double>) {
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  }
  if constexpr (std::is_same_v<T, int64_t>) {
    if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  }
  if (const T* x = std::get_if<T>(&v)) return *x;
  throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): attribute " + quote(name) + " has type " +
              to_string(attr_type_of(v)) + ", expected " + to_string(spec.type));
}
}  // namespace

int64_t attr_int(const Layer& layer, const std::string& name) { return attr_get<int64_t>(layer, name); }
double attr_float(const Layer& layer, const std::string& name) { return attr_get<double>(layer, name); }
std::string attr_string(const Layer& layer, const std::string& name) { return attr_get<std::string>(layer, name); }
std::vector<int64_t> attr_ints(const Layer& layer, const std::string& name) {
  return attr_get<std::vector<int64_t>>(layer, name);
}
std::vector<double> attr_floats(const Layer& layer, const std::string& name) {
  return attr_get<std::vector<double>>(layer, name);
}

// ---- typed parameters (op_params.h) --------------------------------------------------------

void ParamReader::fail(const std::string& name, const std::string& message) const {
  throw Error("layer " + quote(layer_.name()) + " (" + layer_.type() + "): attribute " + quote(name) + " " + message);
}

namespace {
// A required attribute that is absent fails here rather than reading as its (empty) default.
void check_present(const ParamReader& r, const std::string& name) {
  if (r.layer().attrs().has(name)) return;
  const OpSchema* schema = OpSchemaRegistry::instance().find(r.layer().type());
  const AttrSpec* spec = schema ? schema->find_attr(name) : nullptr;
  if (spec && spec->required) r.fail(name, "is required (" + spec->doc + ")");
}
}  // namespace

int64_t ParamReader::get_int(const std::string& name) const {
  check_present(*this, name);
  return attr_int(layer_, name);
}
double ParamReader::get_float(const std::string& name) const {
  check_present(*this, name);
  return attr_float(layer_, name);
}
std::string ParamReader::get_string(const std::string& name) const {
  check_present(*this, name);
  return attr_string(layer_, name);
}
std::vector<int64_t> ParamReader::get_ints(const std::string& name) const {
  check_present(*this, name);
  return attr_ints(layer_, name);
}

std::vector<std::string> ParamReader::get_strings(const std::string& name) const {
  check_present(*this, name);
  return attr_get<std::vector<std::string>>(layer_, name);
}

int64_t ParamReader::int_in(const std::string& name, int64_t lo, int64_t hi) const {
  const int64_t v = get_int(name);
  if (v < lo || v > hi) {
    fail(name, "is " + std::to_string(v) + "; allowed range: " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

std::vector<int64_t> ParamReader::ints_at_least(const std::string& name, int64_t min) const {
  std::vector<int64_t> v = get_ints(name);
  for (int64_t x : v) {
    if (x < min) {
      std::string list;
      for (int64_t y : v) list += (list.empty() ? "" : ", ") + std::to_string(y);
      fail(name, "is [" + list + "]; every value must be >= " + std::to_string(min));
    }
  }
  return v;
}

namespace {

// Params are a pure function of (layer type, attributes), so the cache is keyed by the layer's
// address and an entry is used only while the layer's type and attributes are those it was
// decoded from: an edited layer, or another layer at a freed layer's address, decodes anew.
// Network forgets its layers' entries when they are removed or the network is destroyed.
struct ParamsEntry {
  std::string type;
  Attributes attrs;
  std::shared_ptr<const void> params;
};

bool same_value(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const auto* ta = std::get_if<HostTensor>(&a)) {
    const auto& tb = std::get<HostTensor>(b);
    return ta->data() == tb.data() && ta->type() == tb.type() && ta->dims() == tb.dims();
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, HostTensor>) {
          return false;
        } else {
          return x == std::get<T>(b);
        }
      },
      a);
}

bool same_attributes(const Attributes& a, const Attributes& b) {
  if (a.all().size() != b.all().size()) return false;
  auto ib = b.all().begin();
  for (const auto& [name, value] : a.all()) {
    if (name != ib->first || !same_value(value, ib->second)) return false;
    ++ib;
  }
  return true;
}

struct ParamsCache {
  std::mutex mutex;
  std::unordered_map<const Layer*, ParamsEntry> entries;
};

// Never destroyed: networks in static storage may outlive a function-local static.
ParamsCache& params_cache() {
  static ParamsCache* cache = new ParamsCache;
  return *cache;
}

const OpSchema* params_schema(const Layer& layer) {
  const OpSchema* schema = OpSchemaRegistry::instance().find(layer.type());
  return schema && schema->decode_params ? schema : nullptr;
}

// Decodes outside the lock (a decoder may be slow or throw), then stores. When another thread
// stored params of the same attributes meanwhile, those stay (other threads may hold references
// to them) and this decode is dropped.
const void* store_params(const Layer& layer, const OpSchema& schema) {
  std::shared_ptr<const void> decoded = schema.decode_params(layer);
  ParamsCache& cache = params_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  ParamsEntry& e = cache.entries[&layer];
  if (e.params && e.type == layer.type() && same_attributes(e.attrs, layer.attrs())) return e.params.get();
  e.type = layer.type();
  e.attrs = layer.attrs();
  e.params = std::move(decoded);
  return e.params.get();
}

}  // namespace

namespace detail {
const void* params_ptr(const Layer& layer, const std::type_info& type) {
  const OpSchema* schema = params_schema(layer);
  if (!schema) {
    throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): its layer type has no typed parameters");
  }
  if (*schema->params_type != type) {
    throw Error("layer " + quote(layer.name()) + " (" + layer.type() + "): its parameters are read as another type");
  }
  {
    ParamsCache& cache = params_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(&layer);
    if (it != cache.entries.end() && it->second.type == layer.type() &&
        same_attributes(it->second.attrs, layer.attrs())) {
      return it->second.params.get();
    }
  }
  return store_params(layer, *schema);
}
}  // namespace detail

void decode_params(const Layer& layer) {
  if (const OpSchema* schema = params_schema(layer)) (void)store_params(layer, *schema);
}

void forget_params(const Layer& layer) {
  ParamsCache& cache = params_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.erase(&layer);
}

}  // namespace kiln
