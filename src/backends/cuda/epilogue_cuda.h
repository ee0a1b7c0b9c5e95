// The element-wise epilogue of the CUDA (de)convolution tactics, callable from host code built
// by g++ (no device declarations here): y = act(src + bias[c] + residual) over an [N, C, S0, S1,
// S2] activation tensor in kLinear (NCDHW) or kChannelsLast (NDHWC) format. `src` is either y
// itself (in place after a cuDNN call) or another tensor of the same format whose spatial window
// is shifted and clipped against y's (source index = output index + shift; outside the source
// the value is 0). The shifted form serves three jobs with one kernel: the bias/residual/activation
// epilogue, zero-padding an input into a workspace buffer (negative shift, larger output), and
// cropping cuDNN's full transposed-convolution result into the layer's output (positive shift).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "kiln/types.h"
#include "src/core/activation_math.h"

namespace kiln::cuda {

struct EpilogueArgs {
  DataType type = DataType::kFloat32;           // float32 or float16; every tensor has this type
  TensorFormat format = TensorFormat::kLinear;  // of y, the source and the residual alike
  int64_t batch = 0, channels = 0;
  std::array<int64_t, 3> out{1, 1, 1};    // y's spatial extents (right-aligned: 1-D is {1, 1, L})
  const void* source = nullptr;           // null or == y: in place (src/shift ignored)
  std::array<int64_t, 3> src{1, 1, 1};    // the source's spatial extents
  std::array<int64_t, 3> shift{0, 0, 0};  // source index = output index + shift, per spatial dim
  const void* bias = nullptr;             // [channels] or null
  const void* residual = nullptr;         // shaped and formatted like y, or null; must not alias y
  void* y = nullptr;
  PostOp post;  // applied last; disabled: none
};

// True when an in-place epilogue would change nothing (no bias, residual or activation).
inline bool epilogue_is_identity(const EpilogueArgs& a) {
  const bool in_place = a.source == nullptr || a.source == a.y;
  return in_place && !a.bias && !a.residual && !a.post.enabled;
}

// Enqueues the epilogue on `stream` (nothing when it is the identity). Throws kiln::Error for an
// unsupported type or a launch failure.
void launch_epilogue(const EpilogueArgs& args, cudaStream_t stream);

}  // namespace kiln::cuda
