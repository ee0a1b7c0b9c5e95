// UTF-8 encoding and decoding of single code points, shared by string tensors' users:
// StringNormalizer's case conversion (src/backends/cpu/string_case.cpp) and numpy '<U' arrays,
// which hold UTF-32 (src/core/tensor_io.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::utf8 {

// Decodes one UTF-8 sequence at text[i] into cp; returns its length, or 0 when the bytes there
// are not valid UTF-8 (truncated, overlong, a surrogate or above U+10FFFF).
inline size_t decode(std::string_view text, size_t i, uint32_t& cp) {
  const auto b = static_cast<unsigned char>(text[i]);
  size_t len = 0;
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  if ((b & 0xE0) == 0xC0) {
    len = 2;
    cp = b & 0x1Fu;
  } else if ((b & 0xF0) == 0xE0) {
    len = 3;
    cp = b & 0x0Fu;
  } else if ((b & 0xF8) == 0xF0) {
    len = 4;
    cp = b & 0x07u;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3Fu);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// Appends the UTF-8 encoding of code point cp.
inline void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kiln::utf8
