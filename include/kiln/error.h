// kiln reports every failure as a kiln::Error exception whose message says what failed, where
// (layer, node, tensor or file by name) and what to do about it. No integer error codes.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Thrown for malformed, truncated or foreign engine files.
class EngineFormatError : public Error {
 public:
  using Error::Error;
};

// Thrown for ONNX models kiln cannot import; the message lists every unsupported node.
class ParseError : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln
