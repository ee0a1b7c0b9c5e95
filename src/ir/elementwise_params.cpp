// Decoding of the element-wise family's parameters (elementwise_params.h).
#include "src/ir/elementwise_params.h"

#include <string>

#include "kiln/error.h"
#include "src/ir/enum_names.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

// parse(value of `name`), its error turned into one naming the layer and the attribute.
template <typename Fn>
auto parse_named(const ParamReader& r, const std::string& name, Fn parse) {
  const std::string value = r.get_string(name);
  try {
    return parse(value);
  } catch (const Error& e) {
    r.fail(name, e.what());
  }
}

const EnumNames<ScaleMode> kScaleModes = {
    {"uniform", ScaleMode::kUniform}, {"channel", ScaleMode::kChannel}, {"elementwise", ScaleMode::kElementWise}};

}  // namespace

const char* to_string(ScaleMode mode) { return name_in(kScaleModes, mode); }

ActivationParams ActivationParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ActivationParams p;
  p.kind = parse_named(r, "kind", parse_activation_type);
  p.alpha = r.get_float("alpha");
  p.beta = r.get_float("beta");
  return p;
}

UnaryParams UnaryParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  UnaryParams p;
  p.op = parse_named(r, "op", parse_unary_op);
  return p;
}

ElementWiseParams ElementWiseParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ElementWiseParams p;
  p.op = parse_named(r, "op", parse_elementwise_op);
  p.fmod = r.get_int("fmod") != 0;
  return p;
}

SoftMaxParams SoftMaxParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  SoftMaxParams p;
  p.axis = r.get_int("axis");
  p.log = r.get_int("log") != 0;
  return p;
}

ScaleParams ScaleParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ScaleParams p;
  p.mode = r.get_enum<ScaleMode>("mode", kScaleModes);
  p.channel_axis = r.get_int("channel_axis");
  return p;
}

CastParams CastParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  CastParams p;
  p.to = parse_named(r, "to", parse_data_type);
  return p;
}

BitShiftParams BitShiftParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  BitShiftParams p;
  p.direction = r.get_enum<BitShiftDirection>(
      "direction", {{"left", BitShiftDirection::kLeft}, {"right", BitShiftDirection::kRight}});
  return p;
}

}  // namespace kiln
