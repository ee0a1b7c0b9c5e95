// Escaping of file-supplied text for messages (text.h).
#include "src/core/text.h"

#include <cstdint>

#include "src/core/utf8.h"

namespace kiln {

namespace {

void append_hex_byte(std::string& out, unsigned char c) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

// Code points that change how a terminal shows what follows: C1 controls and the bidirectional
// overrides and isolates (which can make a name read as something else).
bool is_format_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  size_t i = 0;
  while (i < text.size() && i < max_bytes) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = c >= 0x80 ? utf8::decode(text, i, cp) : 0;
    if (len == 0) {
      append_hex_byte(out, c);
      ++i;
    } else if (is_format_control(cp)) {
      for (size_t k = 0; k < len; ++k) append_hex_byte(out, static_cast<unsigned char>(text[i + k]));
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  if (i < text.size()) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string quote(std::string_view text) { return "'" + printable(text) + "'"; }

}  // namespace kiln
