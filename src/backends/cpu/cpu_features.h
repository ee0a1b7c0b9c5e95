// What the CPU kiln runs on can do, read once per process: kernels with a loop compiled for AVX2
// and FMA (KILN_ISA_AVX2_BEGIN, isa_region.h) or AVX-512 besides the build's baseline pick them
// with these.
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

// AVX-512F besides AVX2 and FMA (kernels with an AVX-512 register block,
// KILN_ISA_AVX512_BEGIN).
inline bool has_avx512f() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = has_avx2_fma() && __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

}  // namespace kiln::cpu
