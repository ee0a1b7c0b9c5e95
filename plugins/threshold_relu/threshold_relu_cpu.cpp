// CPU kernel of ThresholdReLU: y = max(x, threshold), written as `x < t ? t : x` so that a NaN
// input stays NaN (as in ReLU) and gcc vectorizes it into max instructions. float32,
// contiguous, any n, any alignment of a float.
#include "plugins/threshold_relu/threshold_relu.h"
#include "src/backends/cpu/cpu_utils.h"

namespace kiln::plugins {

void threshold_relu_cpu(const float* x, float* y, int64_t n, float threshold, int num_threads) {
  cpu::parallel_for(
      n, num_threads,
      [=](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float v = x[i];
          y[i] = v < threshold ? threshold : v;
        }
      },
      1 << 16);  // a max per element is cheaper than starting threads for small chunks
}

}  // namespace kiln::plugins
