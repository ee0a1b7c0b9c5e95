// Plugins from Python: load_plugin_library, the registry with its creators and field schemas,
// PluginField, creator.create(...) -> a plugin object for Network.add_plugin, `kiln plugin check`
// (check_plugin), and plugins written in Python (kiln.plugin.register, python/kiln/plugin.py):
// a C++ Plugin whose questions (output types and symbolic dims) and kernels (numpy on the CPU,
// torch/cupy/Triton on CUDA, on kiln's stream) are answered by a Python spec object.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common.h"
#include "src/plugins/plugin_check.h"

namespace kiln::python {

namespace {

std::string python_error_text(nb::python_error& e) {
  std::string what = e.what();
  e.restore();
  PyErr_Clear();
  return what;
}

// ---- fields -------------------------------------------------------------------------------

// The values of a (numpy-converted) sequence as T.
template <class T>
std::vector<T> values_as(nb::handle seq) {
  std::vector<T> out;
  for (nb::handle e : seq) {
    if constexpr (std::is_floating_point_v<T>) {
      out.push_back(static_cast<T>(PyFloat_AsDouble(e.ptr())));
    } else {
      out.push_back(static_cast<T>(PyLong_AsLongLong(e.ptr())));
    }
    if (PyErr_Occurred()) throw nb::python_error();
  }
  return out;
}

PluginField field_from(const std::string& name, nb::handle value, nb::handle type) {
  if (!type.is_none()) {
    const auto t = nb::cast<PluginFieldType>(type);
    nb::module_ np = nb::module_::import_("numpy");
    switch (t) {
      case PluginFieldType::kFloat32:
        return PluginField::float32(
            name, values_as<float>(np.attr("asarray")(value, "float32").attr("ravel")().attr("tolist")()));
      case PluginFieldType::kFloat64:
        return PluginField::float64(
            name, values_as<double>(np.attr("asarray")(value, "float64").attr("ravel")().attr("tolist")()));
      case PluginFieldType::kInt32:
        return PluginField::int32(
            name, values_as<int32_t>(np.attr("asarray")(value, "int32").attr("ravel")().attr("tolist")()));
      case PluginFieldType::kInt64:
        return PluginField::int64(
            name, values_as<int64_t>(np.attr("asarray")(value, "int64").attr("ravel")().attr("tolist")()));
      case PluginFieldType::kString:
        return PluginField::string(name, nb::cast<std::string>(value));
      case PluginFieldType::kTensor:
        return PluginField::tensor_value(name, host_tensor_from(nb::cast<AnyArray>(value), "field '" + name + "'"));
    }
  }
  if (PyUnicode_Check(value.ptr())) return PluginField::string(name, nb::cast<std::string>(value));
  if (PyBytes_Check(value.ptr()))
    return PluginField::string(name, std::string(nb::cast<nb::bytes>(value).c_str(), nb::len(value)));
  if (PyBool_Check(value.ptr()) || PyLong_Check(value.ptr()))
    return PluginField::int64(name, {nb::cast<int64_t>(value)});
  if (PyFloat_Check(value.ptr())) return PluginField::float64(name, {nb::cast<double>(value)});
  // Arrays (TensorRT's PluginField(name, numpy array, type)) and lists: typed by their dtype.
  nb::object arr = nb::module_::import_("numpy").attr("asarray")(value);
  const std::string dt = nb::cast<std::string>(arr.attr("dtype").attr("name"));
  nb::object flat = arr.attr("ravel")().attr("tolist")();
  if (dt == "float32") return PluginField::float32(name, values_as<float>(flat));
  if (dt == "float64") return PluginField::float64(name, values_as<double>(flat));
  if (dt == "int32") return PluginField::int32(name, values_as<int32_t>(flat));
  if (dt == "int64" || dt == "bool") return PluginField::int64(name, values_as<int64_t>(flat));
  throw Error("field '" + name + "': a value of numpy type " + dt +
              " is not a plugin field type (float32/64, int32/64, str, or an array with type=PluginFieldType.tensor)");
}

nb::object field_value(const PluginField& f) {
  auto one_or_list = [](const auto& v) -> nb::object {
    if (v.size() == 1) return nb::cast(v[0]);
    return nb::cast(v);
  };
  switch (f.type) {
    case PluginFieldType::kFloat32:
      return one_or_list(f.f32);
    case PluginFieldType::kFloat64:
      return one_or_list(f.f64);
    case PluginFieldType::kInt32:
      return one_or_list(f.i32);
    case PluginFieldType::kInt64:
      return one_or_list(f.i64);
    case PluginFieldType::kString:
      return nb::cast(f.str);
    case PluginFieldType::kTensor:
      return numpy_from(f.tensor);
  }
  return nb::none();
}

// Calls into plugins and creators go through the entry points of the library that made them
// (include/kiln/plugin.h, "the library boundary"); a failure raises kiln.Error with the call.
void check_call(const PluginStatus& s, const std::string& what) {
  if (!s.ok()) throw Error(what + " " + s.message());
}
const detail::PluginEntryPoints& entry_of(const PluginCreator& c) { return PluginRegistry::instance().entry_points(c); }
const detail::PluginEntryPoints& entry_of(const Plugin& p) {
  return p.entry_points() ? *p.entry_points() : detail::in_process_entry_points();
}
struct CreatorId {
  std::string name, version, plugin_namespace;
};
CreatorId creator_id(const PluginCreator& c) {
  CreatorId id;
  check_call(entry_of(c).creator_identity(c, &id.name, &id.version, &id.plugin_namespace), "PluginCreator name()");
  return id;
}
std::vector<PluginFieldSpec> schema_of(const PluginCreator& c) {
  std::vector<PluginFieldSpec> schema;
  check_call(entry_of(c).field_schema(c, &schema), "plugin '" + creator_id(c).name + "' field_schema()");
  return schema;
}

nb::dict fields_dict(const PluginFieldCollection& c) {
  nb::dict d;
  for (const PluginField& f : c.all()) d[f.name.c_str()] = field_value(f);
  return d;
}

// Fields from a dict {name: value} (Python values converted to the schema's type when `creator`
// is given), a list of PluginField, or a PluginFieldCollection.
PluginFieldCollection collection_from(nb::handle fields, const PluginCreator* creator = nullptr) {
  PluginFieldCollection c;
  if (fields.is_none()) return c;
  if (nb::isinstance<nb::dict>(fields)) {
    std::vector<PluginFieldSpec> schema;
    if (creator) schema = schema_of(*creator);
    for (auto [k, v] : nb::borrow<nb::dict>(fields)) {
      const std::string name = nb::cast<std::string>(k);
      if (nb::isinstance<PluginField>(v)) {
        c.add(nb::cast<PluginField>(v));
        continue;
      }
      nb::object type = nb::none();
      for (const auto& s : schema) {
        const bool numeric = s.type != PluginFieldType::kString && s.type != PluginFieldType::kTensor;
        const bool is_number =
            PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr()) || PyList_Check(v.ptr()) || PyTuple_Check(v.ptr());
        if (s.name == name && numeric && is_number) type = nb::cast(s.type);
      }
      try {
        c.add(field_from(name, v, type));
      } catch (nb::python_error& e) {
        throw Error("field '" + name + "': " + python_error_text(e));
      }
    }
    return c;
  }
  if (nb::isinstance<PluginFieldCollection>(fields)) return nb::cast<PluginFieldCollection>(fields);
  for (nb::handle f : nb::borrow<nb::sequence>(fields)) c.add(nb::cast<PluginField>(f));
  return c;
}

// ---- plugins written in Python ------------------------------------------------------------

// A symbolic extent for Python shape functions: valid only during the output_dims call that made it.
struct PyDim {
  ExprBuilder* builder = nullptr;
  const DimExpr* expr = nullptr;
};

const DimExpr* expr_of(ExprBuilder& b, nb::handle v) {
  if (nb::isinstance<PyDim>(v)) return nb::cast<PyDim&>(v).expr;
  if (PyLong_Check(v.ptr())) return b.constant(nb::cast<int64_t>(v));
  throw Error("a plugin shape must hold ints or kiln.plugin dims, not " +
              nb::cast<std::string>(nb::type_name(v.type())));
}

PyDim op(const PyDim& a, nb::handle b, DimOp o, bool swap = false) {
  const DimExpr* other = expr_of(*a.builder, b);
  return swap ? PyDim{a.builder, a.builder->operation(o, *other, *a.expr)}
              : PyDim{a.builder, a.builder->operation(o, *a.expr, *other)};
}

// What a Python plugin spec declares (python/kiln/plugin.py passes it).
struct PySpecInfo {
  std::string name, version, plugin_namespace, module;
  int num_outputs = 1;
  std::vector<DataType> dtypes;  // supported types (every input and output of one type)
  std::vector<PluginFieldSpec> fields;
  std::vector<int> aliases;  // per output: the input it may reuse (Plugin::aliased_input), or -1
  PyObject* spec = nullptr;  // the spec object; a strong reference held forever
};

class PyPlugin : public Plugin {
 public:
  PyPlugin(std::shared_ptr<const PySpecInfo> info, PluginFieldCollection fields)
      : info_(std::move(info)), fields_(std::move(fields)) {}
  std::string type() const override { return info_->name; }
  std::string version() const override { return info_->version; }
  std::string plugin_namespace() const override { return info_->plugin_namespace; }
  int num_outputs() const override { return info_->num_outputs; }
  int aliased_input(int output_index) const override {
    return output_index < static_cast<int>(info_->aliases.size()) ? info_->aliases[static_cast<size_t>(output_index)]
                                                                  : -1;
  }

  std::vector<DataType> output_types(const std::vector<DataType>& in) const override {
    nb::gil_scoped_acquire gil;
    try {
      nb::object r = nb::handle(info_->spec).attr("_output_types")(in, fields_dict(fields_));
      return nb::cast<std::vector<DataType>>(r);
    } catch (nb::python_error& e) {
      throw Error("Python plugin '" + info_->name + "': output types: " + python_error_text(e));
    }
  }

  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const override {
    nb::gil_scoped_acquire gil;
    try {
      nb::list ins;
      for (const DimsExprs& d : inputs) {
        nb::list dims;
        for (const DimExpr* e : d.d) dims.append(PyDim{&exprs, e});
        ins.append(dims);
      }
      nb::object r = nb::handle(info_->spec).attr("_output_dims")(index, ins, fields_dict(fields_));
      DimsExprs out;
      for (nb::handle v : nb::borrow<nb::sequence>(r)) out.d.push_back(expr_of(exprs, v));
      return out;
    } catch (nb::python_error& e) {
      throw Error("Python plugin '" + info_->name + "': shape function: " + python_error_text(e));
    }
  }

  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& io, int num_inputs,
                                   int) const override {
    const PluginTensorDesc& d = io[static_cast<size_t>(pos)];
    if (d.format != TensorFormat::kLinear) return false;
    if (pos >= num_inputs) return true;  // outputs: the types output_types() gave
    if (std::find(info_->dtypes.begin(), info_->dtypes.end(), d.type) == info_->dtypes.end()) return false;
    return pos == 0 || d.type == io[0].type;
  }

  int enqueue(const std::vector<PluginTensorDesc>& in, const std::vector<PluginTensorDesc>& out,
              const void* const* inputs, void* const* outputs, void*, const PluginExecContext& exec) override {
    if (!Py_IsInitialized()) return exec.fail("the Python interpreter has ended");
    nb::gil_scoped_acquire gil;
    try {
      const bool cpu = exec.device == DeviceType::kCPU;
      auto wrap = [&](const PluginTensorDesc& d, const void* p) -> nb::object {
        std::vector<size_t> shape;
        for (int64_t e : d.dims) shape.push_back(static_cast<size_t>(e));
        if (cpu) {
          nb::ndarray<nb::numpy> a(const_cast<void*>(p), shape.size(), shape.data(), nb::handle(), nullptr,
                                   dlpack_dtype(d.type));
          return a.cast(nb::rv_policy::reference);  // a view of kiln's buffer, no copy
        }
        return nb::make_tuple(reinterpret_cast<uintptr_t>(p), dims_to_tuple(d.dims), d.type);
      };
      nb::list ins, outs;
      for (size_t i = 0; i < in.size(); ++i) ins.append(wrap(in[i], inputs[i]));
      for (size_t i = 0; i < out.size(); ++i) outs.append(wrap(out[i], outputs[i]));
      nb::handle(info_->spec)
          .attr("_enqueue")(cpu ? "cpu" : "cuda", ins, outs, fields_dict(fields_),
                            reinterpret_cast<uintptr_t>(exec.stream), exec.num_threads);
      return 0;
    } catch (nb::python_error& e) {
      return exec.fail("Python plugin '" + info_->name + "' (" + info_->module + "): " + python_error_text(e));
    } catch (const std::exception& e) {
      return exec.fail(e.what());
    }
  }

  std::unique_ptr<Plugin> clone() const override { return std::make_unique<PyPlugin>(*this); }
  PluginFieldCollection fields() const override { return fields_; }

 private:
  std::shared_ptr<const PySpecInfo> info_;
  PluginFieldCollection fields_;
};

class PyPluginCreator : public PluginCreator {
 public:
  explicit PyPluginCreator(std::shared_ptr<const PySpecInfo> info) : info_(std::move(info)) {}
  std::string name() const override { return info_->name; }
  std::string version() const override { return info_->version; }
  std::string plugin_namespace() const override { return info_->plugin_namespace; }
  std::vector<PluginFieldSpec> field_schema() const override { return info_->fields; }
  std::unique_ptr<Plugin> create(const std::string&, const PluginFieldCollection& fields) const override {
    return std::make_unique<PyPlugin>(info_, fields);
  }

 private:
  std::shared_ptr<const PySpecInfo> info_;
};

struct RegistryHandle {};

struct CreatorHandle {
  const PluginCreator* creator = nullptr;
};

// creator.create / create_plugin: fields checked against the schema (Python numbers converted to
// its types), then the creator's plugin.
PluginObject* create_plugin(const CreatorHandle& c, const std::string& layer_name, nb::handle fields) {
  const PluginFieldCollection resolved = PluginRegistry::instance().resolve_fields(
      *c.creator, collection_from(fields, c.creator), "plugin '" + layer_name + "'");
  std::unique_ptr<Plugin> p;
  const std::string name = creator_id(*c.creator).name;
  check_call(entry_of(*c.creator).create(*c.creator, layer_name, resolved, &p), "plugin '" + name + "' create()");
  if (!p) throw Error("the creator of '" + name + "' returned no plugin for '" + layer_name + "'");
  return new PluginObject{std::move(p)};
}

// registry.get_creator / get_plugin_creator: the creator, or None.
nb::object find_creator(const RegistryHandle&, const std::string& name, const std::string& version,
                        const std::string& ns) {
  const PluginCreator* c = PluginRegistry::instance().find(name, version, ns);
  if (!c) return nb::none();
  return nb::cast(CreatorHandle{c});
}

nb::dict check_report_dict(const PluginCheckReport& r) {
  nb::dict d;
  d["plugin"] = r.plugin;
  d["library"] = r.library;
  d["device"] = to_string(r.device);
  d["fields"] = r.fields;
  d["num_inputs"] = r.num_inputs;
  d["num_outputs"] = r.num_outputs;
  d["passed"] = r.passed();
  nb::list checks;
  for (const auto& c : r.checks) {
    nb::dict cd;
    cd["name"] = c.name;
    cd["status"] = to_string(c.status);
    cd["message"] = c.message;
    checks.append(cd);
  }
  d["checks"] = checks;
  return d;
}

}  // namespace

void bind_plugins(nb::module_& m) {
  nb::enum_<PluginFieldType>(m, "PluginFieldType", "Types of plugin fields.")
      .value("float32", PluginFieldType::kFloat32)
      .value("float64", PluginFieldType::kFloat64)
      .value("int32", PluginFieldType::kInt32)
      .value("int64", PluginFieldType::kInt64)
      .value("string", PluginFieldType::kString)
      .value("tensor", PluginFieldType::kTensor);

  nb::class_<PluginField>(m, "PluginField", "One plugin field: a name and typed values (TensorRT's PluginField).")
      .def(
          "__init__",
          [](PluginField* f, const std::string& name, nb::handle value, nb::handle type) {
            new (f) PluginField(field_from(name, value, type));
          },
          "name"_a, "value"_a, "type"_a = nb::none(),
          "value: a numpy array (typed by its dtype), a list, a number (int -> int64, float -> float64) or a str; "
          "type (a PluginFieldType) converts it.")
      .def_ro("name", &PluginField::name)
      .def_ro("type", &PluginField::type)
      .def_prop_ro("value", [](const PluginField& f) { return field_value(f); })
      .def("__repr__", [](const PluginField& f) {
        return "<kiln.PluginField '" + f.name + "' " + to_string(f.type) + " " +
               nb::cast<std::string>(nb::repr(field_value(f))) + ">";
      });

  nb::class_<PluginFieldCollection>(m, "PluginFieldCollection", "Fields for creator.create (a list of PluginField).")
      .def(
          "__init__",
          [](PluginFieldCollection* c, nb::handle fields) { new (c) PluginFieldCollection(collection_from(fields)); },
          "fields"_a = nb::none())
      .def("add", &PluginFieldCollection::add, "field"_a, "Appends a PluginField.")
      .def("__len__", [](const PluginFieldCollection& c) { return c.all().size(); })
      .def("to_dict", &fields_dict, "The fields as {name: value} (one value or a list).");

  nb::class_<PluginFieldSpec>(m, "PluginFieldSpec", "One entry of a creator's field schema.")
      .def_ro("name", &PluginFieldSpec::name)
      .def_ro("type", &PluginFieldSpec::type)
      .def_ro("count", &PluginFieldSpec::count, "-1: any count")
      .def_ro("required", &PluginFieldSpec::required)
      .def_prop_ro("default",
                   [](const PluginFieldSpec& s) { return s.required ? nb::none() : field_value(s.default_value); })
      .def_ro("description", &PluginFieldSpec::description)
      .def("__repr__", [](const PluginFieldSpec& s) {
        return "<kiln.PluginFieldSpec '" + s.name + "' " + to_string(s.type) + (s.required ? " required" : "") + ">";
      });

  nb::class_<PluginObject>(m, "Plugin", "A plugin object, for Network.add_plugin.")
      .def_prop_ro("type",
                   [](const PluginObject& p) {
                     std::string type, version, ns;
                     check_call(entry_of(*p.plugin).identity(*p.plugin, &type, &version, &ns), "Plugin type()");
                     return type;
                   })
      .def_prop_ro("fields", [](const PluginObject& p) {
        PluginFieldCollection fields;
        check_call(entry_of(*p.plugin).fields(*p.plugin, &fields), "Plugin fields()");
        return fields_dict(fields);
      });

  nb::class_<CreatorHandle>(m, "PluginCreator", "A registered plugin creator (TensorRT's IPluginCreator).")
      .def_prop_ro("name", [](const CreatorHandle& c) { return creator_id(*c.creator).name; })
      .def_prop_ro("plugin_version", [](const CreatorHandle& c) { return creator_id(*c.creator).version; })
      .def_prop_ro("plugin_namespace", [](const CreatorHandle& c) { return creator_id(*c.creator).plugin_namespace; })
      .def_prop_ro(
          "library",
          [](const CreatorHandle& c) {
            const CreatorId id = creator_id(*c.creator);
            return PluginRegistry::instance().library_of(id.name, id.version, id.plugin_namespace);
          },
          "The library it came from ('' when built in; 'python:<module>' for Python plugins).")
      .def_prop_ro(
          "field_names", [](const CreatorHandle& c) { return schema_of(*c.creator); }, "The field schema.")
      .def("create", &create_plugin, "name"_a, "fields"_a = nb::none(), nb::rv_policy::take_ownership,
           "A plugin from fields (a dict {name: value}, a list of PluginField or a PluginFieldCollection), checked "
           "against the schema with defaults filled in; raises naming the field when one is missing or mistyped.")
      .def("create_plugin", &create_plugin, "name"_a, "field_collection"_a, nb::rv_policy::take_ownership,
           "create() under TensorRT's name.")
      .def("__repr__", [](const CreatorHandle& c) {
        const CreatorId id = creator_id(*c.creator);
        return "<kiln.PluginCreator '" + id.name + "' v" + id.version + " ns='" + id.plugin_namespace + "'>";
      });

  nb::class_<RegistryHandle>(m, "PluginRegistry", "The process-wide plugin registry (kiln.plugin_registry()).")
      .def("get_creator", &find_creator, "name"_a, "version"_a = "1", "namespace"_a = "",
           "The creator, or None when not registered.")
      .def("get_plugin_creator", &find_creator, "type"_a, "version"_a = "1", "plugin_namespace"_a = "",
           "get_creator under TensorRT's name.")
      .def_prop_ro(
          "plugin_creator_list",
          [](const RegistryHandle&) {
            std::vector<CreatorHandle> out;
            for (const PluginInfo& p : PluginRegistry::instance().list()) {
              out.push_back(CreatorHandle{PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace)});
            }
            return out;
          },
          "Every registered creator.");
  m.def(
      "plugin_registry", [] { return RegistryHandle{}; }, "The process-wide plugin registry.");
  m.def(
      "get_plugin_registry", [] { return RegistryHandle{}; }, "plugin_registry() under TensorRT's name.");
  m.def("load_plugin_library", &load_plugin_library, "path"_a,
        "Loads a plugin library (dlopen) and registers its creators; returns their names. Loading the same library "
        "again (by any path) is a no-op.");

  m.def(
      "check_plugin",
      [](const std::string& name, const std::string& version, const std::string& ns, DeviceType device,
         nb::handle fields, int num_inputs) {
        PluginCheckOptions o;
        o.name = name;
        o.version = version;
        o.plugin_namespace = ns;
        o.device = device;
        o.fields = collection_from(fields);
        o.num_inputs = num_inputs;
        PluginCheckReport r;
        {
          nb::gil_scoped_release release;
          r = check_plugin(o);
        }
        return check_report_dict(r);
      },
      "name"_a, "version"_a = "1", "namespace"_a = "", "device"_a = DeviceType::kCPU, "fields"_a = nb::none(),
      "num_inputs"_a = 0,
      "`kiln plugin check` from Python: the conformance suite on a registered plugin (shapes, types, formats, "
      "serialization, workspace, stream discipline, determinism); a dict with 'passed' and every check.");

  nb::class_<PyDim>(m, "Dim", "A symbolic extent in a plugin shape function (valid during that call only).")
      .def("__add__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kSum); })
      .def("__radd__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kSum, true); })
      .def("__sub__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kSub); })
      .def("__rsub__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kSub, true); })
      .def("__mul__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kProd); })
      .def("__rmul__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kProd, true); })
      .def("__floordiv__", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kFloorDiv); })
      .def(
          "ceil_div", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kCeilDiv); }, "other"_a,
          "ceil(self / other).")
      .def(
          "min", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kMin); }, "other"_a, "min(self, other).")
      .def(
          "max", [](const PyDim& a, nb::handle b) { return op(a, b, DimOp::kMax); }, "other"_a, "max(self, other).")
      .def(
          "require_equal",
          [](const PyDim& a, nb::handle b) {
            return PyDim{a.builder, a.builder->require_equal(*a.expr, *expr_of(*a.builder, b))};
          },
          "other"_a, "Declares the two extents equal; kiln checks it for every shape, naming the layer.")
      .def_prop_ro("is_constant", [](const PyDim& a) { return a.expr->is_constant(); })
      .def_prop_ro("constant_value", [](const PyDim& a) { return a.expr->constant_value(); })
      .def("__repr__", [](const PyDim& a) { return a.expr->to_string(); });
  m.def("_constant", [](const PyDim& like, int64_t v) { return PyDim{like.builder, like.builder->constant(v)}; });
  m.def(
      "_broadcast",
      [](const std::vector<PyDim>& a, const std::vector<PyDim>& b) {
        if (a.empty() && b.empty()) return std::vector<PyDim>{};
        ExprBuilder* builder = a.empty() ? b[0].builder : a[0].builder;
        DimsExprs da, db;
        for (const PyDim& d : a) da.d.push_back(d.expr);
        for (const PyDim& d : b) db.d.push_back(d.expr);
        std::vector<PyDim> out;
        for (const DimExpr* e : builder->broadcast(da, db).d) out.push_back(PyDim{builder, e});
        return out;
      },
      "a"_a, "b"_a);

  m.def(
      "_register_python_plugin",
      [](nb::object spec, const std::string& name, const std::string& version, const std::string& ns,
         const std::string& module, int num_outputs, const std::vector<DataType>& dtypes, nb::list fields,
         const std::vector<int>& aliases, bool replace) {
        auto info = std::make_shared<PySpecInfo>();
        info->name = name;
        info->version = version;
        info->plugin_namespace = ns;
        info->module = module;
        info->num_outputs = num_outputs;
        info->dtypes = dtypes;
        info->aliases = aliases;
        for (nb::handle f : fields) {
          nb::tuple t = nb::borrow<nb::tuple>(f);  // (name, type, count, required, default or None, description)
          PluginFieldSpec s;
          s.name = nb::cast<std::string>(t[0]);
          s.type = nb::cast<PluginFieldType>(t[1]);
          s.count = nb::cast<int64_t>(t[2]);
          s.required = nb::cast<bool>(t[3]);
          if (!s.required) s.default_value = field_from(s.name, t[4], t[1]);
          s.description = nb::cast<std::string>(t[5]);
          info->fields.push_back(std::move(s));
        }
        info->spec = spec.inc_ref().ptr();  // held for the process's life, like the registry entry
        PluginRegistry::instance().register_creator(std::make_unique<PyPluginCreator>(info), "python:" + module,
                                                    replace);
      },
      "spec"_a, "name"_a, "version"_a, "namespace"_a, "module"_a, "num_outputs"_a, "dtypes"_a, "fields"_a, "aliases"_a,
      "replace"_a = false);
}

}  // namespace kiln::python
