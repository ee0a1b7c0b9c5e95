// Scatter's `reduction` attribute (ONNX ScatterElements / ScatterND): one enum and one parser for
// shape inference and every backend. (The rest of Scatter's parameters are still read by key;
// issue 13's later part gives the family a ScatterParams.)
#pragma once

#include <string>
#include <utility>

#include "kiln/error.h"
#include "src/core/text.h"

namespace kiln {

enum class ScatterReduction : int { kNone, kAdd, kMul, kMax, kMin };

// Throws kiln::Error naming the value and the allowed ones.
inline ScatterReduction parse_scatter_reduction(const std::string& name) {
  static const std::pair<const char*, ScatterReduction> kTable[] = {
      {"none", ScatterReduction::kNone}, {"add", ScatterReduction::kAdd}, {"mul", ScatterReduction::kMul},
      {"max", ScatterReduction::kMax},   {"min", ScatterReduction::kMin}};
  for (const auto& [n, r] : kTable) {
    if (name == n) return r;
  }
  throw Error("Scatter: unknown reduction " + quote(name) + " (none, add, mul, max or min)");
}

}  // namespace kiln
