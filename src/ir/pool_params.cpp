// PoolParams decoding and the pooling geometry (see pool_params.h).
#include "src/ir/pool_params.h"

#include "kiln/error.h"
#include "src/ir/op_params.h"

namespace kiln {

PoolParams PoolParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  PoolParams p;
  p.mode = r.get_enum<PoolingType>("mode", {{"max", PoolingType::kMax}, {"average", PoolingType::kAverage}});
  p.global = r.get_bool("global");
  p.ceil_mode = r.get_bool("ceil_mode");
  p.count_include_pad = r.get_bool("count_include_pad");
  p.kernel = r.ints_at_least("kernel", 1);
  p.window = decode_window(layer);
  return p;
}

PoolGeometry pool_geometry(const PoolParams& p, const Dims& x) {
  if (x.rank() < 3 || x.rank() > 5) {
    throw Error("Pooling expects input 0 of rank 3 to 5 ([N, C, D1..Dk], k = 1..3), got " + x.to_string());
  }
  PoolGeometry g;
  g.spatial_rank = x.rank() - 2;
  g.batch = x[0];
  g.channels = x[1];
  const size_t k = static_cast<size_t>(g.spatial_rank);
  for (size_t i = 0; i < k; ++i) g.in.push_back(x[static_cast<int>(i) + 2]);
  if (p.global) {
    g.kernel = g.in;
    g.out.assign(k, 1);
    g.stride.assign(k, 1);
    g.dilation.assign(k, 1);
    g.pad_begin.assign(k, 0);
    g.pad_end.assign(k, 0);
    return g;
  }
  if (p.kernel.size() != k) {
    throw Error("attribute 'kernel' has " + std::to_string(p.kernel.size()) + " values but the input " + x.to_string() +
                " has " + std::to_string(k) + " spatial dims (set 'kernel', or global=1)");
  }
  g.kernel = p.kernel;
  ResolvedWindow r = resolve_window(p.window, g.in, g.kernel);
  g.stride = std::move(r.stride);
  g.dilation = std::move(r.dilation);
  g.pad_begin = std::move(r.pad_begin);
  g.pad_end = std::move(r.pad_end);
  for (size_t i = 0; i < k; ++i) {
    g.out.push_back(
        window_output(x, i, g.pad_begin[i], g.pad_end[i], g.kernel[i], g.dilation[i], g.stride[i], p.ceil_mode));
  }
  return g;
}

Attributes pool_attributes(const PoolingDesc& desc) {
  const size_t k = desc.kernel.size();
  const auto or_default = [](const std::vector<int64_t>& v, size_t n, int64_t def) {
    return v.empty() ? std::vector<int64_t>(n, def) : v;
  };
  Attributes a;
  a.set("mode", std::string(desc.type == PoolingType::kMax ? "max" : "average"));
  a.set("kernel", desc.kernel);
  a.set("strides", or_default(desc.strides, k, 1));
  std::vector<int64_t> pads = or_default(desc.pads_begin, k, 0);
  const auto end = or_default(desc.pads_end, k, 0);
  pads.insert(pads.end(), end.begin(), end.end());
  a.set("pads", pads);
  a.set("dilations", or_default(desc.dilations, k, 1));
  a.set("ceil_mode", int64_t{desc.ceil_mode});
  a.set("count_include_pad", int64_t{desc.count_include_pad});
  a.set("global", int64_t{desc.global});
  return a;
}

}  // namespace kiln
