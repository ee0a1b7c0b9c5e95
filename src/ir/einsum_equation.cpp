// Parsing of einsum equations into an EinsumPlan (see einsum_equation.h for the rules).
#include "src/ir/einsum_equation.h"

#include <algorithm>
#include <map>

#include "kiln/error.h"
#include "src/core/text.h"

namespace kiln {
namespace {

EinsumTerm parse_term(const std::string& text, const std::string& equation) {
  EinsumTerm t;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t.letters.push_back(c);
    } else if (c == '.' && text.compare(i, 3, "...") == 0) {
      if (t.ellipsis_at >= 0)
        throw Error("einsum equation " + quote(equation) + ": term " + quote(text) + " has two '...'");
      t.ellipsis_at = static_cast<int>(t.letters.size());
      i += 2;
    } else {
      throw Error("einsum equation " + quote(equation) + ": unexpected character " + quote(std::string(1, c)) +
                  " in term '" + text + "' (use letters, '...', ',' and '->')");
    }
  }
  return t;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == sep)
      parts.emplace_back();
    else
      parts.back().push_back(c);
  }
  return parts;
}

// A term as written (without spaces), for messages.
std::string term_text(const EinsumTerm& t) {
  if (t.ellipsis_at < 0) return t.letters;
  return t.letters.substr(0, static_cast<size_t>(t.ellipsis_at)) + "..." +
         t.letters.substr(static_cast<size_t>(t.ellipsis_at));
}

}  // namespace

EinsumEquation parse_einsum_equation(const std::string& equation) {
  EinsumEquation e;
  e.text = equation;
  std::string eq;
  for (char c : equation) {
    if (c != ' ') eq.push_back(c);
  }
  const size_t arrow = eq.find("->");
  for (const std::string& text : split(eq.substr(0, arrow), ',')) e.operands.push_back(parse_term(text, equation));
  if (arrow == std::string::npos) return e;
  e.explicit_output = true;
  e.output = parse_term(eq.substr(arrow + 2), equation);
  for (char c : e.output.letters) {
    bool found = false;
    for (const EinsumTerm& t : e.operands) found = found || t.letters.find(c) != std::string::npos;
    if (!found) {
      throw Error("einsum equation " + quote(equation) + ": output label " + quote(std::string(1, c)) +
                  " appears in no operand");
    }
    if (std::count(e.output.letters.begin(), e.output.letters.end(), c) > 1) {
      throw Error("einsum equation " + quote(equation) + ": output label " + quote(std::string(1, c)) +
                  " appears twice");
    }
  }
  return e;
}

EinsumPlan plan_einsum(const std::string& equation, const std::vector<Dims>& operand_dims) {
  return plan_einsum(parse_einsum_equation(equation), operand_dims);
}

EinsumPlan plan_einsum(const EinsumEquation& e, const std::vector<Dims>& operand_dims) {
  const std::string& equation = e.text;
  const std::vector<EinsumTerm>& terms = e.operands;
  if (terms.size() != operand_dims.size()) {
    throw Error("einsum equation " + quote(equation) + " has " + std::to_string(terms.size()) +
                " operand terms but the layer has " + std::to_string(operand_dims.size()) + " inputs");
  }
  int ellipsis_rank = 0;
  std::vector<int> operand_ellipsis(terms.size(), 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    const int rank = operand_dims[k].rank();
    const int letters = static_cast<int>(terms[k].letters.size());
    const int extra = rank - letters;
    if (extra < 0 || (extra > 0 && terms[k].ellipsis_at < 0)) {
      throw Error("einsum equation " + quote(equation) + ": term " + quote(term_text(terms[k])) + " labels " +
                  std::to_string(letters) + " axes but operand " + std::to_string(k) + " has dims " +
                  operand_dims[k].to_string());
    }
    operand_ellipsis[k] = terms[k].ellipsis_at >= 0 ? extra : 0;
    ellipsis_rank = std::max(ellipsis_rank, operand_ellipsis[k]);
  }

  EinsumPlan plan;
  std::map<char, int> letter_label;
  std::map<char, int> letter_count;
  for (const EinsumTerm& t : terms) {
    for (char c : t.letters) {
      if (!letter_label.count(c)) {
        letter_label[c] = static_cast<int>(plan.label_sizes.size());
        plan.label_sizes.push_back(1);
      }
      ++letter_count[c];
    }
  }
  const int first_ellipsis_label = static_cast<int>(plan.label_sizes.size());
  plan.label_sizes.resize(plan.label_sizes.size() + static_cast<size_t>(ellipsis_rank), 1);

  // Label of each operand axis, and the extent of each label (1 broadcasts).
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> labels;
    const EinsumTerm& t = terms[k];
    for (int i = 0; i <= static_cast<int>(t.letters.size()); ++i) {
      if (i == t.ellipsis_at) {
        for (int e = 0; e < operand_ellipsis[k]; ++e)
          labels.push_back(first_ellipsis_label + ellipsis_rank - operand_ellipsis[k] + e);
      }
      if (i < static_cast<int>(t.letters.size())) labels.push_back(letter_label[t.letters[static_cast<size_t>(i)]]);
    }
    for (int axis = 0; axis < operand_dims[k].rank(); ++axis) {
      const int64_t extent = operand_dims[k][axis];
      int64_t& size = plan.label_sizes[static_cast<size_t>(labels[static_cast<size_t>(axis)])];
      if (extent != size && extent != 1 && size != 1) {
        throw Error("einsum equation " + quote(equation) + ": axis " + std::to_string(axis) + " of operand " +
                    std::to_string(k) + " (dims " + operand_dims[k].to_string() + ") has extent " +
                    std::to_string(extent) + " but its label has extent " + std::to_string(size) + " elsewhere");
      }
      if (extent != 1) size = extent;
    }
    plan.operand_labels.push_back(std::move(labels));
  }

  auto push_ellipsis = [&] {
    for (int e = 0; e < ellipsis_rank; ++e) plan.output_labels.push_back(first_ellipsis_label + e);
  };
  if (!e.explicit_output) {
    push_ellipsis();
    for (const auto& [c, n] : letter_count) {  // std::map: ASCII order
      if (n == 1) plan.output_labels.push_back(letter_label[c]);
    }
  } else {
    const EinsumTerm& out = e.output;  // its labels were checked by parse_einsum_equation
    for (int i = 0; i <= static_cast<int>(out.letters.size()); ++i) {
      if (i == out.ellipsis_at) push_ellipsis();
      if (i == static_cast<int>(out.letters.size())) break;
      plan.output_labels.push_back(letter_label.at(out.letters[static_cast<size_t>(i)]));
    }
  }
  if (plan.output_labels.size() > static_cast<size_t>(kMaxDims)) {
    throw Error("einsum equation " + quote(equation) + ": the output would have more than " + std::to_string(kMaxDims) +
                " dims");
  }
  for (int label : plan.output_labels) plan.output_dims.push_back(plan.label_sizes[static_cast<size_t>(label)]);
  return plan;
}

}  // namespace kiln
