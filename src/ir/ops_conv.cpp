// Schemas and shape inference of the convolution layers: Convolution and Deconvolution (ONNX
// ConvTranspose), 1-D to 3-D. The parameters and the output-size rules are src/ir/conv_params.h
// (shared with every kernel); the attribute contract is docs/layers.md. Pooling is
// src/ir/ops_pooling.cpp.
#include <string>
#include <vector>

#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

void check_float_input(const ShapeContext& ctx, int i, const char* name) {
  ctx.check(is_floating_point(ctx.input_type(i)), std::string("input ") + std::to_string(i) + " (" + name +
                                                      ") must be floating-point, got " + to_string(ctx.input_type(i)));
}

void check_same_type(const ShapeContext& ctx, int i, const char* name) {
  ctx.check(ctx.input_type(i) == ctx.input_type(0),
            std::string("input ") + std::to_string(i) + " (" + name + ") has type " + to_string(ctx.input_type(i)) +
                " but input 0 (x) has " + to_string(ctx.input_type(0)) + "; insert a Cast");
}

void check_bias(const ShapeContext& ctx, int i, int64_t m) {
  if (!ctx.has_input(i)) return;
  check_same_type(ctx, i, "bias");
  const Dims& b = ctx.input_dims(i);
  ctx.check(b.rank() == 1 && b[0] == m, "bias must have shape [" + std::to_string(m) + "] (one value per output " +
                                            "channel), got " + b.to_string());
}

// Shared by Convolution and Deconvolution: the geometry (checks ranks, channels, groups and
// sizes), float operands of one type, the bias; returns the output dims.
Dims infer_conv_output(ShapeContext& ctx) {
  const ConvParams& p = params_of<ConvParams>(ctx.layer());
  const Dims& x = ctx.input_dims(0);
  const Dims& w = ctx.input_dims(1);
  ConvGeometry g;
  try {
    g = conv_geometry(p, x, w);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  check_float_input(ctx, 0, "x");
  check_same_type(ctx, 1, "weights");
  check_bias(ctx, 2, g.out_channels);
  Dims y{g.batch, g.out_channels};
  for (int64_t o : g.out) y.push_back(o);
  return y;
}

void infer_convolution(ShapeContext& ctx) {
  const Dims y = infer_conv_output(ctx);
  if (ctx.has_input(3)) {
    check_same_type(ctx, 3, "residual");
    ctx.check(ctx.input_dims(3) == y,
              "residual must have the output's shape " + y.to_string() + ", got " + ctx.input_dims(3).to_string());
  }
  ctx.set_output(0, ctx.input_type(0), y);
}

void infer_deconvolution(ShapeContext& ctx) { ctx.set_output(0, ctx.input_type(0), infer_conv_output(ctx)); }

std::vector<AttrSpec> conv_attrs(bool deconv) {
  std::vector<AttrSpec> a = window_attr_specs();
  if (deconv) {
    a.push_back({"output_padding", AttrType::kInts, std::vector<int64_t>{}, false,
                 "extra size added at the end of each spatial output dim; empty: zeros"});
  }
  a.push_back({"group", AttrType::kInt, int64_t{1}, false, "number of channel groups"});
  a.push_back(
      {"activation", AttrType::kString, std::string(), false, "fused post-op: \"\" (none) or an Activation kind"});
  a.push_back({"activation_alpha", AttrType::kFloat, 0.0, false, "alpha of the fused post-op"});
  a.push_back({"activation_beta", AttrType::kFloat, 0.0, false, "beta of the fused post-op"});
  a.push_back({"concurrent_streams", AttrType::kInt, int64_t{1}, false,
               "build hint (BuilderConfig::tune_for_streams): contexts expected to run the layer at once; CUDA "
               "library kernels then target the device's SMs / this many"});
  return a;
}

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerConvolution,
    2,
    4,
    1,
    conv_attrs(false),
    {},
    infer_convolution,
    "y = act(conv(x, w) + b + residual): x [N, C, D1..Dk] (k = 1..3), w [M, C/group, k1..kk], optional b [M] and "
    "optional residual (output-shaped)."}
                     .with_params<ConvParams>()
                     .with_traits({.channels_last = true, .channels_last_seed = true}));

KILN_REGISTER_OP(OpSchema{
    kLayerDeconvolution,
    2,
    3,
    1,
    conv_attrs(true),
    {},
    infer_deconvolution,
    "Transposed convolution (ONNX ConvTranspose): x [N, C, D..], w [C, M/group, k..], optional b [M]; "
    "out = (in-1)*s - pb - pe + d*(k-1) + output_padding + 1, then act()."}
                     .with_params<ConvParams>()
                     .with_traits({.channels_last = true, .channels_last_seed = true}));

}  // namespace kiln
