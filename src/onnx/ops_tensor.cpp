// ONNX importers that make or pass values through: Constant (a known constant, materialized as
// a Constant layer only if some layer reads it), ConstantOfShape and Range (Fill layers), Cast,
// Identity and Dropout (inference: copies), and the Gather family.
#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"

namespace kiln {
namespace {

void import_constant(NodeContext& ctx) {
  HostTensor value;
  if (ctx.has_attr("value")) {
    value = ctx.attr_tensor("value");
  } else if (ctx.has_attr("value_float")) {
    value = HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{static_cast<float>(ctx.attr_float("value_float", 0))});
  } else if (ctx.has_attr("value_floats")) {
    std::vector<float> v;
    for (double d : ctx.attr_floats("value_floats")) v.push_back(static_cast<float>(d));
    value = HostTensor::from_vector(DataType::kFloat32, Dims{static_cast<int64_t>(v.size())}, v);
  } else if (ctx.has_attr("value_int")) {
    value = HostTensor::from_vector(DataType::kInt64, Dims{}, std::vector<int64_t>{ctx.attr_int("value_int", 0)});
  } else if (ctx.has_attr("value_ints")) {
    const auto v = ctx.attr_ints("value_ints");
    value = HostTensor::from_vector(DataType::kInt64, Dims{static_cast<int64_t>(v.size())}, v);
  } else if (ctx.has_attr("value_string") || ctx.has_attr("value_strings")) {
    ctx.unsupported("string constants");
  } else if (ctx.has_attr("sparse_value")) {
    ctx.unsupported("sparse constants");
  } else {
    ctx.fail("has no value attribute");
  }
  ctx.set_output_constant(0, value);
}
KILN_REGISTER_ONNX_IMPORTER("Constant", import_constant);

void import_constant_of_shape(NodeContext& ctx) {
  Attributes a;
  a.set("mode", std::string("constant"));
  if (ctx.has_attr("value")) {
    HostTensor value = ctx.attr_tensor("value");
    if (value.count() != 1) ctx.fail("attribute 'value' must have exactly one element, has " + std::to_string(value.count()));
    a.set("value", value);
  } else {
    a.set("value", HostTensor::from_vector(DataType::kFloat32, Dims{1}, std::vector<float>{0.0f}));
  }
  ctx.set_output(0, ctx.add_layer(kLayerFill, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("ConstantOfShape", import_constant_of_shape);

void import_range(NodeContext& ctx) {
  Attributes a;
  a.set("mode", std::string("range"));
  Tensor* start = ctx.required_input(0, "start");
  Tensor* limit = ctx.required_input(1, "limit");
  Tensor* delta = ctx.required_input(2, "delta");
  ctx.set_output(0, ctx.add_layer(kLayerFill, {start, limit, delta}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Range", import_range);

void import_cast(NodeContext& ctx) {
  if (!ctx.has_attr("to")) ctx.fail("attribute 'to' is required");
  const int64_t to = ctx.attr_int("to", 0);
  const auto type = data_type_from_onnx(static_cast<int32_t>(to));
  if (!type) ctx.unsupported("cast to " + onnx_data_type_name(static_cast<int32_t>(to)));
  Attributes a;
  a.set("to", std::string(to_string(*type)));
  ctx.set_output(0, ctx.add_layer(kLayerCast, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Cast", import_cast);

// A copy; of a constant it is the same constant (exporters route shared weights through
// Identity nodes, and weights must stay recognizable as constants).
void pass_through(NodeContext& ctx) {
  if (const HostTensor* value = ctx.constant(0)) {
    ctx.set_output_constant(0, *value);
    return;
  }
  ctx.set_output(0, ctx.add_layer(kLayerIdentity, {ctx.required_input(0, "input")}, 1)->output(0));
}

void import_identity(NodeContext& ctx) { pass_through(ctx); }
KILN_REGISTER_ONNX_IMPORTER("Identity", import_identity);

void import_dropout(NodeContext& ctx) {
  if (ctx.output_used(1)) ctx.unsupported("the mask output of Dropout (kiln imports inference graphs only)");
  if (ctx.has_input(2)) {
    const HostTensor* training = ctx.constant(2);
    if (!training) ctx.unsupported("a training_mode input that is not constant");
    if (training->count() != 1 || training->to_int64()[0] != 0) ctx.unsupported("training_mode=true");
  }
  pass_through(ctx);
}
KILN_REGISTER_ONNX_IMPORTER("Dropout", import_dropout);

void import_gather_mode(NodeContext& ctx, const char* mode) {
  Tensor* data = ctx.required_input(0, "data");
  Tensor* indices = ctx.required_input(1, "indices");
  Attributes a;
  a.set("mode", std::string(mode));
  if (std::string(mode) == "nd") {
    a.set("batch_dims", ctx.attr_int("batch_dims", 0));
  } else {
    a.set("axis", ctx.attr_int("axis", 0));
  }
  ctx.set_output(0, ctx.add_layer(kLayerGather, {data, indices}, 1, std::move(a))->output(0));
}

void import_gather(NodeContext& ctx) { import_gather_mode(ctx, "default"); }
void import_gather_elements(NodeContext& ctx) { import_gather_mode(ctx, "elements"); }
void import_gather_nd(NodeContext& ctx) { import_gather_mode(ctx, "nd"); }
KILN_REGISTER_ONNX_IMPORTER("Gather", import_gather);
KILN_REGISTER_ONNX_IMPORTER("GatherElements", import_gather_elements);
KILN_REGISTER_ONNX_IMPORTER("GatherND", import_gather_nd);

}  // namespace
}  // namespace kiln
