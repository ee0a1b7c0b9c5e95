// CPU conversions between string tensors and the other types, for the Cast and Identity kernels
// (elementwise_cpu.cpp), and the text forms they use. Semantics: docs/layers.md (Cast).
#pragma once

#include <string>
#include <string_view>

#include "src/backends/kernel.h"

namespace kiln::cpu {

// Cast where the input or the output (or both) is kString. Strings written go into ctx.strings.
void cast_with_strings(const KernelContext& ctx);
// Identity of a kString tensor: the output gets its own copies of the characters.
void copy_strings(const KernelContext& ctx);

// The text of a number as Cast writes it: floating point as numpy's str() (the shortest digits
// that read back to the same value; positional with at least one decimal, "123456.0", when
// 1e-4 <= |x| < 1e16 for float64, 1e6 for float32, 1e3 for float16, else scientific, "1e+07"),
// and "NaN", "INF", "-INF"; integers in decimal; bool as "True"/"False" (numpy's str too).
std::string format_float(double value);
std::string format_float(float value);
std::string format_half(uint16_t bits);
// Parses text as Cast reads it: decimal or scientific, "NaN", "INF", "+INF", "-INF" (any case),
// surrounding spaces allowed. Throws kiln::Error (naming `what`) for anything else.
double parse_double(std::string_view text, const std::string& what);
float parse_float(std::string_view text, const std::string& what);

}  // namespace kiln::cpu
