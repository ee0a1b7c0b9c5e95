// What a failed host allocation (std::bad_alloc) becomes at kiln's public entry points: a
// kiln::Error that says what kiln was doing and what to do about it.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "kiln/error.h"

namespace kiln {

[[noreturn]] inline void throw_out_of_host_memory(const std::string& step) {
  throw Error("out of host memory while " + step +
              " (a host allocation failed); free memory in this process, or lower the profile's max shapes "
              "and the batch");
}

// An exception's text for an error message: a failed host allocation says so (std::bad_alloc's
// own text is only "std::bad_alloc").
inline std::string exception_text(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) return "out of host memory (a host allocation failed)";
  return e.what();
}

}  // namespace kiln
