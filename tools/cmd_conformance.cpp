// `kiln conformance`: runs ONNX's backend tests (model.onnx + test_data_set_*/*.pb folders)
// through kiln and classifies each one (pass, wrong, unsupported, excluded, crash; see
// conformance.h), prints counts per folder and per op, writes the full classification as JSON,
// and checks or updates a list of tests that must pass (the ctest onnx_conformance_cpu). With
// --list-ops it prints the importer registry's op table instead; --write-doc writes
// docs/onnx-support.md from the registry and the run.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common.h"
#include "conformance.h"
#include "kiln/error.h"
#include "core/text.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using conformance::Status;
using conformance::TestResult;

// ctest's conventional "skipped" exit code (SKIP_RETURN_CODE in tests/CMakeLists.txt).
constexpr int kExitSkipped = 77;

struct ConformanceOptions {
  std::string data_dir;
  std::vector<std::string> folders = conformance::kDefaultFolders;
  std::string filter;
  std::string device = "cpu";
  int threads = 1;
  std::string json;
  std::string passing_list;
  bool update_passing_list = false;
  std::string write_doc;
  bool list_ops = false;
  bool verbose = false;
  bool skip_missing_data = false;
  bool no_isolate = false;
  bool no_optimize = false;
  bool no_freeze_inputs = false;
  std::string memory_limit;  // empty: 4G on the CPU, none on CUDA
  int timeout = 0;
};

const char* kPassingListHeader =
    "# ONNX backend tests that pass on the CPU: the ctest onnx_conformance_cpu fails when one of them\n"
    "# stops passing. Regenerate with:\n"
    "#   kiln conformance --passing-list tests/conformance/passing_cpu.txt --update-passing-list\n";

// Checks the run against the passing list; returns the number of listed tests that ran and did
// not pass. Prints those (with their messages) and the tests that pass but are not listed.
int check_passing_list(const std::vector<std::string>& listed, const std::vector<TestResult>& results,
                       const std::string& path) {
  std::set<std::string> expected(listed.begin(), listed.end());
  int regressions = 0;
  std::vector<std::string> newly;
  for (const auto& r : results) {
    const bool is_listed = expected.count(r.test.id()) > 0;
    if (is_listed && r.status != Status::kPass) {
      if (regressions++ == 0) std::cout << "\nlisted in " << path << " but not passing:\n";
      std::cout << "  " << conformance::format_result_line(r) << "\n";
    }
    if (!is_listed && r.status == Status::kPass) newly.push_back(r.test.id());
  }
  std::set<std::string> ran;
  for (const auto& r : results) ran.insert(r.test.id());
  int not_run = 0;
  for (const auto& id : expected) not_run += ran.count(id) ? 0 : 1;
  if (not_run > 0) {
    std::cout << "\n" << not_run << " test(s) of " << path << " did not run (filtered out or not in the data)\n";
  }
  if (!newly.empty()) {
    std::cout << "\n"
              << newly.size() << " test(s) pass but are not in " << path << " (add them with --update-passing-list):\n";
    for (const auto& id : newly) std::cout << "  " << id << "\n";
  }
  return regressions;
}

// The passing list after this run: tests that ran are listed when they passed; tests the filter
// left out keep their entry.
std::vector<TestResult> merged_for_update(const std::vector<std::string>& listed,
                                          const std::vector<TestResult>& results) {
  std::set<std::string> ran;
  for (const auto& r : results) ran.insert(r.test.id());
  std::vector<TestResult> merged = results;
  for (const auto& id : listed) {
    if (ran.count(id)) continue;
    TestResult kept;
    const size_t slash = id.find('/');
    kept.test.folder = slash == std::string::npos ? "" : id.substr(0, slash);
    kept.test.name = slash == std::string::npos ? id : id.substr(slash + 1);
    kept.status = Status::kPass;
    merged.push_back(kept);
  }
  return merged;
}

int run_conformance(const ConformanceOptions& o) {
  if (o.list_ops) {
    std::cout << conformance::importer_table_markdown(nullptr);
    return kExitOk;
  }
  if (o.update_passing_list && o.passing_list.empty())
    throw UsageError("--update-passing-list needs --passing-list FILE");
  const std::string data_dir = o.data_dir.empty() ? conformance::default_data_dir() : o.data_dir;
  std::error_code ec;
  if (!fs::is_directory(data_dir, ec)) {
    if (o.skip_missing_data) {
      std::cout << "no ONNX backend test data at '" << data_dir
                << "' (install libonnx-testdata or set ONNX_TEST_DATA); "
                << "skipping\n";
      return kExitSkipped;
    }
    throw Error("no ONNX backend test data at '" + data_dir +
                "': install libonnx-testdata, or give the folder with --data-dir (or ONNX_TEST_DATA)");
  }
  conformance::RunOptions run;
  run.device = parse_device_type(o.device);
  run.threads = o.threads;
  // CUDA reserves far more address space than it uses, so an address-space limit would stop the
  // worker from creating its CUDA context; the default limit applies to the CPU only.
  const std::string limit = o.memory_limit.empty() ? (run.device == DeviceType::kCPU ? "4G" : "0") : o.memory_limit;
  run.memory_limit = limit == "0" ? 0 : parse_byte_size(limit, "--memory-limit");
  run.timeout_s = o.timeout;
  run.isolate = !o.no_isolate;
  run.optimize = !o.no_optimize;
  run.freeze_inputs = !o.no_freeze_inputs;

  const auto tests = conformance::discover_tests(data_dir, o.folders, o.filter);
  if (tests.empty())
    throw Error("no tests under " + quote(data_dir) + " match" +
                (o.filter.empty() ? "" : " --filter " + quote(o.filter)));
  std::cout << "running " << tests.size() << " ONNX backend tests from " << data_dir << " on " << to_string(run.device)
            << "\n";
  std::vector<TestResult> results;
  results.reserve(tests.size());
  for (const auto& test : tests) {
    results.push_back(conformance::run_test(test, run));
    const TestResult& r = results.back();
    if (o.verbose || r.status == Status::kCrash) {
      std::cout << conformance::format_result_line(r) << "\n";
      if (o.verbose) {
        for (const auto& line : r.log) std::cout << "    " << line << "\n";
      }
      std::cout.flush();
    }
  }

  std::cout << "\nby folder:\n" << conformance::format_folder_table(conformance::counts_by_folder(results));
  std::cout << "\nby op (a test counts under the op it is named after; model tests under each op they use):\n"
            << conformance::format_op_table(conformance::counts_by_op(results));
  const auto rejected = conformance::rejected_op_counts(results);
  if (!rejected.empty()) {
    std::vector<std::pair<int, std::string>> order;
    for (const auto& [op, n] : rejected) order.emplace_back(-n, op);
    std::sort(order.begin(), order.end());
    std::cout << "\nop types the importer rejected, by tests affected:";
    for (const auto& [n, op] : order) std::cout << " " << op << " (" << -n << ")";
    std::cout << "\n";
  }

  if (!o.json.empty()) {
    const std::string text = conformance::results_json(results, data_dir, run);
    write_file_bytes(o.json, std::vector<uint8_t>(text.begin(), text.end()), "--json file");
    std::cout << "\nwrote the classification of every test to " << o.json << "\n";
  }
  if (!o.write_doc.empty()) {
    const std::string text = conformance::support_doc_markdown(results, data_dir);
    write_file_bytes(o.write_doc, std::vector<uint8_t>(text.begin(), text.end()), "--write-doc file");
    std::cout << "wrote " << o.write_doc << "\n";
  }
  if (o.passing_list.empty()) return kExitOk;

  std::vector<std::string> listed;
  if (fs::exists(o.passing_list, ec) || !o.update_passing_list) listed = conformance::read_passing_list(o.passing_list);
  const int regressions = check_passing_list(listed, results, o.passing_list);
  if (o.update_passing_list) {
    conformance::write_passing_list(o.passing_list, merged_for_update(listed, results), kPassingListHeader);
    std::cout << "updated " << o.passing_list << "\n";
    return kExitOk;
  }
  if (regressions > 0) {
    throw Error(std::to_string(regressions) + " test(s) of the passing list " + o.passing_list +
                " no longer pass (listed above)");
  }
  std::cout << "every test of " << o.passing_list << " that ran passes\n";
  return kExitOk;
}

}  // namespace

void setup_conformance_command(CLI::App& parent, std::function<int()>& run) {
  auto o = std::make_shared<ConformanceOptions>();
  CLI::App* sub = parent.add_subcommand(
      "conformance",
      "Run ONNX's backend tests through kiln. Each test folder (model.onnx and test_data_set_*) is imported, built "
      "for the shapes of its inputs and run; every output is compared with rtol 1e-3, atol 1e-7. Tests are classified "
      "pass, wrong, unsupported, excluded (non-tensor I/O, training or random ops) or crash; each runs in its own "
      "memory-limited process. Graph inputs whose values kiln needs before run time (shape tensors such as "
      "Reshape's shape, Clip's bounds, Squeeze's axes) are fed as constants holding each data set's values, as a "
      "TensorRT profile gives shape-tensor values. Prints counts per folder and per op; --passing-list checks that "
      "the listed tests still pass.");
  sub->add_option("--data-dir", o->data_dir,
                  "ONNX backend test data (default: $ONNX_TEST_DATA, else /usr/include/onnx/backend/test/data)");
  sub->add_option("--folders", o->folders, "Sub-folders to run")->delimiter(',')->capture_default_str();
  sub->add_option("--filter", o->filter, "Only tests whose id (folder/test_name) matches this regular expression");
  sub->add_option("--device", o->device, "Device to build for")
      ->check(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))
      ->capture_default_str();
  add_threads_option(*sub, o->threads, "Kernel threads per test");
  sub->add_option("--json", o->json, "Write the classification of every test (with messages and worst elements) here");
  sub->add_option("--passing-list", o->passing_list,
                  "File of test ids that must pass; fails naming each listed test that does not");
  sub->add_flag("--update-passing-list", o->update_passing_list,
                "Rewrite --passing-list with the tests that pass now (tests the filter skips keep their entry)");
  sub->add_option("--write-doc", o->write_doc, "Write the ONNX support page (docs/onnx-support.md) from this run");
  sub->add_flag("--list-ops", o->list_ops, "Print the importer registry's op table (markdown) and exit");
  add_byte_size_option(*sub, "--memory-limit", o->memory_limit,
                       "Address-space limit of each test's process (0: none; default 4G on the CPU, none on CUDA)");
  sub->add_option("--timeout", o->timeout, "Seconds a test may run before it counts as a crash (0: no limit)")
      ->check(CLI::Range(0, 86400));
  sub->add_flag("--no-isolate", o->no_isolate, "Run tests in this process (for a debugger; a crash ends the run)");
  sub->add_flag("--no-optimize", o->no_optimize,
                "Build without the optimization passes (to tell pass bugs from kernel bugs)");
  sub->add_flag("--no-freeze-inputs", o->no_freeze_inputs,
                "Never feed graph inputs as constants: tests whose shape tensors are graph inputs fail to build");
  sub->add_flag("--skip-missing-data", o->skip_missing_data, "Exit with 77 (skipped) when the test data is absent");
  sub->add_flag("-v,--verbose", o->verbose, "Print every test's result and kiln's warnings");
  sub->footer(
      "Examples:\n"
      "  kiln conformance\n"
      "  kiln conformance --filter 'node/test_(add|sub)' --verbose\n"
      "  kiln conformance --json conformance.json --passing-list tests/conformance/passing_cpu.txt\n"
      "  kiln conformance --list-ops");
  sub->callback([o, &run] { run = [o] { return run_conformance(*o); }; });
}

}  // namespace kiln::cli
