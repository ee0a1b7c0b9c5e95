// Reports of the conformance runner (see conformance.h): counts by folder and by op, the
// terminal tables, the JSON classification, passing lists, and the markdown of the importer
// registry's op table and of docs/onnx-support.md. Everything here is a pure function of the
// results, so the same run always gives the same text.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common.h"
#include "conformance.h"
#include "kiln/error.h"
#include "onnx/onnx_importer_info.h"
#include "core/text.h"

namespace kiln::conformance {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

Status parse_status(const std::string& s) {
  for (Status st : kAllStatuses) {
    if (s == to_string(st)) return st;
  }
  throw Error("unknown conformance status " + quote(s));
}

std::string pad(const std::string& s, size_t width, bool left = true) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::string counts_row(const std::string& label, const Counts& c, size_t label_width) {
  std::string row = pad(label, label_width) + pad(std::to_string(c.total()), 7, false);
  for (Status s : kAllStatuses) row += pad(std::to_string(c.get(s)), 13, false);
  return row + "\n";
}

std::string counts_header(const std::string& label, size_t label_width) {
  std::string row = pad(label, label_width) + pad("total", 7, false);
  for (Status s : kAllStatuses) row += pad(to_string(s), 13, false);
  return row + "\n";
}

nlohmann::json counts_json(const Counts& c) {
  nlohmann::json j;
  j["total"] = c.total();
  for (Status s : kAllStatuses) j[to_string(s)] = c.get(s);
  return j;
}

// Folder order: the default folders first, then any other in name order.
std::vector<std::string> folder_order(const std::map<std::string, Counts>& by_folder) {
  std::vector<std::string> order;
  for (const auto& f : kDefaultFolders) {
    if (by_folder.count(f)) order.push_back(f);
  }
  for (const auto& [f, c] : by_folder) {
    if (std::find(order.begin(), order.end(), f) == order.end()) order.push_back(f);
  }
  return order;
}

std::string opset_range(const OnnxImporterInfo& info) {
  if (info.max_opset == 0) return std::to_string(info.min_opset) + "+";
  if (info.max_opset == info.min_opset) return std::to_string(info.min_opset);
  return std::to_string(info.min_opset) + "-" + std::to_string(info.max_opset);
}

// Markdown table cells must not contain '|' or newlines.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out.empty() ? " " : out;
}

}  // namespace

int Counts::total() const {
  int t = 0;
  for (const auto& [s, k] : n) t += k;
  return t;
}

std::map<std::string, Counts> counts_by_folder(const std::vector<TestResult>& results) {
  std::map<std::string, Counts> by;
  for (const auto& r : results) by[r.test.folder].add(r.status);
  return by;
}

std::map<std::string, Counts> counts_by_op(const std::vector<TestResult>& results) {
  std::map<std::string, Counts> by;
  for (const auto& r : results) {
    const bool rejected_only = r.test.folder != "node" && r.status == Status::kUnsupported && !r.failing_ops.empty();
    for (const auto& op : rejected_only ? r.failing_ops : r.test.ops) by[op].add(r.status);
  }
  return by;
}

std::map<std::string, int> rejected_op_counts(const std::vector<TestResult>& results) {
  std::map<std::string, int> by;
  for (const auto& r : results) {
    for (const auto& op : r.failing_ops) ++by[op];
  }
  return by;
}

std::string format_folder_table(const std::map<std::string, Counts>& by_folder) {
  std::string out = counts_header("folder", 20);
  Counts all;
  for (const auto& f : folder_order(by_folder)) {
    const Counts& c = by_folder.at(f);
    out += counts_row(f, c, 20);
    for (const auto& [s, k] : c.n) all.n[s] += k;
  }
  return out + counts_row("all", all, 20);
}

std::string format_op_table(const std::map<std::string, Counts>& by_op) {
  size_t width = 10;
  for (const auto& [op, c] : by_op) width = std::max(width, op.size() + 2);
  std::string out = counts_header("op", width);
  for (const auto& [op, c] : by_op) out += counts_row(op, c, width);
  return out;
}

std::string describe_worst(const WorstElement& w) {
  std::vector<std::string> idx;
  for (int64_t i : w.index) idx.push_back(std::to_string(i));
  return "output " + quote(w.output) + " [" + join(idx, ",") + "]: " + num(w.actual) + " vs expected " +
         num(w.expected) + " (|diff| " + num(w.abs_err) + " > " + num(w.allowed) + "; " + std::to_string(w.violations) +
         " of " + std::to_string(w.count) + " elements off)";
}

std::string format_result_line(const TestResult& r) {
  std::string line = r.test.id() + ": " + to_string(r.status);
  if (r.status != Status::kPass && !r.message.empty()) {
    std::string msg = r.message;
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    if (r.status == Status::kUnsupported && !r.stage.empty()) line += " [" + r.stage + "]";
    line += ": " + msg;
  }
  if (!r.frozen_inputs.empty()) line += " (inputs fed as constants: " + join(r.frozen_inputs, ", ") + ")";
  return line;
}

nlohmann::json result_to_json(const TestResult& r) {
  nlohmann::json j;
  j["id"] = r.test.id();
  j["folder"] = r.test.folder;
  j["name"] = r.test.name;
  j["status"] = to_string(r.status);
  j["stage"] = r.stage;
  j["message"] = r.message;
  j["ops"] = r.test.ops;
  j["model_ops"] = r.test.model_ops;
  if (!r.failing_ops.empty()) j["failing_ops"] = r.failing_ops;
  if (!r.frozen_inputs.empty()) j["frozen_inputs"] = r.frozen_inputs;
  if (r.worst) {
    const WorstElement& w = *r.worst;
    j["worst"] = {{"output", w.output},   {"data_set", w.data_set},     {"index", w.index},
                  {"actual", w.actual},   {"expected", w.expected},     {"abs_err", w.abs_err},
                  {"allowed", w.allowed}, {"violations", w.violations}, {"count", w.count}};
  }
  j["data_sets"] = r.data_sets;
  j["seconds"] = r.seconds;
  if (!r.log.empty()) j["log"] = r.log;
  return j;
}

void result_from_json(const nlohmann::json& j, TestResult& r) {
  r.status = parse_status(j.at("status").get<std::string>());
  r.stage = j.value("stage", std::string());
  r.message = j.value("message", std::string());
  r.failing_ops = j.value("failing_ops", std::vector<std::string>{});
  r.frozen_inputs = j.value("frozen_inputs", std::vector<std::string>{});
  r.data_sets = j.value("data_sets", 0);
  r.seconds = j.value("seconds", 0.0);
  r.log = j.value("log", std::vector<std::string>{});
  if (j.contains("worst")) {
    const auto& w = j.at("worst");
    WorstElement worst;
    worst.output = w.value("output", std::string());
    worst.data_set = w.value("data_set", 0);
    worst.index = w.value("index", std::vector<int64_t>{});
    // NaN and infinity travel as JSON null.
    auto number = [&](const char* key) {
      return w.contains(key) && w.at(key).is_number() ? w.at(key).get<double>() : NAN;
    };
    worst.actual = number("actual");
    worst.expected = number("expected");
    worst.abs_err = w.contains("abs_err") && w.at("abs_err").is_number() ? w.at("abs_err").get<double>() : INFINITY;
    worst.allowed = number("allowed");
    worst.violations = w.value("violations", int64_t{0});
    worst.count = w.value("count", int64_t{0});
    r.worst = worst;
  }
}

std::string results_json(const std::vector<TestResult>& results, const std::string& data_dir, const RunOptions& o) {
  nlohmann::json j;
  j["data_dir"] = data_dir;
  j["device"] = to_string(o.device);
  j["rtol"] = o.rtol;
  j["atol"] = o.atol;
  const auto by_folder = counts_by_folder(results);
  Counts all;
  for (const auto& [f, c] : by_folder) {
    j["folders"][f] = counts_json(c);
    for (const auto& [s, k] : c.n) all.n[s] += k;
  }
  j["all"] = counts_json(all);
  for (const auto& [op, c] : counts_by_op(results)) j["ops"][op] = counts_json(c);
  j["rejected_ops"] = rejected_op_counts(results);
  j["tests"] = nlohmann::json::array();
  for (const auto& r : results) j["tests"].push_back(result_to_json(r));
  return j.dump(1);
}

std::vector<std::string> read_passing_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open passing list " + quote(path));
  std::vector<std::string> ids;
  std::string line;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    if (start < line.size()) ids.push_back(line.substr(start));
  }
  return ids;
}

void write_passing_list(const std::string& path, const std::vector<TestResult>& results, const std::string& header) {
  std::vector<std::string> ids;
  for (const auto& r : results) {
    if (r.status == Status::kPass) ids.push_back(r.test.id());
  }
  std::sort(ids.begin(), ids.end());
  std::string text = header;
  for (const auto& id : ids) text += id + "\n";
  cli::write_file_bytes(path, std::vector<uint8_t>(text.begin(), text.end()), "passing list");
}

std::string importer_table_markdown(const std::map<std::string, Counts>* by_op) {
  std::ostringstream out;
  out << "| op | domain | opsets | types | notes |" << (by_op ? " backend tests: pass / total |" : "") << "\n";
  out << "| --- | --- | --- | --- | --- |" << (by_op ? " --- |" : "") << "\n";
  for (const auto& entry : list_onnx_importers()) {
    out << "| " << entry.op_type << " | " << (entry.domain.empty() ? "ai.onnx" : entry.domain) << " | "
        << opset_range(entry.info) << " | " << cell(entry.info.types) << " | " << cell(entry.info.notes) << " |";
    if (by_op) {
      auto it = entry.domain.empty() ? by_op->find(entry.op_type) : by_op->end();
      if (it == by_op->end() || it->second.total() == 0) {
        out << " — |";
      } else {
        const Counts& c = it->second;
        out << " " << c.get(Status::kPass) << " / " << c.total() - c.get(Status::kExcluded) << " |";
      }
    }
    out << "\n";
  }
  return out.str();
}

std::string support_doc_markdown(const std::vector<TestResult>& results, const std::string& data_dir) {
  const auto by_folder = counts_by_folder(results);
  const auto by_op = counts_by_op(results);
  int frozen = 0;
  for (const auto& r : results) frozen += r.frozen_inputs.empty() ? 0 : 1;
  std::ostringstream out;
  out << "# ONNX operator support\n\n"
      << "<!-- Generated by `kiln conformance --write-doc docs/onnx-support.md`; do not edit by hand. The op table\n"
      << "     comes from the importer registry (the OnnxImporterInfo next to each KILN_REGISTER_ONNX_IMPORTER in\n"
      << "     src/onnx/ops_*.cpp); the counts come from running ONNX's backend tests on the CPU. -->\n\n"
      << "kiln imports the ONNX ops below (default domain `ai.onnx`; other domains go through plugins, see\n"
      << "docs/writing-a-plugin.md). *Opsets* is the range of op versions whose spelling the importer handles\n"
      << "(`N+`: every version from N up to the newest kiln knows); *types* are the element types the CPU\n"
      << "backend runs; *notes* name the attributes and variants that are rejected at import with a message.\n"
      << "`kiln conformance --list-ops` prints this table; `kiln inspect --onnx model.onnx` lists the nodes of\n"
      << "a model that kiln cannot import.\n\n"
      << "## Backend-test conformance (CPU)\n\n"
      << "`kiln conformance` runs every test of ONNX's backend test data (the `libonnx-testdata` package, ONNX "
      << "1.12,\nopsets up to 17) through the parser, builder and CPU runtime, and compares every output with "
      << "rtol 1e-3,\natol 1e-7 (NaN equals NaN). *excluded* tests are out of scope: non-tensor inputs or outputs "
      << "(sequences,\nmaps, optionals), training ops and random-number ops. `tests/conformance/passing_cpu.txt` "
      << "lists the\npassing tests; the ctest `onnx_conformance_cpu` fails when one of them stops passing. Graph "
      << "inputs whose\nvalues kiln needs before run time (shape tensors such as Reshape's shape or Slice's starts, "
      << "Clip's bounds,\nSqueeze's axes) are fed as constants holding each data set's values, the way a TensorRT "
      << "profile gives\nshape-tensor values; " << frozen << " of the tests below ran that way (`frozen_inputs` in "
      << "the JSON).\n\n"
      << "    kiln conformance [--filter REGEX] [--verbose] [--json FILE]     # run, print counts per folder and op\n"
      << "    kiln conformance --passing-list tests/conformance/passing_cpu.txt [--update-passing-list]\n"
      << "    kiln conformance --write-doc docs/onnx-support.md                # regenerate this page\n\n"
      << "| folder | total | pass | wrong | unsupported | excluded | crash |\n"
      << "| --- | --- | --- | --- | --- | --- | --- |\n";
  Counts all;
  for (const auto& f : folder_order(by_folder)) {
    const Counts& c = by_folder.at(f);
    out << "| " << f << " | " << c.total();
    for (Status s : kAllStatuses) out << " | " << c.get(s);
    out << " |\n";
    for (const auto& [s, k] : c.n) all.n[s] += k;
  }
  out << "| **all** | " << all.total();
  for (Status s : kAllStatuses) out << " | " << all.get(s);
  out << " |\n\n";
  out << "## Imported ops\n\n"
      << "The last column counts the backend tests about the op (for `node/` tests the op the test is named "
      << "after;\nfor the model folders every op of the model), excluded tests left out.\n\n";
  out << importer_table_markdown(&by_op) << "\n";

  // Ops the test data uses that no importer handles, by how many tests they block.
  std::vector<std::pair<int, std::string>> missing;
  for (const auto& [op, n] : rejected_op_counts(results)) {
    if (!has_onnx_importer("", op)) missing.emplace_back(n, op);
  }
  std::sort(missing.begin(), missing.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  out << "## Ops of the backend tests without an importer\n\n";
  if (missing.empty()) {
    out << "None.\n";
  } else {
    std::vector<std::string> items;
    for (const auto& [n, op] : missing) items.push_back(op + " (" + std::to_string(n) + ")");
    out << "By the number of tests they block: " << join(items, ", ") << ".\n";
  }
  (void)data_dir;
  return out.str();
}

}  // namespace kiln::conformance
