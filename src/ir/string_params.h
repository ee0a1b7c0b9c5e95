// The parameters of StringNormalizer (ONNX StringNormalizer-10): decoded once from a layer's
// attributes (StringNormalizerParams::decode, through the schema's with_params): the one place
// where `case_change_action` is checked (the ONNX importer passes it through, shape inference and
// the CPU kernel read the decoded value) and where `locale` is checked (string_locale.h's rule).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/network.h"

namespace kiln {

// `case_change` is the public CaseChangeAction (include/kiln/network.h).
const char* to_string(CaseChangeAction action);  // "NONE", "LOWER", "UPPER"

struct StringNormalizerParams {
  CaseChangeAction case_change = CaseChangeAction::kNone;  // case_change_action "NONE", "LOWER", "UPPER"
  bool case_sensitive = false;                             // is_case_sensitive: stopwords match exactly
  std::vector<std::string> stopwords;
  std::string locale;  // accepted by string_locale_problem
  // Throws kiln::Error naming the layer, the attribute and the allowed values (or the locale's problem).
  static StringNormalizerParams decode(const Layer& layer);
};

}  // namespace kiln
