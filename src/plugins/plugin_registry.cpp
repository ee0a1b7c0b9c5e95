// The plugin registry, field collections, symbolic dimension expressions and the plugin
// library loader.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/plugin.h"
#include "src/core/checked_math.h"
#include "src/core/text.h"
#include "src/plugins/plugin_calls.h"

namespace kiln {

// ---- DimExpr / ExprBuilder ----------------------------------------------------------------

namespace {
const char* op_symbol(DimOp op) {
  static const char* const kSymbols[] = {"+", "-", "*", "/", "/^", " min ", " max ", "==", "<"};
  return kSymbols[static_cast<int>(op)];
}
int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw Error("plugin dimension expression divides by zero");
  // INT64_MIN / -1 traps (SIGFPE).
  if (a == std::numeric_limits<int64_t>::min() && b == -1) {
    throw Error("plugin dimension expression overflows 64-bit integers (" + std::to_string(a) + " / -1)");
  }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
}  // namespace

std::string DimExpr::to_string() const {
  switch (kind_) {
    case Kind::kConstant:
      return std::to_string(value_);
    case Kind::kInput:
      return "in" + std::to_string(input_) + "[" + std::to_string(axis_) + "]";
    case Kind::kSize:
      return "size" + std::to_string(input_) + "(<=" + std::to_string(value_) + ")";
    case Kind::kValue:
      return "value" + std::to_string(input_) + "[" + std::to_string(value_) + "]";
    case Kind::kOp:
      return "(" + a_->to_string() + op_symbol(op_) + b_->to_string() + ")";
  }
  return "?";
}

int64_t DimExpr::evaluate(const std::vector<Dims>& inputs, const std::vector<int64_t>& sizes,
                          const std::vector<const HostTensor*>& values) const {
  switch (kind_) {
    case Kind::kValue: {
      const HostTensor* v = static_cast<size_t>(input_) < values.size() ? values[static_cast<size_t>(input_)] : nullptr;
      if (!v) {
        throw Error("plugin dimension expression " + to_string() + " needs the value of input " +
                    std::to_string(input_) +
                    " when shapes are inferred, but it is computed by a kernel (a shape input must be a constant or "
                    "shape arithmetic)");
      }
      const std::vector<int64_t> ints = v->to_int64();
      if (value_ < 0 || value_ >= static_cast<int64_t>(ints.size())) {
        throw Error("plugin dimension expression " + to_string() + " reads element " + std::to_string(value_) +
                    " of input " + std::to_string(input_) + ", which has " + std::to_string(ints.size()));
      }
      return ints[static_cast<size_t>(value_)];
    }
    case Kind::kConstant:
      return value_;
    case Kind::kInput:
      if (input_ < 0 || static_cast<size_t>(input_) >= inputs.size() || axis_ < 0 ||
          axis_ >= inputs[static_cast<size_t>(input_)].rank()) {
        throw Error("plugin dimension expression refers to " + to_string() + ", which does not exist");
      }
      return inputs[static_cast<size_t>(input_)][axis_];
    case Kind::kSize:
      return static_cast<size_t>(input_) < sizes.size() ? sizes[static_cast<size_t>(input_)] : value_;
    case Kind::kOp: {
      const int64_t a = a_->evaluate(inputs, sizes, values), b = b_->evaluate(inputs, sizes, values);
      const std::string what = "plugin dimension expression " + to_string();
      switch (op_) {
        case DimOp::kSum:
          return checked_add(a, b, what);
        case DimOp::kSub:
          return checked_sub(a, b, what);
        case DimOp::kProd:
          return checked_mul(a, b, what);
        case DimOp::kFloorDiv:
          return floor_div(a, b);
        case DimOp::kCeilDiv:
          return checked_sub(0, floor_div(checked_sub(0, a, what), b), what);
        case DimOp::kMin:
          return std::min(a, b);
        case DimOp::kMax:
          return std::max(a, b);
        case DimOp::kEqual:
          return a == b;
        case DimOp::kLess:
          return a < b;
      }
    }
  }
  return 0;
}

ExprBuilder::ExprBuilder() = default;
ExprBuilder::~ExprBuilder() = default;

const DimExpr* ExprBuilder::constant(int64_t value) {
  auto e = std::make_unique<DimExpr>();
  e->kind_ = DimExpr::Kind::kConstant;
  e->value_ = value;
  nodes_.push_back(std::move(e));
  return nodes_.back().get();
}

const DimExpr* ExprBuilder::operation(DimOp op, const DimExpr& a, const DimExpr& b) {
  if (a.is_constant() && b.is_constant()) {
    DimExpr tmp;
    tmp.kind_ = DimExpr::Kind::kOp;
    tmp.op_ = op;
    tmp.a_ = &a;
    tmp.b_ = &b;
    return constant(tmp.evaluate({}));
  }
  auto e = std::make_unique<DimExpr>();
  e->kind_ = DimExpr::Kind::kOp;
  e->op_ = op;
  e->a_ = &a;
  e->b_ = &b;
  nodes_.push_back(std::move(e));
  return nodes_.back().get();
}

const DimExpr* ExprBuilder::size_tensor(int size_index, int64_t upper_bound) {
  auto e = std::make_unique<DimExpr>();
  e->kind_ = DimExpr::Kind::kSize;
  e->input_ = size_index;
  e->value_ = upper_bound;
  nodes_.push_back(std::move(e));
  return nodes_.back().get();
}

std::vector<std::pair<int, int64_t>> ExprBuilder::size_tensors() const {
  std::vector<std::pair<int, int64_t>> r;
  for (const auto& n : nodes_) {
    if (n->kind_ == DimExpr::Kind::kSize) r.emplace_back(n->input_, n->value_);
  }
  return r;
}

const DimExpr* ExprBuilder::require_equal(const DimExpr& a, const DimExpr& b) {
  if (a.is_constant() && b.is_constant() && a.constant_value() != b.constant_value()) {
    throw Error("require_equal: the fixed extents " + std::to_string(a.constant_value()) + " and " +
                std::to_string(b.constant_value()) + " differ");
  }
  if (&a != &b && !(a.is_constant() && b.is_constant())) checks_.push_back(Check{&a, &b, false});
  return &a;
}

DimsExprs ExprBuilder::broadcast(const DimsExprs& a, const DimsExprs& b) {
  const int rank = std::max(a.rank(), b.rank());
  DimsExprs out;
  for (int k = 0; k < rank; ++k) {
    const int ka = k - (rank - a.rank()), kb = k - (rank - b.rank());
    const DimExpr* x = ka >= 0 ? a.d[static_cast<size_t>(ka)] : nullptr;
    const DimExpr* y = kb >= 0 ? b.d[static_cast<size_t>(kb)] : nullptr;
    if (!x || !y) {
      out.d.push_back(x ? x : y);
      continue;
    }
    if (x == y || (x->is_constant() && y->is_constant() && x->constant_value() == y->constant_value())) {
      out.d.push_back(x);
    } else if (x->is_constant() && x->constant_value() == 1) {
      out.d.push_back(y);
    } else if (y->is_constant() && y->constant_value() == 1) {
      out.d.push_back(x);
    } else if (x->is_constant() && y->is_constant()) {
      throw Error("broadcast: extents " + std::to_string(x->constant_value()) + " and " +
                  std::to_string(y->constant_value()) + " at axis " + std::to_string(k) + " are neither equal nor 1");
    } else {
      checks_.push_back(Check{x, y, true});
      out.d.push_back(operation(DimOp::kMax, *x, *y));
    }
  }
  return out;
}

const DimExpr* ExprBuilder::input_value(int input, int64_t index) {
  auto e = std::make_unique<DimExpr>();
  e->kind_ = DimExpr::Kind::kValue;
  e->input_ = input;
  e->value_ = index;
  nodes_.push_back(std::move(e));
  return nodes_.back().get();
}

const DimExpr* ExprBuilder::input_dim(int input, int axis) {
  auto e = std::make_unique<DimExpr>();
  e->kind_ = DimExpr::Kind::kInput;
  e->input_ = input;
  e->axis_ = axis;
  nodes_.push_back(std::move(e));
  return nodes_.back().get();
}

// ---- fields -------------------------------------------------------------------------------

const char* to_string(PluginFieldType type) {
  static const char* const kNames[] = {"float32", "float64", "int32", "int64", "string", "tensor"};
  return kNames[static_cast<int>(type)];
}

int64_t PluginField::count() const {
  switch (type) {
    case PluginFieldType::kFloat32:
      return static_cast<int64_t>(f32.size());
    case PluginFieldType::kFloat64:
      return static_cast<int64_t>(f64.size());
    case PluginFieldType::kInt32:
      return static_cast<int64_t>(i32.size());
    case PluginFieldType::kInt64:
      return static_cast<int64_t>(i64.size());
    case PluginFieldType::kString:
      return 1;
    case PluginFieldType::kTensor:
      return 1;
  }
  return 0;
}

PluginField PluginField::float32(std::string name, std::vector<float> v) {
  PluginField f;
  f.name = std::move(name);
  f.type = PluginFieldType::kFloat32;
  f.f32 = std::move(v);
  return f;
}
PluginField PluginField::float64(std::string name, std::vector<double> v) {
  PluginField f;
  f.name = std::move(name);
  f.type = PluginFieldType::kFloat64;
  f.f64 = std::move(v);
  return f;
}
PluginField PluginField::int32(std::string name, std::vector<int32_t> v) {
  PluginField f;
  f.name = std::move(name);
  f.type = PluginFieldType::kInt32;
  f.i32 = std::move(v);
  return f;
}
PluginField PluginField::int64(std::string name, std::vector<int64_t> v) {
  PluginField f;
  f.name = std::move(name);
  f.type = PluginFieldType::kInt64;
  f.i64 = std::move(v);
  return f;
}
PluginField PluginField::string(std::string name, std::string v) {
  PluginField f;
  f.name = std::move(name);
  f.type = PluginFieldType::kString;
  f.str = std::move(v);
  return f;
}
PluginField PluginField::tensor_value(std::string name, HostTensor v) {
  PluginField f;
  f.name = std::move(name);
  f.type = PluginFieldType::kTensor;
  f.tensor = std::move(v);
  return f;
}

AttrType attr_type_of(PluginFieldType type) {
  switch (type) {
    case PluginFieldType::kFloat32:
    case PluginFieldType::kFloat64:
      return AttrType::kFloats;
    case PluginFieldType::kInt32:
    case PluginFieldType::kInt64:
      return AttrType::kInts;
    case PluginFieldType::kString:
      return AttrType::kString;
    case PluginFieldType::kTensor:
      return AttrType::kTensor;
  }
  throw Error("invalid PluginFieldType " + std::to_string(static_cast<int>(type)));
}

AttrValue PluginField::value() const {
  switch (type) {
    case PluginFieldType::kFloat32:
      return std::vector<double>(f32.begin(), f32.end());
    case PluginFieldType::kFloat64:
      return f64;
    case PluginFieldType::kInt32:
      return std::vector<int64_t>(i32.begin(), i32.end());
    case PluginFieldType::kInt64:
      return i64;
    case PluginFieldType::kString:
      return str;
    case PluginFieldType::kTensor:
      return tensor;
  }
  throw Error("field " + quote(name) + ": invalid PluginFieldType " + std::to_string(static_cast<int>(type)));
}

PluginField PluginField::from_value(std::string name, PluginFieldType type, const AttrValue& value) {
  const AttrType expected = attr_type_of(type);
  if (attr_type_of(value) != expected) {
    throw Error("field " + quote(name) + " (" + to_string(type) + ") takes " + to_string(expected) + ", got " +
                to_string(attr_type_of(value)));
  }
  PluginField f;
  f.type = type;
  switch (type) {
    case PluginFieldType::kFloat32: {
      const auto& d = std::get<std::vector<double>>(value);
      f.f32.assign(d.begin(), d.end());
      break;
    }
    case PluginFieldType::kFloat64:
      f.f64 = std::get<std::vector<double>>(value);
      break;
    case PluginFieldType::kInt32:
      for (int64_t x : std::get<std::vector<int64_t>>(value)) {
        if (x < INT32_MIN || x > INT32_MAX) {
          throw Error("field " + quote(name) + " value " + std::to_string(x) + " does not fit int32");
        }
        f.i32.push_back(static_cast<int32_t>(x));
      }
      break;
    case PluginFieldType::kInt64:
      f.i64 = std::get<std::vector<int64_t>>(value);
      break;
    case PluginFieldType::kString:
      f.str = std::get<std::string>(value);
      break;
    case PluginFieldType::kTensor:
      f.tensor = std::get<HostTensor>(value);
      break;
  }
  f.name = std::move(name);
  return f;
}

void PluginFieldCollection::add(PluginField field) {
  for (auto& f : fields_) {
    if (f.name == field.name) {
      f = std::move(field);
      return;
    }
  }
  fields_.push_back(std::move(field));
}

const PluginField* PluginFieldCollection::find(const std::string& name) const {
  for (const auto& f : fields_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

namespace {
// The field `name`, of one of `types`, with at least one value.
const PluginField& typed_field(const PluginFieldCollection& c, const std::string& name,
                               std::initializer_list<PluginFieldType> types, const char* wanted) {
  const PluginField* f = c.find(name);
  if (!f)
    throw Error("plugin field " + quote(name) +
                " is missing (give the creator resolve_fields()' output, which fills defaults)");
  if (std::find(types.begin(), types.end(), f->type) == types.end()) {
    throw Error("plugin field " + quote(name) + " has type " + to_string(f->type) + ", expected " + wanted);
  }
  if (f->count() < 1) throw Error("plugin field " + quote(name) + " is empty");
  return *f;
}

double first_float(const PluginField& f) { return f.type == PluginFieldType::kFloat32 ? f.f32[0] : f.f64[0]; }
int64_t first_int(const PluginField& f) { return f.type == PluginFieldType::kInt32 ? f.i32[0] : f.i64[0]; }
}  // namespace

float PluginFieldCollection::get_float32(const std::string& name) const {
  return static_cast<float>(first_float(
      typed_field(*this, name, {PluginFieldType::kFloat32, PluginFieldType::kFloat64}, "float32 or float64")));
}
double PluginFieldCollection::get_float64(const std::string& name) const {
  return first_float(
      typed_field(*this, name, {PluginFieldType::kFloat32, PluginFieldType::kFloat64}, "float32 or float64"));
}
int32_t PluginFieldCollection::get_int32(const std::string& name) const {
  const int64_t v =
      first_int(typed_field(*this, name, {PluginFieldType::kInt32, PluginFieldType::kInt64}, "int32 or int64"));
  if (v < INT32_MIN || v > INT32_MAX) {
    throw Error("plugin field " + quote(name) + " value " + std::to_string(v) + " does not fit int32");
  }
  return static_cast<int32_t>(v);
}
int64_t PluginFieldCollection::get_int64(const std::string& name) const {
  return first_int(typed_field(*this, name, {PluginFieldType::kInt32, PluginFieldType::kInt64}, "int32 or int64"));
}
std::string PluginFieldCollection::get_string(const std::string& name) const {
  return typed_field(*this, name, {PluginFieldType::kString}, "string").str;
}

std::unique_ptr<Plugin> PluginCreator::deserialize(const std::string& layer_name, const void*, size_t) const {
  throw Error("plugin " + quote(name()) + " (layer '" + layer_name +
              "'): the engine holds the plugin's own bytes but its creator does not implement deserialize()");
}

// ---- registry -----------------------------------------------------------------------------

struct PluginRegistry::Impl {
  mutable std::mutex mutex;
  struct Entry {
    std::unique_ptr<PluginCreator> creator;
    const detail::PluginEntryPoints* entry_points = nullptr;  // of the library that registered it
    std::string name, version, plugin_namespace;              // asked once, at registration
    std::string library;
    bool is(const std::string& n, const std::string& v, const std::string& ns) const {
      return name == n && version == v && plugin_namespace == ns;
    }
  };
  std::vector<Entry> entries;
  // Libraries loaded by load_plugin_library (canonical path -> the creators they registered).
  std::map<std::string, std::vector<std::string>> loaded;
  // While load_plugin_library runs: the library being loaded and what it registered.
  std::string loading;
  std::vector<std::string> loaded_names;
  std::vector<std::string> load_errors;
  // Creators of another interface version, or of a library refused at load: kept and never
  // destroyed (their destructors are code of another layout).
  std::vector<PluginCreator*> refused;

  // Registers through `entry_points` (the registering library's own).
  void add(std::unique_ptr<PluginCreator> creator, const detail::PluginEntryPoints& entry_points,
           const std::string& library, bool replace);
};

PluginRegistry::Impl& PluginRegistry::impl() const { return *impl_; }

PluginRegistry& PluginRegistry::instance() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    r->impl_ = std::make_shared<Impl>();
    return r;
  }();
  return *registry;
}

namespace {
std::string plugin_id(const std::string& name, const std::string& version, const std::string& ns) {
  return "" + quote(name) + " version " + quote(version) + (ns.empty() ? std::string() : " namespace " + quote(ns));
}
}  // namespace

void PluginRegistry::Impl::add(std::unique_ptr<PluginCreator> creator, const detail::PluginEntryPoints& entry_points,
                               const std::string& library, bool replace) {
  if (!creator) throw Error("register_creator: null creator");
  Entry entry;
  entry.entry_points = &entry_points;
  const PluginStatus status =
      entry_points.creator_identity(*creator, &entry.name, &entry.version, &entry.plugin_namespace);
  std::lock_guard<std::mutex> lock(mutex);
  const std::string lib = library.empty() ? loading : library;
  entry.library = lib;
  if (!status.ok()) {
    const std::string msg = "a plugin creator" + (lib.empty() ? std::string() : " of " + quote(lib)) +
                            " failed in name()/version()/plugin_namespace(): " + status.message();
    if (!loading.empty()) {
      load_errors.push_back(msg);
      return;
    }
    throw Error(msg);
  }
  for (auto& e : entries) {
    if (e.is(entry.name, entry.version, entry.plugin_namespace)) {
      if (replace) {
        entry.creator = std::move(creator);
        e = std::move(entry);
        return;
      }
      const std::string msg = "plugin " + plugin_id(entry.name, entry.version, entry.plugin_namespace) +
                              " is registered twice (first from " +
                              (e.library.empty() ? std::string("kiln's built-ins") : e.library) + ", again from " +
                              (lib.empty() ? std::string("the program") : lib) +
                              "); give one a different version or namespace";
      if (!loading.empty()) {
        load_errors.push_back(msg);
        return;
      }
      throw Error(msg);
    }
  }
  if (!loading.empty()) loaded_names.push_back(entry.name + " v" + entry.version);
  entry.creator = std::move(creator);
  entries.push_back(std::move(entry));
}

void PluginRegistry::register_creator(std::unique_ptr<PluginCreator> creator, const std::string& library,
                                      bool replace) {
  impl().add(std::move(creator), detail::in_process_entry_points(), library, replace);
}

const PluginCreator* PluginRegistry::find(const std::string& name, const std::string& version,
                                          const std::string& ns) const {
  Impl& m = impl();
  std::lock_guard<std::mutex> lock(m.mutex);
  for (const auto& e : m.entries) {
    if (e.is(name, version, ns)) return e.creator.get();
  }
  return nullptr;
}

const detail::PluginEntryPoints& PluginRegistry::entry_points(const PluginCreator& creator) const {
  Impl& m = impl();
  std::lock_guard<std::mutex> lock(m.mutex);
  for (const auto& e : m.entries) {
    if (e.creator.get() == &creator) return *e.entry_points;
  }
  return detail::in_process_entry_points();
}

std::vector<PluginInfo> PluginRegistry::list() const {
  Impl& m = impl();
  std::lock_guard<std::mutex> lock(m.mutex);
  std::vector<PluginInfo> r;
  for (const auto& e : m.entries) r.push_back(PluginInfo{e.name, e.version, e.plugin_namespace, e.library});
  std::sort(r.begin(), r.end(), [](const PluginInfo& a, const PluginInfo& b) {
    return std::tie(a.name, a.version, a.plugin_namespace) < std::tie(b.name, b.version, b.plugin_namespace);
  });
  return r;
}

std::string PluginRegistry::library_of(const std::string& name, const std::string& version,
                                       const std::string& ns) const {
  Impl& m = impl();
  std::lock_guard<std::mutex> lock(m.mutex);
  for (const auto& e : m.entries) {
    if (e.is(name, version, ns)) return e.library;
  }
  return "";
}

namespace {

// `f` as a field of type `to`: int32 and int64 convert both ways (a value that does not fit
// int32 is an error), float32 and float64 both ways; anything else is a type error.
PluginField converted_field(const PluginField& f, PluginFieldType to, const std::string& where) {
  const auto is_int = [](PluginFieldType t) { return t == PluginFieldType::kInt32 || t == PluginFieldType::kInt64; };
  const auto is_float = [](PluginFieldType t) {
    return t == PluginFieldType::kFloat32 || t == PluginFieldType::kFloat64;
  };
  PluginField r;
  r.name = f.name;
  r.type = to;
  if (is_int(f.type) && is_int(to)) {
    std::vector<int64_t> v =
        f.type == PluginFieldType::kInt64 ? f.i64 : std::vector<int64_t>(f.i32.begin(), f.i32.end());
    if (to == PluginFieldType::kInt64) {
      r.i64 = std::move(v);
    } else {
      for (int64_t x : v) {
        if (x < INT32_MIN || x > INT32_MAX) {
          throw Error(where + " field " + quote(f.name) + " is int32; the value " + std::to_string(x) +
                      " does not fit it");
        }
        r.i32.push_back(static_cast<int32_t>(x));
      }
    }
    return r;
  }
  if (is_float(f.type) && is_float(to)) {
    if (to == PluginFieldType::kFloat64) {
      r.f64 = f.type == PluginFieldType::kFloat64 ? f.f64 : std::vector<double>(f.f32.begin(), f.f32.end());
    } else {
      r.f32 = f.type == PluginFieldType::kFloat32 ? f.f32 : std::vector<float>(f.f64.begin(), f.f64.end());
    }
    return r;
  }
  throw Error(where + " field " + quote(f.name) + " has type " + to_string(f.type) + ", expected " + to_string(to));
}

}  // namespace

PluginFieldCollection PluginRegistry::resolve_fields(const PluginCreator& creator, const PluginFieldCollection& given,
                                                     const std::string& where) const {
  const auto schema = creator_field_schema(creator, where);
  const std::string cname = creator_identity(creator).name;
  PluginFieldCollection out;
  for (const auto& f : given.all()) {
    const bool known =
        std::any_of(schema.begin(), schema.end(), [&](const PluginFieldSpec& s) { return s.name == f.name; });
    if (!known) {
      std::string names;
      for (const auto& s : schema) names += (names.empty() ? "" : ", ") + s.name;
      throw Error(where + ": plugin " + quote(cname) + " has no field " + quote(f.name) +
                  " (its fields: " + (names.empty() ? "none" : names) + ")");
    }
  }
  for (const auto& spec : schema) {
    const PluginField* f = given.find(spec.name);
    if (!f) {
      if (spec.required) {
        throw Error(where + ": plugin " + quote(cname) + " needs field " + quote(spec.name) + " (" +
                    to_string(spec.type) + (spec.description.empty() ? "" : ": " + spec.description) + ")");
      }
      PluginField d = spec.default_value;
      d.name = spec.name;
      out.add(d);
      continue;
    }
    PluginField value = *f;
    if (value.type != spec.type) value = converted_field(value, spec.type, where + ": plugin " + quote(cname));
    if (spec.count >= 0 && value.count() != spec.count) {
      throw Error(where + ": plugin " + quote(cname) + " field " + quote(spec.name) + " has " +
                  std::to_string(value.count()) + " value(s), expected " + std::to_string(spec.count));
    }
    out.add(std::move(value));
  }
  return out;
}

// Nothing of a creator of another interface version may be called (its classes have another
// layout): not even its destructor, so it is leaked on purpose.
void detail::PluginRegistrar::refuse(std::unique_ptr<PluginCreator> creator, uint32_t interface_version) {
  PluginRegistry::Impl& m = PluginRegistry::instance().impl();
  std::lock_guard<std::mutex> lock(m.mutex);
  m.refused.push_back(creator.release());
  const std::string msg = "a plugin creator was compiled against kiln's plugin interface version " +
                          std::to_string(interface_version) + ", this kiln has version " +
                          std::to_string(kPluginInterfaceVersion) + " (include/kiln/plugin.h); rebuild " +
                          (m.loading.empty() ? std::string("it") : quote(m.loading)) + " against this kiln";
  if (!m.loading.empty()) {
    m.load_errors.push_back(msg);
  } else {
    log(Severity::kError, msg);
  }
}

detail::PluginRegistrar::PluginRegistrar(std::unique_ptr<PluginCreator> creator, uint32_t interface_version) {
  // Only libraries of interface versions 1-3 call this constructor.
  refuse(std::move(creator), interface_version);
}

detail::PluginRegistrar::PluginRegistrar(std::unique_ptr<PluginCreator> creator, uint32_t interface_version,
                                         const PluginEntryPoints& entry_points) {
  if (interface_version != kPluginInterfaceVersion) {
    refuse(std::move(creator), interface_version);
    return;
  }
  try {
    PluginRegistry::instance().impl().add(std::move(creator), entry_points, "", false);
  } catch (const std::exception& e) {
    // Static initialization must not throw; report and keep the first registration.
    log(Severity::kError, e.what());
  }
}

std::vector<std::string> load_plugin_library(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw Error("plugin library " + quote(path) + " does not exist (check the --plugins path)");
  }
  // One library, whatever path names it (relative, absolute, through a symbolic link).
  std::string canonical = path;
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    canonical = real;
    std::free(real);
  }
  PluginRegistry::Impl& m = PluginRegistry::instance().impl();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (!m.loading.empty()) throw Error("load_plugin_library: another library is being loaded");
    auto done = m.loaded.find(canonical);
    if (done != m.loaded.end()) return done->second;  // loaded before: nothing to do
  }
  // Already in the process without load_plugin_library (linked into the program, or opened by
  // someone else): opening it again runs no static initializer, so it registers nothing new.
  if (void* mapped = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    ::dlclose(mapped);
    std::lock_guard<std::mutex> lock(m.mutex);
    std::vector<std::string> names;
    for (const auto& e : m.entries) {
      if (e.library == canonical) names.push_back(e.name + " v" + e.version);
    }
    m.loaded[canonical] = names;
    log(Severity::kInfo, "plugin library " + quote(path) +
                             " is already in this process (linked into the program or opened "
                             "elsewhere); its plugins registered when it was first loaded");
    return names;
  }
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.loading = canonical;
    m.loaded_names.clear();
    m.load_errors.clear();
  }
  dlerror();
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::vector<std::string> names, errors;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    names = m.loaded_names;
    errors = m.load_errors;
    m.loading.clear();
    if (handle && errors.empty() && !names.empty()) m.loaded[canonical] = names;
  }
  if (handle) {
    // The library's own kiln_plugin_interface_version (plugin.h defines it in every library
    // compiled with it; a library of interface version 3 or older has none, and its registrars
    // were refused above).
    const auto* version = static_cast<const uint32_t*>(::dlsym(handle, "kiln_plugin_interface_version"));
    Dl_info info{};
    if (version && ::dladdr(version, &info) != 0 && info.dli_fname) {
      char* real = ::realpath(info.dli_fname, nullptr);
      const bool own = real && canonical == real;
      std::free(real);
      if (own && *version != kPluginInterfaceVersion) {
        errors.push_back("it was compiled against kiln's plugin interface version " + std::to_string(*version) +
                         ", this kiln has version " + std::to_string(kPluginInterfaceVersion) +
                         " (include/kiln/plugin.h); rebuild it against this kiln");
        // Its creators leave the registry unused (and undestroyed: nothing of it is called).
        std::lock_guard<std::mutex> lock(m.mutex);
        for (auto& e : m.entries) {
          if (e.library == canonical) m.refused.push_back(e.creator.release());
        }
        m.entries.erase(std::remove_if(m.entries.begin(), m.entries.end(),
                                       [](const PluginRegistry::Impl::Entry& e) { return !e.creator; }),
                        m.entries.end());
        m.loaded.erase(canonical);
      }
    }
  }
  if (!handle) {
    const char* why = dlerror();
    throw Error("cannot load plugin library " + quote(path) + ": " + (why ? why : "unknown loader error") +
                " (an 'undefined symbol' means the library needs another library loaded first or was built "
                "against another kiln version)");
  }
  if (!errors.empty()) {
    std::string msg = "plugin library " + quote(path) + ":";
    for (const auto& e : errors) msg += " " + e + ";";
    throw Error(msg);
  }
  if (names.empty()) {
    throw Error("plugin library '" + path +
                "' loaded but registered no plugin creators (does it use KILN_REGISTER_PLUGIN(YourCreator)?)");
  }
  return names;
}

}  // namespace kiln
