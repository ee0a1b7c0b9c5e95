// CPU kernel of TemperatureSwish: y = x * sigmoid(z), z = t*x, with the sigmoid in its
// symmetric form: e = exp(-|z|) <= 1, sigmoid(z) = 1/(1 + e) for z >= 0 and e/(1 + e) for z < 0.
// Nothing cancels and nothing overflows, so y keeps its relative accuracy down to the end of the
// normal float range (x / (1 + exp(-z)) turns 0 once exp(-z) overflows, while y is still
// normal for |x| > 1). float32, contiguous, any n, any alignment of a float.
#include <cmath>

#include "plugins/temperature_swish/temperature_swish.h"
#include "src/backends/cpu/cpu_utils.h"

namespace kiln::plugins {

void temperature_swish_cpu(const float* x, float* y, int64_t n, float temperature, int num_threads) {
  cpu::parallel_for(n, num_threads, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      const float z = temperature * v;
      const float e = std::exp(-std::fabs(z));
      y[i] = v * ((z >= 0.0f ? 1.0f : e) / (1.0f + e));
    }
  });
}

}  // namespace kiln::plugins
