// CUDA kernels of Shuffle (first_transpose, reshape, second_transpose; docs/layers.md). A
// reshape moves no data: it is one cudaMemcpyAsync (nothing when input and output share memory).
// Each transpose is first reduced (extent-1 axes dropped, axes that stay adjacent merged), so
// that e.g. NCHW -> NHWC becomes the batched 2-D swap [N, C, HW] -> [N, HW, C]; then
//   - innermost axis kept: a strided gather with vector (up to 16-byte) accesses;
//   - innermost axis moved: tactic "cuda" uses the 32x32 shared-memory tile kernel (coalesced
//     on both sides), tactic "cuda_strided" the plain gather, which wins when the new innermost
//     extent is tiny (e.g. C = 3); the builder times both.
// When both transposes move data they run one after the other through a workspace of the
// output's size. Layout: kLinear only; any rank up to 8, any element type.
#include <memory>
#include <string>
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

using cuda::TransposeKind;
using cuda::TransposePlan;

std::vector<int64_t> identity_if_empty(std::vector<int64_t> perm, int rank) {
  if (perm.empty()) {
    for (int i = 0; i < rank; ++i) perm.push_back(i);
  }
  return perm;
}

class ShuffleCuda : public Kernel {
 public:
  ShuffleCuda(const Layer& layer, TransposeKind kind)
      : first_(params_of<ShuffleParams>(layer).first_transpose),
        second_(params_of<ShuffleParams>(layer).second_transpose),
        kind_(kind) {}

  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int) override {
    const Dims& x = inputs.at(0).dims;
    const Dims& y = outputs.at(0).dims;
    const auto p1 = identity_if_empty(first_, x.rank());
    const auto p2 = identity_if_empty(second_, y.rank());
    if (static_cast<int>(p1.size()) != x.rank() || static_cast<int>(p2.size()) != y.rank()) {
      throw Error("Shuffle: transposes of " + std::to_string(p1.size()) + "/" + std::to_string(p2.size()) +
                  " axes do not match the ranks of " + x.to_string() + " -> " + y.to_string());
    }
    // The reshaped tensor is the output before second_transpose.
    std::vector<int64_t> reshaped(static_cast<size_t>(y.rank()));
    for (int k = 0; k < y.rank(); ++k) reshaped[static_cast<size_t>(p2[static_cast<size_t>(k)])] = y[k];
    if (x.volume() != y.volume()) {
      throw Error("Shuffle: " + x.to_string() + " cannot become " + y.to_string() + " (volumes differ)");
    }
    first_plan_ = cuda::plan_transpose(x.to_vector(), p1);
    second_plan_ = cuda::plan_transpose(reshaped, p2);
    elem_ = data_type_size(inputs[0].type);
    workspace_ = first_plan_.moves_data() && second_plan_.moves_data() ? static_cast<size_t>(y.volume()) * elem_ : 0;
  }

  size_t workspace_size() const override { return workspace_; }

  void execute(const KernelContext& ctx) override {
    const TensorView& x = ctx.inputs.at(0);
    const TensorView& y = ctx.outputs.at(0);
    if (y.count() == 0) return;
    const cudaStream_t stream = cuda::stream_of(ctx);
    // The memory of x, of the first transpose's result and of the reshaped tensor is the same
    // sequence, so a transpose that moves nothing simply disappears.
    if (!second_plan_.moves_data())
      return cuda::transpose(first_plan_, elem_, x.data, y.data, stream, kind_, "Shuffle");
    if (!first_plan_.moves_data())
      return cuda::transpose(second_plan_, elem_, x.data, y.data, stream, kind_, "Shuffle");
    if (!ctx.workspace || ctx.workspace_size < workspace_) {
      throw Error("Shuffle (CUDA): needs a workspace of " + std::to_string(workspace_) + " bytes");
    }
    cuda::transpose(first_plan_, elem_, x.data, ctx.workspace, stream, kind_, "Shuffle");
    cuda::transpose(second_plan_, elem_, ctx.workspace, y.data, stream, kind_, "Shuffle");
  }

 private:
  std::vector<int64_t> first_, second_;
  TransposeKind kind_;
  TransposePlan first_plan_, second_plan_;
  size_t elem_ = 1;
  size_t workspace_ = 0;
};

bool supports_shuffle(const Layer& layer, const std::vector<TensorDesc>& inputs) {
  if (inputs.empty() || inputs[0].format != TensorFormat::kLinear) return false;
  if (layer.num_outputs() < 1 || !layer.output(0) || layer.output(0)->format() != TensorFormat::kLinear) return false;
  const size_t e = data_type_size(inputs[0].type);
  return e == 1 || e == 2 || e == 4 || e == 8;
}

KernelFactory shuffle_factory(TransposeKind kind) {
  return [kind](const Layer& layer) { return std::make_unique<ShuffleCuda>(layer, kind); };
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerShuffle, "cuda", 10, supports_shuffle,
                                 shuffle_factory(TransposeKind::kTiled)});
KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCUDA, kLayerShuffle, "cuda_strided", 5, supports_shuffle,
                                 shuffle_factory(TransposeKind::kStrided)});

}  // namespace kiln
