// CUDA tests of the Mish plugin: float32 and float16 on a GPU against its CPU kernel (which
// mish_test.cpp checks against double precision), on sizes 1, 13 and 1000003, misaligned
// pointers (vector path with a scalar head, and the all-scalar path), in place, channels-last
// and inside stream capture. Compiled in CUDA builds only; skipped when no GPU is present.
#ifdef KILN_HAVE_CUDA

#include <gtest/gtest.h>

#include "plugins/common/unary_cuda_test_util.h"

namespace kiln::plugins {
namespace {

using namespace kiln::plugins::testing;

TEST(MishCuda, MatchesCpuKernel) {
  KILN_SKIP_WITHOUT_GPU();
  check_cuda_plugin(*create_registered("Mish", {}));
}

}  // namespace
}  // namespace kiln::plugins

#endif  // KILN_HAVE_CUDA
