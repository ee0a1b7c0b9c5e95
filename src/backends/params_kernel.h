// A kernel built from its layer's decoded params (params_of<P>, src/ir/op_params.h): the factory
// copies the params when the kernel is made and each execute runs Run(params, ctx), so a kernel
// written as a function reads typed params instead of the layer's attributes.
#pragma once

#include <memory>

#include "src/backends/kernel.h"
#include "src/ir/op_params.h"

namespace kiln {

template <typename P, void (*Run)(const P&, const KernelContext&)>
class ParamsKernel : public Kernel {
 public:
  explicit ParamsKernel(const P& params) : params_(params) {}
  void execute(const KernelContext& ctx) override { Run(params_, ctx); }

 private:
  P params_;
};

template <typename P, void (*Run)(const P&, const KernelContext&)>
KernelFactory params_kernel() {
  return [](const Layer& layer) { return std::make_unique<ParamsKernel<P, Run>>(params_of<P>(layer)); };
}

}  // namespace kiln
