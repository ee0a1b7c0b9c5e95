// Overflow-checked integer arithmetic for extents, element counts and byte sizes. Files can claim
// any dims (2^62 elements, pads of INT64_MAX), so every product or sum that sizes memory goes
// through these: they return false (or throw kiln::Error) instead of wrapping around.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/error.h"

namespace kiln {

// a + b, a * b and a - b into `out`; false when the exact result does not fit in int64.
inline bool add_overflows(int64_t a, int64_t b, int64_t& out) { return __builtin_add_overflow(a, b, &out); }
inline bool mul_overflows(int64_t a, int64_t b, int64_t& out) { return __builtin_mul_overflow(a, b, &out); }
inline bool sub_overflows(int64_t a, int64_t b, int64_t& out) { return __builtin_sub_overflow(a, b, &out); }

// The same, throwing kiln::Error "<what>: <a> <op> <b> overflows 64-bit integers".
inline int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (add_overflows(a, b, r)) {
    throw Error(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows 64-bit integers");
  }
  return r;
}
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (mul_overflows(a, b, r)) {
    throw Error(what + ": " + std::to_string(a) + " * " + std::to_string(b) + " overflows 64-bit integers");
  }
  return r;
}
inline int64_t checked_sub(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (sub_overflows(a, b, r)) {
    throw Error(what + ": " + std::to_string(a) + " - " + std::to_string(b) + " overflows 64-bit integers");
  }
  return r;
}

// Unsigned byte sums (memory plans, workspaces): a + b, throwing on wrap-around.
inline uint64_t checked_add_bytes(uint64_t a, uint64_t b, const std::string& what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw Error(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " bytes overflows 64-bit sizes");
  }
  return r;
}

}  // namespace kiln
