// ONNX importers of the window generators HannWindow, HammingWindow and BlackmanWindow (opset
// 17), as compositions of general layers: n = Range(0, size) (a Fill "range", so `size` must be
// known on the host when shapes are inferred, as for ONNX Range), the angle a = n * 2pi / N with
// N = size (periodic) or size - 1 (symmetric), then the cosine sum
//   y = a0 - a1 cos(a) + a2 cos(2a)
// computed in float32, as ONNX's function bodies of these ops do, and cast to output_datatype.
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"

namespace kiln {
namespace {

// Coefficients of the cosine sum; the values of ONNX's function bodies (float32 constants).
struct WindowCoefficients {
  float a0, a1, a2;
};

Tensor* window_elementwise(NodeContext& ctx, Tensor* a, Tensor* b, const char* op, const std::string& suffix) {
  Attributes attrs;
  attrs.set("op", std::string(op));
  return ctx.add_layer(kLayerElementWise, {a, b}, 1, std::move(attrs), suffix)->output(0);
}

Tensor* window_cast(NodeContext& ctx, Tensor* x, DataType to, const std::string& suffix) {
  Attributes attrs;
  attrs.set("to", std::string(to_string(to)));
  return ctx.add_layer(kLayerCast, {x}, 1, std::move(attrs), suffix)->output(0);
}

Tensor* window_scalar(NodeContext& ctx, float value, const std::string& suffix) {
  return ctx.add_constant(HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{value}), suffix);
}

// a * cos(angle), the term of one coefficient.
Tensor* window_cosine_term(NodeContext& ctx, Tensor* angle, float a, const std::string& suffix) {
  Attributes cos;
  cos.set("op", std::string("cos"));
  Tensor* c = ctx.add_layer(kLayerUnary, {angle}, 1, std::move(cos), suffix + "_cos")->output(0);
  return window_elementwise(ctx, c, window_scalar(ctx, a, suffix + "_coefficient"), "prod", suffix);
}

void import_window(NodeContext& ctx, const WindowCoefficients& k) {
  const int32_t onnx_type = static_cast<int32_t>(ctx.attr_int("output_datatype", 1));
  const auto out_type = data_type_from_onnx(onnx_type);
  if (!out_type) ctx.unsupported("output_datatype " + onnx_data_type_name(onnx_type));
  if (*out_type == DataType::kBool) ctx.fail("output_datatype BOOL is not a numeric type");
  const int64_t periodic = ctx.attr_int("periodic", 1);
  if (periodic != 0 && periodic != 1) {
    ctx.fail("attribute 'periodic' is " + std::to_string(periodic) + "; it must be 0 or 1");
  }
  if (auto dims = ctx.input_dims(0); dims && dims->volume() != 1) {
    ctx.fail("input 'size' has dims " + dims->to_string() + "; it must be a scalar");
  }

  // Fill range wants its three inputs of one type.
  Tensor* size = window_cast(ctx, ctx.required_input(0, "size"), DataType::kInt64, "size_int64");
  Attributes range;
  range.set("mode", std::string("range"));
  Tensor* zero = ctx.add_constant(HostTensor::from_vector(DataType::kInt64, Dims{}, std::vector<int64_t>{0}), "start");
  Tensor* one = ctx.add_constant(HostTensor::from_vector(DataType::kInt64, Dims{}, std::vector<int64_t>{1}), "delta");
  Tensor* n = ctx.add_layer(kLayerFill, {zero, size, one}, 1, std::move(range), "range")->output(0);
  n = window_cast(ctx, n, DataType::kFloat32, "range_float");

  Tensor* length = window_cast(ctx, size, DataType::kFloat32, "size_float");
  if (periodic == 0) length = window_elementwise(ctx, length, window_scalar(ctx, 1.0f, "one"), "sub", "symmetric_size");
  // 2pi rounded to float32, divided by the length, as ONNX's function bodies compute it.
  Tensor* increment = window_elementwise(ctx, window_scalar(ctx, 6.28318548f, "tau"), length, "div", "increment");
  Tensor* angle = window_elementwise(ctx, n, increment, "prod", "angle");

  Tensor* y = window_elementwise(ctx, window_scalar(ctx, k.a0, "a0"), window_cosine_term(ctx, angle, k.a1, "a1"), "sub",
                                 "a0_minus_a1");
  if (k.a2 != 0.0f) {
    Tensor* double_angle = window_elementwise(ctx, angle, window_scalar(ctx, 2.0f, "two"), "prod", "double_angle");
    y = window_elementwise(ctx, y, window_cosine_term(ctx, double_angle, k.a2, "a2"), "sum", "plus_a2");
  }
  ctx.set_output(0, window_cast(ctx, y, *out_type, ""));
}

constexpr OnnxImporterInfo kWindowInfo{
    .min_opset = 17,
    .types = "size int32, int64; output every kiln numeric type",
    .notes = "size must be known on the host when shapes are inferred (a constant or shape arithmetic)"};

void import_hann_window(NodeContext& ctx) { import_window(ctx, {0.5f, 0.5f, 0.0f}); }
KILN_REGISTER_ONNX_IMPORTER("HannWindow", import_hann_window, kWindowInfo);

void import_hamming_window(NodeContext& ctx) { import_window(ctx, {25.0f / 46.0f, 1.0f - 25.0f / 46.0f, 0.0f}); }
KILN_REGISTER_ONNX_IMPORTER("HammingWindow", import_hamming_window, kWindowInfo);

void import_blackman_window(NodeContext& ctx) { import_window(ctx, {0.42f, 0.5f, 0.08f}); }
KILN_REGISTER_ONNX_IMPORTER("BlackmanWindow", import_blackman_window, kWindowInfo);

}  // namespace
}  // namespace kiln
