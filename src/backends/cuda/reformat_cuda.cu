// CUDA kernels of Reformat, the layer the builder inserts where a tensor changes memory format:
// kLinear (N, C, spatial...) <-> kChannelsLast (N, spatial..., C) for rank >= 3 with the channel
// axis 1, i.e. the batched 2-D transpose [N, C, S] <-> [N, S, C] (S = product of the spatial
// extents). Same-format and rank < 3 reformats are one device copy, as in the CPU reference.
// Tactic "cuda" uses the 32x32 shared-memory tile transpose of strided_copy_cuda.cuh; "cuda_strided"
// the plain strided gather, which the builder's timing prefers when C or S is tiny. Any element
// type.
#include <memory>
#include <vector>

#include "src/backends/cuda/cuda_common.h"
#include "src/backends/cuda/strided_copy_cuda.cuh"
#include "src/backends/kernel.h"

namespace kiln {
namespace {

using cuda::TransposeKind;

class ReformatCuda : public Kernel {
 public:
  explicit ReformatCuda(TransposeKind kind) : kind_(kind) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const TensorDesc& x = inputs.at(0);
    const TensorDesc& y = outputs.at(0);
    elem_ = data_type_size(x.type);
    const int64_t count = x.dims.volume();
    if (x.format == y.format || x.dims.rank() < 3) {
      plan_ = cuda::plan_transpose({count}, {0});
      return;
    }
    const int64_t n = x.dims[0], c = x.dims[1];
    const int64_t s = n * c == 0 ? 0 : count / (n * c);
    // Memory order of the input, then the swap of its last two (merged) axes.
    const bool to_last = y.format == TensorFormat::kChannelsLast;
    plan_ = to_last ? cuda::plan_transpose({n, c, s}, {0, 2, 1}) : cuda::plan_transpose({n, s, c}, {0, 2, 1});
  }

  void execute(const KernelContext& ctx) override {
    cuda::transpose(plan_, elem_, ctx.inputs.at(0).data, ctx.outputs.at(0).data, cuda::stream_of(ctx), kind_,
                    "Reformat");
  }

 private:
  TransposeKind kind_;
  cuda::TransposePlan plan_;
  size_t elem_ = 1;
};

bool supports_reformat(const Layer&, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty()) return false;
  const size_t e = data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

KernelFactory factory(TransposeKind kind) {
  return [kind](const Layer&) { return std::make_unique<ReformatCuda>(kind); };
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerReformat, "cuda", 10, supports_reformat,
                                 factory(TransposeKind::kTiled)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerReformat, "cuda_strided", 5, supports_reformat,
                                 factory(TransposeKind::kStrided)});

}  // namespace kiln
