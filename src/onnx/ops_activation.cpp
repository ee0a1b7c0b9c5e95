// ONNX importers of activations: the single-input ones map through a table onto Activation
// layer kinds (with ONNX's attribute defaults), plus Clip (attributes before opset 11, constant
// inputs after) and PRelu (ParametricReLU).
#include <cmath>
#include <limits>

#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// Element types for the OnnxImporterInfo of the registrations below (docs/onnx-support.md).
constexpr const char* kFloatTypes = "float32, float16, float64";

struct ActivationSpec {
  const char* op_type;
  const char* kind;
  const char* alpha_attr;  // ONNX attribute giving the layer's alpha (null: none)
  double alpha_default;
  const char* beta_attr;
  double beta_default;
};

// Selu's constants are ONNX's defaults, spelled with every digit of the float32 value.
constexpr ActivationSpec kActivations[] = {
    {"Relu", "relu", nullptr, 0.0, nullptr, 0.0},
    {"Sigmoid", "sigmoid", nullptr, 0.0, nullptr, 0.0},
    {"Tanh", "tanh", nullptr, 0.0, nullptr, 0.0},
    {"LeakyRelu", "leaky_relu", "alpha", 0.01, nullptr, 0.0},
    {"Elu", "elu", "alpha", 1.0, nullptr, 0.0},
    {"Selu", "selu", "alpha", 1.67326319217681884765625, "gamma", 1.05070102214813232421875},
    {"Softplus", "softplus", nullptr, 0.0, nullptr, 0.0},
    {"Softsign", "softsign", nullptr, 0.0, nullptr, 0.0},
    {"HardSigmoid", "hard_sigmoid", "alpha", 0.2, "beta", 0.5},
    {"HardSwish", "hard_swish", nullptr, 0.0, nullptr, 0.0},
    {"ThresholdedRelu", "thresholded_relu", "alpha", 1.0, nullptr, 0.0},
    {"Celu", "celu", "alpha", 1.0, nullptr, 0.0},
    {"Mish", "mish", nullptr, 0.0, nullptr, 0.0},
};

void import_activation(NodeContext& ctx) {
  for (const auto& spec : kActivations) {
    if (ctx.op_type() != spec.op_type) continue;
    const double alpha = spec.alpha_attr ? ctx.attr_float(spec.alpha_attr, spec.alpha_default) : 0.0;
    const double beta = spec.beta_attr ? ctx.attr_float(spec.beta_attr, spec.beta_default) : 0.0;
    Tensor* x = ctx.required_input(0, "X");
    ctx.set_output(0, ctx.add_layer(kLayerActivation, {x}, 1, activation_attrs(spec.kind, alpha, beta))->output(0));
    return;
  }
  ctx.fail("no activation table entry (kiln bug)");
}
KILN_REGISTER_ONNX_IMPORTER("Relu", import_activation,
                            {.min_opset = 1,
                             .types = kFloatTypes,
                             .notes = "integer inputs (Relu-14) are not supported"});
KILN_REGISTER_ONNX_IMPORTER("Sigmoid", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Tanh", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("LeakyRelu", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Elu", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Selu", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Softplus", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Softsign", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("HardSigmoid", import_activation, {.min_opset = 1, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("HardSwish", import_activation, {.min_opset = 14, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("ThresholdedRelu", import_activation, {.min_opset = 10, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Celu", import_activation, {.min_opset = 12, .types = kFloatTypes});
KILN_REGISTER_ONNX_IMPORTER("Mish", import_activation, {.min_opset = 18, .types = kFloatTypes});

// Gelu (opset 20): exact (erf) or tanh approximation.
void import_gelu(NodeContext& ctx) {
  const std::string approximate = ctx.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") ctx.fail("unknown approximate value " + quote(approximate));
  const char* kind = approximate == "tanh" ? "gelu_tanh" : "gelu_erf";
  ctx.set_output(0,
                 ctx.add_layer(kLayerActivation, {ctx.required_input(0, "X")}, 1, activation_attrs(kind))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Gelu", import_gelu,
                            {.min_opset = 20, .types = kFloatTypes, .notes = "approximate 'none' or 'tanh'"});

// Clip: bounds are attributes before opset 11 and optional (constant) inputs from 11 on; an
// absent bound is infinite. Integer inputs (opset 12+; the bounds then have the input's integer
// type) become max/min ElementWise layers, which keep every int64 value exact; Activation clip
// is floating-point only. Without bounds Clip is the identity for every type.
void import_clip(NodeContext& ctx) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Tensor* x = ctx.required_input(0, "input");
  double lo = -kInf, hi = kInf;
  if (ctx.opset() < 11) {
    lo = ctx.attr_float("min", -kInf);
    hi = ctx.attr_float("max", kInf);
  } else {
    const HostTensor* bounds[2] = {nullptr, nullptr};
    for (int i = 1; i <= 2; ++i) {
      if (!ctx.has_input(i)) continue;
      const HostTensor& v = ctx.constant_input(i, i == 1 ? "min" : "max");
      if (v.count() != 1)
        ctx.fail(std::string(i == 1 ? "min" : "max") + " must be a scalar, has dims " + v.dims().to_string());
      bounds[i - 1] = &v;
    }
    const HostTensor* typed = bounds[0] ? bounds[0] : bounds[1];
    if (typed && !is_floating_point(typed->type())) {
      Tensor* y = x;
      if (bounds[0]) {
        Attributes a;
        a.set("op", std::string("max"));
        y = ctx.add_layer(kLayerElementWise, {y, ctx.add_constant(*bounds[0], "min")}, 1, std::move(a),
                          bounds[1] ? "min" : "")
                ->output(0);
      }
      if (bounds[1]) {
        Attributes a;
        a.set("op", std::string("min"));
        y = ctx.add_layer(kLayerElementWise, {y, ctx.add_constant(*bounds[1], "max")}, 1, std::move(a))->output(0);
      }
      ctx.set_output(0, y);
      return;
    }
    if (bounds[0]) lo = bounds[0]->to_double()[0];
    if (bounds[1]) hi = bounds[1]->to_double()[0];
  }
  if (lo == -kInf && hi == kInf) {
    ctx.set_output(0, ctx.add_layer(kLayerIdentity, {x}, 1)->output(0));
    return;
  }
  ctx.set_output(0, ctx.add_layer(kLayerActivation, {x}, 1, activation_attrs("clip", lo, hi))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Clip", import_clip,
                            {.min_opset = 1,
                             .types = "float32, float16, float64; int8, uint8, int32, int64 with integer bounds",
                             .notes = "min/max inputs (opset 11+) must be constants"});

// PRelu: slope broadcasts to x (ONNX's unidirectional broadcast is numpy's with the slope as
// the smaller operand, which is what ParametricReLU implements). Before opset 7 a 1-D slope of C
// values is per channel (axis 1), so it is reshaped to [C, 1, ..., 1] here.
void import_prelu(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* slope = ctx.required_input(1, "slope");
  const auto xd = ctx.input_dims(0);
  const auto sd = ctx.input_dims(1);
  if (ctx.opset() < 7 && xd && xd->rank() > 2 && sd && sd->rank() == 1 && (*sd)[0] > 1) {
    if (const HostTensor* value = ctx.constant(1)) {
      Dims per_channel{(*sd)[0]};
      for (int i = 2; i < xd->rank(); ++i) per_channel.push_back(1);
      slope = ctx.add_constant(value->reshaped(per_channel), "slope");
    } else {
      ctx.unsupported("a per-channel slope that is not a constant (opset < 7)");
    }
  } else if (xd && sd && sd->rank() > xd->rank()) {
    ctx.fail("slope dims " + sd->to_string() + " have a higher rank than input dims " + xd->to_string());
  }
  ctx.set_output(0, ctx.add_layer(kLayerParametricReLU, {x, slope}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("PRelu", import_prelu,
                            {.min_opset = 1,
                             .types = kFloatTypes,
                             .notes = "opset < 7: a per-channel 1-D slope must be a constant"});

}  // namespace
}  // namespace kiln
