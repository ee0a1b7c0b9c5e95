// The op test table: every op case of kiln, listed once, read by every backend's runner.
//
// One table per op family, tests/data/<family>/cases.json (the families: op_families() below).
// The runners that read it:
//   - tests/ops_table_test.cpp, OpTable/OpTableCase.Reference/<family>_<case>: the CPU reference
//     against the expected outputs, and every other CPU kernel (fast, vectorized, ...) against
//     the reference;
//   - tests/ops_table_test.cpp, OpTable.OnednnMatchesReference: the oneDNN tactics against the
//     reference;
//   - tests/cuda_ops_test.cpp, CudaOps.*: every CUDA kernel against the CPU reference, in fp32 and
//     in fp16 (skipped without a GPU).
// The oneDNN and CUDA runners print, per family, how many cases passed, were declined (no kernel
// of the backend accepts them, or the table excludes the backend, with the reason) and failed,
// then every declined case and why. tests/README.md says the same in short.
//
// A cases.json file is a JSON array with one entry per case, in one of two forms.
//
// Layer case: one layer of kiln IR, run through the op harness (tests/op_harness.h) on every
// backend that has a kernel for the layer type.
//   "name":    unique in the family; it also seeds the random inputs (keep it when editing a case)
//   "type":    the layer type (a kLayer* name: "Convolution", "ElementWise", ...)
//   "attrs":   {"name": value}: integers, floats (write 1.0, not 1, for a float), strings, and
//              arrays of one of these
//   "inputs":  one entry per layer input, in order:
//                "x_in0.npy"                          values from a file in the family's folder
//                null or ""                           an omitted optional input
//                {"type": "float32", "dims": [2, 3], "low": -2, "high": 2}
//                                                     random values in [low, high) (defaults -2, 2)
//                {"type": "int64", "dims": [1], "value": [6]}   the given values ("nan", "inf",
//                                                     "-inf" as strings)
//              an object may add "constant": true/false; by default input 0 is a network input
//              and the others are constants (weights, shape inputs, as the ONNX importer makes
//              them), and an input the schema lists as a shape input is always a constant
//   expected:  "output": "x_out.npy" or "outputs": ["x_out0.npy", ...]: outputs computed
//              independently of kiln (ONNX Runtime, numpy, the ONNX reference), or
//              "expected": [{"type": "uint8", "dims": [3], "value": [8, 10, 12]}, ...]: outputs
//              computed by hand (say how in "note"); the CPU reference must match them. Without
//              them the CPU reference is the oracle (the "reference rule") and "num_outputs" says
//              how many outputs the layer has (default 1).
//   "rtol", "atol": |got - expected| <= atol + rtol * |expected| (defaults 1e-4, 1e-5); against
//              the expected files, and for every other kernel against the reference (the CUDA
//              runner uses at least 1e-4 / 1e-5 there; fp16 runs use 1e-2 / 1e-2 of the
//              reference's magnitude)
//   "require": ["cpu:onednn", "cpu:vectorized", "cpu:*"]: CPU kernels (by tactic; "*": every
//              registered one) that must accept the case and pass it
//   "decline": {"cpu:onednn": "why"}: CPU kernels that must decline the case (supports() false)
//   "skip":    {"cuda": "why", "cuda_fp16": "why", "onednn": "why", "reference": "why"}: runners
//              that do not run the case, with the reason they print
//   "source":  "hand" for a case written by hand (random or given inputs): the generators keep
//              such entries when they rewrite the file
//   "note":    free text (how hand-computed values were found); the loader ignores it
//
// Model case: a small ONNX model <name>.onnx with inputs <name>_in<i>.npy and ONNX Runtime's
// outputs <name>_out<i>.npy, written by the family's generate.py (tests/data/onnx_cases.py,
// tests/data/ort_cases.py):
//   "name", "inputs": N, "outputs": M, "rtol", "atol" (and "skip" as above)
//   "sets": S  several input sets <name>_set<s>_in<i>.npy (data-dependent output sizes; run by
//              tests/data_dependent_ops_test.cpp on every device, the table's runners skip them)
// The CPU runner imports the model and runs a CPU engine. When the imported network is one
// layer fed by network inputs and constants, every runner also runs that layer as a layer case
// (lift(); its outputs may be more than the model's, e.g. an RNN's); otherwise the CUDA runner
// builds a CUDA engine of the whole model.
//
// To add a case: append an entry to the family's cases.json (by hand with "source": "hand", or
// in the family's generator for a case with expected outputs, then run the generator). It then
// runs in all the runners above; nothing else is to be edited. A backend that cannot take the
// case declines it through its kernels' supports() (and the runner counts it as declined); say
// in "skip" why a runner must not run it at all, in "decline" when a kernel must refuse it.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/types.h"
#include "tests/op_harness.h"

namespace kiln::test {

// The op families, one folder (and one cases.json) each under tests/data.
inline const std::vector<std::string>& op_families() {
  static const std::vector<std::string> kOpFamilies = {
      "bitwise", "composite",     "conv",     "data", "data_dependent", "einsum", "indexing",
      "math",    "normalization", "quantize", "rnn",  "sampling",       "scatter"};
  return kOpFamilies;
}

struct TableCase {
  std::string family;
  std::string name;
  bool model = false;  // a model case (<name>.onnx); else a layer case
  // Layer cases: the harness case (inputs' values loaded from their files).
  OpCase op;
  // Expected outputs: file names in the family folder, or values given in the table (both
  // empty: the reference rule).
  std::vector<std::string> expected;
  std::vector<HostTensor> expected_values;
  // Model cases.
  int num_inputs = 0, num_outputs = 0, sets = 0;
  double rtol = 1e-4, atol = 1e-5;
  std::vector<std::string> require;            // "cpu:<tactic>" or "cpu:*"
  std::map<std::string, std::string> decline;  // "cpu:<tactic>" -> why
  std::map<std::string, std::string> skip;     // runner -> why
  bool hand = false;

  std::string dir() const;        // the family folder, with a trailing '/'
  std::string id() const;         // "<family>/<name>"
  std::string test_name() const;  // "<family>_<name>", a valid GoogleTest name
  // The reason runner `runner` must not run the case ("" when it runs it).
  std::string skip_reason(const std::string& runner) const;
};

inline void PrintTo(const TableCase& c, std::ostream* os) { *os << c.id(); }

// The cases of one family's cases.json (in file order); throws kiln::Error naming the file and
// the case on a malformed entry, or when the file is missing.
std::vector<TableCase> load_op_table(const std::string& family);
// Every family's cases, family by family.
std::vector<TableCase> load_op_table();

// The layer case of a table case: for a layer case itself; for a model case whose imported
// network is a single layer fed only by network inputs and constants, and whose outputs are all
// outputs of that layer, that layer with the model's inputs and constants (input 0 a network
// input, the others constants, as in layer cases); nullopt otherwise.
struct LayerCase {
  OpCase op;
  std::vector<int> outputs;  // per expected output (network output), the layer output it is
};
std::optional<LayerCase> lift(const TableCase& c);

// The expected outputs of a case (loaded from its files; set `set` when the case has several);
// empty under the reference rule.
std::vector<HostTensor> expected_outputs(const TableCase& c, int set = 0);

// The model case's inputs (set `set` when the case has several).
std::vector<HostTensor> model_inputs(const TableCase& c, int set = 0);

// Imports the model case and runs it as an engine on `device` (fp16 kernels allowed when `fp16`),
// for exactly the shapes of its inputs; the outputs in the network's order.
std::vector<HostTensor> run_model_case(const TableCase& c, DeviceType device, bool fp16 = false);

// Per-family tallies of one runner, printed as one line per family.
struct Tally {
  int cases = 0, passed = 0, declined = 0, failed = 0;
};
void print_tallies(std::ostream& os, const std::string& runner, const std::map<std::string, Tally>& per_family);

}  // namespace kiln::test
