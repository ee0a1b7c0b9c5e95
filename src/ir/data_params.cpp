// Decoding of the data-movement layers' parameters (data_params.h).
#include "src/ir/data_params.h"

#include <string>

#include "kiln/error.h"
#include "src/ir/enum_names.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

const EnumNames<ReshapeMode> kReshapeModes = {{"none", ReshapeMode::kNone},
                                              {"dims", ReshapeMode::kDims},
                                              {"squeeze", ReshapeMode::kSqueeze},
                                              {"unsqueeze", ReshapeMode::kUnsqueeze},
                                              {"flatten", ReshapeMode::kFlatten}};
const EnumNames<PaddingMode> kPaddingModes = {{"constant", PaddingMode::kConstant},
                                              {"reflect", PaddingMode::kReflect},
                                              {"edge", PaddingMode::kEdge},
                                              {"wrap", PaddingMode::kWrap}};
const EnumNames<FillMode> kFillModes = {{"constant", FillMode::kConstant}, {"range", FillMode::kRange}};

}  // namespace

const char* to_string(ReshapeMode mode) { return name_in(kReshapeModes, mode); }
const char* to_string(PaddingMode mode) { return name_in(kPaddingModes, mode); }

ShuffleParams ShuffleParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ShuffleParams p;
  p.first_transpose = r.get_ints("first_transpose");
  p.reshape_mode = r.get_enum<ReshapeMode>("reshape_mode", kReshapeModes);
  p.reshape = r.get_ints("reshape");
  p.zero_is_placeholder = r.get_int("zero_is_placeholder") != 0;
  p.axes = r.get_ints("axes");
  p.axis = r.get_int("axis");
  p.second_transpose = r.get_ints("second_transpose");
  return p;
}

ConcatenationParams ConcatenationParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ConcatenationParams p;
  p.axis = r.get_int("axis");
  return p;
}

SplitParams SplitParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  SplitParams p;
  p.axis = r.get_int("axis");
  p.split = r.get_ints("split");
  return p;
}

PaddingParams PaddingParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  PaddingParams p;
  p.mode = r.get_enum<PaddingMode>("mode", kPaddingModes);
  return p;
}

ShapeParams ShapeParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ShapeParams p;
  p.start = r.get_int("start");
  p.end = r.get_int("end");
  return p;
}

FillParams FillParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  FillParams p;
  p.mode = r.get_enum<FillMode>("mode", kFillModes);
  const Attributes& a = layer.attrs();
  if (!a.has("value")) {
    p.value = HostTensor(DataType::kFloat32, Dims{1});  // the schema's default, float32 0
  } else if (const auto* t = std::get_if<HostTensor>(&a.all().at("value"))) {
    p.value = *t;
  } else {
    r.fail("value", "must be a tensor");
  }
  if (p.mode == FillMode::kConstant && p.value.count() != 1) {
    r.fail("value", "must hold one element, got dims " + p.value.dims().to_string());
  }
  return p;
}

}  // namespace kiln
