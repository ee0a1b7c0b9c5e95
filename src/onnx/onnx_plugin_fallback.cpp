// The plugin fallback of the ONNX importer: a node that no built-in importer handles (an
// unknown op, or any op of a non-default domain such as `custom::TemperatureSwish`) becomes a
// Plugin layer when a plugin creator of the same name is registered. Version and namespace come
// from the node's `plugin_version` / `plugin_namespace` attributes (defaults "1" and ""). Other
// attributes map to the creator's typed fields: FLOAT(S) -> float32 (or float64), INT(S) ->
// int64 (int32 fields only when every value fits: no silent narrowing), STRING(S) -> string,
// TENSOR -> tensor. A missing required field or a type mismatch is an error naming the node and
// the field.
#include <limits>

#include "kiln/error.h"
#include "kiln/plugin.h"
#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"
#include "src/plugins/plugin_calls.h"
#include "src/plugins/plugin_layer.h"
#include "src/core/text.h"

namespace kiln {

namespace {

const char* onnx_attr_type_name(int t) {
  switch (t) {
    case onnx::AttributeProto::FLOAT:
      return "FLOAT";
    case onnx::AttributeProto::INT:
      return "INT";
    case onnx::AttributeProto::STRING:
      return "STRING";
    case onnx::AttributeProto::TENSOR:
      return "TENSOR";
    case onnx::AttributeProto::FLOATS:
      return "FLOATS";
    case onnx::AttributeProto::INTS:
      return "INTS";
    case onnx::AttributeProto::STRINGS:
      return "STRINGS";
    default:
      return "another type";
  }
}

PluginField field_from_attr(const onnx::AttributeProto& a, const PluginFieldSpec& spec, const std::string& where,
                            const std::string& base_dir) {
  auto mismatch = [&]() -> OnnxUnsupported {
    return OnnxUnsupported{where + ": attribute " + quote(a.name()) + " is " + onnx_attr_type_name(a.type()) +
                           " but plugin field " + quote(spec.name) + " is " + to_string(spec.type)};
  };
  PluginField f;
  f.name = spec.name;
  f.type = spec.type;
  switch (spec.type) {
    case PluginFieldType::kFloat32:
    case PluginFieldType::kFloat64: {
      std::vector<double> v;
      if (a.type() == onnx::AttributeProto::FLOAT) {
        v.push_back(a.f());
      } else if (a.type() == onnx::AttributeProto::FLOATS) {
        v.assign(a.floats().begin(), a.floats().end());
      } else {
        throw mismatch();
      }
      if (spec.type == PluginFieldType::kFloat32) {
        f.f32.assign(v.begin(), v.end());
      } else {
        f.f64 = v;
      }
      break;
    }
    case PluginFieldType::kInt64:
    case PluginFieldType::kInt32: {
      std::vector<int64_t> v;
      if (a.type() == onnx::AttributeProto::INT) {
        v.push_back(a.i());
      } else if (a.type() == onnx::AttributeProto::INTS) {
        v.assign(a.ints().begin(), a.ints().end());
      } else {
        throw mismatch();
      }
      if (spec.type == PluginFieldType::kInt64) {
        f.i64 = v;
      } else {
        for (int64_t x : v) {
          if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
            throw OnnxUnsupported{where + ": attribute " + quote(a.name()) + " value " + std::to_string(x) +
                                  " does not fit the int32 plugin field " + quote(spec.name)};
          }
          f.i32.push_back(static_cast<int32_t>(x));
        }
      }
      break;
    }
    case PluginFieldType::kString:
      if (a.type() == onnx::AttributeProto::STRING) {
        f.str = a.s();
      } else if (a.type() == onnx::AttributeProto::STRINGS && a.strings_size() == 1) {
        f.str = a.strings(0);
      } else {
        throw mismatch();
      }
      break;
    case PluginFieldType::kTensor:
      if (a.type() != onnx::AttributeProto::TENSOR) throw mismatch();
      f.tensor = tensor_from_proto(a.t(), base_dir, where + " attribute " + quote(a.name()));
      break;
  }
  return f;
}

}  // namespace

bool try_import_plugin_node(NodeContext& ctx) {
  const std::string version = ctx.attr_string("plugin_version", "1");
  const std::string ns = ctx.attr_string("plugin_namespace", "");
  const PluginCreator* creator = PluginRegistry::instance().find(ctx.op_type(), version, ns);
  if (!creator) return false;  // the driver reports the node as unsupported
  const std::string where = "node " + quote(ctx.name()) + " (" +
                            (ctx.node().domain().empty() ? "" : ctx.node().domain() + "::") + ctx.op_type() + ")";
  std::vector<PluginFieldSpec> schema;
  try {
    schema = creator_field_schema(*creator, where);
  } catch (const Error& e) {
    throw OnnxUnsupported{e.what()};
  }
  const std::string creator_name = ctx.op_type();  // found under that name
  PluginFieldCollection fields;
  for (const auto& a : ctx.node().attribute()) {
    if (a.name() == "plugin_version" || a.name() == "plugin_namespace") continue;
    const PluginFieldSpec* spec = nullptr;
    for (const auto& s : schema) {
      if (s.name == a.name()) spec = &s;
    }
    if (!spec) {
      std::string names;
      for (const auto& s : schema) names += (names.empty() ? "" : ", ") + s.name;
      throw OnnxUnsupported{where + ": attribute " + quote(a.name()) + " is not a field of plugin '" + creator_name +
                            "' (its fields: " + (names.empty() ? "none" : names) + ")"};
    }
    fields.add(field_from_attr(a, *spec, where, ctx.state().base_dir));
  }
  std::vector<Tensor*> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.required_input(i, "plugin input"));
  Layer* layer = nullptr;
  try {
    const std::string lname = ctx.network().find_layer(ctx.name()) || ctx.network().find_tensor(ctx.name())
                                  ? ctx.network().unique_name(ctx.name())
                                  : ctx.name();
    layer = add_plugin_layer(ctx.network(), inputs, *creator, fields, lname, where);
  } catch (const Error& e) {
    throw OnnxUnsupported{e.what()};
  }
  if (layer->num_outputs() < ctx.num_outputs()) {
    throw OnnxUnsupported{where + ": the node has " + std::to_string(ctx.num_outputs()) + " outputs but plugin '" +
                          creator_name + "' produces " + std::to_string(layer->num_outputs())};
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, layer->output(i));
  return true;
}

}  // namespace kiln
