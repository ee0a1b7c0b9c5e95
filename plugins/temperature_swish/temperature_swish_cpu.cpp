// CPU kernel of TemperatureSwish: y = x * sigmoid(z), z = t*x, with the sigmoid in its
// symmetric form: e = exp(-|z|) <= 1, sigmoid(z) = 1/(1 + e) for z >= 0 and e/(1 + e) for z < 0.
// Nothing cancels and nothing overflows, so y keeps its relative accuracy down to the end of the
// normal float range (x / (1 + exp(-z)) turns 0 once exp(-z) overflows, while y is still
// normal for |x| > 1): for z < 0, x is multiplied by exp(-|z|)'s normal head before its scale
// (cpu::exp_split_lanewise). float32, contiguous, any n, any alignment of a float.
//
// The loop has no libm call and no branch, so the compiler vectorizes it (8 lanes with AVX2 +
// FMA, chosen at run time): with libm's expf per element this kernel and expf's overflow handler
// took 18% of a Triton server's CPU serving the demo model (perf, 32 clients).
#include <cmath>

#include "plugins/temperature_swish/temperature_swish.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/vector_exp.h"

namespace kiln::plugins {

void temperature_swish_cpu(const float* x, float* y, int64_t n, float temperature, int num_threads) {
  constexpr float kLow = -150.0f;  // exp_split_lanewise's range; below, |y| < |x| 2^-216
  const auto swish = [t = temperature](float v) __attribute__((always_inline)) {
    const float z = t * v;
    const float a = -std::fabs(z);
    const bool low = a < kLow;
    const cpu::ExpSplit e = cpu::exp_split_lanewise(cpu::select(low, kLow, a));
    const float inv = 1.0f / (1.0f + e.head * e.scale);
    const float pos = v * inv;                       // z >= 0: x / (1 + e)
    const float neg = (v * e.head * inv) * e.scale;  // z < 0: x e / (1 + e)
    // Far below, x * 0 (NaN for x = -inf, as x * sigmoid(-inf)); z NaN (x NaN, or inf * 0): NaN.
    const float y = cpu::select(z >= 0.0f, pos, cpu::select(low, v * 0.0f, neg));
    return cpu::select(z != z, z, y);
  };
  cpu::parallel_for(n, num_threads,
                    [=](int64_t begin, int64_t end) { cpu::map_block(x + begin, y + begin, end - begin, swish); });
}

}  // namespace kiln::plugins
