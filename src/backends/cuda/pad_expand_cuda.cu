// CUDA kernels of Padding, Expand and Tile (docs/layers.md), all computed from dims and the
// host-known pads in prepare().
//   - Expand: a strided copy (strided_copy_cuda.cuh) whose broadcast axes have stride 0.
//   - Tile: a strided copy over twice the axes: output axis k of extent r_k * d_k is read as
//     [r_k, d_k] with strides [0, stride_k]; the map simplifier merges what it can.
//   - Padding: one thread per output element maps each axis's coordinate to a source index by
//     the mode (constant / edge / wrap / reflect, negative pads cropping first, exactly as the CPU
//     reference's pad_source) or to the fill value; neighbouring axes without padding are merged
//     first, so padding H and W of NCHW costs three coordinates. The fill value (input 2) is read
//     on the device. The mode is a template parameter.
// Layout: kLinear only; any element type; any rank up to 8.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/strided_copy_cuda.cuh"
#include "src/backends/kernel.h"
#include "src/ir/data_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

using cuda::IndexDiv;

bool linear_io(const Layer& layer, const TensorDesc& x) {
  if (x.format != TensorFormat::kLinear) return false;
  if (layer.num_outputs() < 1 || !layer.output(0) || layer.output(0)->format() != TensorFormat::kLinear) return false;
  const size_t e = data_type_size(x.type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

// ---- Expand / Tile -----------------------------------------------------------------------------

class BroadcastCopyCuda : public Kernel {
 public:
  explicit BroadcastCopyCuda(bool tile) : tile_(tile) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    elem_ = data_type_size(inputs[0].type);
    map_ = cuda::StridedMap{};
    if (y.volume() == 0) return;
    const auto stride = row_major_strides(x.to_vector());
    if (tile_) {
      if (x.rank() != y.rank()) throw Error("Tile (CUDA): input and output ranks differ");
      for (int k = 0; k < x.rank(); ++k) {
        if (x[k] == 0 || y[k] % x[k] != 0)
          throw Error("Tile (CUDA): output " + y.to_string() + " is no tiling of " + x.to_string());
        map_.push(y[k] / x[k], 0);
        map_.push(x[k], stride[static_cast<size_t>(k)]);
      }
    } else {
      // Trailing alignment; an extent of 1 repeats, a missing leading axis contributes 0.
      const int offset = y.rank() - x.rank();
      if (offset < 0) throw Error("Expand (CUDA): output rank below the input's");
      for (int k = 0; k < y.rank(); ++k) {
        const int i = k - offset;
        const bool broadcast = i < 0 || x[i] == 1;
        if (!broadcast && x[i] != y[k])
          throw Error("Expand (CUDA): " + x.to_string() + " does not broadcast to " + y.to_string());
        map_.push(y[k], broadcast ? 0 : stride[static_cast<size_t>(i)]);
      }
    }
  }

  void execute(const KernelContext& ctx) override {
    if (ctx.outputs.at(0).count() == 0) return;
    cuda::strided_copy(map_, elem_, ctx.inputs.at(0).data, ctx.outputs.at(0).data, cuda::stream_of(ctx),
                       tile_ ? "Tile" : "Expand");
  }

 private:
  bool tile_;
  cuda::StridedMap map_;
  size_t elem_ = 1;
};

// ---- Padding -----------------------------------------------------------------------------------

enum PadMode : int { kPadConstant, kPadReflect, kPadEdge, kPadWrap };

PadMode pad_mode_of(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::kConstant:
      return kPadConstant;
    case PaddingMode::kReflect:
      return kPadReflect;
    case PaddingMode::kEdge:
      return kPadEdge;
    case PaddingMode::kWrap:
      return kPadWrap;
  }
  throw Error("Padding: unknown mode " + std::to_string(static_cast<int>(mode)));
}

// One (merged) axis: output coordinate o reads source index o - lead + crop inside the kept
// range [0, kept); outside it the mode decides.
struct PadAxis {
  int64_t lead = 0;    // max(pad_begin, 0)
  int64_t crop = 0;    // max(-pad_begin, 0)
  int64_t kept = 0;    // input extent minus both crops
  int64_t stride = 0;  // input stride
};

struct PadParams {
  int rank = 0;
  IndexDiv div[kMaxDims];  // output extents
  PadAxis axis[kMaxDims];
};

__host__ __device__ __forceinline__ int64_t positive_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

// Source index along an axis, or -1 for the fill value (the CPU reference's pad_source).
template <int kMode>
__host__ __device__ __forceinline__ int64_t pad_source(int64_t o, const PadAxis& a) {
  const int64_t i = o - a.lead;
  if (i >= 0 && i < a.kept) return i + a.crop;
  if (kMode == kPadConstant || a.kept <= 0) return -1;
  int64_t s = 0;
  if (kMode == kPadEdge) {
    s = i < 0 ? 0 : a.kept - 1;
  } else if (kMode == kPadWrap) {
    s = positive_mod(i, a.kept);
  } else {  // reflect: mirror without repeating the edge element, bouncing as often as needed
    const int64_t period = 2 * (a.kept - 1);
    s = period == 0 ? 0 : positive_mod(i, period);
    if (s >= a.kept) s = period - s;
  }
  return s + a.crop;
}

// The fill value (input 2, optional) is read on the device, only by elements outside the input.
template <typename W, int kMode, bool k32>
struct PadBody {
  const W* src;
  W* dst;
  const W* fill;  // null: zero
  PadParams p;
  __host__ __device__ __forceinline__ void operator()(int64_t i) const {
    int64_t rest = i, off = 0;
    bool outside = false;
    KILN_UNROLL
    for (int k = kMaxDims - 1; k >= 0; --k) {
      if (k < p.rank) {
        int64_t c = rest;
        if (k > 0) {
          const int64_t q = p.div[k].template div<k32>(rest);
          c = rest - q * p.div[k].d;
          rest = q;
        }
        const int64_t s = pad_source<kMode>(c, p.axis[k]);
        outside = outside || s < 0;
        off += s * p.axis[k].stride;
      }
    }
    if (outside) {
      dst[i] = fill ? cuda::load_ro(fill) : W{};
    } else {
      dst[i] = cuda::load_ro(src + off);
    }
  }
};

// Calls fn(std::integral_constant<int, mode>{}): the mode becomes a template parameter.
template <typename Fn>
void dispatch_mode(PadMode mode, Fn&& fn) {
  switch (mode) {
    case kPadConstant:
      return fn(std::integral_constant<int, kPadConstant>{});
    case kPadReflect:
      return fn(std::integral_constant<int, kPadReflect>{});
    case kPadEdge:
      return fn(std::integral_constant<int, kPadEdge>{});
    case kPadWrap:
      return fn(std::integral_constant<int, kPadWrap>{});
  }
}

class PaddingCuda : public Kernel {
 public:
  explicit PaddingCuda(const Layer& layer) : mode_(pad_mode_of(params_of<PaddingParams>(layer).mode)) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    const int rank = x.rank();
    if (!inputs.at(1).value) throw Error("Padding (CUDA): pads must be known on the host");
    const auto pads = inputs[1].value->to_int64();
    if (static_cast<int>(pads.size()) != 2 * rank || y.rank() != rank) {
      throw Error("Padding: pads must have 2 * rank values");
    }
    elem_ = data_type_size(inputs[0].type);
    count_ = y.volume();
    const auto stride = row_major_strides(x.to_vector());
    // Axes in order; an unpadded axis after an unpadded axis merges into it.
    struct Axis {
      int64_t out, lead, crop, kept, stride;
      bool padded;
    };
    std::vector<Axis> axes;
    for (int k = 0; k < rank; ++k) {
      const auto u = static_cast<size_t>(k);
      const int64_t b = pads[u], e = pads[u + static_cast<size_t>(rank)];
      const bool padded = b != 0 || e != 0;
      if (!padded && x[k] == 1) continue;
      const int64_t crop_b = std::max<int64_t>(-b, 0), crop_e = std::max<int64_t>(-e, 0);
      if (!padded && !axes.empty() && !axes.back().padded) {
        Axis& prev = axes.back();
        prev.out *= y[k];
        prev.kept *= y[k];
        prev.stride = stride[u];
        continue;
      }
      axes.push_back(Axis{y[k], std::max<int64_t>(b, 0), crop_b, x[k] - crop_b - crop_e, stride[u], padded});
    }
    params_ = PadParams{};
    params_.rank = static_cast<int>(axes.size());
    for (size_t k = 0; k < axes.size(); ++k) {
      params_.div[k] = IndexDiv(axes[k].out);
      params_.axis[k] = PadAxis{axes[k].lead, axes[k].crop, axes[k].kept, axes[k].stride};
    }
  }

  void execute(const KernelContext& ctx) override {
    if (count_ == 0) return;
    const void* fill = ctx.inputs.size() > 2 ? ctx.inputs[2].data : nullptr;
    const cudaStream_t stream = cuda::stream_of(ctx);
    const bool k32 = count_ < cuda::kFast32Limit;
    cuda::dispatch_bytes(elem_, "Padding", [&](auto tag) {
      using W = typename decltype(tag)::type;
      const auto* src = static_cast<const W*>(ctx.inputs.at(0).data);
      auto* dst = static_cast<W*>(ctx.outputs.at(0).data);
      const auto* f = static_cast<const W*>(fill);
      dispatch_mode(mode_, [&](auto mode) {
        constexpr int kMode = decltype(mode)::value;
        if (k32) {
          cuda::launch_for_each(PadBody<W, kMode, true>{src, dst, f, params_}, count_, stream);
        } else {
          cuda::launch_for_each(PadBody<W, kMode, false>{src, dst, f, params_}, count_, stream);
        }
      });
    });
  }

 private:
  PadMode mode_;
  PadParams params_;
  int64_t count_ = 0;
  size_t elem_ = 1;
};

bool supports_padding(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.size() < 2 || !linear_io(layer, inputs[0]) || !inputs[1].value) return false;
  // Every PaddingMode has a kernel (the mode was checked when the layer's params were decoded).
  return !(inputs.size() > 2 && inputs[2].present && inputs[2].type != inputs[0].type);
}

bool supports_broadcast_copy(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  return !inputs.empty() && linear_io(layer, inputs[0]);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerPadding, "cuda", 10, supports_padding,
                                 [](const Layer& layer) { return std::make_unique<PaddingCuda>(layer); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerExpand, "cuda", 10, supports_broadcast_copy,
                                 [](const Layer&) { return std::make_unique<BroadcastCopyCuda>(false); }});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerTile, "cuda", 10, supports_broadcast_copy,
                                 [](const Layer&) { return std::make_unique<BroadcastCopyCuda>(true); }});

}  // namespace kiln
