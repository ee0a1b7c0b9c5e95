// ONNX importers of activations: the single-input ones map through a table onto Activation
// layer kinds (with ONNX's attribute defaults), plus Clip (attributes before opset 11, constant
// inputs after) and PRelu (ParametricReLU).
#include <cmath>
#include <limits>

#include "src/onnx/onnx_import_context.h"

namespace kiln {
namespace {

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
KILN_REGISTER_ONNX_IMPORTER("Relu", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Sigmoid", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Tanh", import_activation);
KILN_REGISTER_ONNX_IMPORTER("LeakyRelu", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Elu", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Selu", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Softplus", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Softsign", import_activation);
KILN_REGISTER_ONNX_IMPORTER("HardSigmoid", import_activation);
KILN_REGISTER_ONNX_IMPORTER("HardSwish", import_activation);
KILN_REGISTER_ONNX_IMPORTER("ThresholdedRelu", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Celu", import_activation);
KILN_REGISTER_ONNX_IMPORTER("Mish", import_activation);

// Gelu (opset 20): exact (erf) or tanh approximation.
void import_gelu(NodeContext& ctx) {
  const std::string approximate = ctx.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") ctx.fail("unknown approximate value '" + approximate + "'");
  const char* kind = approximate == "tanh" ? "gelu_tanh" : "gelu_erf";
  ctx.set_output(0, ctx.add_layer(kLayerActivation, {ctx.required_input(0, "X")}, 1, activation_attrs(kind))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Gelu", import_gelu);

// Clip: bounds are attributes before opset 11 and optional (constant) inputs from 11 on; an
// absent bound is infinite.
void import_clip(NodeContext& ctx) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double lo = -kInf, hi = kInf;
  if (ctx.opset() < 11) {
    lo = ctx.attr_float("min", -kInf);
    hi = ctx.attr_float("max", kInf);
  } else {
    auto bound = [&](int i, const char* what, double def) {
      if (!ctx.has_input(i)) return def;
      const HostTensor& v = ctx.constant_input(i, what);
      if (v.count() != 1) ctx.fail(std::string(what) + " must be a scalar, has dims " + v.dims().to_string());
      return v.to_double()[0];
    };
    lo = bound(1, "min", -kInf);
    hi = bound(2, "max", kInf);
  }
  Tensor* x = ctx.required_input(0, "input");
  ctx.set_output(0, ctx.add_layer(kLayerActivation, {x}, 1, activation_attrs("clip", lo, hi))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Clip", import_clip);

// PRelu: slope broadcasts to x (ONNX's unidirectional broadcast is numpy's with the slope as
// the smaller operand, which is what ParametricReLU implements).
void import_prelu(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  Tensor* slope = ctx.required_input(1, "slope");
  const auto xd = ctx.input_dims(0);
  const auto sd = ctx.input_dims(1);
  if (xd && sd && sd->rank() > xd->rank()) {
    ctx.fail("slope dims " + sd->to_string() + " have a higher rank than input dims " + xd->to_string());
  }
  ctx.set_output(0, ctx.add_layer(kLayerParametricReLU, {x, slope}, 1)->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("PRelu", import_prelu);

}  // namespace
}  // namespace kiln
