// StringNormalizerParams decoding (see string_params.h).
#include "src/ir/string_params.h"

#include "src/core/text.h"
#include "src/ir/enum_names.h"
#include "src/ir/op_params.h"
#include "src/ir/string_locale.h"

namespace kiln {
namespace {

// The names of `case_change_action`, for decoding and for Network::add_string_normalizer.
const EnumNames<CaseChangeAction> kActions = {
    {"NONE", CaseChangeAction::kNone}, {"LOWER", CaseChangeAction::kLower}, {"UPPER", CaseChangeAction::kUpper}};

}  // namespace

const char* to_string(CaseChangeAction action) { return name_in(kActions, action); }

StringNormalizerParams StringNormalizerParams::decode(const Layer& layer) {
  const ParamReader r(layer);
  StringNormalizerParams p;
  p.case_change = r.get_enum<CaseChangeAction>("case_change_action", kActions);
  p.case_sensitive = r.get_bool("is_case_sensitive");
  p.stopwords = r.get_strings("stopwords");
  p.locale = r.get_string("locale");
  const std::string why = string_locale_problem(p.locale);
  if (!why.empty()) r.fail("locale", "is " + quote(p.locale) + ": " + why);
  return p;
}

}  // namespace kiln
