// Schema and shape inference of Pooling (ONNX MaxPool / AveragePool / GlobalMaxPool /
// GlobalAveragePool), 1-D to 3-D. The parameters and the output-size rules are
// src/ir/pool_params.h (shared with every kernel); the attribute contract is docs/layers.md.
#include <string>
#include <vector>

#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/pool_params.h"

namespace kiln {
namespace {

void infer_pooling(ShapeContext& ctx) {
  const PoolParams& p = params_of<PoolParams>(ctx.layer());
  const DataType type = ctx.input_type(0);
  if (p.is_max()) {
    ctx.check(is_floating_point(type) || type == DataType::kInt8 || type == DataType::kUInt8,
              std::string("max pooling supports float32/float16/float64/int8/uint8 inputs, got ") + to_string(type));
  } else {
    ctx.check(is_floating_point(type), std::string("input 0 (x) must be floating-point, got ") + to_string(type));
  }
  PoolGeometry g;
  try {
    g = pool_geometry(p, ctx.input_dims(0));
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  Dims y{g.batch, g.channels};
  for (int64_t o : g.out) y.push_back(o);
  ctx.set_output(0, type, y);
}

std::vector<AttrSpec> pooling_attrs() {
  std::vector<AttrSpec> a = {
      {"mode", AttrType::kString, std::string(), true, "\"max\" or \"average\""},
      {"kernel", AttrType::kInts, std::vector<int64_t>{}, false, "window size per spatial dim (unused when global)"},
  };
  for (auto& w : window_attr_specs()) a.push_back(std::move(w));
  a.push_back({"ceil_mode", AttrType::kInt, int64_t{0}, false,
               "1: round output sizes up (a window must still start inside the input or left padding)"});
  a.push_back({"count_include_pad", AttrType::kInt, int64_t{0}, false,
               "average: 1 divides by the window clipped to the padded extent, 0 by the in-bounds count"});
  a.push_back({"global", AttrType::kInt, int64_t{0}, false, "1: pool over all spatial dims (output spatial dims 1)"});
  return a;
}

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerPooling,
                          1,
                          1,
                          1,
                          pooling_attrs(),
                          {},
                          infer_pooling,
                          "ONNX MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool over 1-3 spatial dims."}
                     .with_params<PoolParams>()
                     .with_traits({.channels_last = true}));

}  // namespace kiln
