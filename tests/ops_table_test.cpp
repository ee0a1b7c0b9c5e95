// The CPU runners of the op test table (tests/op_table.h; the CUDA runner is cuda_ops_test.cpp):
//   - OpTable/OpTableCase.Reference/<family>_<case>: one test per case. A layer case: the CPU
//     reference kernel against the case's expected outputs (when it has them), and every other
//     CPU kernel but oneDNN's (fast, vectorized, ...) against the reference, with guard bytes,
//     NaN checks and the reference's determinism (tests/op_harness.h); the case's "require" and
//     "decline" entries for those kernels. A model case: kiln's ONNX importer and a CPU engine
//     against ONNX Runtime's outputs, and, when the model is one layer, that layer as above.
//   - OpTable.OnednnMatchesReference: every case whose layer type has a oneDNN tactic, through
//     that tactic against the reference; per-family passed/declined/failed counts.
//   - OpTable.EveryFamilyHasItsCases: no family's table shrinks unnoticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "src/backends/kernel.h"
#include "tests/op_harness.h"
#include "tests/op_table.h"

namespace kiln {
namespace {

using test::KernelResult;
using test::Outcome;
using test::TableCase;

// Every output: same count, type and dims; values within tolerance.
void expect_outputs(const std::vector<HostTensor>& got, const std::vector<HostTensor>& want, double rtol, double atol,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": output count";
  for (size_t k = 0; k < got.size(); ++k) {
    std::string message;
    EXPECT_TRUE(test::compare_tensors(got[k], want[k], rtol, atol, nullptr, &message))
        << what << ", output " << k << ": " << message;
  }
}

const KernelResult* find_result(const std::vector<KernelResult>& results, const std::string& tactic) {
  for (const auto& r : results) {
    if (r.tactic == tactic) return &r;
  }
  return nullptr;
}

// The case's "require" and "decline" entries for the CPU tactics `ran` covers.
void check_requirements(const TableCase& c, const std::vector<KernelResult>& results, bool onednn_run) {
  const auto covered = [&](const std::string& tactic) { return (tactic == "onednn") == onednn_run; };
  for (const std::string& req : c.require) {
    if (req.rfind("cpu:", 0) != 0) {
      ADD_FAILURE() << c.id() << ": \"require\" entry '" << req << "' is not cpu:<tactic>";
      continue;
    }
    const std::string tactic = req.substr(4);
    if (tactic == "*") {
      for (const auto& r : results) {
        EXPECT_EQ(r.outcome, Outcome::kPassed)
            << c.id() << ": every CPU kernel must take and pass it; " << r.tactic << ": " << r.message;
      }
      continue;
    }
    if (!covered(tactic)) continue;
    const KernelResult* r = find_result(results, tactic);
    if (!r) {
      ADD_FAILURE() << c.id() << ": no CPU kernel '" << tactic << "' is registered for " << c.op.layer_type;
      continue;
    }
    EXPECT_EQ(r->outcome, Outcome::kPassed)
        << c.id() << ": the " << tactic << " tactic must take and pass it: " << r->message << " (max abs err "
        << r->stats.max_abs << ", max rel err " << r->stats.max_rel << ")";
  }
  for (const auto& [key, why] : c.decline) {
    if (key.rfind("cpu:", 0) != 0) {
      ADD_FAILURE() << c.id() << ": \"decline\" entry '" << key << "' is not cpu:<tactic>";
      continue;
    }
    const std::string tactic = key.substr(4);
    if (!covered(tactic)) continue;
    const KernelResult* r = find_result(results, tactic);
    if (!r) {
      ADD_FAILURE() << c.id() << ": no CPU kernel '" << tactic << "' is registered";
      continue;
    }
    EXPECT_EQ(r->outcome, Outcome::kUnsupported)
        << c.id() << ": the " << tactic << " tactic must decline it (" << why << "): " << r->message;
  }
}

// A layer case on the CPU, oneDNN aside: the reference against `want`, the others against it.
void check_layer_on_cpu(const TableCase& c, const test::LayerCase& lc, const std::vector<HostTensor>& want) {
  const test::OpCase& op = lc.op;
  if (!want.empty()) {
    std::vector<HostTensor> ref, picked;
    try {
      ref = test::reference_outputs(op);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.id() << ": the reference kernel threw: " << e.what();
      return;
    }
    for (int k : lc.outputs) picked.push_back(ref.at(static_cast<size_t>(k)));
    expect_outputs(picked, want, c.rtol, c.atol, c.id() + ": the CPU reference against the expected outputs");
  }
  const auto results = test::run_op_case(op, DeviceType::kCPU, [](const std::string& t) { return t != "onednn"; });
  for (const auto& r : results) {
    if (r.tactic == "reference") {
      EXPECT_EQ(r.outcome, Outcome::kPassed) << c.id() << ": reference: " << r.message;
    } else {
      EXPECT_NE(r.outcome, Outcome::kFailed) << c.id() << ": " << r.tactic << ": " << r.message;
    }
  }
  check_requirements(c, results, false);
}

// The whole table; empty when a file is missing or malformed (EveryFamilyHasItsCases says why).
std::vector<TableCase> all_cases() {
  try {
    return test::load_op_table();
  } catch (const std::exception&) {
    return {};
  }
}

class OpTableCase : public ::testing::TestWithParam<TableCase> {};

TEST_P(OpTableCase, Reference) {
  const TableCase& c = GetParam();
  if (const std::string why = c.skip_reason("reference"); !why.empty()) GTEST_SKIP() << why;
  const std::vector<HostTensor> want = test::expected_outputs(c);
  if (!c.model) {
    check_layer_on_cpu(c, *test::lift(c), want);
    return;
  }
  // The whole model through the importer and a CPU engine.
  std::vector<HostTensor> got;
  try {
    got = test::run_model_case(c, DeviceType::kCPU);
  } catch (const std::exception& e) {
    FAIL() << c.id() << ": " << e.what();
  }
  expect_outputs(got, want, c.rtol, c.atol, c.id() + ": the CPU engine against ONNX Runtime");
  // A one-layer model: that layer's CPU kernels too.
  std::optional<test::LayerCase> lc;
  try {
    lc = test::lift(c);
  } catch (const std::exception& e) {
    FAIL() << c.id() << ": " << e.what();
  }
  if (lc) check_layer_on_cpu(c, *lc, want);
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTableCase, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<TableCase>& info) { return info.param.test_name(); });

TEST(OpTable, EveryFamilyHasItsCases) {
  // The counts when the table was made (issue 13); a family may grow, never shrink unnoticed.
  const std::map<std::string, size_t> kAtLeast = {
      {"bitwise", 11}, {"composite", 40}, {"conv", 127},  {"data", 166},         {"data_dependent", 13},
      {"einsum", 25},  {"indexing", 96},  {"math", 380},  {"normalization", 41}, {"quantize", 31},
      {"rnn", 21},     {"sampling", 36},  {"scatter", 21}};
  for (const auto& family : test::op_families()) {
    ASSERT_TRUE(kAtLeast.count(family)) << family;
    EXPECT_GE(test::load_op_table(family).size(), kAtLeast.at(family))
        << "tests/data/" << family << "/cases.json lost cases";
  }
}

// ---- oneDNN ---------------------------------------------------------------------------------------

TEST(OpTable, OnednnMatchesReference) {
  bool any = false;
  for (const char* type : {kLayerConvolution, kLayerDeconvolution, kLayerPooling, kLayerMatrixMultiply, kLayerGemm}) {
    any = any || KernelRegistry::instance().find(DeviceType::kCPU, type, "onednn") != nullptr;
  }
  if (!any) GTEST_SKIP() << "kiln was built without oneDNN";
  std::map<std::string, test::Tally> tallies;
  std::ostringstream failures, declined;
  int no_kernel = 0, not_one_layer = 0;
  for (const TableCase& c : all_cases()) {
    std::optional<test::LayerCase> lc;
    try {
      lc = test::lift(c);
    } catch (const std::exception&) {
      ++not_one_layer;  // the reference runner reports models that do not import
      continue;
    }
    if (!lc) {
      ++not_one_layer;
      continue;
    }
    const test::OpCase* op = &lc->op;
    if (!KernelRegistry::instance().find(DeviceType::kCPU, op->layer_type, "onednn")) {
      ++no_kernel;
      continue;
    }
    test::Tally& t = tallies[c.family];
    ++t.cases;
    if (const std::string why = c.skip_reason("onednn"); !why.empty()) {
      ++t.declined;
      declined << "  " << c.id() << ": skipped: " << why << "\n";
      continue;
    }
    std::vector<KernelResult> results;
    try {
      results = test::run_op_case(*op, DeviceType::kCPU, [](const std::string& tactic) { return tactic == "onednn"; });
    } catch (const std::exception& e) {
      ++t.failed;
      failures << "  " << c.id() << ": the case could not be set up: " << e.what() << "\n";
      continue;
    }
    const KernelResult* r = find_result(results, "onednn");
    const KernelResult* ref = find_result(results, "reference");
    if (ref && ref->outcome == Outcome::kFailed) {
      ++t.failed;
      failures << "  " << c.id() << ": reference: " << ref->message << "\n";
      continue;
    }
    if (!r || r->outcome == Outcome::kUnsupported) {
      ++t.declined;
      const auto it = c.decline.find("cpu:onednn");
      declined << "  " << c.id() << ": supports() declines it" << (it != c.decline.end() ? " (" + it->second + ")" : "")
               << "\n";
    } else if (r->outcome == Outcome::kPassed) {
      ++t.passed;
    } else {
      ++t.failed;
      failures << "  " << c.id() << " [" << op->layer_type << "]: " << r->message << "\n";
    }
    check_requirements(c, results, true);
  }
  test::print_tallies(std::cout, "onednn", tallies);
  std::cout << "[op table] onednn: " << no_kernel << " cases of layer types without a oneDNN tactic, " << not_one_layer
            << " model cases that are not one layer (their CPU engines choose oneDNN where it applies)\n";
  if (!declined.str().empty()) std::cout << "[op table] onednn declined:\n" << declined.str();
  int passed = 0, failed = 0;
  for (const auto& [family, t] : tallies) {
    passed += t.passed;
    failed += t.failed;
  }
  EXPECT_EQ(failed, 0) << failures.str();
  EXPECT_GE(passed, 100) << "the table's oneDNN cases are missing";
}

}  // namespace
}  // namespace kiln
