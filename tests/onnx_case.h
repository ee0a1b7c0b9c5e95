// Runs the whole-model cases of a tests/data/<family> folder (written by the folder's
// generate.py through tests/data/onnx_cases.py): each case's <name>.onnx is imported with kiln's
// ONNX parser, built into a CPU engine for exactly the shapes of <name>_in<i>.npy, run, and every
// output is compared with <name>_out<i>.npy (ONNX Runtime's result): same data type, same dims,
// values within the case's tolerances.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace kiln::test {

struct OnnxDataCase {
  std::string folder;  // absolute path of tests/data/<family>
  std::string name;
  int num_inputs = 0;
  int num_outputs = 0;
  double rtol = 1e-5, atol = 1e-6;
};

// GoogleTest prints a parameterized case by its name.
inline void PrintTo(const OnnxDataCase& c, std::ostream* os) { *os << c.name; }

// The cases listed in <folder>/cases.json; empty when the file is missing.
std::vector<OnnxDataCase> load_onnx_data_cases(const std::string& folder);

// Runs one case, reporting mismatches through GoogleTest (EXPECT/ADD_FAILURE).
void run_onnx_data_case(const OnnxDataCase& c);

}  // namespace kiln::test
