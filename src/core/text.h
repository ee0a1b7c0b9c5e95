// Text that comes from files (names of layers, tensors, nodes and attributes, paths, flag-file
// contents) made safe to print in messages: control characters, invalid UTF-8 and backslashes
// are escaped, so that a model cannot print fake lines ("\nkiln: error: ...") or terminal escape
// sequences on a user's terminal, and very long text is cut. Every error message that prints
// such text goes through printable() or quote().
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// `text` with bytes below 0x20, 0x7f, C1 control characters (U+0080..U+009F), bytes that are
// not valid UTF-8 and '\' written as \n, \r, \t, \\ or \xNN; valid printable UTF-8 stays as is.
// Text longer than `max_bytes` is cut there and ends in "...(N bytes)".
std::string printable(std::string_view text, size_t max_bytes = 256);

// "'" + printable(text) + "'".
std::string quote(std::string_view text);

}  // namespace kiln
