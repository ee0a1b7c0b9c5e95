// The builder's graph passes. Each pass rewrites the network in place, returns the number of
// changes it made and appends one human-readable line per change to ctx.log. The builder
// (src/builder/builder.cpp) should run them in this order, each unless disabled by name:
//   constant_folding, dead_layer_elimination, conv_bn_folding, shuffle_merge, activation_fusion,
//   elementwise_fusion, dead_layer_elimination, then fp16_precision, layout and concat_conv_split
// (activation fusion must see the Conv+BN result, and element-wise fusion must run after
// activation fusion so that activations it can put on a convolution stay there).
// Every pass is deterministic: it visits layers in network order and never iterates over
// pointer-keyed unordered containers, so the same network always gives the same result. Passes
// keep the names of network outputs (and, where they can, of every surviving tensor) and leave
// the layer list in topological order. Constants they orphan are removed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "kiln/types.h"

namespace kiln {

struct PassContext {
  const BuilderConfig& config;
  // Concrete input dims for each profile point (min/opt/max of each profile), for passes that
  // need shapes; every map gives dims for all network inputs. May be empty for a network whose
  // inputs are all static (the passes then use the declared dims).
  std::vector<std::map<std::string, Dims>> shape_points;
  std::vector<std::string>* log;  // append one human-readable line per change (may be null)
};

// Replaces layers whose inputs are all constants by Constant layers (evaluated on the host), and
// tensors whose value is known and identical at every shape point (exporters' Shape/Gather/Concat
// arithmetic on static dims) by Constants. Outputs over 64 MiB are left alone.
int pass_constant_folding(Network& network, PassContext& ctx);
// Removes layers none of whose outputs reach a network output, and bypasses Identity layers.
int pass_dead_layer_elimination(Network& network, PassContext& ctx);
// Folds a per-channel Scale (BatchNorm) or per-channel constant mul/add/sub/div that follows a
// Convolution into the convolution's weights and bias.
int pass_conv_bn_folding(Network& network, PassContext& ctx);
// x*sigmoid(x) -> silu; Convolution + element-wise residual sum -> Convolution with residual
// input; Convolution/Deconvolution/Gemm + Activation -> fused post-op.
int pass_activation_fusion(Network& network, PassContext& ctx);
// Chains of element-wise layers -> one FusedElementWise layer (program format: src/ir/ops_fused.h).
int pass_elementwise_fusion(Network& network, PassContext& ctx);
// Shuffle then Shuffle (the second only transposing, the first with no second transpose) -> one
// Shuffle (CPU builds).
int pass_shuffle_merge(Network& network, PassContext& ctx);
// BuilderConfig::fp16: runs each layer in float16 where the device has a kernel for it, with
// casts only where a tensor's type changes; network inputs/outputs keep their declared types.
int pass_fp16_precision(Network& network, PassContext& ctx);
// Chooses channels-last (NHWC) memory for chains of layers whose kernels prefer it (CUDA fp16
// convolutions) and inserts Reformat layers where the format changes.
int pass_layout(Network& network, PassContext& ctx);
// CPU: a Convolution over a channel Concatenation that is a copy (channels-last, or more than one
// image) and whose output is much smaller than its input -> one convolution per concatenated
// tensor, chained through their residual inputs. Runs after layout (the format decides).
int pass_concat_conv_split(Network& network, PassContext& ctx);

}  // namespace kiln
