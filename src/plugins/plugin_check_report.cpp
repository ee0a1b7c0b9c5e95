// The text side of the plugin checker (see plugin_check.h): the report's pass/fail table and
// summary, and plugin fields as text (`--fields k=v,...` parsing, typed by the creator's schema,
// and printing with the shortest round-trip form of each number).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <string>

#include "kiln/error.h"
#include "src/plugins/plugin_calls.h"
#include "src/plugins/plugin_check.h"
#include "src/core/text.h"

namespace kiln {

const char* to_string(CheckStatus status) {
  static const char* const kNames[] = {"PASS", "FAIL", "SKIP"};
  return kNames[static_cast<int>(status)];
}

bool PluginCheckReport::passed() const {
  return std::none_of(checks.begin(), checks.end(),
                      [](const PluginCheckResult& c) { return c.status == CheckStatus::kFail; });
}

const PluginCheckResult* PluginCheckReport::find(const std::string& prefix) const {
  for (const auto& c : checks) {
    if (c.name.rfind(prefix, 0) == 0) return &c;
  }
  return nullptr;
}

std::string PluginCheckReport::failures() const {
  std::string s;
  for (const auto& c : checks) {
    if (c.status == CheckStatus::kFail) s += c.name + ": " + c.message + "\n";
  }
  return s;
}

namespace {

// Shortest text that reads back to the same value ("0.001", not "0.00100000005").
template <typename T>
std::string join_values(const std::vector<T>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, v[i]).ptr;
    s += (i ? "," : "") + std::string(buf, end);
  }
  return s;
}

double parse_number(const std::string& text, const std::string& field) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {}
  throw Error("--fields: field " + quote(field) + " needs numbers, got " + quote(text));
}

}  // namespace

std::string plugin_fields_to_string(const PluginFieldCollection& fields) {
  std::string s;
  for (const PluginField& f : fields.all()) {
    s += (s.empty() ? "" : ", ") + f.name + "=";
    switch (f.type) {
      case PluginFieldType::kFloat32:
        s += join_values(f.f32);
        break;
      case PluginFieldType::kFloat64:
        s += join_values(f.f64);
        break;
      case PluginFieldType::kInt32:
        s += join_values(f.i32);
        break;
      case PluginFieldType::kInt64:
        s += join_values(f.i64);
        break;
      case PluginFieldType::kString:
        s += f.str;
        break;
      case PluginFieldType::kTensor:
        s += "<tensor " + std::string(to_string(f.tensor.type())) + " " + f.tensor.dims().to_string() + ">";
        break;
    }
  }
  return s;
}

PluginFieldCollection parse_plugin_fields(const std::string& text, const PluginCreator& creator) {
  // "a=1,2,b=x": a piece without '=' continues the previous field's value.
  std::vector<std::pair<std::string, std::string>> items;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = text.find(',', start);
    const std::string piece = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = piece.find('=');
    if (eq != std::string::npos) {
      items.emplace_back(piece.substr(0, eq), piece.substr(eq + 1));
    } else if (!items.empty()) {
      items.back().second += "," + piece;
    } else {
      throw Error("--fields: expected NAME=VALUE, got " + quote(piece));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const auto schema = creator_field_schema(creator, "--fields");
  PluginFieldCollection fields;
  for (const auto& item : items) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::string& name = item.first;
    const std::string& value = item.second;
    const auto spec =
        std::find_if(schema.begin(), schema.end(), [&](const PluginFieldSpec& s) { return s.name == name; });
    if (spec == schema.end()) {
      std::string names;
      for (const auto& s : schema) names += (names.empty() ? "" : ", ") + s.name;
      throw Error("--fields: plugin " + quote(creator_identity(creator).name) + " has no field " + quote(name) +
                  " (its fields: " + (names.empty() ? "none" : names) + ")");
    }
    std::vector<double> numbers;
    if (spec->type != PluginFieldType::kString && spec->type != PluginFieldType::kTensor) {
      size_t p = 0;
      while (true) {
        const size_t comma = value.find(',', p);
        numbers.push_back(
            parse_number(value.substr(p, comma == std::string::npos ? std::string::npos : comma - p), name));
        if (comma == std::string::npos) break;
        p = comma + 1;
      }
    }
    PluginField f;
    switch (spec->type) {
      case PluginFieldType::kFloat32:
        f = PluginField::float32(name, {numbers.begin(), numbers.end()});
        break;
      case PluginFieldType::kFloat64:
        f = PluginField::float64(name, numbers);
        break;
      case PluginFieldType::kInt32:
      case PluginFieldType::kInt64: {
        std::vector<int64_t> ints;
        for (const double d : numbers) {
          if (d != std::floor(d)) throw Error("--fields: field " + quote(name) + " needs integers, got " + value);
          ints.push_back(static_cast<int64_t>(d));
        }
        f = spec->type == PluginFieldType::kInt64 ? PluginField::int64(name, ints)
                                                  : PluginField::int32(name, {ints.begin(), ints.end()});
        break;
      }
      case PluginFieldType::kString:
        f = PluginField::string(name, value);
        break;
      case PluginFieldType::kTensor:
        throw Error("--fields: field " + quote(name) +
                    " is a tensor; tensor fields cannot be given on the command line");
    }
    fields.add(std::move(f));
  }
  return fields;
}

void print_plugin_check_report(const PluginCheckReport& report, std::ostream& out) {
  out << "plugin " << report.plugin << " from "
      << (report.library.empty() ? "this program (built in or linked in)" : quote(report.library)) << ", checked on "
      << to_string(report.device) << "\n";
  out << "fields: " << (report.fields.empty() ? "(none)" : report.fields) << "; inputs: " << report.num_inputs
      << ", outputs: " << report.num_outputs << "\n\n";
  size_t width = 5;
  for (const auto& c : report.checks) width = std::max(width, c.name.size());
  out << std::left << std::setw(static_cast<int>(width) + 2) << "CHECK"
      << "RESULT  DETAILS\n";
  int counts[3] = {0, 0, 0};
  for (const auto& c : report.checks) {
    ++counts[static_cast<int>(c.status)];
    out << std::left << std::setw(static_cast<int>(width) + 2) << c.name << std::setw(8) << to_string(c.status)
        << c.message << "\n";
  }
  out << "\n"
      << counts[0] << " passed, " << counts[1] << " failed, " << counts[2]
      << " skipped: " << (report.passed() ? "PASSED" : "FAILED") << "\n";
}

}  // namespace kiln
