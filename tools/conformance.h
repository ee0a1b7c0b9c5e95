// The ONNX backend-test conformance runner behind `kiln conformance`: finds the test folders of
// ONNX's backend test data (node/, pytorch-converted/, pytorch-operator/, simple/; each test is a
// folder with model.onnx and test_data_set_*/{input,output}_<i>.pb), runs each test through kiln's
// ONNX parser, builder and runtime, and classifies it:
//   pass         every output of every data set matches (|a-b| <= atol + rtol*|b|, NaN == NaN)
//   wrong        an output differs (the worst element is kept) or has the wrong shape or type
//   unsupported  import, build or run failed (the error message is kept)
//   excluded     the test is out of scope: non-tensor inputs/outputs (sequence, map, optional),
//                training ops, nondeterministic ops
//   crash        the test killed its worker process (a signal: that is a kiln bug)
// Each test runs in a forked worker with an address-space limit, so a crash or a runaway
// allocation in one test cannot take the runner down. The parent process never runs kernels or
// touches a device (forking after OpenMP or CUDA started is unsafe); it only reads models.
// Reports (tables, JSON, passing lists, markdown) live in conformance_report.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/types.h"

namespace kiln::conformance {

enum class Status { kPass, kWrong, kUnsupported, kExcluded, kCrash };
inline constexpr Status kAllStatuses[] = {Status::kPass, Status::kWrong, Status::kUnsupported, Status::kExcluded,
                                          Status::kCrash};
// "pass", "wrong", "unsupported", "excluded", "crash".
const char* to_string(Status status);

// One test folder, and what reading its model (in the parent) told about it.
struct TestCase {
  std::string folder;                  // "node", "pytorch-converted", ...
  std::string name;                    // "test_abs"
  std::string dir;                     // the test's folder
  std::vector<std::string> model_ops;  // distinct op types of the model's main graph, in order
  std::vector<std::string> ops;        // op types the test is counted under in the per-op table
  std::string excluded;                // why it is out of scope; empty when in scope
  std::string model_error;             // model.onnx unreadable; empty when fine
  // "node/test_abs": the test's id in lists, filters and JSON.
  std::string id() const { return folder + "/" + name; }
};

// The element of an output that is furthest outside the tolerance.
struct WorstElement {
  std::string output;  // output name
  int data_set = 0;
  std::vector<int64_t> index;  // multi-index of the element
  double actual = 0, expected = 0;
  double abs_err = 0, allowed = 0;    // |a-b| and atol + rtol*|b|
  int64_t violations = 0, count = 0;  // elements outside the tolerance, of `count`
};

struct TestResult {
  TestCase test;
  Status status = Status::kUnsupported;
  // Where it stopped: "model", "import", "inputs", "build", "run", "compare" ("done" on a pass).
  std::string stage;
  std::string message;
  // For unsupported imports: the op types of the nodes the parser rejected.
  std::vector<std::string> failing_ops;
  std::optional<WorstElement> worst;
  // Graph inputs fed as constants holding the data set's values, because kiln needs their values
  // before run time (shape tensors such as Reshape's shape; Clip's bounds; Squeeze's axes).
  std::vector<std::string> frozen_inputs;
  int data_sets = 0;  // data sets that ran to the comparison
  double seconds = 0;
  std::vector<std::string> log;  // warnings and errors kiln logged during the test
};

struct RunOptions {
  DeviceType device = DeviceType::kCPU;
  int threads = 1;                     // kernel threads per test
  uint64_t memory_limit = 4ull << 30;  // address-space limit of a worker (0: none)
  int timeout_s = 0;                   // per-test limit (0: none)
  bool isolate = true;                 // false: run in this process (debugging; a crash ends the run)
  bool optimize = true;                // false: build with disable_optimizations (to blame a pass)
  bool freeze_inputs = true;           // false: never feed graph inputs as constants (see TestResult)
  double rtol = 1e-3;
  double atol = 1e-7;
};

// The folders `kiln conformance` runs by default, in report order.
inline const std::vector<std::string> kDefaultFolders = {"node", "pytorch-converted", "pytorch-operator", "simple"};
// The ONNX_TEST_DATA environment variable, else Debian's libonnx-testdata location.
std::string default_data_dir();

// Tests of `folders` under data_dir whose id matches `filter` (ECMAScript regex, searched; empty:
// all), sorted by id. Reads every model to fill model_ops/ops/excluded. Throws kiln::Error for a
// bad regex.
std::vector<TestCase> discover_tests(const std::string& data_dir, const std::vector<std::string>& folders,
                                     const std::string& filter);

// Runs one test (in a forked worker unless options.isolate is false). Never throws.
TestResult run_test(const TestCase& test, const RunOptions& options);

// ---- reports (conformance_report.cpp) -------------------------------------------------------------
struct Counts {
  std::map<Status, int> n;
  int total() const;
  void add(Status s) { ++n[s]; }
  int get(Status s) const {
    auto it = n.find(s);
    return it == n.end() ? 0 : it->second;
  }
};
// Counts by folder and by op type. A test counts once under each of its `ops`, except a test of
// a multi-op folder (not node/) that failed to import: it counts as unsupported under the op types
// the parser rejected only, since it says nothing about the others.
std::map<std::string, Counts> counts_by_folder(const std::vector<TestResult>& results);
std::map<std::string, Counts> counts_by_op(const std::vector<TestResult>& results);
// For each op type the parser rejected: in how many tests (the lead's to-do list).
std::map<std::string, int> rejected_op_counts(const std::vector<TestResult>& results);

// Plain-text tables for the terminal.
std::string format_folder_table(const std::map<std::string, Counts>& by_folder);
std::string format_op_table(const std::map<std::string, Counts>& by_op);
// One line: "node/test_abs: wrong: output 'y' ...".
std::string format_result_line(const TestResult& result);
// The worst element in words: "output 'y' [0,2]: 0.5 vs 0.25 (|diff| 0.25 > 2.5e-4; 3 of 12 elements)".
std::string describe_worst(const WorstElement& worst);

// TestResult <-> JSON (the worker's answer to the parent, and the --json file's "tests" entries).
nlohmann::json result_to_json(const TestResult& result);
// Fills the fields of `result` (whose `test` is already set) from JSON written by result_to_json.
void result_from_json(const nlohmann::json& j, TestResult& result);

// The full classification as JSON text.
std::string results_json(const std::vector<TestResult>& results, const std::string& data_dir,
                         const RunOptions& options);

// Passing lists: one test id per line, '#' comments and blank lines ignored.
std::vector<std::string> read_passing_list(const std::string& path);
void write_passing_list(const std::string& path, const std::vector<TestResult>& results, const std::string& header);

// Markdown: the importer registry's op table (with per-op conformance counts when results are
// given) and the full docs/onnx-support.md page.
std::string importer_table_markdown(const std::map<std::string, Counts>* by_op);
std::string support_doc_markdown(const std::vector<TestResult>& results, const std::string& data_dir);

}  // namespace kiln::conformance
