// Regions of code compiled for an instruction set beyond the build's baseline (x86-64), which
// kiln runs only where cpu_features.h says the processor has it:
//
//   KILN_ISA_AVX2_BEGIN      // AVX2 + FMA
//   ... functions ...
//   KILN_ISA_END
//
// KILN_ISA_AVX512_BEGIN adds AVX-512F. GCC takes `#pragma GCC target`; clang ignores that pragma
// (its intrinsics then fail to compile: "requires target feature 'avx'"), so under clang the
// same region is a `#pragma clang attribute` that gives every function in it the target
// attribute. Regions do not nest.
#pragma once

#define KILN_ISA_PRAGMA(x) _Pragma(#x)

#if defined(__clang__)
#define KILN_ISA_AVX2_BEGIN \
  KILN_ISA_PRAGMA(clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function))
#define KILN_ISA_AVX512_BEGIN \
  KILN_ISA_PRAGMA(clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function))
#define KILN_ISA_END KILN_ISA_PRAGMA(clang attribute pop)
#elif defined(__GNUC__)
#define KILN_ISA_AVX2_BEGIN KILN_ISA_PRAGMA(GCC push_options) KILN_ISA_PRAGMA(GCC target("avx2,fma"))
#define KILN_ISA_AVX512_BEGIN KILN_ISA_PRAGMA(GCC push_options) KILN_ISA_PRAGMA(GCC target("avx512f,avx2,fma"))
#define KILN_ISA_END KILN_ISA_PRAGMA(GCC pop_options)
#else
#define KILN_ISA_AVX2_BEGIN
#define KILN_ISA_AVX512_BEGIN
#define KILN_ISA_END
#endif
