// ONNX importers that make or pass values through: Constant (a known constant, materialized as
// a Constant layer only if some layer reads it), ConstantOfShape and Range (Fill layers), Cast,
// Identity and Dropout (inference: copies), and the Gather family.
#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"

namespace kiln {
namespace {

// Element types for the OnnxImporterInfo of the registrations below (docs/onnx-support.md).
constexpr const char* kAllTypes = "every kiln type (float32/16/64, int8, uint8, int32, int64, bool)";

void import_constant(NodeContext& ctx) {
  HostTensor value;
  if (ctx.has_attr("value")) {
    value = ctx.attr_tensor("value");
  } else if (ctx.has_attr("value_float")) {
    value = HostTensor::from_vector(DataType::kFloat32, Dims{},
                                    std::vector<float>{static_cast<float>(ctx.attr_float("value_float", 0))});
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
KILN_REGISTER_ONNX_IMPORTER("Constant", import_constant,
                            {.min_opset = 1,
                             .types = kAllTypes,
                             .notes = "string and sparse values are not supported"});

void import_constant_of_shape(NodeContext& ctx) {
  Attributes a;
  a.set("mode", std::string("constant"));
  if (ctx.has_attr("value")) {
    HostTensor value = ctx.attr_tensor("value");
    if (value.count() != 1)
      ctx.fail("attribute 'value' must have exactly one element, has " + std::to_string(value.count()));
    a.set("value", value);
  } else {
    a.set("value", HostTensor::from_vector(DataType::kFloat32, Dims{1}, std::vector<float>{0.0f}));
  }
  ctx.set_output(0, ctx.add_layer(kLayerFill, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("ConstantOfShape", import_constant_of_shape, {.min_opset = 9, .types = kAllTypes});

void import_range(NodeContext& ctx) {
  Attributes a;
  a.set("mode", std::string("range"));
  Tensor* start = ctx.required_input(0, "start");
  Tensor* limit = ctx.required_input(1, "limit");
  Tensor* delta = ctx.required_input(2, "delta");
  ctx.set_output(0, ctx.add_layer(kLayerFill, {start, limit, delta}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Range", import_range, {.min_opset = 11, .types = "float32, float64, int32, int64"});

void import_cast(NodeContext& ctx) {
  if (!ctx.has_attr("to")) ctx.fail("attribute 'to' is required");
  const int64_t to = ctx.attr_int("to", 0);
  const auto type = data_type_from_onnx(static_cast<int32_t>(to));
  if (!type) ctx.unsupported("cast to " + onnx_data_type_name(static_cast<int32_t>(to)));
  Attributes a;
  a.set("to", std::string(to_string(*type)));
  ctx.set_output(0, ctx.add_layer(kLayerCast, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Cast", import_cast,
                            {.min_opset = 1,
                             .types = "every kiln type (float32/16/64, int8/16/32/64, uint8/16/32/64, bool, string)",
                             .notes = "string on the CPU only (string: numpy's text of "
                                      "numbers; docs/layers.md); bfloat16 is not supported"});

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
KILN_REGISTER_ONNX_IMPORTER("Identity", import_identity,
                            {.min_opset = 1, .types = kAllTypes, .notes = "sequences and optionals are not supported"});

// Inference: y = x and the mask is all true. In training mode Dropout is random unless its ratio
// is 0, which the backend tests use; other training-mode ratios are rejected.
void import_dropout(NodeContext& ctx) {
  bool training = false;  // is_test of opsets < 7 is ignored, as ONNX Runtime does
  if (ctx.opset() >= 12 && ctx.has_input(2)) {
    const HostTensor& t = ctx.constant_input(2, "training_mode");
    if (t.count() != 1) ctx.fail("training_mode must be a scalar");
    training = t.to_int64()[0] != 0;
  }
  if (training) {
    double ratio = 0.5;
    if (ctx.has_input(1)) {
      const HostTensor& r = ctx.constant_input(1, "ratio");
      if (r.count() != 1) ctx.fail("ratio must be a scalar");
      ratio = r.to_double()[0];
    }
    if (ratio != 0.0) ctx.unsupported("training_mode=true with ratio " + std::to_string(ratio) + " (random masks)");
  }
  if (ctx.output_used(1)) {
    if (ctx.opset() < 10) ctx.unsupported("the mask output of Dropout before opset 10 (mask of the input's type)");
    Tensor* shape = ctx.add_layer(kLayerShape, {ctx.required_input(0, "data")}, 1, {}, "shape")->output(0);
    Attributes a;
    a.set("mode", std::string("constant"));
    a.set("value", HostTensor::from_vector(DataType::kBool, Dims{1}, std::vector<uint8_t>{1}));
    ctx.set_output(1, ctx.add_layer(kLayerFill, {shape}, 1, std::move(a), "mask")->output(0));
  }
  pass_through(ctx);
}
KILN_REGISTER_ONNX_IMPORTER(
    "Dropout", import_dropout,
    {.min_opset = 1,
     .types = kAllTypes,
     .notes = "inference: y = x, mask all true (opset 10+); training_mode=true only with ratio 0"});

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
KILN_REGISTER_ONNX_IMPORTER("Gather", import_gather, {.min_opset = 1, .types = kAllTypes});
KILN_REGISTER_ONNX_IMPORTER("GatherElements", import_gather_elements, {.min_opset = 11, .types = kAllTypes});
KILN_REGISTER_ONNX_IMPORTER("GatherND", import_gather_nd, {.min_opset = 11, .types = kAllTypes});

}  // namespace
}  // namespace kiln
