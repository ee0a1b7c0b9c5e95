// A table of an enum's attribute names, written once per enum and used both to decode the
// attribute (ParamReader::get_enum, which lists the names when a value is not one of them) and to
// name a value in messages (name_in).
#pragma once

#include <initializer_list>
#include <string_view>
#include <utility>

namespace kiln {

template <typename E>
using EnumNames = std::initializer_list<std::pair<std::string_view, E>>;

// The name of `value` in `names` (string literals, so the result is null-terminated); "?" when
// absent.
template <typename E>
const char* name_in(EnumNames<E> names, E value) {
  for (const auto& [name, v] : names) {
    if (v == value) return name.data();
  }
  return "?";
}

}  // namespace kiln
