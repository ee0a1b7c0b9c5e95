// CPU reference kernel of the Einsum layer: one odometer over every label of the equation (see
// src/ir/einsum_equation.h); each step multiplies one element of every operand and adds the
// product to the output element its output labels select. Sums accumulate in double (int64 for
// integers). Plain and general rather than fast: O(product of all label extents).
//
// Layout: dense row-major (TensorFormat::kLinear); no alignment is assumed.
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/kernel.h"
#include "src/ir/einsum_params.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

// Per label, the element stride of a tensor along it: the sum of the strides of the tensor's
// axes with that label (a repeated label walks the diagonal); 0 where the tensor's extent is 1
// (broadcast) or the tensor lacks the label (the sum runs over it).
std::vector<int64_t> label_strides(const std::vector<int>& labels, const Dims& dims, size_t num_labels) {
  std::vector<int64_t> s(num_labels, 0);
  const auto strides = row_major_strides(dims);
  for (size_t axis = 0; axis < labels.size(); ++axis) {
    if (dims[static_cast<int>(axis)] != 1) s[static_cast<size_t>(labels[axis])] += strides[axis];
  }
  return s;
}

template <typename T>
void einsum(const KernelContext& ctx) {
  std::vector<Dims> dims;
  for (const auto& in : ctx.inputs) dims.push_back(in.dims);
  const EinsumPlan plan = plan_einsum(params_of<EinsumParams>(*ctx.layer).equation, dims);
  const size_t num_labels = plan.label_sizes.size();
  const size_t num_operands = ctx.inputs.size();
  std::vector<std::vector<int64_t>> strides;
  for (size_t k = 0; k < num_operands; ++k)
    strides.push_back(label_strides(plan.operand_labels[k], dims[k], num_labels));
  const std::vector<int64_t> out_strides = label_strides(plan.output_labels, plan.output_dims, num_labels);

  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  std::vector<Acc> acc(static_cast<size_t>(plan.output_dims.volume()), Acc(0));
  int64_t total = 1;
  for (int64_t s : plan.label_sizes) total *= s;
  std::vector<int64_t> index(num_labels, 0), offset(num_operands, 0);
  int64_t out_offset = 0;
  for (int64_t step = 0; step < total; ++step) {
    Acc product = Acc(1);
    for (size_t k = 0; k < num_operands; ++k) product *= static_cast<Acc>(ctx.inputs[k].as<const T>()[offset[k]]);
    acc[static_cast<size_t>(out_offset)] += product;
    // Advance the odometer, last label fastest.
    for (size_t l = num_labels; l-- > 0;) {
      const int64_t size = plan.label_sizes[l];
      for (size_t k = 0; k < num_operands; ++k) offset[k] += strides[k][l];
      out_offset += out_strides[l];
      if (++index[l] < size) break;
      for (size_t k = 0; k < num_operands; ++k) offset[k] -= strides[k][l] * size;
      out_offset -= out_strides[l] * size;
      index[l] = 0;
    }
  }
  T* y = ctx.outputs[0].as<T>();
  for (size_t i = 0; i < acc.size(); ++i) y[i] = static_cast<T>(acc[i]);
}

}  // namespace

KILN_REGISTER_KERNEL(KernelEntry{DeviceType::kCPU, kLayerEinsum, "reference", 0, nullptr,
                                 function_kernel([](const KernelContext& ctx) {
                                   KILN_DISPATCH_NUMERIC(ctx.inputs[0].type, "Einsum", einsum<T>(ctx));
                                 })});

}  // namespace kiln
