// Test helpers of the scatter, quantize, sampling and rnn op families: the ONNX backend node
// tests (libonnx-testdata) imported, built into a CPU engine for exactly the inputs' shapes, run
// and compared output by output; one-layer shape inference for the schema tests. (Their stored
// ONNX models against ONNX Runtime's outputs are cases of the op table, tests/op_table.h.)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"

namespace kiln::test::ortcase {

// Imports the model, builds a CPU engine for the inputs' shapes and returns the outputs in the
// network's output order. Throws kiln::Error / kiln::ParseError.
std::vector<HostTensor> run_model(const std::string& path, const std::vector<HostTensor>& inputs);

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
