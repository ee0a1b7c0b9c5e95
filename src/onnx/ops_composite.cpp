// ONNX importers of ops that are exact compositions of other kiln layers, so that they need no
// layer type (and no kernel on any backend) of their own:
//   DepthToSpace, SpaceToDepth  Shuffle transposes, then a Shuffle to the target shape, which is
//                               computed from Shape(x) (so dynamic dims work)
//   Size                        Reduce prod of Shape(x)
//   EyeLike                     ones (Fill) masked by two Trilu layers: j - i == k
//   Compress                    Gather of the positions where the condition is true (NonZero
//                               when the condition is not a constant)
//   Shrink                      FusedElementWise program (float32)
//   LpPool                      |x|^p summed by a depthwise all-ones Convolution, then ^(1/p) (float32)
//                               (ceil_mode on symbolic spatial dims: a Padding whose pads come
//                               from Shape(x))
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "src/core/checked_math.h"
#include "src/core/half.h"
#include "src/ir/ops_fused.h"
#include "src/onnx/onnx_import_context.h"
#include "src/onnx/onnx_tensor.h"
#include "src/core/text.h"

namespace kiln {
namespace {

Attributes shuffle_attrs(const std::vector<int64_t>& first_transpose, const std::vector<int64_t>& reshape,
                         const std::vector<int64_t>& second_transpose) {
  Attributes a;
  a.set("first_transpose", first_transpose);
  a.set("reshape_mode", std::string(reshape.empty() ? "none" : "dims"));
  a.set("reshape", reshape);
  a.set("second_transpose", second_transpose);
  return a;
}

// Reshapes x to Shape(like) * mul / div (element-wise on the 1-D shape, both `rank` long).
Tensor* reshape_scaled(NodeContext& ctx, Tensor* x, Tensor* like, const std::vector<int64_t>& mul,
                       const std::vector<int64_t>& div) {
  Tensor* shape = ctx.add_layer(kLayerShape, {like}, 1, {}, "shape")->output(0);
  Attributes prod, quot;
  prod.set("op", std::string("prod"));
  quot.set("op", std::string("div"));
  shape = ctx.add_layer(kLayerElementWise, {shape, ctx.add_int64_constant(mul, "shape_mul")}, 1, prod, "shape_mul")
              ->output(0);
  shape = ctx.add_layer(kLayerElementWise, {shape, ctx.add_int64_constant(div, "shape_div")}, 1, quot, "shape_div")
              ->output(0);
  Attributes a;
  a.set("reshape_mode", std::string("dims"));
  a.set("zero_is_placeholder", int64_t{0});
  return ctx.add_layer(kLayerShuffle, {x, shape}, 1, std::move(a))->output(0);
}

int64_t block_size(NodeContext& ctx) {
  const int64_t b = ctx.attr_int("blocksize", 0);
  if (b < 1) ctx.fail("attribute 'blocksize' is required and must be >= 1");
  // The channels hold b*b blocks: a block size whose square overflows int64 fits no tensor.
  int64_t square = 0;
  if (mul_overflows(b, b, square)) ctx.fail("attribute 'blocksize' " + std::to_string(b) + " is too large");
  return b;
}

// DepthToSpace on [N, C, H, W], C = C' * b * b. DCR reads the channel as (b1, b2, c'), CRD as
// (c', b1, b2); both end as [N, C', H, b1, W, b2], reshaped to [N, C', H*b, W*b]. Going through
// NHWC first lets the split of C use 0-placeholders, so no static dims are needed.
void import_depth_to_space(NodeContext& ctx) {
  const int64_t b = block_size(ctx);
  const std::string mode = ctx.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") ctx.fail("unknown mode " + quote(mode) + " (expected DCR or CRD)");
  Tensor* x = ctx.required_input(0, "input");
  const bool dcr = mode == "DCR";
  // [N,H,W,C] -> DCR: [N,H,W,b1,b2,C'] / CRD: [N,H,W,C',b1,b2] -> [N,C',H,b1,W,b2]
  Attributes a = dcr ? shuffle_attrs({0, 2, 3, 1}, {0, 0, 0, b, b, -1}, {0, 5, 1, 3, 2, 4})
                     : shuffle_attrs({0, 2, 3, 1}, {0, 0, 0, -1, b, b}, {0, 3, 1, 4, 2, 5});
  Tensor* moved = ctx.add_layer(kLayerShuffle, {x}, 1, std::move(a), "blocks")->output(0);
  ctx.set_output(0, reshape_scaled(ctx, moved, x, {1, 1, b, b}, {1, b * b, 1, 1}));
}
KILN_REGISTER_ONNX_IMPORTER("DepthToSpace", import_depth_to_space, {.min_opset = 1, .types = "all kiln types"});

// SpaceToDepth on [N, C, H, W]: [N, C, H/b, b1, W/b, b2] -> [N, b1, b2, C, H/b, W/b] ->
// [N, C*b*b, H/b, W/b]. The two splits go one at a time so that each can use 0-placeholders.
void import_space_to_depth(NodeContext& ctx) {
  const int64_t b = block_size(ctx);
  Tensor* x = ctx.required_input(0, "input");
  // [N,C,H,W] -> [N,C,H,W/b,b2]
  Tensor* t = ctx.add_layer(kLayerShuffle, {x}, 1, shuffle_attrs({}, {0, 0, 0, -1, b}, {}), "split_w")->output(0);
  // -> [N,C,W/b,b2,H] -> [N,C,W/b,b2,H/b,b1] -> [N,b1,b2,C,H/b,W/b]
  t = ctx.add_layer(kLayerShuffle, {t}, 1, shuffle_attrs({0, 1, 3, 4, 2}, {0, 0, 0, 0, -1, b}, {0, 5, 3, 1, 4, 2}),
                    "split_h")
          ->output(0);
  ctx.set_output(0, reshape_scaled(ctx, t, x, {1, b * b, 1, 1}, {1, 1, b, b}));
}
KILN_REGISTER_ONNX_IMPORTER("SpaceToDepth", import_space_to_depth, {.min_opset = 1, .types = "all kiln types"});

void import_size(NodeContext& ctx) {
  Tensor* shape = ctx.add_layer(kLayerShape, {ctx.required_input(0, "data")}, 1, {}, "shape")->output(0);
  Attributes a;
  a.set("op", std::string("prod"));
  a.set("axes", std::vector<int64_t>{});
  a.set("keep_dims", int64_t{0});
  ctx.set_output(0, ctx.add_layer(kLayerReduce, {shape}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Size", import_size, {.min_opset = 1, .types = "all kiln types"});

// The element type of input i when the network knows it: graph inputs and constants.
std::optional<DataType> known_type(NodeContext& ctx, int i) {
  if (const HostTensor* c = ctx.constant(i)) return c->type();
  Tensor* t = ctx.input(i);
  if (t && (t->is_network_input() || (t->producer() && t->producer()->type() == kLayerConstant))) return t->type();
  return std::nullopt;
}

// EyeLike: ones of x's shape (Fill), kept where j - i >= k (Trilu upper) and j - i <= k (Trilu
// lower). When neither `dtype` nor x's type is known here, the ones come from an ArgReduce
// one-hot over a size-1 axis, which has x's type whatever it is.
void import_eye_like(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  std::optional<DataType> type = known_type(ctx, 0);
  if (ctx.has_attr("dtype")) {
    const int32_t onnx_type = static_cast<int32_t>(ctx.attr_int("dtype", 1));
    type = data_type_from_onnx(onnx_type);
    if (!type) ctx.unsupported("dtype " + onnx_data_type_name(onnx_type));
  }
  Tensor* ones = nullptr;
  if (type) {
    HostTensor one(*type, Dims{1});
    switch (*type) {
      case DataType::kFloat32:
        one.as<float>()[0] = 1.0f;
        break;
      case DataType::kFloat64:
        one.as<double>()[0] = 1.0;
        break;
      case DataType::kFloat16:
        one.as<half>()[0] = half(1.0f);
        break;
      case DataType::kInt32:
        one.as<int32_t>()[0] = 1;
        break;
      case DataType::kInt64:
        one.as<int64_t>()[0] = 1;
        break;
      default:
        one.as<uint8_t>()[0] = 1;
        break;  // int8, uint8, bool
    }
    Attributes fill;
    fill.set("mode", std::string("constant"));
    fill.set("value", one);
    Tensor* shape = ctx.add_layer(kLayerShape, {x}, 1, {}, "shape")->output(0);
    ones = ctx.add_layer(kLayerFill, {shape}, 1, std::move(fill), "ones")->output(0);
  } else {
    Attributes unsq = shuffle_attrs({}, {}, {});
    unsq.set("reshape_mode", std::string("unsqueeze"));
    unsq.set("axes", std::vector<int64_t>{2});
    Tensor* column = ctx.add_layer(kLayerShuffle, {x}, 1, std::move(unsq), "unsqueeze")->output(0);
    Attributes arg;
    arg.set("op", std::string("max"));
    arg.set("axis", int64_t{2});
    arg.set("one_hot", int64_t{1});
    Tensor* hot = ctx.add_layer(kLayerArgReduce, {column}, 1, std::move(arg), "ones_like")->output(0);
    Attributes sq = shuffle_attrs({}, {}, {});
    sq.set("reshape_mode", std::string("squeeze"));
    sq.set("axes", std::vector<int64_t>{2});
    ones = ctx.add_layer(kLayerShuffle, {hot}, 1, std::move(sq), "ones")->output(0);
  }
  Tensor* k = ctx.add_constant(
      HostTensor::from_vector(DataType::kInt64, Dims{}, std::vector<int64_t>{ctx.attr_int("k", 0)}), "k");
  Attributes upper, lower;
  upper.set("upper", int64_t{1});
  lower.set("upper", int64_t{0});
  Tensor* u = ctx.add_layer(kLayerTrilu, {ones, k}, 1, std::move(upper), "upper")->output(0);
  ctx.set_output(0, ctx.add_layer(kLayerTrilu, {u, k}, 1, std::move(lower))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("EyeLike", import_eye_like, {.min_opset = 9, .types = "numeric kiln types"});

// Compress with a constant condition: Gather of the positions where it is true (along `axis`,
// or over the flattened input when there is no axis).
void import_compress(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  Tensor* positions = nullptr;
  if (ctx.constant(1)) {
    const std::vector<int64_t> condition = ctx.constant_input(1, "condition").to_int64();
    std::vector<int64_t> kept;
    for (size_t i = 0; i < condition.size(); ++i) {
      if (condition[i] != 0) kept.push_back(static_cast<int64_t>(i));
    }
    positions = ctx.add_int64_constant(kept, "positions");
  } else {
    // A run-time condition: NonZero gives [1, count] positions (a data-dependent size).
    Tensor* nz = ctx.add_layer(kLayerNonZero, {ctx.required_input(1, "condition")}, 2, {}, "positions")->output(0);
    positions = ctx.add_layer(kLayerShuffle, {nz}, 1, shuffle_attrs({}, {-1}, {}), "positions_1d")->output(0);
  }
  int64_t axis = 0;
  if (ctx.has_attr("axis")) {
    axis = ctx.attr_int("axis", 0);
  } else {
    x = ctx.add_layer(kLayerShuffle, {x}, 1, shuffle_attrs({}, {-1}, {}), "flatten")->output(0);
  }
  Attributes a;
  a.set("axis", axis);
  ctx.set_output(0, ctx.add_layer(kLayerGather, {x, positions}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Compress", import_compress,
                            {.min_opset = 9,
                             .types = "all kiln types",
                             .notes = "a run-time condition gives a data-dependent output size (NonZero)"});

// Shrink: y = x < -lambd ? x + bias : x > lambd ? x - bias : 0, written as
// sign(x - clip(x, -lambd, lambd)) * (|x| - bias): the sign is exactly -1, 0 or 1, and
// -(|x| - bias) equals x + bias for negative x bit for bit.
void import_shrink(NodeContext& ctx) {
  const double lambd = ctx.attr_float("lambd", 0.5);
  const double bias = ctx.attr_float("bias", 0.0);
  const std::vector<std::string> program = {
      fused_activation(ActivationType::kClip, 0, -lambd, lambd),  // r1
      fused_binary(ElementWiseOp::kSub, 0, 1),                    // r2 = x - clip(x)
      fused_unary(UnaryOp::kSign, 2),                             // r3
      fused_unary(UnaryOp::kAbs, 0),                              // r4
      fused_const(bias),                                          // r5
      fused_binary(ElementWiseOp::kSub, 4, 5),                    // r6 = |x| - bias
      fused_binary(ElementWiseOp::kProd, 3, 6),                   // r7
  };
  Attributes a;
  a.set("program", program);
  ctx.set_output(0,
                 ctx.add_layer(kLayerFusedElementWise, {ctx.required_input(0, "input")}, 1, std::move(a))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("Shrink", import_shrink, {.min_opset = 9, .types = "float32"});

std::vector<int64_t> lp_pool_list(NodeContext& ctx, const std::string& name, size_t k, int64_t def) {
  std::vector<int64_t> v = ctx.attr_ints(name);
  if (v.empty()) return std::vector<int64_t>(k, def);
  if (v.size() != k)
    ctx.fail("attribute " + quote(name) + " has " + std::to_string(v.size()) + " values, expected " +
             std::to_string(k));
  for (int64_t e : v) {
    if (e < 1) ctx.fail("attribute " + quote(name) + " must be positive, got " + std::to_string(e));
  }
  return v;
}

// ceil_mode's extra end padding of one spatial axis of extent `dim` (ONNX Runtime's and PyTorch's
// rule): out = ceil(span / s) + 1 windows, less the last one when it would start past the input
// and the left padding; the padding makes the floor-mode Convolution reach that last window.
// Checked: a file may give a spatial extent or pads near 2^63 (found by fuzzing).
int64_t lp_pool_ceil_extra(int64_t dim, int64_t pad_begin, int64_t pad_end, int64_t effective, int64_t stride) {
  const std::string what = "LpPool ceil_mode: the padded extent of a spatial axis";
  const int64_t start_limit = checked_add(dim, pad_begin, what);
  const int64_t span = checked_sub(checked_add(start_limit, pad_end, what), effective, what);
  int64_t out = checked_add(span, stride - 1, what) / stride + 1;
  if ((out - 1) * stride >= start_limit) --out;
  return std::max<int64_t>(0, (out - 1) * stride - span);
}

// The same for symbolic spatial dims, as int64 shape arithmetic on Shape(x) (one element per
// spatial axis) that kiln evaluates on the host for each input shape: the pads of a Padding
// layer for the [N*C, 1, D..] planes, zeros except the extra end padding.
Tensor* lp_pool_ceil_pads(NodeContext& ctx, Tensor* x, const std::vector<int64_t>& pads,
                          const std::vector<int64_t>& effective, const std::vector<int64_t>& strides) {
  const size_t k = strides.size();
  std::vector<int64_t> span_offset(k), stride_less_1(k), pad_begin(k);
  for (size_t i = 0; i < k; ++i) {
    span_offset[i] = pads[i] + pads[i + k] - effective[i];
    stride_less_1[i] = strides[i] - 1;
    pad_begin[i] = pads[i];
  }
  auto op = [&](Tensor* a, Tensor* b, const char* name, const std::string& suffix) {
    Attributes e;
    e.set("op", std::string(name));
    return ctx.add_layer(kLayerElementWise, {a, b}, 1, std::move(e), suffix)->output(0);
  };
  Attributes tail;
  tail.set("start", int64_t{2});
  Tensor* dim = ctx.add_layer(kLayerShape, {x}, 1, std::move(tail), "ceil_dims")->output(0);
  Tensor* s = ctx.add_int64_constant(strides, "ceil_strides");
  Tensor* span = op(dim, ctx.add_int64_constant(span_offset, "ceil_span_offset"), "sum", "ceil_span");
  // last = (out - 1) * s, the start of the last window before the rule; `div` truncates like C.
  Tensor* q =
      op(op(span, ctx.add_int64_constant(stride_less_1, "ceil_round_up"), "sum", "ceil_span_up"), s, "div", "ceil_q");
  Tensor* last = op(q, s, "prod", "ceil_last");
  Tensor* limit = op(dim, ctx.add_int64_constant(pad_begin, "ceil_pad_begin"), "sum", "ceil_limit");
  Attributes cast;
  cast.set("to", std::string("int64"));
  Tensor* past = op(last, limit, "greater_or_equal", "ceil_past");
  past = ctx.add_layer(kLayerCast, {past}, 1, std::move(cast), "ceil_past_int")->output(0);
  last = op(last, op(past, s, "prod", "ceil_drop"), "sub", "ceil_last_kept");
  Tensor* extra =
      op(op(last, span, "sub", "ceil_overhang"), ctx.add_int64_constant({0}, "ceil_zero"), "max", "ceil_extra");
  Attributes cat;
  cat.set("axis", int64_t{0});
  Tensor* zeros = ctx.add_int64_constant(std::vector<int64_t>(k + 4, 0), "ceil_pads_head");
  return ctx.add_layer(kLayerConcatenation, {zeros, extra}, 1, std::move(cat), "ceil_pads")->output(0);
}

// LpPool: (sum over the window of |x|^p)^(1/p), padding counting as zeros. x [N, C, D..] is
// viewed as [N*C, 1, D..] so that one all-ones kernel sums every channel; ceil_mode becomes
// extra end padding, which adds only zeros to the sums: in the Convolution's pads when the
// spatial dims are static, else a Padding layer whose pads come from Shape(x) at run time.
void import_lp_pool(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "X");
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.empty() || kernel.size() > 3)
    ctx.unsupported(std::to_string(kernel.size()) + "-D LpPool (kiln supports 1-D to 3-D)");
  const size_t k = kernel.size();
  // The window becomes an all-ones constant of kernel_shape's volume, allocated here: a few
  // bytes of attribute must not claim terabytes (a 3 x 2^40 kernel did, found by fuzzing).
  constexpr int64_t kMaxWindow = int64_t{1} << 24;
  int64_t volume = 1;
  for (int64_t e : kernel) {
    if (e < 1) ctx.fail("attribute 'kernel_shape' must be positive, got " + std::to_string(e));
    if (mul_overflows(volume, e, volume) || volume > kMaxWindow)
      ctx.fail("attribute 'kernel_shape' describes a window of more than 2^24 elements, kiln's limit for LpPool");
  }
  const std::vector<int64_t> strides = lp_pool_list(ctx, "strides", k, 1);
  const std::vector<int64_t> dilations = lp_pool_list(ctx, "dilations", k, 1);
  std::vector<int64_t> effective(k);
  for (size_t i = 0; i < k; ++i)
    effective[i] =
        checked_add(checked_mul(kernel[i] - 1, dilations[i], "LpPool dilated window"), 1, "LpPool dilated window");
  std::vector<int64_t> pads = resolve_auto_pad(ctx, effective, strides);
  if (pads.empty()) pads.assign(2 * k, 0);
  Tensor* ceil_pads = nullptr;  // the run-time extra end padding (symbolic spatial dims)
  if (ctx.attr_int("ceil_mode", 0) != 0) {
    const auto dims = ctx.input_dims(0);
    bool is_static = dims && dims->rank() == static_cast<int>(k) + 2;
    for (size_t i = 0; is_static && i < k; ++i) is_static = (*dims)[static_cast<int>(i) + 2] != kDynamic;
    if (is_static) {
      for (size_t i = 0; i < k; ++i) {
        pads[i + k] +=
            lp_pool_ceil_extra((*dims)[static_cast<int>(i) + 2], pads[i], pads[i + k], effective[i], strides[i]);
      }
    } else {
      ceil_pads = lp_pool_ceil_pads(ctx, x, pads, effective, strides);
    }
  }
  const double p = ctx.opset() < 2 ? ctx.attr_float("p", 2.0) : static_cast<double>(ctx.attr_int("p", 2));
  if (p <= 0) ctx.fail("attribute 'p' must be positive, got " + std::to_string(p));

  auto elementwise = [&](Tensor* a, Tensor* b, const char* op, const std::string& suffix) {
    Attributes e;
    e.set("op", std::string(op));
    return ctx.add_layer(kLayerElementWise, {a, b}, 1, std::move(e), suffix)->output(0);
  };
  auto scalar = [&](double v, const std::string& suffix) {
    return ctx.add_constant(
        HostTensor::from_vector(DataType::kFloat32, Dims{}, std::vector<float>{static_cast<float>(v)}), suffix);
  };
  Tensor* powered = nullptr;
  if (p == 2.0) {
    powered = elementwise(x, x, "prod", "square");
  } else {
    Attributes abs;
    abs.set("op", std::string("abs"));
    powered = ctx.add_layer(kLayerUnary, {x}, 1, std::move(abs), "abs")->output(0);
    if (p != 1.0) powered = elementwise(powered, scalar(p, "p"), "pow", "pow");
  }
  std::vector<int64_t> single_channel{-1, 1};
  single_channel.resize(k + 2, 0);
  Tensor* planes =
      ctx.add_layer(kLayerShuffle, {powered}, 1, shuffle_attrs({}, single_channel, {}), "planes")->output(0);
  if (ceil_pads) planes = ctx.add_layer(kLayerPadding, {planes, ceil_pads}, 1, {}, "ceil_pad")->output(0);

  std::vector<int64_t> weight_dims{1, 1};
  weight_dims.insert(weight_dims.end(), kernel.begin(), kernel.end());
  HostTensor ones(DataType::kFloat32, Dims::from(weight_dims));
  for (int64_t i = 0; i < ones.count(); ++i) ones.as<float>()[i] = 1.0f;
  Attributes conv;
  conv.set("strides", strides);
  conv.set("pads", pads);
  conv.set("dilations", dilations);
  conv.set("group", int64_t{1});
  Tensor* sums = ctx.add_layer(kLayerConvolution, {planes, ctx.add_constant(ones, "window")}, 1, std::move(conv), "sum")
                     ->output(0);
  if (p == 2.0) {
    Attributes sqrt;
    sqrt.set("op", std::string("sqrt"));
    sums = ctx.add_layer(kLayerUnary, {sums}, 1, std::move(sqrt), "root")->output(0);
  } else if (p != 1.0) {
    sums = elementwise(sums, scalar(1.0 / p, "inv_p"), "pow", "root");
  }
  // Back to [N, C, O..]: N and C from x, the pooled extents from the sums.
  Attributes head, tail;
  head.set("end", int64_t{2});
  tail.set("start", int64_t{2});
  Tensor* nc = ctx.add_layer(kLayerShape, {x}, 1, std::move(head), "shape_nc")->output(0);
  Tensor* spatial = ctx.add_layer(kLayerShape, {sums}, 1, std::move(tail), "shape_spatial")->output(0);
  Attributes cat;
  cat.set("axis", int64_t{0});
  Tensor* shape = ctx.add_layer(kLayerConcatenation, {nc, spatial}, 1, std::move(cat), "shape")->output(0);
  Attributes back;
  back.set("reshape_mode", std::string("dims"));
  back.set("zero_is_placeholder", int64_t{0});
  ctx.set_output(0, ctx.add_layer(kLayerShuffle, {sums, shape}, 1, std::move(back))->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("LpPool", import_lp_pool, {.min_opset = 1, .types = "float32"});

}  // namespace
}  // namespace kiln
