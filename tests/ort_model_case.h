// Test helpers of the scatter, quantize, sampling and rnn op families, which are checked
// through the ONNX importer: a case is a small ONNX model with its inputs and ONNX Runtime's
// outputs stored as .npy files (tests/data/<family>/, made by the family's generate.py with
// tests/data/ort_cases.py, listed in its cases.json). The helpers import the model, build a CPU
// engine for exactly the inputs' shapes, run it and compare every output; the ONNX backend
// node tests (libonnx-testdata) run the same way. Also: one-layer shape inference for the
// schema tests. (tests/onnx_case.h does the same for other families with its own case type.)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"

namespace kiln::test::ortcase {

struct ModelCase {
  std::string family;  // folder under tests/data
  std::string name;
  int inputs = 0, outputs = 0;
  double rtol = 1e-4, atol = 1e-5;
};

// The cases listed in tests/data/<family>/cases.json (empty when the file is missing).
std::vector<ModelCase> load_cases(const std::string& family);

// Imports the model, builds a CPU engine for the inputs' shapes and returns the outputs in the
// network's output order. Throws kiln::Error / kiln::ParseError.
std::vector<HostTensor> run_model(const std::string& path, const std::vector<HostTensor>& inputs);

// Runs a stored case and reports mismatches as gtest failures.
void check_case(const ModelCase& c);

// Runs /usr/include/onnx/backend/test/data/node/<name> (model.onnx, test_data_set_0) and reports
// mismatches as gtest failures; skips the test when the conformance data is not installed.
void check_node_test(const std::string& name, double rtol = 1e-4, double atol = 1e-5);

// Shape inference of one layer of `type` on network inputs of the given types and dims.
struct In {
  DataType type;
  Dims dims;
};
std::vector<std::pair<DataType, Dims>> infer_outputs(const std::string& type, const std::vector<In>& inputs,
                                                     const Attributes& attrs, int num_outputs = 1);
// The message of the kiln::Error that inference throws ("" when it succeeds).
std::string infer_error(const std::string& type, const std::vector<In>& inputs, const Attributes& attrs,
                        int num_outputs = 1);

}  // namespace kiln::test::ortcase
