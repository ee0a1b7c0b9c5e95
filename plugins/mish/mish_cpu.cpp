// CPU kernel of Mish, float32, contiguous, any n, any alignment of a float. With e = exp(x),
// tanh(softplus(x)) = ((1+e)^2 - 1) / ((1+e)^2 + 1) = m / (m + 2) where m = e(e + 2): one exp,
// no log, and no cancellation for negative x (y ~ x*e there). From x = 20 on, m/(m+2) is 1 in
// float (it is already from x ~ 8.7) and m would overflow past x ~ 44, so y = x. For very
// negative x, where e is subnormal and y still normal, x is multiplied by e's normal head before
// its scale (cpu::exp_split_lanewise).
//
// No libm call and no branch: the compiler vectorizes the loop (8 lanes with AVX2 + FMA, chosen
// at run time).
#include <cmath>

#include "plugins/mish/mish.h"
#include "src/backends/cpu/cpu_utils.h"
#include "src/backends/cpu/vector_exp.h"

namespace kiln::plugins {

void mish_cpu(const float* x, float* y, int64_t n, int num_threads) {
  constexpr float kLow = -150.0f;  // exp_split_lanewise's range; below, |y| < |x| 2^-216
  const auto mish = [](float v) __attribute__((always_inline)) {
    const bool low = v < kLow;
    const cpu::ExpSplit e = cpu::exp_split_lanewise(cpu::select(low, kLow, cpu::select(v < 20.0f, v, 20.0f)));
    const float ef = e.head * e.scale;
    const float m = ef * (ef + 2.0f);
    const float body = (v * e.head * (ef + 2.0f) / (m + 2.0f)) * e.scale;
    // x >= 20 (and inf): x; far below: x * 0 (NaN for -inf); NaN stays NaN.
    const float y = cpu::select(v >= 20.0f, v, cpu::select(low, v * 0.0f, body));
    return cpu::select(v != v, v, y);
  };
  cpu::parallel_for(n, num_threads,
                    [=](int64_t begin, int64_t end) { cpu::map_block(x + begin, y + begin, end - begin, mish); });
}

}  // namespace kiln::plugins
