// ConvParams decoding, the shared sliding-window arithmetic and the (de)convolution geometry
// (see conv_params.h). Output sizes are ONNX's: conv out = floor((in + pb + pe - d*(k-1) - 1) / s)
// + 1; deconv out = (in-1)*s - pb - pe + d*(k-1) + output_padding + 1.
#include "src/ir/conv_params.h"

#include <algorithm>
#include <limits>

#include "kiln/error.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {

const char* to_string(AutoPad pad) {
  switch (pad) {
    case AutoPad::kNotSet:
      return "NOTSET";
    case AutoPad::kSameUpper:
      return "SAME_UPPER";
    case AutoPad::kSameLower:
      return "SAME_LOWER";
    case AutoPad::kValid:
      return "VALID";
  }
  return "?";
}

namespace {

std::string rank_message(const char* name, size_t got, size_t k, size_t want) {
  return std::string("attribute '") + name + "' has " + std::to_string(got) + " values but the input has " +
         std::to_string(k) + " spatial dims (expected " + std::to_string(want) + " values or none)";
}

}  // namespace

int64_t window_extent(__int128 value, const std::string& what) {
  if (value > std::numeric_limits<int64_t>::max() || value < std::numeric_limits<int64_t>::min()) {
    throw Error(what + " overflows 64-bit extents");
  }
  return static_cast<int64_t>(value);
}

int64_t window_output(const Dims& x, size_t i, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t dilation,
                      int64_t stride, bool ceil_mode) {
  const int64_t in = x[static_cast<int>(i) + 2];
  const std::string dim = "spatial dim " + std::to_string(i);
  const int64_t padded = window_extent(__int128{in} + pad_begin + pad_end, dim + ": the padded input extent");
  const int64_t extent = window_extent(__int128{dilation} * (kernel - 1) + 1, dim + ": the dilated kernel extent");
  if (padded < extent) {
    throw Error(dim + ": the dilated kernel extent " + std::to_string(extent) + " exceeds the padded input extent " +
                std::to_string(padded) + " (input " + x.to_string() + "), so the output size would be non-positive");
  }
  int64_t out = static_cast<int64_t>((__int128{padded} - extent + (ceil_mode ? stride - 1 : 0)) / stride + 1);
  // ceil_mode: a last window that would start in the right padding is dropped.
  if (ceil_mode && __int128{out - 1} * stride >= __int128{in} + pad_begin) --out;
  return out;
}

void same_padding(AutoPad auto_pad, int64_t in, int64_t kernel, int64_t stride, int64_t* begin, int64_t* end) {
  *begin = *end = 0;
  if (auto_pad != AutoPad::kSameUpper && auto_pad != AutoPad::kSameLower) return;
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + kernel - in);
  const int64_t small = total / 2, large = total - total / 2;
  *begin = auto_pad == AutoPad::kSameUpper ? small : large;
  *end = auto_pad == AutoPad::kSameUpper ? large : small;
}

std::vector<AttrSpec> window_attr_specs() {
  return {
      {"strides", AttrType::kInts, std::vector<int64_t>{}, false, "per spatial dim; empty: ones"},
      {"pads", AttrType::kInts, std::vector<int64_t>{}, false,
       "[x1_begin, x2_begin, .., x1_end, x2_end, ..]; empty: zeros; ignored unless auto_pad is NOTSET"},
      {"dilations", AttrType::kInts, std::vector<int64_t>{}, false, "per spatial dim; empty: ones"},
      {"auto_pad", AttrType::kString, std::string("NOTSET"), false,
       "NOTSET (use pads), SAME_UPPER / SAME_LOWER (out = ceil(in / stride); deconvolution: in * stride), VALID"},
  };
}

WindowParams decode_window(const Layer& layer) {
  const ParamReader r(layer);
  WindowParams w;
  w.strides = r.ints_at_least("strides", 1);
  w.dilations = r.ints_at_least("dilations", 1);
  w.pads = r.ints_at_least("pads", 0);
  w.auto_pad = r.get_enum<AutoPad>("auto_pad", {{"NOTSET", AutoPad::kNotSet},
                                                {"SAME_UPPER", AutoPad::kSameUpper},
                                                {"SAME_LOWER", AutoPad::kSameLower},
                                                {"VALID", AutoPad::kValid}});
  return w;
}

ResolvedWindow resolve_window(const WindowParams& window, const std::vector<int64_t>& in,
                              const std::vector<int64_t>& kernel) {
  const size_t k = in.size();
  if (!window.strides.empty() && window.strides.size() != k) {
    throw Error(rank_message("strides", window.strides.size(), k, k));
  }
  if (!window.dilations.empty() && window.dilations.size() != k) {
    throw Error(rank_message("dilations", window.dilations.size(), k, k));
  }
  if (window.auto_pad == AutoPad::kNotSet && !window.pads.empty() && window.pads.size() != 2 * k) {
    throw Error(rank_message("pads", window.pads.size(), k, 2 * k));
  }
  ResolvedWindow r;
  for (size_t i = 0; i < k; ++i) {
    const int64_t s = window.strides.empty() ? 1 : window.strides[i];
    const int64_t d = window.dilations.empty() ? 1 : window.dilations[i];
    int64_t pb = 0, pe = 0;
    if (window.auto_pad == AutoPad::kNotSet) {
      if (!window.pads.empty()) {
        pb = window.pads[i];
        pe = window.pads[i + k];
      }
    } else {
      const int64_t extent = window_extent(__int128{d} * (kernel[i] - 1) + 1,
                                           "spatial dim " + std::to_string(i) + ": the dilated kernel extent");
      same_padding(window.auto_pad, in[i], extent, s, &pb, &pe);
    }
    r.stride.push_back(s);
    r.dilation.push_back(d);
    r.pad_begin.push_back(pb);
    r.pad_end.push_back(pe);
  }
  return r;
}

ConvParams ConvParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  ConvParams p;
  p.deconv = layer.type() == kLayerDeconvolution;
  p.window = decode_window(layer);
  if (p.deconv) p.output_padding = r.ints_at_least("output_padding", 0);
  p.group = r.int_in("group", 1, std::numeric_limits<int64_t>::max());
  p.concurrent_streams = r.int_in("concurrent_streams", 1, kMaxTuneStreams);
  const std::string kind = r.get_string("activation");
  if (!kind.empty()) {
    try {
      p.post.kind = parse_activation_type(kind);
    } catch (const Error&) {
      r.fail("activation", "is \"" + kind + "\", not an Activation kind (see docs/layers.md); use \"\" for none");
    }
    p.post.enabled = true;
    p.post.alpha = static_cast<float>(r.get_float("activation_alpha"));
    p.post.beta = static_cast<float>(r.get_float("activation_beta"));
  }
  return p;
}

int64_t ConvGeometry::kernel_volume() const {
  int64_t v = 1;
  for (int64_t e : kernel) v *= e;
  return v;
}

bool ConvGeometry::pointwise() const {
  if (group != 1) return false;
  for (size_t i = 0; i < kernel.size(); ++i) {
    if (kernel[i] != 1 || stride[i] != 1 || dilation[i] != 1 || pad_begin[i] != 0 || pad_end[i] != 0) return false;
  }
  return true;
}

ConvGeometry conv_geometry(const ConvParams& p, const Dims& x, const Dims& w) {
  const char* what = p.deconv ? "Deconvolution" : "Convolution";
  if (x.rank() < 3 || x.rank() > 5) {
    throw Error(std::string(what) + " expects input 0 of rank 3 to 5 ([N, C, D1..Dk], k = 1..3), got " + x.to_string());
  }
  if (w.rank() != x.rank()) {
    throw Error("weights must have the input's rank " + std::to_string(x.rank()) + " (input " + x.to_string() +
                "), got weights " + w.to_string());
  }
  for (int i = 2; i < w.rank(); ++i) {
    if (w[i] < 1) throw Error("weight spatial dims must be >= 1, got weights " + w.to_string());
  }
  ConvGeometry g;
  g.spatial_rank = x.rank() - 2;
  g.batch = x[0];
  g.in_channels = x[1];
  g.group = p.group;
  const int64_t group = p.group;
  if (p.deconv) {
    if (w[0] != x[1]) {
      throw Error("input has " + std::to_string(x[1]) + " channels but weights " + w.to_string() +
                  " expect C = W[0] = " + std::to_string(w[0]) + " (layout [C, M/group, k..])");
    }
    if (x[1] % group != 0) {
      throw Error("input channels " + std::to_string(x[1]) + " must be divisible by group " + std::to_string(group));
    }
    g.out_channels = window_extent(__int128{w[1]} * group, "the output channels W[1] * group");
  } else {
    if (__int128{w[1]} * group != x[1]) {
      throw Error("input has " + std::to_string(x[1]) + " channels but weights " + w.to_string() + " with group " +
                  std::to_string(group) + " expect C = W[1] * group");
    }
    if (w[0] % group != 0) {
      throw Error("output channels W[0] = " + std::to_string(w[0]) + " must be divisible by group " +
                  std::to_string(group));
    }
    g.out_channels = w[0];
  }
  const size_t k = static_cast<size_t>(g.spatial_rank);
  for (size_t i = 0; i < k; ++i) {
    g.in.push_back(x[static_cast<int>(i) + 2]);
    g.kernel.push_back(w[static_cast<int>(i) + 2]);
  }
  if (!p.deconv) {
    ResolvedWindow r = resolve_window(p.window, g.in, g.kernel);
    g.stride = std::move(r.stride);
    g.dilation = std::move(r.dilation);
    g.pad_begin = std::move(r.pad_begin);
    g.pad_end = std::move(r.pad_end);
    g.output_padding.assign(k, 0);
    for (size_t i = 0; i < k; ++i) {
      g.out.push_back(
          window_output(x, i, g.pad_begin[i], g.pad_end[i], g.kernel[i], g.dilation[i], g.stride[i], false));
    }
    return g;
  }
  // Deconvolution: SAME pads do not depend on the input size (out = in * stride).
  if (!p.output_padding.empty() && p.output_padding.size() != k) {
    throw Error("attribute 'output_padding' has " + std::to_string(p.output_padding.size()) +
                " values but the input has " + std::to_string(k) + " spatial dims");
  }
  g.output_padding = p.output_padding.empty() ? std::vector<int64_t>(k, 0) : p.output_padding;
  if (p.window.auto_pad == AutoPad::kSameUpper || p.window.auto_pad == AutoPad::kSameLower) {
    WindowParams explicit_window = p.window;
    explicit_window.auto_pad = AutoPad::kNotSet;
    explicit_window.pads.clear();
    ResolvedWindow r = resolve_window(explicit_window, g.in, g.kernel);
    g.stride = std::move(r.stride);
    g.dilation = std::move(r.dilation);
    g.pad_begin.assign(k, 0);
    g.pad_end.assign(k, 0);
    for (size_t i = 0; i < k; ++i) {
      int64_t total = g.output_padding[i] + g.dilation[i] * (g.kernel[i] - 1) + 1 - g.stride[i];
      if (total < 0) {  // the output is larger than the natural one: the extra cells get bias only
        g.output_padding[i] += -total;
        total = 0;
      }
      const bool upper = p.window.auto_pad == AutoPad::kSameUpper;
      g.pad_begin[i] = upper ? total / 2 : total - total / 2;
      g.pad_end[i] = upper ? total - total / 2 : total / 2;
    }
  } else {
    ResolvedWindow r = resolve_window(p.window, g.in, g.kernel);
    g.stride = std::move(r.stride);
    g.dilation = std::move(r.dilation);
    g.pad_begin = std::move(r.pad_begin);
    g.pad_end = std::move(r.pad_end);
  }
  for (size_t i = 0; i < k; ++i) {
    const int64_t out = window_extent(__int128{g.in[i] - 1} * g.stride[i] - g.pad_begin[i] - g.pad_end[i] +
                                          __int128{g.dilation[i]} * (g.kernel[i] - 1) + g.output_padding[i] + 1,
                                      "spatial dim " + std::to_string(i) + ": the output size");
    if (out < 1) {
      throw Error("spatial dim " + std::to_string(i) + ": output size (in-1)*s - pb - pe + d*(k-1) + op + 1 = " +
                  std::to_string(out) + " is non-positive (input " + x.to_string() + ", weights " + w.to_string() +
                  ", pads [" + std::to_string(g.pad_begin[i]) + ", " + std::to_string(g.pad_end[i]) + "])");
    }
    g.out.push_back(out);
  }
  return g;
}

Attributes conv_attributes(const ConvolutionDesc& desc, bool deconv) {
  const size_t k = desc.kernel.size();
  const auto or_default = [](const std::vector<int64_t>& v, size_t n, int64_t def) {
    return v.empty() ? std::vector<int64_t>(n, def) : v;
  };
  Attributes a;
  a.set("strides", or_default(desc.strides, k, 1));
  std::vector<int64_t> pads = or_default(desc.pads_begin, k, 0);
  const auto end = or_default(desc.pads_end, k, 0);
  pads.insert(pads.end(), end.begin(), end.end());
  a.set("pads", pads);
  a.set("dilations", or_default(desc.dilations, k, 1));
  a.set("group", desc.groups);
  if (deconv) a.set("output_padding", or_default(desc.output_padding, k, 0));
  return a;
}

}  // namespace kiln
