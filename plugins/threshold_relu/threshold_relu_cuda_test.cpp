// CUDA tests of the ThresholdReLU plugin: float32 and float16 on a GPU against its CPU kernel (which
// threshold_relu_test.cpp checks against double precision), on sizes 1, 13 and 1000003, misaligned
// pointers (vector path with a scalar head, and the all-scalar path), in place, channels-last
// and inside stream capture. Compiled in CUDA builds only; skipped when no GPU is present.
#ifdef KILN_HAVE_CUDA

#include <gtest/gtest.h>

#include "plugins/common/unary_cuda_test_util.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

TEST(ThresholdReluCuda, MatchesCpuKernel) {
  KILN_SKIP_WITHOUT_GPU();
  for (const float t : {0.0f, -1.25f, 0.1f}) {
    SCOPED_TRACE("threshold " + std::to_string(t));
    check_cuda_plugin(*create_registered("ThresholdReLU", one_float32_field("threshold", t)));
  }
}

}  // namespace
}  // namespace kiln::plugins

#endif  // KILN_HAVE_CUDA
