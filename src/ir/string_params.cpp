// StringNormalizerParams decoding (see string_params.h).
#include "src/ir/string_params.h"

#include "src/core/text.h"
#include "src/ir/op_params.h"
#include "src/ir/string_locale.h"

namespace kiln {

StringNormalizerParams StringNormalizerParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  StringNormalizerParams p;
  p.case_change = r.get_enum<CaseChangeAction>(
      "case_change_action",
      {{"NONE", CaseChangeAction::kNone}, {"LOWER", CaseChangeAction::kLower}, {"UPPER", CaseChangeAction::kUpper}});
  p.case_sensitive = r.get_bool("is_case_sensitive");
  p.stopwords = r.get_strings("stopwords");
  p.locale = r.get_string("locale");
  const std::string why = string_locale_problem(p.locale);
  if (!why.empty()) r.fail("locale", "is " + quote(p.locale) + ": " + why);
  return p;
}

}  // namespace kiln
