// ONNX importers of the string ops: StringNormalizer (opset 10). The layer's extra size output
// (the number of words kept: a data-dependent size) is kiln's and not part of the ONNX node.
// Cast and CastLike to and from string are the ordinary Cast importers (ops_tensor.cpp,
// ops_loss.cpp).
#include <string>
#include <vector>

#include "src/ir/string_locale.h"
#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

void import_string_normalizer(NodeContext& ctx) {
  Attributes a;
  // Checked with the layer's other attributes when it is added (StringNormalizerParams).
  a.set("case_change_action", ctx.attr_string("case_change_action", "NONE"));
  a.set("is_case_sensitive", int64_t{ctx.attr_int("is_case_sensitive", 0) != 0 ? 1 : 0});
  const std::string locale = ctx.attr_string("locale", "");
  const std::string why = string_locale_problem(locale);
  if (!why.empty()) ctx.unsupported("attribute 'locale' " + quote(locale) + ": " + why);
  a.set("locale", locale);
  std::vector<std::string> stopwords;
  if (const onnx::AttributeProto* attr = ctx.find_attr("stopwords")) {
    if (attr->has_type() && attr->type() != onnx::AttributeProto::STRINGS) {
      ctx.fail("attribute 'stopwords' must be a list of strings");
    }
    stopwords.assign(attr->strings().begin(), attr->strings().end());
  }
  a.set("stopwords", stopwords);
  Layer* layer = ctx.add_layer(kLayerStringNormalizer, {ctx.required_input(0, "X")}, 2, std::move(a));
  ctx.set_output(0, layer->output(0));
}
KILN_REGISTER_ONNX_IMPORTER("StringNormalizer", import_string_normalizer,
                            {.min_opset = 10,
                             .types = "string",
                             .notes = "CPU only; data-dependent output size; Unicode simple case mapping of "
                                      "UTF-8 text, the same for every accepted locale (tr, az, lt are rejected)"});

}  // namespace
}  // namespace kiln
