// What the CPU kiln runs on can do, read once per process: kernels with a loop compiled for AVX2
// and FMA (`#pragma GCC target("avx2,fma")`) besides the build's baseline pick it with this.
#pragma once

namespace kiln::cpu {

inline bool has_avx2_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

}  // namespace kiln::cpu
