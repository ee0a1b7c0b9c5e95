// Schema and shape inference of the Scatter layer: ONNX ScatterElements (and its opset 9-10
// name Scatter) in mode "elements", ONNX ScatterND in mode "nd", each with the reductions of
// opset 16/18 (none, add, mul, max, min). The output is `data` with `updates` written (or
// combined) at the places `indices` name, so it always has data's type and dims; the checks
// here are the shape rules of the ONNX operators, so that a wrong model fails at build time
// naming the layer instead of reading out of bounds at run time.
#include <string>
#include <vector>

#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

const std::vector<std::string> kModes = {"elements", "nd"};
const std::vector<std::string> kReductions = {"none", "add", "mul", "max", "min"};

bool one_of(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names) {
    if (n == name) return true;
  }
  return false;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void infer_scatter(ShapeContext& ctx) {
  const std::string mode = attr_string(ctx.layer(), "mode");
  const std::string reduction = attr_string(ctx.layer(), "reduction");
  ctx.check(one_of(kModes, mode), "unknown mode " + quote(mode) + " (valid: " + listed(kModes) + ")");
  ctx.check(one_of(kReductions, reduction), "unknown reduction " + quote(reduction) + " (valid: " + listed(kReductions) + ")");
  const Dims& data = ctx.input_dims(0);
  const Dims& indices = ctx.input_dims(1);
  const Dims& updates = ctx.input_dims(2);
  const DataType it = ctx.input_type(1);
  ctx.check(it == DataType::kInt32 || it == DataType::kInt64,
            std::string("indices must be int32 or int64, got ") + to_string(it));
  ctx.check(ctx.input_type(2) == ctx.input_type(0), std::string("updates have type ") + to_string(ctx.input_type(2)) +
                                                        " but data has " + to_string(ctx.input_type(0)));
  ctx.check(reduction == "none" || ctx.input_type(0) != DataType::kBool,
            "reduction " + quote(reduction) + " is not defined for bool data");
  if (mode == "elements") {
    ctx.check(data.rank() >= 1, "data must have rank >= 1");
    normalize_axis(ctx, attr_int(ctx.layer(), "axis"), data.rank());
    ctx.check(indices.rank() == data.rank(), "indices " + indices.to_string() + " must have the rank of data " +
                                                 data.to_string());
    ctx.check(updates == indices, "updates " + updates.to_string() + " must have the dims of indices " +
                                      indices.to_string());
  } else {
    ctx.check(data.rank() >= 1 && indices.rank() >= 1, "data and indices must have rank >= 1");
    const int q = indices.rank();
    const int64_t k = indices[q - 1];
    ctx.check(k >= 1 && k <= data.rank(), "the last dim of indices " + indices.to_string() + " is " +
                                              std::to_string(k) + "; it must lie in 1.." +
                                              std::to_string(data.rank()) + " (the rank of data)");
    Dims expected;
    for (int i = 0; i < q - 1; ++i) expected.push_back(indices[i]);
    for (int i = static_cast<int>(k); i < data.rank(); ++i) expected.push_back(data[i]);
    ctx.check(updates == expected, "updates " + updates.to_string() + " must have dims " + expected.to_string() +
                                       " (indices dims without the last, then data dims after the first " +
                                       std::to_string(k) + ")");
  }
  ctx.set_output(0, ctx.input_type(0), data);
}

using A = AttrType;

}  // namespace

KILN_REGISTER_OP(OpSchema{kLayerScatter, 3, 3, 1,
                          {{"mode", A::kString, std::string("elements"), false, "elements or nd"},
                           {"axis", A::kInt, int64_t{0}, false, "scatter axis (elements)"},
                           {"reduction", A::kString, std::string("none"), false, "none, add, mul, max or min"}},
                          {},
                          infer_scatter,
                          "ONNX ScatterElements (mode elements) / ScatterND (mode nd): a copy of data with updates "
                          "written at indices, or combined with the reduction; negative indices wrap, out-of-range "
                          "indices are an error."});

}  // namespace kiln
