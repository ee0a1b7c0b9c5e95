// Fuzz target: ONNX model bytes -> OnnxParser::parse_bytes -> (when it parses) a CPU build with
// a small activation-memory limit (onnx_import_body.h). libFuzzer mutates the bytes; the
// structure-aware twin is fuzz_onnx_structured.cpp.
#include "onnx_import_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln_fuzz::import_and_build(data, size);
}
