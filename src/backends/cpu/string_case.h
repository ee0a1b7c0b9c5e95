// Case conversion of UTF-8 text for StringNormalizer: the Unicode (14.0) simple case mappings
// (one code point to one: "ß" has no upper case of its own) from kiln's own table instead of the
// C library's locale-dependent towupper/towlower, so the result is the same on every machine.
// Code points without a mapping, and bytes that are not valid UTF-8, are kept unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cpu {

uint32_t to_upper_code_point(uint32_t cp);
uint32_t to_lower_code_point(uint32_t cp);
// Simple case folding for caseless matching: lower(upper(cp)) ("ſ", "s", "S" all give "s"; "ς",
// "σ", "Σ" give "σ"), except that U+0130/U+0131 (Turkic dotted/dotless i) stay themselves.
uint32_t fold_code_point(uint32_t cp);

enum class CaseChange { kNone, kLower, kUpper, kFold };
// The text with every code point mapped (kFold: fold_code_point).
std::string change_case(std::string_view text, CaseChange change);

}  // namespace kiln::cpu
