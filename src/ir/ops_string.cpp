// Schema and shape inference of the layers on string tensors (DataType::kString): StringNormalizer
// (ONNX StringNormalizer-10). Its output length depends on the input values (stopwords are
// removed), so, like NonZero, it has an extra int64 scalar output (the last one) into which the
// kernel writes that length: a data-dependent size, bounded by the input length. Semantics:
// docs/layers.md; the kernel: src/backends/cpu/string_cpu.cpp.
#include <algorithm>
#include <string>
#include <utility>

#include "src/core/text.h"
#include "src/ir/op_params.h"
#include "src/ir/op_schema.h"
#include "src/ir/string_params.h"

namespace kiln {
namespace {

void infer_string_normalizer(ShapeContext& ctx) {
  ctx.check(ctx.num_outputs() == 2,
            "has " + std::to_string(ctx.num_outputs()) + " outputs; StringNormalizer has the strings and their count");
  (void)params_of<StringNormalizerParams>(ctx.layer());  // attributes checked when decoded
  ctx.check(ctx.input_type(0) == DataType::kString,
            "input 0 is " + std::string(to_string(ctx.input_type(0))) + "; StringNormalizer takes a string tensor");
  const Dims& x = ctx.input_dims(0);
  ctx.check(x.rank() == 1 || (x.rank() == 2 && x[0] == 1),
            "input 0 has dims " + x.to_string() + "; StringNormalizer takes [C] or [1, C]");
  const int64_t c = x[x.rank() - 1];
  // At most C words survive; when none does the output is one empty string.
  const int64_t kept = ctx.data_dependent_extent(1, std::max<int64_t>(c, 1));
  ctx.set_output(0, DataType::kString, x.rank() == 1 ? Dims{kept} : Dims{1, kept});
  ctx.set_output(1, DataType::kInt64, Dims{});
}

AttrSpec attr(const std::string& name, AttrType type, AttrValue def, const std::string& doc) {
  return AttrSpec{name, type, std::move(def), false, doc};
}

}  // namespace

KILN_REGISTER_OP(OpSchema{
    kLayerStringNormalizer,
    1,
    1,
    2,
    {attr("case_change_action", AttrType::kString, std::string("NONE"),
          "NONE, LOWER or UPPER: the case change applied to the words kept"),
     attr("is_case_sensitive", AttrType::kInt, int64_t{0}, "1: stopwords match exactly, 0: after case folding"),
     attr("stopwords", AttrType::kStrings, std::vector<std::string>{}, "the words removed from the input"),
     attr("locale", AttrType::kString, std::string(),
          "\"\" or a locale name such as en_US (languages with special casing rules, "
          "e.g. tr, az, lt, are rejected)")},
    {},
    infer_string_normalizer,
    "ONNX StringNormalizer: removes the stopwords from a [C] or [1, C] string tensor, then "
    "changes the case of the words kept (Unicode simple case mappings of UTF-8 text); output "
    "0 is [C'] or [1, C'], one empty string when no word is kept; output 1 is C' (a "
    "data-dependent size).",
    /*takes_strings=*/true}
                     .with_params<StringNormalizerParams>());

}  // namespace kiln
