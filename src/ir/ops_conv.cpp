// Schemas and shape inference of the sliding-window layers: Convolution, Deconvolution
// (ONNX ConvTranspose) and Pooling (ONNX MaxPool / AveragePool / Global*Pool), 1-D to 3-D.
// The attribute contract is docs/layers.md; the output-size rules are ONNX Runtime's, including
// its ceil_mode rule that drops a last window starting in the right padding.
#include <string>
#include <vector>

#include "src/ir/op_schema.h"

namespace kiln {
namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Strides, pads and dilations of `k` spatial dims, checked against the layer's rank. Empty
// lists mean ones (strides, dilations) or zeros (pads), per docs/layers.md.
struct Window {
  std::vector<int64_t> strides, pads_begin, pads_end, dilations;
};

Window read_window(const ShapeContext& ctx, int k) {
  const Layer& layer = ctx.layer();
  const auto rank_msg = [&](const char* name, size_t got, int want) {
    return std::string("attribute '") + name + "' has " + std::to_string(got) + " values but the input has " +
           std::to_string(k) + " spatial dims (expected " + std::to_string(want) + " values or none)";
  };
  Window w;
  w.strides = attr_ints(layer, "strides");
  w.dilations = attr_ints(layer, "dilations");
  const std::vector<int64_t> pads = attr_ints(layer, "pads");
  if (w.strides.empty()) w.strides.assign(static_cast<size_t>(k), 1);
  if (w.dilations.empty()) w.dilations.assign(static_cast<size_t>(k), 1);
  ctx.check(static_cast<int>(w.strides.size()) == k, rank_msg("strides", w.strides.size(), k));
  ctx.check(static_cast<int>(w.dilations.size()) == k, rank_msg("dilations", w.dilations.size(), k));
  ctx.check(pads.empty() || static_cast<int>(pads.size()) == 2 * k, rank_msg("pads", pads.size(), 2 * k));
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    ctx.check(w.strides[u] >= 1, "strides must be >= 1, got " + join(w.strides));
    ctx.check(w.dilations[u] >= 1, "dilations must be >= 1, got " + join(w.dilations));
    w.pads_begin.push_back(pads.empty() ? 0 : pads[u]);
    w.pads_end.push_back(pads.empty() ? 0 : pads[u + static_cast<size_t>(k)]);
    ctx.check(w.pads_begin[u] >= 0 && w.pads_end[u] >= 0, "pads must be >= 0, got " + join(pads));
  }
  return w;
}

// Rank 3..5 ([N, C, D1..Dk] with k = 1..3).
int spatial_rank(const ShapeContext& ctx, const char* what) {
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() >= 3 && x.rank() <= 5, std::string(what) + " expects input 0 of rank 3 to 5 ([N, C, D1..Dk], " +
                                                 "k = 1..3), got " + x.to_string());
  return x.rank() - 2;
}

void check_float_input(const ShapeContext& ctx, int i, const char* name) {
  ctx.check(is_floating_point(ctx.input_type(i)),
            std::string("input ") + std::to_string(i) + " (" + name + ") must be floating-point, got " +
                to_string(ctx.input_type(i)));
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

void check_kernel_dims(const ShapeContext& ctx, const Dims& w) {
  for (int i = 2; i < w.rank(); ++i) {
    ctx.check(w[i] >= 1, "weight spatial dims must be >= 1, got weights " + w.to_string());
  }
}

// The fused post-op must name a known Activation kind (or be empty).
void check_post_op(const ShapeContext& ctx) {
  const std::string kind = attr_string(ctx.layer(), "activation");
  if (kind.empty()) return;
  try {
    (void)parse_activation_type(kind);
  } catch (const Error&) {
    ctx.fail("attribute 'activation' = \"" + kind + "\" is not an Activation kind (see docs/layers.md); use \"\" for none");
  }
}

// Input and weights shared by Convolution and Deconvolution: same rank, float, same type.
void check_conv_operands(const ShapeContext& ctx, const char* what) {
  check_post_op(ctx);
  spatial_rank(ctx, what);
  check_float_input(ctx, 0, "x");
  check_same_type(ctx, 1, "weights");
  const Dims& x = ctx.input_dims(0);
  const Dims& w = ctx.input_dims(1);
  ctx.check(w.rank() == x.rank(), "weights must have the input's rank " + std::to_string(x.rank()) +
                                      " (input " + x.to_string() + "), got weights " + w.to_string());
  check_kernel_dims(ctx, w);
  ctx.check(attr_int(ctx.layer(), "group") >= 1,
            "group must be >= 1, got " + std::to_string(attr_int(ctx.layer(), "group")));
}

void infer_convolution(ShapeContext& ctx) {
  check_conv_operands(ctx, "Convolution");
  const Dims& x = ctx.input_dims(0);
  const Dims& w = ctx.input_dims(1);
  const int k = x.rank() - 2;
  const int64_t group = attr_int(ctx.layer(), "group");
  const int64_t c = x[1], m = w[0];
  ctx.check(__int128{w[1]} * group == c, "input has " + std::to_string(c) + " channels but weights " + w.to_string() +
                                             " with group " + std::to_string(group) + " expect C = W[1] * group");
  ctx.check(m % group == 0, "output channels W[0] = " + std::to_string(m) + " must be divisible by group " +
                                std::to_string(group));
  check_bias(ctx, 2, m);
  const Window win = read_window(ctx, k);
  Dims y{x[0], m};
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t padded = checked_extent(ctx, __int128{x[i + 2]} + win.pads_begin[u] + win.pads_end[u],
                                          "spatial dim " + std::to_string(i) + ": the padded input extent");
    const int64_t extent = checked_extent(ctx, __int128{win.dilations[u]} * (w[i + 2] - 1) + 1,
                                          "spatial dim " + std::to_string(i) + ": the dilated kernel extent");
    ctx.check(padded >= extent, "spatial dim " + std::to_string(i) + ": the dilated kernel extent " +
                                    std::to_string(extent) + " exceeds the padded input extent " +
                                    std::to_string(padded) + " (input " + x.to_string() +
                                    "), so the output size would be non-positive");
    y.push_back((padded - extent) / win.strides[u] + 1);
  }
  if (ctx.has_input(3)) {
    check_same_type(ctx, 3, "residual");
    ctx.check(ctx.input_dims(3) == y, "residual must have the output's shape " + y.to_string() + ", got " +
                                          ctx.input_dims(3).to_string());
  }
  ctx.set_output(0, ctx.input_type(0), y);
}

void infer_deconvolution(ShapeContext& ctx) {
  check_conv_operands(ctx, "Deconvolution");
  const Dims& x = ctx.input_dims(0);
  const Dims& w = ctx.input_dims(1);
  const int k = x.rank() - 2;
  const int64_t group = attr_int(ctx.layer(), "group");
  ctx.check(w[0] == x[1], "input has " + std::to_string(x[1]) + " channels but weights " + w.to_string() +
                              " expect C = W[0] = " + std::to_string(w[0]) + " (layout [C, M/group, k..])");
  ctx.check(x[1] % group == 0, "input channels " + std::to_string(x[1]) + " must be divisible by group " +
                                   std::to_string(group));
  const int64_t m = checked_extent(ctx, __int128{w[1]} * group, "the output channels W[1] * group");
  check_bias(ctx, 2, m);
  const Window win = read_window(ctx, k);
  std::vector<int64_t> out_pad = attr_ints(ctx.layer(), "output_padding");
  if (out_pad.empty()) out_pad.assign(static_cast<size_t>(k), 0);
  ctx.check(static_cast<int>(out_pad.size()) == k,
            "attribute 'output_padding' has " + std::to_string(out_pad.size()) + " values but the input has " +
                std::to_string(k) + " spatial dims");
  Dims y{x[0], m};
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    ctx.check(out_pad[u] >= 0, "output_padding must be >= 0, got " + join(out_pad));
    const int64_t out = checked_extent(ctx,
                                       __int128{x[i + 2] - 1} * win.strides[u] - win.pads_begin[u] - win.pads_end[u] +
                                           __int128{win.dilations[u]} * (w[i + 2] - 1) + out_pad[u] + 1,
                                       "spatial dim " + std::to_string(i) + ": the output size");
    ctx.check(out >= 1, "spatial dim " + std::to_string(i) + ": output size (in-1)*s - pb - pe + d*(k-1) + op + 1 = " +
                            std::to_string(out) + " is non-positive (input " + x.to_string() + ", weights " +
                            w.to_string() + ", pads " + join(attr_ints(ctx.layer(), "pads")) + ")");
    y.push_back(out);
  }
  ctx.set_output(0, ctx.input_type(0), y);
}

void infer_pooling(ShapeContext& ctx) {
  const int k = spatial_rank(ctx, "Pooling");
  const Dims& x = ctx.input_dims(0);
  const std::string mode = attr_string(ctx.layer(), "mode");
  const DataType type = ctx.input_type(0);
  if (mode == "average") {
    check_float_input(ctx, 0, "x");
  } else {
    ctx.check(mode == "max", "attribute 'mode' must be \"max\" or \"average\", got \"" + mode + "\"");
    ctx.check(is_floating_point(type) || type == DataType::kInt8 || type == DataType::kUInt8,
              std::string("max pooling supports float32/float16/float64/int8/uint8 inputs, got ") + to_string(type));
  }
  Dims y{x[0], x[1]};
  if (attr_int(ctx.layer(), "global") != 0) {
    for (int i = 0; i < k; ++i) y.push_back(1);
    ctx.set_output(0, type, y);
    return;
  }
  const std::vector<int64_t> kernel = attr_ints(ctx.layer(), "kernel");
  ctx.check(static_cast<int>(kernel.size()) == k,
            "attribute 'kernel' has " + std::to_string(kernel.size()) + " values but the input " + x.to_string() +
                " has " + std::to_string(k) + " spatial dims (set 'kernel', or global=1)");
  const Window win = read_window(ctx, k);
  const bool ceil_mode = attr_int(ctx.layer(), "ceil_mode") != 0;
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    ctx.check(kernel[u] >= 1, "kernel sizes must be >= 1, got " + join(kernel));
    const int64_t padded = checked_extent(ctx, __int128{x[i + 2]} + win.pads_begin[u] + win.pads_end[u],
                                          "spatial dim " + std::to_string(i) + ": the padded input extent");
    const int64_t extent = checked_extent(ctx, __int128{win.dilations[u]} * (kernel[u] - 1) + 1,
                                          "spatial dim " + std::to_string(i) + ": the dilated kernel extent");
    ctx.check(padded >= extent, "spatial dim " + std::to_string(i) + ": the dilated kernel extent " +
                                    std::to_string(extent) + " exceeds the padded input extent " +
                                    std::to_string(padded) + " (input " + x.to_string() +
                                    "), so the output size would be non-positive");
    const int64_t s = win.strides[u];
    int64_t out = static_cast<int64_t>((__int128{padded} - extent + (ceil_mode ? s - 1 : 0)) / s + 1);
    // ceil_mode: a last window that would start in the right padding is dropped.
    if (ceil_mode && __int128{out - 1} * s >= __int128{x[i + 2]} + win.pads_begin[u]) --out;
    y.push_back(out);
  }
  ctx.set_output(0, type, y);
}

std::vector<AttrSpec> window_attrs() {
  return {
      {"strides", AttrType::kInts, std::vector<int64_t>{}, false, "per spatial dim; empty: ones"},
      {"pads", AttrType::kInts, std::vector<int64_t>{}, false,
       "[x1_begin, x2_begin, .., x1_end, x2_end, ..]; empty: zeros"},
      {"dilations", AttrType::kInts, std::vector<int64_t>{}, false, "per spatial dim; empty: ones"},
  };
}

std::vector<AttrSpec> conv_attrs(bool deconv) {
  std::vector<AttrSpec> a = window_attrs();
  if (deconv) {
    a.push_back({"output_padding", AttrType::kInts, std::vector<int64_t>{}, false,
                 "extra size added at the end of each spatial output dim; empty: zeros"});
  }
  a.push_back({"group", AttrType::kInt, int64_t{1}, false, "number of channel groups"});
  a.push_back({"activation", AttrType::kString, std::string(), false, "fused post-op: \"\" (none) or an Activation kind"});
  a.push_back({"activation_alpha", AttrType::kFloat, 0.0, false, "alpha of the fused post-op"});
  a.push_back({"activation_beta", AttrType::kFloat, 0.0, false, "beta of the fused post-op"});
  return a;
}

std::vector<AttrSpec> pooling_attrs() {
  std::vector<AttrSpec> a = {
      {"mode", AttrType::kString, std::string(), true, "\"max\" or \"average\""},
      {"kernel", AttrType::kInts, std::vector<int64_t>{}, false, "window size per spatial dim (unused when global)"},
  };
  for (auto& w : window_attrs()) a.push_back(std::move(w));
  a.push_back({"ceil_mode", AttrType::kInt, int64_t{0}, false,
               "1: round output sizes up (a window must still start inside the input or left padding)"});
  a.push_back({"count_include_pad", AttrType::kInt, int64_t{0}, false,
               "average: 1 divides by the window clipped to the padded extent, 0 by the in-bounds count"});
  a.push_back({"global", AttrType::kInt, int64_t{0}, false, "1: pool over all spatial dims (output spatial dims 1)"});
  return a;
}

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerConvolution, 2, 4, 1, conv_attrs(false), {}, infer_convolution,
    "y = act(conv(x, w) + b + residual): x [N, C, D1..Dk] (k = 1..3), w [M, C/group, k1..kk], optional b [M] and "
    "optional residual (output-shaped)."});

KILN_REGISTER_OP(OpSchema{
    kLayerDeconvolution, 2, 3, 1, conv_attrs(true), {}, infer_deconvolution,
    "Transposed convolution (ONNX ConvTranspose): x [N, C, D..], w [C, M/group, k..], optional b [M]; "
    "out = (in-1)*s - pb - pe + d*(k-1) + output_padding + 1, then act()."});

KILN_REGISTER_OP(OpSchema{
    kLayerPooling, 1, 1, 1, pooling_attrs(), {}, infer_pooling,
    "ONNX MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool over 1-3 spatial dims."});

}  // namespace kiln
