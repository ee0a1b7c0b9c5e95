// ONNX importers of ops whose output sizes depend on input values (data-dependent shapes,
// resolved by the runtime after the layer ran): NonZero, NonMaxSuppression and Unique. The
// layer's extra size output is kiln's and not part of the ONNX node.
#include <string>
#include <vector>

#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

void import_non_zero(NodeContext& ctx) {
  Layer* layer = ctx.add_layer(kLayerNonZero, {ctx.required_input(0, "X")}, 2, {});
  ctx.set_output(0, layer->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("NonZero", import_non_zero,
                            {.min_opset = 9,
                             .types = "float32, float16, float64, int32, int64, int8, uint8, bool",
                             .notes = "data-dependent output size: the runtime reads the count after the layer ran "
                                      "(no CUDA graph capture for such engines)"});

// NonMaxSuppression (opsets 10 and 11 mean the same): the optional scalar inputs stay inputs the
// kernel reads at run time; omitted ones (absent, "" or an empty constant, as ONNX Runtime reads
// them) are left out of the layer.
void import_non_max_suppression(NodeContext& ctx) {
  std::vector<Tensor*> inputs{ctx.required_input(0, "boxes"), ctx.required_input(1, "scores")};
  for (int i = 2; i < 5; ++i) inputs.push_back(ctx.has_input(i) && !ctx.is_empty_constant(i) ? ctx.input(i) : nullptr);
  while (inputs.size() > 2 && !inputs.back()) inputs.pop_back();
  Attributes a;
  const int64_t center = ctx.attr_int("center_point_box", 0);
  if (center != 0 && center != 1) ctx.fail("attribute 'center_point_box' is " + std::to_string(center) + "; 0 or 1");
  a.set("center_point_box", center);
  Layer* layer = ctx.add_layer(kLayerNonMaxSuppression, inputs, 2, std::move(a));
  ctx.set_output(0, layer->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("NonMaxSuppression", import_non_max_suppression,
                            {.min_opset = 10,
                             .types = "float32",
                             .notes = "data-dependent output size (no CUDA graph capture for such engines)"});

// Unique (opset 11): without `axis` the elements of x flattened, with it the slices along it.
void import_unique(NodeContext& ctx) {
  Attributes a;
  a.set("sorted", ctx.attr_int("sorted", 1));
  a.set("flatten", int64_t{ctx.has_attr("axis") ? 0 : 1});
  a.set("axis", ctx.attr_int("axis", 0));
  Layer* layer = ctx.add_layer(kLayerUnique, {ctx.required_input(0, "X")}, 5, std::move(a));
  for (int i = 0; i < 4 && i < ctx.num_outputs(); ++i) ctx.set_output(i, layer->output(i));
}
KILN_REGISTER_ONNX_IMPORTER("Unique", import_unique,
                            {.min_opset = 11,
                             .types = "float32, float16, float64, int32, int64, int8, uint8, bool",
                             .notes = "data-dependent output size (no CUDA graph capture for such engines); NaNs "
                                      "count as one value, sorted after every number"});

}  // namespace
}  // namespace kiln
