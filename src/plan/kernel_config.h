// Kernel configuration, shared by the builder and the runtime: what a kernel is told about the
// tensors of its layer, for one set of shapes (input_descs: prepare, supports) and over an
// optimization profile (layer_ranges: Kernel::configure_profile, which hands a plugin its
// min/opt/max). Below both the builder and the runtime (src/plan), so that neither includes the
// other.
#pragma once

#include <memory>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "src/backends/kernel.h"
#include "src/ir/shape_inference.h"

namespace kiln {

// Input descriptions of a layer under one set of tensor states (values of host-known tensors).
std::vector<TensorDesc> input_descs(const Layer& layer, const TensorStates& states);
// Output descriptions (type, dims, the output tensor's format; no values).
std::vector<TensorDesc> output_descs(const Layer& layer, const TensorStates& states);

// The ranges of a layer's inputs and outputs over one optimization profile, from the tensor
// states at its opt, min and max points: min/max element-wise over the three, kDynamic-free;
// a data-dependent extent ranges from 0 to its upper bound.
void layer_ranges(const Layer& layer, const TensorStates& opt, const TensorStates& min, const TensorStates& max,
                  std::vector<TensorRange>& inputs, std::vector<TensorRange>& outputs);

// The tensor states at a profile's opt, min and max input dims (shape inference at each).
struct ProfileStates {
  TensorStates opt, min, max;
};
ProfileStates profile_states(const Network& network, const OptimizationProfile& profile);

// Calls Kernel::configure_profile on `kernel` (which runs `layer`) with the layer's ranges
// under a profile. Throws kiln::Error naming the layer when the kernel rejects them.
void configure_kernel_for_profile(Kernel& kernel, const Layer& layer, const ProfileStates& states);

// Calls Kernel::configure_profile on every kernel of an execution context (kernels[s] runs
// steps[s]) with its layer's ranges under `profile`. Host-evaluated layers are skipped: their
// kernels never run. Throws kiln::Error naming the layer a kernel rejected.
void configure_kernels_for_profile(const Network& network, const std::vector<Layer*>& steps,
                                   const std::vector<std::unique_ptr<Kernel>>& kernels,
                                   const OptimizationProfile& profile);

}  // namespace kiln
