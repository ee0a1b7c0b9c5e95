// Helpers of the typed-op-params tests (op_params_test.cpp, op_params_data_test.cpp,
// op_params_indexing_test.cpp): catching the message of a kiln::Error, checking what it names,
// and writing attribute sets inline.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"

namespace kiln::op_params_test {

using Ints = std::vector<int64_t>;

// The message of the kiln::Error `fn` throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline void expect_contains(const std::string& message, const std::vector<std::string>& needles) {
  ASSERT_FALSE(message.empty()) << "expected an error";
  for (const auto& n : needles) EXPECT_NE(message.find(n), std::string::npos) << "'" << n << "' not in: " << message;
}

inline Attributes attrs(std::initializer_list<std::pair<const std::string, AttrValue>> values) {
  Attributes a;
  for (const auto& [k, v] : values) a.set(k, v);
  return a;
}

}  // namespace kiln::op_params_test
