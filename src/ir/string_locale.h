// Which `locale` values StringNormalizer accepts. kiln changes case with its own table of the
// Unicode simple case mappings (src/backends/cpu/string_case.cpp), the same for every locale, so
// it accepts the locales whose casing rules are exactly those ("", C, POSIX and language[_REGION]
// names such as en_US, optionally with .UTF-8) and rejects the languages with special casing
// rules (Turkish and Azeri dotted/dotless i, Lithuanian dot above) and malformed names, instead
// of silently giving them the wrong case.
#pragma once

#include <cctype>
#include <string>

#include "src/core/text.h"

namespace kiln {

// Empty when `locale` is accepted, else why not (for an error message).
inline std::string string_locale_problem(const std::string& locale) {
  if (locale.empty() || locale == "C" || locale == "POSIX" || locale == "C.UTF-8" || locale == "C.utf8") return "";
  std::string name = locale;
  const size_t dot = name.find('.');
  if (dot != std::string::npos) {
    std::string codeset = name.substr(dot + 1);
    for (char& ch : codeset) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (codeset != "utf-8" && codeset != "utf8") {
      return "codeset '" + locale.substr(dot + 1) + "' is not supported (strings are UTF-8)";
    }
    name = name.substr(0, dot);
  }
  // language: 2-3 letters; optional region after '_' or '-': 2 letters or 3 digits.
  size_t i = 0;
  while (i < name.size() && std::isalpha(static_cast<unsigned char>(name[i]))) ++i;
  bool ok = i >= 2 && i <= 3;
  if (ok && i < name.size()) {
    ok = (name[i] == '_' || name[i] == '-') && (name.size() - i - 1 == 2 || name.size() - i - 1 == 3);
    for (size_t k = i + 1; ok && k < name.size(); ++k) ok = std::isalnum(static_cast<unsigned char>(name[k])) != 0;
  }
  if (!ok) return "not a locale name (expected \"\" or e.g. en_US, de_DE.UTF-8)";
  std::string language = name.substr(0, i);
  for (char& ch : language) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (language == "tr" || language == "az" || language == "lt") {
    return "language " + quote(language) + " has special casing rules, which kiln does not implement";
  }
  return "";
}

}  // namespace kiln
