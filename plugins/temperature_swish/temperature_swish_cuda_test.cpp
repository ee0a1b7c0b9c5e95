// CUDA tests of the TemperatureSwish plugin: float32 and float16 on a GPU against its CPU kernel (which
// temperature_swish_test.cpp checks against double precision), on sizes 1, 13 and 1000003, misaligned
// pointers (vector path with a scalar head, and the all-scalar path), in place, channels-last
// and inside stream capture. Compiled in CUDA builds only; skipped when no GPU is present.
#ifdef KILN_HAVE_CUDA

#include <gtest/gtest.h>

#include "plugins/common/unary_cuda_test_util.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

TEST(TemperatureSwishCuda, MatchesCpuKernel) {
  KILN_SKIP_WITHOUT_GPU();
  for (const float t : {1.0f, 2.5f, -0.5f}) {
    SCOPED_TRACE("temperature " + std::to_string(t));
    check_cuda_plugin(*create_registered("TemperatureSwish", one_float32_field("temperature", t)));
  }
}

}  // namespace
}  // namespace kiln::plugins

#endif  // KILN_HAVE_CUDA
